"""Test-only reference implementations (oracles): exact but slow, never used by the pipeline."""

from __future__ import annotations

import numpy as np

from clumpscout.model.distance import jaccard_distance, neg_log_distance_likelihood
from clumpscout.model.facility_location import DUMMY, UNASSIGNED


def brute_force(
    boxes,
    cls,
    open_cost,
    conn_const,
    sigma2,
    dummy_cost,
    *,
    init_phase: bool,
    d_max: float,
    likelihood: str = "d",
    can_be_facility=None,
    can_be_city=None,
    allow_dummy: bool = True,
    min_cluster_size: int = 2,
) -> tuple[np.ndarray, float]:
    """Exact optimum of one small subject (≤ 12 boxes; tests use ≤ 8) under the same objective
    and constraints as :func:`clumpscout.model.facility_location.solve_batch` (exclusivity, ``min_cluster_size`` with the dummy,
    masks, no dummy). Dynamic programming over subsets: the lowest box of the remaining set is
    either outside every cluster (dummy cost, or 0 if it cannot be a city) or in a cluster
    ``B``, whose best facility is chosen exhaustively.

    Returns ``(facility_of, cost)`` with local row indices (−1 dummy, −2 unassigned);
    ``cost`` is eq. total_cost (inf if no feasible assignment exists).
    """
    boxes = np.asarray(boxes, np.float64)
    n = boxes.shape[0]
    if n > 12:
        raise ValueError("brute_force is for at most 12 boxes")
    cls = np.asarray(cls, np.int64)
    oc, cc, s2, dc = (
        np.broadcast_to(np.asarray(x, np.float64), (n,))
        for x in (open_cost, conn_const, sigma2, dummy_cost)
    )
    fac, city = (
        np.ones(n, bool) if m is None else np.asarray(m, bool)
        for m in (can_be_facility, can_be_city)
    )
    min_eff = max(1, min_cluster_size) if allow_dummy else 1  # singletons without the dummy
    D = jaccard_distance(boxes[:, None, :], boxes[None, :, :])
    if init_phase:
        C = np.where(D <= d_max, 0.0, np.inf)
    else:
        C = cc[None, :] + neg_log_distance_likelihood(D, s2[None, :], likelihood)
    C = np.where(city[None, :], C, np.inf)  # C[f, b]: b as a city of f
    self_cost = np.where(init_phase, 0.0, cc + neg_log_distance_likelihood(0.0, s2, likelihood))
    outside = np.where(city, dc if allow_dummy else np.inf, 0.0)

    full = (1 << n) - 1
    block_cost = np.full(full + 1, np.inf)
    block_fac = np.full(full + 1, -1, np.int64)
    for mask in range(1, full + 1):
        members = [b for b in range(n) if mask >> b & 1]
        if len(members) < min_eff:
            continue
        if len(set(cls[members].tolist())) != len(members):
            continue
        for f in members:
            if not fac[f]:
                continue
            c = oc[f] + self_cost[f] + sum(C[f, b] for b in members if b != f)
            if c < block_cost[mask]:
                block_cost[mask] = c
                block_fac[mask] = f
    best = np.full(full + 1, np.inf)
    choice = np.zeros(full + 1, np.int64)
    best[0] = 0.0
    for mask in range(1, full + 1):
        low = (mask & -mask).bit_length() - 1
        rest = mask & ~(1 << low)
        v = outside[low] + best[rest]
        ch = 0  # 0 = outside
        sub = rest
        while True:
            blk = sub | (1 << low)
            c = block_cost[blk] + best[mask & ~blk]
            if c < v:
                v, ch = c, blk
            if sub == 0:
                break
            sub = (sub - 1) & rest
        best[mask] = v
        choice[mask] = ch
    facility_of = np.full(n, UNASSIGNED, np.int64)
    mask = full
    if not np.isfinite(best[full]):
        return facility_of, float("inf")
    while mask:
        low = (mask & -mask).bit_length() - 1
        blk = int(choice[mask])
        if blk == 0:
            facility_of[low] = DUMMY if (city[low] and allow_dummy) else UNASSIGNED
            mask &= ~(1 << low)
        else:
            f = int(block_fac[blk])
            for b in range(n):
                if blk >> b & 1:
                    facility_of[b] = f
            mask &= ~blk
    return facility_of, float(best[full])
