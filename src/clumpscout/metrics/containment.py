"""Which label boxes contain which points, and purity and completeness over the p_fp
thresholds (paper §6.3; docs/decisions.md#expert-comparison).

The measures :mod:`clumpscout.evaluation.compare` scores labels with (against expert clicks
or a simulated truth), and which the replay, the photometry and the figures share:

- a box *contains* a point when ``x1 <= x <= x2`` and ``y1 <= y <= y2`` (closed box,
  subject pixels), same subject only (:func:`containment`);
- a label is kept at threshold ``p*`` when ``p_fp <= p*``; thresholds are
  ``linspace(0, 1, thresholds)`` (:func:`threshold_grid`); a label table without ``p_fp``
  (the baselines) is kept whole at every threshold (:func:`label_p_fp`);
- ``N_TP`` counts kept labels that contain a point, ``N_FP`` kept labels that contain none,
  ``N_FN`` points inside no kept label; completeness ``N_TP / (N_TP + N_FN)``, purity
  ``N_TP / (N_TP + N_FP)`` and ``recall`` (points found) at every threshold
  (:func:`curve_counts`);
- the optimal point maximises ``sqrt(C² + P²)`` (ties: the smallest threshold); the max-C
  point is the largest completeness (ties: the highest purity, then the smallest
  threshold), and symmetrically for max P (:func:`summarise_curve`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from clumpscout.arrays import ranges
from clumpscout.errors import InputError

#: the columns :func:`containment` reads: of the boxes (labels) and of the points
BOX_COLUMNS = ("subject_id", "x1", "y1", "x2", "y2")
POINT_COLUMNS = ("subject_id", "x", "y")


def threshold_grid(thresholds: int) -> np.ndarray:
    """The p_fp thresholds p*: ``thresholds`` evenly spaced values in [0, 1]."""
    if int(thresholds) < 2:
        raise InputError(f"need at least 2 thresholds, got {thresholds}")
    return np.linspace(0.0, 1.0, int(thresholds))


def label_p_fp(labels: pd.DataFrame, path: object = None) -> np.ndarray:
    """p_fp of each label; 0 for a table without p_fp (kept at every threshold)."""
    if "p_fp" not in labels.columns:
        return np.zeros(len(labels))
    p = labels["p_fp"].to_numpy(dtype=float)
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"p_fp must be in [0, 1], got {p[row]!r}", path=path, row=row)
    return p


#: label-point pairs (of one subject) looked at in one block of :func:`containment`
_PAIRS_PER_BLOCK = 1 << 21


def containment(labels: pd.DataFrame, points: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Which labels contain which points (same subject, closed box).

    Returns ``(label_hit, point_best)``: for each label whether it contains at
    least one point, and for each point the smallest ``p_fp`` of the labels that
    contain it (``inf`` if none), so that the point is found at threshold ``p*``
    exactly when ``point_best <= p*``. The (label, point) pairs of a subject are formed
    for blocks of subjects of about :data:`_PAIRS_PER_BLOCK` pairs at a time, so memory
    does not grow with the project.
    """
    l_sid = labels["subject_id"].to_numpy()
    p_sid = points["subject_id"].to_numpy()
    xyxy = np.column_stack([labels[c].to_numpy(dtype=float) for c in BOX_COLUMNS[1:]])
    xy = np.column_stack([points[c].to_numpy(dtype=float) for c in POINT_COLUMNS[1:]])
    p_lab = label_p_fp(labels)
    label_hit = np.zeros(len(labels), dtype=bool)
    point_best = np.full(len(points), np.inf)
    if not len(labels) or not len(points):
        return label_hit, point_best
    lo = np.argsort(l_sid, kind="stable")
    po = np.argsort(p_sid, kind="stable")
    ls, ps = l_sid[lo], p_sid[po]
    common = np.intersect1d(ls, ps)
    l0, l1 = np.searchsorted(ls, common, "left"), np.searchsorted(ls, common, "right")
    p0, p1 = np.searchsorted(ps, common, "left"), np.searchsorted(ps, common, "right")
    n_pairs = (l1 - l0) * (p1 - p0)
    if not len(common):
        return label_hit, point_best
    block = np.cumsum(n_pairs) // _PAIRS_PER_BLOCK
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    ends = [*starts[1:], len(common)]
    for a, b in zip(starts, ends, strict=True):
        # every (label, point) pair of each subject of the block, in sorted positions
        n_lab = l1[a:b] - l0[a:b]
        per_label = np.repeat(p1[a:b] - p0[a:b], n_lab)  # the subject's points per label
        first_point = np.repeat(p0[a:b], n_lab)
        li = lo[np.repeat(ranges(l0[a:b], l1[a:b]), per_label)]
        pi = po[ranges(first_point, first_point + per_label)]
        x, y = xy[pi, 0], xy[pi, 1]
        inside = (x >= xyxy[li, 0]) & (x <= xyxy[li, 2]) & (y >= xyxy[li, 1]) & (y <= xyxy[li, 3])
        li, pi = li[inside], pi[inside]
        label_hit[li] = True
        np.minimum.at(point_best, pi, p_lab[li])
    return label_hit, point_best


