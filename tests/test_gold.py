"""The gold standard and the calibration of p_fp on it (clumpscout.data.gold,
clumpscout.model.calibration, clumpscout.metrics.matching).

Known answers: a toy whose weakly marked labels are real at a known rate r, so the
calibrated P(real) of a weak label must recover r within its binomial standard error, from
expert marks and from expert counts alone; matching and count ranges by hand.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from clumpscout.data.gold import gold_from_expert_clicks, gold_from_table, read_gold
from clumpscout.errors import InputError
from clumpscout.metrics.matching import iou_matrix, match_one_to_one
from clumpscout.model import calibration as cal
from clumpscout.model.calibration import CalibrationSettings, calibrate, default_calibration

# ------------------------------------------------------------------ the toy


def _toy(n_subjects=400, weak_rate=0.3, seed=0, viewers=20):
    """Labels and subjects tables as the generative model writes them, and the truth.

    Every subject has 1-3 strong labels (p_empty ~ 0, p_weak ~ 0, 14-20 of 20 volunteers)
    that are real, and 0-3 weak labels (p_empty ~ 0, p_weak ~ 1, 2-4 marks) real with
    probability ``weak_rate``. Labels are 10 px boxes on a grid, 40 px apart.
    """
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for s in range(n_subjects):
        n_strong, n_weak = rng.integers(1, 4), rng.integers(0, 4)
        for k in range(n_strong + n_weak):
            weak = k >= n_strong
            x, y = 20.0 + 40.0 * k, 20.0
            real = (not weak) or rng.random() < weak_rate
            rows.append(
                {
                    "subject_id": 1000 + s,
                    "clump": k,
                    "x1": x - 5,
                    "y1": y - 5,
                    "x2": x + 5,
                    "y2": y + 5,
                    "x": x,
                    "y": y,
                    "p_fp": 10 ** rng.uniform(-12, -6),
                    "n_marks": int(rng.integers(2, 5) if weak else rng.integers(14, 21)),
                    "p_weak": 1 - 10 ** rng.uniform(-6, -3) if weak else 10 ** rng.uniform(-9, -4),
                    "weak": weak,
                    "real": real,
                }
            )
            if real:
                truth.append({"subject_id": 1000 + s, "x": x + rng.uniform(-2, 2), "y": y})
    labels = pd.DataFrame(rows)
    subjects = pd.DataFrame(
        {
            "subject_id": 1000 + np.arange(n_subjects),
            "n_volunteers": viewers,
            "n_fp": labels.groupby("subject_id")["p_fp"].sum().to_numpy(),
            "n_fn": 0.0,
            "n_fn_weak": 0.0,
        }
    )
    return labels, subjects, pd.DataFrame(truth)


def _marks_gold(truth, subjects):
    """Marks gold on ``subjects`` (an empty row for a subject with no object)."""
    t = truth.loc[truth["subject_id"].isin(subjects)]
    empty = np.setdiff1d(subjects, t["subject_id"].unique())
    t = pd.concat([t, pd.DataFrame({"subject_id": empty, "x": np.nan, "y": np.nan})])
    return gold_from_table(t.reset_index(drop=True))


def _weak_rate_and_se(labels):
    weak = labels["weak"].to_numpy()
    r = labels.loc[weak, "real"].mean()
    return r, np.sqrt(r * (1 - r) / weak.sum())


@pytest.mark.parametrize("weak_rate", [0.2, 0.6])
def test_marks_map_recovers_the_weak_labels_real_rate(weak_rate):
    labels, subjects, truth = _toy(weak_rate=weak_rate)
    gold = _marks_gold(truth, subjects["subject_id"].to_numpy())
    out, subj, report = calibrate(
        labels.drop(columns=["weak", "real"]), subjects, gold, CalibrationSettings(seed=1)
    )
    r, se = _weak_rate_and_se(labels)
    p_real_weak = 1 - out.loc[labels["weak"].to_numpy(), "p_fp"].mean()
    assert abs(p_real_weak - r) < 2 * se + 0.01, (p_real_weak, r, se)
    # strong labels are all real: their p_fp is small
    assert out.loc[~labels["weak"].to_numpy(), "p_fp"].max() < 0.1
    assert report["method"] == "marks" and report["gold_subjects_used"] == len(subjects)
    # p_empty keeps the model's own probability
    np.testing.assert_array_equal(out["p_empty"].to_numpy(), labels["p_fp"].to_numpy())


@pytest.mark.parametrize("weak_rate", [0.2, 0.6])
def test_counts_map_recovers_the_weak_labels_real_rate(weak_rate):
    labels, subjects, truth = _toy(n_subjects=250, weak_rate=weak_rate, seed=3)
    counts = truth["subject_id"].value_counts().reindex(subjects["subject_id"], fill_value=0)
    gold = gold_from_table(pd.DataFrame({"subject_id": counts.index, "count": counts.to_numpy()}))
    out, subj, report = calibrate(
        labels.drop(columns=["weak", "real"]), subjects, gold, CalibrationSettings(seed=1)
    )
    r, se = _weak_rate_and_se(labels)
    p_real_weak = 1 - out.loc[labels["weak"].to_numpy(), "p_fp"].mean()
    assert report["method"] == "counts"
    # counts identify the rate less sharply than marks: within its standard error, twice
    assert abs(p_real_weak - r) < 2 * se + 0.02, (p_real_weak, r, se)
    # expected counts follow the experts' on average (no misses in the toy)
    assert abs((subj["expected_count"] - counts.to_numpy()).mean()) < 0.1


def test_cross_fitting_never_uses_a_subjects_own_gold():
    """Changing the gold of the subjects of one fold leaves their own p_fp unchanged (their
    map is fitted on the other folds), while it changes the other subjects' p_fp."""
    labels, subjects, truth = _toy(n_subjects=200, weak_rate=0.4, seed=5)
    labels = labels.drop(columns=["weak", "real"])
    sids = subjects["subject_id"].to_numpy()
    s = CalibrationSettings(folds=4, seed=2)
    out_a, _, _ = calibrate(labels, subjects, _marks_gold(truth, sids), s)
    fold0 = cal._folds(sids, 4, 2)[0]
    # the experts of fold 0 now also count every weak label of theirs
    extra = labels.loc[labels["subject_id"].isin(fold0), ["subject_id", "x", "y"]]
    truth_b = pd.concat([truth, extra]).drop_duplicates(["subject_id", "x"])
    out_b, _, _ = calibrate(labels, subjects, _marks_gold(truth_b, sids), s)
    own = labels["subject_id"].isin(fold0).to_numpy()
    np.testing.assert_array_equal(out_a.loc[own, "p_fp"], out_b.loc[own, "p_fp"])
    assert np.abs(out_a.loc[~own, "p_fp"] - out_b.loc[~own, "p_fp"]).max() > 1e-3
    assert (out_a.loc[own, "p_gold_fold"] == 0).all()


