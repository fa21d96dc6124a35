"""The aggregation's input: the boxes table read, validated and indexed in canonical order.

:func:`prepare` turns the boxes table of ``clumpscout boxes`` (one row per click, x1, y1,
x2, y2 in subject pixels, or one coordinate-less row for a classification that marked
nothing) into the integer codes and normalised coordinates of :class:`Prepared` that the
EM (:mod:`clumpscout.model.em`) works on. Coordinates are normalised by the image size for
every distance (docs/decisions.md#box-geometry, #jaccard-distance).

The annotation unit ``z_ij`` is one volunteer on one subject: two classifications of one
subject by one volunteer (a duplicate the export reader normally removes) are merged and
counted in the report (docs/decisions.md#one-box-per-classification).

Determinism (docs/decisions.md#determinism): rows are put into a canonical order (subject,
volunteer, classification, coordinates) before anything else and volunteers are coded by
sorted name, so the same input in any row order gives the same arrays.

:func:`split_by_tool` rewrites the table so that every (subject, tool) pair is aggregated
as a subject of its own (``aggregate.per_tool``, docs/decisions.md#per-tool).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
import pandas as pd

from clumpscout.errors import InputError

REQUIRED_COLUMNS = (
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

#: the boxes table's tool column (passed through from the export by clumpscout.data.boxes)
TOOL_COLUMN = "tool"


@dataclass
class Prepared:
    """The input in canonical order, as integer codes and normalised coordinates."""

    n_rows: int
    # subjects (sorted by subject_id)
    subject_ids: np.ndarray
    subj_n_vol: np.ndarray  # |V_i|: annotations (volunteers), empty ones included
    subj_n_boxes: np.ndarray
    subj_cls_off: np.ndarray  # (S+1) into the annotation arrays
    subj_box_off: np.ndarray  # (S+1) into the box arrays
    subj_order_key: np.ndarray  # arrival order for batching
    subj_width: np.ndarray
    subj_height: np.ndarray
    # annotations z_ij (sorted by subject, volunteer)
    cls_subject: np.ndarray
    cls_vol: np.ndarray
    # boxes (rows with coordinates, canonical order)
    box_row: np.ndarray  # original input row
    box_cls: np.ndarray
    box_subject: np.ndarray
    box_vol: np.ndarray
    box_xyxy: np.ndarray  # normalised (N, 4)
    box_unusual: np.ndarray
    # volunteers (sorted by name)
    volunteer_names: np.ndarray
    vol_n_subjects: np.ndarray
    vol_n_classifications: np.ndarray
    report: dict = field(default_factory=dict)

    def boxes_px(self, subjects: np.ndarray, xyxy: np.ndarray) -> dict[str, np.ndarray]:
        """Normalised boxes of the given (global) subjects in subject pixels: x1, y1, x2, y2
        and the centre x, y (the labels tables' columns)."""
        w, h = self.subj_width[subjects], self.subj_height[subjects]
        x1, y1, x2, y2 = xyxy[:, 0] * w, xyxy[:, 1] * h, xyxy[:, 2] * w, xyxy[:, 3] * h
        return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "x": 0.5 * (x1 + x2), "y": 0.5 * (y1 + y2)}


def read_boxes(path) -> pd.DataFrame:
    """The boxes table from Parquet; an unreadable file is an :class:`InputError`."""
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read boxes table ({exc})", path=path) from None


