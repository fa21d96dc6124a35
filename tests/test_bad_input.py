"""Bad input suite (docs/decisions.md#bad-input): a table of malformed inputs through the real CLI.

Every case starts from a small *valid* synthetic Clump Scout export (5 subjects x 6 volunteers,
task T0 = bulge, task T1 = clumps with point tools 0 "Normal clump" / 1 "Unusual clump"; a
subject export with metadata; a galaxy catalogue), breaks one thing and runs one stage of the
pipeline (``clumpscout extract|subjects|boxes|subsample|aggregate`` in-process through
``clumpscout.cli.main``, or ``snakemake -n`` for the workflow config). Each case must end in
either

- a clear one-line error: exit code 2, exactly one stderr line starting with ``error:`` that
  names the file (and the row where there is one), no traceback, no output file and no temporary
  file left in the output folder; or
- a counted, reported drop: exit 0 and the count in the report JSON equals the number of bad
  items (clicks outside the image are *kept and flagged* by design, decisions.md#box-geometry: their count is
  checked the same way).

``test_valid_inputs_pass`` first checks that the unbroken inputs pass every stage. One
subprocess per command family checks that no traceback reaches a real user's terminal.
"""

from __future__ import annotations

import copy
import csv
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from clumpscout.cli import main as cli_main
from clumpscout.simulation.export import CLASSIFICATION_COLUMNS, SUBJECT_COLUMNS

REPO = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------- valid inputs

# Column names of the Zooniverse exports (a contract): defined once in clumpscout.simulation.export
# and pinned there by tests/test_simulate.py against its own hand-written lists (and, for the
# classification export, against the real Penguin Watch export in ../shared).
EXPORT_HEADER = list(CLASSIFICATION_COLUMNS)
SUBJECTS_HEADER = list(SUBJECT_COLUMNS)
CATALOGUE_HEADER = ["subject_id", "ra", "dec", "z", "petroR90_r", "psffwhm_r", "sample"]
WORKFLOW_ID = 11803
WORKFLOW_VERSION = "64.136"
SUBJECT_IDS = (1001, 1002, 1003, 1004, 1005)
VOLUNTEERS = ("alice", "bob", "carol", "dave", "erin", "not-logged-in-3f2a9c")
IMAGE = 400


def point(x, y, tool=0, label=None):
    """A classic front-end point mark."""
    labels = {0: "Normal clump", 1: "Unusual clump"}
    return {
        "x": x,
        "y": y,
        "tool": tool,
        "frame": 0,
        "details": [],
        "tool_label": label or labels.get(tool, "?"),
    }


def clump_marks(k: int, j: int) -> list[dict]:
    """Clicks of volunteer j on subject k: two clumps (the last subject has none)."""
    if k == 4:
        return []  # every volunteer sees nothing: a pre-retired empty subject
    d = (j - 2.5) * 1.0
    marks = [point(100.0 + 20 * k + d, 120.0 - d, 0)]
    if j != 5:  # volunteer 5 misses the second clump
        marks.append(point(250.0 - d, 260.0 + 10 * k + d, 1 if j < 2 else 0))
    if k == 0 and j == 4:
        marks.append(point(50.0, 350.0, 0))  # a spurious click
    return marks


def export_row(k: int, j: int) -> dict:
    sid = SUBJECT_IDS[k]
    user = VOLUNTEERS[j]
    annotations = [
        {
            "task": "T0",
            "task_label": "Mark the central bulge",
            "value": [point(200.0 + j, 200.0, 0, "Bulge")],
        },
        {"task": "T1", "task_label": "Mark the clumps", "value": clump_marks(k, j)},
    ]
    metadata = {
        "source": "api",
        "session": f"s{j}",
        "viewport": {"width": 1280, "height": 800},
        "started_at": f"2021-03-0{k + 1}T12:{j:02d}:00.000Z",
        "finished_at": f"2021-03-0{k + 1}T12:{j:02d}:30.000Z",
        "user_language": "en",
        "subject_dimensions": [
            {"clientWidth": 500, "clientHeight": 500, "naturalWidth": IMAGE, "naturalHeight": IMAGE}
        ],
    }
    return {
        "classification_id": 50000 + 10 * k + j,
        "user_name": user,
        "user_id": "" if user.startswith("not-logged-in") else 700 + j,
        "user_ip": f"ip{j}",
        "workflow_id": WORKFLOW_ID,
        "workflow_name": "Clump Scout",
        "workflow_version": WORKFLOW_VERSION,
        "created_at": f"2021-03-0{k + 1} 12:{j:02d}:30 UTC",
        "gold_standard": "",
        "expert": "",
        "metadata": json.dumps(metadata),
        "annotations": json.dumps(annotations),
        "subject_data": json.dumps({str(sid): {"retired": None, "ra": 150.0 + k, "dec": 2.0}}),
        "subject_ids": sid,
    }


