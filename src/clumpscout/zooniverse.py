"""Zooniverse classification export -> tidy clicks table (paper §3.2-3.3; contract 2).

:func:`extract_clicks` reads a Zooniverse project's *classification export* (one CSV row per
classification: ``classification_id, user_name, user_id, workflow_id, workflow_version,
created_at, metadata, annotations, subject_data, subject_ids`` ...) and its *subject export*
and returns one row per click of the clump task, plus one coordinate-less row (x = y = NaN,
tool NA) for every classification that kept no click, so that every kept classification - a
volunteer who looked at the subject - is in the table.

Decisions (each drop is counted by reason in the report, nothing is dropped silently):

- **Front ends.** Classic front-end marks carry ``tool`` (and ``tool_label``); the
  front-end-monorepo (FEM) carries ``toolIndex``/``toolType`` (no label). Both are read; a
  mark with both uses ``tool``. Combo tasks (an annotation whose value is a list of annotations)
  are flattened. A mark is a *point* when it has ``x`` and ``y`` and none of the keys of other
  shapes (``r``, ``rx``, ``width``, ``points``, ``x1`` ...; FEM: ``toolType`` other than
  ``point``); other marks are dropped as ``non_point_mark``.
- **Workflow.** ``workflow_id=None`` is allowed only when the export holds one workflow.
  ``workflow_version`` "M.m" selects that exact version, "M" (or an int) every version of major
  M, ``None`` the newest major version present (the others are counted as
  ``older_workflow_version``; panoptes-aggregation keys its extractor configs on a version too).
  Unknown workflow or version: :class:`InputError` listing what is available.
- **Tasks and tools.** Only clicks of ``clump_task`` are kept; marks and answers of other tasks
  (bulge task, shortcut "nothing here" buttons, questions) are counted per task in the report.
  ``clump_task=None`` keeps the point marks of every drawing task. ``tools`` (optional) keeps
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
- **Coordinates.** Points whose x or y is null or not a number are dropped
  (``missing_coordinates``), NaN or infinite ones too (``nonfinite_coordinates``). Points outside
  the image are *kept* (panoptes-aggregation keeps them, and SPEC 3 keeps boxes that stick out)
  and flagged in column ``outside_image``; the image size is the ``naturalWidth/Height`` the
  volunteer's browser reported in ``metadata.subject_dimensions`` for that frame, else the one in
  the subject export's metadata, else unknown (``outside_image`` NA, counted). Inside means
  ``0 <= x <= width`` and ``0 <= y <= height``.
- **Empty classifications.** A classification with no kept click in the clump task (the task
  value ``[]``, the task absent as in FEM exports when skipped, or every click dropped) gets one
  row with x = y = NaN, tool/frame NA, unusual False. The report separates those that marked
  nothing from those emptied by drops.
- **Subjects.** Subjects of the export that are missing from the subject export are kept by
  default (``missing_subjects="keep"``: the classifications are real; the boxes stage then names
  them if the subjects table has no PSF for them) and counted; ``"drop"`` drops their
  classifications (``subject_missing_from_subjects_export``).
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
import time
from array import array
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

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
    }
)

#: clicks.parquet columns (contract 2) followed by the extra columns this reader adds
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
)

MISSING_SUBJECTS = ("keep", "drop")
_BATCH = 1 << 24  # pyarrow block size (bytes)


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


def read_header(path: str | Path) -> list[str]:
    """The header fields of a CSV file; :class:`InputError` if missing, empty or not UTF-8."""
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
    try:
        header = next(csv.reader(io.StringIO(text)))
    except (StopIteration, csv.Error) as exc:
        raise InputError(f"cannot read the CSV header: {exc}", path=path, row=0) from None
    return [h.strip() for h in header]


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


def locate_csv_problem(path: str | Path, expected_fields: int | None = None) -> tuple[int, str]:
    """Find the first data row that is not valid UTF-8 or has the wrong number of fields.

    Slow (pure Python), only used on the error path to name the row. Returns (row, problem);
    row 0 is the header, data rows count from 1; (-1, "") if nothing is found.
    """
    row = -1
    with open(path, "rb") as fh:
        try:
            for row, rec in enumerate(csv.reader(_decoded_lines(fh))):
                if row == 0:
                    expected_fields = expected_fields or len(rec)
                elif rec and len(rec) != expected_fields:
                    return row, f"expected {expected_fields} fields, found {len(rec)}"
        except _BadBytes as exc:
            return row + 1, f"bytes that are not UTF-8 ({exc})"
        except csv.Error as exc:
            return row + 1, f"CSV syntax error ({exc})"
    return -1, ""


def _csv_error(path: object, exc: Exception, n_fields: int | None = None) -> InputError:
    row, problem = locate_csv_problem(path, n_fields)
    if row >= 0:
        return InputError(f"bad CSV row: {problem}", path=path, row=row)
    return InputError(f"cannot read the CSV file: {exc}", path=path)


def _arrow_options(columns: Iterable[str]) -> tuple[Any, Any, Any]:
    cols = list(columns)
    read = pacsv.ReadOptions(block_size=_BATCH, use_threads=True)
    parse = pacsv.ParseOptions(newlines_in_values=True)
    convert = pacsv.ConvertOptions(
        include_columns=cols,
        column_types={c: pa.string() for c in cols},
        strings_can_be_null=False,
        quoted_strings_can_be_null=False,
    )
    return read, parse, convert


def read_columns(path: str | Path, columns: Iterable[str], n_fields: int) -> pa.Table:
    """Read ``columns`` of a CSV as strings with pyarrow (bad rows -> InputError with row)."""
    read, parse, convert = _arrow_options(columns)
    try:
        return pacsv.read_csv(path, read_options=read, parse_options=parse, convert_options=convert)
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise _csv_error(path, exc, n_fields) from None


def iter_column_batches(path: str | Path, columns: Iterable[str], n_fields: int):
    """Stream record batches of ``columns`` (strings); bad rows -> InputError with row."""
    read, parse, convert = _arrow_options(columns)
    try:
        reader = pacsv.open_csv(
            path, read_options=read, parse_options=parse, convert_options=convert
        )
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            yield batch
    except (pa.ArrowInvalid, UnicodeDecodeError) as exc:
        raise _csv_error(path, exc, n_fields) from None


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
    try:
        if any_blank:
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
        raise InputError(f"{column} {s.iloc[i]!r} is not an integer", path=path, row=row)
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
                f"created_at {s.iloc[_first_bad(t2.isna().to_numpy())]!r} is not a date-time",
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
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) and f > 0 else math.nan


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


def read_subjects_export(path: str | Path) -> pd.DataFrame:
    """A Zooniverse subject export -> one row per subject_id (first row of each subject).

    Columns: subject_id (int64), metadata (dict), image_width, image_height (float, NaN when the
    metadata does not say), ra, dec (float, NaN when absent), row (1-based data row).
    A subject appears once per subject set / workflow link in real exports; the first row wins.
    """
    header = read_header(path)
    missing = [c for c in ("subject_id", "metadata") if c not in header]
    if missing:
        raise InputError(
            f"not a Zooniverse subject export: missing column(s) {', '.join(missing)} "
            f"(found: {', '.join(header)})",
            path=path,
            row=0,
        )
    tab = read_columns(path, ["subject_id", "metadata"], len(header))
    if tab.num_rows == 0:
        raise InputError("no subjects (the file has only a header)", path=path)
    rows = np.arange(1, tab.num_rows + 1)
    sid = to_int(tab.column("subject_id"), "subject_id", path)
    first = np.sort(np.unique(sid, return_index=True)[1])
    texts = tab.column("metadata").take(pa.array(first)).to_pylist()
    mds, ws, hs, ras, decs = [], [], [], [], []
    for i, text in zip(first, texts, strict=True):
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
    except (TypeError, ValueError):
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


def _describe(avail: dict[str, dict[str, int]], only: str | None = None) -> str:
    parts = []
    for w, versions in avail.items():
        if only is not None and w != only:
            continue
        vs = ", ".join(f"{v} ({n})" for v, n in versions.items())
        parts.append(f"workflow {w}: versions {vs}")
    return "; ".join(parts)


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


def _flatten(annotations: list) -> Iterable[dict]:
    """Annotations with combo tasks unpacked (a value that is a list of annotations)."""
    for a in annotations:
        if not isinstance(a, dict):
            continue
        v = a.get("value")
        if (
            isinstance(v, list)
            and v
            and isinstance(v[0], dict)
            and "task" in v[0]
            and "value" in v[0]
        ):
            yield from _flatten(v)
        else:
            yield a


def _is_drawing(value: Any, task_type: Any) -> bool:
    """Does an annotation value look like the marks of a drawing task?

    FEM annotations say so (``taskType``); classic ones are recognised by their value: a list
    that is not a survey (dicts with ``choice``) nor a multiple-choice answer (no dicts at all).
    An empty list counts as drawing (a drawing task with no marks).
    """
    if not isinstance(value, list):
        return False
    if task_type is not None:
        return task_type in ("drawing", "dataVisAnnotation")
    has_dict = False
    for m in value:
        if isinstance(m, dict):
            if "choice" in m:
                return False
            has_dict = True
    return has_dict or not value


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
        self.codes: dict[str | None, int] = {None: 0}

    def names(self) -> np.ndarray:
        out = np.empty(len(self.codes), dtype=object)
        for name, code in self.codes.items():
            out[code] = name
        return out


def _parse_rows(
    coll: _Collector,
    positions: np.ndarray,
    rows: np.ndarray,
    annotations: list[str],
    metadata: list[str],
    subject_data: list[str] | None,
    subject_size: tuple[np.ndarray, np.ndarray],
    clump_task: str | None,
    tools: frozenset[int] | None,
    path: object,
    stats: dict,
) -> None:
    """Parse the JSON of the kept rows of one batch and append their clicks to ``coll``."""
    c_row, c_task, c_tool, c_label = coll.row, coll.task, coll.tool, coll.label
    c_x, c_y, c_frame, c_w, c_h = coll.x, coll.y, coll.frame, coll.w, coll.h
    codes = coll.codes
    drops: Counter = stats["dropped_clicks"]
    other_clicks: Counter = stats["other_task_clicks"]
    other_ann: Counter = stats["other_task_annotations"]
    seen_tasks: Counter = stats["tasks_seen"]
    sub_w, sub_h = subject_size
    isfinite = math.isfinite
    nan = math.nan
    n_empty = n_emptied = 0
    for k in range(len(positions)):
        pos = int(positions[k])
        text = annotations[k]
        try:
            ann = _loads(text)
        except ValueError:
            raise _bad_json(path, int(rows[k]), "annotations", text) from None
        mtext = metadata[k]
        try:
            md = _loads(mtext) if mtext else None
        except ValueError:
            raise _bad_json(path, int(rows[k]), "metadata", mtext) from None
        if subject_data is not None:
            stext = subject_data[k]
            if stext:
                try:
                    _loads(stext)
                except ValueError:
                    raise _bad_json(path, int(rows[k]), "subject_data", stext) from None
        if not isinstance(ann, list):
            raise InputError(
                f"annotations is a JSON {type(ann).__name__}, expected a list of tasks",
                path=path,
                row=int(rows[k]),
            )
        w0 = h0 = None
        n_kept = 0
        n_marks = 0
        for a in _flatten(ann):
            task = a.get("task")
            if type(task) is not str and task is not None:
                task = str(task)
            value = a.get("value")
            # a drawing task's marks (fast path for the common classic case, else _is_drawing)
            if type(value) is list and (
                not value or (type(value[0]) is dict and "choice" not in value[0])
            ):
                drawing = "taskType" not in a or _is_drawing(value, a["taskType"])
            else:
                drawing = _is_drawing(value, a.get("taskType"))
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
                    raise InputError(
                        f"task {clump_task!r} is not a drawing task here (its value is "
                        f"{str(value)[:60]!r}); check extract.clump_task",
                        path=path,
                        row=int(rows[k]),
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
                else:
                    tool = v.get("toolIndex")
                    tt = v.get("toolType")
                    if tt is not None and tt != "point":
                        drops["non_point_mark"] += 1
                        continue
                if "x" not in v or "y" not in v or not SHAPE_KEYS.isdisjoint(v):
                    drops["non_point_mark"] += 1
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
                x = v["x"]
                y = v["y"]
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


def _coord(v: Any) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return float(v)
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
) -> tuple[pd.DataFrame, dict]:
    """Read a Zooniverse classification export into the tidy clicks table (contract 2).

    Parameters follow the ``extract`` config section; see the module docstring for every
    decision. Returns ``(clicks, report)``; ``report`` counts every dropped classification and
    click by reason and is JSON-serialisable.
    """
    t_start = time.perf_counter()
    path = Path(classifications_csv)
    if missing_subjects not in MISSING_SUBJECTS:
        raise InputError(f"missing_subjects must be one of {MISSING_SUBJECTS}")
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
            f"(found: {', '.join(h or '<unnamed>' for h in header)})",
            path=path,
            row=0,
        )
    json_cols = list(JSON_COLUMNS) + [c for c in OPTIONAL_JSON_COLUMNS if c in header]

    # ---- pass 1: the small columns of every row -> selection and de-duplication
    with timed(f"reading {path.name} (selection columns)", log):
        light = read_columns(path, LIGHT_COLUMNS, len(header))
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
            subjects = read_subjects_export(subjects_csv)
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
    keep_all = np.full(n_rows, -1, dtype=np.int64)
    keep_all[sel] = np.arange(len(sel))
    stats: dict[str, Any] = {
        "dropped_clicks": Counter(),
        "other_task_clicks": Counter(),
        "other_task_annotations": Counter(),
        "tasks_seen": Counter(),
        "empty_classifications": 0,
        "classifications_emptied_by_drops": 0,
    }
    coll = _Collector()
    offset = 0
    with timed(f"parsing annotations of {len(sel):,} classifications", log):
        batches = iter_column_batches(path, json_cols, len(header))
        for batch in progress(batches, desc="extract", total=None):
            n = batch.num_rows
            pos = keep_all[offset : offset + n]
            inb = np.flatnonzero(pos >= 0)
            offset += n
            if len(inb) == 0:
                continue
            take = pa.array(inb)
            ann = batch.column("annotations").take(take).to_pylist()
            md = batch.column("metadata").take(take).to_pylist()
            sd = (
                batch.column("subject_data").take(take).to_pylist()
                if "subject_data" in json_cols
                else None
            )
            p = pos[inb]
            _parse_rows(
                coll,
                p,
                rows_all[offset - n + inb],
                ann,
                md,
                sd,
                (sub_w[p], sub_h[p]),
                clump_task,
                tool_set,
                path,
                stats,
            )
    if offset != n_rows:  # pragma: no cover - the two passes must agree
        raise InputError(f"read {offset} rows in pass 2 but {n_rows} in pass 1", path=path)
    if clump_task is not None and stats["tasks_seen"].get(clump_task, 0) == 0:
        seen = ", ".join(sorted(stats["tasks_seen"])) or "none"
        raise InputError(
            f"task {clump_task!r} appears in no selected classification (tasks seen: {seen}); "
            "set extract.clump_task / --clump-task",
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
        "unusual_clicks": int(clicks["unusual"].fillna(False).sum()),
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


def log_summary(report: dict) -> None:
    """Log the report's headline numbers and every non-zero drop."""
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
    for task, n in report["other_task_clicks"].items():
        log.info("not kept: %s marks of task %s", f"{n:,}", task)
    if report["clicks_outside_image"]:
        log.info("kept but flagged: %s clicks outside the image", report["clicks_outside_image"])
    if report["clicks_image_size_unknown"]:
        log.info(
            "%s clicks with unknown image size (outside_image NA)",
            report["clicks_image_size_unknown"],
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
    p.add_argument("--classifications", required=True, help="classification export CSV")
    p.add_argument("--subjects", default=None, help="subject export CSV")
    p.add_argument("--workflow-id", default=None, help="workflow id (required if several)")
    p.add_argument(
        "--workflow-version",
        default=None,
        help='"major.minor" exactly, or "major" (default: the newest major version)',
    )
    p.add_argument(
        "--clump-task", default="T1", help='task whose clicks to keep ("all": every drawing task)'
    )
    p.add_argument(
        "--unusual-tools", type=int, nargs="*", default=[1], help="tool indices meaning unusual"
    )
    p.add_argument("--tools", type=int, nargs="*", default=None, help="keep only these tools")
    p.add_argument("--missing-subjects", choices=MISSING_SUBJECTS, default="keep")
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
    )
    write_parquet(clicks, args.out)
    write_json(report, report_path(args.out))
    log.info("wrote %s and %s", args.out, report_path(args.out))
    return 0
