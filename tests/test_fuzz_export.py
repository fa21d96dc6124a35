"""Hostile exports: no bytes of a classification export, a subject export or a galaxy catalogue
make ``clumpscout extract`` or ``clumpscout subjects`` crash.

Hypothesis mutates the bad-input suite's valid 5-subject export (tests/test_bad_input.py; the
real Penguin Watch export in ../shared too, when it is there): JSON truncated, duplicated, nested
deeply or holding wrong types and huge numbers anywhere; rows repeated, dropped or flooded with
marks made too fast; bytes that are not UTF-8, BOMs, NULs, CR/LF mixes, extra and missing
columns, stray quotes and newlines, files cut short. Every run goes through the real CLI
(in-process) and must end

- with exit 0, every output complete (no temporary file), every classification counted (kept or
  dropped by reason) and the click ledger (clumpscout.data.ledger, which re-reads the export on its
  own) balanced; or
- with exit 2 and one ``error:`` line naming the input file (and no output at all).

CI runs a few hundred cases with a fixed seed; ``benchmarks/fuzz_export.py`` runs 10,000 or
more and saves each failure as a case in tests/data/fuzz_regressions/, replayed here.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import csv
import functools
import gzip
import io
import json
import logging
import tempfile
import tracemalloc
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_bad_input import (
    CATALOGUE_HEADER,
    EXPORT_HEADER,
    SUBJECT_IDS,
    SUBJECTS_HEADER,
    catalogue_row,
    csv_bytes,
    point,
    subject_row,
    valid_export_rows,
)

from clumpscout.cli import main as cli_main
from clumpscout.data.ledger import export_ledger
from clumpscout.data.zooniverse import extract_clicks

REGRESSIONS = Path(__file__).resolve().parent / "data" / "fuzz_regressions"
PENGUIN = Path(__file__).resolve().parents[2] / "shared/data/zooniverse_exports/penguin_watch"
PENGUIN_ARGS = ("--workflow-id", "6465", "--workflow-version", "52.76", "--clump-task", "T0")
PENGUIN_ARGS += ("--unusual-tools", "--tools", "0", "1", "2")

# --------------------------------------------------------------------------- a fuzz case


@dataclass
class FuzzCase:
    """Input files (bytes) and the command(s) to run on them."""

    target: str  # the file that was mutated: export | subjects_export | catalogue
    files: dict[str, bytes]  # export, subjects_export, catalogue
    args: list[str] = field(default_factory=list)  # extra ``clumpscout extract`` options
    steps: list[str] = field(default_factory=list)  # what was done to the valid files

    def to_json(self) -> dict:
        packed = {
            k: base64.b64encode(gzip.compress(v, mtime=0)).decode() for k, v in self.files.items()
        }
        return {"target": self.target, "args": self.args, "steps": self.steps, "files": packed}

    @classmethod
    def from_json(cls, d: dict) -> FuzzCase:
        files = {k: gzip.decompress(base64.b64decode(v)) for k, v in d["files"].items()}
        return cls(d["target"], files, list(d.get("args", [])), list(d.get("steps", [])))


def _valid_base() -> dict:
    return {
        "export": (list(EXPORT_HEADER), valid_export_rows()),
        "subjects_export": (list(SUBJECTS_HEADER), [subject_row(s) for s in SUBJECT_IDS]),
        "catalogue": (list(CATALOGUE_HEADER), [catalogue_row(s) for s in SUBJECT_IDS]),
        "args": [],
    }


def _read_rows(path: Path, n: int, keep=lambda r: True) -> tuple[list[str], list[dict]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = [r for r in reader if keep(r)][:n]
        return list(reader.fieldnames or []), rows


def penguin_base(n: int = 40) -> dict | None:
    """The first ``n`` classifications of the real Penguin Watch export (workflow 6465, version
    52.76) and their subjects; None when ../shared is absent."""
    if not PENGUIN.is_dir():
        return None
    header, rows = _read_rows(
        PENGUIN / "penguin-watch-classifications-trim.csv",
        n,
        lambda r: r["workflow_version"] == "52.76",
    )
    sids = {r["subject_ids"] for r in rows}
    s_header, s_rows = _read_rows(
        PENGUIN / "penguin-watch-subjects-trim.csv", 10**6, lambda r: r["subject_id"] in sids
    )
    return {
        "export": (header, rows),
        "subjects_export": (s_header, s_rows),
        "catalogue": (list(CATALOGUE_HEADER), [catalogue_row(s) for s in SUBJECT_IDS]),
        "args": list(PENGUIN_ARGS),
    }


# --------------------------------------------------------------------------- mutations

#: numbers JSON parsers disagree on or cannot hold
HUGE_NUMBERS = (
    "1e400", "-1e400", "1e-400", "1" + "0" * 400, "-" + "9" * 30, "9223372036854775808",
    "-9223372036854775809", "18446744073709551616", "NaN", "Infinity", "-Infinity", "-0",
    "0.30000000000000004", "1E+2", "5e-324",
)  # fmt: skip
#: text JSON and CSV readers trip over
NASTY_TEXT = (
    "", " ", "\x00", "\ufeff", "\r", "\n", "\r\n", '"', '""', ",", "\\", "\\u0000", "null",
    "[]", "{}", "[", "{", "]", "}", '{"task": "T1"}', "T1", "nan", "inf", "-1", "1e400",
    "2021-13-45 99:99:99 UTC", "0x10", "١٢٣", "𝟙𝟚𝟛", "\u2028", "a\x00b", "1;2", " 7 ",
)  # fmt: skip
DEPTHS = (8, 63, 64, 65, 200, 999, 1000, 1025, 5000, 100_000)

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(["T0", "T1", "point", "drawing", "x", "y", "tool", "value", "task"])
)
json_value = st.recursive(
    json_leaf,
    lambda c: (
        st.lists(c, max_size=4)
        | st.dictionaries(
            st.sampled_from(["x", "y", "tool", "frame", "task", "value", "toolType", "taskType"])
            | st.text(max_size=5),
            c,
            max_size=4,
        )
    ),
    max_leaves=12,
)
RAW = "\x01RAW\x01"  # placeholder replaced by raw JSON text (huge numbers)


def deep(n: int, kind: str) -> str:
    if kind == "array":
        return "[" * n + "]" * n
    if kind == "object":
        return '{"a":' * n + "1" + "}" * n
    return "[" * n  # cut short


@st.composite
def hostile_json(draw) -> str:
    """JSON text (or almost): wrong types, huge numbers, deep nesting, truncation."""
    kind = draw(st.sampled_from(["value", "number", "deep", "nasty", "marks"]))
    if kind == "value":
        return json.dumps(draw(json_value), allow_nan=True)
    if kind == "number":
        return draw(st.sampled_from(HUGE_NUMBERS))
    if kind == "deep":
        return deep(
            draw(st.sampled_from(DEPTHS)), draw(st.sampled_from(["array", "object", "cut"]))
        )
    if kind == "marks":
        n = draw(st.sampled_from([0, 1, 2, 300, 301, 1000, 1001, 5000]))
        return json.dumps([{"task": "T1", "value": [point(1.0, 2.0)] * n}])
    return draw(st.sampled_from(NASTY_TEXT))


def _walk(obj, path: list[int]):
    """(container, key) of the node that ``path`` leads to (indices taken modulo the size)."""
    parent, key = None, None
    node = obj
    for step in path:
        if isinstance(node, list) and node:
            k = step % len(node)
        elif isinstance(node, dict) and node:
            k = sorted(node)[step % len(node)]
        else:
            break
        parent, key, node = node, k, node[k]
    return parent, key


def mutate_json(text: str, path: list[int], how: str, new) -> str:
    """Replace, delete or re-type the node of JSON ``text`` at ``path``."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return text
    parent, key = _walk(obj, path)
    if parent is None:
        return json.dumps(new, allow_nan=True) if how != "raw" else new
    if how == "delete":
        del parent[key]
    elif how == "raw":
        parent[key] = RAW
        return json.dumps(obj, allow_nan=True).replace(json.dumps(RAW), new, 1)
    elif how == "stringify":
        parent[key] = json.dumps(parent[key], allow_nan=True)
    else:
        parent[key] = new
    return json.dumps(obj, allow_nan=True)


