"""Caesar's extracts and export rows -> the classifications the service stores, with their
boxes (docs/service.md#what-it-reads).

**Caesar** (zooniverse/caesar ``app/models/reducers/external_reducer.rb``) POSTs one
subject's extracts as a JSON array (default reduction) or as ``{"extracts": [...],
"store": {...}}`` (running reduction). An extract is an object with ``classification_id``,
``classification_at``, ``extractor_key``, ``subject_id``, ``user_id`` (null: not logged in),
``workflow_id`` and ``data``, what a panoptes-aggregation extractor returned:

* ``point_extractor_by_frame``, ``rectangle_extractor``, ``shape_extractor``:
  ``{"frame0": {"T0_tool0_x": [...], "T0_tool0_y": [...], ...}, "aggregation_version": ...}``
  (``toolIndex`` in place of ``tool`` for the front-end monorepo);
* ``point_extractor``: the same keys without the frame level;
* ``{}``: a classification that marked nothing.

A mark's parameters say its shape: x, y a point (a square of the subject's box side centred
on it); x, y, width, height a rectangle (x, y its upper-left corner, or x_center, y_center
its centre); x, y, r a circle; x, y, rx, ry, angle an ellipse; a drawn shape's box is its
drawn extent (:func:`clumpscout.data.zooniverse_annotations.shape_extent`), or the square of a point
with ``export.shape_extent: fixed``. Marks of another task than ``extract.clump_task`` and of
tools outside ``extract.tools`` are dropped and counted, as ``clumpscout extract`` drops them;
a mark's tool in ``extract.unusual_tools`` makes it unusual. Subtask keys (``_details``,
``_subtask``) are not marks.

**A Zooniverse classification export**: its rows (a JSON array of objects with the export's
columns, or the CSV text itself) go through ``clumpscout extract``'s own reader
(:func:`clumpscout.data.zooniverse.extract_clicks`) with the config's ``extract:`` section.

Everything wrong is a :class:`BadRequest`: one line saying what and where
(``extracts[2].data.frame0.T0_tool0_x: item 3 is not a number``); nothing of a bad request
is stored. JSON is parsed strictly (no NaN or Infinity) after its nesting depth is checked
(``extract.max_json_depth``); an extract with more than ``extract.max_marks`` marks is
refused.

Volunteers: Caesar knows a volunteer by ``user_id``; a volunteer who is not logged in is
their classification's own anonymous volunteer (:func:`volunteer_name`). Rows of an export
keep the export's ``user_name``, as ``clumpscout extract`` does.
"""

from __future__ import annotations

import math
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from clumpscout.data.boxes import square_boxes
from clumpscout.data.zooniverse import extract_clicks
from clumpscout.data.zooniverse_annotations import (
    CIRCLE,
    ELLIPSE,
    POINT,
    RECTANGLE,
    SHAPES,
    shape_extent,
)
from clumpscout.data.zooniverse_csv import json_depth_exceeds
from clumpscout.errors import InputError
from clumpscout.service.settings import Settings


class BadRequest(Exception):
    """A request the service refuses: ``status`` (4xx) and one line saying what and where."""

    def __init__(self, message: str, status: int = 400):
        self.status = status
        self.message = _one_line(message)
        super().__init__(self.message)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(v) -> str:
    """A value for an error message, short."""
    return _one_line(repr(v), 60)


@dataclass
class Incoming:
    """One classification (or one more extract of it) as the service stores it."""

    classification_id: int
    extractor_key: str
    subject_id: int
    volunteer: str
    user_id: int | None
    t: int  # when it was made (ns since the epoch): orders a request's new ones
    boxes: np.ndarray  # (marks, 5): x1, y1, x2, y2, unusual (0 / 1), subject pixels
    raw: bytes  # the extract (or export row) as received, JSON
    dropped: dict = field(default_factory=dict)  # reason -> marks dropped


def volunteer_name(user_id: int | None, classification_id: int) -> str:
    """The volunteer of a Caesar extract: the user id of a logged-in volunteer; a volunteer
    who is not logged in is their classification's own (``anonymous-<classification_id>``,
    the name the aggregation gives a classification without a volunteer)."""
    return f"anonymous-{classification_id}" if user_id is None else str(user_id)


# ------------------------------------------------------------------ JSON


