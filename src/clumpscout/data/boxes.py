"""Clicks -> square boxes of side 2 FWHM, drawn shapes -> their extent (paper §3.3; contract 4).

Each click becomes a square box of side ``box_side`` subject pixels (2 x the subject's PSF FWHM,
from the subjects table, or one side for every subject when ``box_side`` is given) centred on
the click: ``x1 = x - side/2``, ``x2 = x + side/2``, likewise y (image y axis points down, so
(x1, y1) is the upper-left corner; docs/decisions.md#box-geometry). A drawn shape (a rectangle,
circle or ellipse of the clicks table, docs/decisions.md#shapes) keeps the extent the volunteer
drew (``x1, y1, x2, y2`` of the clicks table: a rectangle as drawn, the bounding box of a circle
or ellipse) with ``shape_extent="drawn"`` (the default, config ``export.shape_extent``);
``"fixed"`` gives every mark, shapes included, the square of the configured side centred on it
(the shape's centre). ``box_side`` stays the configured side in every row (the subject's scale,
which the baselines use). When the clicks hold drawn shapes the boxes table passes ``shape``
through; a points-only table is unchanged.

Boxes are **not clipped** to the image (decisions.md#box-geometry: a box that sticks out is kept as is; clicks
outside the image are flagged by ``extract`` in ``outside_image`` and kept too). Normalised
coordinates divide x by the image width and y by the image height (decisions.md#box-geometry); they are given in
``x1_norm`` ... ``y2_norm`` and may leave [0, 1] for boxes that stick out.

A classification that marked nothing keeps its single row with NaN coordinates (contract 4), so
the aggregation knows that its volunteer saw the subject.

Image size: the subjects table's ``image_width``/``image_height``. When that size only came from
the config default (``image_size_source == "config"``: the subject export did not say) and the
clicks carry the size the volunteers' browsers reported (``natural_width``/``natural_height``
from ``metadata.subject_dimensions``), the most common reported size of the subject's
classifications is used instead (e.g. Penguin Watch's 1000 x 750 images); such subjects are
counted in the log.

Clicks of a subject that is not in the subjects table raise :class:`InputError` naming them.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import pandas as pd

from clumpscout.errors import InputError
from clumpscout.logs import timed

log = logging.getLogger(__name__)

CLICK_REQUIRED = ("classification_id", "subject_id", "volunteer", "x", "y")
EXTENT_COLUMNS = ("x1", "y1", "x2", "y2")
#: ``shape_extent``: a drawn shape's box is its drawn extent, or the fixed square of a point
SHAPE_EXTENTS = ("drawn", "fixed")
SUBJECT_REQUIRED = ("subject_id", "box_side", "image_width", "image_height")

#: boxes.parquet columns (contract 4) then pass-through extras
BOX_COLUMNS = (
    "classification_id",
    "subject_id",
    "volunteer",
    "x1",
    "y1",
    "x2",
    "y2",
    "image_width",
    "image_height",
    "unusual",
    "x",
    "y",
    "box_side",
    "created_at",
    "x1_norm",
    "y1_norm",
    "x2_norm",
    "y2_norm",
)
PASS_THROUGH = ("user_id", "task", "tool", "frame", "outside_image")


def square_boxes(
    x: np.ndarray, y: np.ndarray, side: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Corners (x1, y1, x2, y2) of squares of side ``side`` centred on (x, y); not clipped."""
    half = 0.5 * np.asarray(side, dtype=float)
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    return x - half, y - half, x + half, y + half


def _check_columns(df: pd.DataFrame, required: tuple[str, ...], what: str, path: object) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(
            f"{what} table lacks column(s) {', '.join(missing)} (has: {', '.join(df.columns)})",
            path=path,
        )


def _reported_sizes(clicks: pd.DataFrame) -> pd.DataFrame:
    """Most common (natural_width, natural_height) per subject among its classifications."""
    if "natural_width" not in clicks.columns or "natural_height" not in clicks.columns:
        return pd.DataFrame(columns=["subject_id", "w", "h"])
    d = clicks[["subject_id", "classification_id", "natural_width", "natural_height"]]
    d = d.dropna().drop_duplicates(["subject_id", "classification_id"])
    if d.empty:
        return pd.DataFrame(columns=["subject_id", "w", "h"])
    counts = d.groupby(["subject_id", "natural_width", "natural_height"]).size().reset_index()
    counts = counts.sort_values(
        ["subject_id", 0, "natural_width", "natural_height"], ascending=[True, False, True, True]
    )
    best = counts.drop_duplicates("subject_id")
    return pd.DataFrame(
        {
            "subject_id": best["subject_id"].to_numpy(dtype=np.int64),
            "w": best["natural_width"].to_numpy(dtype=float),
            "h": best["natural_height"].to_numpy(dtype=float),
        }
    )


