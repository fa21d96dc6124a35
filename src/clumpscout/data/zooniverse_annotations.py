"""The annotations of the selected classifications -> clicks and drawn shapes (pass 2 of
:func:`clumpscout.data.zooniverse.extract_clicks`): the JSON parsed row by row, the limits
and bot flags applied, every mark checked and its shape read (docs/decisions.md#shapes)."""

from __future__ import annotations

import contextlib
import logging
import math
from array import array
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from clumpscout.data.click_definition import drawing_marks, flatten, parse_annotations, task_name
from clumpscout.data.zooniverse_csv import (
    FLAGS,
    bad_json_error,
    block_size,
    duration_seconds,
    flag_of,
    iter_column_batches,
    json_depth_exceeds,
    loads_json,
    short_repr,
)
from clumpscout.data.zooniverse_selection import (
    first_few,
)
from clumpscout.data.zooniverse_subjects import (
    side_number,
)
from clumpscout.errors import InputError
from clumpscout.logs import progress, timed

log = logging.getLogger(__name__)


#: keys that make a mark something other than a point (classic and FEM shapes)
SHAPE_KEYS = frozenset(
    {
        "r",
        "rx",
        "ry",
        "angle",
        "width",
        "height",
        "points",
        "x1",
        "y1",
        "x2",
        "y2",
        "x_center",
        "y_center",
        "pathX",
        "pathY",
        "radius",
        "spread",
        "rotation",
    }
)

#: shapes kept (``shape`` column; code = index); every other drawing tool is dropped
SHAPES = ("point", "rectangle", "circle", "ellipse")
POINT, RECTANGLE, CIRCLE, ELLIPSE = range(4)
#: FEM ``toolType`` -> shape code
_TOOL_TYPES = {"point": POINT, "rectangle": RECTANGLE, "circle": CIRCLE, "ellipse": ELLIPSE}


_EXAMPLES = 100  # rows listed in the report per kind
#: clicks held by pass 2 before they are handed on (:meth:`Pass2.run` with a sink)
FLUSH_CLICKS = 1 << 19


# --------------------------------------------------------------------------- annotations


def _frame_size(md: Any, frame: int) -> tuple[float, float]:
    """naturalWidth/Height of ``frame`` from classification metadata (NaN when unknown)."""
    try:
        d = md["subject_dimensions"][frame]
        return side_number(d["naturalWidth"]), side_number(d["naturalHeight"])
    except (KeyError, IndexError, TypeError):
        return math.nan, math.nan


class Collector:
    """Compact columns for the clicks of the kept classifications (one tight loop).

    Numbers go to ``array.array`` (8 bytes each, no Python objects); task names and tool labels
    are stored as codes into ``names`` (code 0 = None).
    """

    def __init__(self) -> None:
        self.row = array("q")
        self.task = array("q")
        self.tool = array("q")
        self.label = array("q")
        self.x = array("d")
        self.y = array("d")
        self.frame = array("q")
        self.w = array("d")
        self.h = array("d")
        # drawn shapes (not points): click index, shape code and (x1, y1, x2, y2)
        self.e_pos = array("q")
        self.e_shape = array("b")
        self.e_xyxy = array("d")
        self.codes: dict[str | None, int] = {None: 0}

    def append(self, row, task, tool, label, x, y, frame, w, h) -> None:
        """Append one click (or one coordinate-less row: x = y = NaN, tool = frame = -1)."""
        self.row.append(row)
        self.task.append(task)
        self.tool.append(tool)
        self.label.append(label)
        self.x.append(x)
        self.y.append(y)
        self.frame.append(frame)
        self.w.append(w)
        self.h.append(h)

    def __len__(self) -> int:
        return len(self.row)

    def drain(self) -> dict[str, np.ndarray]:
        """The clicks collected so far as numpy columns, with each click's shape code (-1: a
        coordinate-less row) and drawn extent (NaN for points) in place of the shapes kept
        aside; the collector is emptied (its task and label codes stay)."""

        def col(name: str, dtype) -> np.ndarray:
            return np.frombuffer(getattr(self, name), dtype=dtype).copy()

        cols = {name: col(name, np.int64) for name in ("row", "task", "tool", "label", "frame")}
        cols.update({name: col(name, np.float64) for name in ("x", "y", "w", "h")})
        n = len(self.row)
        shape = np.where(np.isnan(cols["x"]), -1, POINT).astype(np.int8)
        xyxy = np.full((n, 4), np.nan)
        e_pos = col("e_pos", np.int64)
        shape[e_pos] = col("e_shape", np.int8)
        xyxy[e_pos] = col("e_xyxy", np.float64).reshape(-1, 4)
        cols["shape"] = shape
        for i, name in enumerate(("x1", "y1", "x2", "y2")):
            cols[name] = xyxy[:, i].copy()
        codes = self.codes
        self.__init__()
        self.codes = codes
        return cols

    def names(self) -> np.ndarray:
        out = np.empty(len(self.codes), dtype=object)
        for name, code in self.codes.items():
            out[code] = name
        return out


