"""Reading a Zooniverse export CSV: the limits on one classification, and the CSV helpers
(header, streamed pyarrow columns, integer ids, dates) of :mod:`clumpscout.data.zooniverse`.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import logging
import math
import re
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
from clumpscout.errors import InputError
from clumpscout.io import open_bytes

try:  # optional speed-up: identical results (see loads_json)
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None


log = logging.getLogger(__name__)


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
DROP_FLAGGED = tuple(_config.choices("extract")["drop_flagged"])
#: classification drops decided while parsing the JSON (after the de-duplication)
LIMIT_REASONS = ("field_too_large", "json_too_deep", "too_many_marks")
FLAG_REASONS = ("flagged_many_marks", "flagged_too_fast", "flagged_volunteer")
FLAGS = ("", "many_marks", "too_fast")  # the flags of a classification (code 0: none)


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


def short_repr(value: Any, n: int = 60) -> str:
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


def loads_json(text: str) -> Any:
    """Parse JSON like :func:`json.loads` (orjson first when available, for speed)."""
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass  # json.loads is more lenient (NaN, Infinity): let it decide
    return json.loads(text)


def bad_json_error(path: object, row: int, column: str, text: str) -> InputError:
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
    try:
        with open_bytes(path) as fh:
            head = fh.readline(1 << 22)
    except OSError as exc:  # damaged compressed data
        raise InputError(f"cannot read the file: {exc}", path=path) from None
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
        with open_bytes(path) as fh, _no_field_limit():
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
        return row + 1, f"CSV syntax error ({short_repr(str(exc), 200)})"
    return _unterminated_quote(path), "a quoted field runs to the end of the file"


def _unterminated_quote(path: str | Path) -> int:
    """The row whose quoted field never ends (it runs to the end of the file), else -1."""
    row = -1
    try:
        with open_bytes(path) as fh, _no_field_limit():
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
    return InputError(f"cannot read the CSV file: {short_repr(str(exc), 300)}", path=path)


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
    return InputError(f"cannot find a column in the header: {short_repr(str(exc), 200)}", path, 0)


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
    except OSError as exc:  # damaged compressed data
        raise InputError(f"cannot read the file: {exc}", path=path) from None
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
    except OSError as exc:  # damaged compressed data
        raise InputError(f"cannot read the file: {exc}", path=path) from None


def first_true(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def int_problem(column: str, text: str) -> str:
    """What is wrong with the text of an integer column (:func:`int_values`' bad rows)."""
    return f"{column} is empty" if text == "" else f"{column} {short_repr(text)} is not an integer"


def int_values(
    arr: pa.ChunkedArray | pa.Array, nullable: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """String column -> (int64 numpy, or float64 with NaN for blanks if ``nullable``; the mask
    of texts that are no integer, blanks included unless ``nullable``, or None when there is
    none). Accepts "12" and "12.0"; a bad text's value is 0 (NaN if ``nullable``). Fast path:
    pyarrow cast."""
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
        if nullable:
            return np.asarray(ints.to_numpy(zero_copy_only=False), dtype="float64"), None
        if any_blank:
            bad = np.asarray(blank.to_numpy(zero_copy_only=False), dtype=bool)
            return np.asarray(ints.fill_null(0).to_numpy(), dtype=np.int64), bad
        return np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64), None
    # slow path: "12.0" style values, or bad values
    s = pd.Series(arr.to_numpy(zero_copy_only=False), dtype=object)
    bl = (s == "").to_numpy()
    num = pd.to_numeric(s.where(~bl, None), errors="coerce").to_numpy(dtype="float64", copy=True)
    bad = np.isnan(num) & ~bl
    bad |= ~np.isnan(num) & ((num != np.round(num)) | (np.abs(num) > 2**62))
    if not nullable:
        bad |= bl
    if nullable:
        num[bad] = np.nan
        return num, bad if bad.any() else None
    return np.where(bad, 0, num).astype(np.int64), bad if bad.any() else None


def to_int(
    arr: pa.ChunkedArray | pa.Array,
    column: str,
    path: object,
    rows: np.ndarray | None = None,
    nullable: bool = False,
) -> np.ndarray:
    """String column -> int64 numpy (float64 with NaN for blanks if ``nullable``).

    Accepts "12" and "12.0". Anything else raises InputError naming the 1-based data row
    (``rows`` maps positions to row numbers when ``arr`` is a subset)."""
    values, bad = int_values(arr, nullable)
    if bad is not None:
        i = first_true(bad)
        text = pc.utf8_trim_whitespace(arr.take(pa.array([i]))).to_pylist()[0]
        row = int(rows[i]) if rows is not None else i + 1
        raise InputError(int_problem(column, text), path=path, row=row)
    return values


def created_values(arr: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Zooniverse ``created_at`` ("2018-04-19 15:16:12 UTC", or ISO 8601) -> (int64 ns (UTC),
    the mask of texts that are no date-time, or None when there is none)."""
    arr = pc.utf8_trim_whitespace(arr)
    t = pc.strptime(arr, format="%Y-%m-%d %H:%M:%S UTC", unit="ns", error_is_null=True)
    ns = np.array(pc.cast(t, pa.int64()).fill_null(np.iinfo(np.int64).min).to_numpy(), np.int64)
    nat = ns == np.iinfo(np.int64).min
    if not nat.any():
        return ns, None
    s = pd.Series(np.asarray(arr.to_numpy(zero_copy_only=False), dtype=object)[nat])
    alt = s.str.replace(r"\s*UTC$", "", regex=True)
    t2 = pd.to_datetime(alt, format="ISO8601", utc=True, errors="coerce")
    ok = t2.notna().to_numpy()
    ns[np.flatnonzero(nat)[ok]] = (
        t2[ok].dt.tz_convert("UTC").to_numpy(dtype="datetime64[ns]").view(np.int64)
    )
    bad = np.zeros(len(ns), dtype=bool)
    bad[np.flatnonzero(nat)[~ok]] = True
    return ns, bad if bad.any() else None


def created_problem(text: str) -> str:
    """What is wrong with a ``created_at`` text (:func:`created_values`' bad rows)."""
    return f"created_at {short_repr(text)} is not a date-time"


def parse_created_at(arr: pa.ChunkedArray | pa.Array, path: object, rows: np.ndarray) -> np.ndarray:
    """:func:`created_values`; a text that is no date-time raises InputError naming its row."""
    ns, bad = created_values(arr)
    if bad is not None:
        i = first_true(bad)
        text = pc.utf8_trim_whitespace(arr.take(pa.array([i]))).to_pylist()[0]
        raise InputError(created_problem(text), path=path, row=int(rows[i]))
    return ns
