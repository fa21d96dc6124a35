"""The click ledger (clumpscout.data.ledger, decisions.md#click-ledger): every input click accounted for.

A toy export (the bad-input suite's valid 5-subject export plus rows and clicks the reader must
drop, each for a known reason) goes through the real CLI (extract, subjects, boxes, subsample,
aggregate); the ledger's numbers are compared with counts made by hand from how the toy was
built, and tampering with any stage's output must fail with one line naming n and category.
"""

from __future__ import annotations

import copy
import json
import logging
import runpy
import shutil
from array import array
from pathlib import Path
from types import SimpleNamespace

import numba
import numpy as np
import pandas as pd
import pytest
from test_bad_input import (
    EXPORT_HEADER,
    SUBJECT_IDS,
    SUBJECTS_HEADER,
    VOLUNTEERS,
    csv_bytes,
    point,
    subject_row,
    valid_export_rows,
    write_valid_inputs,
)

from clumpscout.cli import main as cli_main
from clumpscout.data import click_definition
from clumpscout.data import ledger_recount as lx
from clumpscout.data.ledger import (
    LedgerError,
    build_ledger,
    check_ledger,
    per_n_paths,
    run_ledger,
    subsample_ledger,
)
from clumpscout.data.ledger_recount import count_marks

REPO = Path(__file__).resolve().parents[1]
NS = (3, 5)


# --------------------------------------------------------------------------- counting marks


def test_count_marks_classic_fem_combo_and_questions():
    ann = [
        {"task": "T0", "value": [point(1, 2)]},
        {"task": "T1", "value": [point(3, 4), point(5, 6, 1)]},
        {"task": "T2", "value": [0, 2]},  # multiple-choice answer: not clicks
        {"task": "T3", "value": [{"choice": "A", "answers": {}}]},  # survey: not clicks
        {"task": "T4", "value": "yes"},  # question
    ]
    assert count_marks(json.dumps(ann), "T1") == (2, 1)
    assert count_marks(json.dumps(ann), None) == (3, 0)  # every drawing task is the clump task
    combo = [{"task": "T9", "value": [{"task": "T1", "value": [point(1, 1)] * 3}, ann[0]]}]
    assert count_marks(json.dumps(combo), "T1") == (3, 1)
    fem = [
        {"task": "T1", "taskType": "drawing", "value": [{"x": 1, "y": 2, "toolIndex": 0}]},
        {"task": "T5", "taskType": "single", "value": [0]},
    ]
    assert count_marks(json.dumps(fem), "T1") == (1, 0)
    assert count_marks("[]", "T1") == (0, 0)
    with pytest.raises(ValueError):
        count_marks('{"task": "T1"}', "T1")
    with pytest.raises(ValueError):
        count_marks("[{", "T1")


#: annotations where orjson and json.loads disagree (or could), and ordinary ones
TRICKY_ANNOTATIONS = [
    json.dumps([{"task": "T1", "value": [point(1, 2)] * 2}, {"task": "T0", "value": []}]),
    '[{"task": "T1", "value": [{"x": NaN, "y": 1}]}]',  # NaN: orjson rejects, json accepts
    '[{"task": "T1", "value": [{"x": 1e400, "y": 1}]}]',  # overflow: orjson rejects
    '[{"task": "\\ud800", "value": [{"x": 1}]}]',  # lone surrogate: orjson rejects
    # integer beyond 64 bits: json keeps it, orjson makes it a float (so its str differs)
    '[{"task": 123456789012345678901234567890, "value": [{"x": 1}, {"x": 2}]}]',
    '[{"task": 18446744073709551616, "value": [{"x": 1}], "taskType": "drawing"}]',
    '[{"task": "T9", "value": [{"task": 123456789012345678901234567890, "value": [{"x": 1}]}]}]',
    '[{"task": 1.0, "value": [{"x": 1}]}, {"task": 7, "value": [{"x": 1}]}]',
    '[{"task": "T1", "value": [{"x": 1}], "task": "T0"}]',  # repeated key: the last wins
    '[{"task": "T1", "taskType": "single", "value": [0]}, {"task": "T1", "value": [0, 1]}]',
    '[{"task": "T1", "value": [{"choice": "A"}]}, {"task": "T1", "value": "yes"}, 3, null]',
    "[" * 499 + "]" * 499,  # deep but below both parsers' limits
    '{"task": "T1"}',
    "[{",
    "",
    " [] ",
    "\ufeff[]",
]


