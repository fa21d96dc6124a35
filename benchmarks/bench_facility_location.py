"""Benchmark of the facility-location kernel (paper §5.3) on random realistic subjects.

Each subject: 20 classifications with 0-4 clicks each around Poisson(2.2) "true" clumps (plus
false positives and the odd double click; ~39 boxes per subject, 85k subjects ≈ 3.3M boxes),
boxes of side 2 FWHM (5-35 subject px) in a 400 px image, in normalised coordinates;
per-volunteer skills drawn around the paper's priors. Prints wall
time for one nominal-phase pass and one initialisation-phase pass over the whole batch (after
a warm-up call that compiles / loads the numba cache), CPU time (wall ≈ CPU / threads on an
otherwise idle machine), subjects per second and peak memory.

    .venv/bin/python benchmarks/bench_facility_location.py --n-subjects 85000
"""

from __future__ import annotations

import argparse
import resource
import time

import numba
import numpy as np

from clumpscout.model.facility_location import cluster_costs, solve_batch


def make_batch(n_subjects: int, seed: int = 0, n_class: int = 20) -> dict:
    """Random realistic batch: offsets, boxes, cls and the per-box cost arrays."""
    rng = np.random.default_rng(seed)
    n_vol = max(100, n_subjects // 2)
    p_fp = rng.beta(2, 12, n_vol)
    p_fn = rng.beta(3, 5, n_vol)
    sig2 = rng.uniform(0.04, 0.15, n_vol)
    parts_xy, parts_half, parts_cls, parts_vol, counts = [], [], [], [], []
    next_cls = 0
    for _ in range(n_subjects):
        half = rng.uniform(2.5, 17.5)  # FWHM in subject px; box side = 2 FWHM
        n_clumps = rng.poisson(2.2)
        clumps = 200 + rng.normal(0, 50, (n_clumps, 2))
        vols = rng.choice(n_vol, n_class, replace=False)
        # each volunteer marks each clump unless they miss it (p_fn), at most 4 marks
        seen = rng.random((n_class, n_clumps)) > p_fn[vols][:, None]
        ci, cj = np.nonzero(seen)
        xy = clumps[cj] + rng.normal(0, 0.25 * half, (ci.size, 2))
        # false positives: 40% of volunteers add 1-2 marks around the galaxy
        n_fp = np.where(rng.random(n_class) < 0.4, rng.integers(1, 3, n_class), 0)
        fi = np.repeat(np.arange(n_class), n_fp)
        fxy = 200 + rng.normal(0, 60, (fi.size, 2))
        # double clicks: 5% of volunteers click one of their marks twice
        vi = np.concatenate([ci, fi])
        pts = np.vstack([xy, fxy])
        dbl = np.flatnonzero(rng.random(vi.size) < 0.05 / 2)
        vi = np.concatenate([vi, vi[dbl]])
        pts = np.vstack([pts, pts[dbl] + rng.normal(0, 1.0, (dbl.size, 2))])
        order = np.argsort(vi, kind="stable")
        vi, pts = vi[order], pts[order]
        rank = np.arange(vi.size) - np.searchsorted(vi, vi)
        keep = rank < 4
        vi, pts = vi[keep], pts[keep]
        parts_xy.append(pts)
        parts_half.append(np.full(vi.size, half))
        parts_cls.append(next_cls + vi)
        parts_vol.append(vols[vi])
        counts.append(vi.size)
        next_cls += n_class
    xy = np.vstack(parts_xy)
    half = np.concatenate(parts_half)[:, None]
    boxes = np.hstack([xy - half, xy + half]) / 400.0
    cls = np.concatenate(parts_cls).astype(np.int64)
    vol = np.concatenate(parts_vol)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = boxes.shape[0]
    # C^f = -sum over the subject's volunteers of ln p_fn (20 typical volunteers)
    open_cost = np.full(n, -n_class * np.mean(np.log(p_fn)))
    return dict(
        offsets=offsets,
        boxes=boxes,
        cls=cls,
        open_cost=open_cost,
        conn_const=np.log(p_fn[vol]) - np.log1p(-p_fn[vol]) - np.log1p(-p_fp[vol]),
        sigma2=sig2[vol],
        dummy_cost=-np.log(p_fp[vol]),
        init_open=np.full(n, 0.1 * n_class),
    )


def _run(b, init: bool):
    kw = dict(init_phase=init, d_max=0.9, likelihood="d")
    oc = b["init_open"] if init else b["open_cost"]
    dc = np.ones_like(b["dummy_cost"]) if init else b["dummy_cost"]
    t0, c0 = time.perf_counter(), time.process_time()
    f = solve_batch(b["offsets"], b["boxes"], b["cls"], oc, b["conn_const"], b["sigma2"], dc, **kw)
    dt, dcpu = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    cc = cluster_costs(b["offsets"], b["boxes"], f, oc, b["conn_const"], b["sigma2"], dc, **kw)
    dt_cost = time.perf_counter() - t0
    return f, cc, dt, dcpu, dt_cost


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
    results = {}
    for init in (False, True):
        f, cc, dt, dcpu, dt_cost = _run(b, init)
        results[init] = f
        name = "init   " if init else "nominal"
        print(
            f"{name}: solve_batch {dt:6.2f} s wall, {dcpu:6.2f} s CPU "
            f"({args.n_subjects / dt:7.0f} subjects/s, {numba.get_num_threads()} threads), "
            f"cluster_costs {dt_cost:5.2f} s; clusters {cc.facility.size}, "
            f"dummy {np.mean(f == -1):.3f} of boxes"
        )
    # §5.7 constrained re-clustering of the nominal result: no dummy, facilities excluded,
    # cluster members may only be facilities, false positives must join a cluster
    f = results[False]
    rows = np.arange(f.size)
    t0, c0 = time.perf_counter(), time.process_time()
    f2 = solve_batch(
        b["offsets"], b["boxes"], b["cls"], b["open_cost"], b["conn_const"], b["sigma2"],
        b["dummy_cost"], init_phase=False, d_max=0.9, can_be_facility=f != rows,
        can_be_city=f == -1, allow_dummy=False,
    )  # fmt: skip
    dt, dcpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"§5.7   : solve_batch {dt:6.2f} s wall, {dcpu:6.2f} s CPU "
        f"({args.n_subjects / dt:7.0f} subjects/s); clusters {(f2 == rows).sum()}"
    )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak:.0f} MB")


if __name__ == "__main__":
    main()