def test_non_gold_subjects_use_the_map_fitted_on_all_gold():
    labels, subjects, truth = _toy(n_subjects=300, weak_rate=0.3, seed=7)
    labels = labels.drop(columns=["weak", "real"])
    sids = subjects["subject_id"].to_numpy()
    gold = _marks_gold(truth, sids[:150])
    out, subj, report = calibrate(labels, subjects, gold, CalibrationSettings(seed=0))
    assert report["gold_subjects_used"] == 150
    assert (out.loc[~labels["subject_id"].isin(sids[:150]), "p_gold_fold"] == -1).all()
    assert subj["gold"].sum() == 150


def test_gold_subjects_absent_from_the_boxes_are_counted():
    labels, subjects, truth = _toy(n_subjects=50, seed=9)
    sids = subjects["subject_id"].to_numpy()
    t = pd.concat([truth, pd.DataFrame({"subject_id": [1, 2], "x": [5.0, 6.0], "y": [5.0, 6.0]})])
    gold = _marks_gold(t, np.concatenate([sids, [1, 2]]))
    _, _, report = calibrate(labels.drop(columns=["weak", "real"]), subjects, gold)
    assert report["gold_subjects_absent"] == 2
    assert report["gold"]["subjects"] == 52


def test_too_few_gold_subjects_falls_back_to_the_default_map(caplog):
    labels, subjects, truth = _toy(n_subjects=50, seed=9)
    labels = labels.drop(columns=["weak", "real"])
    gold = _marks_gold(truth, subjects["subject_id"].to_numpy()[:3])
    out, _, report = calibrate(labels, subjects, gold, CalibrationSettings(weak_real=0.25))
    assert "too few" in report["method"]
    ref, _, _ = default_calibration(labels, subjects, 0.25)
    np.testing.assert_allclose(out["p_fp"], ref["p_fp"])


