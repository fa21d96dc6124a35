"""Zooniverse classification export -> tidy clicks table (paper §3.2-3.3; columns: docs/contracts.md#clicks).

:func:`extract_clicks` reads a Zooniverse project's *classification export* (one CSV row per
classification: ``classification_id, user_name, user_id, workflow_id, workflow_version,
created_at, metadata, annotations, subject_data, subject_ids`` ...) and its *subject export*
and returns one row per mark (a click or a drawn shape) of the clump task, plus one
coordinate-less row (x = y = NaN, tool NA) for every classification that kept no mark, so that
every kept classification - a volunteer who looked at the subject - is in the table.

Decisions (each drop is counted by reason in the report, nothing is dropped silently):

- **Front ends.** Classic front-end marks carry ``tool`` (and ``tool_label``); the
  front-end-monorepo (FEM) carries ``toolIndex``/``toolType`` (no label). Both are read; a
  mark with both uses ``tool``. Combo tasks (an annotation whose value is a list of annotations)
  are flattened.
- **Shapes** (docs/decisions.md#shapes). Points, rectangles, circles and ellipses are kept
  (column ``shape``); x, y are the centre and ``x1, y1, x2, y2`` the drawn extent in subject
  pixels (a rectangle as drawn, a circle's bounding square of side 2r, an ellipse's bounding box
  of its rotated outline; NaN for points). FEM marks say their tool (``toolType``), classic
  marks are recognised by their keys (:func:`shape_of`); both coordinate conventions are read
  (:func:`shape_extent`: ``x_center, y_center`` the centre, or classic ``x, y`` a rectangle's
  top-left corner and a circle's or ellipse's centre). A mark is a point when it has ``x`` and
  ``y`` and none of the keys of other shapes. Polygons, lines and every other tool are dropped
  as ``unsupported_shape`` (by tool in ``unsupported_shapes``); a shape without a usable size
  (a missing r, a negative width, an ellipse without angle ...) as ``malformed_shape`` (by
  problem in ``malformed_shapes``). ``shapes_kept`` counts the kept marks by shape.
- **Workflow.** ``workflow_id=None`` is allowed only when the export holds one workflow.
  ``workflow_version`` "M.m" selects that exact version, "M" (or an int) every version of major
  M, ``None`` the newest major version present (the others are counted as
  ``older_workflow_version``; panoptes-aggregation keys its extractor configs on a version too).
  Unknown workflow or version: :class:`InputError` listing what is available.
- **Tasks and tools.** Only clicks of ``clump_task`` are kept; marks and answers of other tasks
  (bulge task, shortcut "nothing here" buttons, questions) are counted per task in the report.
  ``clump_task=None`` keeps the marks of every drawing task. ``tools`` (optional) keeps
  only these tool indices (others: ``other_tool``), as panoptes-aggregation's ``tools`` option
  does. ``unusual`` = the tool index is in ``unusual_tools`` ("Unusual clump", paper §3.2).
- **Volunteers.** ``volunteer`` is the export's ``user_name``; not-logged-in volunteers keep
  their ``not-logged-in-<hash>`` names, so two sessions from different addresses are two
  volunteers (as panoptes-aggregation treats them).
- **Duplicates.** Rows repeating a ``classification_id``: the first row in file order is kept
  (``duplicate_classification_id``). Several classifications of one subject by one volunteer
  (the paper's model allows one annotation per volunteer and subject): the first by
  ``created_at``, then ``classification_id``, is kept (``duplicate_volunteer_subject``).
  Classifications of several subjects at once (``subject_ids`` "a;b") are dropped
  (``multiple_subjects``).
- **Coordinates.** Marks whose x or y (a shape's position) is null or not a number are dropped
  (``missing_coordinates``), NaN or infinite ones too (``nonfinite_coordinates``). Points outside
  the image are *kept* (docs/decisions.md#clicks-outside-image; panoptes-aggregation keeps them too)
  and flagged in column ``outside_image``; the image size is the ``naturalWidth/Height`` the
  volunteer's browser reported in ``metadata.subject_dimensions`` for that frame, else the one in
  the subject export's metadata, else unknown (``outside_image`` NA, counted). Inside means
  ``0 <= x <= width`` and ``0 <= y <= height`` (for a shape, its centre).
- **Empty classifications.** A classification with no kept click in the clump task (the task
  value ``[]``, the task absent as in FEM exports when skipped, or every click dropped) gets one
  row with x = y = NaN, tool/frame NA, unusual False. The report separates those that marked
  nothing from those emptied by drops.
- **Subjects.** Subjects of the export that are missing from the subject export are kept by
  default (``missing_subjects="keep"``: the classifications are real; the boxes stage then names
  them if the subjects table has no PSF for them) and counted; ``"drop"`` drops their
  classifications (``subject_missing_from_subjects_export``).
- **Limits** (``limits``, config ``extract``, listed in the report): a kept classification
  whose ``annotations``, ``metadata`` or ``subject_data`` is larger than ``max_field_bytes``
  (``field_too_large``; the field is never turned into Python text) or nests arrays and
  objects deeper than ``max_json_depth`` (``json_too_deep``; checked before parsing, so no
  parser recurses deeper), or that holds more than ``max_marks`` marks over every drawing task
  (``too_many_marks``), is dropped. These drops come after the de-duplication (only selected
  rows are parsed); the first rows of each are listed in ``dropped_over_limits``. A CSV record
  longer than the read block (twice ``max_field_bytes``, at least 16 MiB) and a subject export
  metadata field beyond a limit are :class:`InputError` naming the row and the limit.
- **Bots and floods.** A classification with more than ``flag_marks`` marks is flagged
  ``many_marks``; one finished (``metadata`` ``finished_at - started_at``) in less than
  ``min_seconds_per_mark`` seconds per mark ``too_fast``. The report's ``flagged`` section counts
  them and lists examples and their volunteers. ``drop_flagged``: ``none`` keeps them,
  ``classifications`` drops them (``flagged_many_marks``, ``flagged_too_fast``), ``volunteers``
  drops every selected classification of a volunteer with a flagged one (``flagged_volunteer``,
  before the limits: the JSON of the others is parsed again).
- **Bad input** (missing columns, empty export, bytes that are not UTF-8, a CSV row with the
  wrong number of fields, malformed JSON in ``annotations``/``metadata``/``subject_data`` of a
  selected row, ids that are not integers, unparseable ``created_at``) raises
  :class:`InputError` naming the file and the 1-based data row (the header is row 0; a row is a
  CSV record, which may span several lines). JSON of rows that are not selected (other
  workflows, older versions, duplicates) is not parsed.

Speed: the export is read with pyarrow in two streaming passes (the small columns for selection
and de-duplication first, then ``annotations``/``metadata``/``subject_data`` of the kept rows
only), JSON is parsed with ``orjson`` when it is installed (falling back to :func:`json.loads`
for anything orjson rejects, so the results never depend on it) and the per-click work is one
tight Python loop; everything else is vectorised.
"""

from __future__ import annotations

import argparse
import codecs
import csv
import io
import json
import logging
import math
import re
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from clumpscout import config as _config
from clumpscout.data.clicks import drawing_marks, flatten, parse_annotations, task_name
from clumpscout.errors import InputError
from clumpscout.logs import progress, timed

try:  # optional speed-up: identical results (see _loads)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

log = logging.getLogger(__name__)

#: columns of the classification export this reader needs
LIGHT_COLUMNS = (
    "classification_id",
    "user_name",
    "user_id",
    "workflow_id",
    "workflow_version",
    "created_at",
    "subject_ids",
)
JSON_COLUMNS = ("annotations", "metadata")
OPTIONAL_JSON_COLUMNS = ("subject_data",)

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

