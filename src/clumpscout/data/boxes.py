"""Clicks -> square boxes, drawn shapes -> their extent (paper §3.3; docs/decisions.md#box-geometry).

Each click becomes a square box of side ``box_side`` subject pixels centred on the click:
``x1 = x - side/2``, ``x2 = x + side/2``, likewise y (image y axis points down, so (x1, y1) is
the upper-left corner; docs/decisions.md#box-geometry). The side is, in this order:

- ``box_side`` given as a number: that side for every subject;
- ``box_side="auto"`` (or a subjects table whose ``psf_source`` is ``"auto"``): twice the FWHM
  of the click scatter measured on the clicks themselves (:func:`estimate_box_side`,
  docs/decisions.md#box-side-auto), the same for every subject;
- otherwise the subjects table's ``box_side`` (2 x the subject's PSF FWHM, from
  ``clumpscout subjects``).

The subjects table is optional: a project without a galaxy catalogue runs
``clumpscout boxes --clicks clicks.parquet --box-side 20 --out boxes.parquet``.

A drawn shape (a rectangle, circle or ellipse of the clicks table, docs/decisions.md#shapes)
keeps the extent the volunteer drew (``x1, y1, x2, y2`` of the clicks table) with
``shape_extent="drawn"`` (the default, config ``export.shape_extent``); ``"fixed"`` gives every
mark, shapes included, the square of the side centred on it. ``box_side`` stays the side in
every row (the subject's scale, which the baselines use). When the clicks hold drawn shapes
the boxes table passes ``shape`` through; a points-only table is unchanged.

Image size (it normalises the coordinates for every distance, and the generative model spreads
false boxes over the image), per subject, first of:

1. the subjects table's ``image_width``/``image_height``, unless that size only came from the
   config default (``image_size_source == "config"``);
2. the size the clicks table carries: ``natural_width``/``natural_height`` (what the volunteers'
   browsers reported, from ``clumpscout extract``) or ``image_width``/``image_height`` (a
   flattened table); the most common size among the subject's classifications;
3. ``image_size`` (``--image-size W H``);
4. the subjects table's config default;
5. unknown: the smallest image from (0, 0) holding every box of the subject. There is then no
   out-of-image check; the log and the report say so (docs/decisions.md#clicks-outside-image).

Boxes are **not clipped** to the image. A click (a shape's centre) outside
``[0, width] x [0, height]`` is kept, flagged in ``outside_image`` and counted in the report,
with examples (docs/decisions.md#clicks-outside-image). Normalised coordinates divide x by the
image width and y by the image height; they are given in ``x1_norm`` ... ``y2_norm`` and may
leave [0, 1] for boxes that stick out.

A classification that marked nothing keeps its single row with NaN coordinates, so the
aggregation knows that its volunteer saw the subject.

Checked, each an :class:`InputError` naming the file, the row(s) and the problem: missing
columns, ids that are missing or not integers, coordinates that are not numbers or only half
there, a classification under two subjects or two volunteers, a volunteer given on some rows of
a classification and missing on others, clicks of a subject missing from the subjects table.
A classification whose volunteer is missing on every row is kept (the aggregation treats it as
an anonymous volunteer) and counted. Row numbers follow :mod:`clumpscout.errors`: 0-based
positions in a Parquet table, 1-based data rows in a CSV file.

:func:`make_boxes` fills a report (``report=`` dict; the CLI writes ``<out stem>_report.json``)
with the counts above, the side used and where it came from, and the image-size sources.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.config import add_setting, choices, default
from clumpscout.data.box_side import FWHM_PER_SIGMA, estimate_box_side
from clumpscout.data.clicks_table import (
    CLICK_REQUIRED,
    EXTENT_COLUMNS,
    SIZE_COLUMNS,
    check_classifications,
    check_columns,
    click_coordinates,
    clicks_sizes,
    drawn_extents,
    has_shapes,
    int_column,
    load_flat_clicks,
    read_clicks,
    row_base,
    volunteer_codes,
)
from clumpscout.errors import InputError
from clumpscout.io import report_path, write_json, write_parquet
from clumpscout.logs import timed

log = logging.getLogger(__name__)

#: public names (reading and checking the clicks table: clumpscout.data.clicks_table; the auto
#: box side: clumpscout.data.box_side; both re-exported here)
__all__ = [
    "BOX_COLUMNS",
    "BOX_KEYS",
    "CLICK_REQUIRED",
    "EXTENT_COLUMNS",
    "FWHM_PER_SIGMA",
    "PASS_THROUGH",
    "SHAPE_EXTENTS",
    "SIZE_COLUMNS",
    "SUBJECT_REQUIRED",
    "add_arguments",
    "drawn_extents",
    "estimate_box_side",
    "load_flat_clicks",
    "make_boxes",
    "read_clicks",
    "run",
    "square_boxes",
]

#: ``shape_extent``: a drawn shape's box is its drawn extent, or the fixed square of a point
SHAPE_EXTENTS = tuple(choices("export")["shape_extent"])  # ("drawn", "fixed")
SHAPE_EXTENT = default("export.shape_extent")  # the default
SUBJECT_REQUIRED = ("subject_id", "box_side", "image_width", "image_height")

#: the columns of every box row that the aggregation reads (docs/tables.md#boxes)
BOX_KEYS = (
    "classification_id",
    "subject_id",
    "volunteer",
    "x1",
    "y1",
    "x2",
    "y2",
    "image_width",
    "image_height",
)
#: boxes.parquet columns (docs/tables.md#boxes) then pass-through extras
BOX_COLUMNS = (
    *BOX_KEYS,
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
PASS_THROUGH = ("user_id", "task", "tool", "frame")
_EXAMPLES = 20


def square_boxes(
    x: np.ndarray, y: np.ndarray, side: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Corners (x1, y1, x2, y2) of squares of side ``side`` centred on (x, y); not clipped."""
    half = 0.5 * np.asarray(side, dtype=float)
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    return x - half, y - half, x + half, y + half


