"""The box side measured on the clicks themselves: twice the FWHM of the click scatter around
groups that several volunteers marked (``box_side: auto``; docs/decisions.md#box-side-auto)."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.errors import InputError

log = logging.getLogger(__name__)

#: FWHM of a Gaussian per standard deviation, 2 sqrt(2 ln 2)
FWHM_PER_SIGMA = 2.0 * np.sqrt(2.0 * np.log(2.0))
#: median |x| of a standard normal: sigma = median(|residual|) / this
_MEDIAN_ABS_NORMAL = 0.6744897501960817


# --------------------------------------------------------------------------- box side: auto


def estimate_box_side(
    subject_id: np.ndarray,
    volunteer: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    min_volunteers: int = 3,
    link: float = 3.0,
    max_iter: int = 20,
) -> dict[str, Any]:
    """Box side from the click scatter: 2 x FWHM of the clicks around groups that several
    volunteers marked (docs/decisions.md#box-side-auto).

    Clicks (finite x, y; ``volunteer`` any hashable codes, ``subject_id`` integers) of one
    subject are linked when closer than ``link`` x sigma and made by different volunteers;
    a linked group marked by at least ``min_volunteers`` different volunteers, with at most
    1.5 clicks per volunteer (not two objects run together), is a *group*. Each volunteer's
    click nearest the group mean is kept, and the residuals from the mean of those k clicks,
    times sqrt(k / (k - 1)) (the mean's own scatter), pooled over x and y, give
    sigma = median |residual| / 0.6745 (a normal's median absolute value). sigma starts from
    the median distance from a click to the nearest click of another volunteer and is iterated
    to a fixed point. FWHM = 2 sqrt(2 ln 2) sigma = 2.355 sigma; the side is 2 FWHM.

    Returns a dict: sigma_px, fwhm_px, box_side_px, groups, clicks_used, subjects_used,
    link_px, iterations, converged, min_volunteers. Fewer than 3 groups: :class:`InputError`.
    """
    from scipy.spatial import cKDTree

    x, y, subj, vol = _finite_clicks(subject_id, volunteer, x, y)
    n = len(x)
    if n < min_volunteers:
        raise InputError(f"box side auto: only {n} clicks to estimate the click scatter; {_HINT}")
    span = float(max(np.abs(x).max(), np.abs(y).max())) + 1.0
    step = 4.0 * span + 1.0
    pts = np.column_stack([x + subj * step, y])
    tree = cKDTree(pts)
    sigma = _start_sigma(tree, pts, subj, vol)
    radius = link * sigma
    result: dict[str, Any] = {}
    converged = False
    for it in range(1, max_iter + 1):
        comp, rows, n_groups = _groups(tree, radius, subj, vol, min_volunteers)
        new, sel = _group_sigma(comp, rows, x, y, vol)
        result = {
            "sigma_px": new,
            "fwhm_px": float(FWHM_PER_SIGMA * new),
            "box_side_px": float(2.0 * FWHM_PER_SIGMA * new),
            "groups": n_groups,
            "clicks_used": int(len(sel)),
            "subjects_used": int(len(np.unique(subj[sel]))),
            "link_px": float(radius),
            "iterations": it,
            "min_volunteers": int(min_volunteers),
        }
        if not new > 0:
            raise InputError(f"box side auto: the clicks of every group coincide; {_HINT}")
        if abs(new - sigma) <= 1e-3 * sigma:
            converged = True
            break
        sigma = new
        radius = link * sigma
    result["converged"] = converged
    return result


_HINT = "give the box side in pixels instead (--box-side PX, config export.box_side)"


def _finite_clicks(
    subject_id: np.ndarray, volunteer: np.ndarray, x: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x, y, subject code and volunteer code of the clicks with finite coordinates."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    subj = np.unique(np.asarray(subject_id)[ok], return_inverse=True)[1].astype(np.int64)
    vol = pd.factorize(pd.Series(np.asarray(volunteer, dtype=object)[ok]))[0].astype(np.int64)
    return x, y, subj, vol


def _start_sigma(tree: Any, pts: np.ndarray, subj: np.ndarray, vol: np.ndarray) -> float:
    """The starting sigma: the median distance from a click to the nearest click of another
    volunteer on the same subject."""
    n = len(pts)
    k = int(min(n, 16))
    dist, idx = tree.query(pts, k=k)
    idx = np.minimum(idx, n - 1)
    other = (vol[idx] != vol[:, None]) & (subj[idx] == subj[:, None]) & np.isfinite(dist)
    has = other.any(axis=1)
    if not has.any():
        raise InputError(
            f"box side auto: no subject has clicks of two different volunteers; {_HINT}"
        )
    nn = dist[np.flatnonzero(has), other[has].argmax(axis=1)]
    sigma = float(np.median(nn))
    if not sigma > 0:
        sigma = float(np.median(nn[nn > 0])) if (nn > 0).any() else 1.0
    return sigma


def _groups(
    tree: Any, radius: float, subj: np.ndarray, vol: np.ndarray, min_volunteers: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """(component of every click, the clicks in groups, number of groups) of the clicks linked
    within ``radius`` across volunteers; fewer than 3 groups: :class:`InputError`."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(vol)
    pairs = tree.query_pairs(radius, output_type="ndarray")
    if len(pairs):
        keep = (vol[pairs[:, 0]] != vol[pairs[:, 1]]) & (subj[pairs[:, 0]] == subj[pairs[:, 1]])
        pairs = pairs[keep]
    graph = coo_matrix((np.ones(len(pairs)), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
    _, comp = connected_components(graph, directed=False)
    n_clicks = np.bincount(comp)
    cv = np.unique(comp * np.int64(vol.max() + 1) + vol)
    n_vol = np.bincount(cv // (vol.max() + 1), minlength=len(n_clicks))
    good = (n_vol >= min_volunteers) & (n_clicks <= 1.5 * n_vol)
    rows = np.flatnonzero(good[comp])
    n_groups = int(good.sum())
    if n_groups < 3:
        raise InputError(
            f"box side auto: only {n_groups} groups of clicks by >= {min_volunteers} "
            f"volunteers (linking radius {radius:.3g} px); {_HINT}"
        )
    return comp, rows, n_groups


def _group_sigma(
    comp: np.ndarray, rows: np.ndarray, x: np.ndarray, y: np.ndarray, vol: np.ndarray
) -> tuple[float, np.ndarray]:
    """(sigma, clicks used): each volunteer's click nearest its group's mean, and the pooled
    residuals from the mean of those clicks (scaled by sqrt(k / (k - 1)))."""
    n_comp = int(comp.max()) + 1
    c = comp[rows]
    cnt = np.bincount(c, minlength=n_comp)
    mx = np.bincount(c, x[rows], n_comp) / np.maximum(cnt, 1)
    my = np.bincount(c, y[rows], n_comp) / np.maximum(cnt, 1)
    d2 = (x[rows] - mx[c]) ** 2 + (y[rows] - my[c]) ** 2
    o = np.lexsort((d2, vol[rows], c))
    first = np.r_[True, (c[o][1:] != c[o][:-1]) | (vol[rows][o][1:] != vol[rows][o][:-1])]
    sel = rows[o[first]]
    c = comp[sel]
    kk = np.bincount(c, minlength=n_comp).astype(float)
    mx = np.bincount(c, x[sel], n_comp) / np.maximum(kk, 1)
    my = np.bincount(c, y[sel], n_comp) / np.maximum(kk, 1)
    scale = np.sqrt(kk[c] / (kk[c] - 1.0))
    res = np.abs(np.r_[(x[sel] - mx[c]) * scale, (y[sel] - my[c]) * scale])
    return float(np.median(res)) / _MEDIAN_ABS_NORMAL, sel
