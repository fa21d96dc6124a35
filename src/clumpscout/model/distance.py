"""Jaccard distance between boxes and the distance likelihood (paper §3.4, §4.4).

* :func:`jaccard_nb` / :func:`jaccard_distance` / :func:`pairwise_jaccard` — the paper's
  scale-free distance ``d = 1 − A_intersection / A_union`` (§3.4, decisions.md#jaccard-distance). The union is the
  TRUE union ``area A + area B − area(A∩B)`` (decisions.md#jaccard-distance), not the enclosing box. Disjoint
  boxes (including boxes that only touch along an edge or a corner) are at distance 1.
* :func:`neg_log_distance_likelihood` / :func:`neg_log_likelihood_nb` — ``−ln Gaussian(|d|²; σ²)``
  of eq. anno_model / city_fac_cost, read as decisions.md#distance-likelihood says:

  - ``"d"`` (default): the zero-mean normal density of d with variance σ²,
    ``½ ln(2πσ²) + d²/(2σ²)``;
  - ``"d_squared"``: the authors' code, the density evaluated at d²,
    ``½ ln(2πσ²) + d⁴/(2σ²)``.

Boxes are ``(x1, y1, x2, y2)`` with ``x1 <= x2`` and ``y1 <= y2``; the aggregation uses
normalised coordinates (x / image width, y / image height; decisions.md#jaccard-distance, footnote to §5.7).

Degenerate boxes (documented choice): a side is ``max(0, x2 − x1)``, so an inverted or
zero-width box has zero area. Two boxes whose union has zero area (both degenerate) are at
distance 0 if they are the same box (all four coordinates equal) and 1 otherwise; a
degenerate box and a proper box are at distance 1 (their intersection has zero area).
Any NaN coordinate gives NaN.
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: ``kind`` of the distance likelihood (decisions.md#distance-likelihood) -> integer code used inside numba kernels.
#: distance likelihoods: "d" and "d_squared" (the paper's model, decisions.md#distance-likelihood readings) and
#: "d_truncated" (the generative model: as "d", but a box farther than d_max from a
#: facility cannot join it, so the location density stays normalised where the Jaccard
#: distance saturates at 1; the truncation is applied by the facility-location code)
LIKELIHOOD_CODES: dict[str, int] = {"d": 0, "d_squared": 1, "d_truncated": 2}

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


@numba.njit(cache=True, nogil=True)
def jaccard_nb(ax1, ay1, ax2, ay2, bx1, by1, bx2, by2):
    """Jaccard distance ``1 − |A∩B| / |A∪B|`` of two boxes (paper §3.4, decisions.md#jaccard-distance, decisions.md#jaccard-distance).

    Scalar numba kernel. The union is ``area A + area B − intersection`` (true union).
    Disjoint boxes are at distance 1; see the module docstring for degenerate boxes.
    """
    if (
        ax1 != ax1
        or ay1 != ay1
        or ax2 != ax2
        or ay2 != ay2
        or bx1 != bx1
        or by1 != by1
        or bx2 != bx2
        or by2 != by2
    ):
        return np.nan
    iw = min(ax2, bx2) - max(ax1, bx1)
    ih = min(ay2, by2) - max(ay1, by1)
    inter = 0.0
    if iw > 0.0 and ih > 0.0:
        inter = iw * ih
    area_a = max(ax2 - ax1, 0.0) * max(ay2 - ay1, 0.0)
    area_b = max(bx2 - bx1, 0.0) * max(by2 - by1, 0.0)
    union = area_a + area_b - inter
    if union <= 0.0:
        if ax1 == bx1 and ay1 == by1 and ax2 == bx2 and ay2 == by2:
            return 0.0
        return 1.0
    d = 1.0 - inter / union
    # guard against rounding just outside [0, 1]
    if d < 0.0:
        return 0.0
    if d > 1.0:
        return 1.0
    return d


@numba.vectorize(
    ["float64(float64, float64, float64, float64, float64, float64, float64, float64)"],
    cache=True,
)
def _jaccard_ufunc(ax1, ay1, ax2, ay2, bx1, by1, bx2, by2):
    return jaccard_nb(ax1, ay1, ax2, ay2, bx1, by1, bx2, by2)


def jaccard_distance(a, b) -> np.ndarray:
    """Jaccard distance between boxes ``a`` and ``b`` of shape ``(..., 4)``, broadcasting.

    ``a[..., :] = (x1, y1, x2, y2)``. Returns an array of the broadcast shape without the
    last axis (a 0-d array for two single boxes). Paper §3.4, decisions.md#jaccard-distance, decisions.md#jaccard-distance.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape[-1:] != (4,) or b.shape[-1:] != (4,):
        raise ValueError(f"boxes must have a last axis of length 4, got {a.shape} and {b.shape}")
    return _jaccard_ufunc(
        a[..., 0], a[..., 1], a[..., 2], a[..., 3], b[..., 0], b[..., 1], b[..., 2], b[..., 3]
    )


@numba.njit(cache=True)
def _pairwise_kernel(boxes):
    n = boxes.shape[0]
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            d = jaccard_nb(
                boxes[i, 0],
                boxes[i, 1],
                boxes[i, 2],
                boxes[i, 3],
                boxes[j, 0],
                boxes[j, 1],
                boxes[j, 2],
                boxes[j, 3],
            )
            out[i, j] = d
            out[j, i] = d
    return out


def pairwise_jaccard(boxes) -> np.ndarray:
    """All pairwise Jaccard distances of ``boxes`` (n, 4) -> symmetric (n, n) matrix."""
    boxes = np.ascontiguousarray(boxes, dtype=np.float64)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must have shape (n, 4), got {boxes.shape}")
    return _pairwise_kernel(boxes)


@numba.njit(cache=True, nogil=True)
def neg_log_likelihood_nb(d, sigma2, kind):
    """``−ln Gaussian`` of a Jaccard distance (decisions.md#distance-likelihood); ``kind`` 0 = "d", 1 = "d_squared".

    kind 0: ``½ ln(2πσ²) + d²/(2σ²)``; kind 1: ``½ ln(2πσ²) + d⁴/(2σ²)``.
    """
    x = d * d
    if kind == 1:
        x = x * x
    return 0.5 * math.log(2.0 * math.pi * sigma2) + x / (2.0 * sigma2)


def likelihood_code(kind: str) -> int:
    """Integer code of a distance-likelihood ``kind`` ("d" or "d_squared", decisions.md#distance-likelihood)."""
    try:
        return LIKELIHOOD_CODES[kind]
    except KeyError:
        raise ValueError(
            f"distance likelihood must be one of {sorted(LIKELIHOOD_CODES)}, got {kind!r}"
        ) from None


def neg_log_distance_likelihood(d, sigma2, kind: str = "d"):
    """``−ln Gaussian(|d|²; σ²)`` of eq. anno_model / city_fac_cost as decisions.md#distance-likelihood reads it.

    ``kind="d"``: ``½ ln(2πσ²) + d²/(2σ²)`` (normal density of d, variance σ²; default);
    ``kind="d_squared"``: ``½ ln(2πσ²) + d⁴/(2σ²)`` (the authors' code: density at d²).
    Broadcasts over numpy arrays; a scalar in gives a numpy scalar out.
    """
    code = likelihood_code(kind)
    d = np.asarray(d, dtype=np.float64)
    sigma2 = np.asarray(sigma2, dtype=np.float64)
    x = d * d
    if code == 1:
        x = x * x
    return _HALF_LOG_2PI + 0.5 * np.log(sigma2) + x / (2.0 * sigma2)
