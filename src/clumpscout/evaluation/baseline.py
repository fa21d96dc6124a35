"""Clustering baselines on the same clicks (paper appendix, decisions.md#meanshift-baseline).

Three baselines turn the volunteers' clicks into clumps without any model of the
volunteers:

1. **MeanShift** (appendix sec:mean_shift_comparison, decisions.md#meanshift-baseline): per subject,
   ``sklearn.cluster.MeanShift(bandwidth=FWHM_subject)`` on the click
   coordinates (subject pixels), every other parameter at its default (flat
   kernel, every click a seed, ``cluster_all=True``, ``max_iter=300``); one clump
   per cluster centre. Every cluster counts, even a single click.
2. **Single linkage** (a deliberately simple baseline, decisions.md#meanshift-baseline): per subject,
   single-linkage clustering of the clicks cut at ``cut`` × FWHM (default 1), so
   two clicks share a cluster when a chain of clicks less than one FWHM apart
   joins them; keep the clusters marked by at least ``min_volunteers`` (default
   5) distinct volunteers. The centre is the mean of the member clicks.
3. **DBSCAN** (the usual point-marking baseline): per subject,
   ``sklearn.cluster.DBSCAN(eps=eps_factor × box_side, min_samples=3)`` on the
   click coordinates; one clump per cluster (noise clicks are dropped), centred
   on the mean of its member clicks (core and border). With the default
   ``eps_factor = 0.5`` the radius is one FWHM for Clump Scout (box side = 2
   FWHM) and half the configured box side for fixed-box projects.

``FWHM_subject`` is read from the boxes table: ``box_side = 2 FWHM_subject``
(decisions.md#box-geometry), so the baselines need nothing but ``boxes.parquet``. Each baseline
clump also gets a square box of side ``box_side`` (the subject's volunteer box
size) centred on it, so :mod:`clumpscout.evaluation.compare` can score it exactly like our
labels; baselines have no ``p_fp``, so they are kept at every threshold.

Speed. scikit-learn's MeanShift costs ~0.1 s per subject here (joblib and
neighbour-search overhead on ~40 points), i.e. hours for the paper's 85k
subjects. ``impl="numba"`` (default) is a line-by-line port of scikit-learn
1.9's ``MeanShift.fit`` with the default parameters (same seeds, same
convergence test ``|Δmean| <= 1e-3 bandwidth``, same intensity ordering and
near-duplicate removal, same nearest-centre assignment), run over all subjects
in one numba kernel; tests/test_baseline.py checks that it gives scikit-learn's
centres, labels and cluster counts bit for bit on 300 seeded random subjects and on
120 subjects made of ties (duplicated clicks, distances exactly at the bandwidth,
points equidistant from two centres). ``impl="sklearn"`` calls scikit-learn itself. The single
linkage cut is computed for all subjects at once as the connected components
of the graph of click pairs closer than the cut (a KD-tree in scaled
coordinates), which equals ``scipy.cluster.hierarchy.fcluster(linkage(X,
"single"), t, "distance")`` per subject. DBSCAN is computed the same way for
all subjects at once and equals scikit-learn's labels exactly (see
:func:`dbscan_clusters`; tests/test_baseline.py compares them on random
subjects with clicks exactly ``eps`` apart): 2.3 s for 85,000 subjects with
2.5 million clicks, where scikit-learn's ``DBSCAN`` per subject takes ~0.6 ms
each (~50 s).
"""

from __future__ import annotations

import argparse
import logging
import math

import numba
import numpy as np
import pandas as pd

from clumpscout.config import add_settings, defaults
from clumpscout.errors import InputError
from clumpscout.io import write_json, write_parquet
from clumpscout.logs import progress, timed

log = logging.getLogger(__name__)
#: the defaults of the config's baseline section (config.schema.yaml)
_DEFAULTS = defaults("baseline")

REQUIRED = ("subject_id", "x", "y", "box_side")
LABEL_COLUMNS = [
    "subject_id",
    "clump",
    "x",
    "y",
    "x1",
    "y1",
    "x2",
    "y2",
    "box_side",
    "bandwidth",
    "n_members",
    "n_volunteers",
    "frac_unusual",
]


