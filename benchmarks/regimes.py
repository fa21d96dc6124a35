"""The regime grid: every consensus method on every simulated noise regime, scored on the truth.

    .venv/bin/python benchmarks/regimes.py --subjects 1000 --out results/regimes \
        [--regimes clean,paper,noisy,spammers,counting] [--n 20] [--seed S] [--old-vs-new]
        [--gold-fraction 0.2]

For each regime (``resources/regimes/{regime}.yaml``, merged over config.yaml like
``snakemake --configfile``; ``paper`` falls back to config.yaml alone while the file is
absent) the script runs the workflow's Python API, stage by stage:

1. ``clumpscout.simulation.universe.simulate_universe`` (``simulate.n_subjects`` = ``--subjects``);
2. ``clumpscout.data.zooniverse.extract_clicks`` (the ``extract:`` section) →
   ``clumpscout.data.subjects.build_subjects`` (as the workflow: ``source: simulate`` reads
   galaxies.csv as the catalogue, except with ``simulate.kind: counting``, whose
   galaxies.csv is no catalogue; then, as with ``source: export``, the subjects come from
   the subject export with ``export.box_side``) → ``clumpscout.data.boxes.make_boxes`` →
   ``clumpscout.data.subsample.draw_subsample`` to ``n`` classifications per subject;
3. the gold standard (docs/decisions.md#gold-standard): the simulated experts mark every
   subject; their clicks become a marks table (``clumpscout.data.gold.build_gold``), of
   which a seeded random ``--gold-fraction`` (0.2) of the subjects is the gold standard;
   every score below is on the other subjects (held out), where the experts' own marks
   are a third truth. ``--gold-source truth`` replaces the experts' marks of the same gold
   subjects by the counted objects themselves (what flawless experts would mark): the
   calibration's ceiling, which separates what the model can learn from what the experts
   miss;
4. the methods, all on the same subsample:

   - ``generative``: ``Aggregator(Params(model="generative"), seed).fit(boxes, gold=gold)``
     with the regime's ``aggregate:`` and ``calibration:`` sections; from the same fit,
     ``generative_no_gold`` (the default map without gold) and ``generative_p_empty`` (the
     model's own p_fp, what p_fp was before the calibration);
   - ``paper``: the paper's model (no gold: the reproduction preset);
   - ``single_linkage`` (cut ``baseline.single_linkage_cut`` FWHM) and ``dbscan`` (eps
     ``baseline.dbscan_eps_factor`` × the box side): ``min_volunteers`` and ``min_samples``
     in 2..20 tuned on the gold subjects (largest √(C² + P²) against the gold marks; ties:
     the smaller value);
   - ``meanshift``: ``clumpscout.evaluation.baseline.meanshift_labels`` (bandwidth = the
     subject's FWHM).

Seeds: ``--seed S`` is the master seed (default: the regime config's ``seed``); the
simulate, subsample and aggregate stages take the workflow's stage seeds
(``clumpscout.simulation.universe.stage_seed(S, stage)``), so a run is deterministic.

Scoring (:mod:`benchmarks.truth_scores` on top of :mod:`clumpscout.evaluation.compare`),
on the held-out subjects: a label is true when its box contains the centre of a counted
object of its subject. ``regimes.csv`` scores against what the project counts (the true
clumps; in ``counting`` every object), ``regimes_any_object.csv`` against any real object
(clumps, faint features, foreground stars, bulges) and ``regimes_experts.csv`` against the
experts' marks of the held-out subjects (what a project can check: the calibration learns
what its experts count, and the simulated experts miss some true clumps). Columns:

- ``purity``, ``completeness``, ``p_star``: for the methods with a p_fp at the **optimal**
  threshold p*, the one maximising √(C² + P²) over 101 thresholds in [0, 1] (a label is kept
  when p_fp ≤ p*); for the baselines at their own settings (``p_star`` empty);
- ``purity_05``, ``completeness_05``: the same for the labels with p_fp < 0.5;
- ``ece``: expected calibration error of p_fp (10 bins) against the table's truth;
  ``ece_any``: against any real object; empty for the baselines;
- ``labels``: all labels (p* = 1); ``true_objects``: real objects of the scored subjects;
- ``sum_n_fp`` / ``sum_n_fn``: Σ N_fp and Σ N_fn of subjects.parquet over the held-out
  subjects with a finite N_fn; ``realised_fp``: labels (p* = 1) that contain no real
  object's centre; ``realised_fn``: real objects inside no label (for the models, of the
  subjects with a finite N_fn, like Σ N_fn);
- ``count_mae``: mean over subjects of |labels with p_fp < 0.5 (all labels for the
  baselines) − real objects|; ``gold_subjects``: the gold standard's size.

``regimes_acceptance.csv`` (one row per regime, truth and model view) holds the acceptance
checks of the gold-standard calibration, each as a value and an ``ok_*`` flag:
``ece`` ≤ 0.05; ``purity_05_margin`` and ``completeness_05_margin`` (against the better
gold-tuned baseline) ≥ −0.01; ``curve_margin`` ≥ −0.01 (the model's best completeness
at a threshold with at least a baseline's purity, minus that baseline's completeness, the
worse of the two baselines: whether the model's purity-completeness curve passes the
baselines' operating points, whatever threshold each sits at); ``count_mae`` ≤ the best
gold-tuned baseline's; Σ N_fp and
Σ N_fn within 20 % of the realised numbers; ``count_mae`` no worse than the model's own
p_fp (``count_mae_p_empty``). ``regimes_report.json`` adds per regime the gold standard,
the calibration report (held-out agreement with the experts), the tuned baseline settings,
and ``gold_vs_truth``: how well the experts' own marks agree with the counted objects (the
calibration learns what the experts count, so this bounds its agreement with the truth).

**Gold draws** (``--gold-draws K``, default 20; 0: off). Every number above comes from one
random gold standard, and a gold standard of 200 subjects is a small sample: which 200 sets
how well the map fits the other 800. So the generative model's fit (which does not depend on
the gold: the calibration maps its labels afterwards) is calibrated again on K further
random draws of the gold subjects (``stage_seed(S, "gold-draw-r")``; the same draws in
every regime, as the main draw is, because the regimes share their subject ids and seeds),
each scored on its own held-out subjects against the counted objects and the experts'
marks, with the baselines' settings tuned again on each draw (from labels computed once
per setting: a baseline labels each subject on its own). ``regimes_gold_draws.csv`` holds
one row per regime, truth, draw and method (``draw`` 0 is the main draw);
``regimes_gold_draws_summary.csv`` per regime and truth the median and the 10th and 90th
percentiles of the model's ECE and the share of draws that pass each acceptance check.

``--old-vs-new`` adds ``paper_old``: the ``paper`` regime with the simulator's settings
before its calibration on the evidence (:data:`OLD_SETTINGS`: faint features in every
galaxy whatever its resolution, few of them but marked by most volunteers, more spurious
clicks and wider scatter; docs/calibration.md), next to ``paper``.

Outputs in ``--out``: regimes.csv, regimes_any_object.csv, regimes_experts.csv,
regimes_acceptance.csv, regimes_gold_draws.csv and regimes_gold_draws_summary.csv (with gold draws),
regimes_curves.csv (the models' C/P curves and the baselines' points), regimes.png and
regimes_any_object.png (purity vs completeness, a panel per regime), regimes_report.json
(seeds, gold, tuned baselines, per-stage timings, realised universe totals), regimes.log;
the simulated universes under ``work/`` (deleted unless ``--keep-work``).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

log = logging.getLogger("clumpscout.regimes")

REGIMES = ("clean", "paper", "noisy", "spammers", "counting")
METHODS = (
    "generative",
    "generative_no_gold",
    "generative_p_empty",
    "paper",
    "single_linkage",
    "dbscan",
    "meanshift",
)
MODELS = ("generative", "paper")
#: methods with a p_fp (a curve over thresholds): the default model's three views and the paper's
SCORED_MODELS = ("generative", "generative_no_gold", "generative_p_empty", "paper")
COLUMNS = [
    "regime",
    "method",
    "purity",
    "completeness",
    "p_star",
    "ece",
    "labels",
    "true_objects",
    "sum_n_fp",
    "realised_fp",
    "sum_n_fn",
    "realised_fn",
    "count_mae",
    "purity_05",
    "completeness_05",
    "ece_any",
    "gold_subjects",
]
TRUTHS = ("clumps", "any_object", "experts")
#: the simulator's settings before its calibration on the evidence (regime ``paper_old``)
OLD_SETTINGS = {
    "faint_follow_resolution": False,
    "faint_radius_scale": 0.3,
    "faint_features_mean": 0.5,
    "faint_boost_mean": 2.8,
    "faint_boost_shape": 2.0,
    "spurious_median": 0.05,
    "threshold_sd": 0.5,
    "scatter_median": 0.12,
    "clumps_extra_mean": 1.6,
    "p_unusual_hit_mean": 0.6,
    "p_unusual_false_mean": 0.08,
    "expert_threshold": -0.5,
    "activity_sigma": 0.65,
}
#: the baselines' settings tried on the gold subjects: 2 .. 20 volunteers (n = 20)
MIN_VOLUNTEERS = range(2, 21)
#: DBSCAN settings when the config's baseline section has none
DBSCAN = {"eps_factor": 0.5, "min_samples": 3}
MARKED_FRACTION = 0.3


# ---------------------------------------------------------------- configs
def _deep_update(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_update(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _load_yaml(path: Path) -> dict:
    with open(path) as fh:
        return yaml.safe_load(fh) or {}


def regime_path(name: str, root: Path = REPO) -> Path:
    return root / "resources" / "regimes" / f"{name}.yaml"


def available_regimes(root: Path = REPO) -> list[str]:
    """The grid's regimes whose config exists (``paper`` always: config.yaml)."""
    return [r for r in REGIMES if r == "paper" or regime_path(r, root).exists()]


