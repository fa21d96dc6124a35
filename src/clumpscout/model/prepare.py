"""The aggregation's input: the boxes table read, validated and indexed in canonical order.

:func:`prepare` turns the boxes table of ``clumpscout boxes`` (one row per click, x1, y1,
x2, y2 in subject pixels, or one coordinate-less row for a classification that marked
nothing) into the integer codes and coordinates of :class:`Prepared` that the EM
(:mod:`clumpscout.model.em`) works on. Coordinates are normalised by the image size for
every distance (docs/decisions.md#box-geometry, #jaccard-distance), batch by batch
(:meth:`Prepared.normalised`).

The annotation unit ``z_ij`` is one volunteer on one subject: two classifications of one
subject by one volunteer (a duplicate the export reader normally removes) are merged and
counted in the report (docs/decisions.md#one-box-per-classification).

Determinism (docs/decisions.md#determinism): rows are put into a canonical order (subject,
volunteer, classification, coordinates) before anything else and volunteers are coded by
sorted name, so the same input in any row order gives the same arrays.

Memory (docs/decisions.md#aggregation-memory): the table is read one block at a time
(:mod:`clumpscout.model.source`: a DataFrame or a Parquet file) into one compact array per
column it needs; the boxes keep their pixel coordinates and int32 codes only.

:func:`split_by_tool` rewrites the table so that every (subject, tool) pair is aggregated
as a subject of its own (``aggregate.per_tool``, docs/decisions.md#per-tool).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numba
import numpy as np
import pandas as pd
import pyarrow as pa

from clumpscout.data.boxes import BOX_KEYS
from clumpscout.errors import InputError
from clumpscout.model.source import BoxSource, ParquetSource, box_source

log = logging.getLogger(__name__)

#: the boxes table's columns the aggregation needs: those of every box row
REQUIRED_COLUMNS = BOX_KEYS

#: the boxes table's tool column (passed through from the export by clumpscout.data.boxes)
TOOL_COLUMN = "tool"


@dataclass
class Prepared:
    """The input in canonical order, as compact integer codes and the boxes' coordinates.

    Per-box arrays use the smallest integer type that holds their values (int32 below 2³¹
    rows): a project's memory is mostly these arrays (about 50 bytes per box row; docs/benchmarks.md#aggregate-memory).
    :meth:`normalised` gives a batch's coordinates normalised by the image size, exactly as
    the EM uses them.
    """

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
    # boxes (rows with coordinates, canonical order, so sorted by subject then volunteer)
    box_row: np.ndarray  # original input row
    box_cls: np.ndarray
    box_vol: np.ndarray
    box_px: np.ndarray  # (N, 4) x1, y1, x2, y2 in subject pixels, as in the input
    box_unusual: np.ndarray
    # volunteers (sorted by name)
    volunteer_names: np.ndarray
    vol_n_subjects: np.ndarray
    vol_n_classifications: np.ndarray
    vol_nameless: np.ndarray  # the row had no name: anonymous-<classification_id>
    report: dict = field(default_factory=dict)

    def boxes_px(self, subjects: np.ndarray, xyxy: np.ndarray) -> dict[str, np.ndarray]:
        """Normalised boxes of the given (global) subjects in subject pixels: x1, y1, x2, y2
        and the centre x, y (the labels tables' columns)."""
        w, h = self.subj_width[subjects], self.subj_height[subjects]
        x1, y1, x2, y2 = xyxy[:, 0] * w, xyxy[:, 1] * h, xyxy[:, 2] * w, xyxy[:, 3] * h
        return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "x": 0.5 * (x1 + x2), "y": 0.5 * (y1 + y2)}

    def normalised(self, box_idx: np.ndarray, box_subject: np.ndarray) -> np.ndarray:
        """(n, 4) coordinates of the boxes ``box_idx`` (of the global subjects
        ``box_subject``) divided by their image's width and height (docs/decisions.md#box-geometry)."""
        px = self.box_px[box_idx]
        w, h = self.subj_width[box_subject], self.subj_height[box_subject]
        return np.ascontiguousarray(
            np.column_stack([px[:, 0] / w, px[:, 1] / h, px[:, 2] / w, px[:, 3] / h])
        )

    def box_subject_of(self, box_idx: np.ndarray) -> np.ndarray:
        """The subject (index) of the boxes ``box_idx`` (boxes are sorted by subject)."""
        return np.searchsorted(self.subj_box_off, box_idx, side="right") - 1