@pytest.mark.parametrize("clump_task", ["T1", None, "123456789012345678901234567890", "7"])
def test_count_marks_same_with_and_without_orjson(monkeypatch, clump_task):
    """orjson is only a speed-up: every text counts (or fails) as with json.loads alone."""

    def counted(text):
        try:
            return count_marks(text, clump_task)
        except ValueError:
            return "ValueError"

    with_orjson = [counted(t) for t in TRICKY_ANNOTATIONS]
    monkeypatch.setattr(click_definition, "_orjson", None)
    assert with_orjson == [counted(t) for t in TRICKY_ANNOTATIONS]
    if clump_task == "123456789012345678901234567890":
        assert with_orjson[4] == (2, 0) and with_orjson[6] == (1, 0)
    # the batch loop gives what count_marks gives, row by row (0, 0, not ok: not JSON)
    c, o, k = array("q"), array("q"), array("b")
    monkeypatch.undo()
    lx._count_texts(TRICKY_ANNOTATIONS, clump_task, c, o, k)
    expected = [(0, 0, 0) if r == "ValueError" else (*r, 1) for r in with_orjson]
    assert list(zip(c, o, k, strict=True)) == expected


def test_count_marks_deep_nesting_fails_as_json_does():
    """Nesting json.loads cannot parse (orjson can, up to 1024) fails the same way."""
    deep = "[" * 1010 + "]" * 1010
    with pytest.raises(RecursionError):
        json.loads(deep)
    with pytest.raises(RecursionError):
        count_marks(deep, "T1")


def test_a_task_type_that_is_not_a_string_is_not_drawing():
    """As the reader decides (a list is no task type): no marks, and no TypeError."""
    ann = '[{"task": "T1", "taskType": ["drawing"], "value": [{"x": 1, "y": 2}]}]'
    assert count_marks(ann, "T1") == (0, 0)


def test_fast_helpers_match_numpy_and_pandas():
    rng = np.random.default_rng(3)
    ints = rng.integers(0, 50, 500)
    s = np.sort(ints)
    np.testing.assert_array_equal(lx.unique_sorted(s), np.unique(ints))
    keys, counts = lx.run_lengths(s)
    np.testing.assert_array_equal(keys, np.unique(ints))
    np.testing.assert_array_equal(counts, np.unique(ints, return_counts=True)[1])
    assert len(lx.unique_sorted(s[:0])) == 0
    assert [len(x) for x in lx.run_lengths(s[:0])] == [0, 0]
    for values in (
        ints.astype(float),
        np.array([3.0, np.nan, 3.0, np.nan, 1.0]),
        np.array([0.0, -0.0, 2.0, 0.0]),
        np.array([]),
    ):
        np.testing.assert_array_equal(
            lx._duplicated(values), pd.Series(values, dtype=float).duplicated().to_numpy()
        )
    for texts in (
        ["200000005", "007", "0", "999999999999999999", "12"],
        ["12", "1;2", "", "1e3", "+5", "-5", "0x10", "1_000", "١٢", "99999999999999999999"],
        ["12", "12.0", "12"],
    ):
        col = pd.Series(texts, dtype="str")
        np.testing.assert_array_equal(
            lx._to_float(col), pd.to_numeric(col, errors="coerce").to_numpy(dtype=float)
        )
    assert lx.plain_ints(pd.Series(["1", "2;3"], dtype="str")) is None