def regime_config(name: str, root: Path = REPO) -> dict:
    """The full config of a regime: its YAML merged over config.yaml (``paper_old``: see
    :data:`OLD_SETTINGS`)."""
    base = _load_yaml(root / "config.yaml")
    if name == "paper_old":
        cfg = regime_config("paper", root)
        cfg["simulate"] = {**cfg.get("simulate", {}), **OLD_SETTINGS}
        return cfg
    path = regime_path(name, root)
    if path.exists():
        return _deep_update(base, _load_yaml(path))
    if name == "paper":
        log.warning("%s does not exist yet: regime 'paper' = config.yaml", path)
        return base
    raise FileNotFoundError(f"no regime config {path}")


def has_catalogue(cfg: dict) -> bool:
    """Whether the workflow reads the universe's galaxies.csv as the galaxy catalogue
    (workflow/rules/common.smk): with ``source: simulate``, unless ``simulate.kind`` is
    counting (its galaxies.csv holds no galaxies). Without one, every subject gets the box
    side ``export.box_side``."""
    kind = (cfg.get("simulate") or {}).get("kind", "galaxy")
    return cfg.get("source") == "simulate" and kind != "counting"


# ---------------------------------------------------------------- stages
class Timer:
    """Per-stage wall times of one regime, logged as they finish."""

    def __init__(self, regime: str):
        self.regime = regime
        self.seconds: dict[str, float] = {}

    def __call__(self, stage: str):
        timer = self

        class _Ctx:
            def __enter__(self):
                log.info("[%s] %s ...", timer.regime, stage)
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                dt = time.perf_counter() - self.t0
                timer.seconds[stage] = timer.seconds.get(stage, 0.0) + dt
                log.info("[%s] %s done in %.1f s", timer.regime, stage, dt)

        return _Ctx()


def extract_with_config(cfg: dict, classifications: Path, universe: Path):
    """``extract_clicks`` of an export of the universe with the config's ``extract`` and
    ``export`` settings, as the workflow's extract rules call it."""
    from clumpscout.data.zooniverse import extract_clicks

    ex = dict(cfg.get("extract") or {})
    export = dict(cfg.get("export") or {})
    return extract_clicks(
        classifications,
        universe / "subjects_export.csv",
        workflow_id=export.get("workflow_id"),
        workflow_version=export.get("workflow_version"),
        clump_task=ex.get("clump_task", "T1"),
        unusual_tools=ex.get("unusual_tools", [1]),
        tools=ex.get("tools"),
        missing_subjects=ex.get("missing_subjects", "keep"),
    )