def loads(body: bytes, s: Settings, where: str = "body"):
    """Strict JSON (no NaN / Infinity, UTF-8) nested at most ``extract.max_json_depth``."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"{where}: not UTF-8 (byte {exc.start})") from None
    if json_depth_exceeds(text, s.max_json_depth):
        raise BadRequest(
            f"{where}: JSON nested deeper than {s.max_json_depth} (extract.max_json_depth)"
        )
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"{where}: malformed JSON ({exc})") from None


def _int(v, where: str, null: bool = False) -> int | None:
    if v is None and null:
        return None
    if type(v) is not int or not (0 < v < 2**63):
        raise BadRequest(f"{where}: {_show(v)} is not an id (a positive integer)")
    return v


def _time(v, where: str) -> int:
    if not isinstance(v, str) or not v or len(v) > 64:
        raise BadRequest(f"{where}: {_show(v)} is not a date-time")
    try:
        t = pd.Timestamp(v)
    except (ValueError, TypeError, OverflowError):
        raise BadRequest(f"{where}: {_show(v)} is not a date-time") from None
    if t is pd.NaT or pd.isna(t):
        raise BadRequest(f"{where}: {_show(v)} is not a date-time")
    if t.tzinfo is None:
        t = t.tz_localize("UTC")
    return int(t.value)


# ------------------------------------------------------------------ marks

_FRAME = re.compile(r"frame(\d{1,7})")
_MARK_KEY = re.compile(r"(?P<task>.+?)_(?P<kind>tool|toolIndex)(?P<tool>\d{1,9})_(?P<param>\w+)")
#: top-level keys of an extract's data that are not marks
_INFO_KEYS = frozenset({"aggregation_version", "classifier_version"})
#: a mark's parameters -> its shape (the extractors' keys; panoptes-aggregation SHAPE_LUT)
_SHAPE_OF = {
    frozenset({"x", "y"}): POINT,
    frozenset({"x", "y", "width", "height"}): RECTANGLE,
    frozenset({"x_center", "y_center", "width", "height"}): RECTANGLE,
    frozenset({"x", "y", "r"}): CIRCLE,
    frozenset({"x", "y", "radius"}): CIRCLE,
    frozenset({"x", "y", "rx", "ry", "angle"}): ELLIPSE,
    frozenset({"x_center", "y_center", "rx", "ry", "angle"}): ELLIPSE,
}


def _numbers(v, where: str) -> list[float]:
    if not isinstance(v, list):
        raise BadRequest(f"{where}: not a list of numbers")
    out = []
    for i, x in enumerate(v):
        if type(x) is int:
            x = float(x) if -(2**1000) < x < 2**1000 else math.inf
        if type(x) is not float or not math.isfinite(x):
            raise BadRequest(f"{where}: item {i} ({_show(x)}) is not a finite number")
        out.append(x)
    return out


def _groups(data: dict, where: str, s: Settings, dropped: Counter) -> dict:
    """(frame, task, tool) -> {param: key} of the marks kept; the rest counted in
    ``dropped``."""
    groups: dict = {}
    drops: dict = {}

    def take(key: str, value, frame: int, at: str) -> None:
        m = _MARK_KEY.fullmatch(key)
        if m is None:
            raise BadRequest(f"{at}: unknown key (not <task>_tool<n>_<parameter>)")
        param = m["param"]
        if param.startswith(("details", "subtask")):
            return  # a subtask's answers, not a mark
        task, tool = m["task"], int(m["tool"])
        reason = None
        if s.clump_task is not None and task != s.clump_task:
            reason = "other_task"
        elif s.tools is not None and tool not in s.tools:
            reason = "other_tool"
        if reason is not None:  # a mark's parameters are lists of one length: its marks
            k = (frame, task, m["kind"], tool, reason)
            n = len(value) if isinstance(value, list) else 1
            drops[k] = max(drops.get(k, 0), n)
            return
        groups.setdefault((frame, task, m["kind"], tool), {})[param] = (key, value, at)

    for key, value in data.items():
        at = f"{where}.{_one_line(key, 60)}"
        if key in _INFO_KEYS:
            continue
        f = _FRAME.fullmatch(key)
        if f is not None:
            if not isinstance(value, dict):
                raise BadRequest(f"{at}: a frame is an object of marks")
            for k2, v2 in value.items():
                take(k2, v2, int(f[1]), f"{at}.{_one_line(k2, 60)}")
        elif key.startswith("frame"):
            raise BadRequest(f"{at}: unknown frame (frame<n>, n = 0, 1, ...)")
        else:
            take(key, value, 0, at)
    for k, n in drops.items():
        dropped[k[-1]] += n
    return groups


def marks_to_boxes(data, where: str, s: Settings, side: float) -> tuple[np.ndarray, Counter]:
    """An extract's ``data`` -> (boxes (marks × 5: x1, y1, x2, y2, unusual), drops)."""
    dropped: Counter = Counter()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadRequest(f"{where}: data is an object (an extractor's output)")
    rows: list[tuple] = []
    for (_, _, _, tool), params in _groups(data, where, s, dropped).items():
        names = frozenset(params)
        shape = _SHAPE_OF.get(names)
        first_at = next(iter(params.values()))[2]
        if shape is None:
            got = ", ".join(sorted(names))
            raise BadRequest(
                f"{first_at}: a mark of parameters {got} is not a point, rectangle, circle or ellipse"
            )
        longest = max(len(v) if isinstance(v, list) else 0 for _, v, _ in params.values())
        if len(rows) + longest > s.max_marks:
            raise BadRequest(f"{where}: more than {s.max_marks} marks (extract.max_marks)")
        cols = {p: _numbers(v, at) for p, (_, v, at) in params.items()}
        lengths = {len(c) for c in cols.values()}
        if len(lengths) != 1:
            raise BadRequest(f"{first_at}: the parameters' lists differ in length")
        n = lengths.pop()
        if len(rows) + n > s.max_marks:
            raise BadRequest(f"{where}: more than {s.max_marks} marks (extract.max_marks)")
        unusual = float(tool in s.unusual_tools)
        for i in range(n):
            v = {p: c[i] for p, c in cols.items()}
            if shape == POINT:
                x, y = v["x"], v["y"]
                extent = None
            else:
                reason, problem, xy = shape_extent(v, shape)
                if reason is not None:
                    raise BadRequest(f"{first_at}: mark {i}: {problem or reason}")
                x, y = xy[0], xy[1]
                extent = xy[2:]
            if extent is None or s.shape_extent == "fixed":
                extent = tuple(float(c) for c in square_boxes(x, y, side))
            if not all(math.isfinite(c) for c in extent):
                raise BadRequest(f"{first_at}: mark {i}: its box is not finite")
            rows.append((*extent, unusual))
    boxes = np.asarray(rows, dtype=np.float64).reshape(-1, 5)
    return boxes, dropped