# ------------------------------------------------------------------ the default map


def test_default_map_by_hand():
    """p_fp = 1 − (1 − p_empty)(1 − (1 − w) p_weak); n_fn = n_fn + w n_fn_weak; count range."""
    labels = pd.DataFrame(
        {
            "subject_id": [1, 1, 1, 2],
            "n_marks": [10, 3, 1, 9],
            "p_fp": [0.0, 0.1, 0.9, 0.2],
            "p_weak": [0.0, 1.0, 0.0, 0.5],
        }
    )
    subjects = pd.DataFrame(
        {
            "subject_id": [1, 2, 3],
            "n_volunteers": [10, 10, 10],
            "n_fp": [1.0, 0.2, np.nan],
            "n_fn": [0.5, 0.0, np.nan],
            "n_fn_weak": [2.0, 1.0, np.nan],
        }
    )
    out, subj, report = default_calibration(labels, subjects, weak_real=0.25)
    # by hand: 1 - 1*1 = 0; 1 - 0.9*(1 - 0.75) = 0.775; 1 - 0.1 = 0.9; 1 - 0.8*(1 - 0.375) = 0.5
    np.testing.assert_allclose(out["p_fp"], [0.0, 0.775, 0.9, 0.5])
    np.testing.assert_allclose(subj["n_fn"], [0.5 + 0.5, 0.25, np.nan])
    # expected count: (1 + 0.225 + 0.1) + 1.0 = 2.325; 0.5 + 0.25 = 0.75
    np.testing.assert_allclose(subj["expected_count"], [2.325, 0.75, np.nan])
    # p_empty < 0.5: labels 0, 1 of subject 1 (label 1 weak), label 3 of subject 2 (p_weak 0.5: weak)
    assert subj["count_low"].tolist() == [1, 0, -1]
    assert subj["count_high"].tolist() == [2, 1, -1]
    assert report["gold"] is None and "no gold standard" in report["note"]


# ------------------------------------------------------------------ matching


def test_iou_by_hand():
    a = np.array([[0, 0, 10, 10]])
    b = np.array([[5, 0, 15, 10], [20, 20, 30, 30]])
    np.testing.assert_allclose(iou_matrix(a, b), [[50 / 150, 0.0]])


def test_points_match_one_to_one():
    """Two labels over one point: one matched; one label over two points: one found."""
    labels = pd.DataFrame(
        {
            "subject_id": [1, 1, 2],
            "x1": [0, 2, 0],
            "y1": [0, 0, 0],
            "x2": [10, 12, 20],
            "y2": [10, 10, 20],
        }
    )
    points = pd.DataFrame({"subject_id": [1, 2, 2, 3], "x": [6.0, 5.0, 15.0, 1.0], "y": [5.0] * 4})
    matched, missed = match_one_to_one(labels, points, "point")
    # the point (6, 5) is nearer the centre of label 1 (7, 5) than of label 0 (5, 5)? equal:
    # |6-5| = |6-7| = 1; either label may take it, exactly one does
    assert matched[:2].sum() == 1 and matched[2]
    assert missed.to_dict() == {1: 0, 2: 1, 3: 1}


