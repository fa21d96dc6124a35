"""The click ledger's own reading of the classification export (decisions.md#click-ledger).

One light streaming pass over the export (pyarrow for the CSV; ``annotations`` parsed and
its clicks counted per row with the shared definition of a click, :mod:`clumpscout.data.click_definition`)
and the reader's documented selection re-applied row by row (:func:`classify_rows`), with the
rows' JSON fields read again only where a limit could have dropped them
(:func:`read_row_checks`). Nothing here uses the reader's output:
:mod:`clumpscout.data.ledger` compares the two.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import re
from array import array
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from clumpscout.data.click_definition import drawing_marks, flatten, parse_annotations, task_name
from clumpscout.errors import InputError
from clumpscout.io import open_bytes
from clumpscout.logs import progress

log = logging.getLogger(__name__)

#: reasons for which the export reader drops a whole classification (clumpscout.data.zooniverse);
#: listed so that the CSV always has the same columns (others found in a report are added)
CLASSIFICATION_REASONS = (
    "other_workflow",
    "other_workflow_version",
    "older_workflow_version",
    "multiple_subjects",
    "duplicate_classification_id",
    "duplicate_volunteer_subject",
    "subject_missing_from_subjects_export",
    "field_too_large",
    "json_too_deep",
    "too_many_marks",
    "flagged_many_marks",
    "flagged_too_fast",
    "flagged_volunteer",
)
#: reasons for which the reader drops one click (a mark: a point or a drawn shape) of a kept
#: classification's clump task
CLICK_REASONS = (
    "invalid_mark",
    "invalid_tool",
    "malformed_shape",
    "missing_coordinates",
    "nonfinite_coordinates",
    "other_tool",
    "unsupported_shape",
)
UNEXPLAINED = "unexplained"
EXPORT_COLUMNS = (
    "classification_id",
    "user_name",
    "workflow_id",
    "workflow_version",
    "subject_ids",
    "created_at",
    "annotations",
)
JSON_FIELDS = ("annotations", "metadata", "subject_data")
BLOCK = 1 << 24


# ------------------------------------------------------------------ counting marks


def _count_parsed(ann: Any, clump_task: str | None) -> tuple[int, int]:
    """:func:`count_marks` of a parsed ``annotations`` value (what a click is and which task
    it belongs to: :mod:`clumpscout.data.click_definition`)."""
    if not isinstance(ann, list):
        raise ValueError("annotations is not a JSON list")
    clump = other = 0
    for a in flatten(ann):
        k = drawing_marks(a.get("value"), a.get("taskType"))
        if k is None:
            continue
        if clump_task is None or task_name(a.get("task")) == clump_task:
            clump += k
        else:
            other += k
    return clump, other


def count_marks(annotations_json: str, clump_task: str | None) -> tuple[int, int]:
    """(clump-task marks, marks of other drawing tasks) of one ``annotations`` field.

    ``clump_task`` None: every drawing task is the clump task. Raises ValueError for text that
    is not a JSON list. Parsed by :func:`clumpscout.data.click_definition.parse_annotations` (the
    export reader's parse: exactly :func:`json.loads`'s result where it matters).
    """
    return _count_parsed(parse_annotations(annotations_json), clump_task)


def _count_texts(texts: list[str], clump_task: str | None, clump, other, ok) -> None:
    """:func:`count_marks` of every text, appended to the arrays (0, 0, not ok: not JSON or
    nested too deeply to parse). The ledger's hot loop."""
    c_app, o_app, k_app = clump.append, other.append, ok.append
    count, parse = _count_parsed, parse_annotations
    for text in texts:
        try:
            c, o = count(parse(text), clump_task)
        except (ValueError, RecursionError):
            c_app(0)
            o_app(0)
            k_app(0)
        else:
            c_app(c)
            o_app(o)
            k_app(1)