def _ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, e)`` for every (s, e), vectorised."""
    starts = np.asarray(starts, np.int64)
    lens = np.asarray(ends, np.int64) - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    keep = lens > 0
    starts, lens = starts[keep], lens[keep]
    offs = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return offs + np.arange(total, dtype=np.int64)


def _change_points(*keys: np.ndarray) -> np.ndarray:
    """Boolean mask: row starts a new group of equal ``keys`` (rows sorted)."""
    n = len(keys[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
    return new


@numba.njit(cache=True)
def _sort_within_groups(order, group, keys):
    """Insertion-sort ``order`` in place inside runs of equal ``group[order]`` by the
    rows of ``keys`` (lexicographic). Runs are tiny (the clicks of one classification)."""
    n = order.shape[0]
    start = 0
    while start < n:
        end = start + 1
        while end < n and group[order[end]] == group[order[start]]:
            end += 1
        for i in range(start + 1, end):
            cur = order[i]
            j = i - 1
            while j >= start:
                prev = order[j]
                less = False
                for k in range(keys.shape[1]):
                    if keys[cur, k] < keys[prev, k]:
                        less = True
                        break
                    if keys[cur, k] > keys[prev, k]:
                        break
                if not less:
                    break
                order[j + 1] = prev
                j -= 1
            order[j + 1] = cur
        start = end


# ------------------------------------------------------------ phase 1: validate


def _columns(df: pd.DataFrame, path) -> dict[str, np.ndarray]:
    """The numeric columns as arrays, with every row-level check; ``valid``: the row is a box."""
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"missing column(s): {', '.join(missing)}", path=path)

    def num(col):
        try:
            return pd.to_numeric(df[col], errors="raise").to_numpy(
                dtype=np.float64, na_value=np.nan
            )
        except (ValueError, TypeError) as exc:
            raise InputError(f"column {col} is not numeric ({exc})", path=path) from None

    def ints(col):
        s = df[col]
        if s.isna().any():
            raise InputError(f"{col} is missing", path=path, row=int(np.flatnonzero(s.isna())[0]))
        try:
            return s.to_numpy(dtype=np.int64)
        except (ValueError, TypeError) as exc:
            raise InputError(f"column {col} is not integer ({exc})", path=path) from None

    c = {"cid": ints("classification_id"), "sid": ints("subject_id")}
    c.update((k, num(k)) for k in ("x1", "y1", "x2", "y2"))
    c["width"], c["height"] = num("image_width"), num("image_height")
    finite = np.isfinite(np.column_stack([c["x1"], c["y1"], c["x2"], c["y2"]]))
    valid = finite.all(axis=1)
    partial = finite.any(axis=1) & ~valid
    if partial.any():
        raise InputError(
            "box has some but not all of x1, y1, x2, y2",
            path=path,
            row=int(np.flatnonzero(partial)[0]),
        )
    width, height = c["width"], c["height"]
    bad_size = ~(np.isfinite(width) & np.isfinite(height) & (width > 0) & (height > 0))
    if bad_size.any():
        raise InputError(
            "image_width/image_height must be positive",
            path=path,
            row=int(np.flatnonzero(bad_size)[0]),
        )
    bad_box = valid & ~((c["x2"] > c["x1"]) & (c["y2"] > c["y1"]))
    if bad_box.any():
        raise InputError(
            "box with x2 <= x1 or y2 <= y1", path=path, row=int(np.flatnonzero(bad_box)[0])
        )
    c["valid"] = valid
    c["unusual"] = (
        df["unusual"].fillna(False).to_numpy(dtype=bool)
        if "unusual" in df.columns
        else np.zeros(len(df), bool)
    )
    return c


def _volunteer_codes(df: pd.DataFrame, cid: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Volunteer codes by sorted name, the names, and how many rows had no name (each such
    classification counts as a volunteer of its own, ``anonymous-<classification_id>``)."""
    vol_series = df["volunteer"]
    no_name = vol_series.isna().to_numpy()
    if no_name.any():
        vol_series = vol_series.astype(object).copy()
        vol_series[no_name] = [f"anonymous-{c}" for c in cid[no_name]]
    vol, uniq = pd.factorize(vol_series.astype(str), sort=True)
    return vol.astype(np.int64), np.asarray(uniq, dtype=object), int(no_name.sum())


def _canonical_order(c: dict, vol: np.ndarray, n_vol: int, path) -> np.ndarray:
    """Row order (subject, volunteer, classification), then the rows of each classification
    by (x1, y1, x2, y2, unusual), NaN last; checks one subject and volunteer per
    classification on the way."""
    cid, sid = c["cid"], c["sid"]
    o = np.argsort(cid, kind="stable")
    cs, ss, vs = cid[o], sid[o], vol[o]
    same = cs[1:] == cs[:-1]
    bad = same & ((ss[1:] != ss[:-1]) | (vs[1:] != vs[:-1]))
    if bad.any():
        row = int(o[1:][bad][0])
        raise InputError(
            "classification appears with two subjects or volunteers", path=path, row=row
        )
    sid_code = np.unique(sid, return_inverse=True)[1].astype(np.int64)
    key = sid_code * np.int64(n_vol) + vol
    order = o[np.argsort(key[o], kind="stable")]
    coords = np.column_stack([c["x1"], c["y1"], c["x2"], c["y2"], c["unusual"].astype(np.float64)])
    _sort_within_groups(order, cid, np.nan_to_num(coords, nan=np.inf))
    return order


