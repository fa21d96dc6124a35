"""Per-clump p_fp and p_σ, per-subject N_fp, N_fn, N_σ and risk (paper §5.7).

* p_fp of a clump, decisions.md#clump-false-positive-probability (eq. cluster_false_pos_prob, cluster_true_pos_prob):
  ``p_fp,l = P_fp / (P_fp + P_tp)`` with
  ``P_fp = Π_miss (1 − p_fn_j) · Π_mark p_fp_j`` and
  ``P_tp = Π_miss p_fn_j · Π_mark (1 − p_fp_j)``, in log space.
* p_σ of a clump, decisions.md#location-variance: ``σ²_l = 1 / Σ_k 1/σ²_ijk`` (inverse-variance sum of
  its boxes' combined variances, eq. combined_variance) and
  ``p_σ,l = 1 − erf(δ / sqrt(2 σ²_l))``.
* N_fn, decisions.md#expected-misses (eq. est_num_fn, exp_num_fn): the constrained re-clustering
  (:func:`constrained_masks`) gives ``N_fn,init = Σ_l' p_fn/(p_fn + p_tn)``,
  ``p_fn = e^{−C_l'}``, ``p_tn = e^{−C^∅_l'}``; plus the batch-wide coincidence
  term ``Σ_{b∈B*_i} p∩_b · e^{−C_f,i}`` (:func:`coincidence_scan`,
  :func:`coincidence_term`).
* risk, eq. risk_expression: ``R_i = α_fp N_fp + α_fn N_fn + α_σ N_σ``.
"""

from __future__ import annotations

import numba
import numpy as np
from scipy import special

from clumpscout.model.distance import jaccard_nb


def clump_false_positive_prob(
    *,
    box_cluster: np.ndarray,
    box_vol: np.ndarray,
    cluster_subject: np.ndarray,
    cls_subject: np.ndarray,
    cls_vol: np.ndarray,
    p_fp: np.ndarray,
    p_fn: np.ndarray,
) -> np.ndarray:
    """Normalised false-positive probability of every label clump (decisions.md#clump-false-positive-probability).

    ``V_mark,l``: the classifications with a box in clump l; ``V_miss,l``: the
    other classifications of the subject (empty ones included). Products of
    ~20 small numbers underflow, so the sums are taken in log space and
    ``p_fp,l = expit(ln P_fp − ln P_tp)``.
    """
    n_clusters = len(cluster_subject)
    n_subjects = int(cls_subject.max()) + 1 if len(cls_subject) else 0
    n_subjects = max(n_subjects, int(cluster_subject.max()) + 1 if n_clusters else 0)
    log_tn = np.log1p(-p_fn)  # ln(1 − p_fn): a correct omission
    log_fn = np.log(p_fn)
    # sums over every classification of the subject (mark + miss)
    all_tn = np.bincount(cls_subject, weights=log_tn[cls_vol], minlength=n_subjects)
    all_fn = np.bincount(cls_subject, weights=log_fn[cls_vol], minlength=n_subjects)
    tp = box_cluster >= 0
    cl = box_cluster[tp]
    v = box_vol[tp]
    mark_tn = np.bincount(cl, weights=log_tn[v], minlength=n_clusters)
    mark_fn = np.bincount(cl, weights=log_fn[v], minlength=n_clusters)
    mark_fp = np.bincount(cl, weights=np.log(p_fp[v]), minlength=n_clusters)
    mark_tp = np.bincount(cl, weights=np.log1p(-p_fp[v]), minlength=n_clusters)
    log_p_fp = all_tn[cluster_subject] - mark_tn + mark_fp
    log_p_tp = all_fn[cluster_subject] - mark_fn + mark_tp
    return special.expit(log_p_fp - log_p_tp)


def clump_location_variance(box_cluster: np.ndarray, box_sigma2: np.ndarray, n_clusters: int):
    """``σ²_l = 1 / Σ_{k∈Z_l} 1/σ²_ijk`` (decisions.md#location-variance; the inverse-variance sum)."""
    tp = box_cluster >= 0
    prec = np.bincount(box_cluster[tp], weights=1.0 / box_sigma2[tp], minlength=n_clusters)
    with np.errstate(divide="ignore"):
        return 1.0 / prec


def clump_sigma_prob(sigma2_l: np.ndarray, delta: float) -> np.ndarray:
    """``p_σ,l = 1 − erf(δ / sqrt(2 σ²_l))``: P(|d_l| > δ) for d_l ~ N(0, σ²_l) (decisions.md#location-variance)."""
    return special.erfc(delta / np.sqrt(2.0 * np.asarray(sigma2_l, dtype=np.float64)))