def _parse_json(
    row: int,
    texts: tuple[str, str, str | None],
    too_large: bool,
    limits: Mapping[str, Any],
    path: object,
) -> tuple[str | None, Any, Any]:
    """(drop reason, annotations, metadata) of one row's JSON fields.

    The reason is "field_too_large" or "json_too_deep" (nothing parsed) or None. Malformed
    JSON and annotations that are not a list raise :class:`InputError`.
    """
    if too_large:
        return "field_too_large", None, None
    depth = limits["max_json_depth"]
    if any(t and json_depth_exceeds(t, depth) for t in texts):
        return "json_too_deep", None, None
    parsed = []
    for column, text in zip(("annotations", "metadata", "subject_data"), texts, strict=True):
        if text is None or (not text and column != "annotations"):
            parsed.append(None)
            continue
        try:
            parsed.append(parse_annotations(text) if column == "annotations" else loads_json(text))
        except ValueError:
            raise bad_json_error(path, row, column, text) from None
    ann, md = parsed[0], parsed[1]
    if not isinstance(ann, list):
        raise InputError(
            f"annotations is a JSON {type(ann).__name__}, expected a list of tasks",
            path=path,
            row=row,
        )
    return None, ann, md


def _drawing_items(ann: list) -> tuple[list[tuple[Any, Any, bool]], int]:
    """(task, value, is drawing) of every annotation (combo tasks unpacked) and the number of
    marks of every drawing task (the elements of their values)."""
    items = []
    n_marks = 0
    for a in flatten(ann):  # what a click is: clumpscout.data.click_definition
        task = task_name(a.get("task"))
        value = a.get("value")
        drawing = drawing_marks(value, a.get("taskType")) is not None
        if drawing:
            n_marks += len(value)
        items.append((task, value, drawing))
    return items, n_marks


def task_hint(drawing: list[str]) -> str:
    """How to choose the clump task, naming the drawing task when there is exactly one."""
    flag = "choose it with --clump-task (config extract.clump_task; default T1)"
    if len(drawing) == 1:
        return (
            f"the drawing task here is {drawing[0]!r}: use --clump-task {drawing[0]} "
            f"(config extract.clump_task: {drawing[0]})"
        )
    if drawing:
        return f"drawing tasks here: {', '.join(first_few(drawing))}; {flag}"
    return f"no drawing task found; {flag}"


def _new_stats(n: int) -> dict[str, Any]:
    """Pass-2 counters, and per kept row (``n``) its marks and duration (-1 / NaN: not read)."""
    return {
        "dropped_clicks": Counter(),
        "unsupported_shapes": Counter(),  # drawing tools not kept, by tool
        "malformed_shapes": Counter(),  # "<shape>: <problem>"
        "other_task_clicks": Counter(),
        "other_task_annotations": Counter(),
        "tasks_seen": Counter(),
        "drawing_tasks": Counter(),  # classifications in which a task is a drawing task
        "empty_classifications": 0,
        "classifications_emptied_by_drops": 0,
        "dropped_classifications": Counter(),
        "over_limits": [],  # (row, position, reason)
        "flag": np.zeros(n, dtype=np.int8),  # index into FLAGS
        "marks": np.full(n, -1, dtype=np.int32),
        "seconds": np.full(n, np.nan),
    }


