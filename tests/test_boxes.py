"""Clicks -> boxes (clumpscout.data.boxes; paper §3.3, docs/decisions.md#box-geometry,
#box-side-auto, #clicks-outside-image; columns: docs/tables.md#boxes)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clumpscout.cli import main as cli_main
from clumpscout.data.boxes import BOX_COLUMNS, estimate_box_side, make_boxes, square_boxes
from clumpscout.errors import InputError


def clicks_table(rows):
    """rows: (classification_id, subject_id, volunteer, x, y, unusual)."""
    df = pd.DataFrame(
        rows, columns=["classification_id", "subject_id", "volunteer", "x", "y", "unusual"]
    )
    df["x"] = df["x"].astype(float)
    df["y"] = df["y"].astype(float)
    df["unusual"] = df["unusual"].astype("boolean")
    df["created_at"] = pd.Timestamp("2020-01-01", tz="UTC")
    return df


def subjects_table(sides, sizes=None, source="catalogue"):
    ids = list(sides)
    sizes = sizes or {s: (400, 400) for s in ids}
    return pd.DataFrame(
        {
            "subject_id": ids,
            "box_side": [sides[s] for s in ids],
            "image_width": [sizes[s][0] for s in ids],
            "image_height": [sizes[s][1] for s in ids],
            "image_size_source": source,
        }
    )


def test_square_boxes_by_hand():
    x1, y1, x2, y2 = square_boxes(np.array([100.0]), np.array([50.0]), np.array([20.0]))
    assert (x1[0], y1[0], x2[0], y2[0]) == (90.0, 40.0, 110.0, 60.0)


def test_make_boxes_known_answer():
    clicks = clicks_table(
        [
            (1, 10, "ann", 100.0, 50.0, False),
            (1, 10, "ann", 2.0, 399.0, True),  # sticks out of the image: not clipped
            (2, 10, "bob", np.nan, np.nan, False),  # marked nothing
            (3, 11, "cat", 200.0, 100.0, False),
        ]
    )
    subjects = subjects_table({10: 20.0, 11: 31.9})
    b = make_boxes(clicks, subjects)
    assert list(b.columns[: len(BOX_COLUMNS)]) == list(BOX_COLUMNS)
    assert b[["x1", "y1", "x2", "y2"]].iloc[0].tolist() == [90.0, 40.0, 110.0, 60.0]
    assert b[["x1", "y1", "x2", "y2"]].iloc[1].tolist() == [-8.0, 389.0, 12.0, 409.0]
    assert b[["x1", "y1", "x2", "y2"]].iloc[2].isna().all()  # the empty classification
    assert b["classification_id"].tolist() == [1, 1, 2, 3]
    assert b["x1"].iloc[3] == pytest.approx(200.0 - 31.9 / 2)
    assert b["box_side"].tolist() == [20.0, 20.0, 20.0, 31.9]
    # normalised coordinates: x / width, y / height (decisions.md#box-geometry); may leave [0, 1]
    assert b["x1_norm"].iloc[0] == 90.0 / 400 and b["y2_norm"].iloc[1] == 409.0 / 400
    assert b["unusual"].tolist() == [False, True, False, False]
    assert b["volunteer"].tolist() == ["ann", "ann", "bob", "cat"]
    assert b["image_width"].tolist() == [400] * 4
    assert str(b["created_at"].dt.tz) == "UTC"


def test_box_side_override_and_non_square_images():
    clicks = clicks_table([(1, 10, "ann", 100.0, 50.0, False)])
    subjects = subjects_table({10: 20.0}, {10: (1000, 750)})
    b = make_boxes(clicks, subjects, box_side=8.0)
    assert b[["x1", "y1", "x2", "y2"]].iloc[0].tolist() == [96.0, 46.0, 104.0, 54.0]
    assert b["x1_norm"].iloc[0] == 96.0 / 1000 and b["y1_norm"].iloc[0] == 46.0 / 750


def test_reported_image_size_replaces_the_config_default():
    clicks = clicks_table(
        [
            (1, 10, "ann", 100.0, 50.0, False),
            (2, 10, "bob", 5.0, 5.0, False),
            (3, 10, "cy", 6.0, 6.0, False),
            (4, 11, "ann", 1.0, 1.0, False),
        ]
    )
    clicks["natural_width"] = pd.array([1000, 1000, 800, 1000], dtype="Int64")
    clicks["natural_height"] = pd.array([750, 750, 600, 750], dtype="Int64")
    subjects = subjects_table({10: 20.0, 11: 20.0}, source="config")
    subjects.loc[1, "image_size_source"] = "metadata"  # subject 11 keeps its 400 x 400
    b = make_boxes(clicks, subjects)
    assert b["image_width"].tolist() == [1000, 1000, 1000, 400]  # the most common size
    assert b["image_height"].tolist() == [750, 750, 750, 400]


def test_subjects_missing_from_subjects_table_are_named():
    clicks = clicks_table(
        [
            (1, 10, "ann", 1.0, 1.0, False),
            (2, 12, "ann", 1.0, 1.0, False),
            (3, 13, "ann", np.nan, np.nan, False),
        ]
    )
    with pytest.raises(InputError) as e:
        make_boxes(clicks, subjects_table({10: 20.0}), subjects_path="subjects.parquet")
    msg = e.value.one_line()
    assert msg.startswith("subjects.parquet: 2 subject(s)") and "12, 13" in msg


def test_bad_tables():
    clicks = clicks_table([(1, 10, "ann", 1.0, 1.0, False)])
    with pytest.raises(InputError, match="lacks column"):
        make_boxes(clicks.drop(columns="x"), subjects_table({10: 20.0}))
    with pytest.raises(InputError, match="lacks column"):
        make_boxes(clicks, subjects_table({10: 20.0}).drop(columns="box_side"))
    with pytest.raises(InputError, match="no usable box side"):
        make_boxes(clicks, subjects_table({10: float("nan")}))
    with pytest.raises(InputError, match="positive"):
        make_boxes(clicks, subjects_table({10: 20.0}), box_side=0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(-50, 450, allow_nan=False),
            st.floats(-50, 450, allow_nan=False),
            st.floats(0.5, 80),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_box_is_centred_square_of_the_side(points):
    """Property (decisions.md#box-geometry): every box is a square of side box_side centred on its click."""
    n = len(points)
    clicks = clicks_table([(i, i, f"v{i}", p[0], p[1], False) for i, p in enumerate(points)])
    subjects = subjects_table({i: p[2] for i, p in enumerate(points)})
    b = make_boxes(clicks, subjects)
    assert len(b) == n
    np.testing.assert_allclose(b["x2"] - b["x1"], b["box_side"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(b["y2"] - b["y1"], b["box_side"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((b["x1"] + b["x2"]) / 2, b["x"], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((b["y1"] + b["y2"]) / 2, b["y"], rtol=1e-9, atol=1e-9)


def test_cli_boxes(tmp_path, capsys):
    clicks = clicks_table([(1, 10, "ann", 100.0, 50.0, False)])
    cp, sp, out = tmp_path / "c.parquet", tmp_path / "s.parquet", tmp_path / "b.parquet"
    clicks.to_parquet(cp)
    subjects_table({10: 20.0}).to_parquet(sp)
    assert cli_main(["boxes", "--clicks", str(cp), "--subjects", str(sp), "--out", str(out)]) == 0
    assert pd.read_parquet(out)["x1"].tolist() == [90.0]
    subjects_table({11: 20.0}).to_parquet(sp)
    rc = cli_main(["boxes", "--clicks", str(cp), "--subjects", str(sp), "--out", str(out)])
    assert rc == 2 and "not in the subjects table" in capsys.readouterr().err


def test_extract_subjects_boxes_pipeline(tmp_path):
    """extract -> subjects (catalogue) -> boxes on a tiny synthetic Clump Scout export."""
    from test_zooniverse import classic_point, row, write_export, write_subjects

    from clumpscout.data.subjects import build_subjects
    from clumpscout.data.zooniverse import extract_clicks

    exp = write_export(
        tmp_path / "c.csv",
        [row(1, "a", 5, [classic_point(200.0, 210.0, 1)]), row(2, "b", 5, [])],
    )
    sub = write_subjects(tmp_path / "s.csv", [5])
    cat = tmp_path / "g.csv"
    cat.write_text("subject_id,petroR90_r,psffwhm_r\n5,5.0,1.2\n")
    clicks, _ = extract_clicks(exp, sub)
    boxes = make_boxes(clicks, build_subjects(cat, sub, {}, None))
    side = 2 * 1.2 / 0.396 * 400 / 76
    assert boxes["x1"].iloc[0] == pytest.approx(200.0 - side / 2)
    assert boxes["unusual"].tolist() == [True, False]
    assert math.isnan(boxes["x1"].iloc[1])


@pytest.mark.shared
def test_penguin_watch_end_to_end(shared, tmp_path):
    """A plain Zooniverse project: box side from config, image size from subject_dimensions."""
    from clumpscout.data.subjects import build_subjects
    from clumpscout.data.zooniverse import extract_clicks

    d = shared / "data/zooniverse_exports/penguin_watch"
    subj = d / "penguin-watch-subjects-trim.csv"
    clicks, rep = extract_clicks(
        d / "penguin-watch-classifications-trim.csv",
        subj,
        workflow_id=6465,
        workflow_version="52.76",
        clump_task="T0",
        unusual_tools=(),
        tools=(0, 1, 2),
    )
    subjects = build_subjects(None, subj, {}, box_side=20.0)
    boxes = make_boxes(clicks, subjects)
    assert len(boxes) == len(clicks) and int(boxes["x1"].notna().sum()) == 9605
    assert set(boxes["image_width"]) == {1000} and set(boxes["image_height"]) == {750}
    assert (boxes["x2"] - boxes["x1"]).dropna().eq(20.0).all()
    json.dumps(rep)


# --------------------------------------------------------------------------- no subjects table


def test_boxes_without_subjects_table_fixed_side_and_unknown_size(caplog):
    """No subjects table, no size anywhere: the image is the smallest holding the boxes
    (from (0, 0)), nothing is flagged outside, and the log and report say so."""
    clicks = clicks_table(
        [
            (1, 10, "ann", 100.0, 50.0, False),
            (2, 10, "bob", 300.0, 20.0, False),
            (3, 11, "ann", np.nan, np.nan, False),
        ]
    )
    report = {}
    with caplog.at_level("WARNING", logger="clumpscout"):
        b = make_boxes(clicks, box_side=10.0, report=report)
    assert b[["x1", "y1", "x2", "y2"]].iloc[0].tolist() == [95.0, 45.0, 105.0, 55.0]
    # subject 10: largest x2 = 305, largest y2 = 55; subject 11 (no click): the box side
    assert b["image_width"].tolist() == [305, 305, 10]
    assert b["image_height"].tolist() == [55, 55, 10]
    assert b["outside_image"].isna().all()
    assert report["image_size_source"]["unknown"] == 2
    assert report["clicks_image_size_unknown"] == 2 and report["clicks_outside_image"] == 0
    assert report["box_side"]["source"] == "option" and report["box_side"]["px"] == 10.0
    assert "image size unknown for 2 subjects" in caplog.text


def test_image_size_from_the_clicks_table_then_the_option():
    """A flattened table's image_width/height (most common per subject) comes before
    --image-size, which covers the subjects the table says nothing about."""
    clicks = clicks_table(
        [
            (1, 10, "ann", 100.0, 50.0, False),
            (2, 10, "bob", 5.0, 5.0, False),
            (3, 10, "cy", 6.0, 6.0, False),
            (4, 11, "ann", 1.0, 1.0, False),
        ]
    )
    clicks["image_width"] = [640.0, 640.0, 500.0, np.nan]
    clicks["image_height"] = [480.0, 480.0, 500.0, np.nan]
    report = {}
    b = make_boxes(clicks, box_side=8.0, image_size=(300, 200), report=report)
    assert b["image_width"].tolist() == [640, 640, 640, 300]
    assert b["image_height"].tolist() == [480, 480, 480, 200]
    assert b["x1_norm"].iloc[0] == 96.0 / 640
    assert report["image_size_source"] == {
        "subjects": 0,
        "clicks": 1,
        "option": 1,
        "config": 0,
        "unknown": 0,
    }


def test_clicks_outside_the_image_are_kept_flagged_and_counted(caplog):
    """decisions.md#clicks-outside-image: a click at x = 2,600 on a 400 px image is kept,
    flagged, counted and given as an example; a click on the edge is inside."""
    clicks = clicks_table(
        [
            (1, 10, "ann", 2600.0, 50.0, False),
            (1, 10, "ann", 400.0, 0.0, False),  # on the edge: inside
            (2, 10, "bob", -0.5, 10.0, False),
            (3, 10, "cy", np.nan, np.nan, False),
        ]
    )
    report = {}
    with caplog.at_level("WARNING", logger="clumpscout"):
        b = make_boxes(clicks, subjects_table({10: 20.0}), report=report)
    assert len(b) == 4
    assert b["outside_image"].tolist() == [True, False, True, pd.NA]
    assert report["clicks_outside_image"] == 2
    ex = report["outside_image_examples"]
    assert [(e["row"], e["x"], e["image_width"]) for e in ex] == [(0, 2600.0, 400), (2, -0.5, 400)]
    assert "2 clicks lie outside their image" in caplog.text


def test_no_subjects_table_needs_a_box_side():
    clicks = clicks_table([(1, 10, "ann", 1.0, 1.0, False)])
    with pytest.raises(InputError, match="--box-side PX"):
        make_boxes(clicks, clicks_path="c.parquet")
    for bad in (0, -3, "wide", float("nan")):
        with pytest.raises(InputError, match="box side"):
            make_boxes(clicks, box_side=bad)


# --------------------------------------------------------------------------- box side auto


def test_box_side_auto_hand_computed():
    """Three subjects, each with one object clicked by three volunteers at (c - 2, c),
    (c, c + 2), (c + 2, c - 2)... exactly: x offsets (-2, 0, 2), y offsets (0, 2, -2).

    The mean is the object; the six residuals times sqrt(3/2) (the mean of k = 3 clicks)
    are |r| = sqrt(1.5) x (2, 0, 2, 0, 2, 2), median 2 sqrt(1.5) = 2.449490; sigma =
    2.449490 / 0.674490 = 3.631618 px; FWHM = 2.354820 x 3.631618 = 8.551807 px; box side
    2 FWHM = 17.103614 px. The linking radius (3 sigma ~ 10.9 px) links each triple, and the
    objects are 200 px apart."""
    rows = []
    cid = 0
    for s in (1, 2, 3):
        cx, cy = 100.0 + 200 * s, 300.0
        for vol, (dx, dy) in zip(("a", "b", "c"), [(-2, 0), (0, 2), (2, -2)], strict=True):
            cid += 1
            rows.append((cid, s, vol, cx + dx, cy + dy, False))
    est = estimate_box_side(*(np.array(c) for c in list(zip(*rows, strict=True))[1:5]))
    assert est["sigma_px"] == pytest.approx(3.631618, abs=1e-5)
    assert est["fwhm_px"] == pytest.approx(8.551807, abs=1e-5)
    assert est["box_side_px"] == pytest.approx(17.103614, abs=1e-5)
    assert est["groups"] == 3 and est["clicks_used"] == 9 and est["converged"]
    report = {}
    b = make_boxes(clicks_table(rows), box_side="auto", report=report)
    assert b["box_side"].tolist() == pytest.approx([17.103614] * 9, abs=1e-5)
    assert report["box_side"]["source"] == "auto"
    assert report["box_side"]["auto"]["box_side_px"] == pytest.approx(17.103614, abs=1e-5)


def synthetic_scatter(sigma, seed, n_subjects=40, n_objects=5, n_volunteers=10):
    """Objects >= 20 sigma apart on 1000 x 750 images; each volunteer marks each object with
    probability 0.9 (Gaussian scatter ``sigma`` per axis) plus Poisson(0.3) clicks anywhere."""
    rng = np.random.default_rng(seed)
    rows, cid = [], 0
    for s in range(n_subjects):
        objs = []
        while len(objs) < n_objects:
            o = rng.uniform(50, [950, 700])
            if all(np.hypot(*(o - q)) > 20 * sigma for q in objs):
                objs.append(o)
        for v in range(n_volunteers):
            cid += 1
            for o in objs:
                if rng.random() < 0.9:
                    rows.append((cid, s, f"v{v}", *(o + rng.normal(0, sigma, 2)), False))
            for _ in range(rng.poisson(0.3)):
                rows.append((cid, s, f"v{v}", *rng.uniform(0, [1000, 750]), False))
    return clicks_table(rows)


@pytest.mark.parametrize("sigma", [2.0, 4.0, 8.0])
def test_box_side_auto_recovers_a_known_scatter(sigma):
    """sigma given -> FWHM = 2.3548 sigma, side = 4.7096 sigma (sigma = 4: 18.84 px); the
    estimate is within 5 % (measured: 0.97-0.99 of the truth over seeds 0-3)."""
    clicks = synthetic_scatter(sigma, seed=int(sigma))
    est = estimate_box_side(clicks["subject_id"], clicks["volunteer"], clicks["x"], clicks["y"])
    assert est["sigma_px"] == pytest.approx(sigma, rel=0.05)
    assert est["box_side_px"] == pytest.approx(2 * 2.3548200 * sigma, rel=0.05)
    assert est["groups"] >= 150  # 40 subjects x 5 objects, nearly all found


def test_box_side_auto_needs_groups():
    clicks = clicks_table([(1, 1, "a", 10.0, 10.0, False), (2, 1, "b", 12.0, 10.0, False)])
    with pytest.raises(InputError, match="only 2 clicks|--box-side PX"):
        make_boxes(clicks, box_side="auto")
    far = clicks_table([(i, i, f"v{i}", 10.0, 10.0, False) for i in range(5)])
    with pytest.raises(InputError, match="no subject has clicks of two different volunteers"):
        make_boxes(far, box_side="auto")


def test_subjects_table_with_auto_side_triggers_the_estimate():
    """``clumpscout subjects --box-side auto`` leaves box_side NaN with psf_source auto;
    boxes then measures the side."""
    clicks = synthetic_scatter(4.0, seed=1, n_subjects=10)
    subjects = subjects_table({s: np.nan for s in range(10)}, {s: (1000, 750) for s in range(10)})
    subjects["psf_source"] = "auto"
    report = {}
    b = make_boxes(clicks, subjects, report=report)
    assert report["box_side"]["source"] == "auto"
    assert b["box_side"].iloc[0] == pytest.approx(18.84, rel=0.08)
    assert set(b["image_width"]) == {1000}


# --------------------------------------------------------------------------- bad tables


def write_flat(tmp_path, text):
    p = tmp_path / "flat.csv"
    p.write_text(text)
    return p


def test_volunteer_missing_on_some_rows_is_named(tmp_path, capsys):
    p = write_flat(
        tmp_path,
        "classification_id,subject_id,volunteer,x,y\n"
        "6,1,bob,5,5\n"
        "7,1,ann,10,10\n"
        "7,1,ann,20,20\n"
        "7,1,,30,30\n",
    )
    out = tmp_path / "b.parquet"
    rc = cli_main(["boxes", "--clicks", str(p), "--box-side", "10", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert (
        f"{p}: classification 7: volunteer is missing on row(s) 4 but 'ann' on row(s) 2, 3" in err
    )


def test_missing_volunteer_on_every_row_is_kept_and_counted(tmp_path):
    p = write_flat(
        tmp_path,
        "classification_id,subject_id,volunteer,x,y\n7,1,,10,10\n7,1,,20,20\n8,1,ann,5,5\n",
    )
    out = tmp_path / "b.parquet"
    assert cli_main(["boxes", "--clicks", str(p), "--box-side", "10", "--out", str(out)]) == 0
    b = pd.read_parquet(out)
    assert b["volunteer"].isna().tolist() == [True, True, False]
    rep = json.loads((tmp_path / "b_report.json").read_text())
    assert rep["classifications_without_volunteer"] == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "7,1,ann,10,10\n7,2,ann,20,20\n",
            "classification 7 appears under subjects 1, 2 (rows 1, 2)",
        ),
        (
            "7,1,ann,10,10\n7,1,bob,20,20\n",
            "classification 7 has several volunteers ('ann', 'bob'; rows 1, 2)",
        ),
        ("7,1,ann,10,\n", ":row 1: a click has one of x, y and not the other"),
        ("7,1,ann,ten,10\n", ":row 1: x 'ten' is not a number"),
        ("7,,ann,10,10\n", ":row 1: subject_id is missing"),
        ("7.5,1,ann,10,10\n", ":row 1: classification_id 7.5 is not an integer"),
    ],
)
def test_bad_flat_tables_name_file_row_and_problem(tmp_path, capsys, body, message):
    p = write_flat(tmp_path, "classification_id,subject_id,volunteer,x,y\n" + body)
    out = tmp_path / "b.parquet"
    rc = cli_main(["boxes", "--clicks", str(p), "--box-side", "10", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and str(p) in err, err
    assert not out.exists() and not (tmp_path / "b_report.json").exists()


def test_cli_boxes_writes_the_report(tmp_path):
    clicks = clicks_table([(1, 10, "ann", 2600.0, 50.0, False), (2, 10, "bob", 5.0, 5.0, False)])
    cp, sp, out = tmp_path / "c.parquet", tmp_path / "s.parquet", tmp_path / "b.parquet"
    clicks.to_parquet(cp)
    subjects_table({10: 20.0}).to_parquet(sp)
    assert cli_main(["boxes", "--clicks", str(cp), "--subjects", str(sp), "--out", str(out)]) == 0
    rep = json.loads((tmp_path / "b_report.json").read_text())
    assert rep["clicks_outside_image"] == 1 and rep["boxes"] == 2
    assert rep["box_side"]["source"] == "subjects" and rep["box_side"]["min_px"] == 20.0


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        ("extract", ["(default: T1)", "(default: [1])", "(default: keep)", "(default: 1000)"]),
        ("boxes", ["(default: drawn)", "'auto'", "--image-size W H"]),
        ("subjects", ["(default: 400)", "(default: 0.396)", "(default: 40)", "(default: 6.0)"]),
        ("subsample", ["--independent", "(default: not written)"]),
    ],
)
def test_help_shows_the_defaults(capsys, command, shown):
    with pytest.raises(SystemExit) as e:
        cli_main([command, "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for s in shown:
        assert s in text, (s, text)
    assert "(default: None)" not in text