# ---------------------------------------------------------------- clicks
def clicks_of(boxes_df: pd.DataFrame, path: object = None) -> tuple[pd.DataFrame, dict]:
    """The clicks of a boxes table, sorted by subject, with each subject's FWHM.

    Rows without coordinates (classifications that marked nothing) are not
    clicks; they are counted. ``fwhm = box_side / 2`` (decisions.md#box-geometry).
    """
    missing = [c for c in REQUIRED if c not in boxes_df.columns]
    if missing:
        raise InputError(f"boxes table lacks column(s) {', '.join(missing)}", path=path)
    has_xy = boxes_df["x"].notna().to_numpy() & boxes_df["y"].notna().to_numpy()
    cols = [
        c
        for c in ("subject_id", "classification_id", "volunteer", "x", "y", "box_side", "unusual")
        if c in boxes_df.columns
    ]
    clicks = boxes_df.loc[has_xy, cols].copy()
    clicks["_row"] = np.flatnonzero(has_xy)
    bad = ~(clicks["box_side"].to_numpy(dtype=float) > 0)
    if bad.any():
        raise InputError("box_side must be > 0", path=path, row=int(clicks["_row"].iloc[0]))
    clicks = clicks.sort_values(["subject_id", "_row"], kind="stable").reset_index(drop=True)
    n_sides = clicks.groupby("subject_id")["box_side"].nunique()
    report = {
        "n_rows": int(len(boxes_df)),
        "n_rows_without_xy": int((~has_xy).sum()),
        "n_clicks": int(len(clicks)),
        "n_subjects": int(boxes_df["subject_id"].nunique()),
        "n_subjects_with_clicks": int(clicks["subject_id"].nunique()),
        "n_subjects_box_side_varies": int((n_sides > 1).sum()),
    }
    if report["n_subjects_box_side_varies"]:
        log.warning(
            "%d subjects have more than one box_side; using each subject's first",
            report["n_subjects_box_side_varies"],
        )
    log.info(
        "%d clicks in %d of %d subjects (%d rows without coordinates are empty classifications)",
        report["n_clicks"],
        report["n_subjects_with_clicks"],
        report["n_subjects"],
        report["n_rows_without_xy"],
    )
    return clicks, report