def _screen(
    pos: int, row: int, ann: Any, md: Any, reason: str | None, limits: Mapping, stats: dict
) -> list | None:
    """The annotation items of a parsed row, or None when the row is dropped (counted)."""
    items: list = []
    if reason is None:
        items, n_marks = _drawing_items(ann)
        if n_marks > limits["max_marks"]:
            reason = "too_many_marks"
    if reason is not None:
        stats["dropped_classifications"][reason] += 1
        stats["over_limits"].append((row, pos, reason))
        return None
    seconds = duration_seconds(md)
    stats["marks"][pos] = n_marks
    stats["seconds"][pos] = seconds
    flag = flag_of(n_marks, seconds, limits)
    if flag is not None:
        stats["flag"][pos] = FLAGS.index(flag)
        if limits["drop_flagged"] == "classifications":
            stats["dropped_classifications"][f"flagged_{flag}"] += 1
            return None
    return items


def _parse_rows(
    coll: Collector,
    positions: np.ndarray,
    rows: np.ndarray,
    texts: tuple[list[str], list[str], list[str] | None],
    too_large: np.ndarray,
    subject_size: tuple[np.ndarray, np.ndarray],
    clump_task: str | None,
    tools: frozenset[int] | None,
    limits: Mapping[str, Any],
    path: object,
    stats: dict,
) -> None:
    """Parse the JSON of the kept rows of one batch and append their clicks to ``coll``.

    ``texts``: the annotations, metadata and subject_data (None: no such column) of the rows;
    ``too_large``: rows with a field beyond ``limits["max_field_bytes"]`` (its text is "").
    Per row: parse and screen (:func:`_parse_json`, :func:`_screen`), pick the clump task's
    marks (:func:`_clump_values`), append them (:func:`_append_marks`) or, when none is kept,
    one coordinate-less row (:func:`_append_empty`).
    """
    sub_w, sub_h = subject_size
    annotations, metadata, subject_data = texts
    n_empty = n_emptied = 0
    for k in range(len(positions)):
        pos = int(positions[k])
        row = int(rows[k])
        reason, ann, md = _parse_json(
            row,
            (annotations[k], metadata[k], None if subject_data is None else subject_data[k]),
            bool(too_large[k]),
            limits,
            path,
        )
        items = _screen(pos, row, ann, md, reason, limits, stats)
        if items is None:
            continue
        values = _clump_values(items, clump_task, stats, path, row)
        n_kept, n_marks, size0 = _append_marks(
            coll, pos, values, md, (sub_w[k], sub_h[k]), tools, stats
        )
        if n_kept == 0:
            if n_marks:
                n_emptied += 1
            else:
                n_empty += 1
            _append_empty(coll, pos, clump_task, size0 or _size0(md, sub_w[k], sub_h[k]))
    stats["empty_classifications"] += n_empty
    stats["classifications_emptied_by_drops"] += n_emptied


def _clump_values(
    items: list[tuple[Any, Any, bool]], clump_task: str | None, stats: dict, path: object, row: int
) -> list[tuple[Any, Any]]:
    """(task, marks) of the drawing tasks whose marks are kept (``clump_task``, or every drawing
    task when it is None); the other tasks are counted. The clump task that is not a drawing
    task raises :class:`InputError`."""
    other_clicks: Counter = stats["other_task_clicks"]
    other_ann: Counter = stats["other_task_annotations"]
    seen_tasks: Counter = stats["tasks_seen"]
    drawing_tasks: Counter = stats["drawing_tasks"]
    values = []
    for task, value, drawing in items:
        if drawing:
            drawing_tasks[str(task)] += 1
        if clump_task is not None and task != clump_task:
            seen_tasks[str(task)] += 1
            if drawing:
                if value:
                    other_clicks[str(task)] += len(value)
            else:
                other_ann[str(task)] += 1
            continue
        if clump_task is not None:
            seen_tasks[str(task)] += 1
            if not drawing:
                others = sorted({str(t) for t, _, d in items if d})
                raise InputError(
                    f"task {clump_task!r} is not a drawing task here (its value is "
                    f"{short_repr(value)}); {task_hint(others)}",
                    path=path,
                    row=row,
                )
        elif not drawing:
            seen_tasks[str(task)] += 1
            other_ann[str(task)] += 1
            continue
        else:
            seen_tasks[str(task)] += 1
        values.append((task, value))
    return values


