"""Benchmark of the facility-location kernel (paper §5.3) on random realistic subjects.

Each subject: ~20 classifications with 0-4 clicks each around a few "true" clumps (plus false
positives and the odd double click), boxes of side 2 FWHM (5-35 subject px) in a 400 px image,
in normalised coordinates; per-volunteer skills drawn around the paper's priors. Prints wall
time for one nominal-phase pass and one initialisation-phase pass over the whole batch (after
a warm-up call that compiles / loads the numba cache), subjects per second and peak memory.

    .venv/bin/python benchmarks/bench_facility_location.py --n-subjects 85000
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from clumpscout.facility_location import cluster_costs, solve_batch


def make_batch(n_subjects: int, seed: int = 0, n_class: int = 20):
    """Random realistic batch: returns offsets, boxes, cls and per-box cost arrays."""
    rng = np.random.default_rng(seed)
    n_vol = max(100, n_subjects // 2)
    p_fp = rng.beta(2, 12, n_vol)
    p_fn = rng.beta(3, 5, n_vol)
    sig2 = rng.uniform(0.04, 0.15, n_vol)
    rows_b, rows_c, rows_v, offsets = [], [], [], [0]
    cls_code = 0
    for _ in range(n_subjects):
        fwhm = rng.uniform(2.5, 17.5)
        side = 2 * fwhm
        n_clumps = rng.poisson(1.5)
        clumps = 200 + rng.normal(0, 50, (n_clumps, 2))
        vols = rng.choice(n_vol, n_class, replace=False)
        sb = []
        for v in vols:
            seen = clumps[rng.random(n_clumps) > p_fn[v]]
            k = min(4, seen.shape[0])
            pts = seen[:k] + rng.normal(0, 0.25 * fwhm, (k, 2))
            if rng.random() < 0.4:  # false positives
                pts = np.vstack([pts, 200 + rng.normal(0, 60, (rng.integers(1, 3), 2))])
            if pts.shape[0] and rng.random() < 0.05:  # double click
                pts = np.vstack([pts, pts[:1] + rng.normal(0, 1.0, (1, 2))])
            pts = pts[:4]
            if pts.shape[0] == 0:
                continue
            b = np.hstack([pts - fwhm, pts + fwhm]) / 400.0
            sb.append(b)
            rows_c.append(np.full(pts.shape[0], cls_code))
            rows_v.append(np.full(pts.shape[0], v))
            cls_code += 1
        rows_b.extend(sb)
        offsets.append(offsets[-1] + sum(x.shape[0] for x in sb))
        _ = side
    boxes = np.vstack(rows_b)
    cls = np.concatenate(rows_c).astype(np.int64)
    vol = np.concatenate(rows_v)
    offsets = np.asarray(offsets, np.int64)
    n_sub = offsets.size - 1
    sub = np.repeat(np.arange(n_sub), np.diff(offsets))
    # C^f = -sum over the subject's volunteers of ln p_fn (approximate: n_class typical ones)
    open_sub = -n_class * np.log(np.mean(p_fn)) * np.ones(n_sub)
    open_cost = open_sub[sub]
    conn_const = np.log(p_fn[vol]) - np.log1p(-p_fn[vol]) - np.log1p(-p_fp[vol])
    return dict(
        offsets=offsets,
        boxes=boxes,
        cls=cls,
        open_cost=open_cost,
        conn_const=conn_const,
        sigma2=sig2[vol],
        dummy_cost=-np.log(p_fp[vol]),
        init_open=np.full(boxes.shape[0], 0.1 * n_class),
    )


def _run(b, init: bool):
    kw = dict(init_phase=init, d_max=0.9, likelihood="d")
    oc = b["init_open"] if init else b["open_cost"]
    dc = np.ones_like(b["dummy_cost"]) if init else b["dummy_cost"]
    t0 = time.perf_counter()
    f = solve_batch(b["offsets"], b["boxes"], b["cls"], oc, b["conn_const"], b["sigma2"], dc, **kw)
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    cc = cluster_costs(b["offsets"], b["boxes"], f, oc, b["conn_const"], b["sigma2"], dc, **kw)
    dt_cost = time.perf_counter() - t0
    return f, cc, dt, dt_cost


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-subjects", type=int, default=85_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    warm = make_batch(50, seed=args.seed + 1)
    _run(warm, False)
    _run(warm, True)
    print(f"warm-up (compile or cache load): {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    b = make_batch(args.n_subjects, seed=args.seed)
    n = b["boxes"].shape[0]
    sizes = np.diff(b["offsets"])
    print(
        f"batch: {args.n_subjects} subjects, {n} boxes (median {np.median(sizes):.0f}, "
        f"max {sizes.max()} per subject), generated in {time.perf_counter() - t0:.1f} s"
    )
    for init in (False, True):
        f, cc, dt, dt_cost = _run(b, init)
        name = "init   " if init else "nominal"
        print(
            f"{name}: solve_batch {dt:7.2f} s ({args.n_subjects / dt:9.0f} subjects/s), "
            f"cluster_costs {dt_cost:5.2f} s; clusters {cc.facility.size}, "
            f"dummy {np.mean(f == -1):.3f} of boxes"
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MB")


if __name__ == "__main__":
    main()
