"""The click ledger: every input click accounted for at the end of the DAG
(decisions.md#click-ledger).

For every ``n`` of the subsample list (paper §6.1, decisions.md#subsamples: the subsamples Z~_n) the ledger
follows the clicks of the classification export down to the aggregation's assignments and checks
that every link adds up::

    clicks in the export (every task)                    counted here, from the export itself
      = clicks in classifications the reader dropped     by reason (dropped_cls_<reason>)
      + clump-task clicks the reader dropped             by reason (dropped_click_<reason>)
      + clicks of other tasks (e.g. the bulge task)      by task   (other_task_<task>)
      + kept clicks                                      box rows with coordinates (boxes.parquet)
    kept clicks
      = clicks not drawn into Z~_n                       (not_drawn)
      + clicks in Z~_n                                   (in_zn)
    clicks in Z~_n
      = clustered (assignments ``cluster`` >= 0)         (clustered)
      + dummy     (``cluster`` == -1)                    (dummy)
      + not aggregated (boxes of subjects never put in a working batch: fewer than
        ``min_volunteers_batch`` volunteers, decisions.md#retirement, #batch-size; ``assignment`` "not_aggregated")

Coordinate-less rows (one per classification that kept no click, decisions.md#click-ledger) are followed
too: box rows = rows in Z~_n + rows not drawn; rows in Z~_n = assignment rows, whose
``assignment`` is ``clump`` / ``dummy`` / ``not_aggregated`` (a box) or ``empty`` (the row of a
classification that marked nothing; all rows of a pre-retired empty subject are of this kind).

Independence: the export is read here in one light streaming pass (pyarrow for the CSV, this
module's own parsing of ``annotations``, with ``orjson`` when it is installed and the standard
``json`` module wherever the two could differ); marks are counted per row for the clump task and
for every other drawing task, and every row is put in one category by re-applying the reader's
documented selection in its order (workflow, version, multiple subjects, repeated
classification id; then kept when its classification is in boxes.parquet; otherwise a repeated
volunteer-subject pair, or the first classification (by created_at) of a pair the reader
dropped: with ``missing_subjects: drop`` a subject missing from the subject export, else, read
from the row's own JSON fields against the limits listed in the report, a flagged volunteer, a
field too large or nested too deep, too many marks or a flag). The numbers the reader reports
(clicks_report.json) are *compared* with these counts, never used in their place, except for
the per-reason split of clicks the reader dropped inside kept classifications, whose total is
checked against the ledger's own count. A row that fits no category is ``unexplained`` and
unbalances the ledger.

What counts as a click: an element of the value list of a drawing-task annotation (combo tasks
unpacked), whatever its shape: a point, a rectangle, circle or ellipse (kept as boxes of their
drawn extent) or a polygon or line (dropped as ``unsupported_shape``) is one click each
(docs/decisions.md#shapes). An annotation is a drawing one when its ``taskType`` says so
(front-end monorepo) or, in classic exports, when its value is a list that holds a mark (a
dict) and no survey choice, or an empty list. Answers of question tasks are not clicks.

Outputs: ``ledger.csv`` (one row per n, one column per category, ``balanced``) and
``ledger.json`` (the same numbers, every check with both sides, the failures). When anything
does not add up, :func:`check_ledger` raises :class:`LedgerError` (exit 2, one line naming the
n, the category and the file) and no output is written; every failing check is logged.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import math
import re
from array import array
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from pandas.api.types import is_float_dtype, is_integer_dtype

from clumpscout.data.clicks import drawing_marks, flatten, parse_annotations, task_name
from clumpscout.errors import InputError
from clumpscout.io import read_json
from clumpscout.logs import progress, timed

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
_BLOCK = 1 << 24


class LedgerError(InputError):
    """The ledger does not add up (a click was lost or invented somewhere in the DAG)."""


# ------------------------------------------------------------------ counting marks


def _count_parsed(ann: Any, clump_task: str | None) -> tuple[int, int]:
    """:func:`count_marks` of a parsed ``annotations`` value (what a click is and which task
    it belongs to: :mod:`clumpscout.data.clicks`)."""
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
    is not a JSON list. Parsed by :func:`clumpscout.data.clicks.parse_annotations` (the
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


def read_export_marks(
    path: str | Path, clump_task: str | None, block: int = _BLOCK
) -> pd.DataFrame:
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
        with open(path, "rb") as fh:
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


def _unique_sorted(values: np.ndarray) -> np.ndarray:
    """The distinct values of a sorted integer array (what np.unique gives, much faster)."""
    if len(values) == 0:
        return values.copy()
    return values[np.concatenate(([True], values[1:] != values[:-1]))]


def _run_lengths(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of a sorted integer array and how often each occurs."""
    starts = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    if len(values) == 0:
        starts = starts[:0]
    return values[starts], np.diff(np.append(starts, len(values)))