def read_export_marks(path: str | Path, clump_task: str | None, block: int = BLOCK) -> pd.DataFrame:
    """One row per export row: the selection columns (stripped strings) and the mark counts.

    Columns: row (1-based data row), classification_id, user_name, workflow_id,
    workflow_version, subject_ids, created_at (str), clump_marks, other_marks (int64), json_ok
    (bool). ``block``: pyarrow's block size (a CSV record must fit in one).
    """
    path = Path(path)
    read = pacsv.ReadOptions(block_size=block)
    parse = pacsv.ParseOptions(newlines_in_values=True)
    raw = header_spelling(path, EXPORT_COLUMNS)
    convert = pacsv.ConvertOptions(
        include_columns=raw,
        column_types={c: pa.string() for c in raw},
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    light: list[pa.RecordBatch] = []
    clump = array("q")
    other = array("q")
    ok = array("b")
    try:
        reader = pacsv.open_csv(
            path, read_options=read, parse_options=parse, convert_options=convert
        )
        for raw_batch in progress(reader, desc="ledger", total=None):
            batch = raw_batch.rename_columns(list(EXPORT_COLUMNS))
            _count_texts(batch.column("annotations").to_pylist(), clump_task, clump, other, ok)
            light.append(batch.drop_columns(["annotations"]))
    except (OSError, KeyError, pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the classification export: {exc}", path=path) from None
    names = [c for c in EXPORT_COLUMNS if c != "annotations"]
    if light:
        tab = pa.Table.from_batches(light)
    else:
        tab = pa.table({c: pa.array([], pa.string()) for c in names})
    n = len(ok)
    df = pd.DataFrame({c: pc.utf8_trim_whitespace(tab.column(c)).to_pandas() for c in names})
    df.insert(0, "row", np.arange(1, n + 1, dtype=np.int64))
    df["clump_marks"] = np.frombuffer(clump, dtype=np.int64) if n else np.zeros(0, np.int64)
    df["other_marks"] = np.frombuffer(other, dtype=np.int64) if n else np.zeros(0, np.int64)
    df["json_ok"] = np.frombuffer(ok, dtype=np.int8).astype(bool) if n else np.zeros(0, bool)
    return df


def header_spelling(path: str | Path, names) -> list[str]:
    """The header's own spelling of ``names`` in a CSV file, which the reader matches without
    surrounding blanks (the first of repeated names); ``names`` when the header is unreadable."""
    limit = csv.field_size_limit(1 << 62)
    try:
        with open_bytes(path) as fh:
            text = fh.readline(1 << 22).decode("utf-8").removeprefix("\ufeff")
        header = next(csv.reader(io.StringIO(text, newline="")), [])
    except (OSError, UnicodeDecodeError, csv.Error):
        return list(names)
    finally:
        csv.field_size_limit(limit)
    spelling: dict[str, str] = {}
    for h in header:
        spelling.setdefault(h.strip(), h)
    return [spelling.get(n, n) for n in names]


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted integer array (what np.unique gives, much faster)."""
    if len(values) == 0:
        return values.copy()
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def run_lengths(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of a sorted integer array and how often each occurs."""
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    if len(values) == 0:
        starts = starts[:0]
    return values[starts], np.diff(np.append(starts, len(values)))


def read_subject_ids(path: str | Path, block: int = BLOCK) -> np.ndarray:
    name = header_spelling(path, ["subject_id"])[0]
    try:
        tab = pacsv.read_csv(
            path,
            read_options=pacsv.ReadOptions(block_size=block),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                include_columns=[name], column_types={name: pa.string()}
            ),
        )
    except (OSError, pa.ArrowInvalid, KeyError) as exc:
        raise InputError(f"cannot read the subject export: {exc}", path=path) from None
    ids = pd.to_numeric(pd.Series(tab.column(name).to_pylist()).str.strip(), "coerce")
    return np.unique(ids.dropna().to_numpy(dtype=np.int64))


# ------------------------------------------------------------------ export level


def plain_ints(values: pd.Series) -> np.ndarray | None:
    """The int64 values of a string column of plain decimal integers, else None.

    Plain: 1 to 18 ASCII digits, no sign, no blanks. Such text is the same integer whichever
    way it is parsed (pd.to_numeric, int(), Arrow's cast, used here), and fits in int64.
    """
    if (
        isinstance(values.dtype, pd.StringDtype)
        and len(values)
        and not values.hasnans
        and values.str.fullmatch(r"[0-9]{1,18}").all()
    ):
        return values.astype("int64[pyarrow]").to_numpy(dtype=np.int64)
    return None


def _to_float(values: pd.Series) -> np.ndarray:
    """``pd.to_numeric(values, errors="coerce")`` as floats (fast for plain integer strings)."""
    ints = plain_ints(values)
    if ints is not None:
        return ints.astype(float)
    return pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)


def _duplicated(values: np.ndarray) -> np.ndarray:
    """``pd.Series(values).duplicated()`` of a float array (later repeats of a value)."""
    if np.isfinite(values).all() and not (np.signbit(values) & (values == 0)).any():
        # no NaN (equal to itself for pandas) nor -0.0: equal values are == values; a stable
        # sort keeps their file order, so all but the first of each run are repeats
        order = np.argsort(values, kind="stable")
        ordered = values[order]
        out = np.zeros(len(values), dtype=bool)
        out[order[1:]] = ordered[1:] == ordered[:-1]
        return out
    return pd.Series(values).duplicated().to_numpy()