def test_boxes_match_at_iou_half():
    labels = pd.DataFrame(
        {"subject_id": [1, 1], "x1": [0, 0], "y1": [0, 0], "x2": [10, 10], "y2": [10, 4]}
    )
    boxes = pd.DataFrame({"subject_id": [1], "x1": [0.0], "y1": [0.0], "x2": [10.0], "y2": [10.0]})
    matched, missed = match_one_to_one(labels, boxes, "box")
    # IoU 1 and 0.4: only the first label may match
    assert matched.tolist() == [True, False] and missed.to_dict() == {1: 0}


# ------------------------------------------------------------------ gold tables


def test_expert_clicks_become_majority_objects():
    clicks = pd.DataFrame(
        {
            "subject_id": [1] * 7 + [2],
            "classification_id": [10, 11, 12, 10, 11, 12, 12, 20],
            "x": [50, 51, 49, 100, 140, 180, 300, np.nan],
            "y": [50, 50, 51, 100, 100, 100, 300, np.nan],
        }
    )
    gold = gold_from_expert_clicks(clicks, box_side=10.0, min_fraction=0.5)
    # subject 1: the group at (50, 50) has 3 of 3 experts; the others 1 each; subject 2: empty
    assert len(gold) == 2
    np.testing.assert_allclose(gold.iloc[0][["x", "y"]].to_numpy(float), [50.0, 50 + 1 / 3])
    assert gold.iloc[1]["subject_id"] == 2 and np.isnan(gold.iloc[1]["x"])


def test_marks_gold_reads_empty_subjects(tmp_path):
    p = tmp_path / "gold.csv"
    p.write_text("subject_id,x,y\n1,10,10\n1,20,20\n2,,\n")
    g = read_gold(p)
    assert g.kind == "marks" and g.geometry == "point"
    assert g.counts.to_dict() == {1: 2, 2: 0}


@pytest.mark.parametrize(
    ("text", "message", "row"),
    [
        ("subject,x,y\n1,2,3\n", "subject_id", None),
        ("subject_id,a\n1,2\n", "neither x, y", None),
        ("subject_id,x,y\n1,2,3\n2,abc,3\n", "'abc' is not a number", 2),
        ("subject_id,x,y\n1,2,3\n2,,3\n", "some of x, y are empty", 2),
        ("subject_id,x,y\n1,2,3\n1,,\n", "empty row (no objects) and marked objects", 2),
        ("subject_id,x1,y1,x2,y2\n1,5,5,2,9\n", "x2 < x1", 1),
        ("subject_id,count\n1,2\n2,-1\n", "whole number >= 0", 2),
        ("subject_id,count\n1,2\n2,1.5\n", "whole number >= 0", 2),
        ("subject_id,count\n1,2\n1,3\n", "second count row", 2),
    ],
)
def test_bad_gold_tables_name_file_row_and_problem(tmp_path, text, message, row):
    p = tmp_path / "gold.csv"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        read_gold(p)
    assert message in e.value.message
    assert e.value.path == str(p)
    assert e.value.row == row