def _subject_blocks(clicks: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(subject ids, start offsets incl. the end, box_side per subject) of sorted clicks."""
    sid = clicks["subject_id"].to_numpy()
    start = np.r_[0, np.flatnonzero(sid[1:] != sid[:-1]) + 1] if len(sid) else np.zeros(0, int)
    offsets = np.r_[start, len(sid)].astype(np.int64)
    side = clicks["box_side"].to_numpy(dtype=float)[start]
    return sid[start], offsets, side


def _bandwidths(side: np.ndarray, bandwidth: str | float) -> np.ndarray:
    if isinstance(bandwidth, str):
        if bandwidth != "fwhm":
            raise InputError(f"bandwidth must be 'fwhm' or a number of pixels, got {bandwidth!r}")
        return side / 2.0
    bw = float(bandwidth)
    if not bw > 0:
        raise InputError(f"bandwidth must be > 0, got {bandwidth!r}")
    return np.full(len(side), bw)


# ---------------------------------------------------------------- MeanShift
@numba.njit(cache=True)
def _meanshift_one(P, bw, max_iter, centres, labels):
    """scikit-learn 1.9 ``MeanShift(bandwidth=bw).fit(P)`` with default parameters.

    Writes the cluster centres (in scikit-learn's order: intensity descending,
    then the centre tuple descending) to ``centres[:k]`` and each point's
    cluster to ``labels``; returns ``k``.
    """
    m = P.shape[0]
    r2 = bw * bw
    stop = 1e-3 * bw
    cx = np.empty(m)
    cy = np.empty(m)
    inten = np.zeros(m, dtype=np.int64)
    # climb from every seed (_mean_shift_single_seed)
    for s in range(m):
        mx = P[s, 0]
        my = P[s, 1]
        it = 0
        cnt = 0
        while True:
            sx = 0.0
            sy = 0.0
            cnt = 0
            for q in range(m):
                dx = P[q, 0] - mx
                dy = P[q, 1] - my
                if dx * dx + dy * dy <= r2:
                    sx += P[q, 0]
                    sy += P[q, 1]
                    cnt += 1
            if cnt == 0:
                break
            ox = mx
            oy = my
            mx = sx / cnt
            my = sy / cnt
            if math.sqrt((mx - ox) ** 2 + (my - oy) ** 2) <= stop or it == max_iter:
                break
            it += 1
        cx[s] = mx
        cy[s] = my
        inten[s] = cnt
    # sort by (intensity, x, y) descending (insertion sort; m is small)
    order = np.empty(m, dtype=np.int64)
    n_ok = 0
    for s in range(m):
        if inten[s] > 0:
            order[n_ok] = s
            n_ok += 1
    for a in range(1, n_ok):
        cur = order[a]
        b = a - 1
        while b >= 0:
            o = order[b]
            before = False  # does cur sort before o?
            if inten[cur] != inten[o]:
                before = inten[cur] > inten[o]
            elif cx[cur] != cx[o]:
                before = cx[cur] > cx[o]
            else:
                before = cy[cur] > cy[o]
            if not before:
                break
            order[b + 1] = o
            b -= 1
        order[b + 1] = cur
    # remove near duplicates: a kept centre suppresses every centre within bw
    unique = np.ones(n_ok, dtype=np.bool_)
    for a in range(n_ok):
        if unique[a]:
            i = order[a]
            for b in range(n_ok):
                j = order[b]
                if (cx[i] - cx[j]) ** 2 + (cy[i] - cy[j]) ** 2 <= r2:
                    unique[b] = False
            unique[a] = True
    k = 0
    for a in range(n_ok):
        if unique[a]:
            centres[k, 0] = cx[order[a]]
            centres[k, 1] = cy[order[a]]
            k += 1
    # assign each point to its nearest centre (first on ties)
    for q in range(m):
        best = np.inf
        bi = 0
        for c in range(k):
            d = (P[q, 0] - centres[c, 0]) ** 2 + (P[q, 1] - centres[c, 1]) ** 2
            if d < best:
                best = d
                bi = c
        labels[q] = bi
    return k


@numba.njit(cache=True, parallel=True)
def _meanshift_subjects(xy, offsets, bws, max_iter):
    """MeanShift for every subject block ``xy[offsets[s]:offsets[s+1]]`` (independent)."""
    n_sub = len(offsets) - 1
    centres = np.empty((xy.shape[0], 2))
    labels = np.empty(xy.shape[0], dtype=np.int64)
    k = np.zeros(n_sub, dtype=np.int64)
    for s in numba.prange(n_sub):
        a = offsets[s]
        b = offsets[s + 1]
        k[s] = _meanshift_one(xy[a:b], bws[s], max_iter, centres[a:b], labels[a:b])
    return centres, labels, k


def _meanshift_sklearn(xy, offsets, bws, max_iter):
    from sklearn.cluster import MeanShift

    centres = np.empty((xy.shape[0], 2))
    labels = np.empty(xy.shape[0], dtype=np.int64)
    k = np.zeros(len(offsets) - 1, dtype=np.int64)
    for s in progress(range(len(offsets) - 1), "MeanShift (scikit-learn)", len(offsets) - 1):
        a, b = offsets[s], offsets[s + 1]
        ms = MeanShift(bandwidth=float(bws[s]), max_iter=max_iter).fit(xy[a:b])
        k[s] = len(ms.cluster_centers_)
        centres[a : a + k[s]] = ms.cluster_centers_
        labels[a:b] = ms.labels_
    return centres, labels, k


def meanshift_clusters(
    xy: np.ndarray,
    offsets: np.ndarray,
    bandwidths: np.ndarray,
    impl: str = _DEFAULTS["meanshift_impl"],
    max_iter: int = 300,
    chunk: int = 20000,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MeanShift per subject block (decisions.md#meanshift-baseline). Returns (centres, labels, k).

    ``centres[offsets[s]:offsets[s]+k[s]]`` are subject ``s``'s cluster centres in
    scikit-learn's order; ``labels`` the cluster (0..k[s]-1) of every click.
    """
    xy = np.ascontiguousarray(xy, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    bandwidths = np.asarray(bandwidths, dtype=np.float64)
    if impl == "sklearn":
        return _meanshift_sklearn(xy, offsets, bandwidths, max_iter)
    if impl != "numba":
        raise InputError(f"MeanShift impl must be 'numba' or 'sklearn', got {impl!r}")
    n_sub = len(offsets) - 1
    centres = np.empty((xy.shape[0], 2))
    labels = np.empty(xy.shape[0], dtype=np.int64)
    k = np.zeros(n_sub, dtype=np.int64)
    starts = range(0, n_sub, chunk)
    for s0 in progress(starts, "MeanShift", len(starts)):
        s1 = min(s0 + chunk, n_sub)
        a, b = offsets[s0], offsets[s1]
        c, lab, kk = _meanshift_subjects(
            xy[a:b], offsets[s0 : s1 + 1] - a, bandwidths[s0:s1], max_iter
        )
        centres[a:b] = c
        labels[a:b] = lab
        k[s0:s1] = kk
    return centres, labels, k


def _members_stats(clicks: pd.DataFrame, cluster: np.ndarray) -> pd.DataFrame:
    """Per (subject, cluster): members, distinct volunteers, unusual fraction, mean click."""
    g = pd.DataFrame(
        {
            "subject_id": clicks["subject_id"].to_numpy(),
            "cluster": cluster,
            "x": clicks["x"].to_numpy(dtype=float),
            "y": clicks["y"].to_numpy(dtype=float),
            "unusual": (
                clicks["unusual"].astype("boolean").fillna(False).to_numpy(dtype=float)
                if "unusual" in clicks.columns
                else np.zeros(len(clicks))
            ),
            "volunteer": (
                pd.factorize(clicks["volunteer"])[0]
                if "volunteer" in clicks.columns
                else np.arange(len(clicks))
            ),
        }
    ).groupby(["subject_id", "cluster"], sort=True)
    return g.agg(
        n_members=("x", "size"),
        n_volunteers=("volunteer", "nunique"),
        frac_unusual=("unusual", "mean"),
        x_mean=("x", "mean"),
        y_mean=("y", "mean"),
    ).reset_index()


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """Add the clump index, the scoring box and fix the column order."""
    df = df.reset_index(drop=True)
    df["clump"] = df.groupby("subject_id").cumcount().astype(np.int64)
    half = df["box_side"].to_numpy(dtype=float) / 2.0
    df["x1"] = df["x"] - half
    df["y1"] = df["y"] - half
    df["x2"] = df["x"] + half
    df["y2"] = df["y"] + half
    df["n_members"] = df["n_members"].astype(np.int64)
    df["n_volunteers"] = df["n_volunteers"].astype(np.int64)
    return df[LABEL_COLUMNS]


def _empty_labels() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=float) for c in LABEL_COLUMNS}).astype(
        {"subject_id": np.int64, "clump": np.int64, "n_members": np.int64, "n_volunteers": np.int64}
    )