def _change_points(*keys: np.ndarray) -> np.ndarray:
    """Boolean mask: row starts a new group of equal ``keys`` (rows sorted)."""
    n = len(keys[0])
    new = np.zeros(n, bool)
    if n:
        new[0] = True
        for k in keys:
            new[1:] |= k[1:] != k[:-1]
    return new


def _index_type(n: int):
    """The smallest of int32 / int64 that holds indices below ``n``."""
    return np.int32 if n < 2**31 else np.int64


@numba.njit(cache=True, inline="always")
def _sort_value(x):
    """A coordinate as the canonical order compares it: NaN last, ±inf as ±max float."""
    if np.isnan(x):
        return np.inf
    if x == np.inf:
        return 1.7976931348623157e308
    if x == -np.inf:
        return -1.7976931348623157e308
    return x


@numba.njit(cache=True)
def _row_less(a, b, x1, y1, x2, y2, unusual):
    """Row ``a`` before row ``b`` by (x1, y1, x2, y2, unusual), NaN last."""
    for col in (x1, y1, x2, y2):
        va = _sort_value(col[a])
        vb = _sort_value(col[b])
        if va < vb:
            return True
        if va > vb:
            return False
    return unusual[a] < unusual[b]


@numba.njit(cache=True)
def _sort_within_groups(order, group, x1, y1, x2, y2, unusual):
    """Insertion-sort ``order`` in place inside runs of equal ``group[order]`` by
    (x1, y1, x2, y2, unusual) (:func:`_row_less`). Runs are tiny (the clicks of one
    classification)."""
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
                if not _row_less(cur, prev, x1, y1, x2, y2, unusual):
                    break
                order[j + 1] = prev
                j -= 1
            order[j + 1] = cur
        start = end


# ------------------------------------------------------------ phase 1: read and validate


#: the columns :func:`prepare` reads (the rest of the table is only copied to assignments)
_READ_COLUMNS = (*REQUIRED_COLUMNS, "unusual", "created_at")


class _Rows:
    """The columns the aggregation needs, one compact array each, filled block by block."""

    def __init__(self, n: int, with_time: bool):
        self.cid = np.empty(n, np.int64)
        self.sid = np.empty(n, np.int64)
        self.vol = np.empty(n, np.int64)  # provisional codes (first appearance)
        self.coords = {k: np.empty(n) for k in ("x1", "y1", "x2", "y2")}
        self.width = np.empty(n)
        self.height = np.empty(n)
        self.unusual = np.zeros(n, bool)
        self.valid = np.empty(n, bool)
        self.time = np.empty(n, np.int64) if with_time else None
        self.names: dict[str, int] = {}
        self.nameless: list[bool] = []
        self.n_no_name = 0


