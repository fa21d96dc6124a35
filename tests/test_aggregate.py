"""The aggregation engine end to end: the output tables, the obvious toy, invariances, CLI."""

from __future__ import annotations

import hashlib
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest
import yaml

from clumpscout import cli
from clumpscout.errors import InputError
from clumpscout.model.aggregator import Aggregator, aggregate
from clumpscout.model.params import Params
from clumpscout.model.prepare import prepare

SIDE = 20.0
TRUE = np.array([[100.0, 120.0], [270.0, 290.0]])


def _frame(rows):
    df = pd.DataFrame(
        rows, columns=["classification_id", "subject_id", "volunteer", "x", "y", "unusual"]
    )
    df["x1"], df["x2"] = df.x - SIDE / 2, df.x + SIDE / 2
    df["y1"], df["y2"] = df.y - SIDE / 2, df.y + SIDE / 2
    df["image_width"] = 400.0
    df["image_height"] = 400.0
    return df


def obvious_toy(seed=0, n_subjects=4):
    """Per subject: 10 volunteers; 8 of them mark both clumps (1.5 px scatter), the first one
    marks clump 0 as unusual; volunteers 8 and 9 each click one random spot; volunteer 9
    adds nothing else; volunteer 7 of subject 0 submits an empty classification."""
    rng = np.random.default_rng(seed)
    rows = []
    cid = 0
    for s in range(n_subjects):
        for v in range(10):
            cid += 1
            vol = f"vol{v:02d}"
            if s == 0 and v == 7:
                rows.append((cid, s, vol, np.nan, np.nan, False))
                continue
            if v < 8:
                for k, c in enumerate(TRUE):
                    x, y = c + rng.normal(0, 1.5, 2)
                    rows.append((cid, s, vol, x, y, bool(v == 0 and k == 0)))
            else:
                x, y = rng.uniform(180, 380), rng.uniform(20, 200)
                rows.append((cid, s, vol, x, y, False))
    return _frame(rows)


@pytest.fixture(scope="module")
def toy():
    return obvious_toy()


@pytest.fixture(scope="module")
def result(toy):
    return Aggregator(Params(), seed=7).fit(toy)


def test_params_are_the_schemas_aggregate_section():
    """Every hyper-parameter of the aggregate section is a Params field (defaults and bounds
    come from the schema); the section's other keys are run options."""
    from clumpscout import config

    names = {f.name for f in fields(Params)}
    assert set(config.defaults("aggregate")) - names == {"per_tool"}
    assert Params.from_dict(config.defaults("aggregate")) == Params()


def test_params_reject_unknown_and_bad_values():
    with pytest.raises(InputError, match="no_such"):
        Params.from_dict({"no_such": 1})
    with pytest.raises(InputError, match="distance_likelihood"):
        Params.from_dict({"distance_likelihood": "l1"})


def test_obvious_toy_two_labels_near_the_truth(result):
    lab = result.labels_
    assert set(lab.subject_id) == {0, 1, 2, 3}
    for _, g in lab.groupby("subject_id"):
        good = g[g.p_fp < 0.01]
        assert len(good) == 2
        for c in TRUE:
            dist = np.hypot(good.x - c[0], good.y - c[1])
            assert dist.min() < 3.0
        assert (good.n_marks >= 7).all()
    # the noise clicks are on the dummy (or in a label with a high p_fp)
    a = result.assignments_
    noise = a[a.volunteer.isin(["vol08", "vol09"])]
    on_good = noise.merge(
        lab[lab.p_fp < 0.5], left_on=["subject_id", "cluster"], right_on=["subject_id", "clump"]
    )
    assert len(on_good) == 0
    assert (result.subjects_.status == "retired").all()
    assert (result.subjects_.n_clumps == 2).all()


def test_noise_volunteers_get_worse_skills(result):
    v = result.volunteers_.set_index("volunteer")
    assert v.loc["vol08", "p_fp"] > v.loc["vol01", "p_fp"]
    assert v.loc["vol08", "p_fn"] > v.loc["vol01", "p_fn"]
    # the generative model's counts are expected counts under the posterior
    assert v.loc["vol08", "n_fp"] == pytest.approx(4, abs=1e-3)
    assert v.loc["vol01", "n_fp"] == pytest.approx(0, abs=1e-3)
    # vol07's empty classification of subject 0 is two misses and no box
    assert v.loc["vol07", "n_fn"] == pytest.approx(2, abs=1e-3) and v.loc["vol07", "n_boxes"] == 6