def subject_row(sid: int) -> dict:
    k = sid - SUBJECT_IDS[0]
    md = {"ra": 150.0 + k, "dec": 2.0, "#image_width": IMAGE, "#image_height": IMAGE}
    return {
        "subject_id": sid,
        "project_id": 7,
        "workflow_id": WORKFLOW_ID,
        "subject_set_id": 88,
        "metadata": json.dumps(md),
        "locations": json.dumps({"0": f"https://example.org/{sid}.png"}),
        "classifications_count": 6,
        "retired_at": "",
        "retirement_reason": "",
        "created_at": "2021-02-01 00:00:00 UTC",
        "updated_at": "2021-02-01 00:00:00 UTC",
    }


def catalogue_row(sid: int) -> dict:
    k = sid - SUBJECT_IDS[0]
    return {
        "subject_id": sid,
        "ra": 150.0 + k,
        "dec": 2.0,
        "z": 0.05,
        "petroR90_r": 5.0,
        "psffwhm_r": 1.2,
        "sample": "primary",
    }


def valid_export_rows() -> list[dict]:
    return [export_row(k, j) for k in range(len(SUBJECT_IDS)) for j in range(len(VOLUNTEERS))]


def csv_bytes(header: list[str], rows: list[dict]) -> bytes:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow(r)
    return buf.getvalue().encode("utf-8")