def classify_rows(
    marks: pd.DataFrame,
    report: dict,
    kept_ids: np.ndarray,
    subject_ids: np.ndarray | None,
    row_checks=None,
) -> np.ndarray:
    """The category of every export row: "kept", a reader drop reason or "unexplained".

    Re-applies the reader's documented selection order (clumpscout.data.zooniverse): workflow,
    version, several subjects, repeated classification id (first row in file order kept); a row
    that survives these is "kept" when its classification id is in ``kept_ids`` (boxes.parquet);
    otherwise its volunteer-subject pair decides (:func:`_classify_pairs`). ``row_checks``
    (rows -> DataFrame of :func:`read_row_checks`) reads the JSON fields of the rows that need
    it; without it no limit or flag reason is found.
    """
    n = len(marks)
    cat = np.full(n, "", dtype=object)
    wid = _to_float(marks["workflow_id"])
    cat[wid != float(report["workflow_id"])] = "other_workflow"
    versions = {str(v) for v in report.get("workflow_versions_kept", [])}
    dropped = report.get("dropped_classifications", {})
    ver_reason = (
        "older_workflow_version"
        if dropped.get("older_workflow_version", 0) and not dropped.get("other_workflow_version", 0)
        else "other_workflow_version"
    )
    left = cat == ""
    cat[left & ~marks["workflow_version"].isin(versions).to_numpy()] = ver_reason
    left = cat == ""
    cat[left & marks["subject_ids"].str.contains(";", regex=False).to_numpy()] = "multiple_subjects"
    left = cat == ""
    cid = _to_float(marks["classification_id"])
    sid = _to_float(marks["subject_ids"])
    dup = np.zeros(n, dtype=bool)
    dup[left] = _duplicated(cid[left])
    cat[dup] = "duplicate_classification_id"
    left = cat == ""
    kept = left & np.isin(cid, np.asarray(kept_ids, dtype=float))
    cat[kept] = "kept"
    rest = np.flatnonzero(cat == "")
    if len(rest):
        cat[rest] = _classify_pairs(marks, rest, kept, cid, sid, report, subject_ids, row_checks)
    return cat


def _created_ns(values: np.ndarray) -> np.ndarray:
    """``created_at`` texts ("2018-04-19 15:16:12 UTC" or ISO 8601) -> int64 ns (NaT: max)."""
    text = pd.Series(values, dtype=object).astype(str).str.replace(r"\s*UTC$", "", regex=True)
    t = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
    bad = t.isna()
    if bad.any():
        t[bad] = pd.to_datetime(text[bad], format="%Y-%m-%d %H:%M:%S", utc=True, errors="coerce")
    ns = t.dt.tz_convert("UTC").to_numpy(dtype="datetime64[ns]").view(np.int64).copy()
    ns[t.isna().to_numpy()] = np.iinfo(np.int64).max
    return ns


def _classify_pairs(marks, rest, kept, cid, sid, report, subject_ids, row_checks) -> np.ndarray:
    """Categories of ``rest``: rows past the first selections whose classification was not kept.

    The reader keeps the first classification of each volunteer-subject pair (by created_at,
    then classification id) and drops the others as repeats; so a row of a pair with a kept row
    is a repeat, and in a pair without one the first row carries the reason the pair's
    classification was dropped (:func:`_pair_reasons`) and the others are repeats.
    """
    users = marks["user_name"].to_numpy(dtype=object)
    pairs = pd.MultiIndex.from_arrays([users[rest], sid[rest]])
    repeat = pairs.isin(pd.MultiIndex.from_arrays([users[kept], sid[kept]]))
    out = np.full(len(rest), "duplicate_volunteer_subject", dtype=object)
    cand = np.flatnonzero(~repeat)
    if len(cand) == 0:
        return out
    rows = rest[cand]
    user_code = pd.factorize(users[rows])[0]
    t = _created_ns(marks["created_at"].to_numpy(dtype=object)[rows])
    order = np.lexsort((cid[rows], t, sid[rows], user_code))
    new_pair = np.ones(len(order), dtype=bool)
    new_pair[1:] = (user_code[order][1:] != user_code[order][:-1]) | (
        sid[rows][order][1:] != sid[rows][order][:-1]
    )
    first = cand[order[new_pair]]
    out[first] = _pair_reasons(marks, rest[first], sid, report, subject_ids, row_checks)
    return out


