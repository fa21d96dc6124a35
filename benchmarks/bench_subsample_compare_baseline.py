"""Paper-scale timings of the subsample, compare and baseline stages (the paper-scale run).

Builds a synthetic boxes table of the paper's size (85,286 subjects, ~20 classifications
each, ~3.5M rows), then times: one subsample draw, MeanShift (numba port), single
linkage and DBSCAN (the workflow's settings: eps = 0.5 box side, min_samples 3; the
vectorised port of scikit-learn's) on every subject, scikit-learn MeanShift and DBSCAN on a
sample of subjects (extrapolated), and the truth comparison of ~130k labels. Prints wall
times and peak memory.

    .venv/bin/python benchmarks/bench_subsample_compare_baseline.py [--subjects N]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np
import pandas as pd


def synthetic_boxes(n_subjects: int, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    n_cls = rng.integers(18, 24, n_subjects)
    k_true = rng.poisson(1.5, n_subjects)
    fwhm = rng.uniform(6, 15, n_subjects)
    # true clumps
    t_sub = np.repeat(np.arange(n_subjects), k_true)
    t_xy = rng.uniform(120, 280, (len(t_sub), 2))
    truth = pd.DataFrame({"subject_id": t_sub, "clump": 0, "x": t_xy[:, 0], "y": t_xy[:, 1],
                          "unusual": rng.random(len(t_sub)) < 0.1})  # fmt: skip
    t_start = np.r_[0, np.cumsum(k_true)[:-1]]
    # classifications and their clicks: each true clump marked with p=0.55, ~0.6 spurious
    c_sub = np.repeat(np.arange(n_subjects), n_cls)
    n_c = len(c_sub)
    cid = np.arange(n_c) + 10_000_000
    kt = k_true[c_sub]
    n_true_clicks = rng.binomial(kt, 0.55)
    n_spur = rng.poisson(0.6, n_c)
    n_clicks = n_true_clicks + n_spur
    row_c = np.repeat(np.arange(n_c), np.maximum(n_clicks, 1))
    first = np.r_[0, np.cumsum(np.maximum(n_clicks, 1))[:-1]]
    within = np.arange(len(row_c)) - first[row_c]
    is_true = within < n_true_clicks[row_c]
    s = c_sub[row_c]
    x = rng.uniform(0, 400, len(row_c))
    y = rng.uniform(0, 400, len(row_c))
    pick = t_start[s] + np.minimum(within, np.maximum(k_true[s] - 1, 0))
    ok = is_true & (k_true[s] > 0)
    x[ok] = t_xy[pick[ok], 0] + rng.normal(0, 0.3, ok.sum()) * fwhm[s[ok]]
    y[ok] = t_xy[pick[ok], 1] + rng.normal(0, 0.3, ok.sum()) * fwhm[s[ok]]
    empty = n_clicks[row_c] == 0
    x[empty] = np.nan
    y[empty] = np.nan
    side = 2 * fwhm[s]
    boxes = pd.DataFrame({"classification_id": cid[row_c], "subject_id": s,
                          "volunteer": pd.Series(rng.integers(0, 21000, n_c)[row_c]).map("v{}".format),
                          "x": x, "y": y, "x1": x - side / 2, "y1": y - side / 2,
                          "x2": x + side / 2, "y2": y + side / 2, "box_side": side,
                          "unusual": rng.random(len(row_c)) < 0.1})  # fmt: skip
    return boxes, truth


#: the workflow's DBSCAN settings (config baseline.dbscan_eps_factor, dbscan_min_samples)
DBSCAN_EPS_FACTOR = 0.5
DBSCAN_MIN_SAMPLES = 3


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--subjects", type=int, default=85_286)
    ap.add_argument("--sklearn-sample", type=int, default=100)
    a = ap.parse_args()
    from clumpscout.data.subsample import draw_subsample
    from clumpscout.evaluation.baseline import (
        _subject_blocks,
        clicks_of,
        dbscan_labels,
        meanshift_clusters,
        meanshift_labels,
        single_linkage_labels,
    )
    from clumpscout.evaluation.compare import score_truth

    t = time.perf_counter()
    boxes, truth = synthetic_boxes(a.subjects)
    print(f"synthetic boxes: {len(boxes):,} rows, {boxes.classification_id.nunique():,} "
          f"classifications, {a.subjects:,} subjects ({time.perf_counter() - t:.1f} s)")  # fmt: skip
    t = time.perf_counter()
    b20, rep = draw_subsample(boxes, 20, seed=1)
    print(f"subsample n=20: {time.perf_counter() - t:.2f} s ({rep['n_rows_out']:,} rows)")
    t = time.perf_counter()
    draw_subsample(boxes, 5, seed=1)
    print(f"subsample n=5: {time.perf_counter() - t:.2f} s")
    meanshift_labels(b20.head(1000))  # compile / load the numba cache
    t = time.perf_counter()
    ms, _ = meanshift_labels(b20)
    t_ms = time.perf_counter() - t
    print(f"MeanShift (numba port), all subjects: {t_ms:.2f} s, {len(ms):,} clumps")
    t = time.perf_counter()
    sl, _ = single_linkage_labels(b20)
    print(f"single linkage, all subjects: {time.perf_counter() - t:.2f} s, {len(sl):,} clumps")
    t = time.perf_counter()
    db, _ = dbscan_labels(b20, eps_factor=DBSCAN_EPS_FACTOR, min_samples=DBSCAN_MIN_SAMPLES)
    print(f"DBSCAN, all subjects: {time.perf_counter() - t:.2f} s, {len(db):,} clumps")
    clicks, _ = clicks_of(b20)
    sids, offsets, side = _subject_blocks(clicks)
    m = min(a.sklearn_sample, len(sids))
    xy = clicks[["x", "y"]].to_numpy()
    t = time.perf_counter()
    meanshift_clusters(xy[: offsets[m]], offsets[: m + 1], side[:m] / 2, impl="sklearn")
    per = (time.perf_counter() - t) / m
    print(f"MeanShift (scikit-learn): {per * 1e3:.1f} ms/subject -> "
          f"{per * len(sids) / 60:.0f} min for {len(sids):,} subjects (1 core)")  # fmt: skip
    from sklearn.cluster import DBSCAN

    t = time.perf_counter()
    for k in range(m):
        block = xy[offsets[k] : offsets[k + 1]]
        DBSCAN(eps=DBSCAN_EPS_FACTOR * side[k], min_samples=DBSCAN_MIN_SAMPLES).fit(block)
    per = (time.perf_counter() - t) / m
    print(f"DBSCAN (scikit-learn): {per * 1e3:.2f} ms/subject -> "
          f"{per * len(sids):.0f} s for {len(sids):,} subjects (1 core)")  # fmt: skip
    labels = sl.assign(p_fp=np.random.default_rng(2).random(len(sl)))
    t = time.perf_counter()
    score_truth(labels, truth, thresholds=101, subjects=np.arange(a.subjects))
    print(f"score_truth, {len(labels):,} labels vs {len(truth):,} true clumps: "
          f"{time.perf_counter() - t:.2f} s")  # fmt: skip
    print(f"peak RSS {peak_gb():.2f} GB")


if __name__ == "__main__":
    main()
