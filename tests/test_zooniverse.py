"""The Zooniverse export reader (clumpscout.data.zooniverse; columns: docs/tables.md#clicks).

Synthetic exports are built in code (columns and JSON as in a real export); the real Penguin Watch
export in ../shared is compared with panoptes-aggregation 3.4.5's point extractor output.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from clumpscout.cli import main as cli_main
from clumpscout.data.zooniverse import CLICK_COLUMNS, extract_clicks
from clumpscout.errors import InputError
from clumpscout.io import report_path
from clumpscout.simulation.export import CLASSIFICATION_COLUMNS

# Column names of the Zooniverse exports (a contract): defined once in clumpscout.simulation.export
# and pinned there by tests/test_simulate.py against its own hand-written lists (and, for the
# classification export, against the real Penguin Watch export in ../shared).
HEADER = list(CLASSIFICATION_COLUMNS)


def classic_point(x, y, tool=0, label=None, frame=0):
    d = {"x": x, "y": y, "tool": tool, "frame": frame, "details": []}
    d["tool_label"] = label or ("Unusual clump" if tool == 1 else "Normal clump")
    return d


def fem_point(x, y, tool=0, frame=0):
    return {"x": x, "y": y, "toolIndex": tool, "toolType": "point", "frame": frame, "details": []}


def row(
    cid,
    user,
    sid,
    clumps=(),
    *,
    workflow_id=11803,
    version="64.136",
    created="2020-01-01 00:00:00 UTC",
    user_id=None,
    bulge=(200.0, 200.0),
    natural=(400, 400),
    fem=False,
    annotations=None,
    metadata=None,
    subject_data=None,
    subject_ids=None,
):
    """One classification-export row (dict) with a bulge task T0 and a clump task T1."""
    if annotations is None:
        point = fem_point if fem else classic_point
        t0 = [point(*bulge)] if bulge else []
        if not fem:
            t0 = [dict(p, tool_label="Bulge") for p in t0]
        annotations = [
            {"task": "T0", "task_label": "Mark the bulge", "value": t0},
            {"task": "T1", "task_label": "Mark the clumps", "value": list(clumps)},
        ]
        if fem:
            for a in annotations:
                a["taskType"] = "drawing"
                del a["task_label"]
    if metadata is None:
        metadata = {"session": "abc", "user_language": "en"}
        if natural is not None:
            metadata["subject_dimensions"] = [
                {
                    "clientWidth": 500,
                    "clientHeight": 500,
                    "naturalWidth": natural[0],
                    "naturalHeight": natural[1],
                }
            ]
    if subject_data is None:
        subject_data = {str(sid): {"retired": None}}
    return {
        "classification_id": cid,
        "user_name": user,
        "user_id": "" if user_id is None else user_id,
        "user_ip": "0a0b",
        "workflow_id": workflow_id,
        "workflow_name": "Clump Scout",
        "workflow_version": version,
        "created_at": created,
        "gold_standard": "",
        "expert": "",
        "metadata": metadata if isinstance(metadata, str) else json.dumps(metadata),
        "annotations": annotations if isinstance(annotations, str) else json.dumps(annotations),
        "subject_data": subject_data if isinstance(subject_data, str) else json.dumps(subject_data),
        "subject_ids": sid if subject_ids is None else subject_ids,
    }


def write_export(path: Path, rows, header=HEADER) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=header, lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    return path


def write_subjects(path: Path, subject_ids, metadata=None) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["subject_id", "project_id", "workflow_id", "subject_set_id", "metadata"])
        for sid in subject_ids:
            md = (metadata or {}).get(sid, {"ra": 1.0, "dec": 2.0})
            w.writerow([sid, 1, 11803, 5, json.dumps(md)])
    return path


@pytest.fixture
def basic(tmp_path):
    rows = [
        row(
            10,
            "alice",
            101,
            [classic_point(10.0, 20.0, 0), classic_point(30.0, 40.0, 1)],
            user_id=7,
            created="2020-01-01 00:00:10 UTC",
        ),
        row(11, "not-logged-in-aaaa", 101, [], created="2020-01-01 00:00:20 UTC"),
        row(12, "not-logged-in-bbbb", 101, [classic_point(11.0, 21.0, 0)]),
        row(9, "bob", 102, [classic_point(5.5, 6.5, 1)], user_id=8),
    ]
    exp = write_export(tmp_path / "cls.csv", rows)
    subj = write_subjects(tmp_path / "subjects.csv", [101, 102])
    return exp, subj


def test_basic_known_answer(basic):
    exp, subj = basic
    clicks, report = extract_clicks(exp, subj)
    assert list(clicks.columns) == list(CLICK_COLUMNS)
    # sorted by subject, classification, click order
    assert clicks["subject_id"].tolist() == [101, 101, 101, 101, 102]
    assert clicks["classification_id"].tolist() == [10, 10, 11, 12, 9]
    assert clicks["x"].tolist()[:2] == [10.0, 30.0]
    assert clicks["y"].tolist()[:2] == [20.0, 40.0]
    assert math.isnan(clicks["x"].iloc[2]) and math.isnan(clicks["y"].iloc[2])
    assert clicks["unusual"].tolist() == [False, True, False, False, True]
    assert clicks["tool"].iloc[2] is pd.NA and clicks["frame"].iloc[2] is pd.NA
    assert clicks["tool"].iloc[1] == 1
    assert clicks["tool_label"].iloc[1] == "Unusual clump"
    assert clicks["volunteer"].tolist() == [
        "alice",
        "alice",
        "not-logged-in-aaaa",
        "not-logged-in-bbbb",
        "bob",
    ]
    assert clicks["user_id"].iloc[0] == 7 and clicks["user_id"].iloc[2] is pd.NA
    assert (clicks["task"] == "T1").all()
    assert (clicks["workflow_id"] == 11803).all() and (clicks["workflow_version"] == "64.136").all()
    assert str(clicks["created_at"].dt.tz) == "UTC"
    assert clicks["created_at"].iloc[0] == pd.Timestamp("2020-01-01 00:00:10", tz="UTC")
    # dtypes of the contract
    assert clicks["classification_id"].dtype == np.int64
    assert clicks["subject_id"].dtype == np.int64
    assert str(clicks["user_id"].dtype) == "Int64"
    assert str(clicks["tool"].dtype) == "Int64" and str(clicks["frame"].dtype) == "Int64"
    assert str(clicks["unusual"].dtype) == "boolean"
    assert clicks["x"].dtype == np.float64
    assert report["classifications_kept"] == 4
    assert report["clicks_kept"] == 4
    assert report["unusual_clicks"] == 2
    assert report["empty_classifications"] == 1
    assert report["other_task_clicks"] == {"T0": 4}  # the bulge clicks
    assert report["dropped_clicks"]["other_task"] == 4
    assert report["volunteers"] == 4 and report["not_logged_in_volunteers"] == 2
    assert report["subjects"] == 2
    json.dumps(report)  # serialisable


def test_fem_tool_index_format_gives_the_same_clicks(tmp_path, basic):
    exp, subj = basic
    rows = [
        row(
            10,
            "alice",
            101,
            [fem_point(10.0, 20.0, 0), fem_point(30.0, 40.0, 1)],
            fem=True,
            user_id=7,
            created="2020-01-01 00:00:10 UTC",
        ),
        row(11, "not-logged-in-aaaa", 101, [], fem=True, created="2020-01-01 00:00:20 UTC"),
        row(12, "not-logged-in-bbbb", 101, [fem_point(11.0, 21.0, 0)], fem=True),
        row(9, "bob", 102, [fem_point(5.5, 6.5, 1)], fem=True, user_id=8),
    ]
    fem = write_export(tmp_path / "fem.csv", rows)
    a, _ = extract_clicks(exp, subj)
    b, rep = extract_clicks(fem, subj)
    cols = ["classification_id", "subject_id", "volunteer", "x", "y", "tool", "unusual"]
    pd.testing.assert_frame_equal(a[cols], b[cols])
    assert b["tool_label"].isna().all()  # FEM marks carry no label
    assert rep["other_task_clicks"] == {"T0": 4}


def test_fem_task_skipped_is_an_empty_classification(tmp_path):
    ann = [{"task": "T0", "taskType": "drawing", "value": [fem_point(1.0, 2.0)]}]
    exp = write_export(
        tmp_path / "c.csv",
        [row(1, "a", 5, annotations=ann), row(2, "b", 5, [fem_point(3.0, 4.0)], fem=True)],
    )
    clicks, rep = extract_clicks(exp, None)
    assert len(clicks) == 2 and clicks["x"].isna().tolist() == [True, False]
    assert rep["empty_classifications"] == 1


def test_combo_task_is_flattened(tmp_path):
    ann = [
        {
            "task": "T9",
            "value": [
                {"task": "T0", "value": [classic_point(1.0, 1.0)]},
                {"task": "T1", "value": [classic_point(5.0, 6.0, 1)]},
            ],
        }
    ]
    exp = write_export(tmp_path / "c.csv", [row(1, "a", 5, annotations=ann)])
    clicks, rep = extract_clicks(exp, None)
    assert clicks[["x", "y"]].values.tolist() == [[5.0, 6.0]]
    assert clicks["unusual"].tolist() == [True]
    assert rep["other_task_clicks"] == {"T0": 1}


def test_not_logged_in_volunteers_stay_distinct(tmp_path):
    rows = [
        row(1, "not-logged-in-1111", 5, [classic_point(1.0, 1.0)]),
        row(2, "not-logged-in-2222", 5, [classic_point(2.0, 2.0)]),
        row(3, "not-logged-in-1111", 6, [classic_point(3.0, 3.0)]),
    ]
    clicks, rep = extract_clicks(write_export(tmp_path / "c.csv", rows), None)
    assert clicks["volunteer"].tolist() == [
        "not-logged-in-1111",
        "not-logged-in-2222",
        "not-logged-in-1111",
    ]
    assert rep["volunteers"] == 2 and rep["not_logged_in_volunteers"] == 2
    assert rep["dropped_classifications"]["duplicate_volunteer_subject"] == 0


def test_duplicate_volunteer_subject_keeps_the_first_by_time_then_id(tmp_path):
    rows = [
        # file order is not time order: classification 3 is the earliest
        row(1, "ann", 5, [classic_point(1.0, 1.0)], created="2020-01-02 00:00:00 UTC"),
        row(3, "ann", 5, [classic_point(3.0, 3.0)], created="2020-01-01 00:00:00 UTC"),
        row(2, "ann", 5, [classic_point(2.0, 2.0)], created="2020-01-01 00:00:00 UTC"),
        row(4, "ann", 6, [classic_point(4.0, 4.0)], created="2020-01-03 00:00:00 UTC"),
    ]
    clicks, rep = extract_clicks(write_export(tmp_path / "c.csv", rows), None)
    # 2 and 3 tie on created_at -> the smaller id, 2
    assert clicks["classification_id"].tolist() == [2, 4]
    assert clicks["x"].tolist() == [2.0, 4.0]
    assert rep["dropped_classifications"]["duplicate_volunteer_subject"] == 2


def test_iso_created_at_is_accepted(tmp_path):
    rows = [
        row(1, "a", 5, created="2020-01-01 00:00:05 UTC"),
        row(2, "b", 5, created="2020-01-01T00:00:06.500Z"),
    ]
    clicks, _ = extract_clicks(write_export(tmp_path / "c.csv", rows), None)
    assert clicks["created_at"].tolist() == [
        pd.Timestamp("2020-01-01 00:00:05", tz="UTC"),
        pd.Timestamp("2020-01-01 00:00:06.5", tz="UTC"),
    ]


def test_duplicate_classification_id_keeps_first_row(tmp_path):
    rows = [
        row(1, "ann", 5, [classic_point(1.0, 1.0)]),
        row(1, "ann", 5, [classic_point(9.0, 9.0)]),
        row(2, "bea", 5, []),
    ]
    clicks, rep = extract_clicks(write_export(tmp_path / "c.csv", rows), None)
    assert clicks["x"].tolist()[0] == 1.0 and len(clicks) == 2
    assert rep["dropped_classifications"]["duplicate_classification_id"] == 1


def test_nan_inf_and_null_coordinates_are_dropped_and_counted(tmp_path):
    # json.dumps writes NaN / Infinity literals, which a lenient JSON reader accepts
    bad = [
        classic_point(float("nan"), 1.0),
        classic_point(1.0, float("inf")),
        {"x": None, "y": 3.0, "tool": 0, "frame": 0, "details": []},
        {"x": "abc", "y": 3.0, "tool": 0, "frame": 0, "details": []},
    ]
    rows = [
        row(1, "a", 5, bad + [classic_point("12.5", 4)]),  # numeric strings are accepted
        row(2, "b", 5, bad[:2]),  # every click dropped -> an empty row, counted apart
    ]
    clicks, rep = extract_clicks(write_export(tmp_path / "c.csv", rows), None)
    assert clicks["x"].tolist()[0] == 12.5 and clicks["y"].tolist()[0] == 4.0
    assert len(clicks) == 2 and math.isnan(clicks["x"].iloc[1])
    assert rep["dropped_clicks"]["nonfinite_coordinates"] == 4
    assert rep["dropped_clicks"]["missing_coordinates"] == 2
    assert rep["classifications_emptied_by_drops"] == 1
    assert rep["empty_classifications"] == 0


def test_results_do_not_depend_on_orjson(tmp_path, monkeypatch):
    """orjson (fast path) and json.loads (fallback) give the same table and report."""
    from clumpscout.data import click_definition, zooniverse_csv

    marks = [classic_point(float("nan"), 1.0), classic_point(1e300, 2.0), classic_point(3, 4)]
    rows = [row(1, "a", 5, marks), row(2, "b", 5, [classic_point(0.1, 0.2, 1)])]
    exp = write_export(tmp_path / "c.csv", rows)
    a, rep_a = extract_clicks(exp, None)
    monkeypatch.setattr(zooniverse_csv, "_orjson", None)  # metadata and subject data
    monkeypatch.setattr(click_definition, "_orjson", None)  # annotations (the shared definition)
    b, rep_b = extract_clicks(exp, None)
    pd.testing.assert_frame_equal(a, b)
    rep_a.pop("seconds"), rep_b.pop("seconds")
    assert rep_a == rep_b and rep_a["dropped_clicks"]["nonfinite_coordinates"] == 1


def test_shapes_unsupported_marks_and_other_tools(tmp_path):
    # shapes in detail: tests/test_shapes.py
    marks = [
        {"x": 5.0, "y": 5.0, "r": 3.0, "angle": 0, "tool": 0, "frame": 0, "details": []},
        {"points": [{"x": 1, "y": 1}], "closed": True, "tool": 0, "frame": 0, "details": []},
        {"x": 5.0, "tool": 0, "frame": 0, "details": []},  # a full-height line
        classic_point(7.0, 8.0, 2),
        classic_point(9.0, 9.0, 0),
        {"x": 1.0, "y": 1.0, "frame": 0, "details": []},  # no tool
        "garbage",
    ]
    fem_circle = {"x_center": 1, "y_center": 1, "r": 2, "toolIndex": 0, "toolType": "circle"}
    rows = [row(1, "a", 5, marks), row(2, "b", 5, [fem_circle], fem=True)]
    clicks, rep = extract_clicks(write_export(tmp_path / "c.csv", rows), None, tools=(0, 1))
    assert clicks["x"].dropna().tolist() == [5.0, 9.0, 1.0]
    assert clicks["shape"].tolist() == ["circle", "point", "circle"]
    d = rep["dropped_clicks"]
    assert d["unsupported_shape"] == 2
    assert rep["unsupported_shapes"] == {"fullHeightLine": 1, "polygon": 1}
    assert d["other_tool"] == 1 and d["invalid_tool"] == 1 and d["invalid_mark"] == 1
    assert rep["shapes_kept"] == {"point": 1, "rectangle": 0, "circle": 2, "ellipse": 0}


def test_other_tasks_are_counted_not_kept_and_all_drawing_tasks_when_no_clump_task(tmp_path):
    ann = [
        {"task": "T0", "value": [classic_point(1.0, 1.0, label="Bulge")]},
        {"task": "T1", "value": [classic_point(2.0, 2.0)]},
        {"task": "T2", "value": ["Too faint"]},  # shortcut
        {"task": "T3", "value": "Yes"},  # question
    ]
    exp = write_export(tmp_path / "c.csv", [row(1, "a", 5, annotations=ann)])
    clicks, rep = extract_clicks(exp, None)
    assert clicks["x"].tolist() == [2.0]
    assert rep["other_task_clicks"] == {"T0": 1}
    assert rep["other_task_annotations"] == {"T2": 1, "T3": 1}
    every, rep2 = extract_clicks(exp, None, clump_task=None)
    assert every["task"].tolist() == ["T0", "T1"] and every["x"].tolist() == [1.0, 2.0]
    assert rep2["other_task_clicks"] == {}


def test_workflow_and_version_selection(tmp_path):
    rows = [
        row(1, "a", 5, [classic_point(1.0, 1.0)], workflow_id=1, version="3.10"),
        row(2, "b", 5, [classic_point(2.0, 2.0)], workflow_id=1, version="4.1"),
        row(3, "c", 5, [classic_point(3.0, 3.0)], workflow_id=1, version="4.20"),
        row(4, "d", 5, [classic_point(4.0, 4.0)], workflow_id=2, version="1.1"),
    ]
    exp = write_export(tmp_path / "c.csv", rows)
    with pytest.raises(InputError) as e:
        extract_clicks(exp, None)
    assert "several workflows" in str(e.value) and "workflow 1" in str(e.value)
    assert "workflow 2" in str(e.value) and str(exp) in str(e.value)
    ids = lambda df: df["classification_id"].tolist()  # noqa: E731
    c, rep = extract_clicks(exp, None, workflow_id=1)  # newest major: 4
    assert ids(c) == [2, 3]
    assert rep["dropped_classifications"]["older_workflow_version"] == 1
    assert rep["dropped_classifications"]["other_workflow"] == 1
    assert ids(extract_clicks(exp, None, workflow_id=1, workflow_version="4")[0]) == [2, 3]
    assert ids(extract_clicks(exp, None, workflow_id=1, workflow_version=3)[0]) == [1]
    c, rep = extract_clicks(exp, None, workflow_id="1", workflow_version="4.20")
    assert ids(c) == [3] and rep["dropped_classifications"]["other_workflow_version"] == 2
    assert ids(extract_clicks(exp, None, workflow_id=2)[0]) == [4]


def test_unknown_workflow_lists_available(tmp_path):
    exp = write_export(tmp_path / "c.csv", [row(1, "a", 5, workflow_id=7, version="2.3")])
    with pytest.raises(InputError) as e:
        extract_clicks(exp, None, workflow_id=8)
    msg = str(e.value)
    assert "workflow 8 is not in the export" in msg and "workflow 7: versions 2.3 (1)" in msg
    assert "\n" not in msg


def test_unknown_version_lists_available(tmp_path):
    exp = write_export(tmp_path / "c.csv", [row(1, "a", 5, workflow_id=7, version="2.3")])
    for v in ("2.4", "5", "2.30"):
        with pytest.raises(InputError, match=r"no version .*available: workflow 7: versions 2.3"):
            extract_clicks(exp, None, workflow_version=v)


def test_clicks_outside_the_image_are_kept_flagged_and_counted(tmp_path):
    rows = [
        row(
            1,
            "a",
            5,
            [classic_point(-1.0, 5.0), classic_point(400.0, 400.0), classic_point(401.0, 3.0)],
        ),
        # no subject_dimensions: the subject export's metadata gives 100 x 50
        row(2, "b", 6, [classic_point(120.0, 10.0), classic_point(99.0, 49.0)], natural=None),
        # no size anywhere: unknown
        row(3, "c", 7, [classic_point(1e6, 1.0)], natural=None),
    ]
    exp = write_export(tmp_path / "c.csv", rows)
    subj = write_subjects(
        tmp_path / "s.csv", [5, 6, 7], {6: {"#image_width": 100, "#image_height": 50}, 7: {}}
    )
    clicks, rep = extract_clicks(exp, subj)
    assert clicks["outside_image"].tolist() == [True, False, True, True, False, pd.NA]
    assert clicks["natural_width"].tolist() == [400, 400, 400, 100, 100, pd.NA]
    assert rep["clicks_outside_image"] == 3 and rep["clicks_image_size_unknown"] == 1
    assert rep["clicks_kept"] == 6  # outside clicks are kept


def test_subjects_missing_from_the_subject_export(tmp_path):
    rows = [row(1, "a", 5, [classic_point(1.0, 1.0)]), row(2, "a", 6, []), row(3, "b", 6, [])]
    exp = write_export(tmp_path / "c.csv", rows)
    subj = write_subjects(tmp_path / "s.csv", [5])
    kept, rep = extract_clicks(exp, subj)
    assert kept["subject_id"].tolist() == [5, 6, 6]
    assert rep["subjects_missing_from_subjects_export"]["count"] == 1
    assert rep["subjects_missing_from_subjects_export"]["classifications"] == 2
    dropped, rep2 = extract_clicks(exp, subj, missing_subjects="drop")
    assert dropped["subject_id"].tolist() == [5]
    assert rep2["dropped_classifications"]["subject_missing_from_subjects_export"] == 2


def test_multiple_subject_classifications_are_dropped(tmp_path):
    rows = [row(1, "a", 5, [classic_point(1.0, 1.0)]), row(2, "a", 5, subject_ids="5;6")]
    clicks, rep = extract_clicks(write_export(tmp_path / "c.csv", rows), None)
    assert clicks["classification_id"].tolist() == [1]
    assert rep["dropped_classifications"]["multiple_subjects"] == 1


def test_penguin_style_index_column_bom_and_multiline_field(tmp_path):
    rows = [row(1, "a", 5, [classic_point(1.0, 1.0)]), row(2, "b", 5, [])]
    rows[0]["workflow_name"] = "Clump\nScout"  # a quoted newline: one record, two lines
    p = tmp_path / "c.csv"
    with open(p, "w", newline="", encoding="utf-8-sig") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow([""] + HEADER)
        for i, r in enumerate(rows):
            w.writerow([i] + [r[h] for h in HEADER])
    clicks, rep = extract_clicks(p, None)
    assert clicks["classification_id"].tolist() == [1, 2]
    # a byte-order mark right before the first column name
    p_bom = write_export(tmp_path / "bom.csv", rows)
    p_bom.write_bytes(b"\xef\xbb\xbf" + p_bom.read_bytes())
    assert extract_clicks(p_bom, None)[0]["classification_id"].tolist() == [1, 2]
    # and a bad row after the multi-line record is still named by its data row number
    rows.append(row(3, "c", 5, annotations="[{"))
    p2 = tmp_path / "c2.csv"
    write_export(p2, rows)
    with pytest.raises(InputError) as e:
        extract_clicks(p2, None)
    assert e.value.row == 3


# --------------------------------------------------------------------------- bad input


def _err(path, **kw) -> InputError:
    with pytest.raises(InputError) as e:
        extract_clicks(path, None, **kw)
    msg = e.value.one_line()
    assert str(path) in msg and "\n" not in msg
    return e.value


@pytest.mark.parametrize("column", ["annotations", "metadata", "subject_data"])
def test_malformed_json_names_file_row_and_column(tmp_path, column):
    rows = [row(1, "a", 5, []), row(2, "b", 5, []), row(3, "c", 5, [])]
    rows[1][column] = '{"task": "T1", "value": [1, 2'
    e = _err(write_export(tmp_path / "c.csv", rows))
    assert e.row == 2 and column in e.message and "malformed JSON" in e.message
    assert ":row 2:" in e.one_line()


def test_missing_column(tmp_path):
    header = [h for h in HEADER if h != "annotations"]
    e = _err(write_export(tmp_path / "c.csv", [row(1, "a", 5)], header=header))
    assert "missing column(s) annotations" in e.message and e.row == 0


def test_empty_file_and_header_only(tmp_path):
    p = tmp_path / "empty.csv"
    p.write_bytes(b"")
    assert "empty file" in _err(p).message
    h = write_export(tmp_path / "header.csv", [])
    assert "only a header" in _err(h).message


def test_non_utf8_bytes_name_the_row(tmp_path):
    p = write_export(tmp_path / "c.csv", [row(1, "a", 5), row(2, "b", 5), row(3, "c", 5)])
    raw = p.read_bytes().replace(b'"task_label"', b'"task_l\xe9bel"', 3)
    lines = raw.split(b"\n")
    fixed = [lines[0], lines[1].replace(b"\xe9", b"a"), lines[2], lines[3].replace(b"\xe9", b"a")]
    p.write_bytes(b"\n".join(fixed + lines[4:]))
    e = _err(p)
    assert e.row == 2 and "UTF-8" in e.message


def test_wrong_number_of_fields(tmp_path):
    p = write_export(tmp_path / "c.csv", [row(1, "a", 5), row(2, "b", 5)])
    p.write_text(p.read_text() + "3,c,extra\n")
    e = _err(p)
    assert e.row == 3 and "fields" in e.message


def test_bad_ids_and_dates(tmp_path):
    p = write_export(tmp_path / "c.csv", [row(1, "a", 5), row("x7", "b", 5)])
    e = _err(p)
    assert e.row == 2 and "classification_id" in e.message
    p = write_export(tmp_path / "d.csv", [row(1, "a", 5), row(2, "b", 5, created="yesterday")])
    e = _err(p)
    assert e.row == 2 and "created_at" in e.message
    p = write_export(tmp_path / "e.csv", [row(1, "a", 5), row(2, "b", "five")])
    assert _err(p).row == 2


def test_unknown_clump_task(tmp_path):
    p = write_export(tmp_path / "c.csv", [row(1, "a", 5, [classic_point(1.0, 1.0)])])
    e = _err(p, clump_task="T7")
    assert "'T7' appears in no selected classification" in e.message and "T0, T1" in e.message
    ann = [{"task": "T1", "value": "Yes"}]
    p = write_export(tmp_path / "d.csv", [row(1, "a", 5, annotations=ann)])
    assert "not a drawing task" in _err(p).message


def test_annotations_not_a_list(tmp_path):
    p = write_export(tmp_path / "c.csv", [row(1, "a", 5, annotations={"task": "T1"})])
    assert _err(p).row == 1


# --------------------------------------------------------------------------- CLI


def test_cli_writes_clicks_and_report(basic, tmp_path):
    exp, subj = basic
    out = tmp_path / "out" / "clicks.parquet"
    rc = cli_main(
        ["extract", "--classifications", str(exp), "--subjects", str(subj), "--out", str(out)]
    )
    assert rc == 0
    clicks = pd.read_parquet(out)
    assert len(clicks) == 5 and list(clicks.columns) == list(CLICK_COLUMNS)
    rep = json.loads(report_path(out).read_text())
    assert report_path(out).name == "clicks_report.json"
    assert rep["clicks_kept"] == 4


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    rows = [row(1, "a", 5), row(2, "b", 5, annotations="[oops")]
    exp = write_export(tmp_path / "c.csv", rows)
    out = tmp_path / "clicks.parquet"
    rc = cli_main(["extract", "--classifications", str(exp), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err[-1].startswith("error: ") and f"{exp}:row 2:" in err[-1]
    assert "Traceback" not in "\n".join(err)
    assert not out.exists()
    rc = cli_main(
        ["extract", "--classifications", str(exp), "--workflow-id", "99", "--out", str(out)]
    )
    assert rc == 2 and "workflow 99" in capsys.readouterr().err


# --------------------------------------------------------------------------- real exports


PENGUIN = "data/zooniverse_exports/penguin_watch"


def _reference_points(ref: pd.DataFrame) -> dict[int, list[tuple[int, float, float]]]:
    """Per classification: (tool, x, y) of panoptes-aggregation's point_extractor_by_frame."""
    out: dict[int, list[tuple[int, float, float]]] = {}
    for _, r in ref.iterrows():
        pts = out.setdefault(int(r["classification_id"]), [])
        for tool in range(3):
            xs, ys = r[f"data.frame0.T0_tool{tool}_x"], r[f"data.frame0.T0_tool{tool}_y"]
            if isinstance(xs, str):
                pts += [
                    (tool, float(x), float(y))
                    for x, y in zip(json.loads(xs), json.loads(ys), strict=True)
                ]
    return out