def drawn_extents(clicks: pd.DataFrame, path: object = None) -> np.ndarray:
    """Rows of ``clicks`` that carry a drawn extent (finite ``x1, y1, x2, y2`` and a centre).

    A row with only some of the four, or with ``x2 <= x1`` or ``y2 <= y1``, is an
    :class:`InputError` naming it (0-based position in the table).
    """
    if not set(EXTENT_COLUMNS) <= set(clicks.columns):
        return np.zeros(len(clicks), dtype=bool)
    e = np.column_stack([clicks[c].to_numpy(dtype=float, na_value=np.nan) for c in EXTENT_COLUMNS])
    finite = np.isfinite(e)
    has = finite.all(axis=1) & np.isfinite(clicks["x"].to_numpy(dtype=float, na_value=np.nan))
    bad = (finite.any(axis=1) & ~has) | (has & ~((e[:, 2] > e[:, 0]) & (e[:, 3] > e[:, 1])))
    if bad.any():
        raise InputError(
            "a drawn extent (x1, y1, x2, y2) is incomplete or has x2 <= x1 or y2 <= y1",
            path=path,
            row=int(np.flatnonzero(bad)[0]),
        )
    return has


def _has_shapes(clicks: pd.DataFrame) -> bool:
    """Do the clicks hold marks other than points (column ``shape``)?"""
    if "shape" not in clicks.columns:
        return False
    s = clicks["shape"]
    return bool((s.notna() & (s.astype("str") != "point")).any())


