"""Figures: every plotting function on tiny hand-made inputs.

A synthetic results folder whose tables have known properties (written by
:func:`make_results`, also used by tests/test_headline.py) goes once through
``clumpscout figures`` (every builder and plotting function); the tests then
check the files (PNG decodes to figure size x dpi, PDF non-empty) and the
numbers each figure reports against values worked out by hand here. Pure helpers
are tested without drawing.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from clumpscout.errors import InputError
from clumpscout.figures import (
    clumps,
    common,
    examples,
    experts,
    meanshift,
    paper,
    registry,
    risk,
    truth,
    volunteers,
)
from clumpscout.report.figure_labels import report_labels

DPI = 20
NS = (3, 20)

# ---------------------------------------------------------------- synthetic data
#: p_fp of the 10 clumps at n = 20: 3 below 0.01, 8 outside [0.2, 0.8], median 0.45
P_FP_20 = [0.001, 0.005, 0.009, 0.05, 0.3, 0.6, 0.85, 0.9, 0.95, 0.99]
#: p_sigma at n = 20: 4 below 0.01
P_SIGMA_20 = [1e-4] * 4 + [0.02] * 6
#: subject of each clump at n = 20 (subjects 1..4; subject 5 has none)
SUBJ_20 = [1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
#: clump centres at n = 20 (px). Subject 1 is 200 x 100 px, the rest 400 x 400.
XY_20 = [
    (100, 50),  # subject 1 centre: R = 0
    (150, 50),  # x/200 - 0.5 = 0.25: R = 0.25, not outside (R > 0.25 is outside)
    (190, 50),  # R = 0.45: outside
    (200, 200),
    (230, 170),  # box [220, 240] x [160, 180]: clear of clump 3's expert click
    (20, 20),  # R = 0.4596: outside
    (200, 260),  # R = 0.15
    (390, 200),  # R = 0.475: outside
    (200, 200),
    (200, 150),
]
#: frac_unusual: clumps 2 and 9 (0-based) are "unusual" (not normal)
FRAC_UNUSUAL_20 = [0.0, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2]


def labels_table(n: int) -> pd.DataFrame:
    if n == 20:
        p, ps, subj, xy, fu = P_FP_20, P_SIGMA_20, SUBJ_20, XY_20, FRAC_UNUSUAL_20
    else:  # n = 3: four clumps, all p_fp 0.04 (prior dominated)
        p, ps, subj = [0.04] * 4, [0.05] * 4, [1, 2, 3, 3]
        xy, fu = [(100, 50), (200, 200), (200, 200), (220, 220)], [0.0] * 4
    x = np.array([a for a, _ in xy], float)
    y = np.array([b for _, b in xy], float)
    clump = pd.Series(subj).groupby(subj).cumcount().to_numpy()
    return pd.DataFrame(
        {
            "subject_id": np.array(subj, np.int64),
            "clump": clump,
            "x1": x - 10,
            "y1": y - 10,
            "x2": x + 10,
            "y2": y + 10,
            "x": x,
            "y": y,
            "p_fp": p,
            "p_sigma": ps,
            "n_marks": 3,
            "frac_unusual": fu,
        }
    )


#: per n: (n_fp, n_fn, n_sigma, status) of subjects 1..5
SUBJECTS = {
    3: (
        [0.2, 0.1, 0.3, 0.0, 0.0],
        [0.05, 0.5, 0.01, 0.0, 0.0],
        [0.01, 0.02, 0.03, 0.0, 0.0],
        ["retired", "retired", "stale", "unretired", "retired_empty"],
    ),
    20: (
        [1.5, 0.5, 2.5, 0.9, np.nan],  # 2 of 4 defined values > 1
        [0.0, 1.2, 0.1, 0.0, np.nan],
        [0.001, 0.0, 0.002, 0.0, np.nan],
        ["retired", "retired", "retired", "stale", "retired_empty"],
    ),
}


def subjects_table(n: int) -> pd.DataFrame:
    n_fp, n_fn, n_sigma, status = SUBJECTS[n]
    lab = labels_table(n)
    counts = lab.groupby("subject_id").size().reindex(range(1, 6), fill_value=0)
    return pd.DataFrame(
        {
            "subject_id": np.arange(1, 6, dtype=np.int64),
            "n_volunteers": n,
            "n_clumps": counts.to_numpy(),
            "n_fp": n_fp,
            "n_fn": n_fn,
            "n_sigma": n_sigma,
            "risk": 0.0,
            "status": status,
            "cycles": 1,
        }
    )


#: volunteers at n = 20: n_subjects and p_fp (bins [1,2) [2,3) [3,5) [5,10) [10,20))
VOL_N = [1, 1, 2, 4, 12]
VOL_P_FP = [0.1, 0.3, 0.2, 0.15, 0.05]


def volunteers_table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "volunteer": [f"v{i}" for i in range(5)],
            "p_fp": VOL_P_FP,
            "p_fn": [0.2, 0.2, 0.1, 0.3, 0.05],
            "sigma2": [0.04, 0.09, 0.01, 0.04, 0.0025],
            "n_subjects": VOL_N,
            "n_boxes": 3,
            "n_tp": 2,
            "n_fp": 1,
            "n_fn": 0,
        }
    )


def assignments_table() -> pd.DataFrame:
    """Boxes of subjects 1..3 at n = 20: 3 volunteers on each clump, plus one dummy box
    per subject, one empty classification (NaN box, cluster NA) on subject 2."""
    lab = labels_table(20)
    rows = []
    cid = 0
    for r in lab.itertuples():
        for v in range(3):
            cid += 1
            rows.append((cid, r.subject_id, f"v{v}", r.x + v, r.y - v, r.clump))
    for s in (1, 2, 3, 4):
        cid += 1
        rows.append((cid, s, "v9", 60.0, 30.0, -1))
    cid += 1
    rows.append((cid, 2, "v8", np.nan, np.nan, None))
    df = pd.DataFrame(rows, columns=["classification_id", "subject_id", "volunteer", "x", "y", "c"])
    df["x1"], df["y1"], df["x2"], df["y2"] = df.x - 10, df.y - 10, df.x + 10, df.y + 10
    df["image_width"] = np.where(df.subject_id == 1, 200.0, 400.0)
    df["image_height"] = np.where(df.subject_id == 1, 100.0, 400.0)
    df["unusual"] = False
    df["box_side"] = 20.0
    df["created_at"] = pd.Timestamp("2021-01-01", tz="UTC")
    df["cluster"] = pd.array(df.pop("c"), dtype="Int64")
    return df


def curve_table(subset_shift: float = 0.0) -> pd.DataFrame:
    """Curves for n = 3, 20 and subsets all / normal: three thresholds each.

    n = 20 'all': C = 0.2, 0.5, 0.9 and P = 0.9, 0.7, 0.3 -> optimal at p* = 1
    (hypot 0.949 > 0.922 > 0.860), max C at p* = 1, max P at p* = 0."""
    rows = []
    for n in NS:
        for subset in ("all", "normal"):
            c = np.array([0.2, 0.5, 0.9]) * (1 if n == 20 else 0.8)
            p = np.array([0.9, 0.7, 0.3]) - (subset_shift if subset == "normal" else 0)
            for t, ci, pi in zip([0.0, 0.5, 1.0], c, p, strict=True):
                rows.append({"n": n, "subset": subset, "threshold": t, "completeness": ci,
                             "purity": pi, "n_tp": 1, "n_fp": 1, "n_fn": 1})  # fmt: skip
    return pd.DataFrame(rows)


def summary_table(with_ece: bool = False) -> pd.DataFrame:
    rows = []
    for n in NS:
        for subset in ("all", "normal"):
            c = 0.9 if n == 20 else 0.72
            row = {
                "n": n,
                "subset": subset,
                "opt_threshold": 1.0,
                "opt_completeness": c,
                "opt_purity": 0.3,
                "max_completeness": c,
                "max_completeness_threshold": 1.0,
                "purity_at_max_completeness": 0.3,
                "max_purity": 0.9,
                "max_purity_threshold": 0.0,
                "completeness_at_max_purity": 0.2,
                "completeness_p1": c,
                "purity_p1": 0.3,
            }
            if with_ece:
                row["ece"] = 0.05 if n == 20 else 0.1
            rows.append(row)
    return pd.DataFrame(rows)


#: the side-by-side method tables at n = 20 (subset "all"; "normal" is the same minus 0.1
#: purity): method -> (optimal p*, C*, P*, C at p* = 1, P at p* = 1, labels at p* = 1,
#: labels kept at p*). Baselines have no p_fp: one point, optimal = p* = 1.
METHOD_NUMBERS = {
    "generative": (0.5, 0.8, 0.9, 0.9, 0.5, 40, 20),
    "paper": (0.0, 0.6, 0.8, 0.95, 0.3, 60, 30),
    "single_linkage": (0.0, 0.7, 0.85, 0.7, 0.85, 18, 18),
    "dbscan": (0.0, 0.75, 0.8, 0.75, 0.8, 22, 22),
    "meanshift": (0.0, 0.9, 0.2, 0.9, 0.2, 90, 90),
}
N_TRUE = 25


def method_tables() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curve, summary) of baseline_compare_{truth,experts} for the five methods at n = 20."""
    curves, rows = [], []
    for m, (t, c, p, c1, p1, n1, nopt) in METHOD_NUMBERS.items():
        for subset, dp in (("all", 0.0), ("normal", 0.1)):
            flat = m not in ("generative", "paper")
            pts = [(0.0, c, p), (1.0, c1, p1)] if not flat else [(0.0, c1, p1), (1.0, c1, p1)]
            if not flat and t not in (0.0, 1.0):
                pts.insert(1, (t, c, p))
            if not flat and t == 0.0:
                pts[0] = (0.0, c, p)
            for thr, ci, pi in pts:
                curves.append({"method": m, "n": 20, "subset": subset, "threshold": thr,
                               "completeness": ci, "purity": pi - dp})  # fmt: skip
            rows.append({"method": m, "n": 20, "subset": subset, "n_labels": n1,
                         "n_points": N_TRUE, "opt_threshold": t, "opt_completeness": c,
                         "opt_purity": p - dp, "opt_n_tp": nopt - 5, "opt_n_fp": 5,
                         "completeness_p1": c1, "purity_p1": p1 - dp})  # fmt: skip
    return pd.DataFrame(curves), pd.DataFrame(rows)