def _subsample_inputs(rng, n_cls=40):
    rows = rng.integers(1, 4, n_cls)
    cid = np.repeat(np.arange(1000, 1000 + n_cls), rows)
    boxes = pd.DataFrame({"classification_id": cid, "x1": rng.choice([np.nan, 1.0], len(cid))})
    zn = boxes[np.isin(cid, rng.choice(cid, n_cls // 2))].sample(frac=1, random_state=1)
    xy = zn["x1"].notna().to_numpy()
    kind = np.where(xy, rng.choice(["clump", "dummy", "not_aggregated"], len(zn)), "empty")
    cluster = np.where(kind == "clump", 0, np.where(kind == "dummy", -1, -2))
    asg = zn.assign(cluster=pd.array(cluster, dtype="Int64"), assignment=kind)
    asg.loc[asg["assignment"].isin(["not_aggregated", "empty"]), "cluster"] = pd.NA
    return boxes.reset_index(drop=True), zn.reset_index(drop=True), asg.reset_index(drop=True)


@pytest.mark.parametrize("case", ["ok", "shuffled", "relabelled", "lost_row", "extra_cls"])
def test_subsample_ledger_fast_paths_match_the_general_one(case):
    """String labels (the fast path) count exactly as object labels (the general path)."""
    rng = np.random.default_rng(7)
    boxes, zn, asg = _subsample_inputs(rng)
    if case == "shuffled":
        asg = asg.sample(frac=1, random_state=2).reset_index(drop=True)
    elif case == "relabelled":
        asg.loc[0, "assignment"] = "dumy"
        asg.loc[1, "cluster"] = 5
    elif case == "lost_row":
        asg = asg.iloc[1:].reset_index(drop=True)
    elif case == "extra_cls":
        asg.loc[len(asg)] = {"classification_id": 1, "x1": 1.0, "cluster": 0, "assignment": "clump"}
        zn.loc[len(zn)] = {"classification_id": 1, "x1": 1.0}
    paths = {"subsample": "z", "assignments": "a"}
    report = {"n_rows_out": len(zn), "n_rows_in": len(boxes)}
    out = {}
    for dtype in ("str", object):
        a = asg.assign(assignment=asg["assignment"].astype(dtype))
        cols, checks = subsample_ledger(3, boxes, zn, report, a, {}, paths)
        out[str(dtype)] = (cols, [c.as_dict() for c in checks])
    assert out["str"] == out[str(object)]
    failed = {c["category"] for c in out["str"][1] if not c["ok"]}
    if case in ("ok", "shuffled"):
        assert failed == set()
    elif case == "relabelled":
        assert {"assignment", "assignment rows"} <= failed
    elif case == "lost_row":
        assert {"assignment rows", "assignment rows per classification"} <= failed
    else:
        assert {"invented classifications", "box rows"} <= failed


# --------------------------------------------------------------------------- the toy


def _variant(row: dict, **kw) -> dict:
    r = copy.deepcopy(row)
    r.update(kw)
    return r


def _edit_click(row: dict, click: int, new) -> None:
    ann = json.loads(row["annotations"])
    ann[1]["value"][click] = new
    row["annotations"] = json.dumps(ann)


#: what the toy adds to the valid export, and the clicks (every task) of each added row
EXTRA = {
    # reason: (source row index, changes)
    "duplicate_classification_id": (1, {}),
    "duplicate_volunteer_subject": (1, {"classification_id": 59999, "created_at": "2021-03-09 00:00:00 UTC"}),
    "other_workflow": (2, {"classification_id": 59997, "workflow_id": 99999}),
    "older_workflow_version": (3, {"classification_id": 59996, "workflow_version": "63.9"}),
    "multiple_subjects": (4, {"classification_id": 59995, "subject_ids": "1001;1002"}),
    "subject_missing_from_subjects_export": (7, {"classification_id": 59994, "subject_ids": 4242}),
}  # fmt: skip


def toy_rows() -> tuple[list[dict], dict[str, int]]:
    """The toy export rows and, by hand, the clicks of every category."""
    rows = valid_export_rows()
    # valid export: subject k < 4 has 11 clump clicks (+1 spurious on subject 0), the empty
    # subject none; every classification has one bulge (T0) click
    n_valid_clump = 4 * 11 + 1
    n_t0 = len(SUBJECT_IDS) * len(VOLUNTEERS)
    counts = {"T0": n_t0, "valid_clump": n_valid_clump}
    for reason, (i, changes) in EXTRA.items():
        src = rows[i]
        ann = json.loads(src["annotations"])
        counts[reason] = len(ann[0]["value"]) + len(ann[1]["value"])
        rows.append(_variant(src, **changes))
    # clicks the reader drops inside kept classifications
    _edit_click(rows[6], 0, point(float("nan"), 10.0))
    polygon = {"points": [{"x": 1, "y": 1}, {"x": 9, "y": 1}, {"x": 5, "y": 9}], "tool": 0}
    _edit_click(rows[8], 1, dict(polygon, frame=0, closed=True))
    _edit_click(rows[9], 0, {"x": 120, "y": 118, "width": -8, "height": 6, "tool": 0, "frame": 0})
    counts["nonfinite_coordinates"] = 1
    counts["unsupported_shape"] = 1
    counts["malformed_shape"] = 1
    # drawn shapes are kept and counted like clicks (docs/decisions.md#shapes): a circle
    # (classic) and a rectangle (FEM, centre convention) in place of two points
    _edit_click(rows[10], 1, {"x": 248.5, "y": 271.5, "r": 5.0, "angle": 0, "tool": 0, "frame": 0})
    rect = {"x_center": 140.5, "y_center": 118.5, "width": 9.0, "height": 7.0}
    _edit_click(rows[13], 0, dict(rect, toolIndex=0, toolType="rectangle", frame=0))
    counts["circle"] = counts["rectangle"] = 1
    return rows, counts


def _quiet_cli(argv) -> int:
    try:
        return cli_main([str(a) for a in argv])
    finally:
        root = logging.getLogger("clumpscout")
        for h in list(root.handlers):
            root.removeHandler(h)
        root.propagate = True


@pytest.fixture(scope="module")
def toy(tmp_path_factory) -> dict:
    """The toy through the real CLI: results/ laid out as the workflow does."""
    d = tmp_path_factory.mktemp("ledger_toy")
    f = write_valid_inputs(d / "in")
    rows, counts = toy_rows()
    f["export"].write_bytes(csv_bytes(EXPORT_HEADER, rows))
    f["subjects_export"].write_bytes(
        csv_bytes(SUBJECTS_HEADER, [subject_row(s) for s in SUBJECT_IDS])
    )
    r = d / "results"
    steps = [
        ["extract", "--classifications", f["export"], "--subjects", f["subjects_export"],
         "--workflow-id", 11803, "--missing-subjects", "drop", "--out", r / "clicks/clicks.parquet"],
        ["subjects", "--catalogue", f["catalogue"], "--subjects-export", f["subjects_export"],
         "--out", r / "subjects/subjects.parquet"],
        ["boxes", "--clicks", r / "clicks/clicks.parquet", "--subjects",
         r / "subjects/subjects.parquet", "--out", r / "boxes/boxes.parquet"],
    ]  # fmt: skip
    for n in NS:
        steps += [
            ["subsample", "--boxes", r / "boxes/boxes.parquet", "--n", n, "--seed", 11,
             "--out", r / f"subsamples/n{n}/boxes.parquet",
             "--report", r / f"subsamples/n{n}/report.json"],
            ["aggregate", "--boxes", r / f"subsamples/n{n}/boxes.parquet",
             "--out", r / f"aggregate/n{n}", "--seed", 5],
        ]  # fmt: skip
    for argv in steps:
        assert _quiet_cli(argv) == 0, argv[0]
    return {"dir": d, "results": r, "files": f, "counts": counts}


def _ledger_argv(results: Path, files: dict, out: Path) -> list:
    return [
        "ledger",
        "--classifications", files["export"],
        "--subjects-export", files["subjects_export"],
        "--clicks-report", results / "clicks/clicks_report.json",
        "--boxes", results / "boxes/boxes.parquet",
        "--n", *NS,
        "--subsamples", results / "subsamples",
        "--aggregate", results / "aggregate",
        "--out", out,
    ]  # fmt: skip


def test_toy_ledger_adds_up_and_matches_the_hand_count(toy, tmp_path):
    out = tmp_path / "ledger.csv"
    assert _quiet_cli(_ledger_argv(toy["results"], toy["files"], out)) == 0
    t = pd.read_csv(out)
    c = toy["counts"]
    assert list(t["n"]) == list(NS)
    assert t["balanced"].all()
    extra = sum(c[r] for r in EXTRA)
    kept = c["valid_clump"] - sum(c[r] for r in ("nonfinite_coordinates", "unsupported_shape"))
    kept -= c["malformed_shape"]
    for _, row in t.iterrows():
        assert row["export_rows"] == len(SUBJECT_IDS) * len(VOLUNTEERS) + len(EXTRA)
        assert row["export_clicks"] == c["valid_clump"] + c["T0"] + extra
        for reason in EXTRA:
            assert row[f"dropped_cls_{reason}"] == c[reason], reason
        assert row["dropped_cls_unexplained"] == 0
        assert row["dropped_click_nonfinite_coordinates"] == 1
        assert row["dropped_click_unsupported_shape"] == 1
        assert row["dropped_click_malformed_shape"] == 1
        assert row["other_task_T0"] == c["T0"]
        assert row["kept_clicks"] == kept
        # the click chain, from the CSV alone
        assert row["not_drawn"] + row["in_zn"] == kept
        assert row["clustered"] + row["dummy"] + row["not_aggregated"] == row["in_zn"]
        assert row["zn_rows"] + row["not_drawn_rows"] == row["boxes_rows"]
        # the empty subject's classifications stay as coordinate-less rows (the dropped clicks
        # were in classifications that keep another click)
        assert row["boxes_empty_rows"] == len(VOLUNTEERS)
    # the shapes became boxes of their drawn extent, counted like clicks
    boxes = pd.read_parquet(toy["results"] / "boxes/boxes.parquet")
    assert boxes["shape"].value_counts().to_dict() == {
        "point": kept - 2,
        "circle": 1,
        "rectangle": 1,
    }
    drawn = boxes.set_index("shape").loc[["circle", "rectangle"], ["x1", "y1", "x2", "y2"]]
    assert drawn.to_numpy().tolist() == [[243.5, 266.5, 253.5, 276.5], [136.0, 115.0, 145.0, 122.0]]
    # bigger n draws more (nested subsamples): fewer clicks left out
    assert t["not_drawn"].iloc[0] >= t["not_drawn"].iloc[1]
    j = json.loads(out.with_suffix(".json").read_text())
    assert j["balanced"] is True and j["failures"] == []
    assert j["export"]["classifications"]["kept"]["rows"] == len(SUBJECT_IDS) * len(VOLUNTEERS)


#: a clump task id beyond 64 bits, and another one orjson reads as the same float
BIG_TASK = 18446744073709551617
BIG_TWIN = 18446744073709551618


def test_task_id_beyond_64_bits_balances(tmp_path):
    """Reader and ledger share one definition of a click (clumpscout.data.click_definition): a clump
    task whose id is an integer beyond 64 bits (which orjson turns into a float, the same
    float for both ids here) is read by both as json.loads reads it, and the ledger of a
    hand-built export balances: kept + dropped + other tasks = the clicks in the export."""
    rows = valid_export_rows()
    for i, row in enumerate(rows):
        task = BIG_TWIN if i == 0 else BIG_TASK  # row 0: its clump clicks are another task's
        row["annotations"] = row["annotations"].replace('"task": "T1"', f'"task": {task}')
        assert str(task) in row["annotations"]
    f = write_valid_inputs(tmp_path / "in")
    f["export"].write_bytes(csv_bytes(EXPORT_HEADER, rows))
    r = tmp_path / "results"
    steps = [
        ["extract", "--classifications", f["export"], "--subjects", f["subjects_export"],
         "--clump-task", BIG_TASK, "--out", r / "clicks/clicks.parquet"],
        ["subjects", "--catalogue", f["catalogue"], "--subjects-export", f["subjects_export"],
         "--out", r / "subjects/subjects.parquet"],
        ["boxes", "--clicks", r / "clicks/clicks.parquet", "--subjects",
         r / "subjects/subjects.parquet", "--out", r / "boxes/boxes.parquet"],
    ]  # fmt: skip
    for n in NS:
        steps += [
            ["subsample", "--boxes", r / "boxes/boxes.parquet", "--n", n, "--seed", 11,
             "--out", r / f"subsamples/n{n}/boxes.parquet",
             "--report", r / f"subsamples/n{n}/report.json"],
            ["aggregate", "--boxes", r / f"subsamples/n{n}/boxes.parquet",
             "--out", r / f"aggregate/n{n}", "--seed", 5],
        ]  # fmt: skip
    for argv in steps:
        assert _quiet_cli(argv) == 0, argv[0]
    out = tmp_path / "ledger.csv"
    assert _quiet_cli(_ledger_argv(r, f, out)) == 0
    t = pd.read_csv(out)
    assert t["balanced"].all()
    twin = len(json.loads(rows[0]["annotations"])[1]["value"])
    n_clump = sum(len(json.loads(row["annotations"])[1]["value"]) for row in rows)
    n_t0 = sum(len(json.loads(row["annotations"])[0]["value"]) for row in rows)
    for _, row in t.iterrows():
        assert row["export_clicks"] == n_clump + n_t0
        assert row["kept_clicks"] == n_clump - twin > 0
        assert row[f"other_task_{BIG_TWIN}"] == twin > 0
        assert row["other_task_T0"] == n_t0
        dropped = sum(v for k, v in row.items() if k.startswith(("dropped_cls_", "dropped_click_")))
        others = sum(v for k, v in row.items() if k.startswith("other_task_"))
        assert row["kept_clicks"] + dropped + others == row["export_clicks"]
    clicks = pd.read_parquet(r / "clicks/clicks.parquet")
    assert clicks["x"].notna().sum() == n_clump - twin


def _copy_results(toy, tmp_path) -> Path:
    r = tmp_path / "results"
    shutil.copytree(toy["results"], r)
    return r


def _drop_assignment_row(r: Path) -> Path:
    p = r / "aggregate/n3/assignments.parquet"
    a = pd.read_parquet(p)
    a.drop(index=a.index[a["x1"].notna()][0]).to_parquet(p, index=False)
    return p


def _duplicate_zn_row(r: Path) -> Path:
    p = r / "subsamples/n5/boxes.parquet"
    z = pd.read_parquet(p)
    pd.concat([z, z.iloc[[0]]], ignore_index=True).to_parquet(p, index=False)
    return p


def _dummy_to_empty(r: Path) -> Path:
    p = r / "aggregate/n5/assignments.parquet"
    a = pd.read_parquet(p)
    i = a.index[a["assignment"] == "dummy"][0]
    a.loc[i, "assignment"] = "empty"
    a.loc[i, "cluster"] = pd.NA
    a.to_parquet(p, index=False)
    return p


def _report_hides_a_drop(r: Path) -> Path:
    p = r / "clicks/clicks_report.json"
    rep = json.loads(p.read_text())
    rep["dropped_clicks"]["unsupported_shape"] = 0
    p.write_text(json.dumps(rep))
    return p


def _box_row_lost(r: Path) -> Path:
    p = r / "boxes/boxes.parquet"
    b = pd.read_parquet(p)
    b.drop(index=b.index[b["x1"].notna()][0]).to_parquet(p, index=False)
    return p


@pytest.mark.parametrize(
    "tamper, n, category",
    [
        (_drop_assignment_row, "3", "assignment rows"),
        (_duplicate_zn_row, "5", "box rows"),
        (_dummy_to_empty, "5", "in_zn"),
        (_report_hides_a_drop, "all", "clump-task clicks of kept classifications"),
        (_box_row_lost, "all", "kept_clicks"),
    ],
    ids=["assignment-row-missing", "zn-row-duplicated", "dummy-relabelled-empty",
         "report-hides-a-drop", "box-row-lost"],
)  # fmt: skip
def test_tampered_outputs_fail_with_one_line(toy, tmp_path, capsys, tamper, n, category):
    r = _copy_results(toy, tmp_path)
    culprit = tamper(r)
    out = tmp_path / "ledger.csv"
    capsys.readouterr()
    rc = _quiet_cli(_ledger_argv(r, toy["files"], out))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert rc == 2
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert f"n={n}:" in lines[0] and f"category {category!r}" in lines[0], lines[0]
    assert "does not add up" in lines[0]
    if n != "all":
        assert str(culprit) in lines[0]
    assert not out.exists() and not out.with_suffix(".json").exists()


def test_missing_assignment_row_api(toy, tmp_path):
    """The same failure through the Python API: the ledger says which check and which n."""
    r = _copy_results(toy, tmp_path)
    _drop_assignment_row(r)
    ledger = build_ledger(
        toy["files"]["export"],
        r / "clicks/clicks_report.json",
        r / "boxes/boxes.parquet",
        per_n_paths(r / "subsamples", r / "aggregate", NS),
        toy["files"]["subjects_export"],
    )
    assert ledger.balanced(5) and not ledger.balanced(3)
    bad = ledger.failures
    assert {c.n for c in bad} == {"3"}
    first = bad[0]
    assert first.category == "assignment rows" and first.left - first.right == 1
    assert list(ledger.table()["balanced"]) == [False, True]
    with pytest.raises(LedgerError, match="n=3"):
        check_ledger(ledger)


def test_snakemake_adapter(toy, tmp_path, monkeypatch):
    """scripts/ledger.py with a stand-in ``snakemake`` object (the rule's input names): one
    job for two models (here the same aggregation twice) counts the export once and writes
    each model's ledger, the bytes :func:`run_ledger` writes counting it on its own."""
    r = toy["results"]
    p = per_n_paths(r / "subsamples", r / "aggregate", NS)
    files = (toy["files"]["export"], r / "clicks/clicks_report.json", r / "boxes/boxes.parquet")
    run_ledger(*files, p, tmp_path / "alone.csv", tmp_path / "alone.json",
               subjects_csv=toy["files"]["subjects_export"])  # fmt: skip
    out = {f"{m}_{ext}": str(tmp_path / f"{m}.{ext}") for m in "ab" for ext in ("csv", "json")}
    sm = SimpleNamespace(
        input=SimpleNamespace(
            classifications=str(toy["files"]["export"]),
            subjects_export=str(toy["files"]["subjects_export"]),
            clicks_report=str(r / "clicks/clicks_report.json"),
            boxes=str(r / "boxes/boxes.parquet"),
            subsamples=[p[n]["subsample"] for n in NS],
            subsample_reports=[p[n]["subsample_report"] for n in NS],
            assignments=[p[n]["assignments"] for n in NS] * 2,
            aggregate_reports=[p[n]["aggregate_report"] for n in NS] * 2,
        ),
        output=out,
        params=SimpleNamespace(ns=list(NS), models=["a", "b"], code="x"),
        log=[str(tmp_path / "ledger.log")],
        # the thread count numba in this process already uses: main() writes it to
        # NUMBA_NUM_THREADS, and numba refuses a different value once its threads run
        threads=numba.config.NUMBA_NUM_THREADS,
    )
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    # the adapter sets the thread variables in os.environ; monkeypatch restores them (or
    # their absence) after the test, so nothing leaks into later tests of this worker
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS"):
        monkeypatch.setenv(var, str(sm.threads))
    try:
        runpy.run_path(
            str(REPO / "scripts/ledger.py"),
            init_globals={"snakemake": sm},
            run_name="__snakemake__",
        )
    finally:
        root = logging.getLogger("clumpscout")
        for h in list(root.handlers):
            h.close()
            root.removeHandler(h)
        root.propagate = True
    for m in "ab":
        assert pd.read_csv(tmp_path / f"{m}.csv")["balanced"].all()
        assert json.loads((tmp_path / f"{m}.json").read_text())["balanced"] is True
        for ext in ("csv", "json"):
            assert (tmp_path / f"{m}.{ext}").read_bytes() == (
                tmp_path / f"alone.{ext}"
            ).read_bytes()