def write_valid_inputs(folder: Path) -> dict[str, Path]:
    """A valid 5-subject Clump Scout-style export, subject export and catalogue in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "export": folder / "classifications.csv",
        "subjects_export": folder / "subjects_export.csv",
        "catalogue": folder / "galaxies.csv",
    }
    files["export"].write_bytes(csv_bytes(EXPORT_HEADER, valid_export_rows()))
    files["subjects_export"].write_bytes(
        csv_bytes(SUBJECTS_HEADER, [subject_row(s) for s in SUBJECT_IDS])
    )
    files["catalogue"].write_bytes(
        csv_bytes(CATALOGUE_HEADER, [catalogue_row(s) for s in SUBJECT_IDS])
    )
    return files


#: clicks of the valid export (T1 only): 4 subjects x (6 + 5) + 1 spurious
VALID_CLICKS = 4 * 11 + 1


# --------------------------------------------------------------------------- the CLI runner


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """``clumpscout.cli.main(argv)`` -> (exit code, stderr); any exception is a failure."""
    capsys.readouterr()
    try:
        rc = cli_main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        rc = exc.code if isinstance(exc.code, int) else 2
    except Exception as exc:  # noqa: BLE001 - a traceback would reach the user
        err = capsys.readouterr().err
        pytest.fail(f"{argv[0]}: {type(exc).__name__}: {exc} escaped the CLI\n{err}")
    finally:
        root = logging.getLogger("clumpscout")
        for h in list(root.handlers):
            root.removeHandler(h)
        root.propagate = True
    return int(rc), capsys.readouterr().err


@pytest.fixture(scope="module")
def valid(tmp_path_factory) -> dict[str, Path]:
    """Valid inputs and the valid outputs of every stage (built once through the CLI)."""
    d = tmp_path_factory.mktemp("valid")
    files = write_valid_inputs(d)
    files["clicks"] = d / "clicks" / "clicks.parquet"
    files["subjects"] = d / "subjects" / "subjects.parquet"
    files["boxes"] = d / "boxes" / "boxes.parquet"
    steps = [
        ["extract", "--classifications", files["export"], "--subjects", files["subjects_export"],
         "--out", files["clicks"]],
        ["subjects", "--catalogue", files["catalogue"], "--subjects-export",
         files["subjects_export"], "--out", files["subjects"]],
        ["boxes", "--clicks", files["clicks"], "--subjects", files["subjects"],
         "--out", files["boxes"]],
    ]  # fmt: skip
    for argv in steps:
        rc = cli_main([str(a) for a in argv])
        assert rc == 0, f"valid input failed at {argv[0]}"
    root = logging.getLogger("clumpscout")
    for h in list(root.handlers):
        root.removeHandler(h)
    root.propagate = True
    return files


# --------------------------------------------------------------------------- the cases


@dataclass
class Inputs:
    """What a case may break before the stage runs."""

    export_rows: list[dict]
    subjects_rows: list[dict]
    catalogue_rows: list[dict]
    export_header: list[str] = field(default_factory=lambda: list(EXPORT_HEADER))
    subjects_header: list[str] = field(default_factory=lambda: list(SUBJECTS_HEADER))
    catalogue_header: list[str] = field(default_factory=lambda: list(CATALOGUE_HEADER))
    export_bytes: bytes | None = None
    subjects_bytes: bytes | None = None
    catalogue_bytes: bytes | None = None
    clicks: pd.DataFrame | None = None
    subjects: pd.DataFrame | None = None
    boxes: pd.DataFrame | None = None
    boxes_bytes: bytes | None = None
    config: object = None  # aggregate --config YAML (or snakemake --configfile overrides)


@dataclass
class Case:
    id: str
    stage: str  # extract | subjects | boxes | subsample | aggregate | snakemake
    mutate: Callable[[Inputs], None]
    # error: (file key, row or None, words the line must contain)
    error: tuple[str, int | None, tuple[str, ...]] | None = None
    # drop: (report key path, expected count)
    drop: tuple[tuple[str, ...], int] | None = None
    args: tuple = ()
    xfail: str | None = None


def set_export(i: int, column: str, value) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        inp.export_rows[i - 1][column] = value

    return f


def set_click(i: int, click: int, **kw) -> Callable[[Inputs], None]:
    """Change click ``click`` of the clump task of data row ``i``."""

    def f(inp: Inputs) -> None:
        r = inp.export_rows[i - 1]
        ann = json.loads(r["annotations"])
        ann[1]["value"][click].update(kw)
        r["annotations"] = json.dumps(ann)  # NaN / Infinity written as JSON's extensions

    return f


def replace_click(i: int, click: int, mark) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        r = inp.export_rows[i - 1]
        ann = json.loads(r["annotations"])
        ann[1]["value"][click] = mark
        r["annotations"] = json.dumps(ann)

    return f


def rename_column(header_attr: str, old: str, new: str) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        h = getattr(inp, header_attr)
        h[h.index(old)] = new
        rows = {
            "export_header": inp.export_rows,
            "subjects_header": inp.subjects_rows,
            "catalogue_header": inp.catalogue_rows,
        }[header_attr]
        for r in rows:
            r[new] = r.pop(old)

    return f


def drop_column(header_attr: str, name: str) -> Callable[[Inputs], None]:
    return lambda inp: getattr(inp, header_attr).remove(name)


def raw_export(transform: Callable[[bytes], bytes]) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        inp.export_bytes = transform(csv_bytes(inp.export_header, inp.export_rows))

    return f


def corrupt_line(line: int, old: bytes, new: bytes) -> Callable[[bytes], bytes]:
    """Replace ``old`` by ``new`` in physical line ``line`` (0 = header)."""

    def f(data: bytes) -> bytes:
        lines = data.split(b"\n")
        assert old in lines[line]
        lines[line] = lines[line].replace(old, new, 1)
        return b"\n".join(lines)

    return f


def add_duplicate_cid(inp: Inputs) -> None:
    inp.export_rows.append(copy.deepcopy(inp.export_rows[1]))


def volunteer_twice(inp: Inputs) -> None:
    r = copy.deepcopy(inp.export_rows[1])
    r["classification_id"] = 59999
    r["created_at"] = "2021-03-09 00:00:00 UTC"  # later than the first: this one is dropped
    inp.export_rows.append(r)


def subject_not_in_subjects_export(inp: Inputs) -> None:
    r = copy.deepcopy(inp.export_rows[1])
    r["classification_id"] = 59998
    r["subject_ids"] = 4242
    r["subject_data"] = json.dumps({"4242": {"retired": None}})
    inp.export_rows.append(r)


def huge_annotations(valid_json: bool) -> Callable[[Inputs], None]:
    """A ~5 MB annotations field (a long tool label), valid or cut short."""

    def f(inp: Inputs) -> None:
        r = inp.export_rows[2]
        ann = json.loads(r["annotations"])
        ann[1]["value"][0]["tool_label"] = "Normal clump " + "x" * 5_000_000
        text = json.dumps(ann)
        r["annotations"] = text if valid_json else text[: len(text) - 40]

    return f


def drop_subject_row(sid: int) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        inp.subjects_rows[:] = [r for r in inp.subjects_rows if r["subject_id"] != sid]

    return f


def drop_catalogue_row(sid: int) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        inp.catalogue_rows[:] = [r for r in inp.catalogue_rows if r["subject_id"] != sid]

    return f


def set_catalogue(i: int, column: str, value) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        inp.catalogue_rows[i - 1][column] = value

    return f


def add_subject_without_classifications(inp: Inputs) -> None:
    inp.subjects_rows.append(subject_row(1006))
    inp.catalogue_rows.append(catalogue_row(1006))


def table_edit(attr: str, fn: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        setattr(inp, attr, fn(getattr(inp, attr).copy()))

    return f


def set_config(cfg) -> Callable[[Inputs], None]:
    def f(inp: Inputs) -> None:
        inp.config = cfg

    return f


def first_box_row(b: pd.DataFrame) -> int:
    return int(np.flatnonzero(b["x1"].notna().to_numpy())[0])


def _partial_box(b: pd.DataFrame) -> pd.DataFrame:
    b.loc[first_box_row(b), "y2"] = np.nan
    return b


def _flipped_box(b: pd.DataFrame) -> pd.DataFrame:
    i = first_box_row(b)
    b.loc[i, ["x1", "x2"]] = b.loc[i, ["x2", "x1"]].to_numpy()
    return b


def _zero_width(b: pd.DataFrame) -> pd.DataFrame:
    b.loc[first_box_row(b), "image_width"] = 0
    return b


def _null_cid(b: pd.DataFrame) -> pd.DataFrame:
    b["classification_id"] = b["classification_id"].astype("Int64")
    b.loc[3, "classification_id"] = pd.NA
    return b


def _nan_box_side(s: pd.DataFrame) -> pd.DataFrame:
    s.loc[0, "box_side"] = np.nan
    return s


def _subject_missing(s: pd.DataFrame) -> pd.DataFrame:
    return s[s["subject_id"] != SUBJECT_IDS[1]].reset_index(drop=True)


def _volunteer_missing_on_one_row(c: pd.DataFrame) -> pd.DataFrame:
    """The first classification with two or more rows loses its volunteer on its last row."""
    counts = c["classification_id"].value_counts()
    cid = c["classification_id"][c["classification_id"].map(counts) >= 2].iloc[0]
    c.loc[np.flatnonzero(c["classification_id"] == cid)[-1], "volunteer"] = None
    return c


def _two_volunteers(c: pd.DataFrame) -> pd.DataFrame:
    counts = c["classification_id"].value_counts()
    cid = c["classification_id"][c["classification_id"].map(counts) >= 2].iloc[0]
    c.loc[np.flatnonzero(c["classification_id"] == cid)[-1], "volunteer"] = "someone-else"
    return c


def _click_far_outside(c: pd.DataFrame) -> pd.DataFrame:
    c.loc[np.flatnonzero(c["x"].notna())[0], "x"] = 2600.0  # the subjects are 400 px wide
    return c


def _noop(inp: Inputs) -> None:
    return None


NOT_INTEGER = "not an integer"
MALFORMED = "malformed JSON"

CASES = [
    # ---- classification export: JSON
    Case("export-annotations-broken-json", "extract", set_export(3, "annotations", '[{"task": "T1", "value": ['),
         error=("export", 3, (MALFORMED, "annotations"))),
    Case("export-metadata-broken-json", "extract", set_export(3, "metadata", '{"session": "s2", '),
         error=("export", 3, (MALFORMED, "metadata"))),
    Case("export-subject-data-broken-json", "extract", set_export(3, "subject_data", '{"1001": {'),
         error=("export", 3, (MALFORMED, "subject_data"))),
    Case("export-annotations-empty-field", "extract", set_export(4, "annotations", ""),
         error=("export", 4, ("annotations",))),
    Case("export-annotations-not-a-list", "extract", set_export(4, "annotations", '{"task": "T1"}'),
         error=("export", 4, ("annotations", "list"))),
    # ---- classification export: columns and emptiness
    Case("export-missing-column-annotations", "extract", drop_column("export_header", "annotations"),
         error=("export", 0, ("annotations",))),
    Case("export-renamed-column-user_name", "extract", rename_column("export_header", "user_name", "username"),
         error=("export", 0, ("user_name",))),
    Case("export-renamed-column-subject_ids", "extract", rename_column("export_header", "subject_ids", "subject_id"),
         error=("export", 0, ("subject_ids",))),
    Case("export-empty-0-bytes", "extract", raw_export(lambda b: b""), error=("export", None, ("empty",))),
    Case("export-header-only", "extract", raw_export(lambda b: b.split(b"\n", 1)[0] + b"\n"),
         error=("export", None, ("only a header",))),
    # ---- workflow selection
    Case("workflow-id-not-in-export", "extract", _noop, args=("--workflow-id", "424242"),
         error=("export", None, ("424242", str(WORKFLOW_ID)))),
    Case("workflow-version-not-in-export", "extract", _noop, args=("--workflow-version", "99.9"),
         error=("export", None, ("99.9", WORKFLOW_VERSION))),
    Case("workflow-id-not-a-number", "extract", _noop, args=("--workflow-id", "clumps"),
         error=("export", None, ("clumps",))),
    # ---- coordinates
    Case("click-x-nan", "extract", set_click(2, 0, x=float("nan")),
         drop=(("dropped_clicks", "nonfinite_coordinates"), 1)),
    Case("click-y-infinite", "extract", set_click(2, 1, y=float("inf")),
         drop=(("dropped_clicks", "nonfinite_coordinates"), 1)),
    Case("click-x-null", "extract", set_click(7, 0, x=None), drop=(("dropped_clicks", "missing_coordinates"), 1)),
    Case("click-y-text", "extract", set_click(8, 0, y="north"), drop=(("dropped_clicks", "missing_coordinates"), 1)),
    Case("click-negative-kept-flagged", "extract", set_click(9, 0, x=-5.0),
         drop=(("clicks_outside_image",), 1)),
    Case("click-outside-image-kept-flagged", "extract", set_click(9, 1, y=IMAGE + 30.0),
         drop=(("clicks_outside_image",), 1)),
    Case("mark-a-polygon", "extract",
         replace_click(10, 0, {"points": [{"x": 10, "y": 10}, {"x": 20, "y": 10}, {"x": 15, "y": 20}], "tool": 0, "frame": 0}),
         drop=(("dropped_clicks", "unsupported_shape"), 1)),
    Case("mark-a-rectangle-of-negative-width", "extract",
         replace_click(10, 0, {"x": 10, "y": 10, "width": -5, "height": 5, "tool": 0, "frame": 0}),
         drop=(("dropped_clicks", "malformed_shape"), 1)),
    Case("mark-bad-tool", "extract", set_click(11, 0, tool="normal"), drop=(("dropped_clicks", "invalid_tool"), 1)),
    Case("mark-not-an-object", "extract", replace_click(13, 0, 17), drop=(("dropped_clicks", "invalid_mark"), 1)),
    # ---- duplicates and subjects
    Case("duplicate-classification-id", "extract", add_duplicate_cid,
         drop=(("dropped_classifications", "duplicate_classification_id"), 1)),
    Case("volunteer-classifies-subject-twice", "extract", volunteer_twice,
         drop=(("dropped_classifications", "duplicate_volunteer_subject"), 1)),
    Case("classification-of-several-subjects", "extract", set_export(5, "subject_ids", "1001;1002"),
         drop=(("dropped_classifications", "multiple_subjects"), 1)),
    Case("subject-not-in-subject-export-keep", "extract", subject_not_in_subjects_export,
         drop=(("subjects_missing_from_subjects_export", "classifications"), 1)),
    Case("subject-not-in-subject-export-drop", "extract", subject_not_in_subjects_export,
         args=("--missing-subjects", "drop"),
         drop=(("dropped_classifications", "subject_missing_from_subjects_export"), 1)),
    Case("subject-in-subject-export-without-classifications", "extract", add_subject_without_classifications,
         drop=(("subjects_without_classifications",), 1)),
    # ---- bytes and CSV structure
    Case("export-non-utf8-bytes", "extract", raw_export(corrupt_line(3, b"carol", b"car\xffl")),
         error=("export", 3, ("UTF-8",))),
    Case("export-non-utf8-header", "extract", raw_export(corrupt_line(0, b"user_ip", b"user\xe9ip")),
         error=("export", 0, ("UTF-8",))),
    Case("export-row-with-missing-field", "extract", raw_export(corrupt_line(3, b",ip2,", b",")),
         error=("export", 3, ("fields",))),
    Case("export-classification-id-not-integer", "extract", set_export(3, "classification_id", "5000x"),
         error=("export", 3, ("classification_id", NOT_INTEGER))),
    Case("export-created_at-not-a-date", "extract", set_export(3, "created_at", "yesterday"),
         error=("export", 3, ("created_at",))),
    Case("export-empty-user_name", "extract", set_export(3, "user_name", ""),
         error=("export", 3, ("user_name",))),
    Case("export-huge-line-valid", "extract", huge_annotations(True), drop=(("clicks_kept",), VALID_CLICKS)),
    Case("export-huge-line-broken-json", "extract", huge_annotations(False),
         error=("export", 3, (MALFORMED, "annotations"))),
    Case("export-unknown-clump-task", "extract", _noop, args=("--clump-task", "T9"),
         error=("export", None, ("T9",))),
    # ---- subject export
    Case("subjects-export-broken-metadata", "extract",
         lambda inp: inp.subjects_rows[1].update(metadata='{"ra": 151.0,'),
         error=("subjects_export", 2, (MALFORMED, "metadata"))),
    Case("subjects-export-missing-subject_id", "extract", drop_column("subjects_header", "subject_id"),
         error=("subjects_export", 0, ("subject_id",))),
    Case("subjects-export-subject_id-not-integer", "extract",
         lambda inp: inp.subjects_rows[2].update(subject_id="10o3"),
         error=("subjects_export", 3, ("subject_id", NOT_INTEGER))),
    Case("subjects-export-empty", "extract", lambda inp: setattr(inp, "subjects_bytes", b""),
         error=("subjects_export", None, ("empty",))),
    # ---- galaxy catalogue (clumpscout subjects)
    Case("catalogue-subject-without-psf", "subjects", set_catalogue(2, "psffwhm_r", ""),
         error=("catalogue", 2, ("PSF", str(SUBJECT_IDS[1])))),
    Case("catalogue-negative-psf", "subjects", set_catalogue(3, "psffwhm_r", -1.2),
         error=("catalogue", 3, ("PSF", str(SUBJECT_IDS[2])))),
    Case("catalogue-without-r90", "subjects", set_catalogue(4, "petroR90_r", ""),
         error=("catalogue", 4, ("R90", str(SUBJECT_IDS[3])))),
    Case("catalogue-unknown-column-names", "subjects",
         lambda inp: (rename_column("catalogue_header", "psffwhm_r", "seeing")(inp),
                      rename_column("catalogue_header", "petroR90_r", "size")(inp)),
         error=("catalogue", 0, ("R90", "PSF FWHM", "seeing"))),
    Case("catalogue-duplicate-subject", "subjects",
         lambda inp: inp.catalogue_rows.append(catalogue_row(SUBJECT_IDS[0])),
         error=("catalogue", 6, ("twice", str(SUBJECT_IDS[0])))),
    Case("catalogue-non-utf8-bytes", "subjects",
         lambda inp: setattr(inp, "catalogue_bytes", csv_bytes(inp.catalogue_header, inp.catalogue_rows).replace(b"primary", b"prim\xe4ry", 1)),
         error=("catalogue", 1, ("UTF-8",))),
    Case("catalogue-header-only", "subjects",
         lambda inp: setattr(inp, "catalogue_bytes", ",".join(inp.catalogue_header).encode() + b"\n"),
         error=("catalogue", None, ("no rows",))),
    Case("subject-export-subject-not-in-catalogue", "subjects", drop_catalogue_row(SUBJECT_IDS[4]),
         drop=(("export_subjects_not_in_catalogue",), 1)),
    Case("catalogue-galaxy-not-in-subject-export", "subjects", drop_subject_row(SUBJECT_IDS[4]),
         drop=(("catalogue_subjects_not_in_subject_export",), 1)),
    Case("config-negative-native-scale", "subjects", _noop, args=("--native-scale", "-0.396"),
         error=("", None, ("--native-scale", "'-0.396' is not a number > 0"))),
    # ---- boxes
    Case("boxes-subject-without-psf-row", "boxes", table_edit("subjects", _subject_missing),
         error=("subjects", None, (str(SUBJECT_IDS[1]),))),
    Case("boxes-subject-box-side-nan", "boxes", table_edit("subjects", _nan_box_side),
         error=("subjects", None, (str(SUBJECT_IDS[0]),))),
    Case("boxes-negative-box-side", "boxes", _noop, args=("--box-side", "-3"),
         error=("", None, ("--box-side", "'-3' is not a number > 0 or 'auto'"))),
    Case("boxes-clicks-not-parquet", "boxes", lambda inp: setattr(inp, "clicks", b"PAR1 this is not parquet"),
         error=("clicks", None, ("Parquet",))),
    Case("boxes-volunteer-missing-on-some-rows", "boxes", table_edit("clicks", _volunteer_missing_on_one_row),
         error=("clicks", None, ("classification", "volunteer is missing on row(s)", "on row(s)"))),
    Case("boxes-classification-with-two-volunteers", "boxes", table_edit("clicks", _two_volunteers),
         error=("clicks", None, ("several volunteers", "someone-else"))),
    Case("boxes-click-outside-the-image", "boxes", table_edit("clicks", _click_far_outside),
         drop=(("clicks_outside_image",), 1)),
    Case("boxes-no-subjects-no-box-side", "boxes", _noop, args=("--subjects-none",),
         error=("", None, ("--box-side PX",))),
    # ---- subsample
    Case("subsample-n-zero", "subsample", _noop, args=("--n", "0"),
         error=("", None, ("--n", "'0' is not an integer >= 1"))),
    Case("subsample-n-above-available", "subsample", _noop, args=("--n", "1000"),
         drop=(("n_subjects_short",), len(SUBJECT_IDS))),
    Case("subsample-null-classification-id", "subsample", table_edit("boxes", _null_cid),
         error=("boxes", 3, ("classification_id",))),
    # ---- aggregate
    Case("aggregate-config-unknown-key", "aggregate", set_config({"aggregate": {"tau": 5.0, "tauu": 1.0}}),
         error=("config", None, ("tauu",))),
    Case("aggregate-config-p0-out-of-range", "aggregate", set_config({"aggregate": {"p0_fp": 1.5}}),
         error=("config", None, ("p0_fp",))),
    Case("aggregate-config-negative-tau", "aggregate", set_config({"aggregate": {"tau": -1.0}}),
         error=("config", None, ("tau",))),
    Case("aggregate-config-negative-n_fp_max", "aggregate", set_config({"aggregate": {"n_fp_max": -1.0}}),
         error=("config", None, ("n_fp_max",))),
    Case("aggregate-config-negative-sigma2", "aggregate", set_config({"aggregate": {"sigma2_0_S": -0.1}}),
         error=("config", None, ("sigma2_0_S",))),
    Case("aggregate-config-not-a-mapping", "aggregate", set_config(["tau", 5]),
         error=("config", None, ("mapping",))),
    Case("aggregate-box-partial-coordinates", "aggregate", table_edit("boxes", _partial_box),
         error=("boxes", 0, ("x1, y1, x2, y2",))),
    Case("aggregate-box-flipped", "aggregate", table_edit("boxes", _flipped_box),
         error=("boxes", 0, ("x2 <= x1",))),
    Case("aggregate-image-width-zero", "aggregate", table_edit("boxes", _zero_width),
         error=("boxes", 0, ("image_width",))),
    Case("aggregate-boxes-missing-column", "aggregate", table_edit("boxes", lambda b: b.drop(columns=["x1"])),
         error=("boxes", None, ("x1",))),
    # ---- workflow config (snakemake -n)
    Case("workflow-config-unknown-nested-key", "snakemake", set_config({"aggregate": {"taux": 5.0}}),
         error=("", None, ("taux",))),
    Case("workflow-config-negative-threshold", "snakemake", set_config({"aggregate": {"n_fp_max": -1.0}}),
         error=("", None, ("n_fp_max",))),
    Case("workflow-config-n-zero", "snakemake", set_config({"subsample": {"n": [0, 5]}}),
         error=("", None, ("subsample",))),
]  # fmt: skip


# --------------------------------------------------------------------------- running a case


def _fresh_inputs(valid: dict[str, Path]) -> Inputs:
    return Inputs(
        export_rows=valid_export_rows(),
        subjects_rows=[subject_row(s) for s in SUBJECT_IDS],
        catalogue_rows=[catalogue_row(s) for s in SUBJECT_IDS],
        clicks=pd.read_parquet(valid["clicks"]),
        subjects=pd.read_parquet(valid["subjects"]),
        boxes=pd.read_parquet(valid["boxes"]),
    )


def _write(inp: Inputs, d: Path) -> dict[str, Path]:
    f = {
        "export": d / "classifications.csv",
        "subjects_export": d / "subjects_export.csv",
        "catalogue": d / "galaxies.csv",
        "clicks": d / "clicks.parquet",
        "subjects": d / "subjects.parquet",
        "boxes": d / "boxes.parquet",
        "config": d / "aggregate.yaml",
    }
    f["export"].write_bytes(
        inp.export_bytes
        if inp.export_bytes is not None
        else csv_bytes(inp.export_header, inp.export_rows)
    )
    f["subjects_export"].write_bytes(
        inp.subjects_bytes
        if inp.subjects_bytes is not None
        else csv_bytes(inp.subjects_header, inp.subjects_rows)
    )
    f["catalogue"].write_bytes(
        inp.catalogue_bytes
        if inp.catalogue_bytes is not None
        else csv_bytes(inp.catalogue_header, inp.catalogue_rows)
    )
    for key in ("clicks", "subjects", "boxes"):
        v = getattr(inp, key)
        if isinstance(v, bytes):
            f[key].write_bytes(v)
        else:
            v.to_parquet(f[key], index=False)
    if inp.config is not None:
        f["config"].write_text(yaml.safe_dump(inp.config))
    return f


def _argv(case: Case, f: dict[str, Path], out: Path) -> tuple[list, dict[str, Path]]:
    """The CLI call of a case and the report file(s) it writes."""
    if case.stage == "extract":
        o = out / "clicks.parquet"
        argv = ["extract", "--classifications", f["export"], "--subjects", f["subjects_export"],
                "--out", o]  # fmt: skip
        return argv, {"report": out / "clicks_report.json"}
    if case.stage == "subjects":
        argv = ["subjects", "--catalogue", f["catalogue"], "--subjects-export",
                f["subjects_export"], "--out", out / "subjects.parquet"]  # fmt: skip
        return argv, {"report": out / "subjects_report.json"}
    if case.stage == "boxes":
        subjects = [] if "--subjects-none" in case.args else ["--subjects", f["subjects"]]
        argv = ["boxes", "--clicks", f["clicks"], *subjects, "--out", out / "boxes.parquet"]
        return argv, {"report": out / "boxes_report.json"}
    if case.stage == "subsample":
        n = [] if "--n" in case.args else ["--n", "3"]
        argv = ["subsample", "--boxes", f["boxes"], *n, "--seed", "7",
                "--out", out / "boxes.parquet", "--report", out / "report.json"]  # fmt: skip
        return argv, {"report": out / "report.json"}
    if case.stage == "aggregate":
        cfg = ["--config", f["config"]] if f["config"].exists() else []
        argv = ["aggregate", "--boxes", f["boxes"], "--out", out / "agg", *cfg, "--seed", "3"]
        return argv, {"report": out / "agg" / "report.json"}
    raise ValueError(case.stage)


def _lookup(report: dict, keys: tuple[str, ...]):
    v = report
    for k in keys:
        v = v.get(k, 0) if isinstance(v, dict) else 0
    return v


def _files_in(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def assert_one_line_error(rc: int, err: str, culprit: str | None, row: int | None, words) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in err, err
    assert rc == 2, f"exit code {rc}, stderr:\n{err}"
    assert len(lines) == 1, f"expected one 'error:' line, got {len(lines)}:\n{err}"
    line = lines[0]
    if culprit:
        assert culprit in line, f"the error does not name {culprit}: {line}"
    if row is not None:
        assert f":row {row}:" in line, f"the error does not name row {row}: {line}"
    for w in words:
        assert w in line, f"{w!r} not in: {line}"
    assert len(line) < 1000, f"error line of {len(line)} characters"
    return line


def _config_of(case: Case) -> dict:
    inp = Inputs([], [], [])
    case.mutate(inp)
    return dict(inp.config or {})


def _start_snakemake(case: Case, folder: Path) -> subprocess.Popen:
    """``snakemake -n`` on config.yaml with the case's overrides (started, not waited for)."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    for key, value in _config_of(case).items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    path = folder / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", "-n", "--quiet", "-d", str(folder / "wd"),
         "-s", str(REPO / "Snakefile"), "--configfile", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
    )  # fmt: skip