def _json_or(text, default, kind: type):
    try:
        value = json.loads(text)
    except (ValueError, RecursionError, TypeError):
        return default
    return value if isinstance(value, kind) and value else default


def flood(row: dict, n: int, seconds: float) -> None:
    """Classification ``row`` with ``n`` clump marks made in ``seconds``."""
    ann = _json_or(row["annotations"], [{"task": "T1", "value": []}], list)
    if not isinstance(ann[-1], dict):
        ann[-1] = {"task": "T1"}
    ann[-1]["value"] = [point(10.0 + i % 300, 20.0 + i % 200) for i in range(n)]
    row["annotations"] = json.dumps(ann, allow_nan=True)
    md = _json_or(row["metadata"], {}, dict)
    start = pd.Timestamp("2021-03-01T12:00:00.000Z")
    md["started_at"] = start.isoformat()
    md["finished_at"] = (start + pd.Timedelta(seconds=seconds)).isoformat()
    row["metadata"] = json.dumps(md, allow_nan=True)


def _set(obj: dict | list, key, how: str, new) -> str:
    """``obj[key]`` set to ``new`` (``how`` "raw": raw JSON text), or deleted; the marker to
    replace with the raw text afterwards ("" for none)."""
    if how == "delete":
        if isinstance(obj, dict):
            obj.pop(key, None)
        return ""
    obj[key] = RAW if how == "raw" else new
    return new if how == "raw" else ""


