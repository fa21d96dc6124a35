"""Zooniverse classification export -> tidy clicks table (paper §3.2-3.3; columns: docs/tables.md#clicks).

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
tight Python loop, run on the export's blocks in ``workers`` processes side by side (the
blocks are merged in file order, so the output does not depend on it); everything else is
vectorised. Memory: the first pass keeps numbers, not text, and the clicks wait in ranges of
subjects on disk until :func:`write_clicks` sorts and writes them range by range
(docs/decisions.md#extract-memory).
"""

from __future__ import annotations

import argparse
import inspect
import logging
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from clumpscout.config import add_setting, add_settings, choices, defaults
from clumpscout.data.zooniverse_annotations import (
    CIRCLE,
    ELLIPSE,
    OTHER_TOOLS,
    POINT,
    RECTANGLE,
    SHAPE_KEYS,
    SHAPES,
    Collector,
    Pass2,
    flag_report,
    over_limit_rows,
    shape_extent,
    shape_of,
    task_hint,
)
from clumpscout.data.zooniverse_buckets import ClickBuckets
from clumpscout.data.zooniverse_csv import (
    DROP_FLAGGED,
    FLAG_REASONS,
    FLAGS,
    LIMIT_DEFAULTS,
    LIMIT_REASONS,
    block_size,
    check_limits,
    created_problem,
    created_values,
    duration_seconds,
    first_true,
    flag_of,
    int_problem,
    int_values,
    iter_column_batches,
    json_depth_exceeds,
    locate_csv_problem,
    parse_created_at,
    read_columns,
    read_header,
    short_repr,
    to_int,
)
from clumpscout.data.zooniverse_selection import (
    available_versions,
    first_per_group,
    select_workflow,
)
from clumpscout.data.zooniverse_subjects import (
    metadata_image_size,
    metadata_value,
    read_subjects_export,
)
from clumpscout.errors import InputError
from clumpscout.io import (
    rechunked,
    release_memory,
    report_path,
    write_json,
    write_parquet_blocks,
)
from clumpscout.logs import timed

log = logging.getLogger(__name__)

#: the reader's public names (the phases live in zooniverse_csv, zooniverse_subjects,
#: zooniverse_selection and zooniverse_annotations; their public names are re-exported here)
__all__ = [
    "CIRCLE",
    "CLICK_COLUMNS",
    "DROP_FLAGGED",
    "ELLIPSE",
    "FLAG_REASONS",
    "FLAGS",
    "JSON_COLUMNS",
    "LIGHT_COLUMNS",
    "LIMIT_DEFAULTS",
    "LIMIT_REASONS",
    "MISSING_SUBJECTS",
    "OPTIONAL_JSON_COLUMNS",
    "OTHER_TOOLS",
    "POINT",
    "RECTANGLE",
    "SHAPE_KEYS",
    "SHAPES",
    "add_arguments",
    "block_size",
    "check_limits",
    "duration_seconds",
    "extract_clicks",
    "write_clicks",
    "first_per_group",
    "flag_of",
    "iter_column_batches",
    "json_depth_exceeds",
    "locate_csv_problem",
    "log_summary",
    "merged_tools",
    "metadata_image_size",
    "metadata_value",
    "parse_created_at",
    "read_columns",
    "read_header",
    "read_subjects_export",
    "run",
    "select_workflow",
    "shape_extent",
    "shape_of",
    "to_int",
]

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

#: clicks.parquet columns (docs/tables.md#clicks) followed by the extra columns this reader adds
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

MISSING_SUBJECTS = tuple(choices("extract")["missing_subjects"])  # ("keep", "drop")
#: the defaults of the config's extract section (config.schema.yaml)
_EXTRACT = defaults("extract")


# --------------------------------------------------------------------------- main API