#: one case per command family, run in a real ``python -m clumpscout`` process
FAMILY_CASES = {
    "extract": "export-annotations-broken-json",
    "subjects": "catalogue-subject-without-psf",
    "boxes": "boxes-subject-without-psf-row",
    "subsample": "subsample-null-classification-id",
    "aggregate": "aggregate-box-flipped",
}


def _start_family(case: Case, valid: dict[str, Path], folder: Path):
    inp = _fresh_inputs(valid)
    case.mutate(inp)
    src = folder / "in"
    src.mkdir()
    files = _write(inp, src)
    out = folder / "out"
    argv, _ = _argv(case, files, out)
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "clumpscout", *map(str, argv), *case.args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    return proc, files, out


@pytest.fixture(scope="module", autouse=True)
def background(valid, tmp_path_factory):
    """The subprocess cases, started together at the beginning of the module.

    They wait mostly for the CPU (snakemake's start-up), so running them side by side keeps the
    file's wall time down on a busy machine.
    """
    procs: dict[str, object] = {}
    for c in CASES:
        if c.stage == "snakemake":
            procs[c.id] = _start_snakemake(c, tmp_path_factory.mktemp("smk"))
    for family, cid in FAMILY_CASES.items():
        case = next(c for c in CASES if c.id == cid)
        procs[f"family:{family}"] = _start_family(case, valid, tmp_path_factory.mktemp(family))
    yield procs
    for p in procs.values():
        proc = p[0] if isinstance(p, tuple) else p
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _params():
    out = []
    for c in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []
        out.append(pytest.param(c, id=c.id, marks=marks))
    return out


