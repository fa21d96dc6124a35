"""The numba kernels of the greedy facility location (paper §5.3, §5.7;
decisions.md#facility-location-greedy): the algorithm, its costs and its tie-breaking are
described in :mod:`clumpscout.model.facility_location`, whose :func:`solve_batch` runs
:func:`solve_range` over ranges of subjects.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from clumpscout.model.distance import (
    jaccard_nb,
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
def solve_range(s0, s1, offsets, rows, opts, out):
    """Subjects s0:s1 (releases the GIL, so threads can run ranges side by side)."""
    for s in range(s0, s1):
        _solve_subject(offsets[s], offsets[s + 1], rows, opts, out)
