"""Clump photometry on the images the volunteers saw (paper §6.3 and fig:flux_versus_fpp).

The paper compares the g, r, i fluxes of aggregated clumps — empirically true
vs false positives (fig:expert_all_set_hitmiss_band_flux_dists_lscale) and
against ``p_fp`` (fig:flux_versus_fpp) — with "the band-limited fluxes ...
independently scaled in the same way as the corresponding bands of the subject
images" (§6.3), to reflect what volunteers see. How the fluxes themselves were
measured is in Adams et al. (the paper's §3 reference), not here; our reading,
per box and band:

- ``flux_nmgy_g`` …: the light in the box on the native grid (box corners ×
  side/400, pixels weighted by their overlap with the box), minus the local
  background: the 3-sigma-clipped mean pixel of the ring between the box and a
  box ``bg_factor`` (2) times larger (the galaxy's disc under a clump, and the
  sky), times the box area. Nanomaggies. ``bg_nmgy_g`` … is that background per pixel.
- ``flux_g`` …: ``flux_nmgy`` scaled like the band of the subject images,
  ``asinh(Q · (F/β − m) / α) / Q`` with the band's β (§2.2, decisions.md#colour-composite), not clipped
  (a box holds more than one pixel's worth). The figures use these.
- ``ratio_g_r``, ``ratio_r_i``, ``ratio_g_i``: ratios of the scaled fluxes
  (larger = bluer as shown); g/r and r/i are the non-redundant pair, g/i (their
  product) is kept for the paper's third panel. NaN when the denominator ≤ 0.
- ``display_g`` …: the same background-subtracted sum on the 400 × 400 image as
  shown (asinh-scaled, clipped to [0, 1], resized exactly as the PNG, before
  8-bit quantisation), in (scaled intensity × subject px²): the other reading
  of the paper's sentence, kept for comparison.
- ``box_area`` (subject px²), ``frac_inside`` (fraction of the box inside the
  image; the part outside counts nothing) and ``frac_nan`` (fraction on NaN,
  i.e. off-frame, pixels).

Boxes come from ``labels.parquet`` (the aggregation's labels) or are built around
the simulated true clumps and distractors (``truth_clumps.csv``,
``truth_distractors.csv``) with the subject's ``box_side`` (decisions.md#box-geometry). With expert
clicks, each label gets ``expert_match`` = "tp" if it contains at least one
expert click, "fp" if none, missing for subjects the experts did not see
(decisions.md#expert-comparison, via :func:`clumpscout.metrics.containment.containment`).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import sigmaclip

from clumpscout.config import add_setting, default
from clumpscout.errors import InputError
from clumpscout.images.cutouts import (
    asinh_scale,
    inverse_asinh_scale,
    load_bands,
    resize_band,
    subject_bands,
)
from clumpscout.images.geometry import BANDS
from clumpscout.io import write_json, write_parquet
from clumpscout.logs import progress, timed
from clumpscout.metrics.containment import BOX_COLUMNS, containment

log = logging.getLogger(__name__)
#: the background ring's outer size over the box (config images.bg_factor)
_BG_FACTOR = default("images.bg_factor")

RATIOS = (("g", "r"), ("r", "i"), ("g", "i"))


def overlap_weights(lo: float, hi: float, n: int) -> np.ndarray:
    """Length of the overlap of [lo, hi] with each pixel [i, i + 1], i = 0 … n−1."""
    edges = np.arange(n + 1, dtype=np.float64)
    return np.clip(np.minimum(edges[1:], hi) - np.maximum(edges[:-1], lo), 0.0, None)


def box_sum(image: np.ndarray, x1: float, y1: float, x2: float, y2: float) -> tuple[float, float]:
    """Sum of ``image`` over the box [x1, x2] × [y1, y2] (px, corner origin, x = column).

    Pixels are weighted by their fractional overlap with the box; NaN pixels add
    nothing. Returns ``(sum, nan_area)`` with ``nan_area`` the box area on NaN pixels.
    """
    ny, nx = image.shape
    wx = overlap_weights(x1, x2, nx)
    wy = overlap_weights(y1, y2, ny)
    jx, jy = np.flatnonzero(wx), np.flatnonzero(wy)
    if jx.size == 0 or jy.size == 0:
        return 0.0, 0.0
    sub = image[jy[0] : jy[-1] + 1, jx[0] : jx[-1] + 1].astype(np.float64)
    wxs, wys = wx[jx[0] : jx[-1] + 1], wy[jy[0] : jy[-1] + 1]
    bad = np.isnan(sub)
    if bad.any():
        nan_area = float(wys @ bad.astype(np.float64) @ wxs)
        sub = np.where(bad, 0.0, sub)
    else:
        nan_area = 0.0
    return float(wys @ sub @ wxs), nan_area


def local_background(
    image: np.ndarray, x1: float, y1: float, x2: float, y2: float, factor: float = _BG_FACTOR
) -> float:
    """Mean of the pixels whose centres lie in the box scaled by ``factor`` about its
    centre but not in the box itself, after 3-sigma clipping (neighbouring clumps and
    stars; NaN ignored); 0 if there are none. The mean, not the median: on a galaxy's
    convex light profile the median of the ring falls below the mean under the box."""
    ny, nx = image.shape
    cx, cy = (x1 + x2) / 2.0, (y1 + y2) / 2.0
    hx, hy = (x2 - x1) / 2.0, (y2 - y1) / 2.0
    c0, c1 = max(int(np.floor(cx - factor * hx)), 0), min(int(np.ceil(cx + factor * hx)) + 1, nx)
    r0, r1 = max(int(np.floor(cy - factor * hy)), 0), min(int(np.ceil(cy + factor * hy)) + 1, ny)
    if c0 >= c1 or r0 >= r1:
        return 0.0
    xs = np.arange(c0, c1) + 0.5
    ys = np.arange(r0, r1) + 0.5
    in_x = np.abs(xs - cx) <= hx
    in_y = np.abs(ys - cy) <= hy
    ring = ~(in_y[:, None] & in_x[None, :])
    vals = image[r0:r1, c0:c1][ring]
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return 0.0
    return float(sigmaclip(vals, 3.0, 3.0).clipped.mean())


def bgsub_sum(
    image: np.ndarray, x1: float, y1: float, x2: float, y2: float, factor: float = _BG_FACTOR
) -> tuple[float, float, float]:
    """``(sum − background × valid area, background, nan_area)`` of a box (see :func:`box_sum`)."""
    ny, nx = image.shape
    total, nan_area = box_sum(image, x1, y1, x2, y2)
    inside = overlap_weights(x1, x2, nx).sum() * overlap_weights(y1, y2, ny).sum()
    bg = local_background(image, x1, y1, x2, y2, factor)
    return total - bg * (inside - nan_area), bg, nan_area


def subject_views(flat: np.ndarray, row, scaling: Mapping) -> tuple[dict, dict]:
    """The subject image bands (400 × 400, clipped scaled) and the native-grid nanomaggies."""
    asinh = subject_bands(flat, int(row.bands_offset), int(row.side_native))
    shown, nmgy = {}, {}
    q, a, m = scaling["asinh_Q"], scaling["asinh_alpha"], scaling["asinh_m"]
    for b in BANDS:
        shown[b] = resize_band(
            np.clip(asinh[b], 0.0, 1.0), int(scaling["image_size"]), scaling["resize_filter"]
        )
        nmgy[b] = inverse_asinh_scale(asinh[b], scaling["beta"][b], q, a, m)
    return shown, nmgy


def add_ratios(df: pd.DataFrame, prefix: str = "flux") -> pd.DataFrame:
    """``ratio_<a>_<b>`` = flux_a / flux_b for g/r, r/i, g/i (NaN if flux_b ≤ 0)."""
    for a, b in RATIOS:
        num, den = df[f"{prefix}_{a}"].to_numpy(float), df[f"{prefix}_{b}"].to_numpy(float)
        with np.errstate(divide="ignore", invalid="ignore"):
            df[f"ratio_{a}_{b}"] = np.where(den > 0, num / den, np.nan)
    return df


def measure(
    boxes: pd.DataFrame, cutouts_dir: str | Path, bg_factor: float = _BG_FACTOR
) -> tuple[pd.DataFrame, dict]:
    """g, r, i photometry of every box (module doc); returns (table, report).

    ``boxes`` needs subject_id, x1, y1, x2, y2 (subject px); its other columns
    are kept. Boxes of subjects without a cutout get NaN fluxes and
    ``has_image`` False (counted).
    """
    cutouts_dir = Path(cutouts_dir)
    missing = [c for c in BOX_COLUMNS if c not in boxes.columns]
    if missing:
        raise InputError(f"boxes table lacks column(s) {', '.join(missing)}")
    meta_path = cutouts_dir / "cutouts.parquet"
    if not meta_path.exists():
        raise InputError("not a cutouts folder (cutouts.parquet missing)", path=meta_path)
    meta = pd.read_parquet(meta_path)
    flat, scaling = load_bands(cutouts_dir, meta)
    meta = meta.set_index("subject_id")
    q, a, m = scaling["asinh_Q"], scaling["asinh_alpha"], scaling["asinh_m"]
    out = boxes.reset_index(drop=True).copy()
    n = len(out)
    names = [f"{k}_{b}" for k in ("flux", "flux_nmgy", "bg_nmgy", "display") for b in BANDS]
    cols = {k: np.full(n, np.nan) for k in names}
    box_area = np.full(n, np.nan)
    frac_inside = np.full(n, np.nan)
    frac_nan = np.full(n, np.nan)
    has_image = np.zeros(n, dtype=bool)
    edge = np.zeros(n, dtype=bool)
    x1, y1 = out["x1"].to_numpy(float), out["y1"].to_numpy(float)
    x2, y2 = out["x2"].to_numpy(float), out["y2"].to_numpy(float)
    bad_box = ~(np.isfinite(x1) & np.isfinite(y1) & np.isfinite(x2) & np.isfinite(y2))
    bad_box |= (x2 <= x1) | (y2 <= y1)
    groups = out.index[~bad_box].groupby(out.loc[~bad_box, "subject_id"].to_numpy())
    size = int(scaling["image_size"])
    with timed(f"photometry of {int((~bad_box).sum())} boxes in {len(groups)} subjects", log):
        for sid, idx in progress(groups.items(), "photometry", total=len(groups)):
            if sid not in meta.index:
                continue
            row = meta.loc[sid]
            row = row.iloc[0] if isinstance(row, pd.DataFrame) else row
            shown, nmgy = subject_views(flat, row, scaling)
            f = int(row.side_native) / size
            for i in idx:
                area = (x2[i] - x1[i]) * (y2[i] - y1[i])
                inside = (
                    overlap_weights(x1[i], x2[i], size).sum()
                    * overlap_weights(y1[i], y2[i], size).sum()
                )
                nan_area = 0.0
                for b in BANDS:
                    box = (x1[i], y1[i], x2[i], y2[i])
                    cols[f"display_{b}"][i], _, na = bgsub_sum(shown[b], *box, bg_factor)
                    nan_area = max(nan_area, na)
                    native = tuple(v * f for v in box)
                    fl, bg, _ = bgsub_sum(nmgy[b], *native, bg_factor)
                    cols[f"flux_nmgy_{b}"][i], cols[f"bg_nmgy_{b}"][i] = fl, bg
                    cols[f"flux_{b}"][i] = asinh_scale(
                        np.array([fl]), scaling["beta"][b], q, a, m, clip=False
                    )[0]
                box_area[i] = area
                frac_inside[i] = inside / area
                frac_nan[i] = nan_area / area
                has_image[i] = True
                edge[i] = bool(row.edge)
    for k, v in cols.items():
        out[k] = v
    out = add_ratios(out)
    out["box_area"] = box_area
    out["frac_inside"] = frac_inside
    out["frac_nan"] = frac_nan
    out["has_image"] = has_image
    out["edge"] = edge
    report = {
        "n_boxes": int(n),
        "n_measured": int(has_image.sum()),
        "n_invalid_box": int(bad_box.sum()),
        "n_without_image": int((~has_image & ~bad_box).sum()),
        "n_subjects_without_image": int(
            len(set(out.loc[~bad_box, "subject_id"]) - set(meta.index))
        ),
        "n_partly_outside_image": int((frac_inside < 1 - 1e-9).sum()),
        "n_on_nan_pixels": int((frac_nan > 0).sum()),
        "n_negative_flux": {b: int((out[f"flux_nmgy_{b}"] <= 0).sum()) for b in BANDS},
        "n_ratio_undefined": {
            f"{a}_{b}": int(np.isnan(out[f"ratio_{a}_{b}"]).sum()) for a, b in RATIOS
        },
        "bg_factor": float(bg_factor),
        "scaling": scaling,
    }
    for key in ("n_invalid_box", "n_without_image", "n_on_nan_pixels"):
        if report[key]:
            log.warning("%s: %d", key, report[key])
    return out, report


def truth_boxes(
    truth: pd.DataFrame, subjects: pd.DataFrame, distractors: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Boxes of side ``box_side`` (decisions.md#box-geometry) around the true clumps and the distractors.

    Columns: subject_id, source ("clump" or the distractor's kind), index (the
    clump number, or the distractor's row), x, y, x1, y1, x2, y2, the true
    fluxes as ``true_flux_g`` …, and ``unusual`` for clumps.
    """
    for what, df, cols in (
        ("truth", truth, ("subject_id", "x", "y", "flux_g", "flux_r", "flux_i")),
        ("subjects", subjects, ("subject_id", "box_side")),
    ):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise InputError(f"{what} table lacks column(s) {', '.join(missing)}")
    parts = []
    t = truth.reset_index(drop=True)
    parts.append(
        pd.DataFrame(
            {
                "subject_id": t["subject_id"].to_numpy(),
                "source": "clump",
                "index": t["clump"].to_numpy() if "clump" in t else np.arange(len(t)),
                "x": t["x"].to_numpy(float),
                "y": t["y"].to_numpy(float),
                "unusual": t["unusual"].astype("boolean").to_numpy()
                if "unusual" in t
                else pd.array([pd.NA] * len(t), dtype="boolean"),
                **{f"true_flux_{b}": t[f"flux_{b}"].to_numpy(float) for b in BANDS},
            }
        )
    )
    if distractors is not None and len(distractors):
        d = distractors.reset_index(drop=True)
        parts.append(
            pd.DataFrame(
                {
                    "subject_id": d["subject_id"].to_numpy(),
                    "source": d["kind"].astype(str).to_numpy(),
                    "index": np.arange(len(d)),
                    "x": d["x"].to_numpy(float),
                    "y": d["y"].to_numpy(float),
                    "unusual": pd.array([pd.NA] * len(d), dtype="boolean"),
                    **{f"true_flux_{b}": d[f"flux_{b}"].to_numpy(float) for b in BANDS},
                }
            )
        )
    boxes = pd.concat(parts, ignore_index=True)
    side = boxes["subject_id"].map(subjects.set_index("subject_id")["box_side"]).to_numpy(float)
    half = side / 2.0
    boxes["x1"], boxes["x2"] = boxes["x"] - half, boxes["x"] + half
    boxes["y1"], boxes["y2"] = boxes["y"] - half, boxes["y"] + half
    return boxes


