"""The simulated universe against the evidence: the paper's numbers and the real consensus boxes.

    .venv/bin/python benchmarks/calibration.py --subjects 5000 --out results/calibration \
        [--seed S] [--regime paper] [--set knob=value ...] [--expert-subjects K] [--keep-work]

One universe of the regime (default ``paper``: ``resources/regimes/paper.yaml`` over
config.yaml) goes through the workflow's Python API (the helpers of
``benchmarks/regimes.py``): simulate → extract → subjects → boxes; then the nested
subsamples Z̃_n (n in :data:`NS`, the workflow's subsample seed) are aggregated with
the paper's model (``Aggregator(Params(model="paper"), seed)``), the experts'
classifications are extracted like the workflow's ``extract_experts`` rule, and every
statistic of the calibration table is computed on both sides: the real value (the paper,
or the real consensus file ``../shared/data/clumpscout_consensus``; when it is absent, its
statistics stored in :data:`CONSENSUS_SUMMARY`) and the simulated one.

``DIR/calibration.csv`` has one row per target with the columns ``target, source,
real_value, simulated_value, tolerance, agrees``; the table is also printed, and
``DIR/calibration_report.json`` holds the run's settings, sizes and timings. A row
*agrees* when |simulated − real| ≤ tolerance; a trend row whose real value is ``>0`` or
``<0`` agrees when the simulated value has that sign. The tolerance of a numeric row is
``allowance + 2 se``: ``allowance`` is stated per row in :data:`TARGETS` (how precisely
the evidence pins the number down, e.g. "≈2%" read off a figure) and ``se`` the standard
error of the two sides at their sizes (binomial or standard error of a mean; for the
label-level statistics a bootstrap over simulated subjects). docs/calibration.md explains
every row.

Definitions, both sides alike:

- *label level* (real consensus vs the paper model's labels at n = 20, every label): the
  frame is the central 200 × 200 crop of the 400 × 400 subject image (crop px = subject
  px − 100). The real file is not restricted to the crop (2.9% of its box centres lie
  outside it), so neither side drops anything. Clump counts are per subject with at least
  one label; box side = x2 − x1; radius = distance of the box centre from the image centre
  (crop px); R = radius / 400, the normalised radius of the paper's fig.
  clump_location_vs_pfp (``clumpscout.figures.paper.normalised_offsets``); unusual = label 2 in
  the real file, ``frac_unusual`` ≥ 0.5 (a majority of its volunteers used the unusual
  tool) in ours;
- *§6 numbers*: clumps per galaxy = labels with p_fp < 0.85 per subject, zeros included
  (``clumpscout.figures.paper.clumps_per_subject``); shares of subjects with N_fp > 1 or
  N_fn > 1 are over every subject of Z̃_n (undefined values count as not above 1);
  stale = status ``stale``; against the experts ``clumpscout.evaluation.compare.score_points`` (p* = 1
  is the last point of the curve) and ``clumpscout.figures.paper.empirical_matches`` (the
  normal labels, true = holds any expert click);
- *totals*: per subject or per classification from ``simulate_report.json``; the
  volunteer-cohort rows depend on the project's size (committed volunteers can classify
  up to half of all subjects), so below the paper's size they are measured on a cohort
  drawn at the paper's size with the same knobs (``clumpscout.simulation.universe.make_volunteers``
  with 1,739,259 classifications of 85,286 subjects).

``--set knob=value`` overrides ``simulate`` knobs (e.g. the values printed by
``benchmarks/fit_simulator.py``). :func:`calibration_table` is the API the fit and the
tests use.
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

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks.regimes import (  # noqa: E402
    Timer,
    build_subsample,
    extract_with_config,
    regime_config,
)

log = logging.getLogger("clumpscout.calibration")

COLUMNS = ["target", "source", "real_value", "simulated_value", "tolerance", "agrees"]
#: the subsamples Z̃_n aggregated (nested, as in the workflow)
NS = (5, 7, 10, 15, 20)
N_REF = 20
#: the subsamples the rows use (clumps-per-galaxy gain, N_fn rise and stale shares)
ROW_NS = (7, N_REF)
CONSENSUS = REPO.parent / "shared" / "data" / "clumpscout_consensus"
CROP = 100.0  # the crop's offset in subject px
IMAGE = 400.0
P_FP_CUT = 0.85  # clumps per galaxy (fig:clumps_per_galaxy_filtered)
TP_CUT = 0.3  # fig:volunteer_normal_set_fpp_dist

# the paper (§3.2 and §6 repeat the totals)
PAPER_SUBJECTS = 85_286
PAPER_CLASSIFICATIONS = 1_739_259
PAPER_CLICKS = 3_561_454
PAPER_VOLUNTEERS = 20_999
PAPER_LABELS = 128_100
PAPER_LABELLED_SUBJECTS = 44_126
PAPER_EXPERT_SUBJECTS = 1_000

#: :func:`label_level` of the real consensus file (46,164 boxes of 19,956 subjects),
#: used when ../shared is absent; tests/test_calibration.py checks them against the file
CONSENSUS_SUMMARY = {
    "share_1_clump": 0.259321,
    "share_2_clumps": 0.417368,
    "share_3plus_clumps": 0.323311,
    "box_side_median": 16.6194,
    "box_side_p95": 27.4945,
    "radius_p95": 97.4882,
    "share_R_below_0.25": 0.955918,
    "share_unusual": 0.276254,
}

#: target -> (source, real value or "", allowance, where it is measured). Real values of
#: the consensus rows are computed from the file; "" marks them. ``scale``: "any" = the
#: row is meaningful at a few hundred subjects (a test), "benchmark" = it needs the
#: benchmark's size (a few thousand subjects or more).
TARGETS: dict[str, dict] = {
    # ---- the paper's totals
    "classifications_per_subject": dict(
        source="§3.2: 1,739,259 annotations / 85,286 subjects",
        real=PAPER_CLASSIFICATIONS / PAPER_SUBJECTS, allowance=0.05, scale="any"),
    "clicks_per_classification": dict(
        source="§3.2: 3,561,454 click locations (all tasks) / 1,739,259 annotations",
        real=PAPER_CLICKS / PAPER_CLASSIFICATIONS, allowance=0.05, scale="any"),
    "volunteers_per_subject": dict(
        source="§3.2: 20,999 volunteers / 85,286 subjects (cohort at the paper's size)",
        real=PAPER_VOLUNTEERS / PAPER_SUBJECTS, allowance=0.01, scale="any"),
    "subjects_per_volunteer_median": dict(
        source="§6.4: median 3 subjects per volunteer", real=3.0, allowance=0.0, scale="any"),
    "subjects_per_volunteer_mean": dict(
        source="§3.2: 1,739,259 / 20,999", real=PAPER_CLASSIFICATIONS / PAPER_VOLUNTEERS,
        allowance=5.0, scale="any"),
    "volunteers_below_10_share": dict(
        source="§6.4: 19,859 of 20,999 volunteers annotate < 10 subjects",
        real=19_859 / PAPER_VOLUNTEERS, allowance=0.01, scale="any"),
    "volunteers_above_200_share": dict(
        source="§6.4: 176 of 20,999 volunteers annotate > 200 subjects",
        real=176 / PAPER_VOLUNTEERS, allowance=0.002, scale="any"),
    "labels_per_subject": dict(
        source="§6: 128,100 clumps / 85,286 subjects (Z, ~n = 20)",
        real=PAPER_LABELS / PAPER_SUBJECTS, allowance=0.15, scale="any"),
    "subjects_with_label_share": dict(
        source="§6: 44,126 of 85,286 galaxies have a clump (Z, ~n = 20)",
        real=PAPER_LABELLED_SUBJECTS / PAPER_SUBJECTS, allowance=0.03, scale="any"),
    # ---- label level: the real consensus boxes vs our paper-model labels at n = 20
    "share_1_clump": dict(source="consensus file: subjects with 1 box / with any",
                          real="", allowance=0.03, scale="any"),
    "share_2_clumps": dict(source="consensus file: subjects with 2 boxes / with any",
                           real="", allowance=0.03, scale="any"),
    "share_3plus_clumps": dict(source="consensus file: subjects with >= 3 boxes / with any",
                               real="", allowance=0.03, scale="any"),
    "box_side_median": dict(source="consensus file: median box side (px)",
                            real="", allowance=1.0, scale="any"),
    "box_side_p95": dict(source="consensus file: 95th percentile of the box side (px)",
                         real="", allowance=2.0, scale="any"),
    "radius_p95": dict(source="consensus file: 95th percentile of the radius (crop px)",
                       real="", allowance=5.0, scale="any"),
    "share_R_below_0.25": dict(source="consensus file: R < 0.25 (fig. clump_location_vs_pfp)",
                               real="", allowance=0.01, scale="any"),
    "share_unusual": dict(source="consensus file: boxes labelled odd (label 2)",
                          real="", allowance=0.03, scale="any"),
    # ---- §6 numbers and trends with n
    "clumps_per_galaxy_gain_7_to_20": dict(
        source="§7: n = 7 → 20 gives 0.5 more clumps with p_fp < 0.85 per galaxy",
        real=0.5, allowance=0.2, scale="benchmark"),
    "n_fn_above_1_share_n20": dict(
        source="§6.5: N_fn > 1 for ~2% of subjects at n = 20", real=0.02, allowance=0.01,
        scale="benchmark"),
    "n_fn_above_1_rise_7_to_20": dict(
        source="§6.5: the N_fn > 1 share rises quasi-monotonically with n", real=">0",
        allowance=0.0, scale="benchmark"),
    "n_fp_above_1_share_n20": dict(
        source="§6.5: N_fp > 1 for ~8% at n = 20 (peak ~10% at n = 15)", real=0.08,
        allowance=0.02, scale="benchmark"),
    "stale_share_n7": dict(source="§6.5: ~7-9% of subjects stale (peak at n = 6)", real=0.08,
                           allowance=0.01, scale="benchmark"),
    "stale_share_n20": dict(source="§6.5: ~7-9% of subjects stale", real=0.08,
                            allowance=0.01, scale="benchmark"),
    "p_fp_outside_0.2_0.8_n20": dict(
        source="§6.2: ≈90% of clumps have p_fp < 0.2 or > 0.8 at n = 20", real=0.90,
        allowance=0.03, scale="benchmark"),
    "p_fp_above_0.8_n20": dict(
        source="derived from §6.2-6.3: ≈0.2 (docs/calibration.md)", real=0.20, allowance=0.08,
        scale="benchmark"),
    "p_fp_below_0.2_n20": dict(
        source="derived from §6.2-6.3: ≈0.7 (docs/calibration.md)", real=0.70, allowance=0.08,
        scale="benchmark"),
    "expert_tp_p_fp_below_0.3": dict(
        source="§6.3: 95% of expert-confirmed normal labels have p_fp < 0.3 (n = 20)",
        real=0.95, allowance=0.0, scale="benchmark"),
    "expert_fp_p_fp_below_0.3": dict(
        source="§6.3: 68% of the other normal labels have p_fp < 0.3 (n = 20)", real=0.68,
        allowance=0.0, scale="benchmark"),
    "expert_completeness_normal_p1": dict(
        source="§6.3: normal subsets, n = 20, p* = 1: ~97% completeness", real=0.97,
        allowance=0.02, scale="benchmark"),
    "expert_purity_normal_p1": dict(
        source="§6.3: normal subsets, n = 20, p* = 1: ~35% purity", real=0.35, allowance=0.05,
        scale="benchmark"),
    "expert_completeness_normal_minus_all": dict(
        source="§6.3: normal subsets more complete than all clumps (n = 20, p* = 1)",
        real=">0", allowance=0.0, scale="benchmark"),
    "expert_purity_normal_minus_all": dict(
        source="§6.3: normal subsets less pure than all clumps (n = 20, p* = 1)", real="<0",
        allowance=0.0, scale="benchmark"),
}  # fmt: skip


# ---------------------------------------------------------------- small statistics
def _binom_se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1.0 - p), 0.0) / n) if n > 0 and np.isfinite(p) else 0.0


def _mean_se(x: np.ndarray) -> float:
    x = np.asarray(x, float)
    return float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0


def label_level(df: pd.DataFrame) -> dict[str, float]:
    """The label-level statistics of a table (subject_id, x, y in crop px, side, unusual)."""
    counts = df.groupby("subject_id").size().to_numpy()
    radius = np.hypot(df["x"].to_numpy(float) - CROP, df["y"].to_numpy(float) - CROP)
    side = df["side"].to_numpy(float)
    return {
        "share_1_clump": float((counts == 1).mean()),
        "share_2_clumps": float((counts == 2).mean()),
        "share_3plus_clumps": float((counts >= 3).mean()),
        "box_side_median": float(np.median(side)),
        "box_side_p95": float(np.quantile(side, 0.95)),
        "radius_p95": float(np.quantile(radius, 0.95)),
        "share_R_below_0.25": float((radius / IMAGE < 0.25).mean()),
        "share_unusual": float(df["unusual"].to_numpy(bool).mean()),
    }


def bootstrap_se(df: pd.DataFrame, stat, n_boot: int = 200, seed: int = 0) -> dict[str, float]:
    """Standard errors of ``stat(df)`` (a dict of numbers), resampling whole subjects."""
    if n_boot < 2 or df.empty:
        return {}
    df = df.sort_values("subject_id", kind="stable").reset_index(drop=True)
    _, first, counts = np.unique(df["subject_id"].to_numpy(), return_index=True, return_counts=True)
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(n_boot):
        pick = rng.integers(0, len(first), len(first))
        lens = counts[pick]
        rows = np.repeat(first[pick], lens) + (
            np.arange(lens.sum()) - np.repeat(np.cumsum(lens) - lens, lens)
        )
        boot = df.iloc[rows].copy()
        boot["subject_id"] = np.repeat(np.arange(len(pick)), lens)  # duplicates stay apart
        draws.append(stat(boot))
    return {k: float(np.std([d[k] for d in draws], ddof=1)) for k in draws[0]}


def real_label_level(directory: Path = CONSENSUS) -> pd.DataFrame:
    """The real consensus boxes as (subject_id, x, y, side, unusual) in crop px."""
    files = sorted(Path(directory).glob("imageGroups_*.csv.gz"))
    if not files:
        raise FileNotFoundError(f"no consensus boxes (imageGroups_*.csv.gz) in {directory}")
    df = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    return pd.DataFrame(
        {
            "subject_id": df["image_id"],
            "x": (df["x1"] + df["x2"]) / 2.0,
            "y": (df["y1"] + df["y2"]) / 2.0,
            "side": df["x2"] - df["x1"],
            "unusual": df["label"] == 2,
        }
    )


def load_consensus(directory: Path = CONSENSUS):
    """The real boxes when the folder has them, else :data:`CONSENSUS_SUMMARY`."""
    try:
        return real_label_level(directory)
    except FileNotFoundError as exc:
        log.warning("%s: label-level real values from CONSENSUS_SUMMARY", exc)
        return CONSENSUS_SUMMARY


def simulated_label_level(labels: pd.DataFrame) -> pd.DataFrame:
    """Our labels (subject px) as (subject_id, x, y, side, unusual) in crop px."""
    return pd.DataFrame(
        {
            "subject_id": labels["subject_id"].to_numpy(),
            "x": labels["x"].to_numpy(float) - CROP,
            "y": labels["y"].to_numpy(float) - CROP,
            "side": (labels["x2"] - labels["x1"]).to_numpy(float),
            "unusual": labels["frac_unusual"].to_numpy(float) >= 0.5,
        }
    )


# ---------------------------------------------------------------- the simulated side
def run_universe(cfg: dict, seed: int, work: Path, ns=NS) -> dict:
    """Simulate, extract, aggregate Z̃_n for every n with the paper's model; experts too.

    Returns a dict: report (simulate_report), labels / subjects per n, expert_clicks,
    seconds per stage."""
    from clumpscout.data.subsample import draw_subsample
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params
    from clumpscout.simulation.universe import stage_seed

    timer = Timer("calibration")
    # n large: every classification (Z); the subsamples are drawn below as the workflow does
    boxes, report = build_subsample(cfg, seed, 10**9, work, timer, "")
    with timer("extract experts"):
        experts, _ = extract_with_config(cfg, work / "expert_classifications.csv", work)
    # clump-task clicks and classifications per volunteer (a classification that marked
    # nothing has one row without coordinates)
    per_volunteer = (
        boxes.assign(click=boxes["x"].notna())
        .groupby("volunteer")
        .agg(classifications=("classification_id", "nunique"), clicks=("click", "sum"))
    )
    nested = bool((cfg.get("subsample") or {}).get("nested", True))
    params = Params.from_dict({**dict(cfg.get("aggregate") or {}), "model": "paper"})
    labels, subjects = {}, {}
    for n in ns:
        boxes_n, _ = draw_subsample(boxes, n, stage_seed(seed, "subsample"), nested)
        with timer(f"aggregate n={n}"):
            res = Aggregator(params, seed=stage_seed(seed, "aggregate")).fit(boxes_n)
        labels[n], subjects[n] = res.labels_, res.subjects_
    return {
        "report": report,
        "labels": labels,
        "subjects": subjects,
        "expert_clicks": experts,
        "per_volunteer": per_volunteer,
        "seconds": dict(timer.seconds),
    }


def cohort_values(sim: dict) -> dict[str, float]:
    """Volunteer-cohort statistics at the paper's size (see the module docstring)."""
    from clumpscout.simulation.universe import make_volunteers, resolve_config

    p = resolve_config({**sim, "n_subjects": PAPER_SUBJECTS})
    rng = np.random.default_rng(np.random.SeedSequence(20231).spawn(4)[3])
    n = make_volunteers(PAPER_CLASSIFICATIONS, PAPER_SUBJECTS, p, rng)["n_planned"].to_numpy()
    return {
        "volunteers_per_subject": len(n) / PAPER_SUBJECTS,
        "subjects_per_volunteer_median": float(np.median(n)),
        "subjects_per_volunteer_mean": float(n.mean()),
        "volunteers_below_10_share": float((n < 10).mean()),
        "volunteers_above_200_share": float((n > 200).mean()),
    }