def subject_risk(n_fp, n_fn, n_sigma, alpha_fp: float, alpha_fn: float, alpha_sigma: float):
    """``R_i = α_fp N_fp + α_fn N_fn + α_σ N_σ`` (eq. risk_expression)."""
    return (
        alpha_fp * np.asarray(n_fp)
        + alpha_fn * np.asarray(n_fn)
        + alpha_sigma * np.asarray(n_sigma)
    )


# --------------------------------------------------------------- N_fn (decisions.md#expected-misses)


def constrained_masks(box_cluster: np.ndarray, is_facility: np.ndarray):
    """The three constraints of the N_fn re-clustering (§5.7, decisions.md#expected-misses).

    1. boxes of true-positive clusters (facilities and cities) are not cities;
    2. only boxes that were not facilities may become facilities;
    3. there is no dummy facility (the caller passes ``allow_dummy=False``).

    Returns ``(can_be_facility, can_be_city)``; the cities are exactly the
    boxes that were on the dummy facility.
    """
    can_be_city = box_cluster < 0
    can_be_facility = ~is_facility
    return can_be_facility, can_be_city


def expected_missed_init(cost_cluster, cost_dummy, cluster_subject, n_subjects: int):
    """``N_fn,init,i = Σ_l' p_fn/(p_fn + p_tn)`` with p = e^{−C} (eq. est_num_fn).

    ``p_fn/(p_fn + p_tn) = expit(C^∅_l' − C_l')``, stable for any cost size.
    """
    p = special.expit(np.asarray(cost_dummy) - np.asarray(cost_cluster))
    return np.bincount(cluster_subject, weights=p, minlength=n_subjects)


class _LevelGrid:
    """A multi-level uniform grid over boxes for "which boxes may be within d_max?" queries.

    Boxes are put in levels by ``a = sqrt(w h)`` (level L holds a in
    [a_min 2^L, a_min 2^(L+1))); each level is a uniform grid whose cell is the
    largest side in the level. Two boxes with Jaccard distance < d_max overlap, and
    ``IoU <= min(area)/max(area)``, so a query only visits the levels whose sizes
    are within a factor ``1/sqrt(1 − d_max)`` and, in each, the cells its box can
    overlap. Exact: every box that can coincide is visited.
    """

    def __init__(self, boxes: np.ndarray, d_max: float):
        w = boxes[:, 2] - boxes[:, 0]
        h = boxes[:, 3] - boxes[:, 1]
        a = np.sqrt(np.maximum(w, 0.0) * np.maximum(h, 0.0))
        pos = a[a > 0]
        self.a_min = float(pos.min()) if len(pos) else 1.0
        level = np.floor(np.log2(np.maximum(a, self.a_min) / self.a_min)).astype(np.int64)
        level = np.clip(level, 0, 60)
        self.level = level
        n_lev = int(level.max()) + 1 if len(level) else 1
        maxw = np.zeros(n_lev)
        maxh = np.zeros(n_lev)
        np.maximum.at(maxw, level, np.maximum(w, 0.0))
        np.maximum.at(maxh, level, np.maximum(h, 0.0))
        self.maxw, self.maxh = maxw, maxh
        occupied = np.bincount(level, minlength=n_lev) > 0
        # an empty level gets one cell (nothing is ever found there)
        self.cell = np.where(occupied, np.maximum(np.maximum(maxw, maxh), 1e-12), 1e12)
        self.cx = 0.5 * (boxes[:, 0] + boxes[:, 2])
        self.cy = 0.5 * (boxes[:, 1] + boxes[:, 3])
        self.x0 = float(self.cx.min()) if len(boxes) else 0.0
        self.y0 = float(self.cy.min()) if len(boxes) else 0.0
        span_x = float(self.cx.max()) - self.x0 if len(boxes) else 0.0
        span_y = float(self.cy.max()) - self.y0 if len(boxes) else 0.0
        # at most ~2048 cells a side per level (any cell size is exact; this bounds memory)
        self.cell = np.maximum(self.cell, max(span_x, span_y) / 2048.0)
        self.nx = (np.floor(span_x / self.cell) + 1).astype(np.int64)
        self.ny = (np.floor(span_y / self.cell) + 1).astype(np.int64)
        self.off = np.concatenate([[0], np.cumsum(self.nx * self.ny)]).astype(np.int64)
        self.rho = float(np.sqrt(max(1.0 - d_max, 0.0)))

    def args(self):
        return (
            self.level,
            self.cx,
            self.cy,
            self.x0,
            self.y0,
            self.cell,
            self.nx,
            self.ny,
            self.off,
            self.maxw,
            self.maxh,
            self.a_min,
            self.rho,
        )