def extract_clicks(
    classifications_csv: str | Path,
    subjects_csv: str | Path | None,
    workflow_id: int | str | None = None,
    workflow_version: str | int | float | None = None,
    clump_task: str | None = _EXTRACT["clump_task"],
    unusual_tools: Iterable[int] | None = tuple(_EXTRACT["unusual_tools"]),
    tools: Iterable[int] | None = None,
    missing_subjects: str = _EXTRACT["missing_subjects"],
    limits: Mapping[str, Any] | None = None,
    workers: int = 1,
) -> tuple[pd.DataFrame, dict]:
    """Read a Zooniverse classification export into the tidy clicks table (docs/tables.md#clicks).

    Parameters follow the ``extract`` config section (``limits``: its keys of
    :data:`LIMIT_DEFAULTS`); see the module docstring for every decision. ``workers``:
    processes that parse the JSON of the export's blocks side by side (the result does not
    depend on it). Returns ``(clicks, report)``; ``report`` counts every dropped classification
    and click by reason and is JSON-serialisable. :func:`write_clicks` writes the same table
    to Parquet without holding it.
    """
    options = dict(
        workflow_id=workflow_id, workflow_version=workflow_version, clump_task=clump_task,
        unusual_tools=unusual_tools, tools=tools, missing_subjects=missing_subjects,
        limits=limits, workers=workers,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="clumpscout-extract-") as tmp:
        ex = _extract(classifications_csv, subjects_csv, tmp, **options)
        frames = list(ex.frames())
        report = ex.report()
    clicks = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    return clicks, report


#: the options of :func:`extract_clicks` and their defaults
_OPTIONS = {
    k: p.default
    for k, p in inspect.signature(extract_clicks).parameters.items()
    if p.default is not inspect.Parameter.empty
}