# --------------------------------------------------------------------------- boxes


def _side_option(box_side: Any) -> float | str | None:
    if box_side is None:
        return None
    if isinstance(box_side, str):
        if box_side.strip().lower() == "auto":
            return "auto"
        try:
            box_side = float(box_side)
        except ValueError:
            raise InputError(
                f"box side must be a number of pixels or 'auto', got {box_side!r}"
            ) from None
    if isinstance(box_side, bool) or not (float(box_side) > 0) or not np.isfinite(float(box_side)):
        raise InputError(f"box side must be positive, got {box_side!r}")
    return float(box_side)


def make_boxes(
    clicks: pd.DataFrame,
    subjects: pd.DataFrame | None = None,
    box_side: float | str | None = None,
    clicks_path: object = None,
    subjects_path: object = None,
    shape_extent: str = SHAPE_EXTENT,
    image_size: tuple[float, float] | None = None,
    report: dict | None = None,
) -> pd.DataFrame:
    """One box per click or drawn shape, empty classifications kept as NaN rows (module
    docstring; docs/decisions.md#box-geometry, #shapes, #box-side-auto, #clicks-outside-image).

    ``subjects``: the subjects table (optional); ``box_side``: pixels, ``"auto"`` or None (the
    subjects table's); ``image_size``: (width, height) for subjects whose size nothing else
    gives; ``report``: a dict filled with the counts (JSON-serialisable).
    """
    check_columns(clicks, CLICK_REQUIRED, "clicks", clicks_path)
    side_opt = _check_options(subjects, box_side, clicks_path, shape_extent, image_size)
    base = row_base(clicks_path)
    clicks = clicks.reset_index(drop=True)
    cid = int_column(clicks, "classification_id", clicks_path, base)
    sid = int_column(clicks, "subject_id", clicks_path, base)
    x, y = click_coordinates(clicks, clicks_path, base)
    vol, vol_missing = volunteer_codes(clicks)
    no_volunteer = check_classifications(cid, sid, vol, vol_missing, clicks_path, base)

    # ---- per subject: box side and image size (and where the size came from)
    per, side_opt = _per_subject(subjects, sid, side_opt, subjects_path)
    _sizes_from_clicks(clicks, per, image_size)
    if side_opt == "auto":
        keys = _vol_keys(vol, vol_missing, cid)
        auto = _auto_side(clicks, sid, keys, x, y)
        per.side_s = np.full(len(per.index), auto["box_side_px"])
        side_source = "auto"
    else:
        auto = None
        if side_opt is not None:
            per.side_s = np.full(len(per.index), float(side_opt))
        side_source = "subjects" if side_opt is None else "option"
    side = per.side_s[per.pos]
    bad = ~(np.isfinite(side) & (side > 0))
    if bad.any():
        s = np.unique(sid[bad])
        raise InputError(
            f"no usable box side for {len(s)} subject(s), e.g. {', '.join(map(str, s[:10]))}",
            path=subjects_path,
        )

    corners, drawn = _corners(clicks, x, y, side, shape_extent, clicks_path)
    _unknown_sizes(per, corners)
    w = np.round(per.w_s[per.pos]).astype(np.int64)
    h = np.round(per.h_s[per.pos]).astype(np.int64)
    empty = np.isnan(x)
    size_known = ~(per.src == "unknown")[per.pos]
    outside = ~empty & size_known & ((x < 0) | (y < 0) | (x > w) | (y > h))
    out = _box_table(
        clicks, cid, sid, vol, corners, (w, h), x, y, side, outside, empty | ~size_known
    )

    # ---- log and report
    n_empty = int(empty.sum())
    n_subjects = _n_distinct(sid)
    log.info(
        "%d boxes (+%d empty classifications kept as NaN rows) of %d subjects",
        len(out) - n_empty,
        n_empty,
        n_subjects,
    )
    if drawn.any():
        log.info("%d boxes are drawn extents (shape_extent: drawn)", int(drawn.sum()))
    elif has_shapes(clicks):
        log.info(
            "drawn shapes get the fixed square of the box side (shape_extent: %s)", shape_extent
        )
    sources = _log_sources(per, subjects is not None)
    n_out = int(outside.sum())
    examples = _outside_examples(outside, base, cid, sid, x, y, w, h)
    if n_out:
        _log_outside(n_out, examples[0], len(x) - n_empty)
    if no_volunteer:
        log.info(
            "%d classifications have no volunteer (kept; the aggregation treats each as an "
            "anonymous volunteer)",
            no_volunteer,
        )
    if report is not None:
        report.update(
            {
                "clicks": None if clicks_path is None else str(clicks_path),
                "subjects_table": None if subjects_path is None else str(subjects_path),
                "rows": int(len(out)),
                "boxes": int(len(out) - n_empty),
                "drawn_boxes": int(drawn.sum()),
                "empty_classifications": n_empty,
                "classifications": _n_distinct(cid),
                "classifications_without_volunteer": no_volunteer,
                "subjects": n_subjects,
                "box_side": _side_report(side_source, per.side_s, side, auto),
                "image_size_source": sources,
                "image_size_option": None if image_size is None else [float(v) for v in image_size],
                "clicks_outside_image": n_out,
                "clicks_image_size_unknown": int((~empty & ~size_known).sum()),
                "outside_image_rule": "kept and flagged (docs/decisions.md#clicks-outside-image)",
                "outside_image_examples": examples,
            }
        )
    return out