@numba.njit(cache=True, inline="always")
def _cell_of(level, cx, cy, x0, y0, cell, nx, ny, off, b):
    L = level[b]
    gx = min(max(int((cx[b] - x0) / cell[L]), 0), nx[L] - 1)
    gy = min(max(int((cy[b] - y0) / cell[L]), 0), ny[L] - 1)
    return off[L] + gx * ny[L] + gy


@numba.njit(cache=True)
def _query_bounds(L, qx1, qy1, qx2, qy2, x0, y0, cell, nx, ny, maxw, maxh, a_min, rho):
    """Cell index ranges of level L that a query box can overlap; empty if the level's
    box sizes cannot reach IoU > 1 − d_max with it."""
    qw = qx2 - qx1
    qh = qy2 - qy1
    qa = np.sqrt(max(qw, 0.0) * max(qh, 0.0))
    lo = a_min * 2.0**L
    hi = a_min * 2.0 ** (L + 1)
    if rho > 0.0 and qa > 0.0 and (hi * (1 + 1e-9) < qa * rho or lo * (1 - 1e-9) > qa / rho):
        return 0, -1, 0, -1
    cx = 0.5 * (qx1 + qx2)
    cy = 0.5 * (qy1 + qy2)
    rx = 0.5 * (qw + maxw[L]) * (1 + 1e-9)
    ry = 0.5 * (qh + maxh[L]) * (1 + 1e-9)
    ix0 = max(int(np.floor((cx - rx - x0) / cell[L])), 0)
    ix1 = min(int(np.floor((cx + rx - x0) / cell[L])), nx[L] - 1)
    iy0 = max(int(np.floor((cy - ry - y0) / cell[L])), 0)
    iy1 = min(int(np.floor((cy + ry - y0) / cell[L])), ny[L] - 1)
    return ix0, ix1, iy0, iy1


@numba.njit(cache=True, inline="always")
def _coinciding(
    qx1, qy1, qx2, qy2, stored, head, nxt, d_max, x0, y0, cell, nx, ny, off, maxw, maxh, a_min,
    rho, earliest, hits,
):  # fmt: skip
    """The stored boxes q (rows of ``stored``, linked per grid cell by ``head``/``nxt``)
    within Jaccard distance < d_max of the query box: writes them to ``hits`` in grid
    visiting order and returns how many. With ``earliest`` only the smallest such q is
    wanted: after a hit, candidates with a larger index are skipped (the last hit is it)."""
    nh = 0
    below = stored.shape[0]
    for L in range(cell.shape[0]):
        ix0, ix1, iy0, iy1 = _query_bounds(
            L, qx1, qy1, qx2, qy2, x0, y0, cell, nx, ny, maxw, maxh, a_min, rho
        )
        for ix in range(ix0, ix1 + 1):
            for iy in range(iy0, iy1 + 1):
                q = head[off[L] + ix * ny[L] + iy]
                while q >= 0:
                    if q < below:
                        d = jaccard_nb(
                            qx1, qy1, qx2, qy2,
                            stored[q, 0], stored[q, 1], stored[q, 2], stored[q, 3],
                        )  # fmt: skip
                        if d < d_max:
                            hits[nh] = q
                            nh += 1
                            if earliest:
                                below = q
                    q = nxt[q]
    return nh


@numba.njit(cache=True)
def _scan(boxes, order, d_max, level, cx, cy, x0, y0, cell, nx, ny, off, maxw, maxh, a_min, rho):
    n = order.shape[0]
    n_lev = cell.shape[0]
    head = np.full(off[n_lev], -1, np.int64)
    nxt = np.empty(n, np.int64)
    kept = np.empty(n, np.int64)  # retained box (index into boxes), in retention order
    kept_box = np.empty((n, 4))  # its coordinates
    count = np.zeros(n, np.int64)
    hits = np.empty(n, np.int64)
    r = 0
    for t in range(n):
        b = order[t]
        nh = _coinciding(
            boxes[b, 0], boxes[b, 1], boxes[b, 2], boxes[b, 3], kept_box, head, nxt, d_max,
            x0, y0, cell, nx, ny, off, maxw, maxh, a_min, rho, True, hits,
        )  # fmt: skip
        if nh > 0:  # the earliest retained box it coincides with
            count[hits[nh - 1]] += 1
        else:
            kept[r] = b
            kept_box[r] = boxes[b]
            c = _cell_of(level, cx, cy, x0, y0, cell, nx, ny, off, b)
            nxt[r] = head[c]
            head[c] = r
            r += 1
    return kept[:r].copy(), count[:r].copy()