#: clicks.parquet columns (docs/contracts.md#clicks) followed by the extra columns this reader adds
CLICK_COLUMNS = (
    "classification_id",
    "subject_id",
    "volunteer",
    "user_id",
    "workflow_id",
    "workflow_version",
    "task",
    "tool",
    "tool_label",
    "x",
    "y",
    "unusual",
    "frame",
    "created_at",
    "outside_image",
    "natural_width",
    "natural_height",
    "shape",
    "x1",
    "y1",
    "x2",
    "y2",
)

MISSING_SUBJECTS = ("keep", "drop")
_BATCH = 1 << 24  # pyarrow block size (bytes)

#: limits on what one classification may hold, and the bot / flood flags (config ``extract``)
#: (values from the config schema, clumpscout.config; their meaning: config.yaml's ``extract``)
_LIMIT_KEYS = (
    "max_json_depth",  # nesting of a JSON field (annotations, metadata, subject_data)
    "max_field_bytes",  # bytes of one JSON field
    "max_marks",  # marks of every drawing task in one classification
    "flag_marks",  # more marks than this: flagged "many_marks"
    "min_seconds_per_mark",  # finished faster than this per mark: flagged "too_fast"
    "drop_flagged",  # none | classifications | volunteers
)
LIMIT_DEFAULTS: dict[str, Any] = {k: _config.defaults("extract")[k] for k in _LIMIT_KEYS}
DROP_FLAGGED = ("none", "classifications", "volunteers")
#: classification drops decided while parsing the JSON (after the de-duplication)
LIMIT_REASONS = ("field_too_large", "json_too_deep", "too_many_marks")
FLAG_REASONS = ("flagged_many_marks", "flagged_too_fast", "flagged_volunteer")
FLAGS = ("", "many_marks", "too_fast")  # the flags of a classification (code 0: none)
_EXAMPLES = 100  # rows listed in the report per kind


# --------------------------------------------------------------------------- limits


def check_limits(limits: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:data:`LIMIT_DEFAULTS` updated with ``limits`` (None values: the default).

    Unknown keys or bad values raise :class:`InputError`.
    """
    out = dict(LIMIT_DEFAULTS)
    for key, value in (limits or {}).items():
        if key not in out:
            raise InputError(f"unknown extract limit {key!r} (known: {', '.join(out)})")
        if value is not None:
            out[key] = value
    for key in ("max_json_depth", "max_field_bytes", "max_marks", "flag_marks"):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"extract.{key} must be a positive integer, got {v!r}")
    v = out["min_seconds_per_mark"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        raise InputError(f"extract.min_seconds_per_mark must be a number >= 0, got {v!r}")
    out["min_seconds_per_mark"] = float(v)
    if out["drop_flagged"] not in DROP_FLAGGED:
        raise InputError(
            f"extract.drop_flagged must be one of {', '.join(DROP_FLAGGED)}, "
            f"got {out['drop_flagged']!r}"
        )
    return out


def block_size(max_field_bytes: int) -> int:
    """pyarrow's CSV block size: a CSV record must fit in one block (larger ones are an error
    naming the row), so that a field twice the field limit can still be read and dropped."""
    return max(_BATCH, 2 * int(max_field_bytes))


#: a JSON string (an unterminated one runs to the end of the text); linear time
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.|\\\Z)*+(?:"|\Z)', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth_exceeds(text: str, limit: int) -> bool:
    """Does JSON ``text`` nest arrays and objects more than ``limit`` deep? (without parsing)

    Brackets inside strings do not count. For text that is not JSON the answer bounds the depth
    a parser reaches before it fails, so text for which this is False never makes a parser
    recurse deeper than ``limit``.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    skeleton = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if len(skeleton) <= limit:
        return False
    b = np.frombuffer(skeleton.encode("ascii"), dtype=np.uint8)
    steps = np.where((b == 91) | (b == 123), 1, -1)
    return int(np.cumsum(steps).max()) > limit


def _short(value: Any, n: int = 60) -> str:
    """``repr`` of a value for an error line, cut to about ``n`` characters."""
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def duration_seconds(md: Any) -> float:
    """``finished_at - started_at`` of classification metadata in seconds (NaN when unknown)."""
    if not isinstance(md, dict):
        return math.nan
    start, end = md.get("started_at"), md.get("finished_at")
    if type(start) is not str or type(end) is not str:
        return math.nan
    try:
        return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    except (ValueError, TypeError, OverflowError):
        return math.nan


def flag_of(marks: int, seconds: float, limits: Mapping[str, Any]) -> str | None:
    """The flag of a classification with ``marks`` marks made in ``seconds`` (NaN: unknown,
    never too fast): "many_marks", "too_fast" or None."""
    if marks > limits["flag_marks"]:
        return "many_marks"
    if marks and seconds < marks * limits["min_seconds_per_mark"]:
        return "too_fast"
    return None


# --------------------------------------------------------------------------- CSV helpers


def _loads(text: str) -> Any:
    """Parse JSON like :func:`json.loads` (orjson first when available, for speed)."""
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass  # json.loads is more lenient (NaN, Infinity): let it decide
    return json.loads(text)


def _bad_json(path: object, row: int, column: str, text: str) -> InputError:
    try:
        json.loads(text)
        msg = "unexpected JSON"
    except (json.JSONDecodeError, TypeError) as exc:
        msg = str(exc)
    if not text:
        msg = "empty value"
    return InputError(f"malformed JSON in column {column!r}: {msg}", path=path, row=row)


class _no_field_limit:  # noqa: N801 - used as a context manager
    """Lift the csv module's field size limit (128 KB) for a while."""

    def __enter__(self) -> None:
        self.old = csv.field_size_limit()
        csv.field_size_limit(max(self.old, 1 << 62))

    def __exit__(self, *exc: object) -> None:
        csv.field_size_limit(self.old)