def test_contract_columns(result):
    assert list(result.labels_.columns[:12]) == [
        "subject_id", "clump", "x1", "y1", "x2", "y2", "x", "y", "p_fp", "p_sigma", "n_marks",
        "frac_unusual",
    ]  # fmt: skip
    assert list(result.subjects_.columns[:9]) == [
        "subject_id", "n_volunteers", "n_clumps", "n_fp", "n_fn", "n_sigma", "risk", "status",
        "cycles",
    ]  # fmt: skip
    assert list(result.volunteers_.columns[:9]) == [
        "volunteer", "p_fp", "p_fn", "sigma2", "n_subjects", "n_boxes", "n_tp", "n_fp", "n_fn",
    ]  # fmt: skip
    lab = result.labels_
    assert (lab.x2 > lab.x1).all() and (lab.y2 > lab.y1).all()
    assert lab.groupby("subject_id").clump.apply(lambda c: sorted(c) == list(range(len(c)))).all()
    assert ((lab.p_fp >= 0) & (lab.p_fp <= 1) & (lab.p_sigma >= 0) & (lab.p_sigma <= 1)).all()
    # frac_unusual: one of the eight marks of clump 0 is unusual
    near0 = lab[np.hypot(lab.x - TRUE[0, 0], lab.y - TRUE[0, 1]) < 3]
    np.testing.assert_allclose(near0.frac_unusual, 1 / near0.n_marks)
    s = result.subjects_
    np.testing.assert_allclose(s.risk, s.n_fp + s.n_fn + 2 * s.n_sigma)
    assert (s.n_volunteers == 10).all()


def test_assignments_keep_every_row(toy, result):
    a = result.assignments_
    assert len(a) == len(toy)
    pd.testing.assert_frame_equal(a[toy.columns], toy.reset_index(drop=True))
    assert (a.loc[a.x.isna(), "assignment"] == "empty").all()
    assert a.loc[a.x.isna(), "cluster"].isna().all()
    assert set(a.assignment) <= {"clump", "dummy", "empty", "not_aggregated"}
    assert ((a.cluster == -1) == (a.assignment == "dummy")).all()


def test_no_cluster_holds_two_boxes_of_one_annotation():
    """decisions.md#one-box-per-classification, including a volunteer's accidental double click."""
    toy = obvious_toy(seed=1)
    dbl = toy[(toy.volunteer == "vol03") & toy.x.notna()].copy()
    dbl["x"] += 0.5
    dbl["x1"] += 0.5
    dbl["x2"] += 0.5
    df = pd.concat([toy, dbl], ignore_index=True)
    r = aggregate(df, Params(), seed=0)
    a = r.assignments
    clumped = a[a.cluster >= 0]
    assert not clumped.duplicated(["subject_id", "volunteer", "cluster"]).any()
    # one box of each double click went to the dummy
    assert (a.loc[a.volunteer == "vol03", "assignment"] == "dummy").sum() == len(dbl)


def _canon(res):
    lab = res.labels_.sort_values(["subject_id", "clump"]).reset_index(drop=True)
    sub = res.subjects_.sort_values("subject_id").reset_index(drop=True)
    vol = res.volunteers_.sort_values("volunteer").reset_index(drop=True)
    asg = res.assignments_.sort_values(["classification_id", "x", "y"]).reset_index(drop=True)
    return lab, sub, vol, asg


def test_permutation_invariance(toy):
    a = Aggregator(Params(), seed=3).fit(toy)
    shuffled = toy.sample(frac=1.0, random_state=11).reset_index(drop=True)
    b = Aggregator(Params(), seed=3).fit(shuffled)
    for x, y in zip(_canon(a), _canon(b), strict=True):
        pd.testing.assert_frame_equal(x, y)


def test_determinism_same_bytes(toy, tmp_path):
    digests = []
    for k in range(2):
        out = tmp_path / f"run{k}"
        Aggregator(Params(min_batch_classifications=15), seed=5).fit(toy).write(out)
        digests.append(
            {
                f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                for f in sorted(out.iterdir())
                if f.name != "report.json"
            }
        )
    assert digests[0] == digests[1]
    assert set(digests[0]) == {
        "labels.parquet",
        "subjects.parquet",
        "volunteers.parquet",
        "assignments.parquet",
        "clumps.ecsv",
    }


