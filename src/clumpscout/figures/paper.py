"""The paper's figures (§6 and the appendix): workflow files in, one figure out.

:func:`build` makes one figure of :mod:`clumpscout.figures.registry` with its builder in
the section modules (:mod:`~clumpscout.figures.clumps` §6.2,
:mod:`~clumpscout.figures.experts` §6.3, :mod:`~clumpscout.figures.volunteers` §6.4,
:mod:`~clumpscout.figures.risk` §6.5, :mod:`~clumpscout.figures.examples`,
:mod:`~clumpscout.figures.meanshift` the appendix, :mod:`~clumpscout.figures.truth` what
the paper could not measure). It is what the Snakemake adapter ``scripts/figures.py`` and
the ``clumpscout figures`` command (:func:`run`) call.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clumpscout.config import add_setting, resolve
from clumpscout.errors import InputError
from clumpscout.figures import (
    clumps,
    examples,
    experts,
    gold,
    meanshift,
    registry,
    risk,
    truth,
    volunteers,
)
from clumpscout.figures.common import PAPER_MODEL, output_paths, reference_n

# used by benchmarks/calibration.py
from clumpscout.figures.experts import empirical_matches  # noqa: F401
from clumpscout.figures.risk import clumps_per_subject  # noqa: F401
from clumpscout.io import write_json
from clumpscout.logs import timed

log = logging.getLogger(__name__)

_MODULES = {
    m.__name__.rsplit(".", 1)[-1]: m
    for m in (clumps, examples, experts, gold, meanshift, risk, truth, volunteers)
}
Builder = Callable[[Mapping[str, Any], Path, Mapping[str, Any]], dict]


def builder(name: str) -> Builder:
    """The builder of registered figure ``name`` (``<module>.<function>`` in the registry)."""
    mod, func = registry.figure(name).builder.split(".")
    return getattr(_MODULES[mod], func)


#: figure name (= output stem in results/figures) -> builder(inputs, stem, params)
FIGURES: dict[str, Builder] = {f.name: builder(f.name) for f in registry.FIGURES}


def build(
    name: str, inputs: Mapping[str, Any], stem: str | Path, params: Mapping[str, Any]
) -> dict:
    """Make figure ``name`` from the workflow files in ``inputs``; write
    ``<stem>.png``, ``<stem>.pdf`` and the figure's numbers as ``<stem>.json``.

    ``params``: ``ns`` (the subsample sizes, aligned with per-n input lists),
    ``figures`` (config section), ``seed`` (example picks), ``reference``, ``wording``
    (``clump_scout`` / ``generic``, :func:`clumpscout.figures.registry.wording`)."""
    if name not in FIGURES:
        raise InputError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    with timed(f"figure {name}", log):
        stats = FIGURES[name](inputs, Path(stem), params)
    wording = params.get("wording") or "clump_scout"
    if wording != "clump_scout":  # the report then shows no paper values beside ours
        stats = {**stats, "wording": wording}
    write_json({"figure": name, **stats}, output_paths(stem)["png"].with_suffix(".json"))
    return stats


# ------------------------------------------------------------------------------ CLI


def results_inputs(
    results: Path, ns: list[int], nr: int, n_base: int | None = None
) -> dict[str, dict[str, Any]]:
    """The inputs of every figure in a results folder laid out as the workflow does
    (the paper's figures from the paper model, results/aggregate/paper/n{n}/...). The
    method comparison reads the references whose side-by-side summary exists."""
    base = results / "baseline"
    have = [r for r in ("truth", "experts") if (base / f"{r}_summary.csv").exists()]
    images = [str(p) for p in sorted(results.glob("images/**/cutouts.parquet"))]
    out = {}
    for fig in registry.FIGURES:
        refs = have if fig.needs == "any" else ("truth", "experts", "gold")
        if not registry.available(fig, refs):
            refs = ("truth", "experts", "gold")  # reported missing by run()
        paths = registry.input_paths(
            fig,
            results=str(results),
            ns=ns,
            n_ref=nr,
            n_base=nr if n_base is None else n_base,
            model=PAPER_MODEL,
            images=images,
            have=refs,
        )
        out[fig.name] = {
            k: [Path(p) for p in v] if isinstance(v, list) else Path(v) for k, v in paths.items()
        }
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True, help="results folder of a workflow run")
    parser.add_argument("--out", required=True, help="folder for the PNG / PDF / JSON files")
    add_setting(parser, "subsample.n", required=True, note="here those of the run")
    parser.add_argument(
        "--config", default=None, help="config.yaml (its figures and baseline sections, seed)"
    )
    parser.add_argument(
        "--only", nargs="+", choices=sorted(FIGURES), metavar="NAME", help="only these figures"
    )
    add_setting(parser, "seed", from_config=True, note="here the seed that picks example subjects")


def run(args: argparse.Namespace) -> int:
    """Build every figure whose inputs exist; say which were skipped and why."""
    import numpy as np
    import yaml

    cfg: dict[str, Any] = {}
    full: dict[str, Any] = {}
    base_n = None
    project = "clump_scout"
    if args.config:
        with open(args.config) as fh:
            full = yaml.safe_load(fh) or {}
        cfg = dict(full.get("figures") or {})
        base_n = (full.get("baseline") or {}).get("n")
        kind = (full.get("simulate") or {}).get("kind")
        project = registry.wording(full.get("source", "simulate"), kind, cfg.get("project"))
    resolve(args, full)
    ns = sorted(args.n)
    nr = reference_n(ns, cfg.get("n_ref"))
    params = {"ns": ns, "figures": cfg, "seed": args.seed, "wording": project}
    out = Path(args.out)
    skipped = 0
    for name, inputs in results_inputs(Path(args.results), ns, nr, base_n).items():
        if args.only and name not in args.only:
            continue
        files = [p for k, v in inputs.items() if k != "images" for p in np.atleast_1d(v)]
        missing = [str(p) for p in files if not Path(p).exists()]
        if missing:
            log.warning("skipping %s: %d input(s) missing, e.g. %s", name, len(missing), missing[0])
            skipped += 1
            continue
        build(name, inputs, out / name, params | {"reference": registry.figure(name).reference})
    log.info("figures written to %s (%d skipped for missing inputs)", out, skipped)
    return 0