def calibration_table() -> pd.DataFrame:
    """Two bins per (n, subset). n = 20 'all': bins (n=10, mean 0.1, frac 0.2) and
    (n=30, mean 0.9, frac 0.8): ECE = (10*0.1 + 30*0.1) / 40 = 0.1."""
    rows = []
    for n in NS:
        for subset in ("all", "normal"):
            rows.append({"n": n, "subset": subset, "bin_lo": 0.0, "bin_hi": 0.5, "n_labels": 10,
                         "n_false": 2, "mean_p_fp": 0.1, "frac_false": 0.2, "frac_false_se": 0.1})  # fmt: skip
            rows.append({"n": n, "subset": subset, "bin_lo": 0.5, "bin_hi": 1.0, "n_labels": 30,
                         "n_false": 24, "mean_p_fp": 0.9, "frac_false": 0.8, "frac_false_se": 0.07})  # fmt: skip
    return pd.DataFrame(rows)


def expert_clicks_table() -> pd.DataFrame:
    """Expert clicks on subjects 1..3 (not 4): inside clumps 0, 3, 6 and 8 of n = 20,
    plus one miss; subject 3 also has an empty classification row."""
    lab = labels_table(20)
    hits = lab.iloc[[0, 3, 6, 8]]
    pts = pd.DataFrame({"subject_id": hits.subject_id, "x": hits.x + 2, "y": hits.y - 2})
    extra = pd.DataFrame({"subject_id": [2, 3], "x": [390.0, np.nan], "y": [10.0, np.nan]})
    pts = pd.concat([pts, extra], ignore_index=True)
    pts["unusual"] = False
    pts["classification_id"] = np.arange(len(pts)) + 1000
    pts["volunteer"] = "expert_1"
    return pts