def _size0(md: Any, sub_w: float, sub_h: float) -> tuple[float, float]:
    """The image size of frame 0: the classification's metadata, else the subject export's."""
    w0, h0 = _frame_size(md, 0)
    if w0 != w0 or h0 != h0:
        w0, h0 = sub_w, sub_h
    return w0, h0


def _mark(
    v: Any, tools: frozenset[int] | None, stats: dict
) -> tuple[int, int, float, float, tuple[float, ...] | None, int] | None:
    """(tool, shape, x, y, drawn extent or None, frame) of one mark, or None when it is dropped
    (counted by reason in ``stats``)."""
    drops: Counter = stats["dropped_clicks"]
    if not isinstance(v, dict):
        drops["invalid_mark"] += 1
        return None
    if "tool" in v:
        tool = v["tool"]
        tt = None
    else:
        tool = v.get("toolIndex")
        tt = v.get("toolType")
    if (tt is None or tt == "point") and "x" in v and "y" in v and SHAPE_KEYS.isdisjoint(v):
        shape = POINT
    else:
        shape = shape_of(v, tt)
        if type(shape) is str:
            drops["unsupported_shape"] += 1
            stats["unsupported_shapes"][shape] += 1
            return None
    if type(tool) is not int:
        if isinstance(tool, float) and tool.is_integer():
            tool = int(tool)
        else:
            drops["invalid_tool"] += 1
            return None
    if tool < 0 or tool > 1_000_000:
        drops["invalid_tool"] += 1
        return None
    if tools is not None and tool not in tools:
        drops["other_tool"] += 1
        return None
    extent = None
    if shape == POINT:
        x = v.get("x")
        y = v.get("y")
        if type(x) is not float:
            x = _coord(x)
        if type(y) is not float:
            y = _coord(y)
        if x is None or y is None:
            drops["missing_coordinates"] += 1
            return None
        if not (math.isfinite(x) and math.isfinite(y)):
            drops["nonfinite_coordinates"] += 1
            return None
    else:
        reason, detail, extent = shape_extent(v, shape)
        if reason is not None:
            drops[reason] += 1
            if detail is not None:
                stats["malformed_shapes"][detail] += 1
            return None
        x, y = extent[0], extent[1]
    frame = v.get("frame", 0)
    if type(frame) is not int:
        if frame is None:
            frame = 0
        elif isinstance(frame, float) and frame.is_integer():
            frame = int(frame)
        else:
            drops["invalid_mark"] += 1
            return None
    if frame < 0 or frame > 1_000_000:
        drops["invalid_mark"] += 1
        return None
    return tool, shape, x, y, extent, frame


def _append_marks(
    coll: Collector,
    pos: int,
    values: list[tuple[Any, Any]],
    md: Any,
    subject_size: tuple[float, float],
    tools: frozenset[int] | None,
    stats: dict,
) -> tuple[int, int, tuple[float, float] | None]:
    """Append the kept marks of one classification (row ``pos``) to ``coll``: (marks kept,
    marks read, the frame-0 image size when it was looked up)."""
    codes = coll.codes
    size0 = None
    n_kept = n_marks = 0
    for task, value in values:
        for v in value:
            n_marks += 1
            mark = _mark(v, tools, stats)
            if mark is None:
                continue
            tool, shape, x, y, extent, frame = mark
            if frame == 0:
                if size0 is None:
                    size0 = _size0(md, *subject_size)
                w, h = size0
            else:
                w, h = _frame_size(md, frame)
                if w != w or h != h:
                    w, h = subject_size
            label = v.get("tool_label")
            if type(label) is str:
                lc = codes.get(label)
                if lc is None:
                    lc = codes[label] = len(codes)
            else:
                lc = 0
            tc = codes.get(task)
            if tc is None:
                tc = codes[task] = len(codes)
            if shape != POINT:  # drawn extents are few: stored aside (by click index)
                coll.e_pos.append(len(coll.row))
                coll.e_shape.append(shape)
                coll.e_xyxy.extend(extent[2:])
            coll.append(pos, tc, tool, lc, x, y, frame, w, h)
            n_kept += 1
    return n_kept, n_marks, size0