# ------------------------------------------------------------------ Caesar


def caesar_extracts(body: bytes, s: Settings) -> tuple[int, list[Incoming]]:
    """A Caesar request body -> (its subject, its extracts), each checked (module
    docstring); :class:`BadRequest` for anything wrong."""
    doc = loads(body, s)
    where = "body"
    if isinstance(doc, dict) and "extracts" in doc:  # running reduction: extracts and store
        doc, where = doc["extracts"], "extracts"
    if not isinstance(doc, list):
        raise BadRequest(f"{where}: a JSON array of extracts (Caesar's external reducer)")
    if not doc:
        raise BadRequest(f"{where}: no extracts")
    out, subject = [], None
    for i, e in enumerate(doc):
        at = f"{where}[{i}]" if where == "extracts" else f"extracts[{i}]"
        if not isinstance(e, dict):
            raise BadRequest(f"{at}: an extract is a JSON object")
        for k in ("classification_id", "subject_id", "extractor_key", "classification_at", "data"):
            if k not in e:
                raise BadRequest(f"{at}: no {k}")
        cid = _int(e["classification_id"], f"{at}.classification_id")
        sid = _int(e["subject_id"], f"{at}.subject_id")
        uid = _int(e.get("user_id"), f"{at}.user_id", null=True)
        if subject is None:
            subject = sid
        elif sid != subject:
            raise BadRequest(
                f"{at}.subject_id: {sid}, but extracts[0] is of subject {subject}: one subject per request"
            )
        key = e["extractor_key"]
        if not isinstance(key, str) or not key or len(key) > 200:
            raise BadRequest(f"{at}.extractor_key: {_show(key)} is not a name")
        wid = e.get("workflow_id")
        if wid is not None:
            wid = _int(wid, f"{at}.workflow_id")
            if s.workflow_id is not None and wid != int(s.workflow_id):
                raise BadRequest(
                    f"{at}.workflow_id: {wid}, this service reduces workflow {s.workflow_id} (export.workflow_id)"
                )
        t = _time(e["classification_at"], f"{at}.classification_at")
        try:
            side = s.geometry.of(sid)[0]
        except InputError as exc:
            raise BadRequest(f"{at}.subject_id: {exc.message}", 422) from None
        boxes, dropped = marks_to_boxes(e["data"], f"{at}.data", s, side)
        raw = orjson.dumps(e)
        out.append(
            Incoming(cid, key, sid, volunteer_name(uid, cid), uid, t, boxes, raw, dict(dropped))
        )
    return int(subject), out


# ------------------------------------------------------------------ export rows

#: the export's columns the reader needs (clumpscout.data.zooniverse)
EXPORT_COLUMNS = (
    "classification_id", "user_name", "user_id", "workflow_id", "workflow_version",
    "created_at", "metadata", "annotations", "subject_data", "subject_ids",
)  # fmt: skip