def meanshift_labels(
    boxes_df: pd.DataFrame,
    bandwidth: str | float = _DEFAULTS["bandwidth"],
    impl: str = _DEFAULTS["meanshift_impl"],
    path: object = None,
) -> tuple[pd.DataFrame, dict]:
    """The MeanShift baseline labels (appendix, decisions.md#meanshift-baseline).

    Returns ``(labels, report)``; ``labels`` has :data:`LABEL_COLUMNS`: one row per
    cluster centre (x, y), in scikit-learn's cluster order per subject, with its
    member count, distinct volunteers, unusual fraction, the bandwidth used and
    a box of side ``box_side`` centred on it.
    """
    clicks, report = clicks_of(boxes_df, path)
    report.update({"method": "meanshift", "bandwidth": bandwidth, "impl": impl})
    if not len(clicks):
        report["n_clumps"] = 0
        return _empty_labels(), report
    sids, offsets, side = _subject_blocks(clicks)
    bws = _bandwidths(side, bandwidth)
    xy = clicks[["x", "y"]].to_numpy(dtype=float)
    with timed(f"MeanShift ({impl}) on {len(sids)} subjects"):
        centres, lab, k = meanshift_clusters(xy, offsets, bws, impl)
    stats = _members_stats(clicks, lab)
    # centres in cluster order per subject
    first = np.repeat(np.cumsum(k) - k, k)
    rows = np.repeat(offsets[:-1], k) + np.arange(k.sum()) - first
    out = pd.DataFrame(
        {
            "subject_id": np.repeat(sids, k),
            "cluster": np.arange(k.sum()) - first,
            "x": centres[rows, 0],
            "y": centres[rows, 1],
            "box_side": np.repeat(side, k),
            "bandwidth": np.repeat(bws, k),
        }
    )
    out = out.merge(
        stats.drop(columns=["x_mean", "y_mean"]), on=["subject_id", "cluster"], how="left"
    )
    # a MeanShift centre always keeps >= 1 nearest click, but be explicit about it
    out[["n_members", "n_volunteers"]] = out[["n_members", "n_volunteers"]].fillna(0)
    report["n_clumps"] = int(len(out))
    report["n_subjects_with_clumps"] = int(out["subject_id"].nunique())
    log.info("MeanShift: %d clumps in %d subjects", len(out), report["n_subjects_with_clumps"])
    return _finish(out), report