def read_header(path: str | Path, strip: bool = True) -> list[str]:
    """The header fields of a CSV file (``strip``: without surrounding blanks);
    :class:`InputError` if missing, empty or not UTF-8."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=path)
    with open(path, "rb") as fh:
        head = fh.readline(1 << 22)
    if head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8) :]
    if not head.strip():
        raise InputError("empty file (no header, no rows)", path=path)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"the header is not UTF-8 ({exc.reason})", path=path, row=0) from None
    try:  # newline="": a header ending in CR (old Mac line ends) is read too
        with _no_field_limit():
            header = next(csv.reader(io.StringIO(text, newline="")))
    except (StopIteration, csv.Error) as exc:
        raise InputError(f"cannot read the CSV header: {exc}", path=path, row=0) from None
    return [h.strip() for h in header] if strip else header


def _raw_names(path: str | Path, columns: list[str]) -> list[str]:
    """The header's own spelling of ``columns`` (names compared without surrounding blanks;
    the first of repeated names)."""
    spelling: dict[str, str] = {}
    for h in read_header(path, strip=False):
        spelling.setdefault(h.strip(), h)
    return [spelling.get(c, c) for c in columns]


class _BadBytes(Exception):
    pass


def _decoded_lines(fh: Iterable[bytes]) -> Iterable[str]:
    decoder = codecs.getincrementaldecoder("utf-8")()
    for i, raw in enumerate(fh):
        if i == 0 and raw.startswith(codecs.BOM_UTF8):
            raw = raw[len(codecs.BOM_UTF8) :]
        try:
            yield decoder.decode(raw)
        except UnicodeDecodeError as exc:
            raise _BadBytes(exc.reason) from None


def locate_csv_problem(
    path: str | Path, expected_fields: int | None = None, max_record: int | None = None
) -> tuple[int, str]:
    """Find the first data row that is not valid UTF-8, has the wrong number of fields or
    (``max_record``) is longer than ``max_record`` characters.

    Slow (pure Python), only used on the error path to name the row. Returns (row, problem);
    row 0 is the header, data rows count from 1; (-1, "") if nothing is found.
    """
    row = -1
    try:
        with open(path, "rb") as fh, _no_field_limit():
            for row, rec in enumerate(csv.reader(_decoded_lines(fh))):
                if row == 0:
                    expected_fields = expected_fields or len(rec)
                elif rec and len(rec) != expected_fields:
                    return row, f"expected {expected_fields} fields, found {len(rec)}"
                if max_record is not None and sum(map(len, rec)) + len(rec) > max_record:
                    return row, f"the record is longer than the {max_record:,}-byte read block"
    except _BadBytes as exc:
        return row + 1, f"bytes that are not UTF-8 ({exc})"
    except csv.Error as exc:
        return row + 1, f"CSV syntax error ({_short(str(exc), 200)})"
    return _unterminated_quote(path), "a quoted field runs to the end of the file"


def _unterminated_quote(path: str | Path) -> int:
    """The row whose quoted field never ends (it runs to the end of the file), else -1."""
    row = -1
    try:
        with open(path, "rb") as fh, _no_field_limit():
            for _ in csv.reader(_decoded_lines(fh), strict=True):
                row += 1
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):
            return row + 1
    except _BadBytes:
        pass
    return -1


def _csv_error(
    path: object, exc: Exception, n_fields: int | None = None, block: int = _BATCH
) -> InputError:
    if "Empty CSV file" in str(exc):
        return InputError("no rows (the file has only a header)", path=path)
    row, problem = locate_csv_problem(path, n_fields, block if "straddl" in str(exc) else None)
    if row >= 0:
        if "read block" in problem:
            problem += " (the larger of 16 MiB and twice extract.max_field_bytes)"
        return InputError(f"bad CSV row: {problem}", path=path, row=row)
    return InputError(f"cannot read the CSV file: {_short(str(exc), 300)}", path=path)


def _arrow_options(columns: Iterable[str], block: int = _BATCH) -> tuple[Any, Any, Any]:
    cols = list(columns)
    read = pacsv.ReadOptions(block_size=block, use_threads=True)
    parse = pacsv.ParseOptions(newlines_in_values=True)
    convert = pacsv.ConvertOptions(
        include_columns=cols,
        column_types={c: pa.string() for c in cols},
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return read, parse, convert


def _no_column(path: object, exc: KeyError) -> InputError:
    return InputError(f"cannot find a column in the header: {_short(str(exc), 200)}", path, 0)


def read_columns(
    path: str | Path, columns: Iterable[str], n_fields: int, block: int = _BATCH
) -> pa.Table:
    """Read ``columns`` of a CSV as strings with pyarrow (bad rows -> InputError with row).

    Column names are matched without surrounding blanks (as :func:`read_header` gives them).
    """
    cols = list(columns)
    read, parse, convert = _arrow_options(_raw_names(path, cols), block)
    try:
        tab = pacsv.read_csv(path, read_options=read, parse_options=parse, convert_options=convert)
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise _csv_error(path, exc, n_fields, block) from None
    except KeyError as exc:  # pyarrow read the header otherwise
        raise _no_column(path, exc) from None
    return tab.rename_columns(cols)


def iter_column_batches(path: str | Path, columns: Iterable[str], n_fields: int, block=_BATCH):
    """Stream record batches of ``columns`` (strings); bad rows -> InputError with row."""
    cols = list(columns)
    read, parse, convert = _arrow_options(_raw_names(path, cols), block)
    try:
        reader = pacsv.open_csv(
            path, read_options=read, parse_options=parse, convert_options=convert
        )
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            yield batch.rename_columns(cols)
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise _csv_error(path, exc, n_fields, block) from None
    except KeyError as exc:
        raise _no_column(path, exc) from None


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def to_int(
    arr: pa.ChunkedArray | pa.Array,
    column: str,
    path: object,
    rows: np.ndarray | None = None,
    nullable: bool = False,
) -> np.ndarray:
    """String column -> int64 numpy (float64 with NaN for blanks if ``nullable``).

    Accepts "12" and "12.0". Anything else raises InputError naming the 1-based data row
    (``rows`` maps positions to row numbers when ``arr`` is a subset). Fast path: pyarrow cast.
    """
    arr = pc.utf8_trim_whitespace(arr)
    blank = pc.equal(arr, "")
    any_blank = bool(pc.any(blank).as_py() or False)
    # Arrow's cast also reads hexadecimal ("0x10"): only plain decimals take the fast path
    decimal = pc.or_(pc.match_substring_regex(arr, r"^[+-]?[0-9]+$"), blank)
    try:
        if not pc.all(decimal).as_py():
            ints = None
        elif any_blank:
            ints = pc.cast(pc.if_else(blank, pa.scalar(None, pa.string()), arr), pa.int64())
        else:
            ints = pc.cast(arr, pa.int64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        ints = None
    if ints is not None:
        if any_blank and not nullable:
            i = _first_bad(np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool))
            row = int(rows[i]) if rows is not None else i + 1
            raise InputError(f"{column} is empty", path=path, row=row)
        if nullable:
            return np.asarray(ints.to_numpy(zero_copy_only=False), dtype="float64")
        return np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64)
    # slow path: "12.0" style values, or a bad value to report
    s = pd.Series(arr.to_numpy(zero_copy_only=False), dtype=object)
    bl = (s == "").to_numpy()
    num = pd.to_numeric(s.where(~bl, None), errors="coerce").to_numpy(dtype="float64")
    bad = np.isnan(num) & ~bl
    bad |= ~np.isnan(num) & ((num != np.round(num)) | (np.abs(num) > 2**62))
    if not nullable:
        bad |= bl
    if bad.any():
        i = _first_bad(bad)
        row = int(rows[i]) if rows is not None else i + 1
        raise InputError(f"{column} {_short(s.iloc[i])} is not an integer", path=path, row=row)
    if nullable:
        return num
    return num.astype(np.int64)


def parse_created_at(arr: pa.ChunkedArray | pa.Array, path: object, rows: np.ndarray) -> np.ndarray:
    """Zooniverse ``created_at`` ("2018-04-19 15:16:12 UTC", or ISO 8601) -> int64 ns (UTC)."""
    arr = pc.utf8_trim_whitespace(arr)
    t = pc.strptime(arr, format="%Y-%m-%d %H:%M:%S UTC", unit="ns", error_is_null=True)
    ns = np.array(pc.cast(t, pa.int64()).fill_null(np.iinfo(np.int64).min).to_numpy(), np.int64)
    nat = ns == np.iinfo(np.int64).min
    if nat.any():
        s = pd.Series(np.asarray(arr.to_numpy(zero_copy_only=False), dtype=object)[nat])
        alt = s.str.replace(r"\s*UTC$", "", regex=True)
        t2 = pd.to_datetime(alt, format="ISO8601", utc=True, errors="coerce")
        if t2.isna().any():
            i = int(np.flatnonzero(nat)[_first_bad(t2.isna().to_numpy())])
            raise InputError(
                f"created_at {_short(s.iloc[_first_bad(t2.isna().to_numpy())])} is not a date-time",
                path=path,
                row=int(rows[i]),
            )
        ns[nat] = t2.dt.tz_convert("UTC").to_numpy(dtype="datetime64[ns]").view(np.int64)
    return ns


# --------------------------------------------------------------------------- subjects export


def _clean_key(key: str) -> str:
    return str(key).lstrip("#!/ ").lower().replace(" ", "_")


_WIDTH_KEYS = ("image_width", "imagewidth", "naturalwidth", "width")
_HEIGHT_KEYS = ("image_height", "imageheight", "naturalheight", "height")
_SIZE_KEYS = ("image_size", "imagesize")


def _as_number(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return f if 0 < f < 2**31 else math.nan  # an image side in pixels (NaN, inf: unknown)


def metadata_image_size(md: dict) -> tuple[float, float]:
    """(width, height) from subject metadata keys such as ``#image_width`` or ``image_size``.

    Hidden-metadata prefixes (``#``, ``!``, ``//``) and case are ignored. NaN when absent.
    """
    if not isinstance(md, dict):
        return math.nan, math.nan
    clean = {_clean_key(k): v for k, v in md.items()}
    w = next((_as_number(clean[k]) for k in _WIDTH_KEYS if k in clean), math.nan)
    h = next((_as_number(clean[k]) for k in _HEIGHT_KEYS if k in clean), math.nan)
    size = next((_as_number(clean[k]) for k in _SIZE_KEYS if k in clean), math.nan)
    if math.isnan(w):
        w = size
    if math.isnan(h):
        h = size if not math.isnan(size) else w
    return w, h


def metadata_value(md: dict, names: Iterable[str]) -> Any:
    """The first of ``names`` present in metadata ``md`` (prefix- and case-insensitive)."""
    if not isinstance(md, dict):
        return None
    clean = {_clean_key(k): v for k, v in md.items()}
    for n in names:
        if n in clean:
            return clean[n]
    return None


def _check_subject_metadata(
    path: object, rows: np.ndarray, metadata: pa.ChunkedArray, limits: Mapping[str, Any]
) -> None:
    """InputError naming the row and the limit for a metadata field too large."""
    size = np.asarray(pc.binary_length(metadata).to_numpy(zero_copy_only=False), dtype=np.int64)
    big = size > limits["max_field_bytes"]
    if big.any():
        i = _first_bad(big)
        raise InputError(
            f"metadata field of {int(size[i]):,} bytes is larger than the limit "
            f"extract.max_field_bytes = {limits['max_field_bytes']:,}",
            path=path,
            row=int(rows[i]),
        )


def read_subjects_export(path: str | Path, limits: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """A Zooniverse subject export -> one row per subject_id (first row of each subject).

    Columns: subject_id (int64), metadata (dict), image_width, image_height (float, NaN when the
    metadata does not say), ra, dec (float, NaN when absent), row (1-based data row).
    A subject appears once per subject set / workflow link in real exports; the first row wins.
    A metadata field beyond ``limits`` (:func:`check_limits`: ``max_field_bytes``,
    ``max_json_depth``) is an :class:`InputError` naming the row and the limit.
    """
    limits = check_limits(limits)
    header = read_header(path)
    missing = [c for c in ("subject_id", "metadata") if c not in header]
    if missing:
        raise InputError(
            f"not a Zooniverse subject export: missing column(s) {', '.join(missing)} "
            f"(found: {_short(', '.join(header), 300)})",
            path=path,
            row=0,
        )
    tab = read_columns(
        path, ["subject_id", "metadata"], len(header), block_size(limits["max_field_bytes"])
    )
    if tab.num_rows == 0:
        raise InputError("no subjects (the file has only a header)", path=path)
    rows = np.arange(1, tab.num_rows + 1)
    sid = to_int(tab.column("subject_id"), "subject_id", path)
    first = np.sort(np.unique(sid, return_index=True)[1])
    metadata = tab.column("metadata").take(pa.array(first))
    _check_subject_metadata(path, rows[first], metadata, limits)
    texts = metadata.to_pylist()
    mds, ws, hs, ras, decs = [], [], [], [], []
    depth = limits["max_json_depth"]
    for i, text in zip(first, texts, strict=True):
        if json_depth_exceeds(text, depth):
            raise InputError(
                f"metadata nests deeper than the limit extract.max_json_depth = {depth}",
                path=path,
                row=int(rows[i]),
            )
        try:
            md = _loads(text) if text.strip() else {}
        except ValueError:
            raise _bad_json(path, int(rows[i]), "metadata", text) from None
        if not isinstance(md, dict):
            md = {}
        w, h = metadata_image_size(md)
        mds.append(md)
        ws.append(w)
        hs.append(h)
        ras.append(_as_float(metadata_value(md, ("ra", "ra_deg"))))
        decs.append(_as_float(metadata_value(md, ("dec", "dec_deg"))))
    return pd.DataFrame(
        {
            "subject_id": sid[first],
            "metadata": mds,
            "image_width": np.array(ws, dtype=float),
            "image_height": np.array(hs, dtype=float),
            "ra": np.array(ras, dtype=float),
            "dec": np.array(decs, dtype=float),
            "row": rows[first],
        }
    )


def _as_float(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return math.nan


# --------------------------------------------------------------------------- selection


def _version_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, float):
        log.warning(
            "workflow_version given as a number (%r); quote it in YAML ('52.70' != 52.7)", v
        )
        return repr(v)
    return str(v).strip()


def _available(wid: np.ndarray, ver: np.ndarray) -> dict[str, dict[str, int]]:
    """{workflow id: {version: number of rows}} of the export (``ver``: version strings)."""
    out: dict[str, dict[str, int]] = {}
    codes, uniq = pd.factorize(pd.Series(ver, dtype=object), sort=True)
    pairs, counts = np.unique(np.stack([wid, codes]), axis=1, return_counts=True)
    for (w, c), n in zip(pairs.T, counts, strict=True):
        out.setdefault(str(int(w)), {})[str(uniq[c])] = int(n)
    return out


def _first(items: list[str], n: int = 8) -> list[str]:
    """The first ``n`` of ``items`` and how many more there are (for a one-line message)."""
    return items[:n] + ([f"... {len(items) - n} more"] if len(items) > n else [])


def _describe(avail: dict[str, dict[str, int]], only: str | None = None) -> str:
    parts = []
    for w, versions in avail.items():
        if only is not None and w != only:
            continue
        vs = ", ".join(_first([f"{v[:30]} ({n})" for v, n in versions.items()]))
        parts.append(f"workflow {w[:30]}: versions {vs}")
    return "; ".join(_first(parts))


def select_workflow(
    wid: np.ndarray, ver: np.ndarray, workflow_id: Any, workflow_version: Any, path: object
) -> tuple[np.ndarray, np.ndarray, int, list[str]]:
    """Masks (workflow, version) of the rows to keep, the workflow id and kept versions."""
    avail = _available(wid, ver)
    ids = sorted({int(w) for w in avail})
    if workflow_id is None:
        if len(ids) > 1:
            raise InputError(
                "the export holds several workflows; choose one with --workflow-id "
                f"(config export.workflow_id): {_describe(avail)}",
                path=path,
            )
        chosen = ids[0]
    else:
        try:
            chosen = int(workflow_id)
        except (TypeError, ValueError):
            raise InputError(f"workflow id {workflow_id!r} is not an integer", path=path) from None
        if chosen not in ids:
            raise InputError(
                f"workflow {chosen} is not in the export; available: {_describe(avail)}",
                path=path,
            )
    wmask = wid == chosen
    codes, uniq = pd.factorize(pd.Series(ver[wmask], dtype=object))
    uniq = pd.Series(np.asarray(uniq, dtype=object), dtype=object)
    majors = uniq.str.split(".").str[0]
    want = _version_text(workflow_version)
    vmask = np.zeros(len(wid), dtype=bool)
    if want is None:
        numeric = pd.to_numeric(majors, errors="coerce")
        if numeric.isna().all():
            keep_u = (majors == majors.max()).to_numpy()
        else:
            keep_u = (numeric == numeric.max()).to_numpy()
    elif "." in want:
        keep_u = (uniq == want).to_numpy()
    else:
        keep_u = (majors == want).to_numpy()
    keep = keep_u[codes]
    if not keep.any():
        raise InputError(
            f"workflow {chosen} has no version {want!r}; available: "
            f"{_describe(avail, only=str(chosen))}",
            path=path,
        )
    vmask[np.flatnonzero(wmask)[keep]] = True
    kept_versions = sorted(str(v) for v in uniq[keep_u])
    return wmask, vmask, chosen, kept_versions


def first_per_group(keys: list[np.ndarray], order_keys: list[np.ndarray]) -> np.ndarray:
    """Boolean mask of the first element of each group of equal ``keys``.

    "First" is by ``order_keys`` (lexicographic, earlier keys more significant).
    """
    n = len(keys[0])
    if n == 0:
        return np.zeros(0, dtype=bool)
    order = np.lexsort(tuple(reversed(keys + order_keys)))
    new = np.ones(n, dtype=bool)
    for k in keys:
        ks = k[order]
        new[1:] &= ks[1:] == ks[:-1]
    first_sorted = ~new
    first_sorted[0] = True
    out = np.zeros(n, dtype=bool)
    out[order] = first_sorted
    return out


# --------------------------------------------------------------------------- annotations


def _frame_size(md: Any, frame: int) -> tuple[float, float]:
    """naturalWidth/Height of ``frame`` from classification metadata (NaN when unknown)."""
    try:
        d = md["subject_dimensions"][frame]
        return _as_number(d["naturalWidth"]), _as_number(d["naturalHeight"])
    except (KeyError, IndexError, TypeError):
        return math.nan, math.nan


class _Collector:
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
            parsed.append(parse_annotations(text) if column == "annotations" else _loads(text))
        except ValueError:
            raise _bad_json(path, row, column, text) from None
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
    for a in flatten(ann):  # what a click is: clumpscout.data.clicks
        task = task_name(a.get("task"))
        value = a.get("value")
        drawing = drawing_marks(value, a.get("taskType")) is not None
        if drawing:
            n_marks += len(value)
        items.append((task, value, drawing))
    return items, n_marks


def _task_hint(drawing: list[str]) -> str:
    """How to choose the clump task, naming the drawing task when there is exactly one."""
    flag = "choose it with --clump-task (config extract.clump_task; default T1)"
    if len(drawing) == 1:
        return (
            f"the drawing task here is {drawing[0]!r}: use --clump-task {drawing[0]} "
            f"(config extract.clump_task: {drawing[0]})"
        )
    if drawing:
        return f"drawing tasks here: {', '.join(_first(drawing))}; {flag}"
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
        "marks": np.full(n, -1, dtype=np.int64),
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
    coll: _Collector,
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
    """
    c_row, c_task, c_tool, c_label = coll.row, coll.task, coll.tool, coll.label
    c_x, c_y, c_frame, c_w, c_h = coll.x, coll.y, coll.frame, coll.w, coll.h
    codes = coll.codes
    e_pos, e_shape, e_xyxy = coll.e_pos, coll.e_shape, coll.e_xyxy
    drops: Counter = stats["dropped_clicks"]
    unsupported: Counter = stats["unsupported_shapes"]
    malformed: Counter = stats["malformed_shapes"]
    other_clicks: Counter = stats["other_task_clicks"]
    other_ann: Counter = stats["other_task_annotations"]
    seen_tasks: Counter = stats["tasks_seen"]
    drawing_tasks: Counter = stats["drawing_tasks"]
    sub_w, sub_h = subject_size
    annotations, metadata, subject_data = texts
    isfinite = math.isfinite
    nan = math.nan
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
        w0 = h0 = None
        n_kept = 0
        n_marks = 0
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
                        f"{_short(value)}); {_task_hint(others)}",
                        path=path,
                        row=row,
                    )
            elif not drawing:
                seen_tasks[str(task)] += 1
                other_ann[str(task)] += 1
                continue
            else:
                seen_tasks[str(task)] += 1
            for v in value:
                n_marks += 1
                if not isinstance(v, dict):
                    drops["invalid_mark"] += 1
                    continue
                if "tool" in v:
                    tool = v["tool"]
                    tt = None
                else:
                    tool = v.get("toolIndex")
                    tt = v.get("toolType")
                if (
                    (tt is None or tt == "point")
                    and "x" in v
                    and "y" in v
                    and SHAPE_KEYS.isdisjoint(v)
                ):
                    shape = POINT
                else:
                    shape = shape_of(v, tt)
                    if type(shape) is str:
                        drops["unsupported_shape"] += 1
                        unsupported[shape] += 1
                        continue
                if type(tool) is not int:
                    if isinstance(tool, float) and tool.is_integer():
                        tool = int(tool)
                    else:
                        drops["invalid_tool"] += 1
                        continue
                if tool < 0 or tool > 1_000_000:
                    drops["invalid_tool"] += 1
                    continue
                if tools is not None and tool not in tools:
                    drops["other_tool"] += 1
                    continue
                if shape == POINT:
                    x = v.get("x")
                    y = v.get("y")
                    if type(x) is not float:
                        x = _coord(x)
                    if type(y) is not float:
                        y = _coord(y)
                    if x is None or y is None:
                        drops["missing_coordinates"] += 1
                        continue
                    if not (isfinite(x) and isfinite(y)):
                        drops["nonfinite_coordinates"] += 1
                        continue
                else:
                    reason, detail, extent = shape_extent(v, shape)
                    if reason is not None:
                        drops[reason] += 1
                        if detail is not None:
                            malformed[detail] += 1
                        continue
                    x, y = extent[0], extent[1]
                frame = v.get("frame", 0)
                if type(frame) is not int:
                    if frame is None:
                        frame = 0
                    elif isinstance(frame, float) and frame.is_integer():
                        frame = int(frame)
                    else:
                        drops["invalid_mark"] += 1
                        continue
                if frame < 0 or frame > 1_000_000:
                    drops["invalid_mark"] += 1
                    continue
                if frame == 0:
                    if w0 is None:
                        w0, h0 = _frame_size(md, 0)
                        if w0 != w0 or h0 != h0:
                            w0, h0 = sub_w[k], sub_h[k]
                    w, h = w0, h0
                else:
                    w, h = _frame_size(md, frame)
                    if w != w or h != h:
                        w, h = sub_w[k], sub_h[k]
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
                    e_pos.append(len(c_row))
                    e_shape.append(shape)
                    e_xyxy.extend(extent[2:])
                c_row.append(pos)
                c_task.append(tc)
                c_tool.append(tool)
                c_label.append(lc)
                c_x.append(x)
                c_y.append(y)
                c_frame.append(frame)
                c_w.append(w)
                c_h.append(h)
                n_kept += 1
        if n_kept == 0:
            if n_marks:
                n_emptied += 1
            else:
                n_empty += 1
            if w0 is None:
                w0, h0 = _frame_size(md, 0)
                if w0 != w0 or h0 != h0:
                    w0, h0 = sub_w[k], sub_h[k]
            w, h = w0, h0
            tc = codes.get(clump_task)
            if tc is None:
                tc = codes[clump_task] = len(codes)
            c_row.append(pos)
            c_task.append(tc)
            c_tool.append(-1)
            c_label.append(0)
            c_x.append(nan)
            c_y.append(nan)
            c_frame.append(-1)
            c_w.append(w)
            c_h.append(h)
    stats["empty_classifications"] += n_empty
    stats["classifications_emptied_by_drops"] += n_emptied