def make_boxes(
    clicks: pd.DataFrame,
    subjects: pd.DataFrame,
    box_side: float | None = None,
    clicks_path: object = None,
    subjects_path: object = None,
    shape_extent: str = "drawn",
) -> pd.DataFrame:
    """One box per click or drawn shape (contract 4), empty classifications kept as NaN rows
    (decisions.md#box-geometry); ``shape_extent``: see the module docstring (docs/decisions.md#shapes)."""
    _check_columns(clicks, CLICK_REQUIRED, "clicks", clicks_path)
    _check_columns(subjects, SUBJECT_REQUIRED, "subjects", subjects_path)
    if box_side is not None and not (float(box_side) > 0):
        raise InputError(f"box side must be positive, got {box_side!r}")
    if shape_extent not in SHAPE_EXTENTS:
        raise InputError(
            f"shape_extent must be one of {', '.join(SHAPE_EXTENTS)}, got {shape_extent!r}"
        )
    subj = subjects.drop_duplicates("subject_id")
    if len(subj) != len(subjects):
        raise InputError("the subjects table repeats subject ids", path=subjects_path)
    sid = clicks["subject_id"].to_numpy(dtype=np.int64)
    index = pd.Index(subj["subject_id"].to_numpy(dtype=np.int64))
    pos = index.get_indexer(sid)
    if (pos < 0).any():
        missing = np.unique(sid[pos < 0])
        raise InputError(
            f"{len(missing)} subject(s) with clicks are not in the subjects table (no box side "
            f"/ PSF for them), e.g. {', '.join(map(str, missing[:10]))}; add them to the "
            "catalogue or drop them in extract (extract.missing_subjects: drop)",
            path=subjects_path,
        )
    if box_side is None:
        side_s = subj["box_side"].to_numpy(dtype=float)
    else:
        side_s = np.full(len(subj), float(box_side))
    w_s = np.array(subj["image_width"], dtype=float)  # copies: may be updated below
    h_s = np.array(subj["image_height"], dtype=float)
    if "image_size_source" in subj.columns:
        from_config = (subj["image_size_source"] == "config").to_numpy(dtype=bool, na_value=False)
        if from_config.any():
            rep = _reported_sizes(clicks)
            rpos = index.get_indexer(rep["subject_id"].to_numpy(dtype=np.int64))
            use = (rpos >= 0) & from_config[np.maximum(rpos, 0)]
            w_s[rpos[use]] = rep["w"].to_numpy()[use]
            h_s[rpos[use]] = rep["h"].to_numpy()[use]
            if use.any():
                log.info(
                    "image size of %d subjects taken from the volunteers' reported "
                    "naturalWidth/Height (the subject export did not give one)",
                    int(use.sum()),
                )
    side = side_s[pos]
    bad = ~(np.isfinite(side) & (side > 0))
    if bad.any():
        s = np.unique(sid[bad])
        raise InputError(
            f"no usable box side for {len(s)} subject(s), e.g. {', '.join(map(str, s[:10]))}",
            path=subjects_path,
        )
    w = np.round(w_s[pos]).astype(np.int64)
    h = np.round(h_s[pos]).astype(np.int64)
    x = clicks["x"].to_numpy(dtype=float)
    y = clicks["y"].to_numpy(dtype=float)
    x1, y1, x2, y2 = square_boxes(x, y, side)
    drawn = drawn_extents(clicks, clicks_path)
    if shape_extent == "drawn" and drawn.any():
        for corner, col in zip((x1, y1, x2, y2), EXTENT_COLUMNS, strict=True):
            corner[drawn] = clicks[col].to_numpy(dtype=float, na_value=np.nan)[drawn]
    else:
        drawn[:] = False
    out = pd.DataFrame(
        {
            "classification_id": clicks["classification_id"].to_numpy(dtype=np.int64),
            "subject_id": sid,
            "volunteer": clicks["volunteer"].to_numpy(),
            "x1": x1,
            "y1": y1,
            "x2": x2,
            "y2": y2,
            "image_width": w,
            "image_height": h,
            "unusual": (
                clicks["unusual"].astype("boolean").fillna(False).to_numpy(dtype=bool)
                if "unusual" in clicks.columns
                else np.zeros(len(clicks), dtype=bool)
            ),
            "x": x,
            "y": y,
            "box_side": side,
            "created_at": pd.NaT,
            "x1_norm": x1 / w,
            "y1_norm": y1 / h,
            "x2_norm": x2 / w,
            "y2_norm": y2 / h,
        }
    )
    out["volunteer"] = out["volunteer"].astype("str")
    if "created_at" in clicks.columns:
        out["created_at"] = clicks["created_at"].reset_index(drop=True)
    for c in PASS_THROUGH:
        if c in clicks.columns:
            out[c] = clicks[c].reset_index(drop=True)
    if _has_shapes(clicks):
        out["shape"] = clicks["shape"].astype("str").reset_index(drop=True)
    order = np.lexsort((np.arange(len(out)), out["classification_id"], out["subject_id"]))
    if not np.array_equal(order, np.arange(len(out))):
        out = out.iloc[order].reset_index(drop=True)
    n_empty = int(np.isnan(x).sum())
    log.info(
        "%d boxes (+%d empty classifications kept as NaN rows) of %d subjects",
        len(out) - n_empty,
        n_empty,
        len(np.unique(sid)),
    )
    if drawn.any():
        log.info("%d boxes are drawn extents (shape_extent: drawn)", int(drawn.sum()))
    elif _has_shapes(clicks):
        log.info(
            "drawn shapes get the fixed square of the box side (shape_extent: %s)", shape_extent
        )
    return out


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clicks", required=True, help="clicks.parquet from clumpscout extract")
    p.add_argument("--subjects", required=True, help="subjects.parquet from clumpscout subjects")
    p.add_argument("--box-side", type=float, default=None, help="one box side for all (px)")
    p.add_argument(
        "--shape-extent",
        choices=SHAPE_EXTENTS,
        default="drawn",
        help="drawn shapes: their drawn extent (default) or the fixed square of a point",
    )
    p.add_argument("--out", required=True, help="boxes.parquet")


def _read_parquet(path: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read Parquet file: {exc}", path=path) from None


def run(args: argparse.Namespace) -> int:
    from clumpscout.io import write_parquet

    with timed("boxes", log):
        boxes = make_boxes(
            _read_parquet(args.clicks),
            _read_parquet(args.subjects),
            box_side=args.box_side,
            clicks_path=args.clicks,
            subjects_path=args.subjects,
            shape_extent=args.shape_extent,
        )
    write_parquet(boxes, args.out)
    log.info("wrote %s", args.out)
    return 0