def _side_report(
    side_source: str, side_s: np.ndarray, side: np.ndarray, auto: dict[str, Any] | None
) -> dict[str, Any]:
    """The report's ``box_side`` section: where the side came from, its value(s), the auto fit."""
    return {
        "source": side_source,
        "px": None if side_source == "subjects" else float(side_s[0]) if len(side_s) else None,
        "min_px": float(np.min(side)) if len(side) else None,
        "max_px": float(np.max(side)) if len(side) else None,
        "auto": auto,
    }


def _check_options(
    subjects: pd.DataFrame | None,
    box_side: Any,
    clicks_path: object,
    shape_extent: str,
    image_size: tuple[float, float] | None,
) -> float | str | None:
    """The box side option (:func:`_side_option`), after checking the other options."""
    side_opt = _side_option(box_side)
    if shape_extent not in SHAPE_EXTENTS:
        raise InputError(
            f"shape_extent must be one of {', '.join(SHAPE_EXTENTS)}, got {shape_extent!r}"
        )
    if image_size is not None:
        if len(image_size) != 2 or not all(float(v) > 0 for v in image_size):
            raise InputError(f"image size must be two positive numbers W H, got {image_size!r}")
    if subjects is None and side_opt is None:
        raise InputError(
            "without a subjects table the box side must be given: --box-side PX (subject "
            "pixels) or --box-side auto (config export.box_side)",
            path=clicks_path,
        )
    return side_opt