class _Pass2:
    """Pass 2 of :func:`extract_clicks`: stream the JSON columns, parse the selected rows."""

    def __init__(self, path, json_cols, n_fields, n_rows, clump_task, tools, limits) -> None:
        self.path, self.json_cols, self.n_fields, self.n_rows = path, json_cols, n_fields, n_rows
        self.clump_task, self.tools, self.limits = clump_task, tools, limits

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

    def run(self, sel, rows_all, sub_w, sub_h) -> tuple[_Collector, dict]:
        """The clicks and counters of the rows ``sel`` (positions in the file)."""
        keep_all = np.full(self.n_rows, -1, dtype=np.int64)
        keep_all[sel] = np.arange(len(sel))
        stats = _new_stats(len(sel))
        coll = _Collector()
        offset = 0
        block = block_size(self.limits["max_field_bytes"])
        with timed(f"parsing annotations of {len(sel):,} classifications", log):
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
                _parse_rows(
                    coll,
                    p,
                    rows_all[offset - n + inb],
                    texts,
                    too_large,
                    (sub_w[p], sub_h[p]),
                    self.clump_task,
                    self.tools,
                    self.limits,
                    self.path,
                    stats,
                )
        if offset != self.n_rows:  # pragma: no cover - the two passes must agree
            raise InputError(
                f"read {offset} rows in pass 2 but {self.n_rows} in pass 1", path=self.path
            )
        return coll, stats