def build_subsample(cfg: dict, master_seed: int, n: int, universe: Path, timer: Timer, tag: str):
    """Simulate a universe and run extract → subjects → boxes → subsample on it.

    Returns ``(boxes_n, simulate_report)``.
    """
    from clumpscout.data.boxes import make_boxes
    from clumpscout.data.subjects import build_subjects
    from clumpscout.data.subsample import draw_subsample
    from clumpscout.simulation.universe import simulate_universe, stage_seed

    with timer(f"{tag}simulate"):
        report = simulate_universe(
            dict(cfg.get("simulate") or {}), stage_seed(master_seed, "simulate"), universe
        )
    export = dict(cfg.get("export") or {})
    with timer(f"{tag}extract, subjects, boxes, subsample"):
        clicks, _ = extract_with_config(cfg, universe / "classifications.csv", universe)
        catalogue = universe / "galaxies.csv" if has_catalogue(cfg) else None
        subjects = build_subjects(
            catalogue=catalogue,
            subjects_export=universe / "subjects_export.csv",
            cfg=dict(cfg.get("subjects") or {}),
            box_side=export.get("box_side"),
        )
        boxes = make_boxes(clicks, subjects)
        nested = bool((cfg.get("subsample") or {}).get("nested", True))
        boxes_n, _ = draw_subsample(boxes, n, stage_seed(master_seed, "subsample"), nested)
    return boxes_n, report


def truths(universe: Path) -> dict[str, pd.DataFrame]:
    from clumpscout.simulation.truth import truth_tables

    clumps, objects = truth_tables(universe)
    return {"clumps": clumps, "any_object": objects}


def _hypot(row: dict) -> float:
    c, p = row["completeness"], row["purity"]
    return math.hypot(c, p) if np.isfinite(c) and np.isfinite(p) else float("nan")


def _gold_points(gold) -> pd.DataFrame:
    """The gold marks as a points table (subject_id, x, y) for containment scoring."""
    return gold.marks[["subject_id", "x", "y"]]


def tune_on_gold(boxes: pd.DataFrame, gold, cfg: dict) -> tuple[dict, list]:
    """single linkage's ``min_volunteers`` and DBSCAN's ``min_samples`` in
    :data:`MIN_VOLUNTEERS`, each maximising √(C² + P²) against the gold marks on the gold
    subjects (ties: the smaller)."""
    gold_boxes = boxes.loc[boxes["subject_id"].isin(gold.subjects)]
    points = _gold_points(gold)
    tuned, trials = {}, []
    for method, by_setting in baseline_settings_labels(gold_boxes, cfg).items():
        tuned[method], hyp = _tuned(by_setting, points, gold.subjects)
        trials += [{"method": method, "setting": v, "hypot": h} for v, h in hyp.items()]
    return tuned, trials


def _baseline_labels(boxes: pd.DataFrame, cfg: dict, tuned: dict, timer: Timer):
    from clumpscout.evaluation import baseline

    bl = dict(cfg.get("baseline") or {})
    cut = float(bl.get("single_linkage_cut", 1.0))
    out: dict[str, pd.DataFrame] = {}
    with timer("single linkage"):
        out["single_linkage"] = baseline.single_linkage_labels(
            boxes, cut=cut, min_volunteers=tuned["single_linkage"]
        )[0]
    with timer("dbscan"):
        out["dbscan"] = baseline.dbscan_labels(
            boxes,
            eps_factor=float(bl.get("dbscan_eps_factor", DBSCAN["eps_factor"])),
            min_samples=tuned["dbscan"],
        )[0]
    with timer("meanshift"):
        bw = bl.get("bandwidth", "fwhm")
        bw = bw if bw == "fwhm" else float(bw)
        ms = baseline.meanshift_labels(boxes, bandwidth=bw, impl=bl.get("meanshift_impl", "numba"))
        out["meanshift"] = ms[0]
    return out


def expert_gold(cfg: dict, universe: Path, boxes: pd.DataFrame):
    """The gold standard of a simulated universe: its experts' marks (clumpscout.data.gold)."""
    from clumpscout.data.gold import build_gold, gold_from_table

    clicks, _ = extract_with_config(cfg, universe / "expert_classifications.csv", universe)
    majority = float((cfg.get("calibration") or {}).get("expert_majority", 0.0))
    return gold_from_table(build_gold(clicks, boxes, majority))


def truth_gold(truth: pd.DataFrame, subjects: np.ndarray):
    """A flawless experts' gold standard: the counted objects of ``subjects`` as marks, a
    row with empty coordinates for each of them without one."""
    from clumpscout.data.gold import gold_from_table

    marks = truth.loc[truth["subject_id"].isin(subjects), ["subject_id", "x", "y"]]
    empty = np.setdiff1d(subjects, marks["subject_id"].to_numpy())
    table = pd.concat(
        [marks, pd.DataFrame({"subject_id": empty, "x": np.nan, "y": np.nan})], ignore_index=True
    )
    return gold_from_table(table.sort_values(["subject_id", "x", "y"], ignore_index=True))


def gold_vs_truth(gold, truth: pd.DataFrame, boxes: pd.DataFrame) -> dict:
    """How well the experts' marks agree with the counted objects on the gold subjects: the
    share of expert objects with a counted object within half the box side (purity) and
    the share of counted objects with an expert object that near (completeness). The
    calibration learns what the experts count, so this bounds its agreement with the truth."""
    from clumpscout.data.gold import box_sides

    side = box_sides(boxes)
    tr = truth.loc[truth["subject_id"].isin(gold.subjects)]
    pairs = tr.merge(gold.marks[["subject_id", "x", "y"]], on="subject_id", suffixes=("", "_g"))
    near = (
        np.hypot(pairs["x"] - pairs["x_g"], pairs["y"] - pairs["y_g"])
        <= 0.5 * side.reindex(pairs["subject_id"]).to_numpy()
    )
    found_truth = pairs.loc[near].groupby(["subject_id", "x", "y"]).ngroups
    found_gold = pairs.loc[near].groupby(["subject_id", "x_g", "y_g"]).ngroups
    n_gold = int(len(gold.marks))
    return {
        "expert_objects": n_gold,
        "counted_objects": int(len(tr)),
        "purity": found_gold / n_gold if n_gold else float("nan"),
        "completeness": found_truth / len(tr) if len(tr) else float("nan"),
    }