def test_cli_rejects_bad_gold_with_exit_2(tmp_path):
    boxes = pd.DataFrame(
        {
            "classification_id": [1, 2, 3],
            "subject_id": 100,
            "volunteer": ["a", "b", "c"],
            "x1": [10.0, 11.0, 12.0],
            "y1": [20.0] * 3,
            "x2": [30.0, 31.0, 32.0],
            "y2": [40.0] * 3,
            "image_width": 100.0,
            "image_height": 100.0,
        }
    )
    boxes.to_parquet(tmp_path / "boxes.parquet")
    (tmp_path / "gold.csv").write_text("subject_id,count\n100,two\n")
    out = tmp_path / "out"
    r = subprocess.run(
        [sys.executable, "-m", "clumpscout", "aggregate", "--boxes", str(tmp_path / "boxes.parquet"),
         "--out", str(out), "--gold", str(tmp_path / "gold.csv")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2
    assert "gold.csv:row 1" in r.stderr and "'two' is not a number" in r.stderr
    assert not out.exists()


def test_expert_clicks_of_one_expert_on_two_near_objects_are_two_objects():
    """Two objects 6 px apart, each expert clicks both: single linkage at half the box side
    (10 px) joins them, the one-click-per-expert rule splits them again."""
    clicks = pd.DataFrame(
        {
            "subject_id": 1,
            "classification_id": [1, 1, 2, 2, 3, 3],
            "x": [50.0, 56.0, 50.5, 56.5, 49.5, 55.5],
            "y": [50.0] * 6,
        }
    )
    gold = gold_from_expert_clicks(clicks, box_side=20.0)
    assert len(gold) == 2
    np.testing.assert_allclose(np.sort(gold["x"].to_numpy()), [50.0, 56.0])


# ------------------------------------------------------------------ through the estimator


def _boxes_and_gold(n_subjects=40, seed=0):
    """Boxes of 10 volunteers per subject: two objects 9 of 10 mark, one that 2 mark (not
    counted by the experts), a few stray boxes; gold: the two strong objects."""
    rng = np.random.default_rng(seed)
    rows, gold = [], []
    cid = 0
    for s in range(n_subjects):
        objs = [(30.0, 30.0), (70.0, 60.0)]
        weak = (50.0, 85.0)
        markers_weak = set(rng.choice(10, 2, replace=False))
        for v in range(10):
            cid += 1
            marks = [o for o in objs if rng.random() < 0.9]
            if v in markers_weak:
                marks.append(weak)
            if rng.random() < 0.1:
                marks.append(tuple(rng.uniform(5, 95, 2)))
            base = {"classification_id": cid, "subject_id": s + 1, "volunteer": f"v{(s * 3 + v) % 60}",
                    "image_width": 100.0, "image_height": 100.0}  # fmt: skip
            if not marks:
                rows.append(base | {"x1": np.nan, "y1": np.nan, "x2": np.nan, "y2": np.nan})
            for x, y in marks:
                x, y = x + rng.normal(0, 0.5), y + rng.normal(0, 0.5)
                rows.append(base | {"x1": x - 4, "y1": y - 4, "x2": x + 4, "y2": y + 4})
        gold += [{"subject_id": s + 1, "x": x, "y": y} for x, y in objs]
    return pd.DataFrame(rows), gold_from_table(pd.DataFrame(gold))


@pytest.mark.parametrize("with_gold", [True, False])
def test_aggregator_calibrates_with_and_without_gold(with_gold):
    from clumpscout.model.aggregator import Aggregator

    boxes, gold = _boxes_and_gold()
    agg = Aggregator(seed=1).fit(boxes, gold=gold if with_gold else None)
    lab, rep = agg.labels_, agg.report_["calibration"]
    assert {"p_empty", "p_weak", "p_fp"} <= set(lab.columns)
    assert {"count_low", "count_high", "n_fn_model"} <= set(agg.subjects_.columns)
    strong = lab["n_marks"] >= 6
    assert strong.sum() >= 70  # the two objects of (nearly) every subject
    if with_gold:
        assert rep["method"] == "marks" and rep["gold_subjects_used"] == 40
        assert (lab["p_gold_fold"] >= 0).all()  # every subject is a gold subject
        # the experts never count the weakly marked object: its labels are not real
        assert lab.loc[strong, "p_fp"].max() < 0.2
        assert lab.loc[~strong & (lab["n_marks"] == 2), "p_fp"].min() > 0.5
    else:
        assert rep["method"] == "default" and "no gold standard" in rep["note"]
        assert "p_gold_fold" not in lab.columns


def test_gold_figures_read_the_cross_fitted_outputs(tmp_path):
    from clumpscout.figures.gold import plot_gold_counts, plot_gold_reliability
    from clumpscout.model.aggregator import Aggregator

    boxes, gold = _boxes_and_gold()
    agg = Aggregator(seed=1).fit(boxes, gold=gold)
    st = plot_gold_reliability(agg.labels_, tmp_path / "rel", min_labels=10)
    assert st["labels"] == len(agg.labels_)  # every subject is a gold subject here
    assert st["ece"]["p_fp"] < st["ece"]["p_empty"]  # the weak object is not counted
    sc = plot_gold_counts(agg.subjects_, tmp_path / "cnt")
    assert sc["subjects"] == 40 and sc["experts_total"] == 80  # two objects per subject
    for stem in ("rel", "cnt"):
        assert (tmp_path / f"{stem}.png").stat().st_size > 0
    # without expert verdicts the figure says so instead of failing
    st0 = plot_gold_reliability(agg.labels_.drop(columns="gold_real"), tmp_path / "none")
    assert st0["labels"] == 0


# ------------------------------------------------------------------ the live map


def _live_rows(n_subjects=300, weak_rate=0.3, depths=(5, 10, 20), seed=0):
    """The toy's labels seen at several numbers of classifications: a strong label holds
    70 % of the viewers' marks, a weak one 15 % (at least 2); both p_empty ~ 0."""
    labels, _, _ = _toy(n_subjects=n_subjects, weak_rate=weak_rate, seed=seed)
    rng = np.random.default_rng(seed + 1)
    parts = []
    for n in depths:
        weak = labels["weak"].to_numpy()
        marks = np.where(weak, np.maximum(2, rng.binomial(n, 0.15)), rng.binomial(n, 0.7))
        parts.append(labels.assign(n=n, n_marks=np.maximum(marks, 2)))
    rows = pd.concat(parts, ignore_index=True)
    X = cal.live_features(rows["p_fp"], rows["p_weak"], rows["n_marks"], rows["n"])
    return rows, X


@pytest.mark.parametrize("weak_rate", [0.2, 0.6])
def test_live_map_recovers_the_weak_labels_real_rate_at_every_depth(weak_rate):
    rows, X = _live_rows(weak_rate=weak_rate)
    m = cal.LiveMap.fit(X, rows["real"].to_numpy(), groups=rows["subject_id"].to_numpy())
    weak = rows["weak"].to_numpy()
    r = rows.loc[weak & (rows["n"] == 20).to_numpy(), "real"].mean()
    se = np.sqrt(r * (1 - r) / (weak & (rows["n"] == 20).to_numpy()).sum())
    p = m.p_real(rows["p_fp"], rows["p_weak"], rows["n_marks"], rows["n"])
    for n in (5, 10, 20):
        at = (rows["n"] == n).to_numpy()
        assert abs(p[weak & at].mean() - r) < 2 * se + 0.02, (n, p[weak & at].mean(), r)
        assert p[~weak & at].min() > 0.9  # strong labels are real at every depth
    # the counted shares: every strong label counts, weak ones at their rate
    assert m.counted[0] > 0.99 and abs(m.counted[1] - r) < 2 * se + 0.02
    assert m.kind == "gold" and m.info["subjects"] == 300


def test_live_map_uncertainty_counts_gold_subjects_not_rows():
    # the same rows twice within each gold subject: the map is no surer (clustered by
    # subject); twice as separate subjects: its variance halves
    rows, X = _live_rows(n_subjects=200, depths=(10,), seed=5)
    y, g = rows["real"].to_numpy(), rows["subject_id"].to_numpy()
    one = cal.LiveMap.fit(X, y, C=1e4, groups=g)
    same = cal.LiveMap.fit(np.vstack([X, X]), np.r_[y, y], C=1e4, groups=np.r_[g, g])
    apart = cal.LiveMap.fit(np.vstack([X, X]), np.r_[y, y], C=1e4, groups=np.r_[g, g + 10**6])
    v = np.diag(one.cov)
    free = v > 1e-8  # features the toy holds constant (p_empty, the unusual share) aside
    assert free.sum() >= 4
    np.testing.assert_allclose(np.diag(same.cov)[free], v[free], rtol=0.05)
    np.testing.assert_allclose(np.diag(apart.cov)[free], v[free] / 2, rtol=0.05)


def test_default_live_map_by_hand():
    m = cal.LiveMap.default(0.25)
    # (1 - p_empty)(1 - (1 - w) p_weak): 0.9 x (1 - 0.75 x 0.4) = 0.63
    assert m.p_real([0.1], [0.4], [3], [10])[0] == pytest.approx(0.63)
    assert m.kept_probability([0.1, 0.5], [0.4, 0.4], [3, 3], [10, 10]).tolist() == [1.0, 0.0]
    assert m.counted == (1.0, 0.25) and m.kind == "default"


# ------------------------------------------------------------------ expert boxes


def _box_toy(n=40):
    """One label per subject, (10, 10, 30, 50) + 5 px per subject along x, marked by 15 of
    20; the experts' box is 0.9 x as wide, 1.1 x as tall and its centre 1 px right and
    2 px up (0.05 label widths, -0.05 label heights). IoU of the two: 0.66."""
    sid = 2000 + np.arange(n)
    x0 = 10.0 + 5.0 * np.arange(n)
    labels = pd.DataFrame(
        {"subject_id": sid, "clump": 0, "x1": x0, "y1": 10.0, "x2": x0 + 20, "y2": 50.0}
    )
    labels = labels.assign(x=x0 + 10, y=30.0, p_fp=1e-9, p_weak=1e-6, n_marks=15, frac_unusual=0.0)
    cx, cy = x0 + 10 + 1.0, 30.0 - 2.0
    experts = pd.DataFrame(
        {"subject_id": sid, "x1": cx - 9, "y1": cy - 22, "x2": cx + 9, "y2": cy + 22}
    )
    subjects = pd.DataFrame(
        {"subject_id": sid, "n_volunteers": 20, "n_fp": 0.0, "n_fn": 0.0, "n_fn_weak": 0.0}
    )
    return labels, subjects, gold_from_table(experts)


def test_box_correction_by_hand():
    labels, _, gold = _box_toy()
    corr = cal.box_correction(labels.assign(p_empty=labels["p_fp"]), gold)
    assert corr["log_width"] == pytest.approx(np.log(0.9))
    assert corr["log_height"] == pytest.approx(np.log(1.1))
    assert corr["dx"] == pytest.approx(1.0 / 20) and corr["dy"] == pytest.approx(-2.0 / 40)
    fixed = cal.correct_boxes(labels, corr)
    np.testing.assert_allclose(
        fixed[["x1", "y1", "x2", "y2"]].to_numpy(), gold.marks[["x1", "y1", "x2", "y2"]]
    )
    np.testing.assert_allclose(fixed["x"], labels["x"] + 1.0)
    # too few pairs: no correction
    assert cal.box_correction(labels.assign(p_empty=labels["p_fp"]), gold, [2000, 2001]) is None


def test_calibration_corrects_the_label_boxes_against_expert_boxes():
    labels, subjects, gold = _box_toy()
    out, _, report = calibrate(labels, subjects, gold, CalibrationSettings(seed=0))
    corr = report["box_correction"]
    assert corr["pairs"] == 40 and corr["log_width"] == pytest.approx(np.log(0.9))
    # every fold measured the same offset on the others, so every box lands on the experts'
    np.testing.assert_allclose(
        out[["x1", "y1", "x2", "y2"]].to_numpy(), gold.marks[["x1", "y1", "x2", "y2"]]
    )
    off, _, report = calibrate(
        labels, subjects, gold, CalibrationSettings(seed=0, box_correction=False)
    )
    assert report["box_correction"] is None
    np.testing.assert_array_equal(off["x1"].to_numpy(), labels["x1"].to_numpy())