def _flag_report(stats, rows, cid, sid, vol_code, vol_names, limits) -> dict[str, Any]:
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


def _over_limits(over: list[tuple[int, int, str]], cid: np.ndarray) -> list[dict[str, Any]]:
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


# --------------------------------------------------------------------------- main API


def extract_clicks(
    classifications_csv: str | Path,
    subjects_csv: str | Path | None,
    workflow_id: int | str | None = None,
    workflow_version: str | int | float | None = None,
    clump_task: str | None = "T1",
    unusual_tools: Iterable[int] | None = (1,),
    tools: Iterable[int] | None = None,
    missing_subjects: str = "keep",
    limits: Mapping[str, Any] | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Read a Zooniverse classification export into the tidy clicks table (docs/contracts.md#clicks).

    Parameters follow the ``extract`` config section (``limits``: its keys of
    :data:`LIMIT_DEFAULTS`); see the module docstring for every decision. Returns
    ``(clicks, report)``; ``report`` counts every dropped classification and click by reason and
    is JSON-serialisable.
    """
    t_start = time.perf_counter()
    path = Path(classifications_csv)
    if missing_subjects not in MISSING_SUBJECTS:
        raise InputError(f"missing_subjects must be one of {MISSING_SUBJECTS}")
    limits = check_limits(limits)
    unusual = frozenset(int(t) for t in (unusual_tools or ()))
    tool_set = None if tools is None else frozenset(int(t) for t in tools)
    if clump_task is not None:
        clump_task = str(clump_task)
        if clump_task.lower() in ("", "all", "none"):
            clump_task = None

    header = read_header(path)
    required = LIGHT_COLUMNS + JSON_COLUMNS
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            f"not a Zooniverse classification export: missing column(s) {', '.join(missing)} "
            f"(found: {_short(', '.join(h or '<unnamed>' for h in header), 300)})",
            path=path,
            row=0,
        )
    json_cols = list(JSON_COLUMNS) + [c for c in OPTIONAL_JSON_COLUMNS if c in header]

    # ---- pass 1: the small columns of every row -> selection and de-duplication
    with timed(f"reading {path.name} (selection columns)", log):
        light = read_columns(
            path, LIGHT_COLUMNS, len(header), block_size(limits["max_field_bytes"])
        )
    n_rows = light.num_rows
    if n_rows == 0:
        raise InputError("no classifications (the file has only a header)", path=path)
    rows_all = np.arange(1, n_rows + 1, dtype=np.int64)
    dropped: dict[str, int] = {}

    wid = to_int(light.column("workflow_id"), "workflow_id", path)
    ver = np.asarray(
        pc.utf8_trim_whitespace(light.column("workflow_version")).to_numpy(zero_copy_only=False),
        dtype=object,
    )
    wmask, vmask, chosen, kept_versions = select_workflow(
        wid, ver, workflow_id, workflow_version, path
    )
    dropped["other_workflow"] = int((~wmask).sum())
    # versions not asked for ("other") or, with no version given, older than the newest major
    n_version = int((wmask & ~vmask).sum())
    dropped["other_workflow_version"] = n_version if workflow_version is not None else 0
    dropped["older_workflow_version"] = n_version if workflow_version is None else 0
    sel = np.flatnonzero(vmask)

    def col(name: str) -> pa.ChunkedArray:
        """Column ``name`` of the currently selected rows (``sel``)."""
        return light.column(name).take(pa.array(sel))

    rows = rows_all[sel]
    subj_text = pc.utf8_trim_whitespace(col("subject_ids"))
    multi = np.asarray(pc.match_substring(subj_text, ";").to_numpy(zero_copy_only=False), bool)
    dropped["multiple_subjects"] = int(multi.sum())
    if multi.any():
        keep = ~multi
        sel, rows, subj_text = sel[keep], rows[keep], subj_text.filter(pa.array(keep))
    sid = to_int(subj_text, "subject_ids", path, rows=rows)
    cid = to_int(col("classification_id"), "classification_id", path, rows=rows)
    # duplicate classification ids: the first row in file order
    first = np.zeros(len(cid), dtype=bool)
    first[np.unique(cid, return_index=True)[1]] = True
    dropped["duplicate_classification_id"] = int((~first).sum())
    sel, rows, sid, cid = sel[first], rows[first], sid[first], cid[first]

    user_name = pc.utf8_trim_whitespace(col("user_name"))
    blank = np.asarray(pc.equal(user_name, "").to_numpy(zero_copy_only=False), bool)
    if blank.any():
        raise InputError("empty user_name", path=path, row=int(rows[_first_bad(blank)]))
    names_enc = user_name.combine_chunks().dictionary_encode()
    vol_code = np.asarray(names_enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    vol_names = np.asarray(names_enc.dictionary.to_pylist(), dtype=object)
    created_ns = parse_created_at(col("created_at"), path, rows)

    # several classifications of one subject by one volunteer: the first by time, then id
    firstvs = first_per_group([vol_code, sid], [created_ns, cid])
    dropped["duplicate_volunteer_subject"] = int((~firstvs).sum())
    keep = firstvs

    subjects = None
    missing_report: dict[str, Any] = {"count": 0, "classifications": 0, "examples": []}
    if subjects_csv is not None:
        with timed(f"reading subject export {Path(subjects_csv).name}", log):
            subjects = read_subjects_export(subjects_csv, limits)
        known = np.isin(sid, subjects["subject_id"].to_numpy())
        miss = keep & ~known
        if miss.any():
            ms = np.unique(sid[miss])
            missing_report = {
                "count": int(len(ms)),
                "classifications": int(miss.sum()),
                "examples": [int(s) for s in ms[:20]],
                "action": missing_subjects,
            }
            log.warning(
                "%d subject(s) (%d classifications) are not in the subject export %s: %s",
                len(ms),
                int(miss.sum()),
                subjects_csv,
                "dropped" if missing_subjects == "drop" else "kept",
            )
        if missing_subjects == "drop":
            dropped["subject_missing_from_subjects_export"] = int(miss.sum())
            keep = keep & known
    dropped.setdefault("subject_missing_from_subjects_export", 0)
    idx = np.flatnonzero(keep)
    sel, rows, sid, cid, vol_code = sel[idx], rows[idx], sid[idx], cid[idx], vol_code[idx]
    created_ns = created_ns[idx]
    user_id = to_int(col("user_id"), "user_id", path, rows=rows, nullable=True)
    wver = ver[sel]

    # image size from the subject export (fallback when metadata.subject_dimensions is absent)
    sub_w = np.full(len(sel), np.nan)
    sub_h = np.full(len(sel), np.nan)
    if subjects is not None:
        pos_s = pd.Index(subjects["subject_id"]).get_indexer(sid)
        ok = pos_s >= 0
        sub_w[ok] = subjects["image_width"].to_numpy()[pos_s[ok]]
        sub_h[ok] = subjects["image_height"].to_numpy()[pos_s[ok]]

    # ---- pass 2: JSON of the kept rows only
    p2 = _Pass2(path, json_cols, len(header), n_rows, clump_task, tool_set, limits)
    coll, stats = p2.run(sel, rows_all, sub_w, sub_h)
    flags = _flag_report(stats, rows, cid, sid, vol_code, vol_names, limits)
    if limits["drop_flagged"] == "volunteers" and stats["flag"].any():
        # every classification of a flagged volunteer goes; parse the others again
        bad = np.unique(vol_code[stats["flag"] > 0])
        keep = ~np.isin(vol_code, bad)
        dropped["flagged_volunteer"] = int((~keep).sum())
        sel, rows, sid, cid, vol_code = sel[keep], rows[keep], sid[keep], cid[keep], vol_code[keep]
        created_ns, user_id, wver = created_ns[keep], user_id[keep], wver[keep]
        sub_w, sub_h = sub_w[keep], sub_h[keep]
        coll, stats = p2.run(sel, rows_all, sub_w, sub_h)
    for reason in LIMIT_REASONS + FLAG_REASONS:
        dropped[reason] = dropped.get(reason, 0) + stats["dropped_classifications"][reason]
    if clump_task is not None and stats["tasks_seen"].get(clump_task, 0) == 0:
        seen = _short(", ".join(sorted(stats["tasks_seen"])), 200) if stats["tasks_seen"] else ""
        raise InputError(
            f"task {clump_task!r} appears in no selected classification (tasks seen: "
            f"{seen or 'none'}); {_task_hint(sorted(stats['drawing_tasks']))}",
            path=path,
        )

    clicks = _assemble(
        coll, sid, cid, vol_code, vol_names, user_id, chosen, wver, created_ns, unusual
    )
    report = _report(
        path,
        subjects_csv,
        n_rows,
        _available(wid, ver),
        chosen,
        kept_versions,
        clump_task,
        tool_set,
        unusual,
        dropped,
        stats,
        clicks,
        missing_report,
        missing_subjects,
    )
    report["limits"] = dict(limits)
    report["dropped_over_limits"] = _over_limits(stats["over_limits"], cid)
    report["flagged"] = flags
    # subjects of the subject export that no kept classification mentions: counted, not an error
    # (a subject set may hold subjects that were never shown in this workflow)
    unclassified = 0
    if subjects is not None:
        unclassified = int(
            (~np.isin(subjects["subject_id"].to_numpy(), clicks["subject_id"].to_numpy())).sum()
        )
    report["subjects_without_classifications"] = unclassified
    report["seconds"] = round(time.perf_counter() - t_start, 3)
    log_summary(report)
    return clicks, report


def _assemble(
    coll: _Collector,
    sid: np.ndarray,
    cid: np.ndarray,
    vol_code: np.ndarray,
    vol_names: np.ndarray,
    user_id: np.ndarray,
    workflow_id: int,
    wver: np.ndarray,
    created_ns: np.ndarray,
    unusual: frozenset[int],
) -> pd.DataFrame:
    """Column lists -> the clicks DataFrame, sorted by subject, classification, click order."""
    r = np.asarray(coll.row, dtype=np.int64)
    n = len(r)
    click_order = np.arange(n)
    order = np.lexsort((click_order, cid[r], sid[r]))
    r = r[order]
    # shape codes (-1: no mark) and drawn extents (NaN for points), in click order first
    shape = np.where(np.isnan(np.asarray(coll.x, dtype=np.float64)), -1, POINT).astype(np.int8)
    xyxy = np.full((n, 4), np.nan)
    e_pos = np.asarray(coll.e_pos, dtype=np.int64)
    shape[e_pos] = np.asarray(coll.e_shape, dtype=np.int8)
    xyxy[e_pos] = np.asarray(coll.e_xyxy, dtype=np.float64).reshape(-1, 4)
    shape, xyxy = shape[order], xyxy[order]
    tool = np.asarray(coll.tool, dtype=np.int64)[order]
    frame = np.asarray(coll.frame, dtype=np.int64)[order]
    x = np.asarray(coll.x, dtype=np.float64)[order]
    y = np.asarray(coll.y, dtype=np.float64)[order]
    w = np.asarray(coll.w, dtype=np.float64)[order]
    h = np.asarray(coll.h, dtype=np.float64)[order]
    empty = np.isnan(x)
    known = ~np.isnan(w) & ~np.isnan(h)
    outside = (x < 0) | (y < 0) | (x > w) | (y > h)
    uid = user_id[r]
    names = coll.names()
    task = names[np.asarray(coll.task, dtype=np.int64)[order]]
    label = names[np.asarray(coll.label, dtype=np.int64)[order]]
    unusual_arr = np.isin(tool, np.fromiter(unusual, dtype=np.int64)) & ~empty
    df = pd.DataFrame(
        {
            "classification_id": cid[r],
            "subject_id": sid[r],
            "volunteer": pd.array(vol_names[vol_code[r]], dtype="str"),
            "user_id": pd.array(np.where(np.isnan(uid), 0, uid).astype(np.int64), dtype="Int64"),
            "workflow_id": np.full(n, workflow_id, dtype=np.int64),
            "workflow_version": pd.array(wver[r], dtype="str"),
            "task": pd.array(task, dtype="str"),
            "tool": pd.array(tool, dtype="Int64"),
            "tool_label": pd.array(label, dtype="str"),
            "x": x,
            "y": y,
            "unusual": pd.array(unusual_arr, dtype="boolean"),
            "frame": pd.array(frame, dtype="Int64"),
            "created_at": pd.to_datetime(created_ns[r], unit="ns", utc=True),
            "outside_image": pd.array(outside, dtype="boolean"),
            "natural_width": pd.array(np.where(known, w, 0).round().astype(np.int64), "Int64"),
            "natural_height": pd.array(np.where(known, h, 0).round().astype(np.int64), "Int64"),
            "shape": pd.array(np.asarray(SHAPES + (None,), dtype=object)[shape], dtype="str"),
            "x1": xyxy[:, 0],
            "y1": xyxy[:, 1],
            "x2": xyxy[:, 2],
            "y2": xyxy[:, 3],
        }
    )
    df.loc[np.isnan(uid), "user_id"] = pd.NA
    df.loc[empty, ["tool", "frame"]] = pd.NA
    df.loc[empty | ~known, "outside_image"] = pd.NA
    df.loc[~known, ["natural_width", "natural_height"]] = pd.NA
    return df[list(CLICK_COLUMNS)]


def _report(
    path: Path,
    subjects_csv: object,
    n_rows: int,
    available: dict,
    chosen: int,
    kept_versions: list[str],
    clump_task: str | None,
    tool_set: frozenset[int] | None,
    unusual: frozenset[int],
    dropped: dict[str, int],
    stats: dict,
    clicks: pd.DataFrame,
    missing_report: dict,
    missing_subjects: str,
) -> dict:
    has_xy = clicks["x"].notna()
    other_task_clicks = dict(sorted(stats["other_task_clicks"].items()))
    dropped_clicks = dict(sorted(stats["dropped_clicks"].items()))
    dropped_clicks["other_task"] = int(sum(other_task_clicks.values()))
    n_cls = int(clicks["classification_id"].nunique())
    vols = clicks["volunteer"].drop_duplicates()
    outside = clicks["outside_image"]
    return {
        "classifications_csv": str(path),
        "subjects_csv": None if subjects_csv is None else str(subjects_csv),
        "rows_read": n_rows,
        "workflows_available": available,
        "workflow_id": chosen,
        "workflow_versions_kept": kept_versions,
        "clump_task": clump_task,
        "tools": None if tool_set is None else sorted(tool_set),
        "unusual_tools": sorted(unusual),
        "dropped_classifications": dict(sorted(dropped.items())),
        "dropped_clicks": dropped_clicks,
        "other_task_clicks": other_task_clicks,
        "other_task_annotations": dict(sorted(stats["other_task_annotations"].items())),
        "classifications_kept": n_cls,
        "clicks_kept": int(has_xy.sum()),
        "shapes_kept": {k: int((clicks["shape"] == k).sum()) for k in SHAPES},
        "unsupported_shapes": dict(sorted(stats["unsupported_shapes"].items())),
        "malformed_shapes": dict(sorted(stats["malformed_shapes"].items())),
        "unusual_clicks": int(clicks["unusual"].fillna(False).sum()),
        "clicks_per_tool": {
            str(k): int(v)
            for k, v in clicks.loc[has_xy, "tool"].value_counts().sort_index().items()
        },
        "empty_classifications": int(stats["empty_classifications"]),
        "classifications_emptied_by_drops": int(stats["classifications_emptied_by_drops"]),
        "clicks_outside_image": int(outside.fillna(False).sum()),
        "clicks_image_size_unknown": int((outside.isna() & has_xy).sum()),
        "subjects": int(clicks["subject_id"].nunique()),
        "volunteers": int(len(vols)),
        "not_logged_in_volunteers": int(vols.str.startswith("not-logged-in").sum()),
        "subjects_missing_from_subjects_export": missing_report,
        "missing_subjects": missing_subjects,
    }


def merged_tools(report: dict) -> list[str]:
    """The tools whose clicks are kept side by side as one kind of object: with no tool
    selection (``tools: null``), every tool that is not an "unusual" flag; empty when at most
    one such tool was used (docs/decisions.md#per-tool)."""
    if report.get("tools") is not None:
        return []
    unusual = {str(t) for t in report.get("unusual_tools", [])}
    used = [t for t in report.get("clicks_per_tool", {}) if t not in unusual]
    return used if len(used) > 1 else []


def log_summary(report: dict) -> None:
    """Log the report's headline numbers and every non-zero drop."""
    if tools := merged_tools(report):
        counts = ", ".join(f"tool {t}: {report['clicks_per_tool'][t]:,}" for t in tools)
        log.warning(
            "the clicks of %d tools are aggregated as one kind of object (%s): to keep one "
            "kind, select its tool (extract.tools, --tools); to get labels per tool, set "
            "aggregate.per_tool: true",
            len(tools),
            counts,
        )
    log.info(
        "kept %s classifications, %s clicks (%s unusual) of %s subjects by %s volunteers "
        "(workflow %s, versions %s, task %s)",
        f"{report['classifications_kept']:,}",
        f"{report['clicks_kept']:,}",
        f"{report['unusual_clicks']:,}",
        f"{report['subjects']:,}",
        f"{report['volunteers']:,}",
        report["workflow_id"],
        ",".join(report["workflow_versions_kept"]),
        report["clump_task"],
    )
    log.info(
        "%s classifications marked nothing; %s were emptied by dropped clicks",
        f"{report['empty_classifications']:,}",
        f"{report['classifications_emptied_by_drops']:,}",
    )
    for reason, n in report["dropped_classifications"].items():
        if n:
            log.info("dropped %s classifications: %s", f"{n:,}", reason)
    for reason, n in report["dropped_clicks"].items():
        if n:
            log.info("dropped %s clicks: %s", f"{n:,}", reason)
    shapes = {k: n for k, n in report.get("shapes_kept", {}).items() if n and k != "point"}
    if shapes:
        log.info("drawn shapes kept: %s", ", ".join(f"{n:,} {k}s" for k, n in shapes.items()))
    for what in ("unsupported_shapes", "malformed_shapes"):
        for kind, n in report.get(what, {}).items():
            log.info("dropped %s marks (%s): %s", f"{n:,}", what.replace("_", " "), kind)
    for task, n in report["other_task_clicks"].items():
        log.info("not kept: %s marks of task %s", f"{n:,}", task)
    if report["clicks_outside_image"]:
        log.info("kept but flagged: %s clicks outside the image", report["clicks_outside_image"])
    if report["clicks_image_size_unknown"]:
        log.info(
            "%s clicks with unknown image size (outside_image NA)",
            report["clicks_image_size_unknown"],
        )
    flagged = report.get("flagged", {})
    kinds = {k: n for k, n in flagged.get("classifications", {}).items() if n}
    if kinds:
        log.warning(
            "flagged classifications (%s) of %s volunteers, drop_flagged: %s; review them in "
            "'flagged' of the report",
            ", ".join(f"{n:,} {k}" for k, n in kinds.items()),
            f"{flagged.get('volunteers', 0):,}",
            flagged.get("action"),
        )
    if report.get("subjects_without_classifications"):
        log.info(
            "%s subjects of the subject export have no kept classification",
            f"{report['subjects_without_classifications']:,}",
        )


def report_path(out: str | Path) -> Path:
    """``<out stem>_report.json`` beside ``out``."""
    out = Path(out)
    return out.with_name(f"{out.stem}_report.json")


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    from clumpscout.data.boxes import DefaultsHelpFormatter

    p.formatter_class = DefaultsHelpFormatter
    p.description = (
        "Zooniverse classification export -> tidy clicks table (one row per mark of the clump "
        "task, one coordinate-less row per classification that marked nothing) and "
        "<out stem>_report.json counting every dropped classification and click by reason. "
        "The defaults follow Galaxy Zoo: Clump Scout (task T1, tool 1 = unusual clump); "
        "other projects set --clump-task and --unusual-tools."
    )
    p.add_argument("--classifications", required=True, help="classification export CSV")
    p.add_argument(
        "--subjects",
        default=None,
        help="subject export CSV (image sizes, subjects missing from it); optional",
    )
    p.add_argument(
        "--workflow-id",
        default=None,
        help="workflow id (config export.workflow_id); required when the export holds several",
    )
    p.add_argument(
        "--workflow-version",
        default=None,
        help='"major.minor" exactly, or "major" (config export.workflow_version); '
        "default: the newest major version",
    )
    p.add_argument(
        "--clump-task",
        default="T1",
        help='drawing task whose marks to keep (config extract.clump_task); "all": every '
        "drawing task",
    )
    p.add_argument(
        "--unusual-tools",
        type=int,
        nargs="*",
        default=[1],
        help="tool indices that mean 'unusual' (config extract.unusual_tools); give the flag "
        "with no value for none",
    )
    p.add_argument(
        "--tools",
        type=int,
        nargs="*",
        default=None,
        help="keep only these tool indices (config extract.tools; default: every tool)",
    )
    p.add_argument(
        "--missing-subjects",
        choices=MISSING_SUBJECTS,
        default="keep",
        help="subjects absent from the subject export (config extract.missing_subjects)",
    )
    d = LIMIT_DEFAULTS
    p.add_argument(
        "--max-json-depth",
        type=int,
        default=d["max_json_depth"],
        help="drop a classification whose JSON nests deeper",
    )
    p.add_argument(
        "--max-field-bytes",
        type=int,
        default=d["max_field_bytes"],
        help="drop a classification with a larger JSON field",
    )
    p.add_argument(
        "--max-marks",
        type=int,
        default=d["max_marks"],
        help="drop a classification with more marks (every drawing task)",
    )
    p.add_argument(
        "--flag-marks",
        type=int,
        default=d["flag_marks"],
        help="flag a classification with more marks",
    )
    p.add_argument(
        "--min-seconds-per-mark",
        type=float,
        default=d["min_seconds_per_mark"],
        help="flag a classification finished faster than this per mark",
    )
    p.add_argument(
        "--drop-flagged",
        choices=DROP_FLAGGED,
        default=d["drop_flagged"],
        help="what to do with flagged classifications",
    )
    p.add_argument("--out", required=True, help="clicks.parquet (report: <stem>_report.json)")


def run(args: argparse.Namespace) -> int:
    from clumpscout.io import write_json, write_parquet

    clicks, report = extract_clicks(
        args.classifications,
        args.subjects,
        workflow_id=args.workflow_id,
        workflow_version=args.workflow_version,
        clump_task=args.clump_task,
        unusual_tools=args.unusual_tools,
        tools=args.tools,
        missing_subjects=args.missing_subjects,
        limits={k: getattr(args, k) for k in LIMIT_DEFAULTS},
    )
    write_parquet(clicks, args.out)
    write_json(report, report_path(args.out))
    log.info("wrote %s and %s", args.out, report_path(args.out))
    return 0