def _generative_views(res, weak_real: float) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """The default model's three p_fp side by side, from one fit: gold-calibrated, the
    default map without gold, and the model's own p_fp (p_empty: "is anything there?")."""
    from clumpscout.model.calibration import default_calibration

    no_gold = default_calibration(res.labels_, res.subjects_, weak_real)
    p_empty = default_calibration(res.labels_, res.subjects_, 1.0)
    return {
        "generative": (res.labels_, res.subjects_),
        "generative_no_gold": no_gold[:2],
        "generative_p_empty": p_empty[:2],
    }


# ---------------------------------------------------------------- gold draws
def baseline_settings_labels(boxes: pd.DataFrame, cfg: dict) -> dict[str, dict[int, pd.DataFrame]]:
    """Single linkage's and DBSCAN's labels on every subject for every setting in
    :data:`MIN_VOLUNTEERS` (each subject is labelled on its own, so tuning on a gold draw
    only selects among these)."""
    from clumpscout.evaluation.baseline import dbscan_labels, single_linkage_labels

    bl = dict(cfg.get("baseline") or {})
    cut = float(bl.get("single_linkage_cut", 1.0))
    eps = float(bl.get("dbscan_eps_factor", DBSCAN["eps_factor"]))
    return {
        "single_linkage": {
            v: single_linkage_labels(boxes, cut=cut, min_volunteers=v)[0] for v in MIN_VOLUNTEERS
        },
        "dbscan": {
            v: dbscan_labels(boxes, eps_factor=eps, min_samples=v)[0] for v in MIN_VOLUNTEERS
        },
    }


def _tuned(
    by_setting: dict[int, pd.DataFrame], points: pd.DataFrame, subjects
) -> tuple[int, dict[int, float]]:
    """The setting with the largest √(C² + P²) against the gold marks on the gold subjects
    (ties: the smaller), and every setting's √(C² + P²)."""
    from benchmarks.truth_scores import score_method

    hyp = {v: _hypot(score_method(lab, points, subjects)[0]) for v, lab in by_setting.items()}
    best = max(hyp, key=lambda v: (hyp[v] if np.isfinite(hyp[v]) else -np.inf, -v))
    return best, hyp


def gold_draws(
    name: str,
    fit,
    experts,
    subjects: np.ndarray,
    clumps: pd.DataFrame,
    settings,
    baselines: dict[str, dict[int, pd.DataFrame]],
    seed: int,
    n_gold: int,
    k: int,
) -> list[dict]:
    """The generative model calibrated on draw 0 (the main gold standard) and ``k`` more
    random gold standards of ``n_gold`` subjects, with the baselines tuned on each, scored
    on each draw's held-out subjects (module docstring, "Gold draws")."""
    from benchmarks.truth_scores import score_method
    from clumpscout.model.calibration import calibrate
    from clumpscout.simulation.universe import stage_seed

    chatty = [logging.getLogger(f"clumpscout.evaluation.{m}") for m in ("compare", "baseline")]
    levels = [lg.level for lg in chatty]
    for lg in chatty:  # thousands of scorings: their INFO lines would drown the log
        lg.setLevel(logging.WARNING)
    rows = []
    try:
        for r in range(k + 1):
            tag = "gold" if r == 0 else f"gold-draw-{r}"
            pick = np.random.default_rng(stage_seed(seed, tag)).permutation(experts.subjects)
            gold = experts.restrict(pick[:n_gold])
            held = np.setdiff1d(subjects, gold.subjects)
            labels, _, _ = calibrate(fit.labels_, fit.subjects_, gold, settings, fit.assignments_)
            points = _gold_points(gold)
            methods = {"generative": labels}
            for method, by_setting in baselines.items():
                methods[method] = by_setting[_tuned(by_setting, points, gold.subjects)[0]]
            truths_r = {
                "clumps": clumps,
                "experts": experts.restrict(held).marks[["subject_id", "x", "y"]],
            }
            for t, truth in truths_r.items():
                scored = {m: score_method(lab, truth, held) for m, lab in methods.items()}
                base = [scored[m][0] for m in baselines]
                for method, lab in methods.items():
                    row, curve = scored[method]
                    rows.append(
                        {"regime": name, "truth": t, "draw": r, "method": method}
                        | {k: row[k] for k in ("ece", "ece_matched", "count_mae")}
                        | _at_half(lab, truth, held)
                        # as regimes_acceptance.csv: the model's curve against the baselines
                        | {
                            "curve_margin": curve_margin(curve, base)
                            if method == "generative"
                            else np.nan
                        }
                    )
    finally:
        for lg, level in zip(chatty, levels, strict=True):
            lg.setLevel(level)
    return rows


def summarise_draws(draws: pd.DataFrame) -> pd.DataFrame:
    """Per regime and truth: the model's ECE over the draws (median, 10th and 90th
    percentiles; ``ece_matched``: a label is real when matched one-to-one, the rule the
    calibration learns) and the share of draws that pass each acceptance check of
    regimes_acceptance.csv that a draw can check (ECE ≤ 0.05; purity and completeness at
    p_fp < 0.5 each ≥ the better baseline's − 0.01; the curve margin ≥ −0.01; count MAE ≤
    the better baseline's)."""
    out = []
    for (regime, truth), g in draws.groupby(["regime", "truth"], sort=False):
        per = g.pivot(index="draw", columns="method")
        base = [m for m in ("single_linkage", "dbscan") if ("purity_05", m) in per.columns]
        model = per.xs("generative", axis=1, level="method")
        best_p = per["purity_05"][base].max(axis=1)
        best_c = per["completeness_05"][base].max(axis=1)
        best_mae = per["count_mae"][base].min(axis=1)
        ece = model["ece"]
        out.append(
            {
                "regime": regime,
                "truth": truth,
                "draws": int(len(per)),
                "ece_main_draw": float(ece.loc[0]),
                "ece_median": float(ece.median()),
                "ece_p10": float(ece.quantile(0.1)),
                "ece_p90": float(ece.quantile(0.9)),
                "share_ece_le_005": float((ece <= 0.05).mean()),
                "ece_matched_median": float(model["ece_matched"].median()),
                "ece_matched_p90": float(model["ece_matched"].quantile(0.9)),
                "share_ece_matched_le_005": float((model["ece_matched"] <= 0.05).mean()),
                "share_purity_completeness_05": float(
                    (
                        (model["purity_05"] >= best_p - 0.01)
                        & (model["completeness_05"] >= best_c - 0.01)
                    ).mean()
                ),
                "share_curve": float((model["curve_margin"] >= -0.01).mean()),
                "curve_margin_min": float(model["curve_margin"].min()),
                "share_count_mae": float((model["count_mae"] <= best_mae).mean()),
                "count_mae_median": float(model["count_mae"].median()),
                "count_mae_best_baseline_median": float(best_mae.median()),
            }
        )
    return pd.DataFrame(out)