def expert_match(labels: pd.DataFrame, expert_clicks: pd.DataFrame) -> pd.Series:
    """decisions.md#expert-comparison: "tp" if a label box contains ≥ 1 expert click, else "fp"; NA off the expert set."""
    hit, _ = containment(labels, expert_clicks)
    seen = labels["subject_id"].isin(set(expert_clicks["subject_id"])).to_numpy()
    out = pd.Series(np.where(hit, "tp", "fp"), index=labels.index, dtype="string")
    out[~seen] = pd.NA
    return out


def _read(path: str | Path | None) -> pd.DataFrame | None:
    if path is None:
        return None
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", path=path)
    try:
        return pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except Exception as exc:
        raise InputError(f"cannot read: {exc}", path=path) from exc


def photometry_labels(
    labels: pd.DataFrame,
    cutouts_dir,
    expert_clicks: pd.DataFrame | None = None,
    bg_factor: float = _BG_FACTOR,
) -> tuple[pd.DataFrame, dict]:
    """Photometry of aggregated label boxes, with ``expert_match`` when expert clicks are given."""
    table, report = measure(labels, cutouts_dir, bg_factor)
    if expert_clicks is not None:
        table["expert_match"] = expert_match(table, expert_clicks).to_numpy()
        counts = table["expert_match"].value_counts(dropna=False)
        report["expert_match"] = {str(k): int(v) for k, v in counts.items()}
    return table, report