@pytest.mark.shared
def test_penguin_watch_matches_panoptes_point_extractor(shared):
    """Same clicks per subject and per classification as panoptes-aggregation 3.4.5.

    Its extractor config (Extractor_config_workflow_6465_V52.76.yaml) used workflow 6465,
    version 52.76, point_extractor_by_frame on task T0 with tools 0, 1, 2.
    """
    d = shared / PENGUIN
    cfg = (
        d / "reference_panoptes_3.4.5" / "Extractor_config_workflow_6465_V52.76.yaml"
    ).read_text()
    assert "tools:\n        - 0\n        - 1\n        - 2" in cfg and "52.76" in cfg
    clicks, rep = extract_clicks(
        d / "penguin-watch-classifications-trim.csv",
        d / "penguin-watch-subjects-trim.csv",
        workflow_id=6465,
        workflow_version="52.76",
        clump_task="T0",
        unusual_tools=(),
        tools=(0, 1, 2),
    )
    ref = pd.read_csv(d / "reference_panoptes_3.4.5" / "point_extractor_by_frame_example.csv")
    expected = _reference_points(ref)
    points = clicks.dropna(subset=["x"])
    # the same classifications (every one, even those with no point)
    assert set(clicks["classification_id"]) == set(expected)
    # per classification: the same number of points, the same coordinates per tool
    mine = {
        cid: sorted(
            zip(g["tool"].astype(int).tolist(), g["x"].tolist(), g["y"].tolist(), strict=True)
        )
        for cid, g in points.groupby("classification_id")
    }
    for cid, pts in expected.items():
        assert mine.get(cid, []) == sorted(pts), cid  # the same floats: both parse the JSON
    # per subject
    ref_per_subject = ref.assign(n=ref["classification_id"].map(lambda c: len(expected[c])))
    ref_counts = ref_per_subject.groupby("subject_id")["n"].sum()
    my_counts = clicks.groupby("subject_id")["x"].count()
    pd.testing.assert_series_equal(
        my_counts.sort_index(), ref_counts.sort_index(), check_names=False
    )
    assert int(ref_counts.sum()) == rep["clicks_kept"] == 9605
    assert rep["dropped_clicks"]["other_tool"] == 27  # tool 3 "Other" of version 52.76
    assert rep["other_task_annotations"] == {"T1": 475, "T6": 22}