def _dump(obj, raw: str) -> str:
    text = json.dumps(obj, allow_nan=True)
    return text.replace(json.dumps(RAW), raw, 1) if raw else text


def mutate_mark(text: str, k: int, key: str, how: str, new) -> str:
    """Change key ``key`` of mark ``k`` (of every drawing task, counted modulo) of annotations
    ``text``; key "*" replaces the whole mark."""
    ann = _json_or(text, None, list)
    values = [
        a["value"] for a in ann or [] if isinstance(a, dict) and isinstance(a.get("value"), list)
    ]
    slots = [(v, j) for v in values for j in range(len(v))]
    if not slots:
        return text
    v, j = slots[k % len(slots)]
    if key == "*" or not isinstance(v[j], dict):
        return _dump(ann, _set(v, j, "set" if how == "delete" else how, new))
    return _dump(ann, _set(v[j], key, how, new))


def mutate_task(text: str, k: int, key: str, how: str, new) -> str:
    """Change key ``key`` of annotation ``k`` (modulo) of annotations ``text``."""
    ann = _json_or(text, None, list)
    if not ann:
        return text
    a = ann[k % len(ann)]
    if not isinstance(a, dict):
        return text
    return _dump(ann, _set(a, key, how, new))


MARK_KEYS = ("x", "y", "tool", "frame", "toolIndex", "toolType", "tool_label", "details", "r", "*")
TASK_KEYS = ("task", "value", "taskType", "task_label")
#: selection columns of the export, with values that select differently
SELECTION = {
    "workflow_id": ("11804", "11803.0", " 11803 ", "-11803"),
    "workflow_version": ("63.1", "64.2", "65.0", "64", " 64.136 "),
    "subject_ids": ("1001;1002", "4242", "1003", " 1004 ", "1.001e3"),
    "created_at": ("2020-01-01 00:00:00 UTC", "2021-03-01T12:00:00Z", "2021-03-01 12:00:00"),
    "user_name": ("alice", "bob", " alice", "not-logged-in-3f2a9c"),
    "user_id": ("", "700", "701.0"),
}


@st.composite
def json_edit(draw) -> tuple[str, object]:
    """(how, new value): set a JSON value, raw huge-number text, deep nesting, or delete."""
    how = draw(st.sampled_from(["set", "set", "raw", "deep", "delete"]))
    if how == "raw":
        return how, draw(st.sampled_from(HUGE_NUMBERS))
    if how == "deep":
        return "raw", deep(
            draw(st.sampled_from(DEPTHS)), draw(st.sampled_from(["array", "object"]))
        )
    return how, draw(json_value)


JSON_COLUMNS = {
    "export": ("annotations", "metadata", "subject_data"),
    "subjects_export": ("metadata",),
}