def test_a_rule_asks_for_fewer_outputs(result, tmp_path):
    """write(outputs=...) writes those files and no other; an unknown name is an error."""
    result.write(tmp_path / "some", outputs=["labels.parquet", "report.json"])
    assert sorted(f.name for f in (tmp_path / "some").iterdir()) == [
        "labels.parquet",
        "report.json",
    ]
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "some" / "labels.parquet"), result.labels_
    )
    with pytest.raises(ValueError, match="clumps.csv"):
        result.write(tmp_path / "bad", outputs=["clumps.csv"])


def test_clumps_ecsv_units_and_meta(result, tmp_path):
    from astropy.table import Table

    result.write(tmp_path)
    t = Table.read(tmp_path / "clumps.ecsv", format="ascii.ecsv")
    assert str(t["x1"].unit) == "pix"
    assert t.meta["hyper_parameters"]["n_beta_fp"] == 500.0
    assert t.meta["seed"] == 7
    assert len(t) == len(result.labels_)


def test_three_volunteer_toy_stars_go_to_the_dummy():
    """Fig. box_associations: volunteers 1 and 2 mark the same clumps, volunteer 3 marks two
    stars nobody else marks -> both star boxes are false positives."""
    rows = [
        (1, 7, "a", 100.0, 100.0, False),
        (1, 7, "a", 200.0, 210.0, False),
        (2, 7, "b", 101.0, 99.0, False),
        (2, 7, "b", 201.0, 211.0, False),
        (3, 7, "c", 320.0, 40.0, False),
        (3, 7, "c", 40.0, 330.0, False),
    ]
    r = aggregate(_frame(rows), Params(), seed=0)
    a = r.assignments
    assert (a.loc[a.volunteer == "c", "assignment"] == "dummy").all()
    assert (a.loc[a.volunteer != "c", "assignment"] == "clump").all()
    assert a.loc[a.volunteer == "a", "cluster"].tolist() != [0, 0]
    assert len(r.labels) == 2


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.drop(columns="volunteer"), "volunteer"),
        (lambda d: d.assign(x2=d.x1 - 1), "x2 <= x1"),
        (lambda d: d.assign(image_width=0.0), "image_width"),
    ],
)
def test_bad_input_is_an_input_error(toy, mutate, message):
    with pytest.raises(InputError, match=message):
        prepare(mutate(toy.copy()))


def test_partial_coordinates_name_the_row(toy):
    bad = toy.copy()
    bad.loc[5, "y2"] = np.nan
    with pytest.raises(InputError) as exc:
        prepare(bad, path="boxes.parquet")
    assert exc.value.row == 5 and "boxes.parquet" in exc.value.one_line()


def test_cli_writes_outputs_and_reports_bad_input(toy, tmp_path, capsys):
    boxes = tmp_path / "boxes.parquet"
    toy.to_parquet(boxes)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"seed": 4, "aggregate": {"merge": "inverse_variance"}}))
    out = tmp_path / "out"
    rc = cli.main(["aggregate", "--boxes", str(boxes), "--out", str(out), "--config", str(cfg)])
    assert rc == 0
    for f in ("labels", "subjects", "volunteers", "assignments"):
        assert len(pd.read_parquet(out / f"{f}.parquet")) > 0
    assert (out / "clumps.ecsv").exists()
    assert len(pd.read_parquet(out / "assignments.parquet")) == len(toy)
    lean = tmp_path / "lean"
    argv = ["aggregate", "--boxes", str(boxes), "--out", str(lean), "--config", str(cfg)]
    assert cli.main([*argv, "--skip", "assignments.parquet", "clumps.ecsv"]) == 0
    assert sorted(f.name for f in lean.iterdir()) == [
        "labels.parquet",
        "report.json",
        "subjects.parquet",
        "volunteers.parquet",
    ]
    bad = tmp_path / "bad.parquet"
    toy.drop(columns="subject_id").to_parquet(bad)
    rc = cli.main(["aggregate", "--boxes", str(bad), "--out", str(tmp_path / "o2")])
    err = capsys.readouterr().err
    assert rc == 2 and "subject_id" in err and "Traceback" not in err
    assert not (tmp_path / "o2" / "labels.parquet").exists()


def test_d_squared_and_inverse_variance_run(toy):
    for p in (Params(distance_likelihood="d_squared"), Params(merge="inverse_variance")):
        r = aggregate(toy, p, seed=0)
        assert (r.labels.groupby("subject_id").size() >= 2).all()