def _read_subject_ids(path: str | Path, block: int = _BLOCK) -> np.ndarray:
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


def _plain_ints(values: pd.Series) -> np.ndarray | None:
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
    ints = _plain_ints(values)
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


@dataclass
class Check:
    """One equation of the ledger: ``left == right``."""

    n: str
    category: str
    left_name: str
    left: int
    right_name: str
    right: int
    file: str = ""

    @property
    def ok(self) -> bool:
        return int(self.left) == int(self.right)

    def message(self) -> str:
        return (
            f"n={self.n}: category {self.category!r}: {self.left_name} = {self.left} but "
            f"{self.right_name} = {self.right}"
        )

    def as_dict(self) -> dict:
        return {
            "n": self.n,
            "category": self.category,
            "left": self.left_name,
            "left_value": int(self.left),
            "right": self.right_name,
            "right_value": int(self.right),
            "file": self.file,
            "ok": self.ok,
        }


@dataclass
class Ledger:
    """The ledger's numbers (per n) and its checks."""

    export: dict
    per_n: dict[int, dict] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def balanced(self, n: int | None = None) -> bool:
        return all(c.ok for c in self.checks if n is None or c.n in ("all", str(n)))

    def table(self) -> pd.DataFrame:
        rows = []
        for n, d in sorted(self.per_n.items()):
            rows.append({"n": n, **self.export["columns"], **d, "balanced": self.balanced(n)})
        return pd.DataFrame(rows)

    def as_dict(self) -> dict:
        return {
            "balanced": self.balanced(),
            "export": self.export,
            "n": {str(n): d for n, d in sorted(self.per_n.items())},
            "checks": [c.as_dict() for c in self.checks],
            "failures": [c.message() for c in self.failures],
        }


@dataclass
class _ExportTally:
    """The export's rows in categories and the numbers the export-level checks compare."""

    path: Path
    clump_task: str | None
    marks: pd.DataFrame  # read_export_marks + category, clicks
    kept: pd.DataFrame  # the rows of kept classifications
    kept_ids: np.ndarray  # sorted classification ids in boxes.parquet
    box_cid: np.ndarray
    has_xy: np.ndarray
    rows_by: dict
    clicks_by: dict
    reasons: list[str]  # classification drop reasons (+ unexplained)
    click_reasons: list[str]
    rdrop: dict  # the reader's dropped clicks by reason (other tasks aside)
    other_tasks: dict


def _tally_export(
    path: Path, report: dict, boxes: pd.DataFrame, subjects_csv: str | Path | None
) -> _ExportTally:
    """Read the export (its own pass), put every row in a category and tally clicks."""
    clump_task = report.get("clump_task")
    limits = report.get("limits") or {}
    block = max(_BLOCK, 2 * int(limits.get("max_field_bytes", 0)))
    with timed(f"ledger: counting the clicks of {path.name}", log):
        marks = read_export_marks(path, clump_task, block)
    subject_ids = None
    if report.get("missing_subjects") == "drop" and subjects_csv is not None:
        subject_ids = _read_subject_ids(subjects_csv, block)
    box_cid = boxes["classification_id"].to_numpy(dtype=np.int64)
    kept_ids = _unique_sorted(np.sort(box_cid))
    cat = classify_rows(
        marks, report, kept_ids, subject_ids, lambda r: read_row_checks(path, r, limits, block)
    )
    marks["category"] = cat
    marks["clicks"] = marks["clump_marks"] + marks["other_marks"]
    by = marks.groupby("category", sort=True)
    rdrop = dict(report.get("dropped_clicks", {}))
    rdrop.pop("other_task", None)
    return _ExportTally(
        path=path,
        clump_task=clump_task,
        marks=marks,
        kept=marks[cat == "kept"],
        kept_ids=kept_ids,
        box_cid=box_cid,
        has_xy=boxes["x1"].notna().to_numpy(),
        rows_by=by.size().to_dict(),
        clicks_by=by["clicks"].sum().to_dict(),
        reasons=sorted(
            (
                set(CLASSIFICATION_REASONS)
                | set(report.get("dropped_classifications", {}))
                | set(cat)
            )
            - {"kept"}
            | {UNEXPLAINED}
        ),
        click_reasons=sorted(set(CLICK_REASONS) | set(rdrop)),
        rdrop=rdrop,
        other_tasks=dict(sorted(report.get("other_task_clicks", {}).items())),
    )