@pytest.mark.shared
def test_mixed_workflows_export(shared):
    f = shared / "data/zooniverse_exports/data_digging/mixed_workflows_raw_export.csv"
    with pytest.raises(InputError, match="several workflows"):
        extract_clicks(f, None)
    # workflow 3130 draws circles (x, y, r, angle): all kept (tests/test_shapes.py has more)
    clicks, rep = extract_clicks(f, None, workflow_id=3130, clump_task="T1")
    assert rep["shapes_kept"]["circle"] == 33 == rep["clicks_kept"]
    assert rep["classifications_kept"] == 8 and len(clicks) == 33 + 2  # 2 marked nothing
    # workflow 4759 version 67: points in T1 and T3 (clump_task None keeps all drawing tasks)
    clicks, rep = extract_clicks(f, None, workflow_id=4759, workflow_version="67", clump_task=None)
    assert rep["classifications_kept"] == 9 and set(clicks["task"].dropna()) <= {"T1", "T3"}
    # a survey task is not a drawing task
    with pytest.raises(InputError, match="not a drawing task"):
        extract_clicks(f, None, workflow_id=4994, clump_task="T0")


def test_default_task_not_drawing_names_the_drawing_task(tmp_path, capsys):
    """Penguin Watch's layout: T0 draws, T1 is a question. The default --clump-task T1 fails
    with a line naming T0, the flag and the config key; two drawing tasks are both listed."""
    ann = [
        {"task": "T0", "value": [classic_point(5.0, 5.0)]},
        {"task": "T1", "value": "There were too many to count"},
    ]
    p = write_export(tmp_path / "c.csv", [row(1, "a", 5, annotations=ann)])
    out = tmp_path / "clicks.parquet"
    rc = cli_main(["extract", "--classifications", str(p), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert f"{p}:row 1: task 'T1' is not a drawing task here" in err
    assert (
        "the drawing task here is 'T0': use --clump-task T0 (config extract.clump_task: T0)" in err
    )
    # a task missing everywhere: the drawing tasks seen are named
    p2 = write_export(tmp_path / "d.csv", [row(1, "a", 5, [classic_point(1.0, 1.0)])])
    e = _err(p2, clump_task="T7")
    assert "drawing tasks here: T0, T1; choose it with --clump-task" in e.message
    only = [{"task": "T0", "value": [classic_point(5.0, 5.0)]}]
    p3 = write_export(tmp_path / "e.csv", [row(1, "a", 5, annotations=only)])
    assert "use --clump-task T0 (config extract.clump_task: T0)" in _err(p3).message


def test_several_tools_merged_without_a_selection_are_reported(tmp_path, caplog):
    """tools: null keeps every tool's clicks as one kind of object: the report counts the
    clicks per tool and the log warns when two or more non-"unusual" tools are merged."""
    import logging

    marks_a = [classic_point(1, 1, 0), classic_point(5, 5, 2), classic_point(6, 6, 2)]
    marks_b = [classic_point(2, 2, 0), classic_point(3, 3, 1)]
    exp = write_export(tmp_path / "c.csv", [row(1, "a", 5, marks_a), row(2, "b", 5, marks_b)])
    with caplog.at_level(logging.WARNING):
        _, rep = extract_clicks(exp, None, unusual_tools=[1])
    assert rep["clicks_per_tool"] == {"0": 2, "1": 1, "2": 2}
    warned = [r.getMessage() for r in caplog.records if "aggregated as one kind" in r.getMessage()]
    assert len(warned) == 1 and "tool 0: 2, tool 2: 2" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # one tool selected: nothing merged
        _, rep = extract_clicks(exp, None, unusual_tools=[1], tools=[0])
    assert not [r for r in caplog.records if "aggregated as one kind" in r.getMessage()]
    caplog.clear()
    marks_c = [classic_point(1, 1, 0), classic_point(3, 3, 1)]  # clump + unusual: one kind
    exp2 = write_export(tmp_path / "d.csv", [row(3, "c", 6, marks_c)])
    with caplog.at_level(logging.WARNING):
        extract_clicks(exp2, None, unusual_tools=[1])
    assert not [r for r in caplog.records if "aggregated as one kind" in r.getMessage()]


# ------------------------------------------------------------ blocks parsed side by side
def _many_rows(n=240):
    """Classic and FEM rows, labelled and unlabelled tools, empty classifications and repeats,
    spread over many read blocks."""
    rng = np.random.default_rng(5)
    rows = []
    for i in range(n):
        k = int(rng.integers(0, 4))
        fem = i % 7 == 3
        label = ("Clump", "Unusual clump", None)[i % 3]
        pts = [
            fem_point(*rng.uniform(0, 400, 2), tool=int(rng.integers(0, 2)))
            if fem
            else classic_point(*rng.uniform(-5, 405, 2), int(rng.integers(0, 2)), label)
            for _ in range(k)
        ]
        user = f"user{i % 17}" if i % 5 else f"not-logged-in-{i:04x}"
        rows.append(row(1000 + i, user, 500 + i % 23, pts, fem=fem, user_id=i % 17 or None))
    return rows


def test_blocks_parsed_by_several_processes_give_the_same_clicks_and_report(tmp_path, monkeypatch):
    import clumpscout.data.zooniverse_csv as zooniverse_csv

    monkeypatch.setattr(zooniverse_csv, "_BATCH", 1 << 12)  # blocks of a few rows each
    exp = write_export(tmp_path / "cls.csv", _many_rows())
    subj = write_subjects(tmp_path / "subjects.csv", range(500, 523))
    limits = {"max_field_bytes": 2000}
    one, rep1 = extract_clicks(exp, subj, limits=limits)
    two, rep2 = extract_clicks(exp, subj, limits=limits, workers=2)
    pd.testing.assert_frame_equal(one, two)
    rep1.pop("seconds"), rep2.pop("seconds")
    assert rep1 == rep2
    assert rep1["classifications_kept"] == 240 and len(set(one["tool_label"].dropna())) == 3


@pytest.mark.slow
def test_an_error_in_a_worker_names_the_file_and_row(tmp_path, monkeypatch):
    import clumpscout.data.zooniverse_csv as zooniverse_csv

    monkeypatch.setattr(zooniverse_csv, "_BATCH", 1 << 12)
    rows = _many_rows(60)
    rows[50]["annotations"] = "[{not json"
    exp = write_export(tmp_path / "cls.csv", rows)
    with pytest.raises(InputError) as err:
        extract_clicks(exp, None, limits={"max_field_bytes": 2000}, workers=2)
    assert err.value.path == str(exp) and err.value.row == 51
    assert "malformed JSON in column 'annotations'" in err.value.message


# ------------------------------------------------------------ clicks held by subject range
def test_subject_ranges_known_answer():
    from clumpscout.data.zooniverse_buckets import subject_ranges

    # subjects 3, 5, 7, 9 hold 2, 2, 1, 1 classifications; 0, 2, 4, 5 come before them:
    # ranges 0 // 2, 2 // 2, 4 // 2, 5 // 2 = 0, 1, 2, 2
    sid = np.array([5, 3, 5, 9, 3, 7])
    assert subject_ranges(sid, 2).tolist() == [1, 0, 1, 2, 0, 2]
    # one subject larger than a range is never split; the range after it stays empty
    assert subject_ranges(np.array([1, 1, 1, 2]), 2).tolist() == [0, 0, 0, 1]
    assert subject_ranges(np.array([1, 1, 1, 1, 2]), 2).tolist() == [0, 0, 0, 0, 2]


def test_rechunked_blocks_of_exact_length():
    from clumpscout.io import rechunked

    frames = [pd.DataFrame({"a": np.arange(s, s + n)}) for s, n in ((0, 3), (3, 4), (7, 0), (7, 5))]
    blocks = list(rechunked(frames, 4))
    assert [len(b) for b in blocks] == [4, 4, 4]
    assert np.concatenate([b["a"] for b in blocks]).tolist() == list(range(12))
    empty = list(rechunked([pd.DataFrame({"a": np.arange(0)})], 4))
    assert len(empty) == 1 and len(empty[0]) == 0 and list(empty[0].columns) == ["a"]
    assert list(rechunked([], 4)) == []


@pytest.mark.parametrize("drop_flagged", ["none", "volunteers"])
def test_clicks_by_subject_range_are_the_table_of_one_sort(tmp_path, monkeypatch, drop_flagged):
    """Ranges of a few classifications each (spilled to files, read back one at a time) give
    the clicks and report of one range, and write_clicks the bytes of the whole table."""
    import clumpscout.data.zooniverse_annotations as annotations
    import clumpscout.data.zooniverse_buckets as zooniverse_buckets
    import clumpscout.data.zooniverse_csv as zooniverse_csv
    from clumpscout.data.zooniverse import write_clicks
    from clumpscout.io import write_parquet

    monkeypatch.setattr(zooniverse_csv, "_BATCH", 1 << 12)  # blocks of a few rows each
    exp = write_export(tmp_path / "cls.csv", _many_rows())
    subj = write_subjects(tmp_path / "subjects.csv", range(500, 523))
    limits = {"max_field_bytes": 2000, "flag_marks": 2, "drop_flagged": drop_flagged}
    one, rep1 = extract_clicks(exp, subj, limits=limits)
    write_parquet(one, tmp_path / "one.parquet")
    monkeypatch.setattr(zooniverse_buckets, "BUCKET_CLASSIFICATIONS", 25)  # about 10 ranges
    monkeypatch.setattr(annotations, "FLUSH_CLICKS", 7)  # many blocks handed on
    spilled = []
    real_add = zooniverse_buckets.ClickBuckets.add

    def add(self, cols):
        spilled.append(self.n_ranges)
        return real_add(self, cols)

    monkeypatch.setattr(zooniverse_buckets.ClickBuckets, "add", add)
    many, rep2 = extract_clicks(exp, subj, limits=limits)
    assert max(spilled) >= 8 and len(spilled) > 20
    pd.testing.assert_frame_equal(one, many)
    rep3 = write_clicks(tmp_path / "many.parquet", exp, subj, limits=limits)
    for rep in (rep1, rep2, rep3):
        rep.pop("seconds")
    assert rep1 == rep2 == rep3
    assert (tmp_path / "many.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "cls.csv",
        "many.parquet",
        "one.parquet",
        "subjects.csv",
    ]  # no range file left behind
    assert (rep1["dropped_classifications"]["flagged_volunteer"] > 0) == (drop_flagged != "none")


def test_write_clicks_leaves_nothing_on_an_error(tmp_path):
    from clumpscout.data.zooniverse import write_clicks

    rows = _many_rows(60)
    rows[50]["annotations"] = "[{not json"
    exp = write_export(tmp_path / "cls.csv", rows)
    out = tmp_path / "out" / "clicks.parquet"
    with pytest.raises(InputError) as err:
        write_clicks(out, exp, None, limits={"max_field_bytes": 2000})
    assert err.value.row == 51
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize(
    ("column", "bad", "message"),
    [
        ("subject_ids", "12x", "subject_ids '12x' is not an integer"),
        ("classification_id", "", "classification_id is empty"),
        ("created_at", "yesterday", "created_at 'yesterday' is not a date-time"),
        ("user_id", "0x10", "user_id '0x10' is not an integer"),
    ],
)
def test_unreadable_values_are_errors_only_in_selected_rows(
    tmp_path, monkeypatch, column, bad, message
):
    """Pass 1 reads block by block and turns values into numbers before it knows which rows
    are selected: a bad value in another workflow's row is no error, one in a selected row
    names that row, whichever block it lies in."""
    import clumpscout.data.zooniverse_csv as zooniverse_csv

    monkeypatch.setattr(zooniverse_csv, "_BATCH", 1 << 12)  # blocks of a few rows each
    rows = [row(100 + i, f"u{i}", 500 + i % 5, [classic_point(10, 10)]) for i in range(40)]
    rows[3] = dict(row(103, "u3", 501, workflow_id=999), **{column: bad})  # not selected
    good = write_export(tmp_path / "good.csv", rows)
    clicks, rep = extract_clicks(good, None, workflow_id=11803)
    assert rep["dropped_classifications"]["other_workflow"] == 1
    assert clicks["classification_id"].nunique() == 39
    rows[31] = dict(rows[31], **{column: bad})  # selected, in a later block
    with pytest.raises(InputError) as err:
        extract_clicks(write_export(tmp_path / "bad.csv", rows), None, workflow_id=11803)
    assert err.value.row == 32 and err.value.message == message
