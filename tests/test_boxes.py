"""Clicks -> boxes (clumpscout.data.boxes; paper §3.3, decisions.md#box-geometry, contract 4)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clumpscout.cli import main as cli_main
from clumpscout.data.boxes import BOX_COLUMNS, make_boxes, square_boxes
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