def curve_counts(
    p: np.ndarray, label_hit: np.ndarray, point_best: np.ndarray, grid: np.ndarray
) -> pd.DataFrame:
    """N_TP, N_FP, N_FN, C, P and recall at every threshold of ``grid`` (§6.3).

    A label with ``p_fp <= p*`` is kept; a point is a false negative at ``p*`` when
    no kept label contains it (``point_best > p*``).
    """
    tp = np.searchsorted(np.sort(p[label_hit]), grid, side="right")
    kept = np.searchsorted(np.sort(p), grid, side="right")
    fp = kept - tp
    n_points = len(point_best)
    found = np.searchsorted(np.sort(point_best), grid, side="right")
    fn = n_points - found
    with np.errstate(invalid="ignore", divide="ignore"):
        completeness = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), np.nan)
        purity = np.where(kept > 0, tp / np.maximum(kept, 1), np.nan)
        recall = np.where(n_points > 0, found / max(n_points, 1), np.nan)
    return pd.DataFrame(
        {
            "threshold": grid,
            "n_kept": kept,
            "n_tp": tp,
            "n_fp": fp,
            "n_fn": fn,
            "completeness": completeness,
            "purity": purity,
            "hypot": np.hypot(completeness, purity),
            "n_points": n_points,
            "n_points_found": found,
            "recall": recall,
        }
    )


def _pick(curve: pd.DataFrame, primary: str, secondary: str) -> int | None:
    """Row index maximising ``primary`` (ties: max ``secondary``, then smallest threshold)."""
    v = curve[primary].to_numpy(dtype=float)
    if not np.isfinite(v).any():
        return None
    best = np.nanmax(v)
    cand = np.flatnonzero(v == best)
    if len(cand) > 1 and secondary:
        s = curve[secondary].to_numpy(dtype=float)[cand]
        s = np.where(np.isfinite(s), s, -np.inf)
        cand = cand[s == s.max()]
    return int(cand[0])


def summarise_curve(curve: pd.DataFrame) -> dict:
    """Optimal (max sqrt(C²+P²)), max-C and max-P points and the p* = 1 point of one curve."""
    out: dict = {}
    i_opt = _pick(curve, "hypot", "")
    i_c = _pick(curve, "completeness", "purity")
    i_p = _pick(curve, "purity", "completeness")

    def get(i, col):
        return np.nan if i is None else curve[col].iloc[i]

    out["opt_threshold"] = get(i_opt, "threshold")
    out["opt_completeness"] = get(i_opt, "completeness")
    out["opt_purity"] = get(i_opt, "purity")
    out["opt_hypot"] = get(i_opt, "hypot")
    for c in ("n_tp", "n_fp", "n_fn"):
        v = get(i_opt, c)
        out[f"opt_{c}"] = pd.NA if i_opt is None else int(v)
    out["opt_recall"] = get(i_opt, "recall")
    out["max_completeness"] = get(i_c, "completeness")
    out["max_completeness_threshold"] = get(i_c, "threshold")
    out["purity_at_max_completeness"] = get(i_c, "purity")
    out["max_purity"] = get(i_p, "purity")
    out["max_purity_threshold"] = get(i_p, "threshold")
    out["completeness_at_max_purity"] = get(i_p, "completeness")
    last = len(curve) - 1
    out["completeness_p1"] = curve["completeness"].iloc[last]
    out["purity_p1"] = curve["purity"].iloc[last]
    return out