# ---------------------------------------------------------------- single linkage
def _components(pts: np.ndarray) -> np.ndarray:
    """Connected components of the graph joining points at distance <= 1."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components
    from scipy.spatial import cKDTree

    m = len(pts)
    pairs = cKDTree(pts).query_pairs(1.0, output_type="ndarray")
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(m, m))
    return connected_components(graph, directed=False)[1].astype(np.int64)


def single_linkage_clusters(
    xy: np.ndarray, offsets: np.ndarray, cut: np.ndarray, chunk: int = 20000
) -> np.ndarray:
    """Single-linkage flat clusters cut at distance ``cut[s]`` within each subject block.

    Equals ``fcluster(linkage(X_s, "single"), cut[s], "distance")`` per subject
    (up to relabelling): the clusters are the connected components of the graph
    joining clicks of one subject at distance <= ``cut``. Many subjects at once:
    scaled coordinates ``(x / cut, y / cut, 10 · subject index)`` in one KD-tree,
    pairs within distance 1 (the third coordinate separates subjects exactly);
    ``chunk`` subjects per tree bound the memory. Returns a global cluster id per
    click (increasing with the subject).
    """
    xy = np.asarray(xy, dtype=float)
    offsets = np.asarray(offsets, dtype=np.int64)
    n_sub = len(offsets) - 1
    comp = np.empty(len(xy), dtype=np.int64)
    base = 0
    starts = range(0, n_sub, chunk)
    for s0 in progress(starts, "single linkage", len(starts)):
        s1 = min(s0 + chunk, n_sub)
        a, b = offsets[s0], offsets[s1]
        index = np.repeat(np.arange(s1 - s0), np.diff(offsets[s0 : s1 + 1]))
        c = np.asarray(cut, dtype=float)[s0:s1][index]
        pts = np.column_stack([xy[a:b, 0] / c, xy[a:b, 1] / c, 10.0 * index])
        cc = _components(pts)
        comp[a:b] = cc + base
        base += int(cc.max()) + 1 if b > a else 0
    return comp


def single_linkage_labels(
    boxes_df: pd.DataFrame,
    cut: float = _DEFAULTS["single_linkage_cut"],
    min_volunteers: int = _DEFAULTS["min_volunteers"],
    path: object = None,
) -> tuple[pd.DataFrame, dict]:
    """The simple baseline: single linkage cut at ``cut`` FWHM, >= ``min_volunteers``.

    Clusters marked by fewer than ``min_volunteers`` distinct volunteers are
    dropped (counted in the report). Clumps are ordered per subject by
    decreasing number of volunteers, then x, then y.
    """
    clicks, report = clicks_of(boxes_df, path)
    report.update(
        {"method": "single_linkage", "cut_fwhm": float(cut), "min_volunteers": int(min_volunteers)}
    )
    if not len(clicks):
        report.update(n_clusters=0, n_clusters_dropped=0, n_clumps=0)
        return _empty_labels(), report
    if "volunteer" not in clicks.columns:
        raise InputError("boxes table lacks column volunteer", path=path)
    sids, offsets, side = _subject_blocks(clicks)
    cut_px = float(cut) * side / 2.0
    with timed(f"single linkage on {len(sids)} subjects"):
        comp = single_linkage_clusters(clicks[["x", "y"]].to_numpy(dtype=float), offsets, cut_px)
    stats = _members_stats(clicks, comp)
    keep = stats["n_volunteers"].to_numpy() >= int(min_volunteers)
    report["n_clusters"] = int(len(stats))
    report["n_clusters_dropped"] = int((~keep).sum())
    report["n_clicks_dropped"] = int(stats.loc[~keep, "n_members"].sum())
    stats = stats.loc[keep].rename(columns={"x_mean": "x", "y_mean": "y"})
    side_of = pd.Series(side, index=sids)
    stats["box_side"] = side_of.loc[stats["subject_id"]].to_numpy()
    stats["bandwidth"] = float(cut) * stats["box_side"] / 2.0
    stats = stats.sort_values(
        ["subject_id", "n_volunteers", "x", "y"], ascending=[True, False, True, True], kind="stable"
    )
    report["n_clumps"] = int(len(stats))
    report["n_subjects_with_clumps"] = int(stats["subject_id"].nunique())
    log.info(
        "single linkage: %d clusters, %d dropped (< %d volunteers), %d clumps",
        report["n_clusters"],
        report["n_clusters_dropped"],
        min_volunteers,
        report["n_clumps"],
    )
    return _finish(stats), report


# ---------------------------------------------------------------- DBSCAN
def _pairs_within(xy: np.ndarray, offsets: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """All pairs (i < j) of points of one subject block with ``|p_i - p_j|² <= eps²``.

    Candidates come from one KD-tree over scaled coordinates ``(x / eps, y / eps,
    10 · subject index)`` with a radius slightly above 1; the test itself is made
    on the original coordinates, ``dx² + dy² <= eps²`` (scikit-learn's KD-tree
    test), so clicks at exactly ``eps`` are neighbours as in scikit-learn.
    """
    from scipy.spatial import cKDTree

    index = np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))
    e = eps[index]
    pts = np.column_stack([xy[:, 0] / e, xy[:, 1] / e, 10.0 * index])
    pairs = cKDTree(pts).query_pairs(1.0 + 1e-6, output_type="ndarray")
    if not len(pairs):
        return np.zeros((0, 2), dtype=np.int64)
    i, j = pairs[:, 0], pairs[:, 1]
    d2 = (xy[i, 0] - xy[j, 0]) ** 2 + (xy[i, 1] - xy[j, 1]) ** 2
    keep = (index[i] == index[j]) & (d2 <= e[i] * e[i])
    return pairs[keep].astype(np.int64)


def dbscan_clusters(
    xy: np.ndarray,
    offsets: np.ndarray,
    eps: np.ndarray,
    min_samples: int = _DEFAULTS["dbscan_min_samples"],
    chunk: int = 20000,
) -> np.ndarray:
    """scikit-learn's ``DBSCAN(eps=eps[s], min_samples).fit(X_s).labels_`` for every subject block.

    Returns the label of every point, per subject ``0..k-1`` or ``-1`` (noise),
    exactly as scikit-learn numbers them. scikit-learn's labels are determined
    by the graph alone: a point is *core* when at least ``min_samples`` points
    (itself included) lie within ``eps``; clusters are the connected components
    of the core points (core pairs within ``eps``), numbered in the order of
    their lowest-index core point (the order in which ``dbscan_inner`` starts its
    searches); a non-core point within ``eps`` of core points joins the
    lowest-numbered of their clusters (the first search that reaches it), and
    is noise otherwise. The order in which neighbours are visited never matters.
    Computed for ``chunk`` subjects at a time with one KD-tree (see
    :func:`_pairs_within`).
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    xy = np.ascontiguousarray(xy, dtype=np.float64)
    offsets = np.asarray(offsets, dtype=np.int64)
    eps = np.asarray(eps, dtype=np.float64)
    if not (eps > 0).all():
        raise InputError("DBSCAN eps must be > 0")
    if int(min_samples) < 1:
        raise InputError(f"DBSCAN min_samples must be >= 1, got {min_samples!r}")
    n_sub = len(offsets) - 1
    labels = np.full(len(xy), -1, dtype=np.int64)
    starts = range(0, n_sub, chunk)
    for s0 in progress(starts, "DBSCAN", len(starts)):
        s1 = min(s0 + chunk, n_sub)
        a, b = offsets[s0], offsets[s1]
        m = int(b - a)
        if m == 0:
            continue
        off = offsets[s0 : s1 + 1] - a
        pairs = _pairs_within(xy[a:b], off, eps[s0:s1])
        i, j = pairs[:, 0], pairs[:, 1]
        count = 1 + np.bincount(i, minlength=m) + np.bincount(j, minlength=m)
        core = count >= int(min_samples)
        cc = core[i] & core[j]
        graph = coo_matrix((np.ones(int(cc.sum())), (i[cc], j[cc])), shape=(m, m))
        comp = connected_components(graph, directed=False)[1]
        # number the components of core points by their lowest point index, per subject
        core_idx = np.flatnonzero(core)
        lab = np.full(m, -1, dtype=np.int64)
        if len(core_idx):
            first = np.full(int(comp.max()) + 1, m, dtype=np.int64)
            np.minimum.at(first, comp[core_idx], core_idx)
            roots = np.flatnonzero(first < m)
            roots = roots[np.argsort(first[roots], kind="stable")]
            rank = np.empty(int(comp.max()) + 1, dtype=np.int64)
            rank[roots] = np.arange(len(roots))
            subject = np.repeat(np.arange(s1 - s0), np.diff(off))
            # clusters before each subject's first: subtract to restart at 0 per subject
            base = np.searchsorted(first[roots], off[:-1])
            lab[core_idx] = rank[comp[core_idx]] - base[subject[core_idx]]
            # border points: the lowest-numbered cluster among their core neighbours
            src = np.r_[i, j]
            dst = np.r_[j, i]
            border = core[src] & ~core[dst]
            big = np.iinfo(np.int64).max
            best = np.full(m, big, dtype=np.int64)
            np.minimum.at(best, dst[border], lab[src[border]])
            has = best < big
            lab[has] = best[has]
        labels[a:b] = lab
    return labels


