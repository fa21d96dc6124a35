"""``clumpscout aggregate``: consensus labels from volunteers' boxes (paper §4-5, Appendix A).

This module is the command line, the hyper-parameters (:class:`Params`, config.yaml's
``aggregate:`` section) and :func:`load_config`; the work is done by

* :mod:`clumpscout.model.prepare`: reading, validating and indexing the boxes table;
* :mod:`clumpscout.model.em`: the EM over working batches, with both models' engines;
* :mod:`clumpscout.model.aggregator`: the estimator :class:`~clumpscout.model.aggregator.Aggregator`
  (cycles, retirement, output tables; its docstring describes the outputs).

Two models share the working batches, the EM loop, risk and retirement:

* ``model: generative`` (default): a well-posed generative likelihood
  (:mod:`clumpscout.model.generative`; docs/decisions.md#generative-model): false boxes are a
  Poisson count per classification thrown over the whole image, true boxes scatter around
  their object with a 2-D density, so that boxes of independent volunteers coinciding are
  strong evidence; population parameters are learned from the data (empirical Bayes).
* ``model: paper``: the paper's equations as published (eq. anno_model, eq. joint_model),
  kept for the reproduction, with the authors' effective EM stopping rule by default
  (``em_stop: paper_code``; docs/decisions.md#paper-model explains why this likelihood runs
  away to "every box is false" with a converged EM on noisy data).

``docs/model.md`` indexes where each equation of both models is implemented.

Python API (estimator style)::

    from clumpscout.model.aggregate import Params
    from clumpscout.model.aggregator import Aggregator
    agg = Aggregator(Params(), seed=1).fit(boxes_df)
    agg.labels_, agg.subjects_, agg.volunteers_, agg.assignments_, agg.loglik_history_
    agg.write("out/")

Command line::

    clumpscout aggregate --boxes boxes.parquet --out DIR [--config FILE] [--seed N] [--per-tool]

Input: the boxes table of ``clumpscout boxes``: one row per click (x1, y1, x2, y2 in
subject pixels), or one coordinate-less row (NaN) for a classification that marked nothing.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from clumpscout.errors import InputError
from clumpscout.logs import timed

#: bounds of the numeric hyper-parameters (name: (low, high, low open, high open)); the same
#: bounds as workflow/schemas/config.schema.yaml, so ``clumpscout aggregate --config`` rejects
#: what the workflow rejects.
_BOUNDS: dict[str, tuple[float, float | None, bool, bool]] = {
    "p0_fp": (0.0, 1.0, True, True),
    "p0_fn": (0.0, 1.0, True, True),
    "n_beta_fp": (0.0, None, False, False),
    "n_beta_fn": (0.0, None, False, False),
    "sigma2_0_S": (0.0, None, True, False),
    "n_chi_S": (0.0, None, False, False),
    "sigma2_0_V": (0.0, None, True, False),
    "n_chi_V": (0.0, None, False, False),
    "f_V": (0.0, 1.0, False, False),
    "d_max": (0.0, 1.0, False, False),
    "alpha_fp": (0.0, None, False, False),
    "alpha_fn": (0.0, None, False, False),
    "alpha_sigma": (0.0, None, False, False),
    "delta": (0.0, 1.0, True, False),
    "n_fp_max": (0.0, None, False, False),
    "n_fn_max": (0.0, None, False, False),
    "n_sigma_max": (0.0, None, False, False),
    "tau": (0.0, None, False, False),
    "max_cycles": (1, None, False, False),
    "min_cluster_size": (1, None, False, False),
    "em_max_iter": (1, None, False, False),
    "em_rtol": (0.0, None, False, False),
    "min_batch_classifications": (0, None, False, False),
    "min_volunteers_batch": (1, None, False, False),
    "min_volunteers_empty": (1, None, False, False),
    "eb_weight": (0.0, None, False, False),
}


@dataclass(frozen=True)
class Params:
    """Hyper-parameters; field names are the keys of config.yaml's ``aggregate:`` section.

    Defaults: Table prior_param_values and Table subject_retirement_params
    (docs/decisions.md#hyper-parameters); the model choices are explained in
    docs/decisions.md (#generative-model, #em-stopping, #distance-likelihood, #label-box,
    #batch-size, #final-classifications, #weak-objects).
    """

    # Table prior_param_values
    p0_fp: float = 0.1
    p0_fn: float = 0.1
    n_beta_fp: float = 500.0
    n_beta_fn: float = 50.0
    sigma2_0_S: float = 0.1
    n_chi_S: float = 10.0
    sigma2_0_V: float = 0.1
    n_chi_V: float = 10.0
    f_V: float = 0.1
    d_max: float = 0.9
    # Table subject_retirement_params
    alpha_fp: float = 1.0
    alpha_fn: float = 1.0
    alpha_sigma: float = 2.0
    delta: float = 0.5
    n_fp_max: float = 1.0
    n_fn_max: float = 0.3
    n_sigma_max: float = 3.0
    tau: float = 5.0
    max_cycles: int = 10
    # which likelihood: ``generative`` (the well-posed default, clumpscout.model.generative) or
    # ``paper`` (eq. anno_model as published, kept for the reproduction)
    model: str = "generative"
    # EM stopping rule: converge (keep the best state) | paper_code (the authors' rule:
    # stop at the first iteration whose log-likelihood does not fall, keep the last state) |
    # auto (converge for generative, paper_code for paper)
    em_stop: str = "auto"
    # model choices (decisions.md#distance-likelihood, #label-box, #em-stopping, #batch-size)
    distance_likelihood: str = "d"
    merge: str = "mean"
    min_cluster_size: int = 2
    em_max_iter: int = 10
    em_rtol: float = 1e-6
    min_batch_classifications: int = 25000
    stale_updates_skills: bool = False
    min_volunteers_batch: int = 3
    min_volunteers_empty: int = 5
    final_classifications: bool = True  # see clumpscout.model.retirement (our decision)
    # generative model: weight (pseudo-trials) of the table values above as hyper-priors of the
    # population means (p0_fn, p0_fp read as false boxes per classification, sigma2_0_V)
    eb_weight: float = 10.0
    # generative model: a second class of real objects that volunteers mark less often
    # (faint features, partly hidden animals), with its own rate and detection probability
    weak_objects: bool = True

    def __post_init__(self):
        if self.model not in ("generative", "paper"):
            raise ValueError(f"model must be generative or paper, not {self.model!r}")
        if self.em_stop not in ("auto", "converge", "paper_code"):
            raise ValueError(f"em_stop must be auto, converge or paper_code, not {self.em_stop!r}")
        if self.distance_likelihood not in ("d", "d_squared"):
            raise ValueError(
                f"distance_likelihood must be d or d_squared, not {self.distance_likelihood!r}"
            )
        if self.merge not in ("mean", "inverse_variance"):
            raise ValueError(f"merge must be mean or inverse_variance, not {self.merge!r}")
        for name, (lo, hi, lo_open, hi_open) in _BOUNDS.items():
            v = getattr(self, name)
            bad = not math.isfinite(v) or (v <= lo if lo_open else v < lo)
            if hi is not None:
                bad = bad or (v >= hi if hi_open else v > hi)
            if bad:
                interval = (
                    ("(" if lo_open else "[")
                    + f"{lo}, "
                    + (f"{hi}" + (")" if hi_open else "]") if hi is not None else "inf)")
                )
                raise ValueError(f"{name} = {v} is out of range: it must be in {interval}")

    @classmethod
    def from_dict(cls, d: dict | None, path=None) -> Params:
        """Params from a config ``aggregate:`` section; unknown keys are an error."""
        d = dict(d or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(d) - set(known))
        if unknown:
            raise InputError(f"unknown aggregate setting(s): {', '.join(unknown)}", path=path)
        kw = {}
        for k, v in d.items():
            t = known[k].type
            if t in ("float", float):
                kw[k] = float(v)
            elif t in ("int", int):
                kw[k] = int(v)
            elif t in ("bool", bool):
                kw[k] = bool(v)
            else:
                kw[k] = v
        try:
            return cls(**kw)
        except ValueError as exc:
            raise InputError(str(exc), path=path) from None

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def em_stop_rule(self) -> str:
        """The effective EM stopping rule (``auto`` resolved by the model)."""
        if self.em_stop != "auto":
            return self.em_stop
        return "paper_code" if self.model == "paper" else "converge"


# ----------------------------------------------------------------------- CLI


def load_config(path) -> tuple[Params, int | None]:
    """Params (and the master seed, if present) from a YAML file.

    The file is either a whole config.yaml (its ``aggregate:`` section is used)
    or just the ``aggregate`` settings.
    """
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"cannot read config ({exc})", path=path) from None
    if not isinstance(data, dict):
        raise InputError("config must be a mapping", path=path)
    seed = data.get("seed") if isinstance(data.get("seed"), int) else None
    if "aggregate" in data:
        section = data["aggregate"] or {}
    elif any(isinstance(v, dict) for v in data.values()):
        section = {}  # a workflow config without an aggregate section: the defaults
    else:  # a flat file of aggregate settings (and perhaps the seed): every key is checked
        section = {k: v for k, v in data.items() if k != "seed"}
    return Params.from_dict(section, path=path), seed


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--boxes", required=True, help="boxes.parquet from `clumpscout boxes`")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--config", default=None, help="YAML with an `aggregate:` section")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: config seed or 0)")
    parser.add_argument(
        "--per-tool",
        action="store_true",
        default=None,
        help="aggregate each tool's boxes separately; labels carry the tool column "
        "(default: the config's aggregate.per_tool, else off)",
    )


def run(args: argparse.Namespace) -> int:
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.prepare import read_boxes

    params, cfg_seed = (Params(), None) if args.config is None else load_config(args.config)
    seed = args.seed if args.seed is not None else (cfg_seed or 0)
    boxes = read_boxes(args.boxes)
    agg = Aggregator(params, seed, per_tool=args.per_tool).fit(boxes, path=args.boxes)
    with timed(f"writing {args.out}"):
        agg.write(args.out)
    return 0