def _export_columns(x: _ExportTally, n_box_rows: int) -> dict[str, int]:
    """The export-level columns of ledger.csv."""
    n_kept_clicks = int(x.has_xy.sum())
    columns: dict[str, int] = {
        "export_rows": len(x.marks),
        "export_clicks": int(x.marks["clicks"].sum()),
    }
    for r in x.reasons:
        columns[f"dropped_cls_{r}"] = int(x.clicks_by.get(r, 0))
    for r in x.click_reasons:
        columns[f"dropped_click_{r}"] = int(x.rdrop.get(r, 0))
    for t, v in x.other_tasks.items():
        columns[f"other_task_{t}"] = int(v)
    columns["kept_clicks"] = n_kept_clicks
    columns["kept_classifications"] = int(len(x.kept))
    columns["boxes_rows"] = n_box_rows
    columns["boxes_empty_rows"] = int(n_box_rows - n_kept_clicks)
    return columns


def _export_checks(
    x: _ExportTally, report: dict, n_box_rows: int, boxes_path: object, report_path: object
) -> list[Check]:
    """The ledger's counts against boxes.parquet and the reader's report."""
    E = "all"
    exp = str(x.path)
    marks, kept, kept_ids, rows_by, rdrop = x.marks, x.kept, x.kept_ids, x.rows_by, x.rdrop
    reasons, other_tasks = x.reasons, x.other_tasks
    kept_clump = int(kept["clump_marks"].sum())
    kept_other = int(kept["other_marks"].sum())
    n_kept_clicks = int(x.has_xy.sum())
    checks = [
        Check(
            E,
            "unexplained classifications",
            "export rows in no category",
            int(rows_by.get(UNEXPLAINED, 0)),
            "expected",
            0,
            exp,
        ),
        Check(
            E,
            "kept classifications",
            "export rows kept (ledger)",
            len(kept),
            "classifications in boxes.parquet",
            len(kept_ids),
            str(boxes_path),
        ),
        Check(
            E,
            "kept classifications",
            "classifications in boxes.parquet",
            len(kept_ids),
            "classifications_kept (reader report)",
            int(report.get("classifications_kept", -1)),
            str(report_path),
        ),
        Check(
            E,
            "export rows",
            "rows counted by the ledger",
            len(marks),
            "rows_read (reader report)",
            int(report.get("rows_read", -1)),
            exp,
        ),
    ]
    rep_cls = report.get("dropped_classifications", {})
    for r in reasons:
        if r == UNEXPLAINED:
            continue
        checks.append(
            Check(
                E,
                f"dropped_cls_{r}",
                "dropped classifications counted by the ledger",
                int(rows_by.get(r, 0)),
                "the reader's count",
                int(rep_cls.get(r, 0)),
                str(report_path),
            )
        )
    checks += [
        Check(
            E,
            "clump-task clicks of kept classifications",
            "clicks counted by the ledger",
            kept_clump,
            "kept + dropped clicks (reader report)",
            int(report.get("clicks_kept", -1)) + int(sum(rdrop.values())),
            str(report_path),
        ),
        Check(
            E,
            "other-task clicks",
            "clicks counted by the ledger",
            kept_other,
            "other_task_clicks (reader report)",
            int(sum(other_tasks.values())),
            str(report_path),
        ),
        Check(
            E,
            "kept_clicks",
            "box rows with coordinates",
            n_kept_clicks,
            "clicks_kept (reader report)",
            int(report.get("clicks_kept", -1)),
            str(boxes_path),
        ),
        Check(
            E,
            "boxes_empty_rows",
            "box rows without coordinates",
            n_box_rows - n_kept_clicks,
            "empty classifications (reader report)",
            int(report.get("empty_classifications", 0))
            + int(report.get("classifications_emptied_by_drops", 0)),
            str(boxes_path),
        ),
    ]
    checks.append(_invented_check(x, boxes_path))
    unparsed = marks[~marks["json_ok"]]
    bad_kept = unparsed[unparsed["category"] == "kept"]
    checks.append(
        Check(
            E,
            "kept classifications",
            "kept rows whose annotations the ledger cannot parse",
            len(bad_kept),
            "expected",
            0,
            exp,
        )
    )
    return checks