def _append_empty(
    coll: Collector, pos: int, clump_task: str | None, size0: tuple[float, float]
) -> None:
    """Append the coordinate-less row of a classification that kept no mark."""
    codes = coll.codes
    tc = codes.get(clump_task)
    if tc is None:
        tc = codes[clump_task] = len(codes)
    coll.append(pos, tc, -1, 0, math.nan, math.nan, -1, size0[0], size0[1])


class Pass2:
    """Pass 2 of :func:`extract_clicks`: stream the JSON columns, parse the selected rows.

    The export is read in blocks (pyarrow's CSV reader); the JSON of each block's selected
    rows is parsed on its own (:func:`_parse_block`, into a collector and counters of its
    own) and the blocks are merged in file order (:func:`_merge_block`), so the clicks and
    counters do not depend on ``workers``: with ``workers`` > 1 the blocks are parsed by
    that many processes side by side (the reading stays in this one).
    """

    def __init__(
        self, path, json_cols, n_fields, n_rows, clump_task, tools, limits, workers: int = 1
    ) -> None:
        self.path, self.json_cols, self.n_fields, self.n_rows = path, json_cols, n_fields, n_rows
        self.clump_task, self.tools, self.limits = clump_task, tools, limits
        self.workers = max(1, int(workers))

    def _texts(self, batch: pa.RecordBatch, take: pa.Array) -> tuple[tuple, np.ndarray]:
        """The JSON texts of rows ``take`` of ``batch`` and which have a field over the size
        limit (those fields are never turned into Python strings: their text is "")."""
        cols = [batch.column(c).take(take) for c in self.json_cols]
        too_large = np.zeros(len(take), dtype=bool)
        for c in cols:
            size = pc.binary_length(c).to_numpy(zero_copy_only=False)
            too_large |= np.asarray(size, dtype=np.int64) > self.limits["max_field_bytes"]
        if too_large.any():
            cols = [pc.if_else(pa.array(too_large), "", c) for c in cols]
        texts = [c.to_pylist() for c in cols]
        return (texts[0], texts[1], texts[2] if len(texts) > 2 else None), too_large

    def _blocks(self, keep_all, sub_w, sub_h):
        """The parse jobs of the export's blocks that hold selected rows (file order)."""
        offset = 0
        block = block_size(self.limits["max_field_bytes"])
        settings = (self.clump_task, self.tools, dict(self.limits), str(self.path))
        batches = iter_column_batches(self.path, self.json_cols, self.n_fields, block)
        for batch in progress(batches, desc="extract", total=None):
            n = batch.num_rows
            pos = keep_all[offset : offset + n]
            inb = np.flatnonzero(pos >= 0)
            offset += n
            if len(inb) == 0:
                continue
            texts, too_large = self._texts(batch, pa.array(inb))
            p = pos[inb]
            rows = offset - n + inb + 1  # 1-based data rows
            yield (int(p[0]), p - p[0], rows, texts, too_large, sub_w[p], sub_h[p], settings)
        if offset != self.n_rows:  # pragma: no cover - the two passes must agree
            raise InputError(
                f"read {offset} rows in pass 2 but {self.n_rows} in pass 1", path=self.path
            )

    def run(self, sel, sub_w, sub_h, sink=None) -> tuple[Collector, dict]:
        """The clicks and counters of the rows ``sel`` (positions in the file).

        With ``sink``, the clicks go to ``sink(columns)`` (:meth:`Collector.drain`) every
        :data:`FLUSH_CLICKS` clicks and at the end, so that memory holds a few blocks' clicks,
        not the export's; the collector returned then holds only the task and label codes."""
        keep_all = np.full(self.n_rows, -1, dtype=np.int32)  # < 2^31 kept rows
        keep_all[sel] = np.arange(len(sel))
        stats = _new_stats(len(sel))
        coll = Collector()
        what = f"parsing annotations of {len(sel):,} classifications"
        if self.workers > 1:
            what += f" in {self.workers} processes"
        jobs = self._blocks(keep_all, sub_w, sub_h)
        parsed = _map_in_order(_parse_block, jobs, self.workers)
        # closed on an error too: the progress bar is cleared before the error is printed
        with timed(what, log), contextlib.closing(jobs), contextlib.closing(parsed):
            for p0, part, part_stats in parsed:
                _merge_block(coll, stats, p0, part, part_stats)
                if sink is not None and len(coll) >= FLUSH_CLICKS:
                    sink(coll.drain())
        if sink is not None:
            sink(coll.drain())
        return coll, stats