def _read_block(rows: _Rows, off: int, df: pd.DataFrame, path) -> None:
    """One block's columns into ``rows[off:]``, with every row-level check (rows in errors
    are positions in the whole table)."""
    n = len(df)
    sl = slice(off, off + n)

    # (a column of numpy floats, ints or bools is read as it is: the checks it passes
    # cost more than the reading on a small table, e.g. one subject of a live request)
    def num(col):
        s = df[col]
        if isinstance(s.dtype, np.dtype) and s.dtype.kind == "f":
            return s.to_numpy(dtype=np.float64, na_value=np.nan)
        try:
            return pd.to_numeric(s, errors="raise").to_numpy(dtype=np.float64, na_value=np.nan)
        except (ValueError, TypeError) as exc:
            raise InputError(f"column {col} is not numeric ({exc})", path=path) from None

    def ints(col):
        s = df[col]
        if isinstance(s.dtype, np.dtype) and s.dtype.kind in "iu":
            return s.to_numpy(dtype=np.int64)
        if s.isna().any():
            raise InputError(
                f"{col} is missing", path=path, row=off + int(np.flatnonzero(s.isna())[0])
            )
        try:
            return s.to_numpy(dtype=np.int64)
        except (ValueError, TypeError) as exc:
            raise InputError(f"column {col} is not integer ({exc})", path=path) from None

    cid = ints("classification_id")
    rows.cid[sl] = cid
    rows.sid[sl] = ints("subject_id")
    c = {k: num(k) for k in ("x1", "y1", "x2", "y2")}
    width, height = num("image_width"), num("image_height")
    finite = np.isfinite(np.column_stack([c["x1"], c["y1"], c["x2"], c["y2"]]))
    valid = finite.all(axis=1)
    partial = finite.any(axis=1) & ~valid
    if partial.any():
        raise InputError(
            "box has some but not all of x1, y1, x2, y2",
            path=path,
            row=off + int(np.flatnonzero(partial)[0]),
        )
    bad_size = ~(np.isfinite(width) & np.isfinite(height) & (width > 0) & (height > 0))
    if bad_size.any():
        raise InputError(
            "image_width/image_height must be positive",
            path=path,
            row=off + int(np.flatnonzero(bad_size)[0]),
        )
    bad_box = valid & ~((c["x2"] > c["x1"]) & (c["y2"] > c["y1"]))
    if bad_box.any():
        raise InputError(
            "box with x2 <= x1 or y2 <= y1", path=path, row=off + int(np.flatnonzero(bad_box)[0])
        )
    for k, v in c.items():
        rows.coords[k][sl] = v
    rows.width[sl], rows.height[sl], rows.valid[sl] = width, height, valid
    if "unusual" in df.columns:
        u = df["unusual"]
        rows.unusual[sl] = (
            u.to_numpy(dtype=bool) if u.dtype == np.bool_ else u.fillna(False).to_numpy(dtype=bool)
        )
    if rows.time is not None:
        t = pd.to_datetime(df["created_at"], utc=True, errors="coerce")
        tv = t.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        rows.time[sl] = np.where(t.isna().to_numpy(), np.iinfo(np.int64).min, tv)
    rows.vol[sl] = _block_volunteers(rows, df["volunteer"], cid)


def _block_volunteers(rows: _Rows, vol_series: pd.Series, cid: np.ndarray) -> np.ndarray:
    """Provisional volunteer codes of a block (a row without a name is a volunteer of its
    own, ``anonymous-<classification_id>``); the names go to ``rows.names``."""
    no_name = vol_series.isna().to_numpy()
    if no_name.any():
        vol_series = vol_series.astype(object).copy()
        vol_series[no_name] = [f"anonymous-{c}" for c in cid[no_name]]
        rows.n_no_name += int(no_name.sum())
    codes, uniq = pd.factorize(vol_series.astype(str))
    nameless = (
        np.bincount(codes[no_name], minlength=len(uniq)) > 0
        if no_name.any()
        else np.zeros(len(uniq), bool)
    )
    glob = np.empty(len(uniq), np.int64)
    for i, name in enumerate(uniq):
        g = rows.names.get(name)
        if g is None:
            g = rows.names[name] = len(rows.names)
            rows.nameless.append(bool(nameless[i]))
        glob[i] = g
    return glob[codes]


def _sorted_volunteers(rows: _Rows) -> tuple[np.ndarray, np.ndarray]:
    """Recode ``rows.vol`` by sorted name (in place); the sorted names and nameless flags."""
    names = np.empty(len(rows.names), dtype=object)
    names[:] = list(rows.names)
    rank = np.argsort(names, kind="stable")
    to_sorted = np.empty(len(names), np.int64)
    to_sorted[rank] = np.arange(len(names))
    np.take(to_sorted, rows.vol, out=rows.vol)
    nameless = np.asarray(rows.nameless, bool)[rank]
    return names[rank], nameless


