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

Independence: the export is read in one light streaming pass of its own
(:mod:`clumpscout.data.ledger_recount`: pyarrow for the CSV, ``annotations`` parsed with the
shared definition of a click, :mod:`clumpscout.data.click_definition`); marks are counted per row for the clump task and
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

What counts as a click (:mod:`clumpscout.data.click_definition`, decisions.md#click-definition): an element of the value list of a drawing-task annotation (combo tasks
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
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pandas.api.types import is_float_dtype, is_integer_dtype

from clumpscout.config import add_setting
from clumpscout.data.ledger_recount import (
    BLOCK,
    CLASSIFICATION_REASONS,
    CLICK_REASONS,
    UNEXPLAINED,
    classify_rows,
    plain_ints,
    read_export_marks,
    read_row_checks,
    read_subject_ids,
    run_lengths,
    unique_sorted,
)
from clumpscout.errors import InputError
from clumpscout.io import read_json, write_csv, write_json
from clumpscout.logs import timed

log = logging.getLogger(__name__)


class LedgerError(InputError):
    """The ledger does not add up (a click was lost or invented somewhere in the DAG)."""


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
    block = max(BLOCK, 2 * int(limits.get("max_field_bytes", 0)))
    with timed(f"ledger: counting the clicks of {path.name}", log):
        marks = read_export_marks(path, clump_task, block)
    subject_ids = None
    if report.get("missing_subjects") == "drop" and subjects_csv is not None:
        subject_ids = read_subject_ids(subjects_csv, block)
    box_cid = boxes["classification_id"].to_numpy(dtype=np.int64)
    kept_ids = unique_sorted(np.sort(box_cid))
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
    # fmt: off
    checks = [
        Check(E, "unexplained classifications", "export rows in no category", int(rows_by.get(UNEXPLAINED, 0)), "expected", 0, exp),
        Check(E, "kept classifications", "export rows kept (ledger)", len(kept), "classifications in boxes.parquet", len(kept_ids), str(boxes_path)),
        Check(E, "kept classifications", "classifications in boxes.parquet", len(kept_ids), "classifications_kept (reader report)", int(report.get("classifications_kept", -1)), str(report_path)),
        Check(E, "export rows", "rows counted by the ledger", len(marks), "rows_read (reader report)", int(report.get("rows_read", -1)), exp),
    ]
    # fmt: on
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
    # fmt: off
    checks += [
        Check(E, "clump-task clicks of kept classifications", "clicks counted by the ledger", kept_clump, "kept + dropped clicks (reader report)", int(report.get("clicks_kept", -1)) + int(sum(rdrop.values())), str(report_path)),
        Check(E, "other-task clicks", "clicks counted by the ledger", kept_other, "other_task_clicks (reader report)", int(sum(other_tasks.values())), str(report_path)),
        Check(E, "kept_clicks", "box rows with coordinates", n_kept_clicks, "clicks_kept (reader report)", int(report.get("clicks_kept", -1)), str(boxes_path)),
        Check(E, "boxes_empty_rows", "box rows without coordinates", n_box_rows - n_kept_clicks, "empty classifications (reader report)", int(report.get("empty_classifications", 0)) + int(report.get("classifications_emptied_by_drops", 0)), str(boxes_path)),
    ]
    # fmt: on
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
    xy_ids, xy_counts = run_lengths(np.sort(x.box_cid[x.has_xy]))
    per_cls = np.zeros(len(x.kept_ids), dtype=np.int64)
    per_cls[np.searchsorted(x.kept_ids, xy_ids)] = xy_counts
    kept_cid = plain_ints(x.kept["classification_id"])
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
    pos, found = bi.lookup(unique_sorted(z_sorted))
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
    z_keys, z_counts = run_lengths(z_sorted)
    if np.array_equal(a_cid, z_cid):
        a_keys, a_counts = z_keys, z_counts
    else:
        a_keys, a_counts = run_lengths(np.sort(a_cid))
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
    # fmt: off
    checks = [
        Check(N, "invented classifications", "classifications of Z~_n not in boxes.parquet", invented_cls, "expected", 0, zp),
        Check(N, "box rows", "rows in Z~_n + rows not drawn", len(zn) + not_drawn_rows, "box rows", len(boxes), zp),
        Check(N, "not_drawn + in_zn", "clicks in Z~_n + clicks not drawn", int(z_xy.sum()) + not_drawn, "kept clicks (box rows with coordinates)", int(b_xy.sum()), zp),
        Check(N, "Z~_n rows", "rows of Z~_n", len(zn), "n_rows_out (subsample report)", int(zn_report.get("n_rows_out", -1)), paths.get("subsample_report", zp)),
        Check(N, "box rows", "box rows", len(boxes), "n_rows_in (subsample report)", int(zn_report.get("n_rows_in", -1)), paths.get("subsample_report", zp)),
        Check(N, "assignment rows", "rows in Z~_n", len(zn), "assignment rows", len(assignments), ap),
        Check(N, "assignment rows", "rows in Z~_n", len(zn), "clustered + dummy + not_aggregated + empty assignment rows", clustered + dummy + not_agg + empty, ap),
        Check(N, "assignment rows per classification", "classifications whose row count differs between Z~_n and the assignments", rows_differ, "expected", 0, ap),
        Check(N, "in_zn", "clicks in Z~_n", int(z_xy.sum()), "clustered + dummy + not_aggregated", clustered + dummy + not_agg, ap),
        Check(N, "empty", "rows of Z~_n without coordinates", int((~z_xy).sum()), "empty assignment rows", empty, ap),
        Check(N, "assignment", "rows whose cluster / assignment / coordinates disagree", cluster_mismatch, "expected", 0, ap),
        Check(N, "assignment", "rows of an unknown assignment kind", other_kinds, "expected", 0, ap),
    ]
    # fmt: on
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


def ledger_of_export(
    classifications_csv: str | Path,
    clicks_report: str | Path,
    boxes: str | Path,
    subjects_csv: str | Path | None = None,
    bx: pd.DataFrame | None = None,
) -> tuple[dict, list[Check]]:
    """:func:`export_ledger` on the files: the part of the ledger every n and every model
    shares (the export read once for all of them: pass it to :func:`build_ledger`);
    ``bx``: the boxes table's classification_id and x1, when already read."""
    if bx is None:
        bx = _read_parquet(boxes, ["classification_id", "x1"])
    return export_ledger(
        classifications_csv,
        read_json(clicks_report),
        bx,
        subjects_csv,
        boxes_path=boxes,
        report_path=clicks_report,
    )


def build_ledger(
    classifications_csv: str | Path,
    clicks_report: str | Path,
    boxes: str | Path,
    per_n: dict[int, dict[str, str]],
    subjects_csv: str | Path | None = None,
    export: tuple[dict, list[Check]] | None = None,
) -> Ledger:
    """The ledger of every n (decisions.md#click-ledger).

    ``per_n`` maps n to the paths ``subsample`` (Z~_n boxes.parquet), ``subsample_report``,
    ``assignments`` and ``aggregate_report``; ``export``: :func:`ledger_of_export` of the
    same files, when already computed (else it is). Returns the :class:`Ledger`; use
    :func:`check_ledger` to fail when it does not add up.
    """
    bx = _read_parquet(boxes, ["classification_id", "x1"])
    if export is None:
        export = ledger_of_export(classifications_csv, clicks_report, boxes, subjects_csv, bx)
    ledger = Ledger(export=export[0], checks=list(export[1]))
    box_index = BoxIndex.of(bx)
    for n in sorted(per_n):
        p = {k: str(v) for k, v in per_n[n].items()}
        zn = _read_parquet(p["subsample"], ["classification_id", "x1"])
        asg = _read_parquet(p["assignments"], ["classification_id", "x1", "cluster", "assignment"])
        zrep = read_json(p["subsample_report"]) if p.get("subsample_report") else {}
        arep = read_json(p["aggregate_report"]) if p.get("aggregate_report") else {}
        cols, ch = subsample_ledger(n, bx, zn, zrep, asg, arep, p, box_index)
        ch.append(_total_check(n, ledger.export, cols, p["assignments"]))
        ledger.per_n[int(n)] = cols
        ledger.checks += ch
    for c in ledger.failures:
        log.error("ledger: %s (%s)", c.message(), c.file)
    log.info(
        "ledger: %d checks over %d n, %d failed; export %s clicks in %s rows",
        len(ledger.checks),
        len(per_n),
        len(ledger.failures),
        f"{ledger.export['clicks']:,}",
        f"{ledger.export['rows']:,}",
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
    export: tuple[dict, list[Check]] | None = None,
) -> Ledger:
    """Build, check (raises :class:`LedgerError`; nothing written) and write the ledger
    (``export``: as :func:`build_ledger`)."""
    ledger = build_ledger(classifications_csv, clicks_report, boxes, per_n, subjects_csv, export)
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
    add_setting(p, "subsample.n", required=True, note="here those of the run")
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