def export_rows(body: bytes, content_type: str, s: Settings) -> dict[int, list[Incoming]]:
    """Rows of a Zooniverse classification export (JSON array of objects, or CSV text)
    -> their classifications by subject, read by ``clumpscout extract``'s reader with the
    config's ``extract:`` section; what it drops is counted in each classification's
    ``dropped``."""
    with tempfile.TemporaryDirectory(prefix="clumpscout-serve-") as tmp:
        path = Path(tmp) / "rows.csv"
        if "csv" in content_type:
            path.write_bytes(body)
        else:
            doc = loads(body, s)
            if not isinstance(doc, list) or not doc or not all(isinstance(r, dict) for r in doc):
                raise BadRequest("body: a JSON array of export rows (objects)")
            _rows_csv(doc, path)
        ext = s.config.get("extract", {})
        limits = {k: ext[k] for k in ("max_json_depth", "max_field_bytes", "max_marks", "flag_marks", "min_seconds_per_mark", "drop_flagged") if k in ext}  # fmt: skip
        try:
            clicks, report = extract_clicks(
                path, None, workflow_id=s.workflow_id,
                workflow_version=s.config.get("export", {}).get("workflow_version"),
                clump_task=s.clump_task, unusual_tools=s.unusual_tools, tools=s.tools,
                limits=limits,
            )  # fmt: skip
        except InputError as exc:
            raise BadRequest(
                exc.message if exc.row is None else f"row {exc.row}: {exc.message}"
            ) from None
    if clicks.empty:
        raise BadRequest("no classification of the workflow's marking task in the rows")
    raw = _raw_rows(body, content_type)
    out: dict[int, list[Incoming]] = {}
    for cid, g in clicks.groupby("classification_id", sort=False):
        sid = int(g["subject_id"].iloc[0])
        try:
            side = s.geometry.of(sid)[0]
        except InputError as exc:
            raise BadRequest(f"classification {cid}: {exc.message}", 422) from None
        uid = g["user_id"].iloc[0] if "user_id" in g.columns else None
        uid = None if pd.isna(uid) else int(uid)
        out.setdefault(sid, []).append(
            Incoming(
                int(cid), "export", sid, str(g["volunteer"].iloc[0]), uid,
                int(pd.Timestamp(g["created_at"].iloc[0]).value),
                _click_boxes(g, s, side), raw.get(int(cid), b"{}"),
            )
        )  # fmt: skip
    return out


def _rows_csv(rows: list[dict], path: Path) -> None:
    cols = list(EXPORT_COLUMNS) + sorted({k for r in rows for k in r} - set(EXPORT_COLUMNS))
    table = {c: [_cell(r.get(c)) for r in rows] for c in cols}
    pd.DataFrame(table, columns=cols).to_csv(path, index=False)


def _cell(v):
    if isinstance(v, (dict, list)):
        return orjson.dumps(v).decode()
    return "" if v is None else v


def _raw_rows(body: bytes, content_type: str) -> dict[int, bytes]:
    """Each row as received (JSON), by classification id."""
    if "csv" in content_type:
        import io

        df = pd.read_csv(io.BytesIO(body), dtype=str, keep_default_na=False)
        rows = df.to_dict("records")
    else:
        rows = orjson.loads(body)
    out = {}
    for r in rows:
        try:
            out[int(r.get("classification_id"))] = orjson.dumps(r)
        except (TypeError, ValueError):
            continue
    return out


def _click_boxes(g: pd.DataFrame, s: Settings, side: float) -> np.ndarray:
    """One classification's rows of the clicks table -> boxes, as for an extract."""
    x = g["x"].to_numpy(float)
    keep = np.isfinite(x)
    if not keep.any():
        return np.zeros((0, 5))
    g = g.loc[keep]
    x1, y1, x2, y2 = square_boxes(g["x"].to_numpy(float), g["y"].to_numpy(float), side)
    if (
        s.shape_extent == "drawn"
        and "shape" in g.columns
        and {"x1", "y1", "x2", "y2"} <= set(g.columns)
    ):
        drawn = (g["shape"].astype(str) != SHAPES[POINT]).to_numpy() & np.isfinite(
            g["x1"].to_numpy(float)
        )
        for c, name in zip((x1, y1, x2, y2), ("x1", "y1", "x2", "y2"), strict=True):
            c[drawn] = g[name].to_numpy(float)[drawn]
    unusual = (
        g["unusual"].to_numpy(dtype=bool) if "unusual" in g.columns else np.zeros(len(g), bool)
    )
    return np.column_stack([x1, y1, x2, y2, unusual.astype(float)])