@dataclass
class _PerSubject:
    """Per subject (``index``: subject ids; ``pos``: each click's subject): box side, image
    width and height, and where the size came from (subjects, config, clicks, option, unknown)."""

    index: pd.Index
    pos: np.ndarray
    side_s: np.ndarray
    w_s: np.ndarray
    h_s: np.ndarray
    src: np.ndarray


def _per_subject(
    subjects: pd.DataFrame | None, sid: np.ndarray, side_opt: Any, subjects_path: object
) -> tuple[_PerSubject, Any]:
    """Box side and image size per subject from the subjects table (or unknown without one), and
    the box side option ("auto" when the subjects table's PSF source is "auto")."""
    if subjects is None:
        index = pd.Index(np.unique(sid))
        nan = np.full(len(index), np.nan)
        unknown = np.full(len(index), "unknown", dtype=object)
        return _PerSubject(index, index.get_indexer(sid), nan, nan.copy(), nan.copy(), unknown), (
            side_opt
        )
    check_columns(subjects, SUBJECT_REQUIRED, "subjects", subjects_path)
    subj = subjects.drop_duplicates("subject_id")
    if len(subj) != len(subjects):
        raise InputError("the subjects table repeats subject ids", path=subjects_path)
    index = pd.Index(subj["subject_id"].to_numpy(dtype=np.int64))
    pos = index.get_indexer(sid)
    if (pos < 0).any():
        missing = np.unique(sid[pos < 0])
        raise InputError(
            f"{len(missing)} subject(s) with clicks are not in the subjects table (no box "
            f"side / PSF for them), e.g. {', '.join(map(str, missing[:10]))}; add them to "
            "the catalogue, drop them in extract (extract.missing_subjects: drop) or run "
            "boxes without a subjects table (--box-side)",
            path=subjects_path,
        )
    side_s = subj["box_side"].to_numpy(dtype=float, na_value=np.nan)
    w_s = subj["image_width"].to_numpy(dtype=float, na_value=np.nan).copy()
    h_s = subj["image_height"].to_numpy(dtype=float, na_value=np.nan).copy()
    src = np.full(len(subj), "subjects", dtype=object)
    if "image_size_source" in subj.columns:
        src[(subj["image_size_source"] == "config").to_numpy(dtype=bool, na_value=False)] = "config"
    src[~((w_s > 0) & (h_s > 0))] = "unknown"
    if side_opt is None and "psf_source" in subj.columns:
        if (subj["psf_source"] == "auto").to_numpy(dtype=bool, na_value=False).any():
            side_opt = "auto"
    return _PerSubject(index, pos, side_s, w_s, h_s, src), side_opt


def _sizes_from_clicks(
    clicks: pd.DataFrame, per: _PerSubject, image_size: tuple[float, float] | None
) -> None:
    """Subjects whose size is a config default or unknown: the size the clicks table carries,
    else the ``image_size`` option (updates ``per`` in place)."""
    fallback = (per.src == "config") | (per.src == "unknown")
    rep = clicks_sizes(clicks)
    if len(rep):
        rpos = per.index.get_indexer(rep["subject_id"].to_numpy(dtype=np.int64))
        use = (rpos >= 0) & fallback[np.maximum(rpos, 0)]
        per.w_s[rpos[use]] = rep["w"].to_numpy()[use]
        per.h_s[rpos[use]] = rep["h"].to_numpy()[use]
        per.src[rpos[use]] = "clicks"
    if image_size is not None:
        use = (per.src == "config") | (per.src == "unknown")
        per.w_s[use], per.h_s[use] = float(image_size[0]), float(image_size[1])
        per.src[use] = "option"


