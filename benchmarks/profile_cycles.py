"""Where an aggregation's time goes: a CPU profile of whole aggregations, part by part.

    .venv/bin/python benchmarks/profile_cycles.py --boxes n3=DIR/n3.parquet n20=DIR/n20.parquet \
        [--models generative paper] [--gold gold.csv] [--docs]

Each boxes table (for example the paper-scale subsamples of a workflow run,
``results/subsamples/n{n}/boxes.parquet``) is aggregated with each model as rule
``aggregate`` does (``clumpscout.model.aggregator.Aggregator`` on the file, config.yaml's
``aggregate:`` section, the workflow's seed, one numba thread), under cProfile with a
CPU-time clock, after a warm-up that loads numba's kernels (their cache load is not
counted). Reported per job, in CPU seconds:

* ``prepare`` (reading and indexing the table) and ``cycles`` (every working batch);
* within the cycles: ``clustering`` (the EM's facility-location solves with the costs they
  need; the generative model's merge step apart: ``merge``), ``estimate`` (the E and M
  steps: for the generative model ``posterior``, ``soft counts`` and ``M step``),
  ``risk`` (for the paper's model the §5.7 re-clustering, ``risk re-clustering``, and the
  coincidence term, ``coincidence``), ``record`` (retirement, labels and skill commits of
  a cycle), ``batch`` (building a batch's arrays) and the rest;
* from the run's report: cycles run (and those reused: same batch, same skills), EM
  iterations, subject visits per finished subject, the share of finished subjects that went
  stale, and box visits (the boxes clustered, summed over cycles, in millions).

cProfile adds its own overhead to Python calls (not to the numba kernels), so the parts are
shares, not stopwatch times; ``benchmarks/bench_dag_scale.py`` has the jobs' own times.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import logging
import os
import pstats
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_NUM_THREADS", "1")  # as rule aggregate (threads: 1)

import pandas as pd  # noqa: E402
import yaml  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

#: (row name, module file stem, function name): inclusive CPU seconds of these functions
_FUNCS = {
    "prepare": ("prepare", "prepare"),
    "cycles": ("aggregator", "_run_cycles"),
    "em_solve": ("em", "_solve"),
    "merge": ("em", "_merge_overlapping"),
    "estimate": ("em", "_estimate"),
    "posterior": ("em", "_posterior"),
    "soft counts": ("em", "_soft"),
    "M step": ("em", "_m_step"),
    "risk": ("em", "risk"),
    "coincidence_scan": ("risk", "coincidence_scan"),
    "coincidence_term": ("risk", "coincidence_term"),
    "record": ("aggregator", "_record_cycle"),
    "batch": ("em", "build"),
}


def _inclusive(stats: pstats.Stats, stem: str, name: str) -> float:
    """Inclusive seconds of every function ``name`` in a module file ``stem``.py (recursion
    counted once: cProfile's cumulative time)."""
    return sum(
        ct
        for (file, _line, fn), (_cc, _nc, _tt, ct, _callers) in stats.stats.items()
        if fn == name and Path(file).stem == stem
    )


def _edge(stats: pstats.Stats, callee: tuple[str, str], caller: tuple[str, str]) -> float:
    """Seconds of ``callee`` spent in calls from ``caller`` (both (file stem, name))."""
    total = 0.0
    for (file, _line, fn), (_cc, _nc, _tt, _ct, callers) in stats.stats.items():
        if fn != callee[1] or Path(file).stem != callee[0]:
            continue
        for (cfile, _cline, cfn), edge in callers.items():
            if cfn == caller[1] and Path(cfile).stem == caller[0]:
                total += edge[3]
    return total


def parts(stats: pstats.Stats) -> dict[str, float]:
    """The job's CPU seconds by part (see the module docstring)."""
    f = {k: _inclusive(stats, *v) for k, v in _FUNCS.items()}
    out = {"prepare": f["prepare"], "cycles": f["cycles"]}
    out["clustering"] = f["em_solve"] - f["merge"]
    out["merge"] = f["merge"]
    out["estimate"] = f["estimate"]
    out["posterior"] = f["posterior"]
    out["soft counts"] = f["soft counts"]
    out["M step"] = f["M step"]
    out["risk"] = f["risk"]
    out["risk re-clustering"] = _edge(stats, ("em", "_solve_costs"), ("em", "risk"))
    out["coincidence"] = f["coincidence_scan"] + f["coincidence_term"]
    out["record"] = f["record"]
    out["batch"] = f["batch"]
    top = ("clustering", "merge", "estimate", "risk", "record", "batch")
    out["rest of the cycles"] = f["cycles"] - sum(out[k] for k in top)
    return out


def visits(report: dict) -> dict[str, float]:
    """Visit statistics of a run (its report.json's cycles and status counts)."""
    cyc = report["cycles"]
    status = report["status_counts"]
    finished = status.get("retired", 0) + status.get("stale", 0)
    return {
        "cycles run": len(cyc),
        "cycles reused": sum(1 for c in cyc if not c.get("em")),
        "EM iterations": sum(len(c.get("em") or []) for c in cyc),
        "visits per subject": sum(c["subjects"] for c in cyc) / max(finished, 1),
        "stale %": 100.0 * status.get("stale", 0) / max(finished, 1),
        "box visits (M)": sum(c["boxes"] for c in cyc) / 1e6,
    }


def _seed(stage: str, master: int) -> int:
    """The workflow's stage seed (workflow/rules/common.smk: seed_for)."""
    return int(hashlib.sha256(f"{master}:{stage}".encode()).hexdigest()[:8], 16)


def profile_one(boxes: Path, model: str, gold=None) -> tuple[dict, dict, float]:
    """(parts, visits, fit CPU seconds) of one aggregation of ``boxes`` by ``model``."""
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    params = Params.from_dict({**cfg["aggregate"], "model": model})
    agg = Aggregator(params, seed=_seed("aggregate", cfg["seed"]), calibration=cfg["calibration"])
    prof = cProfile.Profile(time.process_time)
    c0 = time.process_time()
    prof.enable()
    agg.fit(str(boxes), gold=gold if model == "generative" else None)
    prof.disable()
    cpu = time.process_time() - c0
    return parts(pstats.Stats(prof)), visits(agg.report_), cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boxes", nargs="+", required=True, metavar="NAME=PATH",
                    help="boxes tables, each named (e.g. n3=results/subsamples/n3/boxes.parquet)")  # fmt: skip
    ap.add_argument("--models", nargs="+", default=["generative", "paper"])
    ap.add_argument("--gold", default=None, help="the generative model's gold standard")
    ap.add_argument("--docs", action="store_true", help="write the table to docs/benchmarks.md")
    ap.add_argument("--note", default="", help="a sentence for the docs: where the boxes come from")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    from clumpscout.data.gold import read_gold
    from clumpscout.numba_cache import warm_up

    logging.getLogger("clumpscout").setLevel(logging.WARNING)  # no cycle-by-cycle log
    warm_up(tuple(args.models))  # numba's kernels loaded before any profile
    gold = read_gold(args.gold) if args.gold else None
    rows = []
    for model in args.models:
        for item in args.boxes:
            name, path = item.split("=", 1)
            part, vis, cpu = profile_one(Path(path), model, gold)
            rows.append({"model": model, "boxes": name, "fit CPU s": cpu, **part, **vis})
            print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    from benchmarks.docs_table import markdown_table

    df.index = df["model"] + " " + df["boxes"]
    table = df.drop(columns=["model", "boxes"]).T.rename_axis("CPU s, or count").reset_index()
    text = markdown_table(table, floatfmt="{:,.2f}")
    print(text)
    if args.docs:
        from benchmarks.docs_table import write_section

        body = (
            "CPU seconds of one aggregation by part (cProfile, CPU clock, one numba thread; "
            "the parts of the cycles are inclusive and do not overlap: clustering, merge, "
            "estimate, risk, record, batch and the rest add up to the cycles; posterior, soft "
            "counts and M step are within estimate, re-clustering and coincidence within "
            "risk), and the run's visit statistics. " + args.note + "\n\n" + text
        )
        write_section("cycle-profile", "Where an aggregation's time goes", body, command=sys.argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