def _parse_block(job) -> tuple[int, Collector, dict]:
    """Parse one block's selected rows (``job`` from :meth:`Pass2._blocks`) into a collector
    and counters of its own; positions are relative to the block's first (``p0``)."""
    p0, local, rows, texts, too_large, sub_w, sub_h, settings = job
    clump_task, tools, limits, path = settings
    coll = Collector()
    stats = _new_stats(int(local[-1]) + 1)
    _parse_rows(
        coll, local, rows, texts, too_large, (sub_w, sub_h), clump_task, tools, limits, path, stats
    )
    return p0, coll, stats


def _map_in_order(fn, jobs, workers: int):
    """``fn(job)`` for every job, in order; ``workers`` > 1: in that many processes, with a
    few jobs in flight per process (the blocks' texts are held until they are parsed)."""
    if workers <= 1:
        yield from map(fn, jobs)
        return
    import multiprocessing
    import os
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    # forked (a spawned process would run the Snakemake script again), and before the
    # first job is drawn, so before the CSV reader's threads start reading
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        pool.submit(os.getpid).result()  # starts every worker process now
        pending: deque = deque()
        for job in jobs:
            pending.append(pool.submit(fn, job))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


_COUNTERS = (
    "dropped_clicks",
    "unsupported_shapes",
    "malformed_shapes",
    "other_task_clicks",
    "other_task_annotations",
    "tasks_seen",
    "drawing_tasks",
    "dropped_classifications",
)


def _merge_block(coll: Collector, stats: dict, p0: int, part: Collector, ps: dict) -> None:
    """Append a block's clicks and counters (:func:`_parse_block`) to the whole export's."""
    # task and label codes: the block's names, in the order it met them, into the global codes
    remap = np.zeros(len(part.codes), dtype=np.int64)
    for name, code in part.codes.items():
        gc = coll.codes.get(name)
        if gc is None:
            gc = coll.codes[name] = len(coll.codes)
        remap[code] = gc
    n_before = len(coll.row)
    coll.row.extend(array("q", (np.asarray(part.row, dtype=np.int64) + p0).tobytes()))
    coll.task.extend(array("q", remap[np.asarray(part.task, dtype=np.int64)].tobytes()))
    coll.label.extend(array("q", remap[np.asarray(part.label, dtype=np.int64)].tobytes()))
    for name in ("tool", "x", "y", "frame", "w", "h", "e_shape", "e_xyxy"):
        getattr(coll, name).extend(getattr(part, name))
    coll.e_pos.extend(array("q", (np.asarray(part.e_pos, dtype=np.int64) + n_before).tobytes()))
    for key in _COUNTERS:
        stats[key].update(ps[key])
    for key in ("empty_classifications", "classifications_emptied_by_drops"):
        stats[key] += ps[key]
    stats["over_limits"].extend((row, pos + p0, why) for row, pos, why in ps["over_limits"])
    n = len(ps["flag"])
    for key in ("flag", "marks", "seconds"):
        stats[key][p0 : p0 + n] = ps[key]