def write_clicks(
    out: str | Path, classifications_csv: str | Path, subjects_csv: str | Path | None, **options
) -> dict:
    """:func:`extract_clicks` (``options``: its keyword arguments) written to the Parquet file
    ``out`` (atomically: nothing on an error) subject range by subject range, so memory holds
    one range of clicks, not the export's (docs/decisions.md#extract-memory); the bytes are
    those of the whole table written at once. Returns the report."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as tmp:
        ex = _extract(classifications_csv, subjects_csv, tmp, **options)
        with timed(f"writing {out.name}", log):
            write_parquet_blocks(rechunked(ex.frames()), out)
        return ex.report()


def _extract(
    classifications_csv: str | Path, subjects_csv: str | Path | None, spill_dir, **options
) -> _Extracted:
    """Both passes over the export; the clicks wait in subject ranges (:class:`_Extracted`).
    ``options``: the keyword arguments of :func:`extract_clicks`."""
    unknown = set(options) - set(_OPTIONS)
    if unknown:
        raise TypeError(f"unknown extract option(s): {', '.join(sorted(unknown))}")
    o = {**_OPTIONS, **options}
    workflow_id, workflow_version, clump_task = (
        o["workflow_id"], o["workflow_version"], o["clump_task"]
    )  # fmt: skip
    unusual_tools, tools, missing_subjects = o["unusual_tools"], o["tools"], o["missing_subjects"]
    limits, workers = o["limits"], o["workers"]
    t_start = time.perf_counter()
    path = Path(classifications_csv)
    if missing_subjects not in MISSING_SUBJECTS:
        raise InputError(f"missing_subjects must be one of {MISSING_SUBJECTS}")
    limits = check_limits(limits)
    unusual = frozenset(int(t) for t in (unusual_tools or ()))
    tool_set = None if tools is None else frozenset(int(t) for t in tools)
    clump_task = _clump_task(clump_task)
    header = _check_header(path)
    json_cols = list(JSON_COLUMNS) + [c for c in OPTIONAL_JSON_COLUMNS if c in header]

    # ---- pass 1: the small columns of every row -> selection and de-duplication
    p1 = _pass1(path, len(header), limits, workflow_id, workflow_version)
    subjects, keep, missing_report = _match_subjects(
        subjects_csv, p1.rows.sid, p1.keep, limits, missing_subjects, p1.dropped
    )
    if subjects is not None:  # the metadata dicts: read, not needed any more
        subjects = subjects[["subject_id", "image_width", "image_height"]]
    r = p1.rows.take(np.flatnonzero(keep))
    r.rows = None  # sel + 1
    p1.rows = p1.keep = None  # r holds what pass 2 needs
    p1.light.check("user_id", r.sel)
    r.user_id = p1.light.pop("user_id", r.sel)
    p1.light = None
    release_memory()  # pass 1's blocks: not kept for pass 2
    ver_code, versions = p1.ver
    r.wver = ver_code[r.sel]
    p1.ver = None
    r.sub_w, r.sub_h = subject_sizes(subjects, r.sid)

    # ---- pass 2: JSON of the kept rows only, the clicks kept by subject range
    p2 = Pass2(path, json_cols, len(header), p1.n_rows, clump_task, tool_set, limits, workers)
    r, buckets, names, stats, flags = _pass2(p2, r, p1, limits, spill_dir)
    _check_clump_task_seen(clump_task, stats, path)
    settings = (path, subjects_csv, clump_task, tool_set, unusual, missing_subjects, limits)
    return _Extracted(
        settings, t_start, p1, r, versions, subjects, missing_report, buckets, names, stats,
        flags,
    )  # fmt: skip


@dataclass
class _Extracted:
    """The result of both passes: :meth:`frames` assembles the clicks table range by range
    (sorted by subject, classification, click order), :meth:`report` the report (after the
    frames have all been taken)."""

    settings: tuple
    t_start: float
    p1: _Selection
    r: _Rows
    versions: np.ndarray  # the workflow versions of r.wver's codes
    subjects: pd.DataFrame | None
    missing_report: dict
    buckets: ClickBuckets
    names: np.ndarray
    stats: dict
    flags: dict

    def __post_init__(self) -> None:
        self.tally = _Tally()

    def frames(self) -> Iterator[pd.DataFrame]:
        """The clicks table, one subject range at a time."""
        r, unusual = self.r, self.settings[4]
        release_memory()  # pass 2's blocks
        for cols in self.buckets.ranges():
            df = _assemble(
                cols, self.names, r.sid, r.cid, r.vol_code, self.p1.vol_names, r.user_id,
                self.p1.chosen, self.versions, r.wver, r.created_ns, unusual,
            )  # fmt: skip
            self.tally.add(df)
            yield df

    def report(self) -> dict:
        path, subjects_csv, clump_task, tool_set, unusual, missing_subjects, limits = self.settings
        p1 = self.p1
        report = _report(
            path, subjects_csv, p1.n_rows, p1.available, p1.chosen, p1.kept_versions,
            clump_task, tool_set, unusual, p1.dropped, self.stats, self.tally,
            self.missing_report, missing_subjects,
        )  # fmt: skip
        _finish_report(
            report, limits, self.stats, self.r.cid, self.flags, self.subjects, self.tally
        )
        report["seconds"] = round(time.perf_counter() - self.t_start, 3)
        log_summary(report)
        return report


class _Tally:
    """What the report counts of the clicks table, added up range by range (a classification
    and a subject lie in one range)."""

    def __init__(self) -> None:
        self.clicks = self.classifications = self.unusual = 0
        self.outside = self.size_unknown = 0
        self.shapes: Counter = Counter()
        self.tools: Counter = Counter()
        self.volunteers: set[str] = set()
        self.subject_ids: list[np.ndarray] = []

    def add(self, clicks: pd.DataFrame) -> None:
        has_xy = clicks["x"].notna()
        outside = clicks["outside_image"]
        self.clicks += int(has_xy.sum())
        self.classifications += int(clicks["classification_id"].nunique())
        self.unusual += int(clicks["unusual"].fillna(False).sum())
        self.outside += int(outside.fillna(False).sum())
        self.size_unknown += int((outside.isna() & has_xy).sum())
        self.shapes.update(clicks["shape"].value_counts(dropna=True).to_dict())
        self.tools.update(clicks.loc[has_xy, "tool"].value_counts().to_dict())
        self.volunteers.update(clicks["volunteer"].unique())
        self.subject_ids.append(clicks["subject_id"].unique())

    def subjects(self) -> np.ndarray:
        """The subjects with a row in the clicks table."""
        if not self.subject_ids:
            return np.zeros(0, dtype=np.int64)
        return np.unique(np.concatenate(self.subject_ids))


def _clump_task(clump_task: Any) -> str | None:
    """The clump task as text; None (every drawing task) for "", "all" or "none"."""
    if clump_task is not None:
        clump_task = str(clump_task)
        if clump_task.lower() in ("", "all", "none"):
            clump_task = None
    return clump_task


def _check_header(path: Path) -> list[str]:
    """The header of a classification export; :class:`InputError` when a column is missing."""
    header = read_header(path)
    required = LIGHT_COLUMNS + JSON_COLUMNS
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(
            f"not a Zooniverse classification export: missing column(s) {', '.join(missing)} "
            f"(found: {short_repr(', '.join(h or '<unnamed>' for h in header), 300)})",
            path=path,
            row=0,
        )
    return header


@dataclass
class _Rows:
    """Per selected classification: its position in the file (``sel``), 1-based row, subject and
    classification id, volunteer code and time; after the subject check also its user id,
    workflow version and the subject export's image size."""

    sel: np.ndarray
    rows: np.ndarray | None  # None once the selection is done (sel + 1)
    sid: np.ndarray
    cid: np.ndarray
    vol_code: np.ndarray
    created_ns: np.ndarray
    user_id: np.ndarray | None = None
    wver: np.ndarray | None = None
    sub_w: np.ndarray | None = None
    sub_h: np.ndarray | None = None

    def take(self, idx: np.ndarray) -> _Rows:
        """These rows at ``idx`` (positions or a boolean mask)."""
        return _Rows(*(None if a is None else a[idx] for a in vars(self).values()))