@st.composite
def row_mutation(draw, rows: list[dict], header: list[str], target: str) -> str:
    """Change the rows of one file in place; returns what was done."""
    i = draw(st.integers(0, max(len(rows) - 1, 0)))
    ops = ["set", "dup_row", "drop_row", "swap"]
    if target in JSON_COLUMNS:
        ops += ["json", "json", "json", "truncate", "double"]
    if target == "export":
        ops += ["flood", "mark", "mark", "mark", "task", "same_pair", "select", "select"]
    op = draw(st.sampled_from(ops))
    if not rows:
        return "no rows"
    row = rows[i]
    if op == "set":
        col = draw(st.sampled_from(header))
        value = draw(hostile_json() | st.text(max_size=12))
        row[col] = value
        return f"row {i + 1}: {col} = {value[:40]!r}"
    if op == "dup_row":
        rows.insert(draw(st.integers(0, len(rows))), copy.deepcopy(row))
        return f"row {i + 1} repeated"
    if op == "drop_row":
        rows.pop(i)
        return f"row {i + 1} removed"
    if op == "swap":
        j = draw(st.integers(0, len(rows) - 1))
        rows[i], rows[j] = rows[j], rows[i]
        return f"rows {i + 1}, {j + 1} swapped"
    if op == "flood":
        n = draw(st.sampled_from([2, 50, 301, 1001, 3000]))
        seconds = draw(st.sampled_from([0.0, 0.05, 1.0, 3600.0, -5.0]))
        flood(row, n, seconds)
        return f"row {i + 1}: {n} marks in {seconds} s"
    if op in ("mark", "task"):
        k = draw(st.integers(0, 40))
        key = draw(st.sampled_from(MARK_KEYS if op == "mark" else TASK_KEYS))
        how, new = draw(json_edit())
        edit = mutate_mark if op == "mark" else mutate_task
        row["annotations"] = edit(str(row["annotations"]), k, key, how, new)
        return f"row {i + 1}: {op} {k} {key} {how} {str(new)[:40]!r}"
    if op == "same_pair":
        j = draw(st.integers(0, len(rows) - 1))
        row["user_name"], row["subject_ids"] = rows[j]["user_name"], rows[j]["subject_ids"]
        return f"row {i + 1}: volunteer and subject of row {j + 1}"
    if op == "select":
        col = draw(st.sampled_from(sorted(SELECTION)))
        row[col] = draw(st.sampled_from(SELECTION[col]))
        return f"row {i + 1}: {col} = {row[col]!r}"
    col = draw(st.sampled_from(JSON_COLUMNS[target]))
    text = str(row.get(col) or "")
    if op == "truncate":
        cut = draw(st.integers(0, max(len(text) - 1, 0)))
        row[col] = text[:cut]
        return f"row {i + 1}: {col} cut at {cut}"
    if op == "double":
        row[col] = text + text
        return f"row {i + 1}: {col} twice"
    path = draw(st.lists(st.integers(0, 50), max_size=6))
    how = draw(st.sampled_from(["replace", "delete", "raw", "stringify", "deep"]))
    if how == "raw":
        new = draw(st.sampled_from(HUGE_NUMBERS))
    elif how == "deep":
        how, new = (
            "raw",
            deep(draw(st.sampled_from(DEPTHS)), draw(st.sampled_from(["array", "object"]))),
        )
    else:
        new = draw(json_value)
    row[col] = mutate_json(text, path, how, new)
    return f"row {i + 1}: {col} node {path} {how} {str(new)[:40]!r}"


INVALID_UTF8 = (
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\x80",
    b"\xf8\x88\x80\x80\x80",
)


@st.composite
def byte_mutation(draw, data: bytes) -> tuple[bytes, str]:
    """Change the bytes of one CSV file; returns them and what was done."""
    op = draw(
        st.sampled_from(
            ["bom", "nul", "crlf", "cr", "mixed", "utf8", "cut", "dup_line", "drop_line",
             "insert", "extra_col", "missing_col", "quote", "newline", "empty", "blank_name",
             "same_name"]
        )
    )  # fmt: skip
    n = len(data)
    pos = draw(st.integers(0, n)) if n else 0
    lines = data.split(b"\n")
    k = draw(st.integers(0, max(len(lines) - 1, 0)))
    if op == "bom":
        at = draw(st.sampled_from([0, pos]))
        return data[:at] + b"\xef\xbb\xbf" + data[at:], f"BOM at {at}"
    if op == "nul":
        return data[:pos] + b"\x00" + data[pos:], f"NUL at {pos}"
    if op == "crlf":
        return data.replace(b"\n", b"\r\n"), "CRLF"
    if op == "cr":
        return data.replace(b"\n", b"\r"), "CR"
    if op == "mixed":
        return b"\n".join(ln + (b"\r" if j % 2 else b"") for j, ln in enumerate(lines)), "mixed"
    if op == "utf8":
        bad = draw(st.sampled_from(INVALID_UTF8))
        return data[:pos] + bad + data[pos:], f"{bad!r} at {pos}"
    if op == "cut":
        return data[:pos], f"cut at {pos}"
    if op == "dup_line":
        return b"\n".join(lines[: k + 1] + lines[k:]), f"line {k} repeated"
    if op == "drop_line":
        return b"\n".join(lines[:k] + lines[k + 1 :]), f"line {k} removed"
    if op == "insert":
        junk = draw(st.binary(min_size=1, max_size=6))
        return data[:pos] + junk + data[pos:], f"{junk!r} at {pos}"
    if op == "extra_col":
        lines[k] += b",extra"
        return b"\n".join(lines), f"line {k}: extra column"
    if op == "missing_col":
        lines[k] = lines[k].split(b",", 1)[-1]
        return b"\n".join(lines), f"line {k}: first column removed"
    if op in ("blank_name", "same_name"):
        names = lines[0].split(b",")
        j, other = k % len(names), names[pos % len(names)]
        names[j] = b" " + names[j] + b"  " if op == "blank_name" else other
        lines[0] = b",".join(names)
        return b"\n".join(lines), f"header name {j}: {names[j]!r}"
    if op == "quote":
        return data[:pos] + b'"' + data[pos:], f"quote at {pos}"
    if op == "newline":
        nl = draw(st.sampled_from([b"\n", b"\r\n", b"\r", b'"\n"']))
        return data[:pos] + nl + data[pos:], f"{nl!r} at {pos}"
    return b"", "empty file"