def test_no_eligible_subject_gives_empty_labels():
    """Only empty classifications: nothing enters the batch, outputs keep their columns."""
    rows = [(k, 1, f"v{k}", np.nan, np.nan, False) for k in range(5)]
    rows += [(10 + k, 2, f"v{k}", np.nan, np.nan, False) for k in range(3)]
    r = aggregate(_frame(rows), Params(final_classifications=False), seed=0)
    assert len(r.labels) == 0 and "p_fp" in r.labels.columns
    st = r.subjects.set_index("subject_id")["status"]
    assert st[1] == "retired_empty" and st[2] == "unretired"
    assert len(r.assignments) == 8 and (r.assignments.assignment == "empty").all()
    # complete input (default): the 3 empty classifications of subject 2 are all it gets
    st = aggregate(_frame(rows), Params(), seed=0).subjects.set_index("subject_id")["status"]
    assert st[1] == "retired_empty" and st[2] == "retired_empty"


def test_a_batch_without_any_cluster():
    """Three volunteers click three different places: every box is a false positive."""
    rows = [
        (1, 7, "a", 50.0, 50.0, False),
        (2, 7, "b", 200.0, 200.0, False),
        (3, 7, "c", 350.0, 350.0, False),
        (4, 7, "d", np.nan, np.nan, False),
    ]
    r = aggregate(_frame(rows), Params(max_cycles=2), seed=0)
    assert len(r.labels) == 0
    assert (r.assignments.loc[r.assignments.x.notna(), "assignment"] == "dummy").all()
    assert r.subjects.loc[0, "n_clumps"] == 0


def test_a_flat_config_file_is_checked_key_by_key(tmp_path):
    """A typo in a flat settings file is an error naming the key, not silently ignored."""
    from clumpscout.model.params import load_config

    good = tmp_path / "good.yaml"
    good.write_text("p0_fn: 0.3\nseed: 4\n")
    params, seed = load_config(good)
    assert params.p0_fn == 0.3 and seed == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text("p0_fnn: 0.5\n")
    with pytest.raises(InputError, match="p0_fnn"):
        load_config(bad)
    sectioned = tmp_path / "workflow.yaml"
    sectioned.write_text("seed: 1\nsubsample: {n: [3]}\n")
    assert load_config(sectioned)[0] == Params()
    # a workflow config is checked whole: a misspelled section or key is named
    for text, word in [
        ("seed: 1\naggregat: {p0_fn: 0.4}\n", "aggregat"),
        ("seed: 1\naggregate: {p0_fnn: 0.4}\n", "p0_fnn"),
        ("seed: 1\nsubsample: {nn: [3]}\n", "nn"),
    ]:
        sectioned.write_text(text)
        with pytest.raises(InputError, match=word):
            load_config(sectioned)
    sectioned.write_text("seed: 1\naggregate: {p0_fn: 0.4}\n")
    assert load_config(sectioned)[0].p0_fn == 0.4


def _untimed(report):
    """A report without its timings (every "seconds" key)."""
    if isinstance(report, dict):
        return {k: _untimed(v) for k, v in report.items() if k != "seconds"}
    if isinstance(report, list):
        return [_untimed(v) for v in report]
    return report


def _digests(out):
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(out.iterdir())
        if f.name != "report.json"
    }


def test_a_parquet_file_read_in_blocks_gives_the_frames_bytes(toy, tmp_path, monkeypatch):
    """The streaming path (a Parquet file read 23 rows at a time, across row groups of 10) and
    the in-memory DataFrame give the same output bytes and the same assignments table."""
    from clumpscout.model import source

    boxes = tmp_path / "boxes.parquet"
    shuffled = toy.sample(frac=1.0, random_state=3).reset_index(drop=True)
    shuffled.to_parquet(boxes, row_group_size=10)
    params = Params(min_batch_classifications=15)
    monkeypatch.setattr(source, "BLOCK_ROWS", 23)
    whole = Aggregator(params, seed=5).fit(pd.read_parquet(boxes))
    whole.write(tmp_path / "frame")
    streamed = Aggregator(params, seed=5).fit(boxes)
    streamed.write(tmp_path / "file")
    assert _digests(tmp_path / "file") == _digests(tmp_path / "frame")
    assert _untimed(streamed.report_) == _untimed(whole.report_)
    a = pd.read_parquet(tmp_path / "file" / "assignments.parquet")
    pd.testing.assert_frame_equal(a, whole.assignments_)
    pd.testing.assert_frame_equal(streamed.assignments_, whole.assignments_)
    # the file's assignments went the Arrow way (no pandas round trip), to the same bytes
    assert streamed.result_.assignment_codes._arrow_schema() is not None
    # every row of the input in input order, a box's cluster where it went
    assert a["classification_id"].tolist() == shuffled["classification_id"].tolist()
    no_box = shuffled["x1"].isna().to_numpy()
    assert (a.loc[no_box, "assignment"] == "empty").all() and a.loc[no_box, "cluster"].isna().all()


