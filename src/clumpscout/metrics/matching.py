"""One-to-one matching of label boxes with expert objects (docs/decisions.md#gold-match).

A label is *real* against a gold standard when it is matched to an expert object, one
label to one object, per subject:

* expert **points**: a label may take a point that lies inside its box (closed box,
  subject pixels);
* expert **boxes**: a label may take a box whose IoU with it is ≥ ``iou_min`` (0.5).

Among the allowed pairs the matching with the most pairs is taken, and among those the one
with the smallest total cost (points: the distance from the box centre in units of the box's
half-diagonal; boxes: 1 − IoU), by :func:`scipy.optimize.linear_sum_assignment`. Two labels
on one expert object therefore give one real label and one that is not, and one label over
two expert objects counts one of them as found.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.optimize import linear_sum_assignment

#: cost of a forbidden pair: larger than any sum of allowed costs (each ≤ 1)
_FORBIDDEN = 1e9


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of ``a`` (n, 4) with every box of ``b`` (m, 4), (x1, y1, x2, y2)."""
    a = np.asarray(a, dtype=float).reshape(-1, 4)
    b = np.asarray(b, dtype=float).reshape(-1, 4)
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def _costs(lab: np.ndarray, obj: np.ndarray, geometry: str, iou_min: float) -> np.ndarray:
    """Cost matrix (labels × objects); forbidden pairs cost :data:`_FORBIDDEN`."""
    if geometry == "box":
        iou = iou_matrix(lab, obj)
        return np.where(iou >= iou_min, 1.0 - iou, _FORBIDDEN)
    x, y = obj[:, 0][None, :], obj[:, 1][None, :]
    inside = (lab[:, 0:1] <= x) & (x <= lab[:, 2:3]) & (lab[:, 1:2] <= y) & (y <= lab[:, 3:4])
    cx = 0.5 * (lab[:, 0:1] + lab[:, 2:3])
    cy = 0.5 * (lab[:, 1:2] + lab[:, 3:4])
    half_diag = 0.5 * np.hypot(lab[:, 2:3] - lab[:, 0:1], lab[:, 3:4] - lab[:, 1:2])
    dist = np.hypot(x - cx, y - cy) / np.maximum(half_diag, 1e-12)
    return np.where(inside, np.minimum(dist, 1.0), _FORBIDDEN)


def matched_pairs(
    labels: pd.DataFrame,
    objects: pd.DataFrame,
    geometry: str = "point",
    iou_min: float = 0.5,
) -> tuple[np.ndarray, np.ndarray, pd.Series]:
    """(label rows, object rows, missed): the one-to-one pairs (module docstring) as
    positions in ``labels`` and ``objects``, and per subject of ``objects`` the number of
    its objects no label is matched to.

    ``labels``: subject_id, x1, y1, x2, y2; ``objects``: subject_id and x, y (points) or
    x1, y1, x2, y2 (boxes). Only subjects present in ``objects`` can have matched labels.
    """
    obj_cols = ["x1", "y1", "x2", "y2"] if geometry == "box" else ["x", "y"]
    lab_sid = labels["subject_id"].to_numpy()
    lab_xyxy = labels[["x1", "y1", "x2", "y2"]].to_numpy(dtype=float)
    lab_rows = pd.Series(np.arange(len(labels))).groupby(lab_sid).indices
    missed = {}
    pairs_l, pairs_o = [], []
    obj_all = objects[obj_cols].to_numpy(dtype=float)
    for sid, rows in objects.groupby("subject_id", sort=True).indices.items():
        obj = obj_all[rows]
        li = lab_rows.get(sid)
        if li is None or len(obj) == 0:
            missed[sid] = len(obj)
            continue
        cost = _costs(lab_xyxy[li], obj, geometry, iou_min)
        r, c = linear_sum_assignment(cost)
        ok = cost[r, c] < _FORBIDDEN
        pairs_l.append(li[r[ok]])
        pairs_o.append(rows[c[ok]])
        missed[sid] = len(obj) - int(ok.sum())
    return _cat(pairs_l), _cat(pairs_o), pd.Series(missed, dtype=np.int64)


def _cat(parts: list) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def match_one_to_one(
    labels: pd.DataFrame,
    objects: pd.DataFrame,
    geometry: str = "point",
    iou_min: float = 0.5,
) -> tuple[np.ndarray, pd.Series]:
    """(matched, missed): per label (in ``labels`` order) whether it is matched to an
    expert object of its subject, and per subject of ``objects`` the number of its objects
    no label is matched to (:func:`matched_pairs`)."""
    rows, _, missed = matched_pairs(labels, objects, geometry, iou_min)
    matched = np.zeros(len(labels), dtype=bool)
    matched[rows] = True
    return matched, missed
