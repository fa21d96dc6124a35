"""Clustering baselines (appendix, decisions.md#meanshift-baseline): MeanShift, single linkage, DBSCAN."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.cluster.hierarchy import fcluster, linkage

from clumpscout.errors import InputError
from clumpscout.evaluation.baseline import (
    count_difference,
    dbscan_clusters,
    dbscan_labels,
    meanshift_clusters,
    meanshift_labels,
    single_linkage_clusters,
    single_linkage_labels,
)

SIDE = 20.0  # box side = 2 FWHM -> FWHM = 10 px


def boxes_from(clicks, side=SIDE):
    """clicks: list of (subject_id, volunteer, x, y[, unusual]) -> a boxes table."""
    rows = []
    for i, c in enumerate(clicks):
        sid, vol, x, y = c[:4]
        rows.append(
            dict(classification_id=hash((sid, vol)) % 10**9, subject_id=sid, volunteer=vol,
                 x=x, y=y, box_side=side, unusual=bool(c[4]) if len(c) > 4 else False, order=i)
        )  # fmt: skip
    df = pd.DataFrame(rows).drop(columns="order")
    for a, b, s in (("x1", "x", -1), ("y1", "y", -1), ("x2", "x", 1), ("y2", "y", 1)):
        df[a] = df[b] + s * side / 2
    return df


def plus(cx, cy, sid, start, d=1.0):
    """Five clicks: a centre and four at distance d (mean exactly (cx, cy)), distinct volunteers."""
    pts = [(cx, cy), (cx + d, cy), (cx - d, cy), (cx, cy + d), (cx, cy - d)]
    return [(sid, f"v{start + i}", x, y) for i, (x, y) in enumerate(pts)]


def test_meanshift_two_separated_blobs_give_two_centres():
    clicks = plus(100.0, 100.0, 1, 0) + plus(300.0, 250.0, 1, 5)
    clicks[0] = (*clicks[0], True)  # one unusual click in the first blob
    labels, rep = meanshift_labels(boxes_from(clicks))
    assert len(labels) == 2 and rep["n_clumps"] == 2
    got = labels.sort_values("x")[["x", "y"]].to_numpy()
    np.testing.assert_allclose(got, [[100.0, 100.0], [300.0, 250.0]], atol=1e-9)
    assert labels["n_members"].tolist() == [5, 5]
    assert labels["n_volunteers"].tolist() == [5, 5]
    assert sorted(labels["frac_unusual"]) == pytest.approx([0.0, 0.2])
    assert (labels["bandwidth"] == SIDE / 2).all()
    # scoring box of side box_side centred on the clump
    assert (labels["x2"] - labels["x1"]).tolist() == [SIDE, SIDE]
    assert ((labels["x1"] + labels["x2"]) / 2).tolist() == pytest.approx(labels["x"].tolist())
    assert labels["clump"].tolist() == [0, 1]


def test_meanshift_bandwidth_matters():
    # two blobs 8 px apart: one cluster at bandwidth 10 (FWHM), two at bandwidth 3
    clicks = plus(100.0, 100.0, 1, 0) + plus(108.0, 100.0, 1, 5)
    assert len(meanshift_labels(boxes_from(clicks))[0]) == 1
    assert len(meanshift_labels(boxes_from(clicks), bandwidth=3.0)[0]) == 2
    with pytest.raises(InputError):
        meanshift_labels(boxes_from(clicks), bandwidth="psf")


def _random_subjects(seed, n_subjects, max_clicks=45):
    rng = np.random.default_rng(seed)
    blocks, offsets, bws = [], [0], []
    for s in range(n_subjects):
        m = int(rng.integers(1, max_clicks))
        k = int(rng.integers(1, 5))
        centres = rng.uniform(120, 280, (k, 2))
        xy = centres[rng.integers(0, k, m)] + rng.normal(0, rng.uniform(1, 8), (m, 2))
        if s == 0:
            xy = np.array([[200.0, 200.0]])  # a single click
        if s == 1:
            xy = np.array([[150.0, 150.0]] * 3 + [[151.0, 150.0]])  # duplicated clicks
        blocks.append(xy)
        offsets.append(offsets[-1] + len(xy))
        bws.append(rng.uniform(3, 15))
    return np.concatenate(blocks), np.array(offsets), np.array(bws)


def _assert_meanshift_equal(xy, offsets, bws):
    """The numba port and scikit-learn give the same k, labels and centres, bit for bit."""
    c1, l1, k1 = meanshift_clusters(xy, offsets, bws, impl="numba")
    c2, l2, k2 = meanshift_clusters(xy, offsets, bws, impl="sklearn")
    for s in range(len(bws)):
        a, b = offsets[s], offsets[s + 1]
        assert k1[s] == k2[s], f"subject {s}: {k1[s]} centres, scikit-learn {k2[s]}"
        assert l1[a:b].tolist() == l2[a:b].tolist(), f"subject {s}: labels differ"
        assert np.array_equal(c1[a : a + k1[s]], c2[a : a + k2[s]]), f"subject {s}: centres"
    return k1


@pytest.mark.slow  # ~25 s: 300 random subjects against scikit-learn (the full suite runs it)
def test_numba_port_equals_scikit_learn_meanshift():
    """300 seeded random subjects (a single click and duplicated clicks among them)."""
    xy, offsets, bws = _random_subjects(2026, 300, max_clicks=25)
    k = _assert_meanshift_equal(xy, offsets, bws)
    assert k.max() > 2 and (k == 1).any()  # the instances are not trivial


def _tie_subjects(seed: int, n_subjects: int):
    """Subjects made of ties: integer coordinates and bandwidths (so distances exactly at
    the bandwidth are exact in both implementations), duplicated points, centres
    equidistant from a point, equal intensities."""
    rng = np.random.default_rng(seed)
    blocks, offsets, bws = [], [0], []
    for s in range(n_subjects):
        kind = s % 6
        if kind == 0:  # square of side = bandwidth: every edge exactly on the boundary
            d = int(rng.integers(2, 10))
            xy = np.array([[0, 0], [d, 0], [0, d], [d, d]], float) + 100
            bw = float(d)
        elif kind == 1:  # three points, each repeated
            m = int(rng.integers(2, 12))
            xy = np.repeat(rng.integers(100, 130, (3, 2)).astype(float), m, axis=0)[: 2 * m]
            bw = float(rng.integers(2, 12))
        elif kind == 2:  # a small integer grid: many distances exactly at the bandwidth
            xy = rng.integers(100, 115, (int(rng.integers(2, 30)), 2)).astype(float)
            bw = float(rng.integers(1, 8))
        elif kind == 3:  # two points equidistant from a middle one (labels tie)
            d = int(rng.integers(3, 10))
            xy = np.array([[100, 100], [100 + 2 * d, 100], [100 + d, 100]], float)
            bw = float(d) if rng.random() < 0.5 else d - 0.5
        elif kind == 4:  # equally spaced on a line, spacing = bandwidth
            m, d = int(rng.integers(2, 10)), int(rng.integers(1, 6))
            xy = np.c_[100 + d * np.arange(m), np.full(m, 100)].astype(float)
            bw = float(d)
        else:  # a point and four on the circle of radius = bandwidth around it
            bw = float(rng.integers(2, 8))
            xy = np.array([[0, 0], [bw, 0], [-bw, 0], [0, bw], [0, -bw]]) + 100
        blocks.append(xy)
        offsets.append(offsets[-1] + len(xy))
        bws.append(bw)
    return np.concatenate(blocks), np.array(offsets), np.array(bws)


def test_numba_port_equals_scikit_learn_meanshift_on_ties():
    xy, offsets, bws = _tie_subjects(1, 120)
    k = _assert_meanshift_equal(xy, offsets, bws)
    assert k.max() > 1 and (k == 1).any()


def test_meanshift_result_does_not_depend_on_chunking():
    xy, offsets, bws = _random_subjects(5, 30)
    c1, l1, k1 = meanshift_clusters(xy, offsets, bws)
    c2, l2, k2 = meanshift_clusters(xy, offsets, bws, chunk=7)
    assert np.array_equal(k1, k2) and np.array_equal(l1, l2)
    for s in range(len(bws)):
        a = offsets[s]
        assert np.array_equal(c1[a : a + k1[s]], c2[a : a + k2[s]])


def test_single_linkage_keeps_clusters_with_enough_distinct_volunteers():
    fwhm = SIDE / 2
    clicks = plus(100.0, 100.0, 1, 0)  # A: 5 volunteers -> kept
    # B: 6 clicks by 4 volunteers (v11 clicked twice, v12 too) -> dropped
    clicks += [(1, v, 300.0 + dx, 300.0) for v, dx in
               (("v10", 0), ("v11", 1), ("v11", 2), ("v12", 3), ("v12", 4), ("v13", 5))]  # fmt: skip
    # C: a chain of 6 clicks 0.9 FWHM apart (5.4 FWHM end to end) -> one cluster, kept
    clicks += [(1, f"w{i}", 50.0 + 0.9 * fwhm * i, 300.0) for i in range(6)]
    # D: two clicks 1.1 FWHM apart are not linked; in subject 2, 5 volunteers at one spot
    clicks += [(1, "u1", 300.0, 50.0), (1, "u2", 300.0 + 1.1 * fwhm, 50.0)]
    clicks += plus(200.0, 200.0, 2, 20)
    labels, rep = single_linkage_labels(boxes_from(clicks), cut=1.0, min_volunteers=5)
    assert rep["n_clusters"] == 6  # A, B, C, D1, D2 (subject 1) and subject 2's
    assert rep["n_clusters_dropped"] == 3 and rep["n_clicks_dropped"] == 8
    assert rep["n_clumps"] == 3
    s1 = labels[labels["subject_id"] == 1].set_index("clump")
    assert s1["n_volunteers"].tolist() == [6, 5]  # ordered by volunteers
    assert (s1.loc[0, "x"], s1.loc[0, "y"]) == pytest.approx((50.0 + 0.9 * fwhm * 2.5, 300.0))
    assert (s1.loc[1, "x"], s1.loc[1, "y"]) == pytest.approx((100.0, 100.0))
    np.testing.assert_allclose(labels.loc[labels["subject_id"] == 2, ["x", "y"]], [[200.0, 200.0]])
    # a lower volunteer threshold keeps B (4 volunteers)
    assert single_linkage_labels(boxes_from(clicks), min_volunteers=4)[1]["n_clumps"] == 4


def test_single_linkage_equals_scipy_fcluster():
    xy, offsets, _ = _random_subjects(8, 25)
    cut = np.random.default_rng(1).uniform(2, 12, 25)
    comp = single_linkage_clusters(xy, offsets, cut, chunk=6)
    for s in range(25):
        a, b = offsets[s], offsets[s + 1]
        if b - a < 2:
            continue
        ref = fcluster(linkage(xy[a:b], "single"), cut[s], "distance")
        ours = comp[a:b]
        # same partition: a bijection between the two labellings
        pairs = set(zip(ours.tolist(), ref.tolist(), strict=True))
        assert len(pairs) == len(set(ours)) == len(set(ref)), s
    assert len(np.unique(comp)) < len(xy)


def test_dbscan_toy_by_hand():
    # eps = 0.5 x box side = 10 px. Subject 1 (min_samples 4): cores X around (100, 100)
    # and Y around (120, 100); b = (110, 100) lies exactly eps from x0 and y0 and is a
    # border point of both (3 neighbours incl. itself): it joins the cluster found first.
    X = [(100.0, 100.0), (100.0, 102.0), (100.0, 98.0), (98.0, 100.0)]
    Y = [(120.0, 100.0), (120.0, 102.0), (120.0, 98.0), (122.0, 100.0)]
    b = [(110.0, 100.0)]
    noise = [(200.0, 200.0), (210.0001, 200.0)]  # 10.0001 apart: not neighbours
    clicks = [(1, f"v{i}", x, y) for i, (x, y) in enumerate(b + X + Y + noise)]
    labels, rep = dbscan_labels(boxes_from(clicks), min_samples=4)
    assert rep["n_clumps"] == 2 and rep["n_noise_clicks"] == 2
    # clusters in scikit-learn's order: X holds the lowest-index core point (row 1)
    assert labels["n_members"].tolist() == [5, 4]
    np.testing.assert_allclose(labels[["x", "y"]], [[508 / 5, 100.0], [120.5, 100.0]])
    assert (labels["bandwidth"] == 10.0).all() and (labels["x2"] - labels["x1"] == SIDE).all()
    # rows listed Y first: b goes to Y
    clicks = [(1, f"v{i}", x, y) for i, (x, y) in enumerate(Y + b + X)]
    labels, _ = dbscan_labels(boxes_from(clicks), min_samples=4)
    assert labels["n_members"].tolist() == [5, 4]
    np.testing.assert_allclose(
        labels[["x", "y"]], [[(120 * 3 + 122 + 110) / 5, 100.0], [99.5, 100.0]]
    )
    # min_samples 3 (default): three clicks 10 px apart in a line -> the middle one is
    # core (3 neighbours at distance <= eps), both ends are its border points; a lone
    # pair is noise (2 < 3); subject 3's clicks never mix with subject 2's
    clicks = [(2, "a", 50.0, 50.0), (2, "b", 60.0, 50.0), (2, "c", 70.0, 50.0)]
    clicks += [(2, "d", 300.0, 300.0), (2, "e", 305.0, 300.0)]
    clicks += [(3, "f", 300.0, 300.0), (3, "g", 301.0, 300.0), (3, "h", 302.0, 300.0)]
    labels, rep = dbscan_labels(boxes_from(clicks))
    assert labels["subject_id"].tolist() == [2, 3] and labels["clump"].tolist() == [0, 0]
    assert labels["n_members"].tolist() == [3, 3] and labels["n_volunteers"].tolist() == [3, 3]
    np.testing.assert_allclose(labels[["x", "y"]], [[60.0, 50.0], [301.0, 300.0]])
    assert rep["n_noise_clicks"] == 2
    # eps follows each subject's box side
    assert len(dbscan_labels(boxes_from(clicks[:3], side=19.0))[0]) == 0
    with pytest.raises(InputError):
        dbscan_labels(boxes_from(clicks), eps_factor=0)


def test_dbscan_equals_scikit_learn_per_subject():
    from sklearn.cluster import DBSCAN

    rng = np.random.default_rng(11)
    xy, offsets, _ = _random_subjects(12, 300)
    # a third of the subjects on integer pixels with integer eps: many pairs exactly eps
    # apart (3-4-5 triangles, duplicates) and border points reached by several clusters
    n_sub = len(offsets) - 1
    integer = np.repeat(np.arange(n_sub) % 3 == 0, np.diff(offsets))
    xy[integer] = np.round(xy[integer] / 2)
    eps = np.where(
        np.arange(n_sub) % 3 == 0, rng.choice([3.0, 5.0], n_sub), rng.uniform(2, 10, n_sub)
    )
    ties = 0
    for min_samples in (3, 5):
        got = dbscan_clusters(xy, offsets, eps, min_samples, chunk=41)
        for s in range(n_sub):
            a, b = offsets[s], offsets[s + 1]
            ref = DBSCAN(eps=eps[s], min_samples=min_samples).fit(xy[a:b]).labels_
            assert got[a:b].tolist() == ref.tolist(), (min_samples, s)
            if min_samples == 3:
                d2 = ((xy[a:b, None] - xy[None, a:b]) ** 2).sum(-1)
                ties += int((d2 == eps[s] ** 2).sum())
    assert ties > 50  # the tie cases are really exercised
    assert (got >= 0).any() and (got < 0).any()


def test_empty_classifications_and_subjects_without_clicks():
    clicks = plus(100.0, 100.0, 1, 0)
    boxes = boxes_from(clicks)
    empty = boxes.iloc[:1].copy()
    empty[["x", "y", "x1", "y1", "x2", "y2"]] = np.nan
    empty["subject_id"] = 7
    boxes = pd.concat([boxes, empty], ignore_index=True)
    ms, rep = meanshift_labels(boxes)
    assert rep["n_rows_without_xy"] == 1 and rep["n_subjects"] == 2 and len(ms) == 1
    sl, _ = single_linkage_labels(boxes)
    assert len(sl) == 1
    db, rep = dbscan_labels(boxes)
    assert len(db) == 1 and rep["n_subjects"] == 2
    none, rep = dbscan_labels(empty)
    assert len(none) == 0 and rep["n_clumps"] == 0 and list(none.columns) == list(db.columns)
    none, rep = meanshift_labels(empty)
    assert len(none) == 0 and rep["n_clumps"] == 0
    with pytest.raises(InputError, match="box_side"):
        meanshift_labels(boxes.drop(columns="box_side"))


def test_count_difference_by_hand():
    ours = pd.DataFrame({"subject_id": [1, 1, 1, 2]})
    ms = pd.DataFrame({"subject_id": [1, 3, 3]})
    sl = pd.DataFrame({"subject_id": [2, 2]})
    t = count_difference(ours, {"meanshift": ms, "single_linkage": sl}, [1, 2, 3, 4])
    assert t["n_ours"].tolist() == [3, 1, 0, 0]
    assert t["diff_meanshift"].tolist() == [2, 1, -2, 0]
    assert t["diff_single_linkage"].tolist() == [3, -1, 0, 0]


def test_cli(tmp_path):
    from clumpscout.cli import main

    src = tmp_path / "boxes.parquet"
    boxes_from(plus(100.0, 100.0, 1, 0) + plus(300.0, 250.0, 1, 5)).to_parquet(src)
    rc = main(["baseline", "--boxes", str(src), "--out-meanshift", str(tmp_path / "ms.parquet"),
               "--out-single-linkage", str(tmp_path / "sl.parquet"),
               "--report", str(tmp_path / "r.json")])  # fmt: skip
    assert rc == 0
    assert len(pd.read_parquet(tmp_path / "ms.parquet")) == 2
    assert json.loads((tmp_path / "r.json").read_text())["single_linkage"]["n_clumps"] == 2
    rc = main(["baseline", "--boxes", str(src), "--method", "dbscan",
               "--out", str(tmp_path / "db.parquet"), "--report", str(tmp_path / "r2.json")])  # fmt: skip
    assert rc == 0 and len(pd.read_parquet(tmp_path / "db.parquet")) == 2
    assert list(json.loads((tmp_path / "r2.json").read_text())) == ["dbscan"]
    assert main(["baseline", "--boxes", str(src), "--method", "dbscan"]) == 2  # no output