def _read_rows(src: BoxSource, path) -> _Rows:
    missing = [c for c in REQUIRED_COLUMNS if c not in src.columns]
    if missing:
        raise InputError(f"missing column(s): {', '.join(missing)}", path=path)
    rows = _Rows(src.n_rows, "created_at" in src.columns)
    pool = pa.default_memory_pool()
    blocks = iter(src.blocks(list(_READ_COLUMNS)))
    read_s = read_cpu = 0.0  # the file format's share: reading blocks, not checking them
    while True:
        t0, c0 = time.perf_counter(), time.process_time()
        block = next(blocks, None)
        read_s, read_cpu = read_s + time.perf_counter() - t0, read_cpu + time.process_time() - c0
        if block is None:
            break
        off, df = block
        _read_block(rows, off, df, path)
        del df, block
        pool.release_unused()  # the block's Arrow buffers back to the system, not cached
    if isinstance(src, ParquetSource):  # a file's reading (a DataFrame's blocks are slices)
        log.info("reading %s rows done in %.2f s (CPU %.2f s)", f"{src.n_rows:,}", read_s, read_cpu)
    return rows


def _canonical_order(rows: _Rows, sid_code: np.ndarray, n_vol: int, path):
    """Row order (subject, volunteer, classification), then the rows of each classification
    by (x1, y1, x2, y2, unusual), NaN last, ties in input order; checks one subject and
    volunteer per classification on the way. Returns ``(order, key, new_ann, new_cls)``:
    the order, the rows' (subject, volunteer) key in that order (subject · max(n_vol, 1) +
    volunteer) and where a new annotation and a new classification start."""
    key = sid_code * np.int64(max(n_vol, 1)) + rows.vol
    order = np.lexsort((rows.cid, key))
    key = key[order]
    s_cid = rows.cid[order]
    new_ann = _change_points(key)
    new_cls = new_ann.copy()
    new_cls[1:] |= s_cid[1:] != s_cid[:-1]
    del s_cid
    if int(new_cls.sum()) != len(pd.unique(rows.cid)):
        _raise_split_classification(rows, path)
    c = rows.coords
    # only rows of one classification (so of one key) move: key and the starts stay valid
    _sort_within_groups(
        order, rows.cid, c["x1"], c["y1"], c["x2"], c["y2"], rows.unusual.view(np.uint8)
    )
    return order, key, new_ann, new_cls


def _raise_split_classification(rows: _Rows, path) -> None:
    """The error of a classification that appears with two subjects or volunteers, naming
    its second row in classification order."""
    cid, sid, vol = rows.cid, rows.sid, rows.vol
    o = np.argsort(cid, kind="stable")
    cs, ss, vs = cid[o], sid[o], vol[o]
    same = cs[1:] == cs[:-1]
    bad = same & ((ss[1:] != ss[:-1]) | (vs[1:] != vs[:-1]))
    row = int(o[1:][bad][0])
    raise InputError("classification appears with two subjects or volunteers", path=path, row=row)


# --------------------------------------------------------------- phase 2: index


def prepare(boxes, path=None) -> Prepared:
    """Validate the boxes table and put it in canonical order (see the module docstring).

    ``boxes``: a DataFrame, a Parquet file's path (read one block at a time, never whole) or a
    :class:`~clumpscout.model.source.BoxSource`; all give the same arrays. Data errors raise
    :class:`InputError` naming the row (0-based position in the table). A row with NaN
    coordinates is an empty classification (never a box, decisions.md#skill-probabilities); a
    row with some but not all coordinates is an error.

    A source is prepared once: its result is kept on it (``BoxSource.prepared``, arrays
    read-only), so the fits of several models on one source read and index the table once
    (docs/decisions.md#aggregate-per-n).
    """
    src = box_source(boxes, path)
    if src.prepared is None:
        src.prepared = _read_only(_prepare(src, path if path is not None else src.path))
    else:
        log.info("the table of %s rows was prepared by an earlier fit: reused", f"{src.n_rows:,}")
    return src.prepared


def _read_only(prep: Prepared) -> Prepared:
    """``prep`` with every array read-only (it may be shared by several fits)."""
    for value in vars(prep).values():
        if isinstance(value, np.ndarray):
            value.flags.writeable = False
    return prep