def _auto_side(
    clicks: pd.DataFrame, sid: np.ndarray, keys: np.ndarray, x: np.ndarray, y: np.ndarray
) -> dict[str, Any]:
    """The box side measured on the points' scatter (:func:`estimate_box_side`), logged."""
    points = ~np.isnan(x)
    if "shape" in clicks.columns:
        points &= (clicks["shape"].astype("str").fillna("point") == "point").to_numpy()
    with timed("estimating the box side from the click scatter", log):
        auto = estimate_box_side(sid[points], keys[points], x[points], y[points])
    log.info(
        "box side auto: click scatter sigma = %.3g px (FWHM %.3g px) from %d groups of "
        "clicks by >= %d volunteers on %d subjects -> box side 2 FWHM = %.3g px",
        auto["sigma_px"],
        auto["fwhm_px"],
        auto["groups"],
        auto["min_volunteers"],
        auto["subjects_used"],
        auto["box_side_px"],
    )
    return auto


def _corners(
    clicks: pd.DataFrame,
    x: np.ndarray,
    y: np.ndarray,
    side: np.ndarray,
    shape_extent: str,
    clicks_path: object,
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """(x1, y1, x2, y2) of every box (the square of side ``side``, or a shape's drawn extent)
    and which boxes are drawn extents."""
    x1, y1, x2, y2 = square_boxes(x, y, side)
    drawn = drawn_extents(clicks, clicks_path)
    if shape_extent == "drawn" and drawn.any():
        for corner, col in zip((x1, y1, x2, y2), EXTENT_COLUMNS, strict=True):
            corner[drawn] = pd.to_numeric(clicks[col]).to_numpy(dtype=float, na_value=np.nan)[drawn]
    else:
        drawn[:] = False
    return (x1, y1, x2, y2), drawn


def _unknown_sizes(per: _PerSubject, corners: tuple[np.ndarray, ...]) -> None:
    """Unknown sizes: the smallest image from (0, 0) holding the subject's boxes (in place)."""
    unknown = per.src == "unknown"
    if unknown.any():
        x2, y2 = corners[2], corners[3]
        ext_w = np.full(len(per.index), 0.0)
        ext_h = np.full(len(per.index), 0.0)
        has = ~np.isnan(x2)
        np.maximum.at(ext_w, per.pos[has], x2[has])
        np.maximum.at(ext_h, per.pos[has], y2[has])
        per.w_s[unknown] = np.maximum(np.ceil(ext_w[unknown]), np.ceil(per.side_s[unknown]))
        per.h_s[unknown] = np.maximum(np.ceil(ext_h[unknown]), np.ceil(per.side_s[unknown]))


def _box_table(
    clicks: pd.DataFrame,
    cid: np.ndarray,
    sid: np.ndarray,
    vol: pd.Series,
    corners: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    size: tuple[np.ndarray, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    side: np.ndarray,
    outside: np.ndarray,
    no_flag: np.ndarray,
) -> pd.DataFrame:
    """The boxes table (docs/tables.md#boxes), sorted by subject and classification;
    ``outside_image`` NA where ``no_flag`` (no mark, or the image size unknown)."""
    x1, y1, x2, y2 = corners
    w, h = size
    out = pd.DataFrame(
        {
            "classification_id": cid,
            "subject_id": sid,
            "volunteer": vol.to_numpy(),
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
        out["created_at"] = clicks["created_at"]
    for c in PASS_THROUGH:
        if c in clicks.columns:
            out[c] = clicks[c]
    flag = pd.array(outside, dtype="boolean")
    flag[no_flag] = pd.NA
    out["outside_image"] = flag
    if has_shapes(clicks):
        out["shape"] = clicks["shape"].astype("str")
    order = np.lexsort((np.arange(len(out)), out["classification_id"], out["subject_id"]))
    if not np.array_equal(order, np.arange(len(out))):
        out = out.iloc[order].reset_index(drop=True)
    return out


def _n_distinct(a: np.ndarray) -> int:
    """How many distinct values (a hash table: ~8x faster than np.unique's sort here)."""
    return int(len(pd.unique(a)))


def _log_sources(per: _PerSubject, has_subjects: bool) -> dict[str, int]:
    """Subjects with clicks by where their image size came from (logged when notable)."""
    used = pd.unique(per.pos)  # (counted below: the order does not matter)
    sources = {
        k: int((per.src[used] == k).sum())
        for k in ("subjects", "clicks", "option", "config", "unknown")
    }
    if sources["clicks"] and has_subjects:
        log.info(
            "image size of %d subjects taken from the size the clicks table carries "
            "(e.g. the volunteers' reported naturalWidth/Height)",
            sources["clicks"],
        )
    if sources["unknown"]:
        log.warning(
            "image size unknown for %d subjects (no subjects table size, no size in the clicks "
            "table, no --image-size): their images are taken as the smallest holding their "
            "boxes, and their clicks are not checked for being outside the image",
            sources["unknown"],
        )
    return sources


def _outside_examples(outside, base, cid, sid, x, y, w, h) -> list[dict[str, Any]]:
    """The first clicks outside their image, for the report."""
    return [
        {
            "row": int(i) + base,
            "classification_id": int(cid[i]),
            "subject_id": int(sid[i]),
            "x": float(x[i]),
            "y": float(y[i]),
            "image_width": int(w[i]),
            "image_height": int(h[i]),
        }
        for i in np.flatnonzero(outside)[:_EXAMPLES]
    ]


def _log_outside(n_out: int, e: dict[str, Any], n_marks: int) -> None:
    """Warn about the clicks outside their image (``e``: the first; ``n_marks``: every mark)."""
    log.warning(
        "%d clicks lie outside their image (kept and flagged in outside_image; "
        "docs/decisions.md#clicks-outside-image), e.g. (%g, %g) on a %d x %d image "
        "(subject %d, classification %d)%s",
        n_out,
        e["x"],
        e["y"],
        e["image_width"],
        e["image_height"],
        e["subject_id"],
        e["classification_id"],
        "; so many suggest coordinates in another pixel scale than the image size"
        if n_out > max(10, 0.01 * n_marks)
        else "",
    )


def _vol_keys(vol: pd.Series, missing: np.ndarray, cid: np.ndarray) -> np.ndarray:
    """Volunteer keys for the scatter estimate: a classification without a volunteer is its
    own anonymous volunteer."""
    keys = vol.to_numpy(dtype=object).copy()
    keys[missing] = [f"anonymous-{c}" for c in cid[missing]]
    return keys


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Clicks -> boxes. Each click becomes a square of side --box-side (or the subjects "
        "table's 2 x PSF FWHM) centred on it; drawn shapes keep their extent. Clicks outside "
        "the image are kept, flagged and counted in <out stem>_report.json."
    )
    p.add_argument(
        "--clicks",
        required=True,
        help="clicks table: clicks.parquet from clumpscout extract, or a flattened CSV with "
        "classification_id, subject_id, volunteer, x, y [, unusual, image_width, image_height]",
    )
    p.add_argument(
        "--subjects",
        default=None,
        help="subjects.parquet from clumpscout subjects (box side and image size per subject); "
        "optional with --box-side",
    )
    add_setting(
        p,
        "export.box_side",
        note="here for every subject",
        unset="the subjects table's; required without --subjects",
    )
    add_setting(p, "export.image_size", metavar=("W", "H"))
    add_setting(p, "export.shape_extent")
    p.add_argument("--out", required=True, help="boxes.parquet (report: <stem>_report.json)")


def _read_parquet(path: str) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read Parquet file: {exc}", path=path) from None


def run(args: argparse.Namespace) -> int:
    report: dict[str, Any] = {}
    with timed("boxes", log):
        boxes = make_boxes(
            read_clicks(args.clicks),
            None if args.subjects is None else _read_parquet(args.subjects),
            box_side=args.box_side,
            clicks_path=args.clicks,
            subjects_path=args.subjects,
            shape_extent=args.shape_extent,
            image_size=args.image_size,
            report=report,
        )
    write_parquet(boxes, args.out)
    write_json(report, report_path(args.out))
    log.info("wrote %s and %s", args.out, report_path(args.out))
    return 0