#: difference ours − MeanShift for subjects 1..5: 2 more, 2 equal, 1 fewer
DIFF = [2, 1, 0, 0, -1]


def make_results(root: Path, images: bool = True) -> Path:
    """A results folder laid out as the workflow writes it, with the tables above."""
    root = Path(root)
    for n in NS:
        d = root / "aggregate" / "paper" / f"n{n}"
        d.mkdir(parents=True, exist_ok=True)
        labels_table(n).to_parquet(d / "labels.parquet")
        subjects_table(n).to_parquet(d / "subjects.parquet")
        volunteers_table().to_parquet(d / "volunteers.parquet")
        assignments_table().to_parquet(d / "assignments.parquet")
    (root / "subsamples" / "n20").mkdir(parents=True, exist_ok=True)
    assignments_table().drop(columns="cluster").to_parquet(
        root / "subsamples" / "n20" / "boxes.parquet"
    )
    (root / "subjects").mkdir(exist_ok=True)
    pd.DataFrame(
        {
            "subject_id": np.arange(1, 6),
            "image_width": [200, 400, 400, 400, 400],
            "image_height": [100, 400, 400, 400, 400],
        }
    ).to_parquet(root / "subjects" / "subjects.parquet")
    cmp_ = root / "compare" / "paper"
    cmp_.mkdir(parents=True, exist_ok=True)
    curve_table(0.1).to_csv(cmp_ / "experts_curve.csv", index=False)
    summary_table().to_csv(cmp_ / "experts_summary.csv", index=False)
    curve_table(0.0).to_csv(cmp_ / "truth_curve.csv", index=False)
    summary_table(with_ece=True).to_csv(cmp_ / "truth_summary.csv", index=False)
    calibration_table().to_csv(cmp_ / "truth_calibration.csv", index=False)
    (root / "clicks").mkdir(exist_ok=True)
    expert_clicks_table().to_parquet(root / "clicks" / "expert_clicks.parquet")
    base = root / "baseline"
    base.mkdir(exist_ok=True)
    pd.DataFrame(
        {
            "subject_id": np.arange(1, 6),
            "n_ours": [3, 3, 3, 1, 0],
            "n_meanshift": [1, 2, 3, 1, 1],
            "diff_meanshift": DIFF,
        }
    ).to_csv(base / "count_difference.csv", index=False)
    pd.DataFrame(
        {
            "subject_id": [1, 2, 2, 5],
            "x": [100.0, 200, 20, 50],
            "y": [50.0, 200, 20, 50],
            "box_side": 20.0,
        }  # fmt: skip
    ).to_parquet(base / "meanshift_labels.parquet")
    gen = root / "aggregate" / "generative" / "n20"  # the default model, with gold verdicts
    gen.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(
        {
            "subject_id": [1, 1, 2, 2, 3],
            "p_fp": [0.05, 0.9, 0.1, 0.2, 0.95],
            "p_empty": [0.0, 0.01, 0.0, 0.0, 0.02],
            "gold_real": [1.0, 0.0, 1.0, 1.0, 0.0],
        }
    ).to_parquet(gen / "labels.parquet")
    pd.DataFrame(
        {
            "subject_id": [1, 2, 3],
            "expected_count": [1.2, 1.8, 0.1],
            "count_low": [1, 2, 0],
            "count_high": [2, 2, 1],
            "gold_count": [1.0, 2.0, 0.0],
        }
    ).to_parquet(gen / "subjects.parquet")
    curve, summary = method_tables()
    for ref in ("truth", "experts"):
        curve.to_csv(base / f"{ref}_curve.csv", index=False)
        summary.to_csv(base / f"{ref}_summary.csv", index=False)
    if images:
        png = root / "images" / "sim" / "png"
        png.mkdir(parents=True, exist_ok=True)
        rgb = np.zeros((100, 200, 3), np.uint8)
        rgb[:, :, 0] = 200
        Image.fromarray(rgb).save(png / "1.png")
        pd.DataFrame({"subject_id": [1, 2], "png": ["png/1.png", "png/2.png"]}).to_parquet(
            root / "images" / "sim" / "cutouts.parquet"
        )  # subject 2's PNG is missing on purpose: blank frame
    return root