# ---------------------------------------------------------------- one regime
def run_regime(name: str, cfg: dict, args: argparse.Namespace, work: Path) -> dict:
    """Everything for one regime: table rows per truth, acceptance rows, curves, report."""
    from benchmarks.truth_scores import label_ece, marked_objects, score_method
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.calibration import CalibrationSettings
    from clumpscout.model.params import Params
    from clumpscout.simulation.universe import stage_seed

    cfg = copy.deepcopy(cfg)
    sim = cfg.setdefault("simulate", {})
    sim["n_subjects"] = int(args.subjects)
    # the experts mark every subject: a random gold_fraction of them is the gold standard,
    # the others' marks are the "experts" view of the held-out subjects
    sim["n_expert_subjects"] = int(args.subjects)
    seed = int(args.seed if args.seed is not None else cfg.get("seed", 20231))
    timer = Timer(name)
    t_start = time.perf_counter()
    main_u = work / name / f"seed{seed}"

    boxes, sim_report = build_subsample(cfg, seed, args.n, main_u, timer, "")
    truth = truths(main_u)
    subjects = np.unique(boxes["subject_id"])
    with timer("gold standard"):
        experts = expert_gold(cfg, main_u, boxes)
    experts = experts.restrict(np.intersect1d(experts.subjects, subjects))
    n_gold = max(1, int(round(args.gold_fraction * len(subjects))))
    pick = np.random.default_rng(stage_seed(seed, "gold")).permutation(experts.subjects)
    gold = experts.restrict(pick[:n_gold])
    if args.gold_source == "truth":
        gold = truth_gold(truth["clumps"], gold.subjects)
    held_out = np.setdiff1d(subjects, gold.subjects)
    truth["experts"] = (
        experts.restrict(held_out).marks[["subject_id", "x", "y"]].assign(kind="expert")
    )
    gold_truth = gold_vs_truth(gold, truth["clumps"], boxes)
    log.info("[%s] the experts' marks against the counted objects: %s", name, gold_truth)
    log.info(
        "[%s] gold: %d subjects (%d objects); scored on the other %d",
        name,
        len(gold.subjects),
        int(gold.counts.sum()),
        len(held_out),
    )
    with timer("tuning the baselines on the gold subjects"):
        tuned, trials = tune_on_gold(boxes, gold, cfg)
    log.info("[%s] baselines tuned on the gold subjects: %s", name, tuned)

    labels: dict[str, pd.DataFrame] = {}
    subject_tables: dict[str, pd.DataFrame] = {}
    agg = dict(cfg.get("aggregate") or {})
    cal = {**(cfg.get("calibration") or {}), "seed": stage_seed(seed, "aggregate")}
    settings = CalibrationSettings(**cal)
    calibration_report = None
    for model in MODELS:
        with timer(f"aggregate model={model}"):
            params = Params.from_dict({**agg, "model": model})
            res = Aggregator(params, seed=stage_seed(seed, "aggregate"), calibration=settings).fit(
                boxes, gold=gold if model == "generative" else None
            )
        if model == "generative":
            fit = res
            calibration_report = res.report_.get("calibration")
            for k, (lab, sub) in _generative_views(res, settings.weak_real).items():
                labels[k], subject_tables[k] = lab, sub
        else:
            labels[model], subject_tables[model] = res.labels_, res.subjects_
        log.info("[%s] %s: %d labels", name, model, len(res.labels_))
    labels.update(_baseline_labels(boxes, cfg, tuned, timer))

    # ---- scoring on the held-out subjects
    rows = {t: [] for t in TRUTHS}
    curves = []
    with timer("scoring"):
        marked = None
        clicks_path = main_u / "truth_clicks.parquet"
        if clicks_path.exists():
            task = (cfg.get("extract") or {}).get("clump_task", "T1")
            marked = marked_objects(pd.read_parquet(clicks_path), boxes, task=task)
        else:
            log.warning("[%s] no truth_clicks.parquet: objects_30pct not measured", name)
        for t in TRUTHS:
            for method in METHODS:
                row, curve = score_method(
                    labels[method],
                    truth[t],
                    held_out,
                    subjects_df=_in_subjects(subject_tables.get(method), held_out),
                    thresholds=int((cfg.get("compare") or {}).get("thresholds", 101)),
                    bins=int((cfg.get("compare") or {}).get("calibration_bins", 10)),
                )
                row.update(_at_half(labels[method], truth[t], held_out))
                row["ece_any"] = label_ece(labels[method], truth["any_object"], held_out)
                row["gold_subjects"] = int(len(gold.subjects))
                rows[t].append({"regime": name, "method": method, **row})
                keep = ["threshold", "n_kept", "completeness", "purity", "hypot"]
                c = curve[keep] if method in SCORED_MODELS else curve[keep].iloc[[-1]]
                curves.append(c.assign(regime=name, truth=t, method=method))
        acceptance = _acceptance(
            name, rows, subject_tables, labels, truth, marked, held_out, pd.concat(curves)
        )
    draws = []
    if args.gold_draws > 0 and args.gold_source == "experts":
        with timer(f"{args.gold_draws} more gold draws"):
            baselines = baseline_settings_labels(boxes, cfg)
            draws = gold_draws(
                name,
                fit,
                experts,
                subjects,
                truth["clumps"],
                settings,
                baselines,
                seed,
                n_gold,
                args.gold_draws,
            )
    seconds = dict(timer.seconds)
    seconds["total"] = time.perf_counter() - t_start
    log.info("[%s] finished in %.1f s", name, seconds["total"])
    if not args.keep_work:
        shutil.rmtree(main_u, ignore_errors=True)
    return {
        "rows": rows,
        "draws": draws,
        "acceptance": acceptance,
        "curves": pd.concat(curves, ignore_index=True),
        "report": {
            "seed": seed,
            "gold": gold.summary() | {"held_out_subjects": int(len(held_out))},
            "gold_vs_truth": gold_truth,
            "calibration": calibration_report,
            "baselines_tuned_on_gold": tuned,
            "baseline_tuning": trials,
            "baseline_settings": {
                k: v
                for k, v in (cfg.get("baseline") or {}).items()
                if k not in ("min_volunteers", "n", "dbscan_min_samples")
            },
            "subjects_scored": int(len(held_out)),
            "classifications_scored": int(
                boxes.loc[boxes["subject_id"].isin(held_out), "classification_id"].nunique()
            ),
            "universe": {
                k: sim_report.get(k)
                for k in (
                    "subjects",
                    "classifications",
                    "volunteers",
                    "true_clumps",
                    "distractors_by_kind",
                    "clicks_total",
                    "clicks_t1",
                )
                if k in sim_report
            },
            "seconds": seconds,
        },
    }