def _invented_check(x: _ExportTally, boxes_path: object) -> Check:
    """No classification has more kept clicks than it has clump-task marks (nothing invented),
    per classification in boxes.parquet (sorted by id: its box rows with coordinates)."""
    xy_ids, xy_counts = _run_lengths(np.sort(x.box_cid[x.has_xy]))
    per_cls = np.zeros(len(x.kept_ids), dtype=np.int64)
    per_cls[np.searchsorted(x.kept_ids, xy_ids)] = xy_counts
    kept_cid = _plain_ints(x.kept["classification_id"])
    if kept_cid is None:
        kept_cid = pd.to_numeric(x.kept["classification_id"]).astype(np.int64)
    ledger_cls = x.kept.assign(cid=kept_cid)
    marks_of = ledger_cls.set_index("cid")["clump_marks"].reindex(pd.Index(x.kept_ids)).fillna(-1)
    invented = int((per_cls > marks_of.to_numpy()).sum())
    return Check(
        "all",
        "invented clicks",
        "classifications with more boxes than clump-task marks",
        invented,
        "expected",
        0,
        str(boxes_path),
    )


def _export_summary(x: _ExportTally, columns: dict[str, int], n_box_rows: int) -> dict:
    """The ``export`` part of ledger.json."""
    marks = x.marks
    return {
        "classifications_csv": str(x.path),
        "clump_task": x.clump_task,
        "rows": len(marks),
        "clicks": int(marks["clicks"].sum()),
        "clump_task_clicks": int(marks["clump_marks"].sum()),
        "classifications": {
            str(k): {"rows": int(v), "clicks": int(x.clicks_by.get(k, 0))}
            for k, v in sorted(x.rows_by.items())
        },
        "dropped_clicks_in_kept_classifications": {
            r: int(x.rdrop.get(r, 0)) for r in x.click_reasons
        },
        "other_task_clicks": x.other_tasks,
        "kept_clicks": int(x.has_xy.sum()),
        "box_rows": n_box_rows,
        # rows the reader never parsed (dropped classifications) whose annotations are not
        # JSON: their clicks cannot be counted (0 is used)
        "dropped_rows_unparsed_json": int((~marks["json_ok"]).sum()),
        "columns": columns,
    }


def export_ledger(
    classifications_csv: str | Path,
    report: dict,
    boxes: pd.DataFrame,
    subjects_csv: str | Path | None = None,
    boxes_path: object = "boxes.parquet",
    report_path: object = "clicks_report.json",
) -> tuple[dict, list[Check]]:
    """Account for the export's clicks down to the box rows (the part shared by every n):
    the export's rows in categories (:func:`_tally_export`), the columns of ledger.csv, the
    checks against boxes.parquet and the reader's report, and the summary for ledger.json."""
    x = _tally_export(Path(classifications_csv), report, boxes, subjects_csv)
    n_box_rows = len(boxes)
    columns = _export_columns(x, n_box_rows)
    checks = _export_checks(x, report, n_box_rows, boxes_path, report_path)
    return _export_summary(x, columns, n_box_rows), checks


# ------------------------------------------------------------------ per n


