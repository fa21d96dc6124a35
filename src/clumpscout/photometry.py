"""Clump photometry on the images the volunteers saw (paper §6.3 and fig:flux_versus_fpp).

The paper compares the g, r, i fluxes of aggregated clumps — empirically true
vs false positives (fig:expert_all_set_hitmiss_band_flux_dists_lscale) and
against ``p_fp`` (fig:flux_versus_fpp) — with each band "scaled in the same way
as the corresponding bands of the subject images" (§2.2, SPEC 4), to reflect
what volunteers actually see. Here, per box:

- ``flux_g``, ``flux_r``, ``flux_i``: the sum, over the box, of the band as shown
  in the subject image: the asinh-scaled band (SPEC 4) clipped to [0, 1] and
  resized to 400 × 400 exactly as for the PNG (before 8-bit quantisation), in
  units of (scaled intensity × subject px²). Pixels count by their fractional
  overlap with the box; the part of a box outside the image counts nothing.
- ``ratio_g_r``, ``ratio_r_i``, ``ratio_g_i``: the flux ratios (a larger ratio
  is bluer); g/r and r/i are the non-redundant pair, g/i their product is
  kept for the paper's third panel. NaN when the denominator is ≤ 0.
- ``flux_nmgy_g`` …: the same box on the native grid (box corners × side/400)
  summed over the resampled frames in nanomaggies (no background subtraction:
  it is the light in the box, galaxy included).
- ``box_area``, ``frac_inside`` (fraction of the box area inside the image) and
  ``frac_nan`` (fraction of the box area on NaN pixels: off-frame).

Boxes come from ``labels.parquet`` (aggregation contract 5) or are built around
the simulated true clumps and distractors (``truth_clumps.csv``,
``truth_distractors.csv``) with the subject's ``box_side`` (SPEC 3). With expert
clicks, each label gets ``expert_match`` = "tp" if it contains at least one
expert click, "fp" if none, missing for subjects the experts did not see
(SPEC 23, via :func:`clumpscout.compare.containment`).
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout.cutouts import (
    BANDS,
    inverse_asinh_scale,
    load_bands,
    resize_band,
    subject_bands,
)
from clumpscout.errors import InputError
from clumpscout.io import write_json, write_parquet
from clumpscout.logs import progress, timed

log = logging.getLogger(__name__)

BOX_COLUMNS = ("subject_id", "x1", "y1", "x2", "y2")
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


def measure(boxes: pd.DataFrame, cutouts_dir: str | Path) -> tuple[pd.DataFrame, dict]:
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
    out = boxes.reset_index(drop=True).copy()
    n = len(out)
    cols = {f"flux_{b}": np.full(n, np.nan) for b in BANDS}
    cols.update({f"flux_nmgy_{b}": np.full(n, np.nan) for b in BANDS})
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
    with timed(f"photometry of {int((~bad_box).sum())} boxes in {len(groups)} subjects", log):
        for sid, idx in progress(groups.items(), "photometry", total=len(groups)):
            if sid not in meta.index:
                continue
            row = meta.loc[sid]
            row = row.iloc[0] if isinstance(row, pd.DataFrame) else row
            shown, nmgy = subject_views(flat, row, scaling)
            size = int(scaling["image_size"])
            f = int(row.side_native) / size
            for i in idx:
                area = (x2[i] - x1[i]) * (y2[i] - y1[i])
                inside = (
                    overlap_weights(x1[i], x2[i], size).sum()
                    * overlap_weights(y1[i], y2[i], size).sum()
                )
                nan_area = 0.0
                for b in BANDS:
                    cols[f"flux_{b}"][i], na = box_sum(shown[b], x1[i], y1[i], x2[i], y2[i])
                    nan_area = max(nan_area, na)
                    cols[f"flux_nmgy_{b}"][i], _ = box_sum(
                        nmgy[b], x1[i] * f, y1[i] * f, x2[i] * f, y2[i] * f
                    )
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
        "n_ratio_undefined": {
            f"{a}_{b}": int(np.isnan(out[f"ratio_{a}_{b}"]).sum()) for a, b in RATIOS
        },
        "scaling": scaling,
    }
    for key in ("n_invalid_box", "n_without_image", "n_on_nan_pixels"):
        if report[key]:
            log.warning("%s: %d", key, report[key])
    return out, report


def truth_boxes(
    truth: pd.DataFrame, subjects: pd.DataFrame, distractors: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Boxes of side ``box_side`` (SPEC 3) around the true clumps and the distractors.

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
    """SPEC 23: "tp" if a label box contains ≥ 1 expert click, else "fp"; NA off the expert set."""
    from clumpscout.compare import containment

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
    labels: pd.DataFrame, cutouts_dir, expert_clicks: pd.DataFrame | None = None
) -> tuple[pd.DataFrame, dict]:
    """Photometry of aggregated label boxes, with ``expert_match`` when expert clicks are given."""
    table, report = measure(labels, cutouts_dir)
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
) -> tuple[pd.DataFrame, dict]:
    """Photometry of boxes around the simulated true clumps and distractors."""
    table, report = measure(truth_boxes(truth, subjects, distractors), cutouts_dir)
    report["sources"] = {str(k): int(v) for k, v in table["source"].value_counts().items()}
    return table, report


# ------------------------------------------------------------------------------ CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cutouts", required=True, help="folder written by `clumpscout cutouts`")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--labels", help="labels.parquet of the aggregation (contract 5)")
    src.add_argument("--truth", help="truth_clumps.csv of the simulated universe")
    p.add_argument("--distractors", default=None, help="truth_distractors.csv (with --truth)")
    p.add_argument("--subjects", default=None, help="subjects.parquet (box_side; with --truth)")
    p.add_argument("--expert-clicks", default=None, help="expert_clicks.parquet (with --labels)")
    p.add_argument("--out", required=True, help="output Parquet (a JSON report is written beside)")


def run(args: argparse.Namespace) -> int:
    if args.labels:
        table, report = photometry_labels(
            _read(args.labels), args.cutouts, _read(args.expert_clicks)
        )
    else:
        if not args.subjects:
            raise InputError("--truth needs --subjects (for the box side)")
        table, report = photometry_truth(
            _read(args.truth), _read(args.subjects), args.cutouts, _read(args.distractors)
        )
    write_parquet(table, args.out)
    write_json(report, Path(args.out).with_suffix(".json"))
    print(json.dumps({k: v for k, v in report.items() if k != "scaling"}, indent=1))
    return 0
