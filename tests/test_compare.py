"""Expert / truth comparison (paper §6.3, decisions.md#expert-comparison): hand-counted toys and properties."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clumpscout.errors import InputError
from clumpscout.evaluation.compare import collect_tables, score_points, score_truth
from clumpscout.metrics.containment import curve_counts, threshold_grid
from clumpscout.metrics.reliability import calibration


def box(sid, x1, y1, side, p, fu):
    return dict(subject_id=sid, x1=x1, y1=y1, x2=x1 + side, y2=y1 + side, p_fp=p, frac_unusual=fu)


# Labels (p_fp chosen off the 0.1 grid). L6 is in subject 3, which no expert saw.
LABELS = pd.DataFrame(
    [
        box(1, 0, 0, 10, 0.12, 0.0),  # L1: contains e1, e2
        box(1, 20, 20, 10, 0.62, 0.8),  # L2: contains e3 (unusual); label mostly unusual
        box(1, 50, 50, 10, 0.93, 0.0),  # L3: empty -> FP
        box(2, 0, 0, 10, 0.33, 0.2),  # L4: contains e5 (unusual)
        box(2, 100, 100, 10, 0.05, 0.0),  # L5: empty -> FP
        box(3, 0, 0, 10, 0.00, 0.0),  # L6: not an expert subject
        box(4, 0, 0, 10, 0.55, 0.0),  # L7: empty -> FP
    ]
)
NAN = float("nan")
POINTS = pd.DataFrame(
    {
        "subject_id": [1, 1, 1, 1, 2, 2, 2, 4],
        "x": [5, 6, 25, 80, 5, 200, NAN, NAN],
        "y": [5, 6, 25, 80, 5, 200, NAN, NAN],
        "unusual": pd.array([False, False, True, False, True, False, pd.NA, pd.NA], "boolean"),
    }
)


@pytest.fixture(scope="module")
def scored():
    return score_points(LABELS, POINTS, thresholds=11, tags={"n": 7})


def row(curve, subset, t):
    r = curve[(curve["subset"] == subset) & np.isclose(curve["threshold"], t)]
    assert len(r) == 1
    return r.iloc[0]


# threshold -> (TP, FP, FN), counted by hand from the table above
ALL_COUNTS = {
    0.0: (0, 0, 6),
    0.1: (0, 1, 6),
    0.2: (1, 1, 4),
    0.3: (1, 1, 4),
    0.4: (2, 1, 3),
    0.5: (2, 1, 3),
    0.6: (2, 2, 3),
    0.7: (3, 2, 2),
    0.9: (3, 2, 2),
    1.0: (3, 3, 2),
}
# normal subset: labels L1, L3, L4, L5, L7 (frac_unusual < 0.5); points e1, e2, e4, e6
NORMAL_COUNTS = {0.0: (0, 0, 4), 0.1: (0, 1, 4), 0.2: (1, 1, 2), 0.4: (1, 2, 2), 0.6: (1, 3, 2),
                 1.0: (1, 4, 2)}  # fmt: skip


@pytest.mark.parametrize("subset, counts", [("all", ALL_COUNTS), ("normal", NORMAL_COUNTS)])
def test_hand_counted_tp_fp_fn(scored, subset, counts):
    curve, _ = scored
    for t, (tp, fp, fn) in counts.items():
        r = row(curve, subset, t)
        assert (r.n_tp, r.n_fp, r.n_fn) == (tp, fp, fn), (subset, t)
        c = tp / (tp + fn)
        assert r.completeness == pytest.approx(c)
        if tp + fp:
            assert r.purity == pytest.approx(tp / (tp + fp))
        else:
            assert math.isnan(r.purity)


def test_optimal_max_c_and_max_p_points(scored):
    _, summary = scored
    s = summary.set_index("subset")
    a = s.loc["all"]
    # sqrt(C^2+P^2): t=0.7 gives C=P=0.6 (0.849), better than t=0.4 (0.4, 2/3: 0.777)
    assert a.opt_threshold == pytest.approx(0.7)
    assert (a.opt_completeness, a.opt_purity) == pytest.approx((0.6, 0.6))
    assert (a.opt_n_tp, a.opt_n_fp, a.opt_n_fn) == (3, 2, 2)
    assert a.opt_recall == pytest.approx(4 / 6)  # e1, e2, e3, e5 found
    assert a.max_completeness == pytest.approx(0.6)
    assert a.purity_at_max_completeness == pytest.approx(0.6)  # best purity among max-C ties
    assert a.max_completeness_threshold == pytest.approx(0.7)
    assert a.max_purity == pytest.approx(2 / 3)
    assert a.max_purity_threshold == pytest.approx(0.4)
    assert a.completeness_at_max_purity == pytest.approx(0.4)
    assert (a.completeness_p1, a.purity_p1) == pytest.approx((0.6, 0.5))
    nrm = s.loc["normal"]
    assert nrm.opt_threshold == pytest.approx(0.2)
    assert (nrm.opt_completeness, nrm.opt_purity) == pytest.approx((1 / 3, 1 / 2))
    assert nrm.max_purity == pytest.approx(0.5) and nrm.max_purity_threshold == pytest.approx(0.2)


def test_only_expert_subjects_count_and_everything_is_counted(scored):
    curve, summary = scored
    s = summary.set_index("subset").loc["all"]
    assert s.n_subjects == 3  # subjects 1, 2, 4 (4: only an empty expert classification)
    assert s.n_labels_outside == 1  # L6
    assert s.n_point_rows_without_xy == 2
    assert s.n_labels == 6 and s.n_points == 6
    assert summary.set_index("subset").loc["normal", "n_points"] == 4
    assert list(curve.columns[:2]) == ["n", "subset"] and (curve["n"] == 7).all()
    assert len(curve) == 2 * 11


def test_labels_without_p_fp_are_kept_at_every_threshold():
    curve, summary = score_points(LABELS.drop(columns="p_fp"), POINTS, thresholds=5)
    c = curve[curve["subset"] == "all"]
    assert (c["n_tp"] == 3).all() and (c["n_fp"] == 3).all() and (c["n_fn"] == 2).all()
    assert summary.set_index("subset").loc["all", "opt_threshold"] == 0.0


def test_boundaries_are_closed():
    lab = pd.DataFrame([box(1, 0, 0, 10, 1.0, 0.0)])
    pts = pd.DataFrame({"subject_id": [1, 1], "x": [10.0, 10.0001], "y": [0.0, 5.0]})
    curve, _ = score_points(lab, pts, thresholds=2)
    last = curve[(curve["subset"] == "all")].iloc[-1]  # p* = 1 keeps p_fp = 1
    assert (last.n_tp, last.n_fp, last.n_fn) == (1, 0, 1)


def test_bad_tables_are_input_errors():
    with pytest.raises(InputError, match="x2"):
        score_points(LABELS.drop(columns="x2"), POINTS)
    bad = LABELS.copy()
    bad.loc[2, "p_fp"] = 1.5
    with pytest.raises(InputError, match="p_fp"):
        score_points(bad, POINTS, labels_path="labels.parquet")
    with pytest.raises(InputError):
        threshold_grid(1)


def test_calibration_ece_by_hand():
    p = np.array([0.1, 0.2, 0.3, 0.8, 0.9, 1.0])
    false = np.array([False, False, True, True, True, True])
    table, ece = calibration(p, false, bins=2)
    # bin [0, .5): n=3, mean p=.2, frac false=1/3; bin [.5, 1]: n=3, mean p=.9, frac=1
    assert table["n_labels"].tolist() == [3, 3]
    assert table["mean_p_fp"].tolist() == pytest.approx([0.2, 0.9])
    assert table["frac_false"].tolist() == pytest.approx([1 / 3, 1.0])
    assert ece == pytest.approx((3 * abs(1 / 3 - 0.2) + 3 * 0.1) / 6)
    _, ece_perfect = calibration(np.array([0.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1]), bins=10)
    assert ece_perfect == 0.0
    _, ece_empty = calibration(np.array([]), np.array([], bool))
    assert math.isnan(ece_empty)


def test_score_truth_counts_subjects_without_true_clumps():
    truth = pd.DataFrame(
        {
            "subject_id": [1, 1, 9],
            "clump": [0, 1, 0],
            "x": [5.0, 300.0, 5.0],
            "y": [5.0, 300.0, 5.0],
            "unusual": [False, False, False],
        }  # fmt: skip
    )
    labels = pd.DataFrame(
        [box(1, 0, 0, 10, 0.1, 0.0), box(1, 50, 50, 10, 0.7, 0.0), box(2, 0, 0, 10, 0.9, 0.0)]
    )
    # subjects 1 and 2 were aggregated; subject 9's true clump was never shown (not counted)
    curve, summary, calib = score_truth(
        labels, truth, thresholds=11, subjects=[1, 2], bins=2, tags={"n": 20}
    )
    s = summary.set_index("subset").loc["all"]
    assert s.n_labels == 3 and s.n_points == 2 and s.n_points_outside == 1
    last = row(curve, "all", 1.0)
    assert (last.n_tp, last.n_fp, last.n_fn) == (1, 2, 1)
    assert s.opt_threshold == pytest.approx(0.1)  # only the true label kept: C=.5, P=1
    # calibration: bin [0,.5): p=.1, true -> |0 - .1|; bin [.5,1]: p=.7,.9, both false -> |1 - .8|
    assert s.ece == pytest.approx((0.1 + 2 * 0.2) / 3)
    assert s.n_calibration_labels == 3
    assert set(calib["subset"]) == {"all", "normal"} and (calib["n"] == 20).all()


def brute_force(labels, points, grid):
    out = []
    for t in grid:
        kept = labels[labels["p_fp"] <= t]
        tp = fp = 0
        for _, lb in kept.iterrows():
            p = points[points.subject_id == lb.subject_id]
            inside = (p.x >= lb.x1) & (p.x <= lb.x2) & (p.y >= lb.y1) & (p.y <= lb.y2)
            tp += bool(inside.any())
            fp += not inside.any()
        fn = 0
        for _, pt in points.iterrows():
            k = kept[kept.subject_id == pt.subject_id]
            inside = (pt.x >= k.x1) & (pt.x <= k.x2) & (pt.y >= k.y1) & (pt.y <= k.y2)
            fn += not inside.any()
        out.append((tp, fp, fn))
    return out


@settings(max_examples=25, deadline=None)
@given(
    n_labels=st.integers(0, 8),
    n_points=st.integers(0, 8),
    seed=st.integers(0, 10_000),
)
def test_property_counts_match_brute_force(n_labels, n_points, seed):
    rng = np.random.default_rng(seed)
    x1 = rng.integers(0, 20, n_labels).astype(float)
    y1 = rng.integers(0, 20, n_labels).astype(float)
    labels = pd.DataFrame(
        {
            "subject_id": rng.integers(0, 2, n_labels),
            "x1": x1,
            "y1": y1,
            "x2": x1 + 8,
            "y2": y1 + 8,
            "p_fp": rng.choice([0.0, 0.25, 0.5, 0.8, 1.0], n_labels),
        }  # fmt: skip
    )
    points = pd.DataFrame(
        {
            "subject_id": rng.integers(0, 2, n_points),
            "x": rng.integers(0, 30, n_points) * 1.0,
            "y": rng.integers(0, 30, n_points) * 1.0,
        }  # fmt: skip
    )
    grid = threshold_grid(5)
    curve, _ = score_points(labels, points, thresholds=5, subjects=[0, 1])
    got = curve[["n_tp", "n_fp", "n_fn"]].itertuples(index=False, name=None)
    assert list(got) == brute_force(labels, points, grid)
    assert (np.diff(curve["n_kept"]) >= 0).all() and (np.diff(curve["n_fn"]) <= 0).all()


def test_curve_counts_is_consistent():
    c = curve_counts(
        np.array([0.2, 0.5]), np.array([True, False]), np.array([0.2, np.inf]), np.array([0, 1.0])
    )
    assert c["n_tp"].tolist() == [0, 1] and c["n_fn"].tolist() == [2, 1]
    assert (c["n_points_found"] + c["n_fn"] == c["n_points"]).all()


def test_collect_and_cli(tmp_path):
    from clumpscout.cli import main

    lab = tmp_path / "labels.parquet"
    pts = tmp_path / "experts.parquet"
    LABELS.to_parquet(lab)
    POINTS.to_parquet(pts)
    paths = []
    for n in (5, 3):
        curve, summary = tmp_path / f"n{n}_curve.csv", tmp_path / f"n{n}_summary.csv"
        rc = main(["compare", "--labels", str(lab), "--points", str(pts), "--n", str(n),
                   "--thresholds", "11", "--out-curve", str(curve), "--out-summary", str(summary)])  # fmt: skip
        assert rc == 0
        paths.append(summary)
    table = collect_tables(paths)
    assert table["n"].tolist() == [3, 3, 5, 5]
    assert table["opt_threshold"].iloc[0] == pytest.approx(0.7)
    truth = tmp_path / "truth.csv"
    pd.DataFrame(
        {"subject_id": [1], "clump": [0], "x": [5.0], "y": [5.0], "unusual": [False]}
    ).to_csv(truth, index=False)
    rc = main(["compare", "--kind", "truth", "--labels", str(lab), "--points", str(truth),
               "--subjects", str(lab), "--out-curve", str(tmp_path / "c.csv"),
               "--out-summary", str(tmp_path / "s.csv"),
               "--out-calibration", str(tmp_path / "k.csv")])  # fmt: skip
    assert rc == 0 and "ece" in pd.read_csv(tmp_path / "s.csv").columns
