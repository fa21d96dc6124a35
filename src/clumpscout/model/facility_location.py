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

API: :func:`solve_batch` (the numba kernel over all subjects, threads over subjects),
:func:`cluster_costs` (eq. cluster_cost / total_cost / C^∅ of §5.7 for an assignment).
The exact optimum of a small subject (the tests' reference) is ``tests/oracles.py``'s
``brute_force``.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numba
import numpy as np

from clumpscout.model.distance import (
    jaccard_distance,
    jaccard_nb,
    likelihood_code,
    neg_log_distance_likelihood,
)

#: facility_of value of a box connected to the dummy facility (a false positive)
DUMMY = -1
#: facility_of value of a box that is neither city nor facility (only with masks / no dummy)
UNASSIGNED = -2

_INF = np.inf
# greedy states of a box (st array); >= 0: local index of its facility
_UNCONN = -3
_ST_DUMMY = -1
_ST_NONE = -2
_NO = np.int64(-1)  # 'no index' (typed int64, not a literal, for numba)


# ----------------------------------------------------------------------------------------
# numba kernels
# ----------------------------------------------------------------------------------------
@numba.njit(cache=True)
def _key_less(boxes, cls, i, j):
    """Canonical order of rows: (x1, y1, x2, y2, cls)."""
    for c in range(4):
        if boxes[i, c] < boxes[j, c]:
            return True
        if boxes[i, c] > boxes[j, c]:
            return False
    return cls[i] < cls[j]


@numba.njit(cache=True)
def _sort_prefix(x, r, n):
    """Sort x[r, :n] in place (insertion sort: the arrays are short)."""
    for i in range(1, n):
        v = x[r, i]
        j = i - 1
        while j >= 0 and x[r, j] > v:
            x[r, j + 1] = x[r, j]
            j -= 1
        x[r, j + 1] = v


@numba.njit(cache=True)
def _canonical_order(boxes, cls, lo, hi):
    n = hi - lo
    order = np.arange(lo, hi)
    # insertion sort with the full key (subjects hold tens of boxes)
    for i in range(1, n):
        v = order[i]
        j = i - 1
        while j >= 0 and _key_less(boxes, cls, v, order[j]):
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = v
    return order


@numba.njit(cache=True)
def _less_tie(x, dx, ix, y, dy, iy):
    """(x, dx, ix) < (y, dy, iy) lexicographically."""
    if x < y:
        return True
    if x > y:
        return False
    if dx < dy:
        return True
    if dx > dy:
        return False
    return ix < iy


@numba.njit(cache=True, inline="always")
def _select(lam, f, n0, d0, D, min_eff, wf, wi):
    """Participants of f's star at time ``lam`` and ``g(lam)`` (see :func:`_eval_open`).

    Per classification k the cheaper option (``v = a_k − lam`` for the best unconnected city,
    ``v = −s_k`` for the best switcher; a tie goes to the city) takes part when it offers
    something (``v ≤ 0`` for a city, ``v < 0`` for a switcher); if the star is then smaller
    than ``min_eff`` the smallest remaining ``v`` are added (forced participants).
    Writes wi[2, k] (0 none, 1 city, 2 switcher); returns (g, slope magnitude, n_free).
    """
    K = wf.shape[1]
    gf = f
    g = n0 - d0 * lam
    slope = d0
    nsel = 0
    for k in range(K):
        wi[2, k] = 0
        vc = wf[0, k] - lam if wi[0, k] >= 0 else _INF
        vs = -wf[1, k] if wi[1, k] >= 0 else _INF
        if wi[0, k] >= 0 and vc <= vs:
            wf[3, k] = vc
            if vc <= 0.0:
                wi[2, k] = 1
        elif wi[1, k] >= 0:
            wf[3, k] = vs
            if vs < 0.0:
                wi[2, k] = 2
        else:
            wf[3, k] = _INF
        if wi[2, k] > 0:
            g += wf[3, k]
            nsel += 1
            if wi[2, k] == 1:
                slope += 1.0
    need = min_eff - 1 - nsel
    while need > 0:
        kb = _NO
        for k in range(K):
            if wi[2, k] != 0 or not (wf[3, k] < _INF):
                continue
            if kb < 0:
                kb = k
                continue
            qk = wi[0, k] if (wi[0, k] >= 0 and wf[0, k] - lam <= wf[3, k]) else wi[1, k]
            qb = wi[0, kb] if (wi[0, kb] >= 0 and wf[0, kb] - lam <= wf[3, kb]) else wi[1, kb]
            if _less_tie(wf[3, k], D[gf, qk], qk, wf[3, kb], D[gf, qb], qb):
                kb = k
        if kb < 0:
            return _INF, 0.0, nsel
        if wi[0, kb] >= 0 and wf[0, kb] - lam <= wf[3, kb]:
            wi[2, kb] = 1
            slope += 1.0
        else:
            wi[2, kb] = 2
        g += wf[3, kb]
        need -= 1
    return g, slope, nsel


@numba.njit(cache=True)
def _eval_open(f, t, m, W, D, lc, city, st, cur, size, F, reach, marg, min_eff, wf, wi, wc):
    """Opening time of closed facility ``f`` (event O) at current time ``t``.

    The time is the smallest ``tau >= t`` with ``g(tau) <= 0``, where
    ``g(λ) = N0 − D0·λ + min_T Σ_{k∈T} v_k(λ)`` over sets T of classifications with
    ``|T| + 1 >= min_eff``: equivalently the lowest average cost
    ``(C^f + Σ_new c'(f, b) − Σ_switchers saving) / |new|`` of a star of at least ``min_eff``
    boxes (JMS with a size constraint). N0 and D0 account for f itself (forced member).
    g is concave and non-increasing, so the root is exact: first without forced members
    (the plain JMS event), then, if that star is too small, by Newton steps from the right.

    Fills the scratch ``wf, wi, wc`` with the per-classification candidates (a, ai: best unconnected
    city; s, si: best allowed switcher, its saving may be negative) and, through
    :func:`_select`, the participants at tau. Returns (tau, tie_key, forced): tau = inf when
    f cannot open; forced = the star needs members that offer nothing (or it cannot open).
    """
    K = wf.shape[1]
    for k in range(K):
        wf[0, k] = _INF
        wi[0, k] = -1
        wf[1, k] = -_INF
        wi[1, k] = -1
    gf = f
    kf = lc[f]
    if city[f]:
        if st[f] == _UNCONN:
            n0 = F[f] + W[gf, gf]
            d0 = 1.0
        else:  # connected to the dummy or a member of a cluster: forced switch to itself
            n0 = F[f] - (cur[f] - W[gf, gf])
            d0 = 0.0
    else:
        n0 = F[f]
        d0 = 0.0
    for q in range(m):
        if q == f or not city[q]:
            continue
        k = lc[q]
        if k == kf:
            continue
        gq = q
        w = W[gf, gq]
        if not (w < _INF):
            continue
        if w > reach[q] + marg[f]:  # q never joins f (see _solve_subject)
            continue
        stq = st[q]
        if stq == _UNCONN:
            if wi[0, k] < 0 or _less_tie(w, D[gf, gq], q, wf[0, k], D[gf, wi[0, k]], wi[0, k]):
                wf[0, k] = w
                wi[0, k] = q
        elif stq == _ST_DUMMY or (stq >= 0 and stq != q):
            if stq >= 0 and size[stq] - 1 < min_eff:
                continue
            sav = cur[q] - w
            if wi[1, k] < 0 or _less_tie(-sav, D[gf, gq], q, -wf[1, k], D[gf, wi[1, k]], wi[1, k]):
                wf[1, k] = sav
                wi[1, k] = q
    # joint allowance: a real cluster keeps at least min_eff boxes after the switches
    any_real = False
    if st[f] >= 0:  # f itself leaves its cluster
        wc[st[f]] += 1
        any_real = True
    for k in range(K):
        if wi[1, k] >= 0 and st[wi[1, k]] >= 0:
            wc[st[wi[1, k]]] += 1
            any_real = True
    if any_real:
        for k in range(K):
            if wi[1, k] >= 0 and st[wi[1, k]] >= 0:
                g = st[wi[1, k]]
                while wc[g] > size[g] - min_eff:
                    # drop the switcher from g with the smallest saving (last canonical on ties)
                    kk = _NO
                    for k2 in range(K):
                        if wi[1, k2] >= 0 and st[wi[1, k2]] == g:
                            if (
                                kk < 0
                                or wf[1, k2] < wf[1, kk]
                                or (wf[1, k2] == wf[1, kk] and wi[1, k2] > wi[1, kk])
                            ):
                                kk = k2
                    if kk < 0:
                        break
                    wf[1, kk] = -_INF
                    wi[1, kk] = -1
                    wc[g] -= 1
        for q in range(m):
            wc[q] = 0
    navail = 0
    for k in range(K):
        if wi[0, k] >= 0 or wi[1, k] >= 0:
            navail += 1
    if navail + 1 < min_eff:
        return _INF, 0.0, True
    # plain JMS event: only members with a positive offer (n0 - S - d0*tau - Σ max(0, tau - bp))
    ssum = 0.0
    nb = 0
    for k in range(K):
        sp = 0.0
        if wi[1, k] >= 0 and wf[1, k] > 0.0:
            sp = wf[1, k]
            ssum += sp
        if wi[0, k] >= 0:
            wf[2, nb] = wf[0, k] + sp
            nb += 1
    _sort_prefix(wf, 2, nb)
    A = n0 - ssum
    if A <= 0.0:
        tau = t
    else:
        slope = d0
        acc = 0.0
        tau = _INF
        done = False
        for i in range(nb):
            if slope > 0.0:
                tc = (A + acc) / slope
                if tc <= wf[2, i]:
                    tau = tc
                    done = True
                    break
            slope += 1.0
            acc += wf[2, i]
        if not done and slope > 0.0:
            tau = (A + acc) / slope
        tau = max(t, tau)
    if not (tau < _INF):
        return _INF, 0.0, True
    # the plain star (members that offer something) at tau; if it is too small, forced
    # members join: g is concave and non-increasing, so step right until g <= 0, then
    # Newton steps from the right (exact on each linear piece). One _select call site.
    tol = 1e-12 * (1.0 + abs(n0))
    lam = tau
    tau = _INF
    forced = False
    for it in range(4 * K + 16):
        g, slope, nfree = _select(lam, f, n0, d0, D, min_eff, wf, wi)
        if it == 0:
            forced = nfree + 1 < min_eff
            if not forced:
                tau = lam
                break
        if g <= tol:
            tau = lam
            for k in range(K):
                wi[3, k] = wi[2, k]
            if g >= -tol or slope <= 0.0:
                break
            nl = max(t, lam + g / slope)
            if nl >= lam:
                break
            lam = nl
        elif tau < _INF:
            break  # stepped past the root to the left (rounding): keep the last good point
        elif slope > 0.0:
            lam = lam + g / slope
        else:
            far = 0.0
            for k in range(K):
                if wi[0, k] >= 0 and wf[0, k] > far:
                    far = wf[0, k]
                if wi[1, k] >= 0 and wf[1, k] > far:
                    far = wf[1, k]
            far = 2.0 * far + 1.0
            if lam >= far:
                break
            lam = far
    if not (tau < _INF):
        return _INF, 0.0, True
    if forced:
        for k in range(K):
            wi[2, k] = wi[3, k]
    key = 0.0
    for k in range(K):
        if wi[2, k] == 1:
            key += D[gf, wi[0, k]]
        elif wi[2, k] == 2:
            key += D[gf, wi[1, k]]
    return tau, key, forced


@numba.njit(cache=True, inline="always")
def _refresh(
    f, t, m, W, D, lc, city, st, cur, size, F, reach, marg, min_eff, wf, wi, wc,
    stored_t, stored_k, forced, fresh, pmat,
):  # fmt: skip
    """Re-evaluate the opening time of f and remember who takes part in its star."""
    tau, key, frc = _eval_open(
        f, t, m, W, D, lc, city, st, cur, size, F, reach, marg, min_eff, wf, wi, wc
    )
    stored_t[f] = tau
    stored_k[f] = key
    forced[f] = frc
    fresh[f] = True
    for q in range(m):
        pmat[f, q] = False
    for k in range(wf.shape[1]):
        if wi[2, k] == 1:
            pmat[f, wi[0, k]] = True
        elif wi[2, k] == 2:
            pmat[f, wi[1, k]] = True


@numba.njit(cache=True)
def _mark_grown(
    g,
    t,
    m,
    W,
    cur,
    reach,
    marg,
    alive,
    isopen,
    st,
    size,
    min_eff,
    forced,
    stored_t,
    fresh,
):
    """Cluster g grew beyond ``min_eff`` boxes, so its members may now switch: the opening
    time of a closed facility f may drop if a member would save by moving to f (or, when f's
    star needs forced members, if a member could join f at all). Reset those to t (stale).
    Nothing else can make an opening time drop (see _greedy_component). Returns whether any
    time was reset."""
    hit = False
    for f in range(m):
        if stored_t[f] <= t or not (
            alive[f] and not isopen[f] and (st[f] < 0 or size[st[f]] - 1 >= min_eff)
        ):
            continue
        gf = f
        for q in range(m):
            if st[q] != g or q == g:
                continue
            w = W[gf, q]
            if w < cur[q] or (forced[f] and w < _INF and w <= reach[q] + marg[f]):
                stored_t[f] = t
                fresh[f] = False
                hit = True
                break
    return hit


@numba.njit(cache=True, inline="always")
def _mark_changed(q, chg, chl, nch):
    """Record that box q changed state since the last refresh pass; returns the new nch."""
    if not chg[q]:
        chg[q] = True
        chl[nch] = q
        nch += 1
    return nch


@numba.njit(cache=True, inline="always")
def _join(q, p, W, lc, st, cur, has, size):
    """City q connects to the open facility p (its classification's slot in p is taken)."""
    st[q] = p
    cur[q] = W[p, q]
    has[p, lc[q]] = True
    size[p] += 1


@numba.njit(cache=True, inline="always")
def _leave_cluster(x, m, lc, st, size, has, chg, chl, nch):
    """Box x (already marked changed) leaves its cluster g = st[x]: the rest of g changes
    state (its members may no longer be allowed to switch). Returns the new nch."""
    g = st[x]
    size[g] -= 1
    has[g, lc[x]] = False
    for r in range(m):
        if st[r] == g and r != g:
            nch = _mark_changed(r, chg, chl, nch)
    return nch


@numba.njit(cache=True)
def _repair_stranded(m, W, lc, fac, st, cur, isopen, size, has, F):
    """Without the dummy, place each city the greedy left unconnected (it cannot be a
    facility and every cluster it could join holds its classification already): evict the
    box r of that classification from a cluster p (r opens its own facility, or joins another
    cluster with a free slot) and put the city in its place, at the smallest cost increase."""
    for q in range(m):
        if st[q] != _UNCONN:
            continue
        k = lc[q]
        best = _INF
        bp = _NO
        br = _NO
        bdest = _NO
        for p in range(m):
            if not isopen[p] or not (W[p, q] < _INF):
                continue
            r = _NO
            for x in range(m):
                if st[x] == p and x != p and lc[x] == k:
                    r = x
                    break
            if r < 0:
                continue
            if fac[r]:  # r becomes a facility of its own
                c = W[p, q] + F[r] + W[r, r] - cur[r]
                if c < best:
                    best, bp, br, bdest = c, p, r, r
            for p2 in range(m):
                if p2 != p and isopen[p2] and not has[p2, k] and W[p2, r] < _INF:
                    c = W[p, q] + W[p2, r] - cur[r]
                    if c < best:
                        best, bp, br, bdest = c, p, r, p2
        if bp < 0:
            continue
        st[br] = bdest
        cur[br] = W[bdest, br]
        if bdest == br:
            isopen[br] = True
            size[br] = 1
            has[br, k] = True
        else:
            has[bdest, k] = True
            size[bdest] += 1
        st[q] = bp
        cur[q] = W[bp, q]


@numba.njit(cache=True)
def _local_classes(comp, lcls_sub):
    """Component-local classification codes 0..K-1 (first appearance order) and K."""
    m = comp.shape[0]
    lc = np.empty(m, np.int64)
    K = 0
    for p in range(m):
        lc[p] = -1
        for q in range(p):
            if lcls_sub[comp[q]] == lcls_sub[comp[p]]:
                lc[p] = lc[q]
                break
        if lc[p] < 0:
            lc[p] = K
            K += 1
    return lc, K


@numba.njit(cache=True)
def _initial_times(m, K, W, lc, city, fac, F, dum, reach, marg, allow_dummy, min_eff):
    """Stored opening times before any event and which facilities can ever open.

    Start from the bound N0 / (D0 + K_f), K_f = classifications among the cities f could
    take (no one is connected yet, so each offers at most t); inf if the star can never be
    big enough. With the dummy, a city q never offers f more than U_q = max(0, dummy'(q) −
    c'(f, q)) (unconnected it connects to the dummy by then, connected it saves at most
    that), so f can never open if its opening cost exceeds its own and the best offers per
    classification: such facilities are dropped ("alive" is False).
    """
    stored_t = np.empty(m)
    alive = fac.copy()
    seen = np.full(K, -1, np.int64)
    ubest = np.zeros(K)
    for f in range(m):
        nk = 0
        for q in range(m):
            if q == f or not city[q] or lc[q] == lc[f]:
                continue
            w = W[f, q]
            if w < _INF and w <= reach[q] + marg[f]:
                k = lc[q]
                if seen[k] != f:
                    seen[k] = f
                    nk += 1
                    ubest[k] = 0.0
                if allow_dummy and dum[q] - w > ubest[k]:
                    ubest[k] = dum[q] - w
        if allow_dummy and fac[f]:
            offers = 0.0
            for k in range(K):
                if seen[k] == f:
                    offers += ubest[k]
            own = F[f] + (W[f, f] - dum[f] if city[f] else 0.0)
            if own - offers > 1e-9 * (1.0 + abs(own)):
                alive[f] = False
        n0 = F[f] + (W[f, f] if city[f] else 0.0)
        d0 = 1.0 if city[f] else 0.0
        if nk + 1 < min_eff:
            stored_t[f] = _INF
        elif n0 <= 0.0:
            stored_t[f] = 0.0
        elif d0 + nk > 0.0:
            stored_t[f] = n0 / (d0 + nk)
        else:
            stored_t[f] = _INF
    return stored_t, alive


@numba.njit(cache=True, inline="always")
def _invalidate(m, fresh, forced, pmat, chg, chl, nch):
    """Stored times that may depend on a box that changed become stale: a change of q can
    only move f's opening if q takes part in f's star, f is q itself, or f's star needs
    forced members (then any candidate may matter); otherwise q's offer to f was and stays
    zero up to f's opening time. Stale times stay valid lower bounds. Clears the change
    list (returns its new length, 0)."""
    for ff in range(m):
        if not fresh[ff]:
            continue
        if forced[ff] or chg[ff]:
            fresh[ff] = False
            continue
        for j in range(nch):
            if pmat[ff, chl[j]]:
                fresh[ff] = False
                break
    for j in range(nch):
        chg[chl[j]] = False
    return 0


@numba.njit(cache=True, inline="always")
def _next_opening(
    t, m, W, D, lc, city, st, cur, size, F, reach, marg, min_eff, wf, wi, wc,
    stored_t, stored_k, forced, fresh, pmat, alive, isopen,
):  # fmt: skip
    """The closed facility that opens next (event O), or _NO: lazily, the fresh minimum of
    the stored times (stale candidates are refreshed until the minimum is fresh; candidates
    tied with it in time must be fresh too, for the tie-break)."""
    while True:
        fb = _NO
        for f in range(m):
            if not (alive[f] and not isopen[f] and (st[f] < 0 or size[st[f]] - 1 >= min_eff)):
                continue
            if fb < 0 or _less_tie(stored_t[f], stored_k[f], f, stored_t[fb], stored_k[fb], fb):
                fb = f
        if fb < 0:
            break
        target = _NO
        if not fresh[fb]:
            target = fb
        elif stored_t[fb] < _INF:
            for f in range(m):
                if f != fb and not fresh[f] and stored_t[f] == stored_t[fb]:
                    if alive[f] and not isopen[f] and (st[f] < 0 or size[st[f]] - 1 >= min_eff):
                        target = f
                        break
        if target < 0:
            break
        _refresh(
            target, t, m, W, D, lc, city, st, cur, size, F, reach, marg,
            min_eff, wf, wi, wc, stored_t, stored_k, forced, fresh, pmat,
        )  # fmt: skip
    if fb >= 0 and not (stored_t[fb] < _INF):
        fb = _NO
    return fb


@numba.njit(cache=True, inline="always")
def _next_connection(t, m, st, lc, opened, n_open, has, W, D, dum, allow_dummy):
    """The earliest connection (event A) of an unconnected city: (time, priority 0 for an
    open facility / 2 for the dummy, facility, city); ties: an open facility first, then
    the smaller Jaccard distance, then the canonical indices."""
    best_t = _INF
    best_prio = 3
    best_key = 0.0
    best_i = _NO
    best_q = _NO
    for q in range(m):
        if st[q] != _UNCONN:
            continue
        k = lc[q]
        for j in range(n_open):
            p = opened[j]
            if has[p, k]:
                continue
            w = W[p, q]
            if not (w < _INF):
                continue
            tt = max(t, w)
            dd = D[p, q]
            if tt < best_t or (
                tt == best_t
                and (
                    best_prio > 0
                    or dd < best_key
                    or (dd == best_key and (q < best_q or (q == best_q and p < best_i)))
                )
            ):
                best_t = tt
                best_prio = 0
                best_key = dd
                best_i = p
                best_q = q
        if allow_dummy:
            tt = max(t, dum[q])
            if tt < best_t or (tt == best_t and best_prio == 2 and q < best_q):
                best_t = tt
                best_prio = 2
                best_key = 0.0
                best_i = _NO
                best_q = q
    return best_t, best_prio, best_i, best_q


@numba.njit(cache=True, inline="always")
def _open_facility(f, m, W, lc, city, st, cur, size, has, isopen, pmat, chg, chl, nch):
    """Open f with its star (f is fresh: pmat[f] lists the star's members); returns the new
    length of the change list."""
    nch = _mark_changed(f, chg, chl, nch)
    if st[f] >= 0:  # f leaves the cluster it was a member of
        nch = _leave_cluster(f, m, lc, st, size, has, chg, chl, nch)
    isopen[f] = True
    st[f] = f
    size[f] = 1
    has[f, lc[f]] = True
    if city[f]:
        cur[f] = W[f, f]
    for q in range(m):
        if not pmat[f, q]:
            continue
        nch = _mark_changed(q, chg, chl, nch)
        if st[q] >= 0:  # a switcher from another cluster
            nch = _leave_cluster(q, m, lc, st, size, has, chg, chl, nch)
        _join(q, f, W, lc, st, cur, has, size)
    return nch


@numba.njit(cache=True)
def _greedy_component(
    comp, W_sub, D_sub, lcls_sub, city_sub, fac_sub, F_sub, dum_sub, reach_sub, marg_sub,
    allow_dummy, min_eff, out_local,
):  # fmt: skip
    """JMS greedy (+ the no-dummy repair) on one component (subject-local indices ``comp`` in
    canonical order). Writes subject-local facility indices / DUMMY / UNASSIGNED to out_local.

    Opening times of closed facilities are evaluated lazily: a stored time is a lower bound
    of the true one (state changes only delay openings, except that a growing cluster lets
    its members switch — then the affected stored times are reset); the candidate with the
    smallest stored time is re-evaluated until it (and every candidate tied with it) is
    up to date. This gives the same event order as re-evaluating everything every step.
    """
    m = comp.shape[0]
    lc, K = _local_classes(comp, lcls_sub)
    # component-local copies of the cost and distance matrices and of the per-box arrays
    W = np.empty((m, m))
    D = np.empty((m, m))
    for p in range(m):
        for q in range(m):
            W[p, q] = W_sub[comp[p], comp[q]]
            D[p, q] = D_sub[comp[p], comp[q]]
    city = np.empty(m, np.bool_)
    fac = np.empty(m, np.bool_)
    F = np.empty(m)
    dum = np.empty(m)
    reach = np.empty(m)
    marg = np.empty(m)
    st = np.empty(m, np.int64)
    cur = np.zeros(m)
    size = np.zeros(m, np.int64)
    isopen = np.zeros(m, np.bool_)
    has = np.zeros((m, K), np.bool_)
    for p in range(m):
        g = comp[p]
        city[p] = city_sub[g]
        fac[p] = fac_sub[g]
        F[p] = F_sub[g]
        dum[p] = dum_sub[g]
        reach[p] = reach_sub[g]
        marg[p] = marg_sub[g]
        st[p] = _UNCONN if city[p] else _ST_NONE
    # scratch of the star evaluation: wf rows a, s, breakpoints, v; wi rows ai, si, part, saved
    wf = np.empty((4, K))
    wi = np.zeros((4, K), np.int64)
    wc = np.zeros(m, np.int64)
    opened = np.empty(m, np.int64)  # open facilities, in opening order
    n_open = 0
    # stored opening times: lower bounds (exact when fresh)
    stored_t, alive = _initial_times(
        m, K, W, lc, city, fac, F, dum, reach, marg, allow_dummy, min_eff
    )
    stored_k = np.zeros(m)
    forced = np.ones(m, np.bool_)
    fresh = np.zeros(m, np.bool_)  # stored time exact (up to date with the state)
    pmat = np.zeros((m, m), np.bool_)  # pmat[f, q]: q takes part in f's stored star
    chg = np.zeros(m, np.bool_)  # boxes that changed state since the last refresh pass
    chl = np.empty(m, np.int64)
    nch = 0
    t = 0.0
    while True:
        if nch > 0:
            nch = _invalidate(m, fresh, forced, pmat, chg, chl, nch)
        # ---- the next opening (event O)
        fb = _next_opening(
            t, m, W, D, lc, city, st, cur, size, F, reach, marg, min_eff, wf, wi, wc,
            stored_t, stored_k, forced, fresh, pmat, alive, isopen,
        )  # fmt: skip
        t_open = stored_t[fb] if fb >= 0 else _INF
        # ---- connections (events A) due before that opening, in time order
        n_exec = 0
        while True:
            best_t, best_prio, best_i, best_q = _next_connection(
                t, m, st, lc, opened, n_open, has, W, D, dum, allow_dummy
            )
            # a connection to an open facility wins a tie with an opening, the dummy loses it
            if not (best_t < t_open or (best_t == t_open and best_prio == 0 and best_t < _INF)):
                break
            t = best_t
            n_exec += 1
            q = best_q
            nch = _mark_changed(q, chg, chl, nch)
            if best_prio == 0:
                p = best_i
                _join(q, p, W, lc, st, cur, has, size)
                if size[p] > min_eff and _mark_grown(
                    p, t, m, W, cur, reach, marg, alive, isopen, st, size, min_eff,
                    forced, stored_t, fresh,
                ):  # fmt: skip
                    break
            else:
                st[q] = _ST_DUMMY
                cur[q] = dum[q]
        if n_exec > 0:
            continue
        if fb < 0:
            break
        # ---- open fb with its star
        t = t_open
        nch = _open_facility(fb, m, W, lc, city, st, cur, size, has, isopen, pmat, chg, chl, nch)
        opened[n_open] = fb
        n_open += 1
    if not allow_dummy:
        _repair_stranded(m, W, lc, fac, st, cur, isopen, size, has, F)
    for p in range(m):
        if st[p] >= 0:
            out_local[comp[p]] = comp[st[p]]
        elif st[p] == _ST_DUMMY:
            out_local[comp[p]] = -1
        else:
            out_local[comp[p]] = -2


@numba.njit(cache=True)
def _solve_subject(lo, hi, rows, opts, out):
    """One subject (rows lo:hi): canonical order, shifted costs, components, greedy.

    ``rows``: the per-row arrays ``(boxes, cls, open_cost, conn_const, sigma2, dummy_cost,
    can_fac, can_city)``; ``opts``: ``(init_phase, d_max, kind, allow_dummy, min_eff)``
    (see :func:`solve_batch`)."""
    boxes, cls, open_cost, conn_const, sigma2, dummy_cost, can_fac, can_city = rows
    init_phase, d_max, kind, allow_dummy, min_eff = opts
    n = hi - lo
    if n == 0:
        return
    order = _canonical_order(boxes, cls, lo, hi)
    # subject-local arrays in canonical order
    city = np.empty(n, np.bool_)
    fac = np.empty(n, np.bool_)
    lcls = np.empty(n, np.int64)
    shift = np.zeros(n)
    selfc = np.empty(n)
    dum = np.empty(n)
    F = np.empty(n)
    hl = np.empty(n)
    inv2s = np.empty(n)
    for p in range(n):
        r = order[p]
        city[p] = can_city[r]
        fac[p] = can_fac[r]
        lcls[p] = cls[r]
        if init_phase:
            selfc[p] = 0.0
        else:
            hl[p] = 0.5 * math.log(2.0 * math.pi * sigma2[r])
            inv2s[p] = 1.0 / (2.0 * sigma2[r])
            selfc[p] = conn_const[r] + hl[p]
        if city[p]:
            sh = selfc[p]
            if allow_dummy and dummy_cost[r] < sh:
                sh = dummy_cost[r]
            shift[p] = sh
            dum[p] = dummy_cost[r] - sh if allow_dummy else _INF
            F[p] = open_cost[r]
        else:
            dum[p] = _INF
            F[p] = open_cost[r] + selfc[p]
    D = np.empty((n, n))
    W = np.empty((n, n))
    for i in range(n):
        ri = order[i]
        D[i, i] = jaccard_nb(
            boxes[ri, 0], boxes[ri, 1], boxes[ri, 2], boxes[ri, 3],
            boxes[ri, 0], boxes[ri, 1], boxes[ri, 2], boxes[ri, 3],
        )  # fmt: skip
        for j in range(i + 1, n):
            rj = order[j]
            d = jaccard_nb(
                boxes[ri, 0], boxes[ri, 1], boxes[ri, 2], boxes[ri, 3],
                boxes[rj, 0], boxes[rj, 1], boxes[rj, 2], boxes[rj, 3],
            )  # fmt: skip
            D[i, j] = d
            D[j, i] = d
    # W[f, b]: shifted connection cost of city b to facility f (decisions.md#nominal-costs, #init-costs)
    for f in range(n):
        for b in range(n):
            if not city[b]:
                W[f, b] = _INF
                continue
            d = D[f, b]
            if init_phase:
                w = 0.0 if d <= d_max else _INF
            elif kind == 2 and d > d_max:
                w = _INF  # truncated location density (generative model)
            else:
                x = d * d
                if kind == 1:
                    x = x * x
                w = conn_const[order[b]] + hl[b] + x * inv2s[b]
            W[f, b] = w - shift[b]
    # margin[f]: how far above its dummy cost a city may still join f as a forced member
    # of a star of min_eff boxes (see _eval_open); 0 unless opening f is cheap
    dmax = 0.0
    for p in range(n):
        if city[p] and dum[p] < _INF and dum[p] > dmax:
            dmax = dum[p]
    marg = np.zeros(n)
    if allow_dummy:
        for p in range(n):
            own = dum[p] - F[p] - W[p, p] if city[p] else -F[p]
            mg = own + (min_eff - 2) * dmax
            if mg > 0.0:
                marg[p] = mg
    # reach[b]: a city b never joins a facility f with c'(f, b) > reach[b] + margin[f]. With
    # the dummy it is b's dummy cost (b connects to the dummy by then and would never save by
    # switching); without it, b's own opening time F_b + c'(b, b) if b may be a facility
    # (it opens itself by then at the latest; a facility never moves), else unbounded.
    reach = np.empty(n)
    for p in range(n):
        if allow_dummy:
            reach[p] = dum[p]
        elif city[p] and fac[p]:
            reach[p] = F[p] + W[p, p]
        else:
            reach[p] = _INF
    # components: boxes linked when a facility could ever take the city
    valid = np.empty(n, np.bool_)
    for p in range(n):
        valid[p] = city[p] or fac[p]
    label = np.full(n, -1, np.int64)
    stack = np.empty(n, np.int64)
    ncomp = 0
    for p0 in range(n):
        if not valid[p0] or label[p0] >= 0:
            continue
        label[p0] = ncomp
        top = 0
        stack[top] = p0
        top += 1
        while top > 0:
            top -= 1
            u = stack[top]
            for v in range(n):
                if label[v] >= 0 or not valid[v]:
                    continue
                link = False
                if fac[u] and city[v] and W[u, v] < _INF and W[u, v] <= reach[v] + marg[u]:
                    link = True
                elif fac[v] and city[u] and W[v, u] < _INF and W[v, u] <= reach[u] + marg[v]:
                    link = True
                if link:
                    label[v] = ncomp
                    stack[top] = v
                    top += 1
        ncomp += 1
    out_local = np.full(n, -2, np.int64)
    csize = np.zeros(ncomp, np.int64)
    for p in range(n):
        if label[p] >= 0:
            csize[label[p]] += 1
    start = np.zeros(ncomp + 1, np.int64)
    for c in range(ncomp):
        start[c + 1] = start[c] + csize[c]
    members = np.empty(start[ncomp], np.int64)
    fill = start[:ncomp].copy()
    for p in range(n):
        c = label[p]
        if c >= 0:
            members[fill[c]] = p
            fill[c] += 1
    for c in range(ncomp):
        comp = members[start[c] : start[c + 1]]
        if comp.shape[0] == 1 and allow_dummy and min_eff >= 2:
            p = comp[0]
            out_local[p] = -1 if city[p] else -2
            continue
        _greedy_component(
            comp, W, D, lcls, city, fac, F, dum, reach, marg, allow_dummy, min_eff, out_local
        )
    for p in range(n):
        v = out_local[p]
        out[order[p]] = order[v] if v >= 0 else v


@numba.njit(cache=True, nogil=True)
def _solve_range(s0, s1, offsets, rows, opts, out):
    """Subjects s0:s1 (releases the GIL, so threads can run ranges side by side)."""
    for s in range(s0, s1):
        _solve_subject(offsets[s], offsets[s + 1], rows, opts, out)


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
        _solve_range(0, n_sub, *args)
    else:
        with ThreadPoolExecutor(max_workers=_n_threads()) as pool:
            list(pool.map(lambda r: _solve_range(r[0], r[1], *args), ranges))
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
