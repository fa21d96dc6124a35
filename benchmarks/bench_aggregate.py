"""Benchmark of the aggregation engine: wall time, peak memory, subjects per second.

    .venv/bin/python benchmarks/bench_aggregate.py --n-subjects 85286            # synthetic
    .venv/bin/python benchmarks/bench_aggregate.py --boxes results/subsamples/n20/boxes.parquet
    .venv/bin/python benchmarks/bench_aggregate.py --n-subjects 20000 --min-batch 25000

The synthetic input resembles Clump Scout at n = 20: ~2 clumps per galaxy, boxes of
side 2·FWHM (15-40 px of a 400 px image), volunteers with heavy-tailed activity and
varying miss rate, spurious-click rate and scatter; ~2 clicks per classification.
The authors' code needs ~0.82 s per subject; the target is ≥ 500× that throughput
(≥ 610 subjects/s) and the paper-scale run (85k subjects) in < 3 min and < 4 GB.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time


def synthetic_boxes(n_subjects: int, per_subject: int = 20, seed: int = 0, n_volunteers=None):
    """A synthetic boxes table (the columns of `clumpscout boxes`) built with vectorised numpy."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    n_vol = n_volunteers or max(50, int(n_subjects * per_subject / 80))
    # heavy-tailed activity: Zipf-like weights, capped so that a volunteer is in at most
    # ~half of the subjects; one classification per volunteer and subject
    w = 1.0 / np.arange(1, n_vol + 1) ** 0.9
    w /= w.sum()
    w = np.minimum(w, 0.5 / per_subject)
    w /= w.sum()
    p_miss = rng.beta(2, 5, n_vol)
    p_spur = rng.gamma(1.0, 0.25, n_vol)
    scatter = rng.uniform(0.05, 0.3, n_vol)  # in box sides
    side = rng.uniform(15, 40, n_subjects)
    n_clumps = rng.poisson(2.0, n_subjects)
    n_cls = n_subjects * per_subject
    cls_subject = np.repeat(np.arange(n_subjects), per_subject)
    cls_vol = rng.choice(n_vol, n_cls, p=w)
    for _ in range(100):  # redraw volunteers that classify a subject twice
        o = np.lexsort((cls_vol, cls_subject))
        dup = np.zeros(n_cls, bool)
        dup[o[1:]] = (cls_subject[o[1:]] == cls_subject[o[:-1]]) & (
            cls_vol[o[1:]] == cls_vol[o[:-1]]
        )
        if not dup.any():
            break
        cls_vol[dup] = rng.choice(n_vol, int(dup.sum()), p=w)
    # true clumps
    k_total = int(n_clumps.sum())
    clump_xy = rng.uniform(100, 300, (k_total, 2))
    clump_off = np.concatenate([[0], np.cumsum(n_clumps)])
    # every (classification, clump of its subject) pair
    k_per_cls = n_clumps[cls_subject]
    pair_cls = np.repeat(np.arange(n_cls), k_per_cls)
    first = clump_off[cls_subject]
    within = np.arange(len(pair_cls)) - np.repeat(np.cumsum(k_per_cls) - k_per_cls, k_per_cls)
    pair_clump = np.repeat(first, k_per_cls) + within
    marked = rng.random(len(pair_cls)) > p_miss[cls_vol[pair_cls]]
    pc, pk = pair_cls[marked], pair_clump[marked]
    s = side[cls_subject[pc]] * scatter[cls_vol[pc]]
    true_xy = clump_xy[pk] + rng.normal(0, 1, (len(pc), 2)) * s[:, None]
    # spurious clicks
    n_sp = rng.poisson(p_spur[cls_vol])
    sp_cls = np.repeat(np.arange(n_cls), n_sp)
    sp_xy = rng.uniform(20, 380, (len(sp_cls), 2))
    click_cls = np.concatenate([pc, sp_cls])
    click_xy = np.concatenate([true_xy, sp_xy])
    has = np.bincount(click_cls, minlength=n_cls) > 0
    empty_cls = np.flatnonzero(~has)
    all_cls = np.concatenate([click_cls, empty_cls])
    xy = np.concatenate([click_xy, np.full((len(empty_cls), 2), np.nan)])
    order = np.argsort(all_cls, kind="stable")
    all_cls, xy = all_cls[order], xy[order]
    half = side[cls_subject[all_cls]] / 2
    df = pd.DataFrame(
        {
            "classification_id": all_cls.astype(np.int64) + 1,
            "subject_id": cls_subject[all_cls].astype(np.int64) + 10_000_000,
            "volunteer": pd.Categorical.from_codes(
                cls_vol[all_cls], [f"vol{i:06d}" for i in range(n_vol)]
            ).astype(str),
            "x1": xy[:, 0] - half,
            "y1": xy[:, 1] - half,
            "x2": xy[:, 0] + half,
            "y2": xy[:, 1] + half,
            "image_width": 400.0,
            "image_height": 400.0,
            "unusual": rng.random(len(all_cls)) < 0.05,
            "x": xy[:, 0],
            "y": xy[:, 1],
        }
    )
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--boxes", help="a boxes.parquet (default: synthetic boxes)")
    ap.add_argument(
        "--n-subjects",
        type=int,
        default=5000,
        help="synthetic subjects, or the first N subjects of --boxes",
    )
    ap.add_argument(
        "--per-subject", type=int, default=20, help="synthetic classifications per subject"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", help="YAML with an aggregate: section")
    ap.add_argument(
        "--min-batch", type=int, default=None, help="min_batch_classifications override"
    )
    ap.add_argument("--likelihood", choices=["d", "d_squared"], default=None)
    ap.add_argument("--threads", type=int, default=None, help="NUMBA_NUM_THREADS")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.threads:
        os.environ["NUMBA_NUM_THREADS"] = str(args.threads)

    import dataclasses

    import numpy as np
    import pandas as pd

    from clumpscout.logs import setup_logging
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params, load_config

    setup_logging(None, logging.WARNING if args.quiet else logging.INFO)
    t0 = time.perf_counter()
    if args.boxes:
        boxes = pd.read_parquet(args.boxes)
        if args.n_subjects:
            keep = np.sort(boxes["subject_id"].unique())[: args.n_subjects]
            boxes = boxes[boxes["subject_id"].isin(keep)].reset_index(drop=True)
        source = args.boxes
    else:
        boxes = synthetic_boxes(args.n_subjects, args.per_subject, args.seed)
        source = "synthetic"
    t_load = time.perf_counter() - t0
    rss_input = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    params = Params() if not args.config else load_config(args.config)[0]
    over = {}
    if args.min_batch is not None:
        over["min_batch_classifications"] = args.min_batch
    if args.likelihood:
        over["distance_likelihood"] = args.likelihood
    params = dataclasses.replace(params, **over)

    # warm the numba caches on a tiny input so that compilation is not timed
    Aggregator(params, seed=args.seed).fit(synthetic_boxes(20, 10, 1))

    n_subj = int(boxes["subject_id"].nunique())
    n_box = int(boxes["x1"].notna().sum())
    t1 = time.perf_counter()
    res = Aggregator(params, seed=args.seed).fit(boxes)
    wall = time.perf_counter() - t1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    import numba

    st = res.subjects_["status"].value_counts().to_dict()
    print(
        f"input               {source}: {len(boxes):,} rows, {n_box:,} boxes, {n_subj:,} subjects"
    )
    print(f"threads             {numba.get_num_threads()}")
    print(
        f"params              min_batch={params.min_batch_classifications} likelihood={params.distance_likelihood}"
    )
    print(f"input load/make     {t_load:.1f} s")
    print(f"aggregate wall      {wall:.1f} s")
    print(
        f"subjects per second {n_subj / wall:,.0f}  ({0.82 * n_subj / wall:,.0f}x the authors' 0.82 s/subject)"
    )
    print(f"peak RSS            {peak:,.0f} MB (after input: {rss_input:,.0f} MB)")
    print(f"cycles              {len(res.report_['cycles'])}")
    print(f"labels              {len(res.labels_):,}")
    print(f"status              {st}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