def test_the_table_has_at_least_30_distinct_cases():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) >= 30
    for c in CASES:
        assert (c.error is None) != (c.drop is None), c.id


def test_valid_inputs_pass(valid, tmp_path, capsys):
    """The unbroken synthetic export passes every stage (the cases break one thing each)."""
    clicks = pd.read_parquet(valid["clicks"])
    rep = json.loads((valid["clicks"].parent / "clicks_report.json").read_text())
    assert rep["clicks_kept"] == VALID_CLICKS
    assert rep["classifications_kept"] == len(SUBJECT_IDS) * len(VOLUNTEERS)
    assert sum(rep["dropped_classifications"].values()) == 0
    assert sum(v for k, v in rep["dropped_clicks"].items() if k != "other_task") == 0
    assert rep["other_task_clicks"] == {"T0": len(SUBJECT_IDS) * len(VOLUNTEERS)}
    assert clicks["x"].notna().sum() == VALID_CLICKS
    boxes = pd.read_parquet(valid["boxes"])
    # one NaN row per classification that marked nothing: the 6 of the empty subject
    assert len(boxes) == VALID_CLICKS + len(VOLUNTEERS)
    sub = tmp_path / "sub"
    rc, err = run_cli(["subsample", "--boxes", valid["boxes"], "--n", 3, "--seed", 7,
                       "--out", sub / "boxes.parquet", "--report", sub / "report.json"], capsys)  # fmt: skip
    assert rc == 0, err
    rc, err = run_cli(
        ["aggregate", "--boxes", sub / "boxes.parquet", "--out", tmp_path / "agg"], capsys
    )
    assert rc == 0, err
    assert len(pd.read_parquet(tmp_path / "agg" / "assignments.parquet")) == len(
        pd.read_parquet(sub / "boxes.parquet")
    )