def flag_report(stats, rows, cid, sid, vol_code, vol_names, limits) -> dict[str, Any]:
    """The bot / flood section of the report: flagged classifications and their volunteers.

    Arrays are per selected row (the positions of ``stats``).
    """
    flag = stats["flag"]
    pos = np.flatnonzero(flag)
    kinds = np.bincount(flag, minlength=len(FLAGS))
    marks, seconds = stats["marks"], stats["seconds"]
    parsed = marks >= 0
    out: dict[str, Any] = {
        "action": limits["drop_flagged"],
        "classifications": {k: int(kinds[FLAGS.index(k)]) for k in FLAGS[1:]},
        "classifications_duration_unknown": int((parsed & np.isnan(seconds)).sum()),
        "examples": [
            {
                "row": int(rows[i]),
                "classification_id": int(cid[i]),
                "subject_id": int(sid[i]),
                "volunteer": str(vol_names[vol_code[i]]),
                "flag": FLAGS[flag[i]],
                "marks": int(marks[i]),
                "seconds": None if np.isnan(seconds[i]) else round(float(seconds[i]), 3),
            }
            for i in pos[:_EXAMPLES]
        ],
    }
    vols, n_flagged = np.unique(vol_code[pos], return_counts=True)
    order = np.lexsort((vols, -n_flagged))
    out["volunteers"] = int(len(vols))
    out["volunteer_list"] = []
    for v, nf in zip(vols[order][:_EXAMPLES], n_flagged[order][:_EXAMPLES], strict=True):
        mine = parsed & (vol_code == v)
        out["volunteer_list"].append(
            {
                "volunteer": str(vol_names[v]),
                "classifications": int(mine.sum()),
                "flagged": int(nf),
                "marks": int(marks[mine].sum()),
                "max_marks": int(marks[mine].max()),
            }
        )
    return out


def over_limit_rows(over: list[tuple[int, int, str]], cid: np.ndarray) -> list[dict[str, Any]]:
    """The first rows dropped for a limit (row, classification id, reason) for the report."""
    return [
        {"row": int(row), "classification_id": int(cid[pos]), "reason": reason}
        for row, pos, reason in sorted(over)[:_EXAMPLES]
    ]


#: drawing tools panoptes knows besides the kept shapes (names as in FEM's ``toolType`` and
#: panoptes-aggregation's shape tools); other names are reported as "other"
OTHER_TOOLS = frozenset(
    {
        "polygon",
        "bezier",
        "line",
        "freehandLine",
        "freehandSegmentLine",
        "transcriptionLine",
        "rotateRectangle",
        "temporalRotateRectangle",
        "temporalPoint",
        "triangle",
        "column",
        "fan",
        "fullWidthLine",
        "fullHeightLine",
        "grid",
        "anchoredEllipse",
    }
)


def shape_of(v: dict, tool_type: Any) -> int | str:
    """The shape of a mark: a code of :data:`SHAPES`, or the name of a drawing tool that is not
    kept (dropped as ``unsupported_shape``, counted by name in ``unsupported_shapes``).

    Front-end-monorepo marks say which tool drew them (``toolType``). Classic marks are
    recognised by their keys, which are panoptes-aggregation's shape parameters: ``points``
    polygon (or bezier), ``x1``..``y2`` line, ``pathX`` freehand line, ``width`` and ``height``
    rectangle (with ``angle``: rotating rectangle; without a y: column), ``rx``/``ry`` ellipse,
    ``r``/``radius`` circle (PFE's triangle has a circle's keys and is read as the circle it is
    inscribed in), ``spread`` fan, ``x`` or ``y`` alone a full-height or full-width line.
    x and y with none of these: a point.
    """
    if tool_type is not None:
        if type(tool_type) is not str:
            return "other"
        code = _TOOL_TYPES.get(tool_type)
        if code is not None:
            return code
        return tool_type if tool_type in OTHER_TOOLS else "other"
    if "points" in v:
        return "polygon"
    if "pathX" in v or "pathY" in v:
        return "freehandLine"
    if "x1" in v or "y1" in v or "x2" in v or "y2" in v:
        return "line"
    if "spread" in v or "rotation" in v:
        return "fan"
    if "width" in v or "height" in v:
        if "angle" in v:
            return "temporalRotateRectangle" if "displayTime" in v else "rotateRectangle"
        if "y" not in v and "y_center" not in v:
            return "column"
        return RECTANGLE
    if "rx" in v or "ry" in v:
        return ELLIPSE
    if "r" in v or "radius" in v:
        return CIRCLE
    if "x_center" in v or "y_center" in v or ("x" in v and "y" in v):
        return POINT
    if "x" in v:
        return "fullHeightLine"
    if "y" in v:
        return "fullWidthLine"
    return POINT  # no coordinates at all: dropped as missing_coordinates