def _in_subjects(df: pd.DataFrame | None, subjects) -> pd.DataFrame | None:
    if df is None:
        return None
    return df.loc[df["subject_id"].isin(subjects)].reset_index(drop=True)


def _at_half(labels: pd.DataFrame, truth: pd.DataFrame, subjects) -> dict:
    """Purity and completeness of the labels with p_fp < 0.5 (all labels without p_fp)."""
    from clumpscout.metrics.containment import containment

    lab = labels.loc[labels["subject_id"].isin(subjects)]
    if "p_fp" in lab.columns:
        lab = lab.loc[lab["p_fp"] < 0.5]
    hit, best = containment(lab, truth.loc[truth["subject_id"].isin(subjects)])
    return {
        "purity_05": float(hit.mean()) if len(hit) else float("nan"),
        "completeness_05": float(np.isfinite(best).mean()) if len(best) else float("nan"),
    }


def curve_margin(curve: pd.DataFrame, baselines: list[dict]) -> float:
    """min over the baselines of (the model's best completeness at a threshold whose purity
    is at least the baseline's) − (the baseline's completeness): ≥ 0 when the model's curve
    passes through or above every baseline's operating point."""
    c = curve.dropna(subset=["purity"])
    out = float("inf")
    for b in baselines:
        ok = c.loc[c["purity"] >= b["purity"] - 1e-12, "completeness"]
        out = min(out, (float(ok.max()) if len(ok) else 0.0) - b["completeness"])
    return out


def _acceptance(name, rows, subject_tables, labels, truth, marked, held_out, curves) -> list[dict]:
    """The acceptance checks of the gold-standard calibration, per truth and model view
    (module docstring), on the held-out subjects."""
    from benchmarks.truth_scores import DISTRACTOR_KINDS, expected_count_error

    out = []
    for t in TRUTHS:
        by = {r["method"]: r for r in rows[t]}
        base = [by["single_linkage"], by["dbscan"]]
        best_p = max(b["purity"] for b in base)
        best_c = max(b["completeness"] for b in base)
        best_mae = min(b["count_mae"] for b in base)
        n30 = float("nan")
        if marked is not None:
            seen = marked.loc[marked["subject_id"].isin(held_out)]
            if t == "clumps":
                seen = seen.loc[~seen["kind"].isin(DISTRACTOR_KINDS)]
            n30 = int((seen["fraction"] >= MARKED_FRACTION).sum())
        for model in SCORED_MODELS:
            r = by[model]
            sub = _in_subjects(subject_tables[model], held_out)
            err, n_err = expected_count_error(sub, labels[model], truth[t])
            ratio = r["labels"] / n30 if n30 and np.isfinite(n30) else float("nan")
            fp_rel = r["sum_n_fp"] / r["realised_fp"] if r["realised_fp"] else float("nan")
            fn_rel = r["sum_n_fn"] / r["realised_fn"] if r["realised_fn"] else float("nan")
            row = {
                "regime": name,
                "truth": t,
                "method": model,
                "labels_p1": r["labels"],
                "objects_30pct": n30,
                "label_ratio": ratio,
                "purity_05_margin": r["purity_05"] - best_p,
                "completeness_05_margin": r["completeness_05"] - best_c,
                "curve_margin": curve_margin(
                    curves[(curves["truth"] == t) & (curves["method"] == model)], base
                ),
                "ece": r["ece"],
                "ece_matched": r["ece_matched"],
                "n_fp_ratio": fp_rel,
                "n_fn_ratio": fn_rel,
                "expected_count_error": err,
                "expected_count_subjects": n_err,
                "count_mae": r["count_mae"],
                "count_mae_best_baseline": best_mae,
                "count_mae_p_empty": by["generative_p_empty"]["count_mae"],
            }
            row["ok_calibration"] = bool(r["ece"] <= 0.05)
            row["ok_purity_completeness_05"] = bool(
                row["purity_05_margin"] >= -0.01 and row["completeness_05_margin"] >= -0.01
            )
            row["ok_curve"] = bool(row["curve_margin"] >= -0.01)
            row["ok_count_mae"] = bool(r["count_mae"] <= best_mae)
            row["ok_sums"] = bool(
                abs(r["sum_n_fp"] - r["realised_fp"]) <= 0.2 * r["realised_fp"]
                and abs(r["sum_n_fn"] - r["realised_fn"]) <= 0.2 * r["realised_fn"]
            )
            row["ok_no_worse_than_p_empty"] = bool(
                r["count_mae"] <= row["count_mae_p_empty"] + 1e-12
            )
            checks = [v for k, v in row.items() if k.startswith("ok_")]
            row["ok_all"] = bool(all(checks))
            out.append(row)
    return out