@dataclass(frozen=True)
class BoxIndex:
    """boxes.parquet's classification ids, indexed once for every n."""

    xy: np.ndarray  # the row has coordinates
    ids: np.ndarray  # the distinct classification ids, sorted
    row_id: np.ndarray  # the position in ``ids`` of every row's classification

    @classmethod
    def of(cls, boxes: pd.DataFrame) -> BoxIndex:
        cid = boxes["classification_id"].to_numpy(dtype=np.int64)
        order = np.argsort(cid, kind="stable")
        ordered = cid[order]
        first = np.concatenate(([True], ordered[1:] != ordered[:-1]))[: len(cid)]
        row_id = np.empty(len(cid), dtype=np.int64)
        row_id[order] = np.cumsum(first) - 1
        return cls(boxes["x1"].notna().to_numpy(), ordered[first], row_id)

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``self.ids``, found) of sorted distinct ``ids``."""
        pos = np.searchsorted(self.ids, ids)
        found = pos < len(self.ids)
        found[found] = self.ids[pos[found]] == ids[found]
        return pos, found


@dataclass
class _ZnTally:
    """The counts of one n: box rows drawn into Z~_n or not, and the assignments by kind."""

    not_drawn_rows: int  # box rows whose classification is not in Z~_n
    not_drawn: int  # ... of them with coordinates (clicks)
    invented_cls: int  # classifications of Z~_n not in boxes.parquet
    clustered: int
    dummy: int
    not_agg: int
    empty: int
    other_kinds: int  # assignment rows of an unknown kind
    cluster_mismatch: int  # rows whose cluster / assignment / coordinates disagree
    rows_differ: int  # classifications with a different row count in Z~_n and assignments


def _drawn(bi: BoxIndex, z_sorted: np.ndarray) -> tuple[int, int, int]:
    """(box rows not drawn into Z~_n, clicks not drawn, classifications of Z~_n unknown to
    boxes.parquet)."""
    pos, found = bi.lookup(_unique_sorted(z_sorted))
    drawn_cls = np.zeros(len(bi.ids), dtype=bool)
    drawn_cls[pos[found]] = True
    drawn = drawn_cls[bi.row_id]  # the box row's classification is in Z~_n
    return int((~drawn).sum()), int((~drawn & bi.xy).sum()), int((~found).sum())


def _assignment_kinds(assignments: pd.DataFrame) -> tuple[int, int, int, int, int, int]:
    """(clustered, dummy, not_aggregated, empty, unknown kind, mismatched) assignment rows:
    by the ``assignment`` column (derived from ``cluster`` and the coordinates when there is
    none); mismatched rows are those whose cluster / assignment / coordinates disagree."""
    a_xy = assignments["x1"].notna().to_numpy()
    cluster = assignments["cluster"]
    if is_integer_dtype(cluster.dtype) or is_float_dtype(cluster.dtype):
        cl = cluster.to_numpy(dtype=float)  # what pd.to_numeric would give back
    else:
        cl = pd.to_numeric(cluster, errors="coerce").to_numpy(dtype=float)
    labels = assignments["assignment"] if "assignment" in assignments.columns else None
    if labels is not None and isinstance(labels.dtype, pd.StringDtype) and not labels.hasnans:
        # strings only: counting a kind is comparing with it (as the Counter below does), done
        # on the codes of the distinct labels
        codes, uniques = pd.factorize(labels)
        code_of = {u: i for i, u in enumerate(uniques)}
        is_clump, is_dummy, is_not_agg, is_empty = (
            codes == code_of[k] if k in code_of else np.zeros(len(codes), dtype=bool)
            for k in ("clump", "dummy", "not_aggregated", "empty")
        )
        clustered = int(is_clump.sum())
        dummy = int(is_dummy.sum())
        not_agg = int(is_not_agg.sum())
        empty = int(is_empty.sum())
        other_kinds = len(labels) - clustered - dummy - not_agg - empty
        is_box = is_clump | is_dummy | is_not_agg
    else:
        if labels is not None:
            kind = labels.astype(object).to_numpy()
        else:  # derive the aggregation's categories from cluster and the coordinates
            kind = np.where(
                cl >= 0,
                "clump",
                np.where(cl == -1, "dummy", np.where(a_xy, "not_aggregated", "empty")),
            ).astype(object)
        kinds = Counter(kind.tolist())
        clustered = int(kinds.get("clump", 0))
        dummy = int(kinds.get("dummy", 0))
        not_agg = int(kinds.get("not_aggregated", 0))
        empty = int(kinds.get("empty", 0))
        other_kinds = sum(
            v for k, v in kinds.items() if k not in ("clump", "dummy", "not_aggregated", "empty")
        )
        is_clump, is_dummy, is_empty = (kind == "clump"), (kind == "dummy"), (kind == "empty")
        is_box = np.isin(kind, ["clump", "dummy", "not_aggregated"])
    cluster_mismatch = int(
        (is_clump != (cl >= 0)).sum()
        + (is_dummy != (cl == -1)).sum()
        + (is_empty & a_xy).sum()
        + (is_box & ~a_xy).sum()
    )
    return clustered, dummy, not_agg, empty, other_kinds, cluster_mismatch


def _rows_differ(z_sorted: np.ndarray, z_cid: np.ndarray, a_cid: np.ndarray) -> int:
    """Classifications whose row count differs between Z~_n and the assignments."""
    z_keys, z_counts = _run_lengths(z_sorted)
    if np.array_equal(a_cid, z_cid):
        a_keys, a_counts = z_keys, z_counts
    else:
        a_keys, a_counts = _run_lengths(np.sort(a_cid))
    if np.array_equal(z_keys, a_keys):
        rows_differ = int((z_counts != a_counts).sum())
    else:
        zc = pd.Series(z_cid).value_counts()
        ac = pd.Series(a_cid).value_counts()
        diff = zc.sub(ac, fill_value=0)
        rows_differ = int((diff != 0).sum())

    return rows_differ


def subsample_ledger(
    n: int,
    boxes: pd.DataFrame,
    zn: pd.DataFrame,
    zn_report: dict,
    assignments: pd.DataFrame,
    agg_report: dict,
    paths: dict[str, str],
    box_index: BoxIndex | None = None,
) -> tuple[dict, list[Check]]:
    """Account for the box rows in Z~_n and its assignments (one n).

    ``box_index``: :meth:`BoxIndex.of` ``boxes`` (made here when not given).
    """
    bi = BoxIndex.of(boxes) if box_index is None else box_index
    z_cid = zn["classification_id"].to_numpy(dtype=np.int64)
    z_xy = zn["x1"].notna().to_numpy()
    z_sorted = np.sort(z_cid)
    a_cid = assignments["classification_id"].to_numpy(dtype=np.int64)
    x = _ZnTally(
        *_drawn(bi, z_sorted),
        *_assignment_kinds(assignments),
        _rows_differ(z_sorted, z_cid, a_cid),
    )
    checks = _subsample_checks(n, x, boxes, zn, zn_report, assignments, agg_report, paths, bi)
    not_drawn, not_drawn_rows = x.not_drawn, x.not_drawn_rows
    clustered, dummy, not_agg, empty = x.clustered, x.dummy, x.not_agg, x.empty
    cols = {
        "not_drawn": not_drawn,
        "in_zn": int(z_xy.sum()),
        "clustered": clustered,
        "dummy": dummy,
        "not_aggregated": not_agg,
        "not_drawn_rows": not_drawn_rows,
        "zn_rows": len(zn),
        "zn_empty_rows": int((~z_xy).sum()),
        "assignment_rows": len(assignments),
        "assignment_empty_rows": empty,
    }
    return cols, checks


def _subsample_checks(
    n: int,
    x: _ZnTally,
    boxes: pd.DataFrame,
    zn: pd.DataFrame,
    zn_report: dict,
    assignments: pd.DataFrame,
    agg_report: dict,
    paths: dict[str, str],
    bi: BoxIndex,
) -> list[Check]:
    """The checks of one n: Z~_n against boxes.parquet and the subsample report, the
    assignments against Z~_n and the aggregate report."""
    N = str(n)
    b_xy = bi.xy
    z_xy = zn["x1"].notna().to_numpy()
    not_drawn, not_drawn_rows, invented_cls = x.not_drawn, x.not_drawn_rows, x.invented_cls
    clustered, dummy, not_agg, empty = x.clustered, x.dummy, x.not_agg, x.empty
    other_kinds, cluster_mismatch, rows_differ = x.other_kinds, x.cluster_mismatch, x.rows_differ
    zp, ap = paths["subsample"], paths["assignments"]
    checks = [
        Check(
            N,
            "invented classifications",
            "classifications of Z~_n not in boxes.parquet",
            invented_cls,
            "expected",
            0,
            zp,
        ),
        Check(
            N,
            "box rows",
            "rows in Z~_n + rows not drawn",
            len(zn) + not_drawn_rows,
            "box rows",
            len(boxes),
            zp,
        ),
        Check(
            N,
            "not_drawn + in_zn",
            "clicks in Z~_n + clicks not drawn",
            int(z_xy.sum()) + not_drawn,
            "kept clicks (box rows with coordinates)",
            int(b_xy.sum()),
            zp,
        ),
        Check(
            N,
            "Z~_n rows",
            "rows of Z~_n",
            len(zn),
            "n_rows_out (subsample report)",
            int(zn_report.get("n_rows_out", -1)),
            paths.get("subsample_report", zp),
        ),
        Check(
            N,
            "box rows",
            "box rows",
            len(boxes),
            "n_rows_in (subsample report)",
            int(zn_report.get("n_rows_in", -1)),
            paths.get("subsample_report", zp),
        ),
        Check(
            N, "assignment rows", "rows in Z~_n", len(zn), "assignment rows", len(assignments), ap
        ),
        Check(
            N,
            "assignment rows",
            "rows in Z~_n",
            len(zn),
            "clustered + dummy + not_aggregated + empty assignment rows",
            clustered + dummy + not_agg + empty,
            ap,
        ),
        Check(
            N,
            "assignment rows per classification",
            "classifications whose row count differs between Z~_n and the assignments",
            rows_differ,
            "expected",
            0,
            ap,
        ),
        Check(
            N,
            "in_zn",
            "clicks in Z~_n",
            int(z_xy.sum()),
            "clustered + dummy + not_aggregated",
            clustered + dummy + not_agg,
            ap,
        ),
        Check(
            N,
            "empty",
            "rows of Z~_n without coordinates",
            int((~z_xy).sum()),
            "empty assignment rows",
            empty,
            ap,
        ),
        Check(
            N,
            "assignment",
            "rows whose cluster / assignment / coordinates disagree",
            cluster_mismatch,
            "expected",
            0,
            ap,
        ),
        Check(
            N, "assignment", "rows of an unknown assignment kind", other_kinds, "expected", 0, ap
        ),
    ]
    rp = paths.get("aggregate_report", ap)
    for key, value, what in (
        ("boxes_on_dummy", dummy, "dummy"),
        ("boxes_not_aggregated", not_agg, "not_aggregated"),
        ("boxes", int(z_xy.sum()), "in_zn"),
        ("empty_rows", empty, "empty"),
        ("rows", len(zn), "assignment rows"),
    ):
        if key in agg_report:
            checks.append(
                Check(
                    N,
                    what,
                    f"{key} (aggregate report)",
                    int(agg_report[key]),
                    "counted by the ledger",
                    value,
                    rp,
                )
            )
    return checks


def _total_check(n: int, export: dict, cols: dict, path: str) -> Check:
    c = export["columns"]
    parts = (
        sum(
            v
            for k, v in c.items()
            if k.startswith(("dropped_cls_", "dropped_click_", "other_task_"))
        )
        + cols["not_drawn"]
        + cols["clustered"]
        + cols["dummy"]
        + cols["not_aggregated"]
    )
    return Check(
        str(n),
        "export_clicks",
        "clicks in the export (every task)",
        c["export_clicks"],
        "dropped + other tasks + not drawn + clustered + dummy + not aggregated",
        parts,
        path,
    )


# ------------------------------------------------------------------ main API


def _read_parquet(path: str | Path, columns: list[str] | None = None) -> pd.DataFrame:
    try:
        if columns is not None:
            have = set(pq.read_schema(path).names)
            missing = [c for c in columns if c not in have and c != "assignment"]
            if missing:
                raise InputError(f"lacks column(s) {', '.join(missing)}", path=path)
            columns = [c for c in columns if c in have]
        return pd.read_parquet(path, columns=columns)
    except (OSError, ValueError, pa.ArrowInvalid) as exc:
        raise InputError(f"cannot read Parquet file: {exc}", path=path) from None


def build_ledger(
    classifications_csv: str | Path,
    clicks_report: str | Path,
    boxes: str | Path,
    per_n: dict[int, dict[str, str]],
    subjects_csv: str | Path | None = None,
) -> Ledger:
    """The ledger of every n (decisions.md#click-ledger).

    ``per_n`` maps n to the paths ``subsample`` (Z~_n boxes.parquet), ``subsample_report``,
    ``assignments`` and ``aggregate_report``. Returns the :class:`Ledger`; use
    :func:`check_ledger` to fail when it does not add up.
    """
    report = read_json(clicks_report)
    bx = _read_parquet(boxes, ["classification_id", "x1"])
    export, checks = export_ledger(
        classifications_csv, report, bx, subjects_csv, boxes_path=boxes, report_path=clicks_report
    )
    ledger = Ledger(export=export, checks=checks)
    box_index = BoxIndex.of(bx)
    for n in sorted(per_n):
        p = {k: str(v) for k, v in per_n[n].items()}
        zn = _read_parquet(p["subsample"], ["classification_id", "x1"])
        asg = _read_parquet(p["assignments"], ["classification_id", "x1", "cluster", "assignment"])
        zrep = read_json(p["subsample_report"]) if p.get("subsample_report") else {}
        arep = read_json(p["aggregate_report"]) if p.get("aggregate_report") else {}
        cols, ch = subsample_ledger(n, bx, zn, zrep, asg, arep, p, box_index)
        ch.append(_total_check(n, export, cols, p["assignments"]))
        ledger.per_n[int(n)] = cols
        ledger.checks += ch
    for c in ledger.failures:
        log.error("ledger: %s (%s)", c.message(), c.file)
    log.info(
        "ledger: %d checks over %d n, %d failed; export %s clicks in %s rows",
        len(ledger.checks),
        len(per_n),
        len(ledger.failures),
        f"{export['clicks']:,}",
        f"{export['rows']:,}",
    )
    return ledger


def check_ledger(ledger: Ledger) -> None:
    """Raise :class:`LedgerError` naming the first n and category that do not add up."""
    bad = ledger.failures
    if bad:
        first = bad[0]
        more = f" (and {len(bad) - 1} more failed check(s); see the log)" if len(bad) > 1 else ""
        raise LedgerError(
            f"the click ledger does not add up: {first.message()}{more}", path=first.file
        )


def write_ledger(ledger: Ledger, out_csv: str | Path, out_json: str | Path) -> None:
    """Write ledger.csv and ledger.json atomically."""
    from clumpscout.io import write_csv, write_json

    write_csv(ledger.table(), out_csv)
    write_json(ledger.as_dict(), out_json)


def run_ledger(
    classifications_csv,
    clicks_report,
    boxes,
    per_n: dict[int, dict[str, str]],
    out_csv,
    out_json,
    subjects_csv=None,
) -> Ledger:
    """Build, check (raises :class:`LedgerError`; nothing written) and write the ledger."""
    ledger = build_ledger(classifications_csv, clicks_report, boxes, per_n, subjects_csv)
    if not ledger.balanced():
        log.error("ledger (not written): %s", json.dumps(ledger.as_dict(), sort_keys=True))
    check_ledger(ledger)
    write_ledger(ledger, out_csv, out_json)
    log.info("wrote %s and %s: every click accounted for", out_csv, out_json)
    return ledger


# ------------------------------------------------------------------ CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--classifications", required=True, help="classification export CSV")
    p.add_argument("--subjects-export", default=None, help="subject export CSV")
    p.add_argument("--clicks-report", required=True, help="clicks_report.json of extract")
    p.add_argument("--boxes", required=True, help="boxes.parquet")
    p.add_argument("--n", type=int, nargs="+", required=True, help="the subsample sizes")
    p.add_argument(
        "--subsamples", required=True, help="folder with n{n}/boxes.parquet, report.json"
    )
    p.add_argument(
        "--aggregate", required=True, help="folder with n{n}/assignments.parquet, report.json"
    )
    p.add_argument("--out", required=True, help="ledger.csv (and ledger.json beside it)")


def per_n_paths(subsamples: str | Path, aggregate: str | Path, ns) -> dict[int, dict[str, str]]:
    """The per-n input paths of the workflow's results layout (decisions.md#click-ledger)."""
    out = {}
    for n in ns:
        s, a = Path(subsamples) / f"n{n}", Path(aggregate) / f"n{n}"
        out[int(n)] = {
            "subsample": str(s / "boxes.parquet"),
            "subsample_report": str(s / "report.json"),
            "assignments": str(a / "assignments.parquet"),
            "aggregate_report": str(a / "report.json"),
        }
    return out


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    run_ledger(
        args.classifications,
        args.clicks_report,
        args.boxes,
        per_n_paths(args.subsamples, args.aggregate, args.n),
        out,
        out.with_suffix(".json"),
        subjects_csv=args.subjects_export,
    )
    return 0