def _prepare(src: BoxSource, path) -> Prepared:
    n = src.n_rows
    rows = _read_rows(src, path)
    volunteer_names, vol_nameless = _sorted_volunteers(rows)
    n_vol_total = len(volunteer_names)
    report: dict = {"rows": n, "rows_without_volunteer": rows.n_no_name}
    sid_code, subject_ids = pd.factorize(rows.sid, sort=True)
    sid_code = sid_code.astype(np.int64)
    subject_ids = np.asarray(subject_ids, np.int64)
    n_subj = len(subject_ids)
    subj_n_rows = np.bincount(sid_code, minlength=n_subj)
    subj_order_key = _arrival_key(rows, sid_code, n_subj)
    rows.time = None
    # (the arrays of every row are freed as soon as they are used: this sets the peak)
    order, key, new_ann, new_cls = _canonical_order(rows, sid_code, n_vol_total, path)
    rows.sid = rows.cid = rows.vol = None
    del sid_code
    m = np.int64(max(n_vol_total, 1))

    # annotations z_ij = (subject, volunteer), classifications
    ann_first = np.flatnonzero(new_ann)
    n_ann = len(ann_first)
    report["duplicate_classifications_merged"] = int(new_cls.sum() - n_ann)
    cls_key = key[ann_first]
    cls_vol, cls_subject = cls_key % m, cls_key // m
    vol_n_classifications = np.bincount(key[new_cls] % m, minlength=n_vol_total)
    del key, new_cls, ann_first, cls_key

    # subjects
    subj_n_vol = np.bincount(cls_subject, minlength=n_subj)
    subj_cls_off = np.concatenate([[0], np.cumsum(subj_n_vol)]).astype(np.int64)
    subj_row_off = np.concatenate([[0], np.cumsum(subj_n_rows)])
    first_row_of_subj = order[subj_row_off[:-1]]  # image size: the subject's first row
    subj_width = rows.width[first_row_of_subj]
    subj_height = rows.height[first_row_of_subj]

    # boxes
    ann_of_row = np.cumsum(new_ann) - 1
    del new_ann
    box_pos = np.flatnonzero(rows.valid[order])
    rows.valid = None
    idx_t = _index_type(max(n, n_ann, n_vol_total))
    box_cls = ann_of_row[box_pos].astype(idx_t)
    del ann_of_row
    box_row = order[box_pos]
    del box_pos, order
    box_subject = cls_subject[box_cls]
    subj_n_boxes = np.bincount(box_subject, minlength=n_subj)
    subj_box_off = np.concatenate([[0], np.cumsum(subj_n_boxes)]).astype(np.int64)
    _check_image_size(rows, box_row, box_subject, subj_width, subj_height, path)
    rows.width = rows.height = None
    del box_subject
    box_px = np.empty((len(box_row), 4))
    for j, k in enumerate(("x1", "y1", "x2", "y2")):
        box_px[:, j] = rows.coords[k][box_row]
        rows.coords[k] = None
    report.update(
        {
            "boxes": int(len(box_row)),
            "empty_rows": int(n - len(box_row)),
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
        subj_order_key=subj_order_key,
        subj_width=subj_width,
        subj_height=subj_height,
        cls_subject=cls_subject.astype(idx_t),
        cls_vol=cls_vol.astype(idx_t),
        box_row=box_row.astype(idx_t),
        box_cls=box_cls,
        box_vol=cls_vol[box_cls].astype(idx_t),  # the box's annotation's volunteer
        box_px=box_px,
        box_unusual=rows.unusual[box_row],
        volunteer_names=volunteer_names,
        vol_n_subjects=np.bincount(cls_vol, minlength=n_vol_total),
        vol_n_classifications=vol_n_classifications,
        vol_nameless=vol_nameless,
        report=report,
    )


def _arrival_key(rows: _Rows, sid_code: np.ndarray, n_subj: int):
    """Per subject, when its last classification came in (``created_at``), if known."""
    if rows.time is None:
        return np.zeros(n_subj, dtype=np.int64)
    key = np.full(n_subj, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(key, sid_code, rows.time)
    return key


def _check_image_size(rows, box_row, box_subject, subj_width, subj_height, path) -> None:
    """Every box of a subject has the image size of the subject's first row."""
    s = box_subject
    diff = (np.abs(rows.width[box_row] - subj_width[s]) > 0) | (
        np.abs(rows.height[box_row] - subj_height[s]) > 0
    )
    if diff.any():
        raise InputError(
            "image size differs within a subject",
            path=path,
            row=int(box_row[np.flatnonzero(diff)[0]]),
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