@pytest.mark.parametrize("case", _params())
def test_bad_input(case: Case, valid, background, tmp_path, capsys):
    if case.stage == "snakemake":
        proc = background[case.id]
        err = proc.communicate(timeout=300)[0]
        rc = proc.returncode
        assert rc != 0, err
        assert "Traceback" not in err or "ValidationError" in err or "WorkflowError" in err
        for w in case.error[2]:
            assert w in err, f"{w!r} not named:\n{err[-2000:]}"
        return
    inp = _fresh_inputs(valid)
    case.mutate(inp)
    src = tmp_path / "in"
    src.mkdir()
    files = _write(inp, src)
    out = tmp_path / "out"
    argv, reports = _argv(case, files, out)
    rc, err = run_cli([*argv, *(a for a in case.args if a != "--subjects-none")], capsys)
    if case.error is not None:
        key, row, words = case.error
        assert_one_line_error(rc, err, str(files[key]) if key else None, row, words)
        assert _files_in(out) == [], f"left behind: {_files_in(out)}"
    else:
        assert rc == 0, err
        keys, expected = case.drop
        report = json.loads(reports["report"].read_text())
        assert _lookup(report, keys) == expected, (keys, report)
        assert not [p for p in _files_in(out) if p.endswith(".tmp")]


# --------------------------------------------------------------------------- real processes


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_no_traceback_in_a_real_process(family, background):
    """``python -m clumpscout ...`` in a subprocess: one line, exit 2, no traceback."""
    case = next(c for c in CASES if c.id == FAMILY_CASES[family])
    proc, files, out = background[f"family:{family}"]
    _, err = proc.communicate(timeout=300)
    key, row, words = case.error
    assert_one_line_error(proc.returncode, err, str(files[key]), row, words)
    assert _files_in(out) == []