def dbscan_labels(
    boxes_df: pd.DataFrame,
    eps_factor: float = _DEFAULTS["dbscan_eps_factor"],
    min_samples: int = _DEFAULTS["dbscan_min_samples"],
    path: object = None,
) -> tuple[pd.DataFrame, dict]:
    """The DBSCAN baseline: per subject, DBSCAN with ``eps = eps_factor × box_side``.

    Returns ``(labels, report)`` like :func:`meanshift_labels`; ``labels`` has
    :data:`LABEL_COLUMNS`: one row per DBSCAN cluster (noise dropped), in
    scikit-learn's cluster order per subject, centred on the mean of its member
    clicks, ``bandwidth`` = eps (subject pixels), with a box of side
    ``box_side`` centred on it. Clicks are taken per subject in the row order of
    ``boxes_df`` (scikit-learn's border assignment depends on the order).
    """
    eps_factor = float(eps_factor)
    if not eps_factor > 0:
        raise InputError(f"DBSCAN eps_factor must be > 0, got {eps_factor!r}")
    clicks, report = clicks_of(boxes_df, path)
    report.update({"method": "dbscan", "eps_factor": eps_factor, "min_samples": int(min_samples)})
    if not len(clicks):
        report.update(n_clusters=0, n_noise_clicks=0, n_clumps=0)
        return _empty_labels(), report
    sids, offsets, side = _subject_blocks(clicks)
    eps = eps_factor * side
    with timed(f"DBSCAN on {len(sids)} subjects"):
        lab = dbscan_clusters(clicks[["x", "y"]].to_numpy(dtype=float), offsets, eps, min_samples)
    noise = lab < 0
    stats = _members_stats(clicks.loc[~noise], lab[~noise])
    stats = stats.rename(columns={"x_mean": "x", "y_mean": "y"})
    side_of = pd.Series(side, index=sids)
    stats["box_side"] = side_of.loc[stats["subject_id"]].to_numpy()
    stats["bandwidth"] = eps_factor * stats["box_side"]
    report["n_noise_clicks"] = int(noise.sum())
    report["n_clusters"] = report["n_clumps"] = int(len(stats))
    report["n_subjects_with_clumps"] = int(stats["subject_id"].nunique())
    log.info(
        "DBSCAN: %d clumps in %d subjects, %d noise clicks",
        len(stats),
        report["n_subjects_with_clumps"],
        report["n_noise_clicks"],
    )
    return _finish(stats), report