def test_one_source_is_read_once_for_several_fits(toy, tmp_path):
    """Fits on one BoxSource (the workflow's job of both models) share one prepared table,
    read-only, and give the bytes of fits that each read the file."""
    from clumpscout.model.prepare import prepare
    from clumpscout.model.source import box_source

    boxes = tmp_path / "boxes.parquet"
    toy.to_parquet(boxes, row_group_size=10)
    src = box_source(boxes)
    first = prepare(src)
    assert prepare(src) is first and not first.box_px.flags.writeable
    assert prepare(boxes) is not first  # a path is a new source: read again
    for model in ("generative", "paper"):
        params = Params(model=model, min_batch_classifications=15)
        Aggregator(params, seed=5).fit(src).write(tmp_path / f"{model}_shared")
        Aggregator(params, seed=5).fit(boxes).write(tmp_path / f"{model}_alone")
        assert _digests(tmp_path / f"{model}_shared") == _digests(tmp_path / f"{model}_alone")


def test_assignment_columns_keep_those_in_input_order(toy, tmp_path, monkeypatch):
    """``assignment_columns`` keeps those input columns (in the input's order, whatever order
    they are asked in), then cluster and assignment: the full table's columns, row for row,
    the same from a file (Arrow blocks, the pandas blocks) and from a DataFrame; the command
    line's --assignment-columns the same; a column the input lacks is an error."""
    from clumpscout.model import aggregator, source

    boxes = tmp_path / "boxes.parquet"
    toy.to_parquet(boxes, row_group_size=10)
    monkeypatch.setattr(source, "BLOCK_ROWS", 23)
    ask = ["y2", "subject_id", "x1", "classification_id"]
    expected = ["classification_id", "subject_id", "x1", "y2", "cluster", "assignment"]
    full = Aggregator(Params(), seed=5).fit(toy).assignments_
    want = full[expected]
    for name, fitted in {
        "frame": Aggregator(Params(), seed=5).fit(toy),
        "file": Aggregator(Params(), seed=5).fit(boxes),
    }.items():
        fitted.write(tmp_path / name, outputs=["assignments.parquet"], assignment_columns=ask)
        got = pd.read_parquet(tmp_path / name / "assignments.parquet")
        pd.testing.assert_frame_equal(got, want)
    # a file whose schema the Arrow path cannot promise takes the pandas blocks, same table
    monkeypatch.setattr(aggregator.Assignments, "_arrow_schema", lambda self, cols=None: None)
    fitted = Aggregator(Params(), seed=5).fit(boxes)
    fitted.write(tmp_path / "pandas", outputs=["assignments.parquet"], assignment_columns=ask)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "pandas" / "assignments.parquet"), want
    )
    with pytest.raises(ValueError, match="no column.*'shape'"):
        fitted.write(tmp_path / "bad", assignment_columns=["x1", "shape"])
    argv = ["aggregate", "--boxes", str(boxes), "--out", str(tmp_path / "cli")]
    assert cli.main([*argv, "--assignment-columns", *ask]) == 0
    got = pd.read_parquet(tmp_path / "cli" / "assignments.parquet")
    assert list(got.columns) == expected and len(got) == len(toy)


def test_blockwise_parquet_has_the_whole_tables_bytes(tmp_path):
    """Blocks of pyarrow's row-group length write the bytes of the table written at once."""
    from clumpscout.io import write_parquet, write_parquet_blocks
    from clumpscout.model.source import BLOCK_ROWS

    n = BLOCK_ROWS + 1000
    df = pd.DataFrame({"a": np.arange(n) % 97, "b": np.where(np.arange(n) % 5, "x", "yy")})
    write_parquet(df, tmp_path / "whole.parquet")
    blocks = (df.iloc[i : i + BLOCK_ROWS] for i in range(0, n, BLOCK_ROWS))
    write_parquet_blocks(blocks, tmp_path / "blocks.parquet")
    assert (tmp_path / "whole.parquet").read_bytes() == (tmp_path / "blocks.parquet").read_bytes()