# ---------------------------------------------------------------- figure
def plot(curves: pd.DataFrame, truth: str, path: Path, regimes: list[str], n: int = 20) -> None:
    """Purity vs completeness, a panel per regime: model curves over p*, baseline points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {
        "generative": "C0",
        "generative_no_gold": "C5",
        "generative_p_empty": "C7",
        "paper": "C1",
        "single_linkage": "C2",
        "dbscan": "C3",
        "meanshift": "C4",
    }
    markers = {"single_linkage": "s", "dbscan": "D", "meanshift": "^"}
    k = len(regimes)
    ncol = min(k, 3)
    nrow = math.ceil(k / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4 * ncol, 3.8 * nrow), squeeze=False)
    for ax, regime in zip(axes.flat, regimes, strict=False):
        c = curves[(curves["regime"] == regime) & (curves["truth"] == truth)]
        for method in METHODS:
            m = c[c["method"] == method]
            if not len(m):
                continue
            if method in SCORED_MODELS:
                ax.plot(m["completeness"], m["purity"], "-", color=colours[method], label=method)
                h = m["hypot"].to_numpy(dtype=float)
                if np.isfinite(h).any():
                    i = int(np.nanargmax(h))
                    ax.plot(
                        m["completeness"].iloc[i],
                        m["purity"].iloc[i],
                        "*",
                        color=colours[method],
                        ms=12,
                        mec="k",
                    )
            else:
                ax.plot(
                    m["completeness"],
                    m["purity"],
                    markers[method],
                    color=colours[method],
                    ms=8,
                    mec="k",
                    label=method,
                )
        ax.set_title(regime)
        ax.set_xlim(0, 1.02)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("completeness")
        ax.set_ylabel("purity")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[k:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8, loc="lower left")
    what = "the counted objects" if truth == "clumps" else "any real object"
    fig.suptitle(f"truth: {what}; n = {n}\n(line: p_fp threshold; star: optimal p*)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- main
def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--subjects", type=int, required=True, help="simulated subjects per regime")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument(
        "--regimes",
        default=None,
        help="comma-separated regimes (default: every regime whose config exists; "
        "paper_old = paper with the simulator's earlier settings)",
    )
    ap.add_argument("--n", type=int, default=20, help="classifications per subject (default 20)")
    ap.add_argument("--seed", type=int, default=None, help="master seed (default: the config's)")
    ap.add_argument(
        "--gold-fraction",
        type=float,
        default=0.2,
        help="share of the subjects the simulated experts mark: the gold standard (default 0.2)",
    )
    ap.add_argument(
        "--old-vs-new",
        action="store_true",
        help="also run paper_old (the simulator's earlier settings) next to paper",
    )
    ap.add_argument(
        "--gold-source",
        choices=["experts", "truth"],
        default="experts",
        help="the gold subjects' marks: the simulated experts' (default) or the counted "
        "objects themselves (flawless experts: the calibration's ceiling)",
    )
    ap.add_argument(
        "--gold-draws",
        type=int,
        default=20,
        help="calibrate the generative model's fit on this many more random gold standards "
        "and summarise the spread of its scores (default 20; 0: off; module docstring)",
    )
    ap.add_argument("--keep-work", action="store_true", help="keep the simulated universes")
    return ap.parse_args(argv)


def _fmt(df: pd.DataFrame) -> str:
    return df.to_string(index=False, float_format=lambda v: f"{v:.3f}", na_rep="")


def _ratio(a, b) -> str:
    return "" if pd.isna(a) or pd.isna(b) else f"{a:.0f} / {b:.0f}"


def docs_markdown(tables: dict, acceptance: pd.DataFrame, draws_summary, report: dict) -> str:
    """The section of docs/benchmarks.md: the grid, its acceptance checks, the gold draws
    and the time per regime (every number from this run's tables)."""
    from benchmarks.docs_table import markdown_table

    main = tables["clumps"]
    experts = tables["experts"].set_index(["regime", "method"])["ece"]
    grid = pd.DataFrame(
        {
            "regime": main["regime"],
            "method": main["method"],
            "P*": main["purity"],
            "C*": main["completeness"],
            "ECE": main["ece"],
            "P (p_fp < 0.5)": main["purity_05"],
            "C (p_fp < 0.5)": main["completeness_05"],
            "count MAE": main["count_mae"],
            "Σ N_fp / false": [
                _ratio(a, b) for a, b in zip(main["sum_n_fp"], main["realised_fp"], strict=True)
            ],
            "Σ N_fn / missed": [
                _ratio(a, b) for a, b in zip(main["sum_n_fn"], main["realised_fn"], strict=True)
            ],
            "ECE vs experts": [
                experts.get((r, m)) for r, m in zip(main["regime"], main["method"], strict=True)
            ],
        }
    )
    acc = acceptance.loc[acceptance["method"] == "generative"]
    checks = [c for c in acc.columns if c.startswith("ok_") and c != "ok_all"]
    accept = pd.DataFrame(
        {
            "regime": acc["regime"],
            "truth": acc["truth"],
            "ECE": acc["ece"],
            "ECE (one-to-one)": acc["ece_matched"],
            "P − best baseline": acc["purity_05_margin"],
            "C − best baseline": acc["completeness_05_margin"],
            "curve margin": acc["curve_margin"],
            "count MAE": acc["count_mae"],
            "best baseline's": acc["count_mae_best_baseline"],
            "Σ N_fp / false": acc["n_fp_ratio"],
            "Σ N_fn / missed": acc["n_fn_ratio"],
            "checks passed": [
                f"{int(r[checks].sum())} of {len(checks)}" for _, r in acc.iterrows()
            ],
        }
    )
    per = report["per_regime"]
    gold = {k: v["gold"] for k, v in per.items()}
    n_gold = sorted({int(g.get("subjects", 0)) for g in gold.values()})
    parts = [
        f"{report['subjects']:,} simulated subjects per regime, n = {report['n']}. The simulated "
        "experts mark every subject; their marks on a random share of the subjects are the gold "
        f"standard ({', '.join(f'{g:,}' for g in n_gold)} subjects: the default model's p_fp is "
        "calibrated on them, the baselines' `min_volunteers` / `min_samples` tuned on them), "
        "and every number is scored on the other subjects against what the project counts (the "
        "true clumps; every object in `counting`). P* / C*: purity / completeness at the p_fp "
        "threshold maximising √(P² + C²) (the baselines: their own settings); P / C at "
        "p_fp < 0.5; ECE of p_fp; count MAE per subject of the labels with p_fp < 0.5; "
        "Σ N_fp / false and Σ N_fn / missed: the expected against the realised false labels "
        "and misses; ECE vs experts: against the experts' marks of the held-out subjects. "
        "`generative` is calibrated on the gold standard, `generative_no_gold` is the same fit "
        "with the default map (docs/decisions.md#no-gold-default), `generative_p_empty` the "
        "model's own p_fp. The columns of every CSV are described in the script's docstring.",
        markdown_table(grid),
        "### Acceptance checks of the calibrated model (`regimes_acceptance.csv`)",
        "The default model calibrated on the gold standard against the best gold-tuned baseline "
        "at p_fp < 0.5. ECE counts a label true when its box holds an object; ECE (one-to-one) "
        "when it is matched one-to-one to an object (docs/decisions.md#gold-match). Curve "
        "margin: the model's best completeness at a threshold with at least the baseline's "
        "purity, minus the baseline's completeness (≥ 0: the model's purity–completeness curve "
        "passes the baselines' operating points). Σ N_fp / false and Σ N_fn / missed as ratios. "
        f"Checks: {', '.join(c[3:] for c in checks)} (the script's docstring).",
        markdown_table(accept),
    ]
    if draws_summary is not None and len(draws_summary):
        d = draws_summary
        k = int(d["draws"].max())
        spread = pd.DataFrame(
            {
                "regime": d["regime"],
                "truth": d["truth"],
                "ECE, main draw": d["ece_main_draw"],
                "ECE median": d["ece_median"],
                "10 %": d["ece_p10"],
                "90 %": d["ece_p90"],
                "draws with ECE ≤ 0.05": d["share_ece_le_005"].map("{:.0%}".format),
                "ECE one-to-one, median": d["ece_matched_median"],
                "draws ≤ 0.05 (one-to-one)": d["share_ece_matched_le_005"].map("{:.0%}".format),
                "P and C ≥ best baseline − 0.01": d["share_purity_completeness_05"].map(
                    "{:.0%}".format
                ),
                "curve margin ≥ −0.01": d["share_curve"].map("{:.0%}".format),
                "lowest curve margin": d["curve_margin_min"],
                "count MAE ≤ best baseline": d["share_count_mae"].map("{:.0%}".format),
                "count MAE median": d["count_mae_median"],
                "best baseline's median": d["count_mae_best_baseline_median"],
            }
        )
        parts += [
            f"### Over {k} gold standards (`regimes_gold_draws_summary.csv`)",
            "One gold standard is one draw: the same fit is calibrated again on further random "
            "gold standards of the same size (the baselines tuned again on each), each scored on "
            "its own held-out subjects; draw 0 is the main draw above. The regimes share their "
            "subject ids and seeds, so every draw picks the same subjects in every regime.",
            markdown_table(spread),
        ]
    timing = pd.DataFrame(
        [
            {
                "regime": name,
                "subjects scored": v.get("subjects_scored"),
                "seconds": v["seconds"].get("total"),
                "of which aggregation (both models)": sum(
                    t for st, t in v["seconds"].items() if st.startswith("aggregate")
                ),
                "gold draws": sum(t for st, t in v["seconds"].items() if "gold draws" in st),
            }
            for name, v in per.items()
        ]
    )
    parts += [
        "### Time",
        f"The whole grid took {report['seconds_total']:,.0f} s (wall).",
        markdown_table(timing, floatfmt="{:.0f}"),
    ]
    return "\n\n".join(parts)


def main(argv=None) -> int:
    from clumpscout.logs import setup_logging

    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(str(out / "regimes.log"))
    logging.getLogger("clumpscout").setLevel(logging.INFO)
    regimes = args.regimes.split(",") if args.regimes else available_regimes()
    regimes = [r.strip() for r in regimes if r.strip()]
    if args.old_vs_new and "paper_old" not in regimes:
        i = regimes.index("paper") + 1 if "paper" in regimes else len(regimes)
        regimes.insert(i, "paper_old")
    missing = [r for r in REGIMES if r not in available_regimes()]
    if missing and not args.regimes:
        log.warning("regime configs not found (skipped): %s", ", ".join(missing))
    if args.subjects < 1000:
        log.warning("%d subjects per regime: the acceptance grid needs >= 1,000", args.subjects)
    log.info("regimes: %s; %d subjects; n = %d", ", ".join(regimes), args.subjects, args.n)
    t0 = time.perf_counter()
    work = out / "work"
    results = {}
    for name in regimes:
        results[name] = run_regime(name, regime_config(name), args, work)
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)

    tables = {
        t: pd.DataFrame([r for res in results.values() for r in res["rows"][t]], columns=COLUMNS)
        for t in TRUTHS
    }
    acceptance = pd.DataFrame([r for res in results.values() for r in res["acceptance"]])
    curves = pd.concat([res["curves"] for res in results.values()], ignore_index=True)
    tables["clumps"].to_csv(out / "regimes.csv", index=False)
    tables["any_object"].to_csv(out / "regimes_any_object.csv", index=False)
    tables["experts"].to_csv(out / "regimes_experts.csv", index=False)
    acceptance.to_csv(out / "regimes_acceptance.csv", index=False)
    curves.to_csv(out / "regimes_curves.csv", index=False)
    draws = pd.DataFrame([r for res in results.values() for r in res["draws"]])
    draws_summary = None
    if len(draws):
        draws.to_csv(out / "regimes_gold_draws.csv", index=False)
        draws_summary = summarise_draws(draws)
        draws_summary.to_csv(out / "regimes_gold_draws_summary.csv", index=False)
    plot(curves, "clumps", out / "regimes.png", regimes, args.n)
    plot(curves, "any_object", out / "regimes_any_object.png", regimes, args.n)
    plot(curves, "experts", out / "regimes_experts.png", regimes, args.n)
    wall = time.perf_counter() - t0
    report = {
        "subjects": args.subjects,
        "n": args.n,
        "regimes": regimes,
        "old_settings": OLD_SETTINGS,
        "per_regime": {k: v["report"] for k, v in results.items()},
        "seconds_total": wall,
    }
    with open(out / "regimes_report.json", "w") as fh:
        json.dump(report, fh, indent=2, default=str)

    print(f"\n== regimes.csv (truth: true clumps; {args.subjects} subjects, n = {args.n})")
    print(_fmt(tables["clumps"]))
    print("\n== regimes_any_object.csv (truth: any real object)")
    print(_fmt(tables["any_object"]))
    print("\n== regimes_experts.csv (truth: the experts' marks of the held-out subjects)")
    print(_fmt(tables["experts"]))
    print("\n== regimes_acceptance.csv")
    print(_fmt(acceptance))
    if draws_summary is not None:
        print(f"\n== regimes_gold_draws_summary.csv ({args.gold_draws} more gold draws)")
        print(_fmt(draws_summary))
    print(f"\n{len(regimes)} regimes in {wall:.0f} s; outputs in {out}")
    from benchmarks.docs_table import publish

    body = docs_markdown(tables, acceptance, draws_summary, report)
    publish("regimes", "The regime grid", body, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