@dataclass
class _Selection:
    """Pass 1: the workflows and versions of the export (``available``), the workflow chosen,
    every row's version (``ver``), the de-duplicated rows (``keep``: the first classification
    of each volunteer and subject) and the classifications dropped. ``light``: the columns
    checked only for the rows kept (``user_id``)."""

    light: _Light
    n_rows: int
    available: dict
    ver: tuple[np.ndarray, np.ndarray] | None  # every row's version code, the versions
    chosen: int
    kept_versions: list[str]
    vol_names: np.ndarray
    rows: _Rows | None
    keep: np.ndarray | None
    dropped: dict[str, int]


class _Codes:
    """Texts -> codes in the order they are first met, block after block."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def encode(self, texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        enc = pc.dictionary_encode(texts)
        if isinstance(enc, pa.ChunkedArray):
            enc = enc.combine_chunks()
        table = np.array(
            [self.codes.setdefault(t, len(self.codes)) for t in enc.dictionary.to_pylist()],
            dtype=np.int32,
        )
        return table[np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]

    def texts(self) -> np.ndarray:
        return np.asarray(list(self.codes), dtype=object)


class _Light:
    """Pass 1's columns of every row as numbers, read block by block
    (docs/decisions.md#extract-memory). A text that is no integer or date-time is an error
    only in a row that is selected: its position and text wait in ``bad`` until the selection
    is known (:meth:`check`)."""

    INTS = (("subject_ids", False), ("classification_id", False), ("user_id", True))

    def __init__(self, path: Path, n_fields: int, limits: Mapping[str, Any]) -> None:
        self.path = path
        versions, names = _Codes(), _Codes()
        parts: dict[str, list[np.ndarray]] = {}
        self.bad: dict[str, list[tuple[np.ndarray, list[str]]]] = {}
        base = 0
        block = block_size(limits["max_field_bytes"])

        def add(name: str, values: np.ndarray) -> None:
            parts.setdefault(name, []).append(values)

        for batch in iter_column_batches(path, LIGHT_COLUMNS, n_fields, block):
            n = batch.num_rows
            rows = np.arange(base + 1, base + n + 1, dtype=np.int64)
            col = {name: batch.column(name) for name in LIGHT_COLUMNS}
            add("workflow_id", to_int(col["workflow_id"], "workflow_id", path, rows=rows))
            add("version", versions.encode(pc.utf8_trim_whitespace(col["workflow_version"])))
            subj = pc.utf8_trim_whitespace(col["subject_ids"])
            multi = np.asarray(pc.match_substring(subj, ";").to_numpy(zero_copy_only=False), bool)
            add("multi", multi)
            for name, nullable in self.INTS:
                text = subj if name == "subject_ids" else col[name]
                values, bad = int_values(text, nullable)
                if name == "subject_ids" and bad is not None:
                    bad &= ~multi  # "a;b" is dropped, not an error
                add(name, values)
                self._note(name, bad, text, base)
            add("user_name", names.encode(pc.utf8_trim_whitespace(col["user_name"])))
            created, bad = created_values(col["created_at"])
            add("created_at", created)
            self._note("created_at", bad, col["created_at"], base)
            base += n
        self.n_rows = base
        self.columns = {}
        for name in list(parts):  # one column at a time: the blocks' copies go as it is made
            self.columns[name] = np.concatenate(parts.pop(name))
        self.versions, self.names = versions.texts(), names.texts()

    def _note(self, name: str, bad: np.ndarray | None, text: pa.Array, base: int) -> None:
        """Keep the positions and texts of a block's bad values of column ``name``."""
        if bad is None or not bad.any():
            return
        pos = np.flatnonzero(bad)
        texts = pc.utf8_trim_whitespace(text.take(pa.array(pos))).to_pylist()
        self.bad.setdefault(name, []).append((pos + base, [t[:200] for t in texts]))

    def pop(self, name: str, sel: np.ndarray) -> np.ndarray:
        """Column ``name`` at the positions ``sel`` (after :meth:`check`); the column is
        dropped."""
        return self.columns.pop(name)[sel]

    def check(self, name: str, sel: np.ndarray) -> None:
        """:class:`InputError` naming the first row of ``sel`` whose ``name`` is bad."""
        for pos, texts in self.bad.get(name, []):
            hit = np.flatnonzero(np.isin(pos, sel))
            if len(hit):
                text = texts[hit[0]]
                what = created_problem(text) if name == "created_at" else int_problem(name, text)
                raise InputError(what, path=self.path, row=int(pos[hit[0]]) + 1)


def _pass1(
    path: Path,
    n_fields: int,
    limits: Mapping[str, Any],
    workflow_id: int | str | None,
    workflow_version: str | int | float | None,
) -> _Selection:
    """Pass 1: read the small columns of every row, select the workflow and de-duplicate."""
    with timed(f"reading {path.name} (selection columns)", log):
        light = _Light(path, n_fields, limits)
    n_rows = light.n_rows
    if n_rows == 0:
        raise InputError("no classifications (the file has only a header)", path=path)
    dropped: dict[str, int] = {}

    wid = light.columns.pop("workflow_id")
    ver_code = light.columns.pop("version")
    ver = light.versions[ver_code]  # one text object per version, shared by its rows
    available = available_versions(wid, ver)
    wmask, vmask, chosen, kept_versions = select_workflow(
        wid, ver, workflow_id, workflow_version, path, available
    )
    dropped["other_workflow"] = int((~wmask).sum())
    # versions not asked for ("other") or, with no version given, older than the newest major
    n_version = int((wmask & ~vmask).sum())
    dropped["other_workflow_version"] = n_version if workflow_version is not None else 0
    dropped["older_workflow_version"] = n_version if workflow_version is None else 0
    sel = np.flatnonzero(vmask)
    del wid, wmask, vmask, ver

    multi = light.pop("multi", sel)
    dropped["multiple_subjects"] = int(multi.sum())
    sel = sel[~multi]
    rows = sel + 1  # 1-based data rows
    light.check("subject_ids", sel)
    sid = light.pop("subject_ids", sel)
    light.check("classification_id", sel)
    cid = light.pop("classification_id", sel)
    # duplicate classification ids: the first row in file order
    first = np.zeros(len(cid), dtype=bool)
    first[np.unique(cid, return_index=True)[1]] = True
    dropped["duplicate_classification_id"] = int((~first).sum())
    sel, rows, sid, cid = sel[first], rows[first], sid[first], cid[first]

    # volunteers numbered in the order they first come among the selected rows
    names, first_at, code = np.unique(
        light.pop("user_name", sel), return_index=True, return_inverse=True
    )
    rank = np.empty(len(names), dtype=np.int32)
    rank[np.argsort(first_at, kind="stable")] = np.arange(len(names))
    vol_code = rank[code]
    vol_names = light.names[names[np.argsort(first_at, kind="stable")]]
    blank = vol_names[vol_code] == ""
    if blank.any():
        raise InputError("empty user_name", path=path, row=int(rows[first_true(blank)]))
    light.check("created_at", sel)
    created_ns = light.pop("created_at", sel)

    # several classifications of one subject by one volunteer: the first by time, then id
    firstvs = first_per_group([vol_code, sid], [created_ns, cid])
    dropped["duplicate_volunteer_subject"] = int((~firstvs).sum())
    return _Selection(
        light, n_rows, available, (ver_code, light.versions), chosen, kept_versions, vol_names,
        _Rows(sel, rows, sid, cid, vol_code, created_ns), firstvs, dropped,
    )  # fmt: skip


def _match_subjects(
    subjects_csv: str | Path | None,
    sid: np.ndarray,
    keep: np.ndarray,
    limits: Mapping[str, Any],
    missing_subjects: str,
    dropped: dict[str, int],
) -> tuple[pd.DataFrame | None, np.ndarray, dict[str, Any]]:
    """(subject export or None, rows kept, report of the subjects missing from the export)."""
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
    return subjects, keep, missing_report


def subject_sizes(subjects: pd.DataFrame | None, sid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Image width and height from the subject export (fallback when the classification's
    metadata.subject_dimensions is absent); NaN when unknown."""
    sub_w = np.full(len(sid), np.nan)
    sub_h = np.full(len(sid), np.nan)
    if subjects is not None:
        pos_s = pd.Index(subjects["subject_id"]).get_indexer(sid)
        ok = pos_s >= 0
        sub_w[ok] = subjects["image_width"].to_numpy()[pos_s[ok]]
        sub_h[ok] = subjects["image_height"].to_numpy()[pos_s[ok]]
    return sub_w, sub_h


def _pass2(
    p2: Pass2, r: _Rows, p1: _Selection, limits: Mapping[str, Any], spill_dir: str | Path
) -> tuple[_Rows, ClickBuckets, np.ndarray, dict, dict[str, Any]]:
    """Pass 2 over the rows ``r`` and the bot flags (``drop_flagged: volunteers``: every
    classification of a flagged volunteer goes and the others are parsed again): (rows kept,
    their clicks by subject range, the task and label names of the clicks' codes, counters,
    the report's ``flagged`` section). Counts the drops into ``p1.dropped``."""
    dropped = p1.dropped
    buckets = ClickBuckets(r.sid, spill_dir)
    coll, stats = _run_pass2(p2, r, buckets)
    flags = flag_report(stats, r.sel + 1, r.cid, r.sid, r.vol_code, p1.vol_names, limits)
    if limits["drop_flagged"] == "volunteers" and stats["flag"].any():
        # every classification of a flagged volunteer goes; parse the others again
        bad = np.unique(r.vol_code[stats["flag"] > 0])
        keep = ~np.isin(r.vol_code, bad)
        dropped["flagged_volunteer"] = int((~keep).sum())
        r = r.take(keep)
        buckets.close()
        for f in Path(spill_dir).glob("range-*.arrows"):
            f.unlink()
        buckets = ClickBuckets(r.sid, spill_dir)
        coll, stats = _run_pass2(p2, r, buckets)
    for reason in LIMIT_REASONS + FLAG_REASONS:
        dropped[reason] = dropped.get(reason, 0) + stats["dropped_classifications"][reason]
    return r, buckets, coll.names(), stats, flags


def _run_pass2(p2: Pass2, r: _Rows, buckets: ClickBuckets) -> tuple[Collector, dict]:
    """Pass 2 of the rows ``r``, its clicks into ``buckets`` (closed on an error)."""
    try:
        return p2.run(r.sel, r.sub_w, r.sub_h, sink=buckets.add)
    except BaseException:
        buckets.close()
        raise


def _check_clump_task_seen(clump_task: str | None, stats: dict, path: Path) -> None:
    """:class:`InputError` when the clump task appears in no selected classification."""
    if clump_task is not None and stats["tasks_seen"].get(clump_task, 0) == 0:
        seen = (
            short_repr(", ".join(sorted(stats["tasks_seen"])), 200) if stats["tasks_seen"] else ""
        )
        raise InputError(
            f"task {clump_task!r} appears in no selected classification (tasks seen: "
            f"{seen or 'none'}); {task_hint(sorted(stats['drawing_tasks']))}",
            path=path,
        )


def _finish_report(
    report: dict,
    limits: Mapping[str, Any],
    stats: dict,
    cid: np.ndarray,
    flags: dict[str, Any],
    subjects: pd.DataFrame | None,
    tally: _Tally,
) -> None:
    """Add the limits, the rows dropped for a limit, the bot flags and the count of unclassified
    subjects to ``report``."""
    report["limits"] = dict(limits)
    report["dropped_over_limits"] = over_limit_rows(stats["over_limits"], cid)
    report["flagged"] = flags
    # subjects of the subject export that no kept classification mentions: counted, not an error
    # (a subject set may hold subjects that were never shown in this workflow)
    unclassified = 0
    if subjects is not None:
        unclassified = int((~np.isin(subjects["subject_id"].to_numpy(), tally.subjects())).sum())
    report["subjects_without_classifications"] = unclassified


def _assemble(
    cols: dict[str, np.ndarray],
    names: np.ndarray,
    sid: np.ndarray,
    cid: np.ndarray,
    vol_code: np.ndarray,
    vol_names: np.ndarray,
    user_id: np.ndarray,
    workflow_id: int,
    versions: np.ndarray,
    wver: np.ndarray,
    created_ns: np.ndarray,
    unusual: frozenset[int],
) -> pd.DataFrame:
    """Clicks as columns (:meth:`clumpscout.data.zooniverse_buckets.ClickBuckets.ranges`) -> the
    clicks DataFrame, sorted by subject, classification, click order (``seq``)."""
    order = np.lexsort((cols["seq"], cid[cols["row"]], sid[cols["row"]]))
    r = cols["row"][order]
    n = len(r)
    shape = cols["shape"][order]
    tool, frame = cols["tool"][order], cols["frame"][order]
    x, y, w, h = (cols[k][order] for k in ("x", "y", "w", "h"))
    empty = np.isnan(x)
    known = ~np.isnan(w) & ~np.isnan(h)
    outside = (x < 0) | (y < 0) | (x > w) | (y > h)
    uid = user_id[r]
    task = names[cols["task"][order]]
    label = names[cols["label"][order]]
    unusual_arr = np.isin(tool, np.fromiter(unusual, dtype=np.int64)) & ~empty
    df = pd.DataFrame(
        {
            "classification_id": cid[r],
            "subject_id": sid[r],
            "volunteer": pd.array(vol_names[vol_code[r]], dtype="str"),
            "user_id": pd.array(np.where(np.isnan(uid), 0, uid).astype(np.int64), dtype="Int64"),
            "workflow_id": np.full(n, workflow_id, dtype=np.int64),
            "workflow_version": pd.array(versions[wver[r]], dtype="str"),
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
            "x1": cols["x1"][order],
            "y1": cols["y1"][order],
            "x2": cols["x2"][order],
            "y2": cols["y2"][order],
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
    tally: _Tally,
    missing_report: dict,
    missing_subjects: str,
) -> dict:
    other_task_clicks = dict(sorted(stats["other_task_clicks"].items()))
    dropped_clicks = dict(sorted(stats["dropped_clicks"].items()))
    dropped_clicks["other_task"] = int(sum(other_task_clicks.values()))
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
        "classifications_kept": tally.classifications,
        "clicks_kept": tally.clicks,
        "shapes_kept": {k: int(tally.shapes.get(k, 0)) for k in SHAPES},
        "unsupported_shapes": dict(sorted(stats["unsupported_shapes"].items())),
        "malformed_shapes": dict(sorted(stats["malformed_shapes"].items())),
        "unusual_clicks": tally.unusual,
        "clicks_per_tool": {str(k): int(v) for k, v in sorted(tally.tools.items())},
        "empty_classifications": int(stats["empty_classifications"]),
        "classifications_emptied_by_drops": int(stats["classifications_emptied_by_drops"]),
        "clicks_outside_image": tally.outside,
        "clicks_image_size_unknown": tally.size_unknown,
        "subjects": int(len(tally.subjects())),
        "volunteers": len(tally.volunteers),
        "not_logged_in_volunteers": sum(v.startswith("not-logged-in") for v in tally.volunteers),
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


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
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
    # the workflow id is read as text and checked against the export (an error names it)
    add_setting(p, "export.workflow_id", type=str)
    add_setting(p, "export.workflow_version")
    add_settings(p, "extract", ["clump_task", "unusual_tools", "tools", "missing_subjects"])
    add_settings(p, "extract", list(LIMIT_DEFAULTS))
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes that parse the annotations side by side (same output for any number)",
    )
    p.add_argument("--out", required=True, help="clicks.parquet (report: <stem>_report.json)")


def run(args: argparse.Namespace) -> int:
    report = write_clicks(
        args.out,
        args.classifications,
        args.subjects,
        workflow_id=args.workflow_id,
        workflow_version=args.workflow_version,
        clump_task=args.clump_task,
        unusual_tools=args.unusual_tools,
        tools=args.tools,
        missing_subjects=args.missing_subjects,
        limits={k: getattr(args, k) for k in LIMIT_DEFAULTS},
        workers=args.workers,
    )
    write_json(report, report_path(args.out))
    log.info("wrote %s and %s", args.out, report_path(args.out))
    return 0