# ---------------------------------------------------------------- comparison
def count_difference(
    ours: pd.DataFrame, baselines: dict[str, pd.DataFrame], subjects: np.ndarray
) -> pd.DataFrame:
    """Clumps per subject: ours, each baseline's, and ``diff_<name> = n_ours − n_<name>``.

    Every subject in ``subjects`` gets a row (zero counts included); counts are
    of all label clumps whatever their p_fp, as in the appendix's figure
    fig:agg_v_ms_dist.
    """
    subjects = np.unique(np.asarray(subjects))
    out = pd.DataFrame({"subject_id": subjects})

    def counts(df):
        return df["subject_id"].value_counts().reindex(subjects, fill_value=0).to_numpy(np.int64)

    out["n_ours"] = counts(ours)
    for name, df in baselines.items():
        out[f"n_{name}"] = counts(df)
    for name in baselines:
        out[f"diff_{name}"] = out["n_ours"] - out[f"n_{name}"]
    return out


# ---------------------------------------------------------------- CLI
METHODS = ("meanshift", "single_linkage", "dbscan")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boxes", required=True, help="boxes.parquet (e.g. the n=20 subsample)")
    p.add_argument(
        "--method",
        action="append",
        choices=METHODS,
        default=None,
        help="baseline(s) to run (repeatable); default: every method given an --out-<method>",
    )
    p.add_argument("--out", default=None, help="labels parquet of the one --method")
    flags = {
        "bandwidth": None,
        "meanshift_impl": "--impl",
        "single_linkage_cut": "--cut",
        "min_volunteers": None,
        "dbscan_eps_factor": "--eps-factor",
        "dbscan_min_samples": "--min-samples",
    }
    add_settings(p, "baseline", flags)
    p.add_argument("--out-meanshift", default=None, help="MeanShift labels parquet")
    p.add_argument("--out-single-linkage", default=None, help="single-linkage labels parquet")
    p.add_argument("--out-dbscan", default=None, help="DBSCAN labels parquet")
    p.add_argument("--report", default=None, help="report JSON")


