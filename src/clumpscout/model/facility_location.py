"""Greedy facility location with a dummy facility (paper §5.3, §5.7; decisions.md#facility-location-greedy, #nominal-costs, #init-costs, #one-box-per-classification).

For every subject the volunteer boxes are partitioned into clusters, each with a central
*facility* box, plus a *dummy* facility for false positives, minimising the total cost
(eq. total_cost)::

    C_i = Σ_clusters [ C^f(facility) + Σ_{b in cluster} C^fc(facility, b) ] + Σ_{b -> dummy} C^∅c(b)

Costs (all per box, supplied by the caller; the CITY's volunteer sets them, decisions.md#nominal-costs):

* nominal phase (eq. fac_cost, city_fac_cost, city_dummy_cost; decisions.md#nominal-costs):
  ``C^f(f) = open_cost[f]`` (the caller passes ``−Σ_{j∈V_i} ln p_fn_j``),
  ``C^fc(f, b) = conn_const[b] + neg_log_distance_likelihood(d(f, b), sigma2[b])`` with
  ``conn_const = ln p_fn − ln(1 − p_fn) − ln(1 − p_fp)`` of b's volunteer; the facility's own
  box is connected to itself at d = 0 and pays that cost too (decisions.md#nominal-costs; eq. cluster_cost's
  ``j ≠ j'`` is overridden); ``C^∅c(b) = dummy_cost[b]`` (``−ln p_fp``).
* initialisation phase (eq. init_open_cost, init_conn_cost, init_city_dummy_cost; decisions.md#init-costs):
  ``open_cost = f_V |V_i|`` and ``dummy_cost = 1`` (filled by the caller),
  ``C^fc = 0`` if ``d ≤ d_max`` else forbidden (∞).

Constraints: at most one box per classification (``cls``) per cluster, a double click
included (decisions.md#one-box-per-classification); with the dummy available a real cluster has at least
``min_cluster_size`` boxes (paper: "establishing a new cluster entails labelling a box as a
facility and connecting at least one other box provided by a different volunteer").

The greedy (decisions.md#facility-location-greedy) — a constrained Jain–Mahdian–Saberi ("1.61") greedy
------------------------------------------------------------------------------
The JMS algorithm in its time-driven form (Jain, Mahdian, Markakis, Saberi & Vazirani 2003,
Algorithm 2; the star formulation is equivalent): every still-unconnected city raises its
budget ``α = t`` uniformly with time ``t``. An unconnected city offers ``max(0, t − c(f, b))``
to a closed facility ``f``; an already connected city offers its saving
``max(0, c(current, b) − c(f, b))`` (it would switch). Events, processed in time order:

* (A) an unconnected city's budget reaches ``c(i, b)`` of an open facility i (the dummy is a
  facility of opening cost 0 that is open from the start and has no exclusivity): it connects;
* (O) the offers to a closed facility reach its opening cost: it opens, the offering
  unconnected cities connect and the offering connected cities switch to it. At the time of
  opening ``t`` this is exactly the star of lowest average cost
  ``(C^f + Σ_new c(f, b) − Σ_switchers saving) / |new|``.

The algorithm runs until no event is left (every city connected). Variant details:

1. Costs are shifted per city so that all are non-negative (JMS assumes c ≥ 0): every option
   of city b (connect to any facility, be the facility, go to the dummy) is reduced by
   ``m_b = min(C^fc(b, b), C^∅c(b))`` (``C^fc(b, b)`` without dummy) — the minimum over b's
   options, since d = 0 minimises ``C^fc(·, b)``. Every city pays exactly one option, so the
   optimum is unchanged (the objective moves by the constant ``Σ m_b``); with nominal costs
   this leaves ``c'(f, b) = d²/(2σ_b²)`` (or d⁴/2σ²) and a dummy cost of
   ``−ln p_fp − C^fc(b, b)``. A box that cannot be a city is not shifted (it may stay
   unassigned at cost 0); its opening cost includes its own connection cost.
2. A facility box is a member of its own cluster: opening f connects f to itself
   (forced, cost ``c'(f, f)``, counted in the star). Any box that may be a facility and is not
   one yet is a candidate — unconnected, on the dummy, or a member of a cluster that keeps at
   least ``min_cluster_size`` boxes without it (it then leaves that cluster).
3. Exclusivity inside the star: per classification only one box takes part — the cheaper of
   (best unconnected city, offer ``t − a_k``) and (best switcher, offer ``s_k``); the
   facility's own classification and classifications already in the cluster are excluded
   (also for event A, so an open facility never takes a second box of a classification).
4. ``min_cluster_size`` (only with the dummy): a closed facility opens only with a star of at
   least that many boxes (itself included). If the boxes that offer something are too few,
   the boxes that lose least join as *forced* members (negative offers): the opening time is
   then the lowest average cost over stars of the required size (exactly computed: g is
   concave). A city may switch out of a real cluster only if that cluster keeps at least
   ``min_cluster_size`` boxes (jointly per star: surplus switchers with the smallest savings
   are dropped). Without the dummy singletons are allowed.
5. Facilities that can open from switch savings alone (connected cities only) open as soon as
   the savings reach the opening cost, also after the last city connected (each such step
   lowers the cost).
6. Without the dummy (``allow_dummy=False``, the constrained re-clustering of §5.7) a city
   that no facility took (it cannot be a facility and the clusters it could join hold its
   classification) is placed by evicting the box of its classification from such a cluster
   (that box opens its own facility or moves to a cluster with a free slot), at the least cost
   increase; a city stays unassigned (−2) only if that is impossible too. With §5.7's masks
   (every possible city may also be a facility) this never happens.

Guarantee. JMS proved the 1.61 bound for metric uncapacitated facility location. These
costs are not metric (d² of a Jaccard distance; 0/∞ in the initialisation phase) and carry
the exclusivity and minimum-size side constraints, so the bound is not a theorem here; the
tests check it on small random instances with nominal costs (found ≤ 1.07 × optimum on
thousands of instances). In the initialisation phase with a cheap opening cost
(``f_V |V_i| < 1``, i.e. fewer than 10 volunteers) and ``min_cluster_size = 2`` the problem
contains a matching problem where a greedy can strand boxes on the dummy (random 6-box
instances reach ~3× the optimum); that only seeds the EM.

Speed (all exact, the result equals the plain event loop): opening times are evaluated
lazily — a stored time is a lower bound of the true one, since every state change only
delays openings except a growing cluster letting its members switch (those times are reset);
a time stays exact until a box of its star changes. With the dummy available a city b never
joins a facility f with ``c'(f, b) > dummy'(b) + margin_f`` (it reaches the dummy first and
would never save by switching; ``margin_f > 0`` only when opening f is cheaper than its own
dummy cost, for forced members), so the subject splits into independent components of boxes
linked that way (initialisation: ``d ≤ d_max``; disjoint boxes only link when ``1/(2σ_b²)``
is below the dummy cost); a component of one city goes to the dummy. Without the dummy the
bound is the city's own opening time ``F_b + c'(b, b)`` when it may be a facility (it opens
itself by then at the latest, and a facility never moves). A facility whose opening
cost exceeds the most its neighbours could ever offer (``Σ_k max(0, dummy' − c')``) is never
considered.

Determinism and tie-breaking: each subject's rows are first put in a canonical order by
``(x1, y1, x2, y2, cls)`` and all sums and scans run in that order, so the result does not
depend on the input row order within a subject (rows identical in all five keys are
interchangeable) nor on the number of threads (subjects are independent; a thread pool runs
contiguous ranges of subjects through a ``nogil`` kernel, ``numba.get_num_threads()``
threads). Events at equal time: connections to an open real facility first, then openings,
then connections to the dummy (so a cluster wins a cost tie with the dummy); among equals the
smaller Jaccard distance (for openings: the smaller sum of distances from the facility to its
star), then the canonical index. Within a classification the cheaper box, then the nearer,
then the canonical first is the star's candidate.

API: :func:`solve_batch` (the numba kernels, :mod:`clumpscout.model.facility_kernels`, over
all subjects, threads over subjects),
:func:`cluster_costs` (eq. cluster_cost / total_cost / C^∅ of §5.7 for an assignment).
The exact optimum of a small subject (the tests' reference) is ``tests/oracles.py``'s
``brute_force``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np

from clumpscout.model.distance import (
    jaccard_distance,
    likelihood_code,
    neg_log_distance_likelihood,
)
from clumpscout.model.facility_kernels import (
    DUMMY,
    UNASSIGNED,
    solve_range,
)


# ----------------------------------------------------------------------------------------
# Python API
# ----------------------------------------------------------------------------------------
def _as_float(x, n, name):
    a = np.ascontiguousarray(x, dtype=np.float64)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    return a


def _as_mask(x, n, name):
    if x is None:
        return np.ones(n, np.bool_)
    a = np.ascontiguousarray(x, dtype=np.bool_)
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    return a


def _cost_arrays(n, open_cost, conn_const, sigma2, dummy_cost):
    """The four per-box cost arrays as contiguous float64[n]."""
    names = ("open_cost", "conn_const", "sigma2", "dummy_cost")
    costs = (open_cost, conn_const, sigma2, dummy_cost)
    return [_as_float(x, n, name) for x, name in zip(costs, names, strict=True)]


def _masks(n, can_be_facility, can_be_city, allow_dummy, min_cluster_size):
    """Facility and city masks, and the effective minimum cluster size (1 without the dummy)."""
    fac = _as_mask(can_be_facility, n, "can_be_facility")
    city = _as_mask(can_be_city, n, "can_be_city")
    min_eff = max(1, int(min_cluster_size)) if allow_dummy else 1
    return fac, city, min_eff


def _check_offsets(offsets, n):
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if offsets.ndim != 1 or offsets.size < 1 or offsets[0] != 0 or offsets[-1] != n:
        raise ValueError("offsets must be int64[S+1] with offsets[0] == 0 and offsets[-1] == N")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")
    return offsets


def _check_inputs(offsets, boxes, cls, open_cost, conn_const, sigma2, dummy_cost, init_phase):
    boxes = np.ascontiguousarray(boxes, dtype=np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must have shape (N, 4), got {boxes.shape}")
    n = boxes.shape[0]
    offsets = _check_offsets(offsets, n)
    if not np.isfinite(boxes).all():
        raise ValueError("boxes must be finite (drop empty classifications before clustering)")
    cls = np.ascontiguousarray(cls, dtype=np.int64)
    if cls.shape != (n,):
        raise ValueError(f"cls must have shape ({n},), got {cls.shape}")
    arrays = _cost_arrays(n, open_cost, conn_const, sigma2, dummy_cost)
    if not init_phase:
        if not np.isfinite(arrays[1]).all():
            raise ValueError("conn_const must be finite")
        if not (arrays[2] > 0).all() or not np.isfinite(arrays[2]).all():
            raise ValueError("sigma2 must be finite and > 0")
    if np.isnan(arrays[0]).any() or (arrays[0] == -np.inf).any():
        raise ValueError("open_cost must not be NaN or -inf (+inf: never a facility)")
    if not np.isfinite(arrays[3]).all():
        raise ValueError("dummy_cost must be finite")
    return offsets, boxes, cls, arrays


def solve_batch(
    offsets,
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
) -> np.ndarray:
    """Greedy facility location for every subject of a batch (paper §5.3; decisions.md#facility-location-greedy, #nominal-costs, #init-costs, #one-box-per-classification).

    Parameters
    ----------
    offsets : int64[S+1]
        Subject s owns rows ``offsets[s]:offsets[s+1]`` (rows grouped by subject).
    boxes : float64[N, 4]
        ``(x1, y1, x2, y2)`` in normalised coordinates (decisions.md#jaccard-distance). Must be finite.
    cls : int64[N]
        Classification code: boxes with equal code in a subject come from one classification
        and never share a cluster (decisions.md#one-box-per-classification), a double click included.
    open_cost : float64[N]
        ``C^f`` of opening a facility at the box: nominal ``−Σ_{j∈V_i} ln p_fn_j``
        (eq. fac_cost), init ``f_V |V_i|`` (eq. init_open_cost).
    conn_const : float64[N]
        The city-side constant of eq. city_fac_cost, ``ln p_fn − ln(1−p_fn) − ln(1−p_fp)`` of
        the box's (the city's) volunteer (decisions.md#nominal-costs). Ignored in the init phase.
    sigma2 : float64[N]
        σ² of the city box (its volunteer's, or the combined variance, decisions.md#combined-variance). Ignored in the
        init phase.
    dummy_cost : float64[N]
        ``C^∅c``: nominal ``−ln p_fp`` (eq. city_dummy_cost), init 1 (eq. init_city_dummy_cost).
    init_phase : bool
        Initialisation costs (eq. init_conn_cost: 0 if ``d ≤ d_max`` else forbidden).
    d_max : float
        Only used in the init phase.
    likelihood : "d" | "d_squared"
        Distance likelihood (decisions.md#distance-likelihood).
    can_be_facility, can_be_city : bool[N] or None
        Masks for the constrained re-clustering of §5.7 (default: all True). A box that is
        neither is left unassigned (−2).
    allow_dummy : bool
        False for §5.7: every box that can be a city must join a cluster (singletons allowed).
    min_cluster_size : int
        Minimum boxes of a real cluster when the dummy is available (default 2).

    Returns
    -------
    facility_of : int64[N]
        Global row of the facility of each box's cluster (a facility points to itself);
        −1 = dummy facility (false positive); −2 = not assigned.

    The algorithm, its pruning and its tie-breaking are described in the module docstring.
    Subjects are independent: contiguous ranges of them run on ``numba.get_num_threads()``
    threads (a ``nogil`` kernel), the result does not depend on the thread count. One pass
    over ~3.3M boxes in 85k subjects takes ~10 s CPU with nominal costs, ~6 s with init costs,
    ~20 s for the §5.7 re-clustering (no dummy, so no pruning by the dummy cost)
    (``benchmarks/bench_facility_location.py``); the first call compiles (~25 s, then cached).
    """
    kind = likelihood_code(likelihood)
    offsets, boxes, cls, (oc, cc, s2, dc) = _check_inputs(
        offsets, boxes, cls, open_cost, conn_const, sigma2, dummy_cost, init_phase
    )
    n = boxes.shape[0]
    fac, city, min_eff = _masks(n, can_be_facility, can_be_city, allow_dummy, min_cluster_size)
    if init_phase:
        s2 = np.ones(n)  # unused
    out = np.full(n, UNASSIGNED, np.int64)
    rows = (boxes, cls, oc, cc, s2, dc, fac, city)
    opts = (bool(init_phase), float(d_max), kind, bool(allow_dummy), min_eff)
    args = (offsets, rows, opts, out)
    n_sub = offsets.size - 1
    ranges = _subject_ranges(offsets, _n_threads())
    if len(ranges) <= 1:
        solve_range(0, n_sub, *args)
    else:
        with ThreadPoolExecutor(max_workers=_n_threads()) as pool:
            list(pool.map(lambda r: solve_range(r[0], r[1], *args), ranges))
    return out


def _n_threads() -> int:
    """Worker threads: numba's thread count (NUMBA_NUM_THREADS), as for prange kernels."""
    return max(1, int(numba.get_num_threads()))


def _subject_ranges(offsets: np.ndarray, n_threads: int) -> list[tuple[int, int]]:
    """Split the subjects into contiguous ranges of similar work (~ boxes², the greedy is
    quadratic to cubic in a subject's boxes) for the thread pool; one range per thread when
    there is little work. Each subject is solved independently, so the result does not
    depend on the split (nor on the number of threads)."""
    n_sub = offsets.size - 1
    if n_threads <= 1 or n_sub < 2:
        return [(0, n_sub)]
    work = np.diff(offsets).astype(np.float64) ** 2 + 1.0
    cum = np.cumsum(work)
    n_chunks = min(n_sub, 16 * n_threads)
    cuts = np.searchsorted(cum, cum[-1] * np.arange(1, n_chunks) / n_chunks)
    bounds = np.unique(np.concatenate([[0], cuts, [n_sub]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


@dataclass
class ClusterCosts:
    """Costs of an assignment (eq. cluster_cost, city_dummy_cost, total_cost; §5.7 C^∅).

    Per box (length N):
      ``connection_cost`` — ``C^fc(facility, b)`` for a cluster member (the facility itself at
      d = 0, decisions.md#nominal-costs), ``C^∅c(b)`` for a box on the dummy, NaN for an unassigned box;
      ``cluster_of`` — index into the per-cluster arrays, −1 dummy, −2 unassigned.
    Per cluster (length L, ordered by facility row):
      ``facility`` (global row), ``cluster_subject``, ``cluster_size`` (boxes incl. facility),
      ``cluster_cost`` — eq. cluster_cost ``C^f(f) + Σ_{b∈Z} C^fc(f, b)``,
      ``cluster_dummy_cost`` — ``C^∅_l = Σ_{b∈Z} C^∅c(b)`` (§5.7, facility included).
    Per subject (length S): ``subject_cost`` — eq. total_cost ``C_i`` (unassigned boxes add 0).
    """

    connection_cost: np.ndarray
    cluster_of: np.ndarray
    facility: np.ndarray
    cluster_subject: np.ndarray
    cluster_size: np.ndarray
    cluster_cost: np.ndarray
    cluster_dummy_cost: np.ndarray
    subject_cost: np.ndarray


def cluster_costs(
    offsets,
    boxes,
    facility_of,
    open_cost,
    conn_const,
    sigma2,
    dummy_cost,
    *,
    init_phase: bool,
    d_max: float,
    likelihood: str = "d",
) -> ClusterCosts:
    """Per-box, per-cluster and per-subject costs of an assignment (eq. cluster_cost,
    city_dummy_cost, total_cost; the all-to-dummy cost C^∅ of §5.7). Same cost arrays and
    phase switches as :func:`solve_batch`; see :class:`ClusterCosts` for the result."""
    boxes = np.asarray(boxes, np.float64)
    facility_of = np.asarray(facility_of, np.int64)
    n = boxes.shape[0]
    open_cost, conn_const, sigma2, dummy_cost = _cost_arrays(
        n, open_cost, conn_const, sigma2, dummy_cost
    )
    if facility_of.shape != (n,):
        raise ValueError(f"facility_of must have shape ({n},), got {facility_of.shape}")
    offsets = _check_offsets(offsets, n)
    n_sub = offsets.size - 1
    if np.any((facility_of < UNASSIGNED) | (facility_of >= n)):
        raise ValueError("facility_of holds an index outside the batch")
    subject = np.repeat(np.arange(n_sub), np.diff(offsets))
    conn = np.full(n, np.nan)
    dummy = facility_of == DUMMY
    conn[dummy] = dummy_cost[dummy]
    member = np.flatnonzero(facility_of >= 0)
    fac_rows = facility_of[member]
    if np.any(subject[fac_rows] != subject[member]):
        raise ValueError("a box's facility lies in another subject")
    if np.any(facility_of[fac_rows] != fac_rows):
        raise ValueError("facility_of points to a box that is not its own facility")
    d = jaccard_distance(boxes[fac_rows], boxes[member])
    if init_phase:
        conn[member] = np.where(d <= d_max, 0.0, np.inf)
    else:
        if not (sigma2[member] > 0).all():
            raise ValueError("sigma2 must be > 0")
        conn[member] = conn_const[member] + neg_log_distance_likelihood(
            d, sigma2[member], likelihood
        )
        if likelihood == "d_truncated":
            conn[member] = np.where(d <= d_max, conn[member], np.inf)
    facility = np.flatnonzero(facility_of == np.arange(n))
    cluster_of = np.full(n, UNASSIGNED, np.int64)
    cluster_of[dummy] = DUMMY
    cluster_of[member] = np.searchsorted(facility, fac_rows)
    n_cl = facility.size
    cm = cluster_of[member]
    size = np.bincount(cm, minlength=n_cl).astype(np.int64)
    ccost = open_cost[facility] + np.bincount(cm, weights=conn[member], minlength=n_cl)
    cdummy = np.bincount(cm, weights=dummy_cost[member], minlength=n_cl).astype(np.float64)
    csub = subject[facility]
    scost = np.bincount(csub, weights=ccost, minlength=n_sub) + np.bincount(
        subject[dummy], weights=dummy_cost[dummy], minlength=n_sub
    )
    return ClusterCosts(
        conn, cluster_of, facility, csub, size, ccost.astype(np.float64), cdummy, scost
    )