EXTRACT_ARGS = (
    [], [], [], ["--drop-flagged", "classifications"], ["--drop-flagged", "volunteers"],
    ["--max-json-depth", "8"], ["--max-marks", "3", "--flag-marks", "2"],
    ["--max-field-bytes", "3000"], ["--missing-subjects", "drop"], ["--min-seconds-per-mark", "20"],
)  # fmt: skip


@functools.cache
def base_inputs(name: str) -> dict | None:
    """The valid inputs the cases start from: "valid" (the bad-input suite's) or "penguin"."""
    return _valid_base() if name == "valid" else penguin_base()


@st.composite
def fuzz_cases(draw, base_name: str = "valid") -> FuzzCase:
    """A hostile variant of the inputs ``base_name`` (:func:`base_inputs`): 1-3 changes to the
    rows and/or bytes of one file."""
    base = base_inputs(base_name)
    target = draw(st.sampled_from(["export", "export", "export", "subjects_export", "catalogue"]))
    tables = copy.deepcopy({k: base[k] for k in ("export", "subjects_export", "catalogue")})
    header, rows = tables[target]
    steps = [draw(row_mutation(rows, header, target)) for _ in range(draw(st.integers(0, 3)))]
    files = {k: csv_bytes(h, r) for k, (h, r) in tables.items()}
    for _ in range(draw(st.sampled_from([0, 0, 1, 2] if steps else [1, 1, 2]))):
        files[target], step = draw(byte_mutation(files[target]))
        steps.append(step)
    args = list(base["args"]) + list(draw(st.sampled_from(EXTRACT_ARGS)))
    return FuzzCase(target, files, args, steps)


# --------------------------------------------------------------------------- the property


class FuzzFailure(AssertionError):
    """A case broke the property (the message says how)."""