def _number(v: dict, key: str) -> float | None:
    """A mark's value ``key`` as a float (None when absent or not a number)."""
    x = v.get(key)
    return x if type(x) is float else _coord(x)


_SHAPE_SIZE_KEYS = {RECTANGLE: ("width", "height"), ELLIPSE: ("rx", "ry", "angle")}


def shape_extent(v: dict, shape: int) -> tuple[str | None, str | None, tuple[float, ...]]:
    """(drop reason, problem, (x, y, x1, y1, x2, y2)) of a mark of ``shape`` (not a point).

    (x, y) is the centre, (x1, y1, x2, y2) the drawn extent in subject pixels: a rectangle as
    drawn, a circle's bounding square (side 2r), an ellipse's bounding box (half sides
    ``sqrt((rx cos t)² + (ry sin t)²)`` and ``sqrt((rx sin t)² + (ry cos t)²)``, t = angle in
    degrees, either sense of rotation). Two conventions, told apart by their keys: ``x_center``,
    ``y_center`` (the front-end monorepo: the centre of every shape) or ``x``, ``y`` (classic:
    a rectangle's top-left corner, a circle's or ellipse's centre). A circle's radius is ``r``
    or ``radius``; a circle's ``angle`` (PFE stores one) plays no part.

    Reasons: ``missing_coordinates`` / ``nonfinite_coordinates`` for the position, as for a
    point; ``malformed_shape`` with the problem ("<shape>: missing r", "negative width",
    "zero rx", "non-finite angle", "non-finite extent" when the corners overflow, "degenerate
    extent" when a corner cannot be told from the centre in floating point).
    """
    centred = "x_center" in v or "y_center" in v
    x = _number(v, "x_center" if centred else "x")
    y = _number(v, "y_center" if centred else "y")
    if x is None or y is None:
        return "missing_coordinates", None, ()
    if not (math.isfinite(x) and math.isfinite(y)):
        return "nonfinite_coordinates", None, ()
    name = SHAPES[shape]
    if shape == CIRCLE:
        keys: tuple[str, ...] = ("radius",) if "r" not in v and "radius" in v else ("r",)
    else:
        keys = _SHAPE_SIZE_KEYS[shape]
    sizes = []
    for key in keys:
        a = _number(v, key)
        problem = None
        if a is None:
            problem = "missing"
        elif not math.isfinite(a):
            problem = "non-finite"
        elif key != "angle" and a <= 0:
            problem = "negative" if a < 0 else "zero"
        if problem is not None:
            return "malformed_shape", f"{name}: {problem} {key}", ()
        sizes.append(a)
    if shape == RECTANGLE:
        w, h = sizes
        if centred:
            x1, y1, x2, y2 = x - 0.5 * w, y - 0.5 * h, x + 0.5 * w, y + 0.5 * h
        else:
            x1, y1, x2, y2 = x, y, x + w, y + h
            x, y = x + 0.5 * w, y + 0.5 * h
    else:
        if shape == CIRCLE:
            hx = hy = sizes[0]
        else:
            rx, ry, angle = sizes
            t = math.radians(angle)
            c, s = math.cos(t), math.sin(t)
            hx, hy = math.hypot(rx * c, ry * s), math.hypot(rx * s, ry * c)
        x1, y1, x2, y2 = x - hx, y - hy, x + hx, y + hy
    if not all(math.isfinite(c) for c in (x, y, x1, y1, x2, y2)):
        return "malformed_shape", f"{name}: non-finite extent", ()
    if not (x2 > x1 and y2 > y1):
        return "malformed_shape", f"{name}: degenerate extent", ()
    return None, None, (x, y, x1, y1, x2, y2)


def _coord(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return float(v) if -(2**1000) < v < 2**1000 else math.inf  # beyond float: infinite
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None