def photometry_truth(
    truth: pd.DataFrame,
    subjects: pd.DataFrame,
    cutouts_dir,
    distractors: pd.DataFrame | None = None,
    bg_factor: float = _BG_FACTOR,
) -> tuple[pd.DataFrame, dict]:
    """Photometry of boxes around the simulated true clumps and distractors.

    The report gives, per source kind, the median of measured / true r flux (a
    point source loses the PSF wings outside its 2-FWHM box, ~10 %)."""
    table, report = measure(truth_boxes(truth, subjects, distractors), cutouts_dir, bg_factor)
    report["sources"] = {str(k): int(v) for k, v in table["source"].value_counts().items()}
    ratio = table["flux_nmgy_r"] / table["true_flux_r"]
    report["median_measured_over_true_r"] = {
        str(k): float(v) for k, v in ratio.groupby(table["source"]).median().items()
    }
    return table, report


# ------------------------------------------------------------------------------ CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cutouts", required=True, help="folder written by `clumpscout cutouts`")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--labels", help="labels.parquet of the aggregation")
    src.add_argument("--truth", help="truth_clumps.csv of the simulated universe")
    p.add_argument("--distractors", default=None, help="truth_distractors.csv (with --truth)")
    p.add_argument("--subjects", default=None, help="subjects.parquet (box_side; with --truth)")
    p.add_argument("--expert-clicks", default=None, help="expert_clicks.parquet (with --labels)")
    add_setting(p, "images.bg_factor")
    p.add_argument("--out", required=True, help="output Parquet (a JSON report is written beside)")


def run(args: argparse.Namespace) -> int:
    if args.labels:
        table, report = photometry_labels(
            _read(args.labels), args.cutouts, _read(args.expert_clicks), args.bg_factor
        )
    else:
        if not args.subjects:
            raise InputError("--truth needs --subjects (for the box side)")
        table, report = photometry_truth(
            _read(args.truth),
            _read(args.subjects),
            args.cutouts,
            _read(args.distractors),
            args.bg_factor,
        )
    write_parquet(table, args.out)
    write_json(report, Path(args.out).with_suffix(".json"))
    print(json.dumps({k: v for k, v in report.items() if k != "scaling"}, indent=1))
    return 0