# --------------------------------------------------------------- phase 2: index


def _arrival_key(df: pd.DataFrame, order: np.ndarray, row_subj: np.ndarray, n_subj: int):
    """Per subject, when its last classification came in (``created_at``), if known."""
    if "created_at" not in df.columns:
        return np.zeros(n_subj, dtype=np.int64)
    t = pd.to_datetime(df["created_at"], utc=True, errors="coerce")
    tv = t.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    tv = np.where(t.isna().to_numpy(), np.iinfo(np.int64).min, tv)
    key = np.full(n_subj, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(key, row_subj, tv[order])
    return key


def prepare(df: pd.DataFrame, path=None) -> Prepared:
    """Validate the boxes table and put it in canonical order (see the module docstring).

    Data errors raise :class:`InputError` naming the row (0-based position in
    the table). A row with NaN coordinates is an empty classification (never a
    box, decisions.md#skill-probabilities); a row with some but not all coordinates is an error.
    """
    n = len(df)
    c = _columns(df, path)
    vol, volunteer_names, n_no_name = _volunteer_codes(df, c["cid"])
    report: dict = {"rows": n, "rows_without_volunteer": n_no_name}
    order = _canonical_order(c, vol, len(volunteer_names), path)
    sid, width, height = c["sid"], c["width"], c["height"]
    s_sid, s_vol, s_cid = sid[order], vol[order], c["cid"][order]

    # annotations z_ij = (subject, volunteer)
    new_ann = _change_points(s_sid, s_vol)
    ann_of_row = np.cumsum(new_ann) - 1
    n_ann = int(new_ann.sum())
    new_cls = _change_points(s_sid, s_vol, s_cid)
    report["duplicate_classifications_merged"] = int(new_cls.sum() - n_ann)
    ann_first = np.flatnonzero(new_ann)
    cls_vol = s_vol[ann_first]
    ann_sid = s_sid[ann_first]

    # subjects
    new_subj = _change_points(ann_sid)
    subject_ids = ann_sid[new_subj]
    cls_subject = np.cumsum(new_subj) - 1
    n_subj = len(subject_ids)
    subj_n_vol = np.bincount(cls_subject, minlength=n_subj)
    subj_cls_off = np.concatenate([[0], np.cumsum(subj_n_vol)]).astype(np.int64)

    # boxes
    box_pos = np.flatnonzero(c["valid"][order])
    box_row = order[box_pos]
    box_cls = ann_of_row[box_pos]
    box_subject = cls_subject[box_cls]
    subj_n_boxes = np.bincount(box_subject, minlength=n_subj)
    subj_box_off = np.concatenate([[0], np.cumsum(subj_n_boxes)]).astype(np.int64)
    w = width[box_row]
    h = height[box_row]
    x1, y1, x2, y2 = (c[k][box_row] for k in ("x1", "y1", "x2", "y2"))
    box_xyxy = np.ascontiguousarray(np.column_stack([x1 / w, y1 / h, x2 / w, y2 / h]))

    # image size per subject (first row of the subject)
    first_row_of_subj = order[np.flatnonzero(_change_points(s_sid))]
    subj_width = width[first_row_of_subj]
    subj_height = height[first_row_of_subj]
    row_subj = np.cumsum(_change_points(s_sid)) - 1
    if len(box_row):
        diff = (np.abs(w - subj_width[box_subject]) > 0) | (
            np.abs(h - subj_height[box_subject]) > 0
        )
        if diff.any():
            raise InputError(
                "image size differs within a subject",
                path=path,
                row=int(box_row[np.flatnonzero(diff)[0]]),
            )

    n_vol_total = len(volunteer_names)
    report.update(
        {
            "boxes": int(len(box_row)),
            "empty_rows": int((~c["valid"]).sum()),
            "annotations": n_ann,
            "subjects": n_subj,
            "volunteers": n_vol_total,
        }
    )
    return Prepared(
        n_rows=n,
        subject_ids=subject_ids,
        subj_n_vol=subj_n_vol,
        subj_n_boxes=subj_n_boxes,
        subj_cls_off=subj_cls_off,
        subj_box_off=subj_box_off,
        subj_order_key=_arrival_key(df, order, row_subj, n_subj),
        subj_width=subj_width,
        subj_height=subj_height,
        cls_subject=cls_subject.astype(np.int64),
        cls_vol=cls_vol.astype(np.int64),
        box_row=box_row.astype(np.int64),
        box_cls=box_cls.astype(np.int64),
        box_subject=box_subject.astype(np.int64),
        box_vol=vol[box_row].astype(np.int64),
        box_xyxy=box_xyxy,
        box_unusual=c["unusual"][box_row],
        volunteer_names=volunteer_names,
        vol_n_subjects=np.bincount(cls_vol, minlength=n_vol_total),
        vol_n_classifications=np.bincount(s_vol[new_cls], minlength=n_vol_total),
        report=report,
    )


# ------------------------------------------------------------ per-tool aggregation


def split_by_tool(df: pd.DataFrame, path=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The boxes table rewritten so that every (subject, tool) pair is a subject of its own
    (``aggregate.per_tool``, docs/decisions.md#per-tool).

    Tools are the distinct values of the ``tool`` column on rows with a box. Every
    classification of a subject views every tool's unit: it keeps its boxes of that tool,
    and a classification without a box of the tool gets one coordinate-less row there (it
    looked and marked nothing of that kind). The input's own coordinate-less rows are thereby
    replaced. Returns ``(frame, units)``: ``frame`` has the input's columns with
    ``subject_id`` replaced by the unit number (sorted by subject_id, then tool),
    ``classification_id`` by a number per (classification, tool) and a column ``_row``, the
    input row of a box (−1 for an added row); ``units`` has one row per unit
    number: subject_id and tool. A box without a tool is an :class:`InputError`.
    """
    if TOOL_COLUMN not in df.columns:
        raise InputError(f"per-tool aggregation needs a {TOOL_COLUMN} column", path=path)
    df = df.reset_index(drop=True)
    tool = df[TOOL_COLUMN]
    is_box = df[["x1", "y1", "x2", "y2"]].notna().any(axis=1).to_numpy()
    no_tool = is_box & tool.isna().to_numpy()
    if no_tool.any():
        raise InputError("box without a tool", path=path, row=int(np.flatnonzero(no_tool)[0]))
    tools = pd.Series(tool[is_box].unique(), dtype=tool.dtype).sort_values(ignore_index=True)
    if len(tools) == 0:  # nobody marked anything: one unit per subject, tool NA
        tools = pd.Series([pd.NA], dtype=object if tool.dtype.kind in "biu" else tool.dtype)
    n_t = len(tools)
    t_code = np.where(is_box, pd.Index(tools).get_indexer(tool), -1)

    cls_code, cls_ids = pd.factorize(df["classification_id"], sort=True)
    n_cls = len(cls_ids)
    first_row = np.full(n_cls, len(df), np.int64)
    np.minimum.at(first_row, cls_code, np.arange(len(df)))
    has = np.zeros((n_cls, n_t), bool)
    has[cls_code[is_box], t_code[is_box]] = True
    miss_cls, miss_t = np.nonzero(~has)

    kept = df[is_box].copy()
    kept["_row"] = np.flatnonzero(is_box).astype(np.int64)
    added = df.iloc[first_row[miss_cls]].copy()
    added[["x1", "y1", "x2", "y2"]] = np.nan
    added[TOOL_COLUMN] = tools.iloc[miss_t].to_numpy()
    if "unusual" in added.columns:
        added["unusual"] = False
    added["_row"] = np.int64(-1)
    frame = pd.concat([kept, added], ignore_index=True)

    subj_code, subj_ids = pd.factorize(df["subject_id"], sort=True)
    row_subj = np.concatenate([subj_code[is_box], subj_code[first_row[miss_cls]]])
    row_tool = np.concatenate([t_code[is_box], miss_t])
    row_cls = np.concatenate([cls_code[is_box], miss_cls])
    frame["subject_id"] = (row_subj * n_t + row_tool).astype(np.int64)
    # a classification is one per unit (each unit is one subject to prepare)
    frame["classification_id"] = (row_cls * n_t + row_tool).astype(np.int64)
    units = pd.DataFrame(
        {
            "subject_id": np.repeat(np.asarray(subj_ids, np.int64), n_t),
            TOOL_COLUMN: tools.iloc[np.tile(np.arange(n_t), len(subj_ids))].reset_index(drop=True),
        }
    )
    return frame, units