def coincidence_scan(boxes: np.ndarray, d_max: float, seed) -> tuple[np.ndarray, np.ndarray]:
    """The batch-wide coincidence scan of §5.7 (decisions.md#expected-misses), with grid hashing.

    The working batch's boxes (normalised coordinates, all subjects together)
    are shuffled with ``seed`` and processed in that order: a box that coincides
    (Jaccard distance < d_max) with an already retained box increments that
    box's count and is dropped (of several, the earliest retained one); a box
    that coincides with none is retained. Candidates come from a multi-level
    grid (:class:`_LevelGrid`), which visits every box that can coincide.

    Returns ``(retained, n_cap)``: indices into ``boxes`` of the retained set
    B∩ (in retention order) and their coincidence counts n∩.
    """
    boxes = np.ascontiguousarray(boxes, dtype=np.float64)
    n = len(boxes)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.random.default_rng(seed).permutation(n).astype(np.int64)
    grid = _LevelGrid(boxes, d_max)
    return _scan(boxes, order, float(d_max), *grid.args())


@numba.njit(cache=True)
def _coincident_sums(
    label_off, labels, ret, p_cap, d_max, level, cx, cy, x0, y0, cell, nx, ny, off, maxw, maxh,
    a_min, rho,
):  # fmt: skip
    n_ret = ret.shape[0]
    n_lev = cell.shape[0]
    head = np.full(off[n_lev], -1, np.int64)
    nxt = np.empty(n_ret, np.int64)
    for r in range(n_ret):
        c = _cell_of(level, cx, cy, x0, y0, cell, nx, ny, off, r)
        nxt[r] = head[c]
        head[c] = r
    n_subj = label_off.shape[0] - 1
    out = np.zeros(n_subj, np.float64)
    stamp = np.full(n_ret, -1, np.int64)
    hits = np.empty(n_ret, np.int64)
    for i in range(n_subj):
        for lab in range(label_off[i], label_off[i + 1]):
            nh = _coinciding(
                labels[lab, 0], labels[lab, 1], labels[lab, 2], labels[lab, 3], ret, head, nxt,
                d_max, x0, y0, cell, nx, ny, off, maxw, maxh, a_min, rho, False, hits,
            )  # fmt: skip
            for j in range(nh):
                q = hits[j]
                if stamp[q] != i:  # counted once per subject
                    stamp[q] = i
                    out[i] += p_cap[q]
    return out


def coincidence_term(
    retained_boxes: np.ndarray,
    n_cap: np.ndarray,
    n_annotations: int,
    label_off: np.ndarray,
    labels: np.ndarray,
    log_open_cost: np.ndarray,
    d_max: float,
) -> np.ndarray:
    """Second term of eq. exp_num_fn for every subject of the batch (decisions.md#expected-misses).

    ``p∩_b = n∩_b / n_z`` (n_z: annotations, i.e. classifications, in the
    batch); B*_i are the retained boxes that coincide with none of subject i's
    label boxes (all of B∩ for a subject without labels); the term is
    ``e^{−C_f,i} · Σ_{b∈B*_i} p∩_b`` with ``C_f,i = −Σ_{j∈V_i} ln p_fn_j``
    (eq. fac_cost: the probability that every volunteer of the subject missed it).

    ``label_off`` (S+1) indexes ``labels`` (normalised label boxes sorted by subject);
    ``log_open_cost`` is C_f,i per subject.
    """
    n_subj = len(label_off) - 1
    if len(retained_boxes) == 0 or n_annotations == 0:
        return np.zeros(n_subj)
    p_cap = np.asarray(n_cap, dtype=np.float64) / float(n_annotations)
    total = float(p_cap.sum())
    if len(labels):
        ret = np.ascontiguousarray(retained_boxes, np.float64)
        grid = _LevelGrid(ret, d_max)
        coincident = _coincident_sums(
            np.asarray(label_off, np.int64),
            np.ascontiguousarray(labels, np.float64),
            ret,
            p_cap,
            float(d_max),
            *grid.args(),
        )
    else:
        coincident = np.zeros(n_subj)
    return np.exp(-np.asarray(log_open_cost)) * np.maximum(total - coincident, 0.0)