def _pair_reasons(marks, rows, sid, report, subject_ids, row_checks) -> np.ndarray:
    """Why the reader dropped each of ``rows`` (the first row of its volunteer-subject pair):
    a subject missing from the subject export, then (reading the row's JSON) a flagged
    volunteer, a limit (field size, nesting, marks) or a flag; else unexplained."""
    out = np.full(len(rows), UNEXPLAINED, dtype=object)
    if report.get("missing_subjects") == "drop" and subject_ids is not None:
        miss = ~np.isin(sid[rows], np.asarray(subject_ids, dtype=float))
        out[miss] = "subject_missing_from_subjects_export"
    limits = report.get("limits")
    todo = np.flatnonzero(out == UNEXPLAINED)
    if not limits or row_checks is None or len(todo) == 0:
        return out
    r = rows[todo]
    checks = row_checks(marks["row"].to_numpy()[r])
    total = (marks["clump_marks"].to_numpy() + marks["other_marks"].to_numpy())[r]
    reason = checks["limit"].to_numpy(dtype=object).copy()
    reason[(reason == "") & (total > limits["max_marks"])] = "too_many_marks"
    seconds = checks["seconds"].to_numpy(dtype=float)
    many = total > limits["flag_marks"]
    fast = ~many & (total > 0) & (seconds < total * limits["min_seconds_per_mark"])
    flagged = (reason == "") & (many | fast)
    mode = limits.get("drop_flagged", "none")
    if mode == "classifications":
        reason[flagged & many] = "flagged_many_marks"
        reason[flagged & fast] = "flagged_too_fast"
    elif mode == "volunteers":
        users = marks["user_name"].to_numpy(dtype=object)[r]
        reason[np.isin(users, users[flagged])] = "flagged_volunteer"
    out[todo] = np.where(reason == "", UNEXPLAINED, reason)
    return out


# ------------------------------------------------------------------ reading rows' JSON fields

#: a JSON string, or a bracket (an unterminated string runs to the end of the text)
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+"?|[\[\]{}]', re.S)


def json_nesting(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (brackets in strings do not count)."""
    if "[" not in text and "{" not in text:
        return 0
    depth = deepest = 0
    for m in _TOKEN.finditer(text):
        t = m.group()
        if t == "[" or t == "{":
            depth += 1
            deepest = max(deepest, depth)
        elif t == "]" or t == "}":
            depth -= 1
    return deepest


def seconds_taken(metadata_json: str | None) -> float:
    """``finished_at - started_at`` (seconds) of a classification's metadata; NaN if unknown."""
    try:
        md = json.loads(metadata_json) if metadata_json else None
        start = datetime.fromisoformat(md["started_at"])
        end = datetime.fromisoformat(md["finished_at"])
        return (end - start).total_seconds()
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError):
        return math.nan


def _row_limit(sizes: list[int], texts: list[str | None], limits: dict) -> str:
    """The field-size or nesting limit a row's JSON fields break ("" for none)."""
    if max(sizes) > limits["max_field_bytes"]:
        return "field_too_large"
    if max(json_nesting(t) if t else 0 for t in texts) > limits["max_json_depth"]:
        return "json_too_deep"
    return ""


def read_row_checks(path: str | Path, rows: np.ndarray, limits: dict, block: int) -> pd.DataFrame:
    """For export ``rows`` (1-based, sorted or not): the limit each breaks ("" for none:
    "field_too_large", "json_too_deep") and its duration in seconds (NaN when unknown).

    Streams the JSON fields once; a field over the size limit is never turned into text.
    """
    want = {int(r): i for i, r in enumerate(rows)}
    limit = np.full(len(rows), "", dtype=object)
    seconds = np.full(len(rows), np.nan)
    read = pacsv.ReadOptions(block_size=block)
    parse = pacsv.ParseOptions(newlines_in_values=True)
    raw = header_spelling(path, JSON_FIELDS)
    convert = pacsv.ConvertOptions(
        include_columns=raw,
        include_missing_columns=True,
        column_types={c: pa.string() for c in raw},
    )
    offset = 0
    try:
        reader = pacsv.open_csv(
            path, read_options=read, parse_options=parse, convert_options=convert
        )
        for batch in reader:
            first, offset = offset, offset + batch.num_rows
            here = [r for r in want if first < r <= offset]  # 1-based rows in this batch
            if not here:
                continue
            take = pa.array([r - 1 - first for r in here], pa.int64())
            cols = [batch.column(c).cast(pa.string()).take(take) for c in raw]
            sizes = [pc.fill_null(pc.binary_length(c), 0).to_pylist() for c in cols]
            for j, r in enumerate(here):
                i = want[r]
                row_sizes = [s[j] for s in sizes]
                if max(row_sizes) > limits["max_field_bytes"]:
                    limit[i] = "field_too_large"
                    continue
                texts = [c[j].as_py() for c in cols]
                limit[i] = _row_limit(row_sizes, texts, limits)
                seconds[i] = seconds_taken(texts[1])
    except (OSError, KeyError, pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the classification export: {exc}", path=path) from None
    return pd.DataFrame({"limit": limit, "seconds": seconds})