def run_cli(argv: list) -> tuple[int, str]:
    """``clumpscout.cli.main(argv)`` in-process -> (exit code, stderr); exceptions propagate."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            rc = cli_main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        root = logging.getLogger("clumpscout")
        for h in list(root.handlers):
            root.removeHandler(h)
        root.propagate = True
    return int(rc), buf.getvalue()


def _files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _check_error(rc: int, err: str, out: Path, culprits: list[Path], what: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    if "Traceback" in err:
        raise FuzzFailure(f"{what}: traceback on stderr:\n{err[-3000:]}")
    if rc != 2 or len(lines) != 1:
        raise FuzzFailure(f"{what}: exit {rc} with {len(lines)} error line(s):\n{err[-3000:]}")
    if not any(str(c) in lines[0] for c in culprits):
        raise FuzzFailure(f"{what}: the error line does not name the file: {lines[0][:1000]}")
    if len(lines[0]) > 1000:
        raise FuzzFailure(
            f"{what}: an error line of {len(lines[0]):,} characters: {lines[0][:300]}"
        )
    if _files_in(out):
        raise FuzzFailure(f"{what}: exit 2 but wrote {_files_in(out)}")
    return lines[0]


def _check_extract(export: Path, subjects: Path, out: Path) -> str:
    """Every classification kept or dropped by reason; the click ledger balances. Returns
    "drops: " and the reasons of the drops and flags."""
    if _files_in(out) != ["clicks.parquet", "clicks_report.json"]:
        raise FuzzFailure(f"extract: exit 0 but wrote {_files_in(out)}")
    clicks = pd.read_parquet(out / "clicks.parquet")
    rep = json.loads((out / "clicks_report.json").read_text())
    kept = int(clicks["classification_id"].nunique())
    counted = kept + sum(rep["dropped_classifications"].values())
    if rep["classifications_kept"] != kept or counted != rep["rows_read"]:
        raise FuzzFailure(f"extract: {rep['rows_read']} rows read but {counted} accounted for")
    if rep["clicks_kept"] != int(clicks["x"].notna().sum()):
        raise FuzzFailure("extract: clicks_kept differs from the clicks table")
    boxes = pd.DataFrame({"classification_id": clicks["classification_id"], "x1": clicks["x"]})
    ledger_log = logging.getLogger("clumpscout.data.ledger")
    level = ledger_log.level
    ledger_log.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its progress bar
            _, checks = export_ledger(export, rep, boxes, subjects)
    finally:
        ledger_log.setLevel(level)
    bad = [c.message() for c in checks if not c.ok]
    if bad:
        raise FuzzFailure("the click ledger does not balance: " + "; ".join(bad))
    drops = {**rep["dropped_classifications"], **rep["dropped_clicks"]}
    drops.update({f"flag {k}": n for k, n in rep["flagged"]["classifications"].items()})
    return "drops: " + ",".join(sorted(k for k, n in drops.items() if n and k != "other_task"))


def check_case(case: FuzzCase, folder: Path) -> list[tuple[str, int, str]]:
    """Run the case's command(s) in ``folder``; raise :class:`FuzzFailure` (or the exception
    that escaped the CLI) when the property breaks. Returns (command, exit code, error line
    or, for ``extract`` with exit 0, "drops: " and the reasons of its drops) of each command."""
    names = {"export": "classifications.csv", "subjects_export": "subjects_export.csv"}
    names["catalogue"] = "galaxies.csv"
    paths = {k: folder / names[k] for k in names}
    for k, p in paths.items():
        p.write_bytes(case.files[k])
    codes = []
    if case.target in ("export", "subjects_export"):
        out = folder / "clicks"
        argv = ["extract", "--classifications", paths["export"], "--subjects",
                paths["subjects_export"], "--out", out / "clicks.parquet", *case.args]  # fmt: skip
        rc, err = run_cli(argv)
        if rc == 0:
            if "Traceback" in err:
                raise FuzzFailure(f"extract: exit 0 with a traceback\n{err[-2000:]}")
            line = _check_extract(paths["export"], paths["subjects_export"], out)
        else:
            culprits = [paths["export"], paths["subjects_export"]]
            line = _check_error(rc, err, out, culprits, "extract")
        codes.append(("extract", rc, line.replace(str(folder), "")))
    if case.target in ("catalogue", "subjects_export"):
        out = folder / "subjects"
        argv = ["subjects", "--catalogue", paths["catalogue"], "--subjects-export",
                paths["subjects_export"], "--out", out / "subjects.parquet"]  # fmt: skip
        rc, err = run_cli(argv)
        line = ""
        if rc == 0:
            if _files_in(out) != ["subjects.parquet", "subjects_report.json"] or "Traceback" in err:
                raise FuzzFailure(f"subjects: exit 0 but {_files_in(out)}\n{err[-2000:]}")
        else:
            culprits = [paths["catalogue"], paths["subjects_export"]]
            line = _check_error(rc, err, out, culprits, "subjects")
        codes.append(("subjects", rc, line.replace(str(folder), "")))
    return codes


#: numpy's warnings of numbers turned into garbage (an input value was not checked)
GARBAGE = ("invalid value encountered in cast", "overflow")


def check_in_tmp(case: FuzzCase) -> list[tuple[str, int, str]]:
    """:func:`check_case` in a temporary folder; a warning of :data:`GARBAGE` fails too."""
    with (
        tempfile.TemporaryDirectory(prefix="fuzz-") as d,
        warnings.catch_warnings(record=True) as w,
    ):
        warnings.simplefilter("always")
        out = check_case(case, Path(d))
    bad = [
        f"{x.filename}:{x.lineno}: {x.message}"
        for x in w
        if any(g in str(x.message) for g in GARBAGE)
    ]
    if bad:
        raise FuzzFailure("numbers turned into garbage: " + "; ".join(bad))
    return out


FUZZ_SETTINGS = settings(
    max_examples=300,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


@pytest.mark.slow  # ~13 s of hypothesis cases (the full suite runs it)
@FUZZ_SETTINGS
@given(case=fuzz_cases("valid"))
def test_hostile_exports_never_crash(case):
    check_in_tmp(case)


@pytest.mark.slow  # ~13 s of hypothesis cases (the full suite runs it)
@pytest.mark.shared
@pytest.mark.skipif(not PENGUIN.is_dir(), reason="../shared is absent")
@settings(FUZZ_SETTINGS, max_examples=60)
@given(case=fuzz_cases("penguin"))
def test_hostile_penguin_watch_rows_never_crash(case):
    check_in_tmp(case)


def _regressions() -> list:
    return [pytest.param(p, id=p.stem) for p in sorted(REGRESSIONS.glob("*.json"))]


@pytest.mark.parametrize("path", _regressions())
def test_fuzz_regressions(path):
    """Cases the fuzz benchmark once broke the property with (benchmarks/fuzz_export.py)."""
    check_in_tmp(FuzzCase.from_json(json.loads(path.read_text())))


# --------------------------------------------------------------------------- named cases


def _export(tmp_path: Path, rows: list[dict]) -> tuple[Path, Path]:
    exp = tmp_path / "classifications.csv"
    subj = tmp_path / "subjects_export.csv"
    exp.write_bytes(csv_bytes(EXPORT_HEADER, rows))
    subj.write_bytes(csv_bytes(SUBJECTS_HEADER, [subject_row(s) for s in SUBJECT_IDS]))
    return exp, subj


def test_deep_nesting_is_a_counted_drop(tmp_path):
    """100,000 nested empty arrays (a RecursionError traceback before): dropped, counted."""
    rows = valid_export_rows()
    rows[2]["annotations"] = deep(100_000, "array")
    rows[3]["metadata"] = deep(65, "object")
    exp, subj = _export(tmp_path, rows)
    clicks, rep = extract_clicks(exp, subj)
    assert rep["dropped_classifications"]["json_too_deep"] == 2
    assert [d["row"] for d in rep["dropped_over_limits"]] == [3, 4]
    assert rep["limits"]["max_json_depth"] == 64
    assert not clicks["classification_id"].isin([rows[2]["classification_id"]]).any()


def test_too_many_marks_and_field_size_are_counted_drops(tmp_path):
    rows = valid_export_rows()
    flood(rows[4], 1000, 3600.0)  # 1000 clump marks + 1 bulge mark: over max_marks
    flood(rows[5], 999, 3600.0)  # at the limit: kept (and flagged: more than flag_marks)
    rows[6]["subject_data"] = json.dumps({"pad": "x" * 200_000})
    exp, subj = _export(tmp_path, rows)
    clicks, rep = extract_clicks(exp, subj, limits={"max_field_bytes": 150_000})
    d = rep["dropped_classifications"]
    assert d["too_many_marks"] == 1 and d["field_too_large"] == 1
    assert rep["flagged"]["classifications"]["many_marks"] == 1
    assert rep["flagged"]["examples"][0]["marks"] == 1000
    assert int(clicks["x"].notna().sum()) == rep["clicks_kept"] >= 1000


def test_a_field_beyond_the_read_block_is_one_line_naming_the_row(tmp_path, monkeypatch):
    import clumpscout.data.zooniverse_csv as zooniverse_csv

    monkeypatch.setattr(zooniverse_csv, "_BATCH", 1 << 15)  # 16 MiB at least, in real runs
    rows = valid_export_rows()
    rows[1]["subject_data"] = json.dumps({"pad": "x" * 200_000})
    exp, subj = _export(tmp_path, rows)
    out = tmp_path / "out"
    rc, err = run_cli(["extract", "--classifications", exp, "--subjects", subj,
                       "--max-field-bytes", "10000", "--out", out / "c.parquet"])  # fmt: skip
    _check_error(rc, err, out, [exp], "extract")
    assert f"{exp}:row 2:" in err and "max_field_bytes" in err


def test_bots_are_flagged_and_dropped_when_configured(tmp_path):
    rows = valid_export_rows()
    flood(rows[0], 2, 0.05)  # alice: 2 clump marks + 1 bulge in 0.05 s: too fast
    flood(rows[7], 400, 3600.0)  # bob: 400 marks: many
    exp, subj = _export(tmp_path, rows)
    _, rep = extract_clicks(exp, subj)
    f = rep["flagged"]
    assert f["classifications"] == {"many_marks": 1, "too_fast": 1} and f["volunteers"] == 2
    assert {v["volunteer"] for v in f["volunteer_list"]} == {"alice", "bob"}
    assert (
        sum(rep["dropped_classifications"][r] for r in ("flagged_many_marks", "flagged_too_fast"))
        == 0
    )
    _, rep = extract_clicks(exp, subj, limits={"drop_flagged": "classifications"})
    assert rep["dropped_classifications"]["flagged_too_fast"] == 1
    assert rep["dropped_classifications"]["flagged_many_marks"] == 1
    clicks, rep = extract_clicks(exp, subj, limits={"drop_flagged": "volunteers"})
    assert rep["dropped_classifications"]["flagged_volunteer"] == 2 * len(SUBJECT_IDS)
    assert not clicks["volunteer"].isin(["alice", "bob"]).any()
    assert rep["classifications_kept"] == len(rows) - 2 * len(SUBJECT_IDS)


@pytest.mark.parametrize("mode", ["none", "classifications", "volunteers"])
def test_ledger_balances_limit_and_flag_drops(tmp_path, mode):
    """The ledger finds every new drop on its own, also when the dropped row is the first of a
    volunteer-subject pair whose repeat the reader dropped as a repeat."""
    rows = valid_export_rows()
    rows[4]["annotations"] = deep(5000, "array")  # erin
    flood(rows[3], 1200, 3600.0)  # dave
    flood(rows[8], 5, 0.0)  # carol: too fast
    rows[10]["metadata"] = json.dumps({"pad": "y" * 300_000})  # erin
    later = copy.deepcopy(rows[8])  # the same volunteer and subject, later: a repeat
    later["classification_id"] = 59990
    later["created_at"] = "2021-03-09 00:00:00 UTC"
    rows.append(later)
    case = FuzzCase("export", {"export": csv_bytes(EXPORT_HEADER, rows),
                               "subjects_export": csv_bytes(SUBJECTS_HEADER, [subject_row(s) for s in SUBJECT_IDS]),
                               "catalogue": b""},
                    ["--drop-flagged", mode, "--max-field-bytes", "200000"])  # fmt: skip
    assert [r[:2] for r in check_case(case, tmp_path)] == [("extract", 0)]
    rep = json.loads((tmp_path / "clicks" / "clicks_report.json").read_text())
    d = rep["dropped_classifications"]
    assert d["json_too_deep"] == 1 and d["too_many_marks"] == 1 and d["field_too_large"] == 1
    assert d["duplicate_volunteer_subject"] == 1
    assert d["flagged_too_fast"] == (mode == "classifications")
    assert d["flagged_volunteer"] == (len(SUBJECT_IDS) if mode == "volunteers" else 0)


def test_subject_export_beyond_the_limits_is_one_line(tmp_path):
    exp, subj = _export(tmp_path, valid_export_rows())
    srows = [subject_row(s) for s in SUBJECT_IDS]
    srows[3]["metadata"] = deep(70, "object")
    subj.write_bytes(csv_bytes(SUBJECTS_HEADER, srows))
    out = tmp_path / "out"
    rc, err = run_cli(["extract", "--classifications", exp, "--subjects", subj,
                       "--out", out / "c.parquet"])  # fmt: skip
    _check_error(rc, err, out, [subj], "extract")
    assert f"{subj}:row 4:" in err and "max_json_depth = 64" in err


def test_a_field_over_the_limit_is_never_a_python_string(tmp_path):
    """Memory stays bounded: a 12 MB annotations field over a 1 MB limit is dropped without
    being turned into Python text (tracemalloc sees Python's allocations, not Arrow's)."""
    rows = valid_export_rows()
    rows[4]["annotations"] = json.dumps([{"task": "T1", "value": [], "pad": "z" * 12_000_000}])
    exp, subj = _export(tmp_path, rows)
    tracemalloc.start()
    try:
        _, rep = extract_clicks(exp, subj, limits={"max_field_bytes": 1_000_000})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rep["dropped_classifications"]["field_too_large"] == 1
    assert peak < 6_000_000, f"peak {peak:,} bytes of Python objects"


def test_limits_are_checked():
    from clumpscout.data.zooniverse import check_limits
    from clumpscout.errors import InputError

    assert check_limits(None)["max_marks"] == 1000
    for bad in ({"max_marks": 0}, {"max_json_depth": "64"}, {"drop_flagged": "all"},
                {"min_seconds_per_mark": -1}, {"max_depth": 3}):  # fmt: skip
        with pytest.raises(InputError):
            check_limits(bad)