def _realised_cohort(report: dict) -> dict[str, float]:
    cls, vol, subj = report["classifications"], report["volunteers"], report["subjects"]
    return {
        "volunteers_per_subject": vol / subj,
        "subjects_per_volunteer_median": float(report["subjects_per_volunteer_median"]),
        "subjects_per_volunteer_mean": cls / vol,
        "volunteers_below_10_share": float(report["volunteers_below_10_subjects_fraction"]),
        "volunteers_above_200_share": float(report["volunteers_above_200_subjects"]) / vol,
    }


def simulated_values(
    run: dict, sim_cfg: dict, n_boot: int = 200, seed: int = 0
) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Every simulated statistic of :data:`TARGETS`: (values, standard errors, and the
    sample sizes the paper's own proportions of §6.3 rest on, for their standard error)."""
    from clumpscout.evaluation.compare import score_points
    from clumpscout.figures.paper import clumps_per_subject, empirical_matches

    rep = run["report"]
    val: dict[str, float] = {}
    se: dict[str, float] = {}
    subj_n = rep["subjects"]
    # standard errors: Poisson for the extra classifications per subject; for clicks per
    # classification the ratio estimator's, clustered by volunteer (the committed volunteers'
    # own habits move it), from the clump-task clicks (the T0 bulge click varies little)
    val["classifications_per_subject"] = rep["classifications"] / subj_n
    se["classifications_per_subject"] = math.sqrt(
        sim_cfg.get("extra_classifications_mean", 0.4) / subj_n
    )
    val["clicks_per_classification"] = rep["clicks_total"] / rep["classifications"]
    pv = run["per_volunteer"]
    n_cls = pv["classifications"].to_numpy(float)
    ratio = pv["clicks"].sum() / n_cls.sum()
    resid = pv["clicks"].to_numpy(float) - ratio * n_cls
    se["clicks_per_classification"] = float(math.sqrt((resid**2).sum()) / n_cls.sum())
    if subj_n >= PAPER_SUBJECTS:
        val.update(_realised_cohort(rep))
    else:
        val.update(cohort_values(sim_cfg))

    lab, sub = run["labels"], run["subjects"]
    ref, s_ref = lab[N_REF], sub[N_REF]
    n_sub = len(s_ref)
    per = ref.groupby("subject_id").size().reindex(s_ref["subject_id"], fill_value=0).to_numpy()
    val["labels_per_subject"], se["labels_per_subject"] = float(per.mean()), _mean_se(per)
    p = float((per > 0).mean())
    val["subjects_with_label_share"], se["subjects_with_label_share"] = p, _binom_se(p, n_sub)

    # label level (n = 20, every label)
    table = simulated_label_level(ref)
    val.update(label_level(table))
    se.update(bootstrap_se(table, label_level, n_boot, seed))

    # §6: clumps per galaxy (p_fp < 0.85) from n = 7 to 20, paired on the same subjects
    stacked_l = pd.concat([lab[n].assign(n=n) for n in ROW_NS], ignore_index=True)
    stacked_s = pd.concat([sub[n].assign(n=n) for n in ROW_NS], ignore_index=True)
    cps = clumps_per_subject(stacked_s, stacked_l, P_FP_CUT)
    wide = cps.pivot(index="subject_id", columns="n", values="clumps").fillna(0)
    gain = (wide[N_REF] - wide[7]).to_numpy(float)
    val["clumps_per_galaxy_gain_7_to_20"] = float(gain.mean())
    se["clumps_per_galaxy_gain_7_to_20"] = _mean_se(gain)

    def share(n, col, above=1.0):
        s = sub[n]
        return float((s[col].to_numpy(float) > above).mean()), len(s)  # NaN > 1 is False

    for col, name in (("n_fn", "n_fn_above_1_share_n20"), ("n_fp", "n_fp_above_1_share_n20")):
        v, m = share(N_REF, col)
        val[name], se[name] = v, _binom_se(v, m)
    v7, m7 = share(7, "n_fn")
    val["n_fn_above_1_rise_7_to_20"] = val["n_fn_above_1_share_n20"] - v7
    for n in ROW_NS:
        s = sub[n]
        v = float((s["status"] == "stale").mean())
        val[f"stale_share_n{n}"], se[f"stale_share_n{n}"] = v, _binom_se(v, len(s))

    pf = ref["p_fp"].to_numpy(float)
    for name, mask in (
        ("p_fp_outside_0.2_0.8_n20", (pf < 0.2) | (pf > 0.8)),
        ("p_fp_above_0.8_n20", pf > 0.8),
        ("p_fp_below_0.2_n20", pf < 0.2),
    ):
        val[name] = float(mask.mean()) if len(pf) else float("nan")
    se.update(
        bootstrap_se(
            ref[["subject_id", "p_fp"]],
            lambda d: {
                "p_fp_outside_0.2_0.8_n20": float(((d.p_fp < 0.2) | (d.p_fp > 0.8)).mean()),
                "p_fp_above_0.8_n20": float((d.p_fp > 0.8).mean()),
                "p_fp_below_0.2_n20": float((d.p_fp < 0.2).mean()),
            },
            n_boot,
            seed + 1,
        )
    )

    # §6.3: against the experts at n = 20
    pts = run["expert_clicks"]
    matches = empirical_matches(ref, pts)
    normal = matches[matches["normal"]]
    n_paper = {}
    for key, tp in (("expert_tp_p_fp_below_0.3", True), ("expert_fp_p_fp_below_0.3", False)):
        m = normal[normal["tp"] == tp]["p_fp"].to_numpy(float)
        val[key] = float((m < TP_CUT).mean()) if len(m) else float("nan")
        se[key] = _binom_se(val[key], len(m))
    _, summary = score_points(ref, pts)
    summ = summary.set_index("subset")
    c, pur = float(summ.loc["normal", "completeness_p1"]), float(summ.loc["normal", "purity_p1"])
    val["expert_completeness_normal_p1"] = c
    val["expert_purity_normal_p1"] = pur
    n_pts, n_lab = int(summ.loc["normal", "n_points"]), int(summ.loc["normal", "n_labels"])
    se["expert_completeness_normal_p1"] = _binom_se(c, n_pts)
    se["expert_purity_normal_p1"] = _binom_se(pur, n_lab)
    val["expert_completeness_normal_minus_all"] = c - float(summ.loc["all", "completeness_p1"])
    val["expert_purity_normal_minus_all"] = pur - float(summ.loc["all", "purity_p1"])
    # the paper's expert rows rest on 1,000 subjects: scale our counts to its size
    k = PAPER_EXPERT_SUBJECTS / max(1, pts["subject_id"].nunique())
    for key in ("expert_tp_p_fp_below_0.3", "expert_fp_p_fp_below_0.3"):
        n_ours = len(normal[normal["tp"] == (key == "expert_tp_p_fp_below_0.3")])
        n_paper[key] = max(1, round(n_ours * k))
    n_paper["expert_completeness_normal_p1"] = max(1, round(n_pts * k))
    n_paper["expert_purity_normal_p1"] = max(1, round(n_lab * k))
    return val, se, n_paper


# ---------------------------------------------------------------- the table
def calibration_table(
    run: dict,
    sim_cfg: dict,
    consensus: pd.DataFrame | dict | None = None,
    n_boot: int = 200,
    seed: int = 0,
    targets: dict | None = None,
) -> pd.DataFrame:
    """The calibration table of one simulated run (rows of ``targets``, default
    :data:`TARGETS`). ``consensus``: the real boxes (:func:`real_label_level`) or their
    statistics (a mapping like :data:`CONSENSUS_SUMMARY`, the default)."""
    targets = TARGETS if targets is None else targets
    val, se, n_paper = simulated_values(run, sim_cfg, n_boot, seed)
    if consensus is None:
        consensus = CONSENSUS_SUMMARY
    real_ll = label_level(consensus) if isinstance(consensus, pd.DataFrame) else dict(consensus)
    rows = []
    for name, t in targets.items():
        sim = val.get(name, float("nan"))
        real = t["real"]
        if real == "":
            real = real_ll.get(name, float("nan"))
        if isinstance(real, str):  # a sign
            sign = 1.0 if real == ">0" else -1.0
            ok = bool(np.isfinite(sim) and sim * sign > 0)
            tol = "sign"
        else:
            se_real = _binom_se(real, n_paper[name]) if name in n_paper else 0.0
            tol = t["allowance"] + 2.0 * math.hypot(se.get(name, 0.0), se_real)
            ok = bool(np.isfinite(sim) and np.isfinite(real) and abs(sim - real) <= tol + 1e-12)
        rows.append(
            {
                "target": name,
                "source": t["source"],
                "real_value": real,
                "simulated_value": sim,
                "tolerance": tol,
                "agrees": ok,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def universe_config(
    regime: str = "paper", subjects: int = 5000, overrides: dict | None = None, experts=None
) -> dict:
    """The regime's full config with ``n_subjects``, the expert subjects (default
    min(1000, subjects)) and ``overrides`` of the simulate section."""
    cfg = copy.deepcopy(regime_config(regime))
    sim = cfg.setdefault("simulate", {})
    sim.update(overrides or {})
    sim["n_subjects"] = int(subjects)
    sim["n_expert_subjects"] = int(min(subjects, experts if experts else PAPER_EXPERT_SUBJECTS))
    return cfg


def measure(
    cfg: dict, seed: int, work: Path, consensus=None, n_boot=200, keep=False, ns=NS
) -> tuple[pd.DataFrame, dict]:
    """Run one universe and return (calibration table, run info). ``ns``: the subsamples
    aggregated (the table needs :data:`ROW_NS`; the others are for the log and figures)."""
    t0 = time.perf_counter()
    try:
        run = run_universe(cfg, seed, work, ns)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    table = calibration_table(run, cfg["simulate"], consensus, n_boot, seed)
    info = {
        "seconds": {**run["seconds"], "total": time.perf_counter() - t0},
        "subjects": run["report"]["subjects"],
        "classifications": run["report"]["classifications"],
        "labels_n20": int(len(run["labels"][N_REF])),
        "expert_subjects": int(run["expert_clicks"]["subject_id"].nunique()),
    }
    return table, info


def _parse_set(items) -> dict:
    out = {}
    for item in items or []:
        k, _, v = item.partition("=")
        v = v.strip()
        if v.lower() in ("true", "false"):
            out[k.strip()] = v.lower() == "true"
        else:
            out[k.strip()] = float(v) if v.lstrip("-").replace(".", "", 1).isdigit() else v
    return out


def format_table(table: pd.DataFrame) -> str:
    def f(v):
        if isinstance(v, str):
            return v
        if isinstance(v, bool | np.bool_):
            return "yes" if v else "NO"
        return "" if pd.isna(v) else f"{v:.4g}"

    t = table.copy()
    for c in ("real_value", "simulated_value", "tolerance", "agrees"):
        t[c] = t[c].map(f)
    return t.drop(columns="source").to_string(index=False)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--subjects", type=int, required=True, help="simulated subjects")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--regime", default="paper", help="regime config (default paper)")
    ap.add_argument("--seed", type=int, default=None, help="master seed (default: the config's)")
    ap.add_argument("--set", nargs="*", default=[], help="simulate knob overrides, knob=value")
    ap.add_argument("--expert-subjects", type=int, default=None, help="default min(1000, N)")
    ap.add_argument("--consensus", default=str(CONSENSUS), help="real consensus folder")
    ap.add_argument("--boot", type=int, default=200, help="bootstrap replicates (label level)")
    ap.add_argument("--keep-work", action="store_true", help="keep the simulated universe")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    from clumpscout.logs import setup_logging

    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(str(out / "calibration.log"))
    logging.getLogger("clumpscout").setLevel(logging.INFO)
    overrides = _parse_set(args.set)
    cfg = universe_config(args.regime, args.subjects, overrides, args.expert_subjects)
    seed = int(args.seed if args.seed is not None else cfg.get("seed", 20231))
    consensus = load_consensus(Path(args.consensus))
    table, info = measure(cfg, seed, out / "work", consensus, args.boot, args.keep_work)
    table.to_csv(out / "calibration.csv", index=False)
    report = {"regime": args.regime, "seed": seed, "overrides": overrides, **info}
    with open(out / "calibration_report.json", "w") as fh:
        json.dump(report, fh, indent=2, default=str)
    print(f"\n== calibration.csv ({info['subjects']} subjects, seed {seed}, regime {args.regime})")
    print(format_table(table))
    print(f"\n{int(table['agrees'].sum())} of {len(table)} rows agree; "
          f"{info['seconds']['total']:.0f} s; outputs in {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