def _outputs(args: argparse.Namespace) -> dict[str, str]:
    outs = {m: getattr(args, f"out_{m}") for m in METHODS if getattr(args, f"out_{m}")}
    methods = args.method or list(outs)
    if args.out:
        if len(methods) != 1:
            raise InputError("--out needs exactly one --method (else use --out-<method>)")
        outs.setdefault(methods[0], args.out)
    missing = [m for m in methods if m not in outs]
    if missing:
        raise InputError(f"no output for --method {', '.join(missing)} (give --out-<method>)")
    if not methods:
        raise InputError("nothing to do: give --method and --out, or --out-<method>")
    return {m: outs[m] for m in METHODS if m in methods}


def run(args: argparse.Namespace) -> int:
    outs = _outputs(args)
    try:
        boxes = pd.read_parquet(args.boxes)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read parquet: {exc}", path=args.boxes) from exc
    bw = args.bandwidth  # 'fwhm' or pixels (> 0), checked by the option
    reports = {}
    for method, out in outs.items():
        if method == "meanshift":
            labels, reports[method] = meanshift_labels(boxes, bw, args.impl, path=args.boxes)
        elif method == "single_linkage":
            labels, reports[method] = single_linkage_labels(
                boxes, args.cut, args.min_volunteers, path=args.boxes
            )
        else:
            labels, reports[method] = dbscan_labels(
                boxes, args.eps_factor, args.min_samples, path=args.boxes
            )
        write_parquet(labels, out)
    if args.report:
        write_json(reports, args.report)
    return 0