#: figure -> (width, height) in inches, as the plotting functions make them
SIZES = {
    "clump_fpp_dist": (12.0, 4.5),
    "clump_variance_dist": (12.0, 4.5),
    "clump_location_vs_pfp": (2.9 * 4 + 1.2, 3.6),
    "pseudo_roc_volunteer_counts": (5.4 * 2 + 1.0, 5.0),
    "pseudo_roc_truth": (5.4 * 2 + 1.0, 5.0),
    "volunteer_normal_set_fpp_dist": (6.0, 4.5),
    "pfp_calibration_truth": (11.0, 4.5),
    "worker_skill_evolution": (6.0, 10.0),
    "subject_risk_param_evolution": (12.0, 8.0),
    "clumps_per_galaxy_filtered": (6.5, 8.0),
    "retirement_reason_fraction": (6.0, 4.5),
    "agg_v_ms_dist": (6.0, 4.5),
    "agg_v_ms_more_examples": (12.0, 3.1 * 2 + 0.3),  # 2 subjects with diff > 0 (< 4 asked)
    # 1 subject with diff < 0, without an image: no subject column
    "agg_v_ms_less_examples": (9.0, 3.1 * 1 + 0.3),
    "agg_examples": (12.0, 3.1 * 2),  # subjects 1 and 2: good clump + dummy box
    "method_comparison": (5.0 * 2 + 5.5, 4.8),  # truth and experts panels + label counts
    "gold_reliability": (6.0, 4.6),
    "gold_counts": (6.0, 4.6),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Run ``clumpscout figures`` once on the synthetic results folder."""
    from clumpscout.cli import main

    root = make_results(tmp_path_factory.mktemp("results"))
    out = root / "figures"
    cfg = root / "config.yaml"
    cfg.write_text(f"figures:\n  dpi: {DPI}\n  n_ref: 20\n  n_examples: 4\n")
    rc = main(
        [
            "figures",
            "--results",
            str(root),
            "--out",
            str(out),
            "--n",
            *map(str, NS),
            "--config",
            str(cfg),
            "--seed",
            "7",
        ]  # fmt: skip
    )
    assert rc == 0
    return out


def stats_of(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.json").read_text())


# ---------------------------------------------------------------- files


@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_figure_written_with_expected_size(built, name):
    png, pdf = built / f"{name}.png", built / f"{name}.pdf"
    assert png.stat().st_size > 0 and pdf.stat().st_size > 0
    with Image.open(png) as im:
        im.load()
        w, h = SIZES[name]
        assert im.size == (round(w * DPI), round(h * DPI))
    assert pdf.read_bytes().startswith(b"%PDF")
    assert b"CreationDate" not in pdf.read_bytes()


def test_every_registered_figure_is_built(built):
    assert set(paper.FIGURES) == set(SIZES)
    assert {p.stem for p in built.glob("*.png")} == set(SIZES)


def test_gold_figure_numbers(built):
    """Hand-computed: five gold labels, two not counted by the experts (p_fp 0.9, 0.95);
    expected counts 1.2, 1.8, 0.1 against 1, 2, 0."""
    rel = stats_of(built, "gold_reliability")
    assert rel["labels"] == 5
    # p_empty: every label below 0.1, 2 of 5 false: ECE = |2/5 - mean p_empty| = 0.4 - 0.006
    assert rel["ece"]["p_empty"] == pytest.approx(0.4 - 0.006)
    cnt = stats_of(built, "gold_counts")
    assert cnt["subjects"] == 3 and cnt["experts_total"] == 3.0
    assert cnt["bias"] == pytest.approx((0.2 - 0.2 + 0.1) / 3)
    assert cnt["mae_rounded"] == 0.0


# ---------------------------------------------------------------- numbers per figure


def test_pfp_distribution_numbers(built):
    s = stats_of(built, "clump_fpp_dist")
    assert s["n_ref"] == 20 and s["n_clumps_ref"] == 10
    assert s["n_below_inset"] == 3
    assert s["frac_below_inset"] == pytest.approx(0.3)
    assert s["frac_outside_0.2_0.8"] == pytest.approx(0.8)
    assert s["per_n"]["20"]["median"] == pytest.approx(0.45)
    assert s["per_n"]["3"]["median"] == pytest.approx(0.04)
    assert s["per_n"]["3"]["count"] == 4


def test_psigma_distribution_numbers(built):
    s = stats_of(built, "clump_variance_dist")
    assert s["n_below_inset"] == 4 and s["frac_below_inset"] == pytest.approx(0.4)
    assert s["per_n"]["20"]["median"] == pytest.approx(0.02)


def test_clump_positions_numbers(built):
    bins = stats_of(built, "clump_location_vs_pfp")["bins"]
    # p_fp bins [0,.2) [.2,.5) [.5,.8) [.8,1]: clumps 0-3 | 4 | 5 | 6-9
    assert [b["count"] for b in bins] == [4, 1, 1, 4]
    # outside R > 0.25: clump 2 (bin 0), clump 5 (bin 2), clump 7 (bin 3); clump 1 is on R=0.25
    assert [b["n_outside"] for b in bins] == [1, 0, 1, 1]
    assert bins[0]["frac_outside"] == pytest.approx(0.25)


def test_normalised_offsets_use_each_subject_size():
    lab = labels_table(20)
    sizes = pd.DataFrame({"subject_id": [1], "image_width": [200], "image_height": [100]})
    pos = clumps.normalised_offsets(lab, sizes)
    assert pos["X"].iloc[1] == pytest.approx(0.25) and pos["Y"].iloc[1] == pytest.approx(0.0)
    assert pos["R"].iloc[5] == pytest.approx(math.hypot(20 / 400 - 0.5, 20 / 400 - 0.5))
    # without sizes every image is 400 x 400
    assert clumps.normalised_offsets(lab)["X"].iloc[0] == pytest.approx(100 / 400 - 0.5)


def test_purity_completeness_markers_from_summary(built):
    s = stats_of(built, "pseudo_roc_volunteer_counts")
    m = s["all"]["20"]
    assert m["optimal"] == {"threshold": 1.0, "completeness": 0.9, "purity": 0.3}
    assert m["max_p"]["purity"] == pytest.approx(0.9)
    assert m["max_p"]["completeness"] == pytest.approx(0.2)
    assert s["all"]["3"]["optimal"]["completeness"] == pytest.approx(0.72)
    assert set(s) - {"figure"} == {"all", "normal"}


def test_method_comparison_numbers(built):
    s = stats_of(built, "method_comparison")
    assert s["methods"] == ["generative", "paper", "single_linkage", "dbscan", "meanshift"]
    assert s["n"] == 20 and s["subset"] == "all" and s["n_true_clumps"] == N_TRUE
    for ref in ("truth", "experts"):
        for m, (t, c, p, c1, p1, n1, nopt) in METHOD_NUMBERS.items():
            v = s[ref][m]
            assert (v["opt_threshold"], v["opt_completeness"], v["opt_purity"]) == (t, c, p)
            assert (v["completeness_p1"], v["purity_p1"]) == (c1, p1)
            assert (v["n_labels_p1"], v["n_labels_opt"]) == (n1, nopt)
    labels = report_labels("method_comparison", built / "method_comparison.json")
    assert "generative model C 0.8 P 0.9" in labels["ours"]


def test_method_comparison_with_the_experts_only(tmp_path):
    curve, summary = method_tables()
    s = truth.plot_method_comparison(
        {"experts": curve}, {"experts": summary}, tmp_path / "m", dpi=DPI
    )
    assert set(s) >= {"experts"} and "truth" not in s and math.isnan(s["n_true_clumps"])
    with Image.open(tmp_path / "m.png") as im:
        assert im.size == (round((5.0 + 5.5) * DPI), round(4.8 * DPI))
    with pytest.raises(InputError, match="neither"):
        truth.plot_method_comparison({}, {}, tmp_path / "x", dpi=DPI)


def test_curve_markers_by_hand():
    c = pd.DataFrame(
        {"threshold": [0.0, 0.5, 1.0], "completeness": [0.2, 0.5, 0.9], "purity": [0.9, 0.7, 0.3]}
    )
    m = experts.curve_markers(c)
    # hypot: 0.922, 0.860, 0.949 -> the last point
    assert m["optimal"]["threshold"] == 1.0
    assert m["max_c"]["threshold"] == 1.0 and m["max_p"]["threshold"] == 0.0
    # ties in completeness: the higher purity wins
    c2 = pd.DataFrame(
        {
            "threshold": [0.0, 0.5, 1.0],
            "completeness": [0.9, 0.9, 0.9],
            "purity": [np.nan, 0.4, 0.6],
        }
    )
    m2 = experts.curve_markers(c2)
    assert m2["max_c"]["purity"] == 0.6 and m2["optimal"]["threshold"] == 1.0


def test_empirical_matches_and_true_false_figure(built):
    lab = labels_table(20)
    m = experts.empirical_matches(lab, expert_clicks_table())
    # subject 4 (clump 9) had no expert: left out
    assert len(m) == 9
    assert m["tp"].tolist() == [True, False, False, True, False, False, True, False, True]
    assert m["normal"].tolist() == [True, True, False] + [True] * 6
    s = stats_of(built, "volunteer_normal_set_fpp_dist")
    # normal clumps: TP = clumps 0, 3, 6, 8 (p_fp .001 .05 .85 .95); FP = 1, 4, 5, 7
    assert s["n_tp"] == 4 and s["n_fp"] == 4
    assert s["frac_tp_below_cut"] == pytest.approx(0.5)  # .001, .05 < 0.3
    assert s["frac_fp_below_cut"] == pytest.approx(0.25)  # .005 (clump 1)
    assert s["n_tp_below_inset"] == 1 and s["n_fp_below_inset"] == 1


def test_calibration_figure_ece(built):
    s = stats_of(built, "pfp_calibration_truth")
    assert s["ece"]["all"]["20"] == pytest.approx(0.1)
    assert truth.expected_calibration_error(
        calibration_table().query("n == 3 and subset == 'all'")
    ) == (pytest.approx(0.1))


def test_skill_bins_and_statistics(built):
    assert volunteers.skill_bins(np.array([1, 12])).tolist() == [1, 2, 3, 5, 10, 20]
    assert volunteers.skill_bins(np.array([1])).tolist() == [1, 2]
    assert volunteers.skill_bins(np.array([20])).tolist()[-2:] == [20, 50]
    t = volunteers.skill_statistics(volunteers_table(), volunteers.skill_bins(np.array(VOL_N)))
    assert t["count"].tolist() == [2, 1, 1, 0, 1]
    assert t["p_fp_median"].iloc[0] == pytest.approx(0.2)  # (0.1 + 0.3) / 2
    assert t["sigma_mean"].iloc[0] == pytest.approx(0.25)  # (0.2 + 0.3) / 2
    assert np.isnan(t["p_fp_median"].iloc[3])
    s = stats_of(built, "worker_skill_evolution")
    assert s["n_volunteers"] == 5 and s["median_subjects"] == 2
    assert s["frac_below_10"] == pytest.approx(0.8) and s["n_above_200"] == 0


def test_risk_components_numbers(built):
    lab = pd.DataFrame({"n": 5, "subject_id": [1, 1, 1, 2], "p_fp": [0.1, 0.9, 0.5, 0.86]})
    f = risk.filtered_n_fp(lab, 0.85).set_index("subject_id")["n_fp_cut"]
    assert f.loc[1] == pytest.approx(0.6) and 2 not in f.index
    s = stats_of(built, "subject_risk_param_evolution")
    assert s["n_fp"]["per_n"]["20"]["frac_above_1"] == pytest.approx(0.5)
    assert s["n_fp"]["n_undefined"] == 1  # subject 5 at n = 20
    # n = 20 after dropping p_fp > 0.85: subj 1: .001+.005+.009, 2: .05+.3+.6, 3: .85, 4: 0
    assert s["n_fp_cut"]["per_n"]["20"]["mean"] == pytest.approx((0.015 + 0.95 + 0.85) / 4)
    assert s["n_fn"]["per_n"]["20"]["frac_above_1"] == pytest.approx(0.25)
    # zeros cannot be drawn on the log part: counted (the two zeros of n_fp at n = 3)
    assert s["n_fp"]["n_below_floor"] == 2


def test_logit_limits():
    p = np.r_[np.full(990, 0.3), np.full(10, 1e-9)]  # the 0.5 % quantile is 1e-9
    lo, hi = common.logit_limits(p)
    assert lo == pytest.approx(1e-9) and hi == pytest.approx(0.99)  # >= [0.01, 0.99]
    p = np.r_[np.full(990, 1e-30), np.full(10, 1 - 3e-4)]
    lo, hi = common.logit_limits(p)
    assert lo == pytest.approx(1e-15) and hi == pytest.approx(1 - 1e-4)
    assert common.logit_limits(np.array([0.0, 1.0])) == (1e-3, 1 - 1e-3)


def test_report_labels_ours_next_to_paper(built):
    lab = report_labels("clump_fpp_dist", built / "clump_fpp_dist.json")
    assert set(lab) == {"figure", "ours", "paper"}
    assert "30.0% < 0.01" in lab["ours"] and "80.0% outside" in lab["ours"]
    assert "n=3: 0.04 → n=20: 0.45" in lab["ours"] and "≈5e-5" in lab["paper"]
    ms = report_labels("agg_v_ms_dist", built / "agg_v_ms_dist.json")
    assert "ours more 40.0%" in ms["ours"] and "MeanShift more 20.0%" in ms["ours"]
    for name in paper.FIGURES:  # every figure has labels, with or without its numbers
        assert report_labels(name, built / f"{name}.json")["ours"] not in ("", "–"), name
        missing = report_labels(name, built / "missing.json")
        assert missing["ours"] == "–" and missing["paper"]


def test_log_linear_axis_round_trip():
    t = risk.LogLinear(1.0, 1e-4)
    y = np.array([1e-4, 0.01, 0.5, 1.0, 2.0, 10.0])
    assert np.allclose(t.inverse(t.forward(y)), y)
    assert t.forward(0.1) == pytest.approx(-1.0)
    assert t.forward(1.0 + math.log(10)) == pytest.approx(1.0)  # slope matches at the switch
    assert t.forward(0.0) == pytest.approx(-4.0)  # zero drawn at the floor


def test_clumps_per_galaxy_numbers(built):
    subj = pd.DataFrame({"n": 5, "subject_id": [1, 2, 3, 4]})
    lab = pd.DataFrame({"n": 5, "subject_id": [1, 1, 1, 2], "p_fp": [0.1, 0.9, 0.2, 0.95]})
    assert risk.clumps_per_subject(subj, lab)["clumps"].tolist() == [3, 1, 0, 0]
    assert risk.clumps_per_subject(subj, lab, 0.85)["clumps"].tolist() == [2, 0, 0, 0]
    s = stats_of(built, "clumps_per_galaxy_filtered")
    assert s["all"]["20"]["mean"] == pytest.approx(10 / 5)  # subject 5 has none
    assert s["cut"]["20"]["mean"] == pytest.approx(6 / 5)  # p_fp < .85: clumps 0-5
    assert s["all"]["3"]["galaxies"] == 5


def test_retirement_fractions(built):
    s = stats_of(built, "retirement_reason_fraction")["fractions"]
    assert s["3"] == {"retired": 0.4, "retired_empty": 0.2, "stale": 0.2, "unretired": 0.2}
    assert s["20"]["retired"] == pytest.approx(0.6) and s["20"]["unretired"] == 0.0
    odd = pd.DataFrame({"n": [3, 3], "status": ["retired", "bogus"]})
    assert risk.status_fractions(odd).loc[3, "other"] == pytest.approx(0.5)


def test_meanshift_difference_numbers(built):
    s = stats_of(built, "agg_v_ms_dist")
    assert s["subjects"] == 5
    assert (s["frac_ours_more"], s["frac_equal"], s["frac_meanshift_more"]) == (0.4, 0.4, 0.2)


def test_meanshift_examples_pick_the_right_subjects(built):
    more = stats_of(built, "agg_v_ms_more_examples")["subjects"]
    less = stats_of(built, "agg_v_ms_less_examples")["subjects"]
    assert [r["subject_id"] for r in more] == [1, 2]  # diff > 0
    assert [r["subject_id"] for r in less] == [5]
    assert more[0]["ours"] == 3 and more[0]["meanshift"] == 1
    assert more[1]["meanshift"] == 2 and less[0]["meanshift"] == 1
    # subject 1: p_fp .001 .005 .009, none dashed; subject 2: none > 0.8
    assert more[0]["dashed"] == 0
    assert more[0]["image"] is True and more[1]["image"] is False


def test_annotation_examples_counts(built):
    s = stats_of(built, "agg_examples")["subjects"]
    # candidates: clump with p_fp < 0.5 and a dummy box -> subjects 1, 2 (3's clumps are >= .85)
    assert [r["subject_id"] for r in s] == [1, 2]
    one = s[0]
    assert one == {"subject_id": 1, "image": True, "boxes": 10, "dummy_boxes": 1,
                   "clusters": 3, "labels": 3, "dashed": 0}  # fmt: skip
    assert s[1]["boxes"] == 10 and s[1]["dummy_boxes"] == 1  # the NaN row is not a box


def test_annotation_examples_dashed_boxes_direct(tmp_path):
    lab = labels_table(20)
    a = assignments_table()
    img = np.full((400, 400, 3), 30, np.uint8)
    s = examples.plot_annotation_examples(
        [3], a[a.subject_id == 3], lab, tmp_path / "ex", images={3: img}, p_fp_dashed=0.8, dpi=DPI
    )
    # subject 3: p_fp .85 .9 .95, all dashed above 0.8; none above 0.92 -> 1
    assert s["subjects"][0]["dashed"] == 3 and s["subjects"][0]["image"] is True
    s2 = examples.plot_annotation_examples([3], a, lab, tmp_path / "ex2", p_fp_dashed=0.92, dpi=DPI)
    assert s2["subjects"][0]["dashed"] == 1 and s2["subjects"][0]["image"] is False


def test_pick_examples_seeded_sorted_subset():
    cand = list(range(100, 150))
    a = examples.pick_examples(cand, 5, seed=3)
    assert a == examples.pick_examples(cand[::-1], 5, seed=3)
    assert a == sorted(a) and len(set(a)) == 5 and set(a) <= set(cand)
    assert a != examples.pick_examples(cand, 5, seed=4)
    assert examples.pick_examples([3, 1, 3], 5, seed=0) == [1, 3]


# ---------------------------------------------------------------- robustness


def test_same_data_same_bytes(tmp_path):
    d = pd.DataFrame({"subject_id": [1, 2, 3], "diff_meanshift": [1, 0, -2]})
    meanshift.plot_meanshift_difference(d, tmp_path / "a", dpi=DPI)
    meanshift.plot_meanshift_difference(d, tmp_path / "b", dpi=DPI)
    for ext in ("png", "pdf"):
        assert (tmp_path / f"a.{ext}").read_bytes() == (tmp_path / f"b.{ext}").read_bytes()


def test_empty_inputs_still_make_figures(tmp_path):
    lab = labels_table(20).iloc[:0].assign(n=pd.Series(dtype="int64"))
    s = clumps.plot_pfp_distribution(lab, tmp_path / "empty", dpi=DPI)
    assert s["n_clumps_ref"] == 0 and (tmp_path / "empty.png").exists()
    s = experts.plot_pfp_true_false(pd.DataFrame({"p_fp": [], "tp": []}), tmp_path / "tf", dpi=DPI)
    assert s["n_tp"] == 0 and (tmp_path / "tf.pdf").exists()


def test_missing_column_and_file_are_input_errors(tmp_path):
    p = tmp_path / "labels.parquet"
    labels_table(20).drop(columns="p_fp").to_parquet(p)
    with pytest.raises(InputError, match="p_fp") as e:
        common.read_table(p, ["subject_id", "p_fp"], "labels")
    assert str(p) in e.value.one_line()
    with pytest.raises(InputError, match="not found"):
        common.read_table(tmp_path / "nope.parquet", ["x"], "labels")
    with pytest.raises(InputError, match="unknown figure"):
        paper.build("nope", {}, tmp_path / "x", {"ns": [20]})
    with pytest.raises(InputError, match="2 files for 1"):
        common.read_stacked([p, p], [20], ["subject_id"], "labels")


def test_cli_data_error_is_one_line(tmp_path, capsys):
    from clumpscout.cli import main

    root = make_results(tmp_path / "r", images=False)
    labels_table(20).drop(columns="p_sigma").to_parquet(root / "aggregate/paper/n20/labels.parquet")
    rc = main(["figures", "--results", str(root), "--out", str(tmp_path / "f"), "--n", "3", "20",
               "--only", "clump_variance_dist"])  # fmt: skip
    assert rc == 2
    err = capsys.readouterr().err
    assert "p_sigma" in err and "Traceback" not in err
    assert not (tmp_path / "f" / "clump_variance_dist.png").exists()


def test_image_paths_from_table_folder_and_files(tmp_path):
    root = make_results(tmp_path / "r")
    table = root / "images" / "sim" / "cutouts.parquet"
    found = common.image_paths([table])
    assert found[1] == root / "images/sim/png/1.png" and 2 in found
    assert common.load_images([table], [1, 2, 3]).keys() == {1}  # 2's file is missing
    assert common.image_paths([root / "images"]) == {1: root / "images/sim/png/1.png"}
    assert common.load_images([root / "images/sim/png/1.png"], [1])[1].shape == (100, 200, 3)


def test_every_figure_has_a_valid_caption_and_a_rule():
    import io

    from docutils.core import publish_parts

    repo = Path(__file__).resolve().parents[1]
    smk = (repo / "workflow/rules/figures.smk").read_text()
    for name in [*paper.FIGURES, "headline", "workflow"]:
        rst = repo / "workflow/report" / f"{name}.rst"
        text = rst.read_text()
        assert "{{" not in text and "{%" not in text  # captions are Jinja templates too
        err = io.StringIO()
        publish_parts(text, writer="html", settings_overrides={"warning_stream": err})
        assert not err.getvalue(), (name, err.getvalue())
    # one rule per registered figure, generated from the registry
    assert "for _fig in FIGURE_REGISTRY.FIGURES:" in smk and 'f"fig_{_fig.name}"' in smk


# ------------------------------------------------- figure defects, each with a test that can fail


@pytest.fixture
def drawn(monkeypatch):
    """The matplotlib figures the plotting functions save (drawn once, for text sizes)."""
    figs = []

    def keep(module):
        original = module.save_figure

        def save(fig, stem):
            figs.append(fig)
            return original(fig, stem)

        monkeypatch.setattr(module, "save_figure", save)

    keep.figs = figs
    return keep


def test_colour_bar_counts_items_per_bin(tmp_path, drawn):
    # 50 clumps at n = 3 all beyond the axis (one edge bin), 7 at n = 20 in one bin: the
    # colour bar runs from 1 to 50 clumps per bin (it used to reach 1e17 "per unit p")
    drawn(clumps)
    lab = pd.DataFrame({"n": [3] * 50 + [20] * 7, "p_fp": [1e-30] * 50 + [0.3] * 7})
    s = clumps.plot_pfp_distribution(lab, tmp_path / "p", n_ref=20, dpi=DPI)
    assert s["colour_max"] == 50
    (cbar_ax,) = [a for a in drawn.figs[0].axes if a.get_label() == "<colorbar>"]
    assert cbar_ax.get_ylim()[1] == pytest.approx(50)
    assert cbar_ax.get_ylabel() == "clumps per bin"


def test_risk_colour_bar_counts_subjects_per_bin(tmp_path):
    subj = pd.DataFrame({"n": [3] * 6, "subject_id": range(6), "n_fp": [0.5] * 6,
                         "n_fn": [0.5] * 6, "n_sigma": [0.5] * 6})  # fmt: skip
    lab = pd.DataFrame({"n": [3], "subject_id": [0], "p_fp": [0.5]})
    s = risk.plot_risk_components(subj, lab, tmp_path / "r", dpi=DPI)
    assert s["n_fp"]["colour_max"] == 6 and s["n_sigma"]["colour_max"] == 6


def test_beyond_the_axis_note_sits_above_the_data(tmp_path, drawn):
    drawn(clumps)
    lab = pd.DataFrame({"n": [3] * 5 + [20] * 5, "p_fp": [1e-30, 0.1, 0.2, 0.3, 0.4] * 2})
    s = clumps.plot_pfp_distribution(lab, tmp_path / "p", n_ref=20, dpi=DPI)
    assert s["n_clipped"] == 2
    ax_r = drawn.figs[0].axes[1]
    assert ax_r.get_title() == "2 of 10 values beyond the axis, drawn at its edge"
    assert not ax_r.texts  # nothing drawn over the bins


def test_retirement_legend_in_words(tmp_path, drawn):
    drawn(risk)
    subj = pd.DataFrame({"n": 3, "status": ["retired", "retired_empty", "stale", "unretired"]})
    risk.plot_retirement_reasons(subj, tmp_path / "r", dpi=DPI)
    texts = [t.get_text() for t in drawn.figs[0].axes[0].get_legend().get_texts()]
    assert texts == [
        "retired (risk criterion)",
        "retired, nothing marked",
        "stale (cycle limit reached)",
        "not retired",
    ]
    assert not any("_" in t for t in texts)


def test_sparse_calibration_bins_are_merged_by_hand():
    # 1 + 6 + 3 = 10 labels; 30; a remainder of 2 joins the bin before it: 10, 32
    t = pd.DataFrame({"bin_lo": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5], "bin_hi": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
                      "n_labels": [1, 6, 3, 0, 30, 2], "mean_p_fp": [0.05, 0.15, 0.25, np.nan, 0.45, 0.55],
                      "frac_false": [1.0, 0.5, 0.0, np.nan, 0.5, 1.0]})  # fmt: skip
    m = truth.merge_sparse_bins(t, 10)
    assert m["n_labels"].tolist() == [10, 32]
    assert m["bin_lo"].tolist() == [0.0, 0.4] and m["bin_hi"].tolist() == [0.3, 0.6]
    assert m["frac_false"].iloc[0] == pytest.approx(0.4)  # (1 + 3 + 0) / 10
    assert m["mean_p_fp"].iloc[0] == pytest.approx((0.05 + 0.9 + 0.75) / 10)
    assert m["frac_false_se"].iloc[0] == pytest.approx(math.sqrt(0.4 * 0.6 / 10))
    assert m["frac_false"].iloc[1] == pytest.approx(17 / 32)
    # fewer than min_labels in all: one bin
    assert truth.merge_sparse_bins(t, 1000)["n_labels"].tolist() == [42]


def test_calibration_figure_bins_hold_enough_clumps(built):
    s = stats_of(built, "pfp_calibration_truth")
    assert s["min_labels"] == 20
    for subset in ("all", "normal"):  # bins of 10 and 30 at n = 20 -> one bin of 40
        assert [b["n_labels"] for b in s["bins"][subset]] == [40]


def test_flux_tick_labels_do_not_overlap(tmp_path, drawn):
    from clumpscout.figures import flux

    drawn(flux)
    rng = np.random.default_rng(1)
    n = 40
    phot = pd.DataFrame({"expert_match": ["tp", "fp"] * (n // 2)})
    for b in ("g", "r", "i"):  # under a decade: the old labels were 3×10⁻¹ 4×10⁻¹ ...
        phot[f"flux_{b}"] = rng.uniform(0.25, 0.9, n)
    for r in flux.RATIOS:
        phot[r] = rng.uniform(0.9, 1.2, n)
    flux.plot_flux_true_false(phot, tmp_path / "f", dpi=100)
    fig = drawn.figs[0]
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:3]:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()
                 if t.get_visible() and t.get_text()]  # fmt: skip
        assert len(boxes) >= 2
        boxes.sort(key=lambda bb: bb.x0)
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))


# ------------------------------------------------------------ wording that follows the data


def test_generic_wording_speaks_of_objects_per_image(tmp_path, drawn):
    drawn(risk)
    subj = pd.DataFrame({"n": [3, 3, 20, 20], "subject_id": [1, 2, 1, 2]})
    lab = pd.DataFrame({"n": [3, 20], "subject_id": [1, 1], "p_fp": [0.1, 0.1]})
    risk.plot_clumps_per_galaxy(subj, lab, tmp_path / "c", dpi=DPI, wording="generic")
    risk.plot_clumps_per_galaxy(subj, lab, tmp_path / "d", dpi=DPI)
    generic, paper_words = drawn.figs
    assert generic.axes[0].get_ylabel() == "objects per image"
    assert paper_words.axes[0].get_ylabel() == "clumps per galaxy"


def test_examples_without_images_have_no_subject_column(tmp_path):
    a = assignments_table()
    lab = labels_table(20)
    s = examples.plot_annotation_examples([1, 2], a, lab, tmp_path / "e", dpi=DPI)
    with Image.open(tmp_path / "e.png") as im:  # three columns of 3 in, no empty panel
        assert im.size == (round(9.0 * DPI), round(3.1 * 2 * DPI))
    assert not any(r["image"] for r in s["subjects"])


def test_wording_rule():
    assert registry.wording("simulate", "galaxy") == "clump_scout"
    assert registry.wording("simulate", None) == "clump_scout"
    assert registry.wording("simulate", "counting") == "generic"
    assert registry.wording("export") == "generic"
    assert registry.wording("export", None, "clump_scout") == "clump_scout"
    assert registry.wording("simulate", "galaxy", "generic") == "generic"


def test_report_has_no_paper_column_for_generic_data(tmp_path):
    (tmp_path / "x.json").write_text(json.dumps({"wording": "generic", "subjects": []}))
    lab = report_labels("agg_examples", tmp_path / "x.json")
    assert lab["paper"] == registry.NOT_COMPARABLE


# ------------------------------------------------------------------------------ the registry


def test_registry_drives_dispatch_and_paper_numbers():
    from clumpscout.report import headline

    assert list(paper.FIGURES) == [f.name for f in registry.FIGURES]
    assert headline.PAPER is registry.PAPER
    assert registry.PAPER[("median_p_fp", 20, None)] == "≈5e-5"
    fig = registry.figure("agg_v_ms_more_examples")
    paths = registry.input_paths(fig, results="results", ns=[3, 20], n_ref=20, n_base=7,
                                 model="paper", images=["i.parquet"], have=["truth"])  # fmt: skip
    assert paths == {
        "count_difference": "results/baseline/count_difference.csv",
        "boxes": "results/subsamples/n7/boxes.parquet",
        "labels": "results/aggregate/paper/n7/labels.parquet",
        "meanshift": "results/baseline/meanshift_labels.parquet",
        "images": ["i.parquet"],
    }
    method = registry.figure("method_comparison")
    assert registry.available(method, ["experts"]) and not registry.available(method, [])
    assert set(registry.input_paths(method, results="r", ns=[3], n_ref=3, n_base=3,
                                    model="paper", images=[], have=["experts"])) == {
        "experts_curves", "experts_summary"}  # fmt: skip
    assert not registry.available(registry.figure("pfp_calibration_truth"), ["experts"])


# Every test that reads the figure set drawn by `built` (about 30 s for the ~30 figures) runs
# in the full suite only; the plotting functions' own tests above stay in the fast lane.
for _name, _test in list(globals().items()):
    if _name.startswith("test_") and "built" in inspect.signature(_test).parameters:
        globals()[_name] = pytest.mark.slow(_test)
