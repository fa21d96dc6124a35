"""Drawn shapes: rectangles, circles and ellipses aggregated as the boxes volunteers drew
(docs/decisions.md#shapes).

The reader keeps the shapes with their drawn extent (both export formats, both coordinate
conventions; malformed and unsupported marks counted by reason), ``clumpscout boxes`` uses the
extent, and the consensus models take the boxes as they are: a project of 300 px rectangles and
one of 12 px points work with the same hyper-parameters. Synthetic exports are built in code;
the worked examples (the rectangle workflow 4870 of the mixed-workflows export and the
Andromeda Project's circles in ../shared) are checked against numbers read by hand from the raw
JSON and run end to end through the command line and the workflow.
"""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO
from test_zooniverse import classic_point, row, write_export, write_subjects

from clumpscout.cli import main as cli_main
from clumpscout.data.boxes import make_boxes
from clumpscout.data.zooniverse import ELLIPSE, SHAPES, extract_clicks, shape_extent
from clumpscout.errors import InputError
from clumpscout.model.aggregator import aggregate

DATA_DIGGING = "data/zooniverse_exports/data_digging"
EXTENT = ["x", "y", "x1", "y1", "x2", "y2"]


def _cli(argv) -> int:
    return cli_main([str(a) for a in argv])


def classic(tool=0, **keys) -> dict:
    return {**keys, "tool": tool, "frame": 0, "details": [], "tool_label": "Object"}


def fem(tool_type, tool=0, **keys) -> dict:
    return {**keys, "toolIndex": tool, "toolType": tool_type, "frame": 0, "details": []}


def marks_row(cid, marks, *, user="ann", sid=5, fem_format=False) -> dict:
    """A classification whose task T1 holds ``marks`` (no bulge task)."""
    ann = [{"task": "T1", "value": list(marks)}]
    if fem_format:
        ann[0]["taskType"] = "drawing"
    return row(cid, user, sid, annotations=ann, natural=(800, 600))


def extract_marks(tmp_path, marks, fem_format=False, **kw):
    exp = write_export(tmp_path / "c.csv", [marks_row(1, marks, fem_format=fem_format)])
    return extract_clicks(exp, None, unusual_tools=(), **kw)


# --------------------------------------------------------------------------- the reader

#: the same four marks drawn with the classic front end and with the front-end monorepo, and
#: their extents computed by hand: (shape, x, y, x1, y1, x2, y2)
ELLIPSE_HX = math.sqrt((20 * 0.5) ** 2 + (10 * math.sqrt(3) / 2) ** 2)  # sqrt(175)
ELLIPSE_HY = math.sqrt((20 * math.sqrt(3) / 2) ** 2 + (10 * 0.5) ** 2)  # sqrt(325)
BY_HAND = [
    ("rectangle", 25.0, 40.0, 10.0, 20.0, 40.0, 60.0),  # top-left (10, 20), 30 x 40
    ("circle", 100.0, 50.0, 95.0, 45.0, 105.0, 55.0),  # r = 5
    (
        "ellipse",
        200.0,
        100.0,
        200 - ELLIPSE_HX,
        100 - ELLIPSE_HY,
        200 + ELLIPSE_HX,
        100 + ELLIPSE_HY,
    ),
    ("point", 7.0, 8.0, math.nan, math.nan, math.nan, math.nan),
]
CLASSIC_MARKS = [
    classic(x=10.0, y=20.0, width=30.0, height=40.0),
    classic(x=100.0, y=50.0, r=5.0, angle=-24.6),  # PFE stores an angle with a circle
    classic(x=200.0, y=100.0, rx=20.0, ry=10.0, angle=60.0),
    classic_point(7.0, 8.0),
]
FEM_MARKS = [
    fem("rectangle", x_center=25.0, y_center=40.0, width=30.0, height=40.0),
    fem("circle", x_center=100.0, y_center=50.0, radius=5.0),
    fem("ellipse", x_center=200.0, y_center=100.0, rx=20.0, ry=10.0, angle=-60.0),
    fem("point", x=7.0, y=8.0),
]


def test_ellipse_half_sides_by_hand():
    assert ELLIPSE_HX == pytest.approx(13.228756555322953, abs=1e-12)
    assert ELLIPSE_HY == pytest.approx(18.027756377319946, abs=1e-12)


@pytest.mark.parametrize("fem_format", [False, True], ids=["classic", "fem"])
def test_shapes_are_kept_with_their_drawn_extent(tmp_path, fem_format):
    marks = FEM_MARKS if fem_format else CLASSIC_MARKS
    clicks, rep = extract_marks(tmp_path, marks, fem_format=fem_format)
    assert clicks["shape"].tolist() == [m[0] for m in BY_HAND]
    got = clicks[EXTENT].to_numpy()
    want = np.array([m[1:] for m in BY_HAND], dtype=float)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    assert rep["shapes_kept"] == {"point": 1, "rectangle": 1, "circle": 1, "ellipse": 1}
    assert rep["clicks_kept"] == 4 and rep["unsupported_shapes"] == rep["malformed_shapes"] == {}
    # the centre is what outside_image and the unusual flag go by, as for a point
    assert not clicks["outside_image"].any()
    assert str(clicks["shape"].dtype) == "str" and clicks["x1"].dtype == np.float64


def test_ellipse_extent_contains_its_outline():
    """The bounding box of the rotated outline, sampled: every angle, either sense."""
    for angle in (-150.0, -30.0, 0.0, 17.0, 90.0, 123.0):
        t = np.radians(angle)
        s = np.linspace(0, 2 * np.pi, 20001)
        ox = 200 + 20 * np.cos(s) * np.cos(t) - 10 * np.sin(s) * np.sin(t)
        oy = 100 + 20 * np.cos(s) * np.sin(t) + 10 * np.sin(s) * np.cos(t)
        mark = {"x": 200.0, "y": 100.0, "rx": 20.0, "ry": 10.0, "angle": angle}
        reason, _, (_, _, x1, y1, x2, y2) = shape_extent(mark, ELLIPSE)
        assert reason is None
        np.testing.assert_allclose(
            [x1, y1, x2, y2], [ox.min(), oy.min(), ox.max(), oy.max()], atol=1e-4
        )


def test_unusual_tools_and_tool_filter_apply_to_shapes(tmp_path):
    marks = [
        classic(0, x=1.0, y=1.0, r=2.0),
        classic(1, x=9.0, y=9.0, r=2.0),
        classic(2, x=5.0, y=5.0, r=1.0),
    ]
    exp = write_export(tmp_path / "c.csv", [marks_row(1, marks)])
    clicks, rep = extract_clicks(exp, None, unusual_tools=(1,), tools=(0, 1))
    assert clicks["unusual"].tolist() == [False, True]
    assert rep["dropped_clicks"]["other_tool"] == 1


#: marks that are dropped, with the reason and (malformed shapes) the problem
DROPPED = [
    (classic(x=1.0, y=1.0, width=-3.0, height=2.0), "malformed_shape", "rectangle: negative width"),
    (classic(x=1.0, y=1.0, width=0.0, height=2.0), "malformed_shape", "rectangle: zero width"),
    (classic(x=1.0, y=1.0, width=3.0), "malformed_shape", "rectangle: missing height"),
    (classic(x=1.0, y=1.0, width=3.0, height="tall"), "malformed_shape", "rectangle: missing height"),
    (classic(x=1.0, y=1.0, r=None, angle=0), "malformed_shape", "circle: missing r"),
    (classic(x=1.0, y=1.0, r=True), "malformed_shape", "circle: missing r"),
    (fem("circle", x_center=1.0, y_center=1.0), "malformed_shape", "circle: missing r"),
    (classic(x=1.0, y=1.0, r=float("nan")), "malformed_shape", "circle: non-finite r"),
    (classic(x=1.0, y=1.0, rx=3.0, ry=2.0), "malformed_shape", "ellipse: missing angle"),
    (classic(x=1.0, y=1.0, rx=-3.0, ry=2.0, angle=0), "malformed_shape", "ellipse: negative rx"),
    (classic(x=1.0, y=1.0, rx=3.0, ry=2.0, angle=float("inf")), "malformed_shape", "ellipse: non-finite angle"),
    (classic(x=1e308, y=1.0, width=1e308, height=1.0), "malformed_shape", "rectangle: non-finite extent"),
    (classic(x=1e20, y=1.0, width=1e-10, height=1.0), "malformed_shape", "rectangle: degenerate extent"),
    (classic(x=None, y=1.0, width=3.0, height=2.0), "missing_coordinates", None),
    (fem("ellipse", x_center=1.0, rx=3.0, ry=2.0, angle=0), "missing_coordinates", None),
    (classic(x=1.0, y=float("nan"), r=2.0), "nonfinite_coordinates", None),
    (classic(points=[{"x": 1, "y": 1}, {"x": 4, "y": 1}, {"x": 2, "y": 3}], closed=True), "unsupported_shape", "polygon"),
    (classic(x1=1.0, y1=1.0, x2=5.0, y2=5.0), "unsupported_shape", "line"),
    (classic(x=1.0, y=1.0, width=3.0, height=2.0, angle=30.0), "unsupported_shape", "rotateRectangle"),
    (classic(x=1.0, width=3.0), "unsupported_shape", "column"),
    (classic(x=1.0), "unsupported_shape", "fullHeightLine"),
    (classic(y=1.0), "unsupported_shape", "fullWidthLine"),
    (classic(x=1.0, y=1.0, radius=5.0, spread=30.0, rotation=0.0), "unsupported_shape", "fan"),
    (classic(pathX=[1, 2], pathY=[1, 2]), "unsupported_shape", "freehandLine"),
    (fem("polygon", points=[{"x": 1, "y": 1}]), "unsupported_shape", "polygon"),
    (fem("transcriptionLine", x1=1.0, y1=1.0, x2=5.0, y2=5.0), "unsupported_shape", "transcriptionLine"),
    (fem("a-tool-of-its-own", x=1.0, y=1.0), "unsupported_shape", "other"),
    (fem(["rectangle"], x=1.0, y=1.0), "unsupported_shape", "other"),
]  # fmt: skip


def test_malformed_and_unsupported_marks_are_counted_by_reason(tmp_path):
    keep = classic(x=50.0, y=50.0, r=4.0)
    clicks, rep = extract_marks(tmp_path, [m for m, _, _ in DROPPED] + [keep])
    assert clicks["shape"].tolist() == ["circle"]
    reasons: dict[str, int] = {}
    details: dict[str, dict[str, int]] = {"malformed_shape": {}, "unsupported_shape": {}}
    for _, reason, detail in DROPPED:
        reasons[reason] = reasons.get(reason, 0) + 1
        if detail is not None:
            details[reason][detail] = details[reason].get(detail, 0) + 1
    dropped = {k: v for k, v in rep["dropped_clicks"].items() if k != "other_task"}
    assert dropped == reasons
    assert rep["malformed_shapes"] == details["malformed_shape"]
    assert rep["unsupported_shapes"] == details["unsupported_shape"]
    assert rep["clicks_kept"] + sum(dropped.values()) == len(DROPPED) + 1


HOSTILE = [
    None,
    True,
    "12",
    "abc",
    [],
    {},
    [1, 2],
    {"a": 1},
    2**2000,
    -(2**70),
    -0.0,
    1e308,
    -1e308,
]


@pytest.mark.parametrize(
    "key", ["x", "x_center", "width", "height", "r", "radius", "rx", "ry", "angle"]
)
def test_hostile_shape_values_never_crash_and_every_mark_is_counted(tmp_path, key):
    bases = [
        classic(x=10.0, y=10.0, width=5.0, height=5.0),
        classic(x=10.0, y=10.0, r=5.0),
        classic(x=10.0, y=10.0, rx=5.0, ry=3.0, angle=10.0),
        fem("rectangle", x_center=10.0, y_center=10.0, width=5.0, height=5.0),
        fem("circle", x_center=10.0, y_center=10.0, radius=5.0),
        fem("ellipse", x_center=10.0, y_center=10.0, rx=5.0, ry=3.0, angle=10.0),
    ]
    marks = [{**b, key: v} for b in bases for v in HOSTILE]
    clicks, rep = extract_marks(tmp_path, marks)
    dropped = sum(n for k, n in rep["dropped_clicks"].items() if k != "other_task")
    assert rep["clicks_kept"] + dropped == len(marks)
    kept = clicks.dropna(subset=["x1"])
    assert np.isfinite(kept[EXTENT].to_numpy()).all()
    assert ((kept["x2"] > kept["x1"]) & (kept["y2"] > kept["y1"])).all()
    json.dumps(rep)


# --------------------------------------------------------------------------- boxes


def _clicks(rows) -> pd.DataFrame:
    cols = ["classification_id", "subject_id", "volunteer", "shape", *EXTENT]
    df = pd.DataFrame(rows, columns=cols)
    df["shape"] = df["shape"].astype("str")
    return df


def _subjects(side=20.0, size=(400, 300)) -> pd.DataFrame:
    return pd.DataFrame(
        {"subject_id": [1], "box_side": [side], "image_width": [size[0]], "image_height": [size[1]]}
    )


NAN = math.nan
MIXED = [
    (1, 1, "a", "point", 50.0, 60.0, NAN, NAN, NAN, NAN),
    (1, 1, "a", "rectangle", 25.0, 40.0, 10.0, 20.0, 40.0, 60.0),
    (2, 1, "b", "circle", 100.0, 50.0, 95.0, 45.0, 105.0, 55.0),
    (3, 1, "c", None, NAN, NAN, NAN, NAN, NAN, NAN),  # marked nothing
]


def test_boxes_use_the_drawn_extent_and_the_side_for_points():
    boxes = make_boxes(_clicks(MIXED), _subjects())
    assert boxes[["x1", "y1", "x2", "y2"]].to_numpy()[:3].tolist() == [
        [40.0, 50.0, 60.0, 70.0],  # the point: the 20 px square
        [10.0, 20.0, 40.0, 60.0],  # the rectangle as drawn
        [95.0, 45.0, 105.0, 55.0],  # the circle's bounding square
    ]
    assert boxes[["x1", "y1"]].iloc[3].isna().all()
    assert boxes["shape"].tolist()[:3] == ["point", "rectangle", "circle"]
    assert (boxes["box_side"] == 20.0).all()  # the configured side, the subject's scale
    assert boxes["x1_norm"].iloc[1] == 10.0 / 400 and boxes["y2_norm"].iloc[1] == 60.0 / 300
    fixed = make_boxes(_clicks(MIXED), _subjects(), shape_extent="fixed")
    assert fixed[["x1", "y1", "x2", "y2"]].to_numpy()[:3].tolist() == [
        [40.0, 50.0, 60.0, 70.0],
        [15.0, 30.0, 35.0, 50.0],  # squares around the shapes' centres
        [90.0, 40.0, 110.0, 60.0],
    ]
    with pytest.raises(InputError, match="shape_extent"):
        make_boxes(_clicks(MIXED), _subjects(), shape_extent="drawn_ish")


def test_points_only_boxes_are_as_before():
    """The clicks table's new columns change nothing for a points-only project."""
    points = [r for r in MIXED if r[3] in ("point", None)]
    new = make_boxes(_clicks(points), _subjects())
    old = make_boxes(_clicks(points).drop(columns=["shape", "x1", "y1", "x2", "y2"]), _subjects())
    pd.testing.assert_frame_equal(new, old)
    assert "shape" not in new.columns


@pytest.mark.parametrize(
    "edit",
    [{"x2": NAN}, {"x2": 5.0}, {"y2": 20.0}],
    ids=["partial", "x2-before-x1", "empty-height"],
)
def test_bad_drawn_extent_is_an_error_naming_the_row(edit):
    clicks = _clicks(MIXED)
    for col, value in edit.items():
        clicks.loc[1, col] = value
    with pytest.raises(InputError, match="drawn extent") as err:
        make_boxes(clicks, _subjects(), clicks_path="clicks.parquet")
    assert err.value.row == 1


def test_cli_shape_extent(tmp_path):
    _clicks(MIXED).to_parquet(tmp_path / "clicks.parquet")
    _subjects().to_parquet(tmp_path / "subjects.parquet")
    for extent in ("drawn", "fixed"):
        out = tmp_path / f"{extent}.parquet"
        argv = ["boxes", "--clicks", tmp_path / "clicks.parquet", "--subjects"]
        argv += [tmp_path / "subjects.parquet", "--shape-extent", extent, "--out", out]
        assert _cli(argv) == 0
    drawn, fixed = (pd.read_parquet(tmp_path / f"{e}.parquet") for e in ("drawn", "fixed"))
    assert drawn["x1"].iloc[1] == 10.0 and fixed["x1"].iloc[1] == 15.0


# --------------------------------------------------------------------------- the models


def synthetic_project(kind: str, seed: int = 3, n_subjects: int = 40, n_classifications: int = 8):
    """(clicks, subjects, truth) of a project whose volunteers draw rectangles around objects
    of about 300 x 200 px on 2000 x 1500 images (edges scattered by 4 % of the size), or click
    12 px objects on 800 x 600 images (1.5 px scatter, 12 px boxes); each volunteer marks an
    object with probability 0.8 and adds Poisson(0.3) marks anywhere."""
    rng = np.random.default_rng(seed)
    width, height, side = (2000, 1500, 100.0) if kind == "rectangle" else (800, 600, 12.0)
    rows, truth = [], []
    cid = 0
    for s in range(n_subjects):
        objects: list[tuple[float, float, float, float]] = []
        k = rng.poisson(3)
        while len(objects) < k:
            w, h = (
                (rng.uniform(250, 350), rng.uniform(150, 250))
                if kind == "rectangle"
                else (12.0, 12.0)
            )
            cx, cy = rng.uniform(w, width - w), rng.uniform(h, height - h)
            if all(
                abs(cx - o[0]) > (w + o[2]) / 2 + 20 or abs(cy - o[1]) > (h + o[3]) / 2 + 20
                for o in objects
            ):
                objects.append((cx, cy, w, h))
        truth += [(s, *o) for o in objects]
        for _ in range(n_classifications):
            cid += 1
            vol = f"v{rng.integers(0, 60)}"
            marks = []
            for cx, cy, w, h in objects:
                if rng.random() >= 0.8:
                    continue
                if kind == "rectangle":
                    e = rng.normal(0, 0.04, 4) * np.array([w, h, w, h])
                    x1, y1, x2, y2 = (
                        cx - w / 2 + e[0],
                        cy - h / 2 + e[1],
                        cx + w / 2 + e[2],
                        cy + h / 2 + e[3],
                    )
                    marks.append(("rectangle", (x1 + x2) / 2, (y1 + y2) / 2, x1, y1, x2, y2))
                else:
                    marks.append(
                        (
                            "point",
                            cx + rng.normal(0, 1.5),
                            cy + rng.normal(0, 1.5),
                            NAN,
                            NAN,
                            NAN,
                            NAN,
                        )
                    )
            for _ in range(rng.poisson(0.3)):
                if kind == "rectangle":
                    w, h = rng.uniform(150, 350), rng.uniform(100, 250)
                    x, y = rng.uniform(0, width - w), rng.uniform(0, height - h)
                    marks.append(("rectangle", x + w / 2, y + h / 2, x, y, x + w, y + h))
                else:
                    marks.append(
                        ("point", rng.uniform(0, width), rng.uniform(0, height), NAN, NAN, NAN, NAN)
                    )
            rows += [(cid, s, vol, *m) for m in marks] or [(cid, s, vol, None, *[NAN] * 6)]
    subjects = pd.DataFrame(
        {
            "subject_id": np.arange(n_subjects),
            "box_side": side,
            "image_width": width,
            "image_height": height,
        }
    )
    return _clicks(rows), subjects, pd.DataFrame(truth, columns=["subject_id", "x", "y", "w", "h"])


def purity_completeness(labels: pd.DataFrame, truth: pd.DataFrame, p_star: float = 0.5):
    """A kept label (p_fp <= p_star) is true when it contains an object's centre
    (docs/decisions.md#true-label); an object is found when a kept label contains it."""
    kept = labels[labels["p_fp"] <= p_star]
    m = kept.merge(truth.reset_index(), on="subject_id", suffixes=("", "_t"))
    inside = (
        (m["x_t"] > m["x1"]) & (m["x_t"] < m["x2"]) & (m["y_t"] > m["y1"]) & (m["y_t"] < m["y2"])
    )
    true_labels = m.loc[inside, ["subject_id", "clump"]].drop_duplicates()
    return len(true_labels) / max(len(kept), 1), m.loc[inside, "index"].nunique() / len(truth)


@pytest.mark.parametrize("model", ["generative", "paper"])
@pytest.mark.parametrize("kind", ["rectangle", "point"])
def test_300px_rectangles_and_12px_points_need_no_retuning(kind, model):
    clicks, subjects, truth = synthetic_project(kind)
    boxes = make_boxes(clicks, subjects)
    sides = (boxes["x2"] - boxes["x1"]).dropna()
    assert sides.median() > 250 if kind == "rectangle" else np.allclose(sides, 12.0)
    result = aggregate(boxes, {"model": model}, seed=1)  # the default hyper-parameters
    purity, completeness = purity_completeness(result.labels, truth)
    assert purity >= 0.95 and completeness >= 0.95, (purity, completeness)


def test_scaling_a_project_leaves_every_p_fp_unchanged():
    """Jaccard distances and the location density per unit box area are scale-free: the
    rectangle project shrunk 25 times (12 px rectangles on 80 x 60 images) gives the same
    labels, scaled, with the same p_fp."""
    clicks, subjects, _ = synthetic_project("rectangle", n_subjects=20)
    small = clicks.copy()
    for c in EXTENT:
        small[c] = clicks[c] * 0.04
    a = aggregate(make_boxes(clicks, subjects), seed=1).labels
    b = aggregate(
        make_boxes(small, subjects.assign(image_width=80, image_height=60, box_side=4.0)), seed=1
    ).labels
    assert len(a) == len(b) > 30
    np.testing.assert_allclose(b["p_fp"], a["p_fp"], atol=1e-9)
    np.testing.assert_allclose(
        b[["x1", "y1", "x2", "y2"]], a[["x1", "y1", "x2", "y2"]] * 0.04, rtol=1e-9
    )


def mean_member_extents(result) -> pd.DataFrame:
    a = result.assignments
    a = a[a["assignment"] == "clump"]
    return a.groupby(["subject_id", "cluster"])[["x1", "y1", "x2", "y2"]].mean()


def test_labels_carry_the_mean_drawn_extent():
    clicks, subjects, truth = synthetic_project("rectangle", n_subjects=15)
    result = aggregate(make_boxes(clicks, subjects), seed=1)
    labels = result.labels.set_index(["subject_id", "clump"])[["x1", "y1", "x2", "y2"]]
    means = mean_member_extents(result)
    means.index = labels.index
    pd.testing.assert_frame_equal(labels, means, check_names=False, rtol=1e-9)
    # and the mean is close to the object (edges scattered by 4 % of the size)
    found = labels.reset_index().merge(truth, on="subject_id")
    found = found[(found["x"] - (found["x1"] + found["x2"]) / 2).abs() < 30]
    found = found[(found["y"] - (found["y1"] + found["y2"]) / 2).abs() < 30]
    assert len(found) >= 0.9 * len(labels)
    assert ((found["x2"] - found["x1"]) / found["w"]).between(0.9, 1.1).mean() > 0.9


# --------------------------------------------------------------------------- end to end (CI)


def rectangle_export(folder: Path) -> tuple[Path, Path, pd.DataFrame]:
    """A small rectangle project as a Zooniverse export: 6 pages of 933 x 1400 px, two
    rectangles of about 150 x 45 px each, 4 volunteers a page (two of them with the front-end
    monorepo, centre convention), plus a polygon, a malformed rectangle and a volunteer who drew
    nothing."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(7)
    rows, truth = [], []
    cid = 100
    for k in range(6):
        sid = 9000 + k
        objects = [
            (180.0 + 40 * k, 240.0 + 100 * k, 150.0, 45.0),
            (650.0, 900.0 - 60 * k, 160.0, 40.0),
        ]
        truth += [(sid, *o) for o in objects]
        for j in range(4):
            cid += 1
            marks = []
            for x, y, w, h in objects:
                dx, dy, dw, dh = rng.normal(0, 3, 4)
                if j < 2:  # classic: top-left corner
                    marks.append(
                        classic(x=x - w / 2 + dx, y=y - h / 2 + dy, width=w + dw, height=h + dh)
                    )
                else:  # FEM: centre
                    marks.append(
                        fem(
                            "rectangle",
                            x_center=x + dx,
                            y_center=y + dy,
                            width=w + dw,
                            height=h + dh,
                        )
                    )
            if k == 0 and j == 0:
                marks.append(classic(points=[{"x": 1, "y": 1}, {"x": 30, "y": 2}], closed=True))
            if k == 1 and j == 1:
                marks.append(classic(x=5.0, y=5.0, width=-10.0, height=3.0))
            if k == 2 and j == 3:
                marks = []
            ann = [{"task": "T0", "value": marks}, {"task": "T1", "value": "a transcription"}]
            if j >= 2:
                ann[0]["taskType"] = "drawing"
            rows.append(
                row(
                    cid,
                    f"vol{j}",
                    sid,
                    annotations=ann,
                    natural=(933, 1400),
                    workflow_id=4870,
                    version="45.58",
                )
            )
    exp = write_export(folder / "classifications.csv", rows)
    subj = write_subjects(folder / "subjects.csv", [9000 + k for k in range(6)], metadata={})
    return exp, subj, pd.DataFrame(truth, columns=["subject_id", "x", "y", "w", "h"])


def test_synthetic_rectangle_export_end_to_end(tmp_path):
    exp, subj, truth = rectangle_export(tmp_path / "in")
    r = tmp_path / "results"
    steps = [
        ["extract", "--classifications", exp, "--subjects", subj, "--clump-task", "T0",
         "--unusual-tools", "--out", r / "clicks/clicks.parquet"],
        ["subjects", "--subjects-export", subj, "--box-side", 100, "--out", r / "subjects/subjects.parquet"],
        ["boxes", "--clicks", r / "clicks/clicks.parquet", "--subjects", r / "subjects/subjects.parquet",
         "--out", r / "boxes/boxes.parquet"],
        ["subsample", "--boxes", r / "boxes/boxes.parquet", "--n", 4, "--seed", 1,
         "--out", r / "subsamples/n4/boxes.parquet", "--report", r / "subsamples/n4/report.json"],
        ["aggregate", "--boxes", r / "subsamples/n4/boxes.parquet", "--out", r / "aggregate/n4", "--seed", 2],
        ["ledger", "--classifications", exp, "--subjects-export", subj,
         "--clicks-report", r / "clicks/clicks_report.json", "--boxes", r / "boxes/boxes.parquet",
         "--n", 4, "--subsamples", r / "subsamples", "--aggregate", r / "aggregate", "--out", r / "ledger.csv"],
    ]  # fmt: skip
    for argv in steps:
        assert _cli(argv) == 0, argv[0]
    rep = json.loads((r / "clicks/clicks_report.json").read_text())
    assert rep["shapes_kept"]["rectangle"] == 6 * 4 * 2 - 2 == rep["clicks_kept"]
    assert rep["unsupported_shapes"] == {"polygon": 1}
    assert rep["malformed_shapes"] == {"rectangle: negative width": 1}
    assert rep["other_task_annotations"] == {"T1": 24}
    boxes = pd.read_parquet(r / "boxes/boxes.parquet")
    assert (boxes["image_width"] == 933).all() and (boxes["image_height"] == 1400).all()
    assert ((boxes["x2"] - boxes["x1"]).dropna() > 100).all()  # drawn, not the 100 px squares
    labels = pd.read_parquet(r / "aggregate/n4/labels.parquet")
    assert len(labels) == len(truth) == 12
    m = labels.merge(truth, on="subject_id", suffixes=("", "_t"))
    hit = (m["x_t"] > m["x1"]) & (m["x_t"] < m["x2"]) & (m["y_t"] > m["y1"]) & (m["y_t"] < m["y2"])
    assert hit.sum() == 12 and (labels["p_fp"] < 0.05).all()
    ledger = pd.read_csv(r / "ledger.csv")
    assert ledger["balanced"].all()
    assert ledger["dropped_click_unsupported_shape"].iloc[0] == 1
    assert ledger["dropped_click_malformed_shape"].iloc[0] == 1
    assert ledger["kept_clicks"].iloc[0] == 46


# --------------------------------------------------------------------------- worked examples


def subjects_export_from(classifications: Path, out: Path, workflow_id: int) -> Path:
    """A subject export made from the classification export's ``subject_data`` (the worked
    examples come without one); no image size: the volunteers' reported size is used."""
    seen: dict[str, dict] = {}
    with open(classifications, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["workflow_id"] == str(workflow_id):
                md = json.loads(r["subject_data"]).get(r["subject_ids"], {})
                seen.setdefault(r["subject_ids"], {k: v for k, v in md.items() if k != "retired"})
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["subject_id", "workflow_id", "metadata"])
        for sid, md in seen.items():
            w.writerow([sid, workflow_id, json.dumps(md)])
    return out


#: the worked examples: export file, workflow and task of each
EXAMPLES = {
    # the rectangle workflow of the mixed-workflows export: weather log books, T0 boxes the
    # temperature (tool 0) and pressure (tool 1) readings, T2 the dates
    "rectangles": ("mixed_workflows_raw_export.csv", 4870, "T0"),
    # the Andromeda Project: circles around star clusters (tool 0), background galaxies (1) ...
    "circles": ("andromeda_project_circles_raw_export.csv", 3149, "T0"),
}


@pytest.fixture(scope="module")
def examples(shared, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("shapes_examples")
    out = {}
    for name, (file, wid, _) in EXAMPLES.items():
        exp = shared / DATA_DIGGING / file
        out[name] = {
            "export": exp,
            "subjects": subjects_export_from(exp, d / f"{name}_subjects.csv", wid),
        }
    out["dir"] = d
    return out


def _mark(clicks: pd.DataFrame, cid: int, k: int) -> pd.Series:
    """Mark ``k`` (in click order) of classification ``cid``."""
    return clicks[clicks["classification_id"] == cid].iloc[k]


@pytest.mark.shared
def test_rectangle_workflow_extents_by_hand(shared):
    f = shared / DATA_DIGGING / EXAMPLES["rectangles"][0]
    clicks, rep = extract_clicks(f, None, workflow_id=4870, clump_task="T0", unusual_tools=())
    assert rep["classifications_kept"] == 12 and rep["subjects"] == 4 and rep["volunteers"] == 3
    assert rep["shapes_kept"] == {"point": 0, "rectangle": 63, "circle": 0, "ellipse": 0}
    assert rep["clicks_kept"] == 63 and rep["dropped_clicks"] == {"other_task": 39}
    assert rep["other_task_clicks"] == {"T2": 39} and rep["other_task_annotations"] == {"T1": 12}
    assert rep["dropped_classifications"]["other_workflow"] == 151
    assert clicks["tool"].value_counts().to_dict() == {1: 42, 0: 21}
    # classification 70478435, task T0, first and fourth rectangles, as in the raw JSON:
    # {"x": 115.4075927734375, "y": 221.14501953125, "width": 155.5301513671875,
    #  "height": 43.20281982421875, "tool": 0} and {"x": 603.2855834960938, "y":
    #  218.26852416992188, "width": 172.811279296875, "height": 48.963226318359375, "tool": 1}
    # x, y the top-left corner (classic front end): x2 = x + width, y2 = y + height
    temp, pressure = _mark(clicks, 70478435, 0), _mark(clicks, 70478435, 3)
    assert (temp["tool"], pressure["tool"]) == (0, 1)
    assert temp[["x1", "y1", "x2", "y2"]].tolist() == [
        115.4075927734375,
        221.14501953125,
        270.937744140625,
        264.34783935546875,
    ]
    assert temp[["x", "y"]].tolist() == [193.17266845703125, 242.746429443359375]
    assert pressure[["x1", "y1", "x2", "y2"]].tolist() == pytest.approx(
        [603.2855834960938, 218.26852416992188, 776.0968627929688, 267.23175048828125], abs=1e-9
    )
    assert (temp["natural_width"], temp["natural_height"]) == (933, 1400)


@pytest.mark.shared
def test_andromeda_circles_and_ellipses_by_hand(shared):
    f = shared / DATA_DIGGING / EXAMPLES["circles"][0]
    # the newest version (57.37): circles only
    clicks, rep = extract_clicks(f, None, clump_task="T0", unusual_tools=())
    assert rep["classifications_kept"] == 35 and rep["subjects"] == 14 and rep["volunteers"] == 3
    assert rep["shapes_kept"] == {"point": 0, "rectangle": 0, "circle": 52, "ellipse": 0}
    dropped = {k: v for k, v in rep["dropped_classifications"].items() if v}
    assert dropped == {"duplicate_volunteer_subject": 19, "older_workflow_version": 9}
    assert rep["empty_classifications"] == 8 and rep["classifications_emptied_by_drops"] == 0
    # version 44.19: 9 circles, 3 ellipses, 4 polygons (2 drawn with the bezier tool), a line
    clicks, rep = extract_clicks(f, None, workflow_version="44", clump_task="T0", unusual_tools=())
    assert rep["shapes_kept"] == {"point": 0, "rectangle": 0, "circle": 9, "ellipse": 3}
    assert rep["unsupported_shapes"] == {"line": 1, "polygon": 4}
    assert rep["dropped_clicks"] == {"unsupported_shape": 5, "other_task": 0}
    # classification 23386400, first mark: {"r": 28.735518437973496, "x": 375.3401360544218,
    # "y": 182.85714285714286, "angle": -24.623564786163644, "tool": 0}: the square of side 2r
    circle = _mark(clicks, 23386400, 0)
    assert circle["shape"] == "circle"
    assert circle[["x1", "y1", "x2", "y2"]].tolist() == pytest.approx(
        [346.6046176164483, 154.12162441916937, 404.0756544923953, 211.59266129511636], abs=1e-9
    )
    # its ellipse: {"x": 465.68027210884355, "y": 286.25850340136054, "rx": 90.72616482905993,
    # "ry": 45.36308241452996, "angle": -30.256437163529277}; cos t = 0.863779, sin t =
    # -0.503871: half sides sqrt((rx cos t)² + (ry sin t)²) = 81.632653 and
    # sqrt((rx sin t)² + (ry cos t)²) = 60.209270
    ellipse = _mark(clicks, 23386400, 3)
    assert ellipse["shape"] == "ellipse"
    assert ellipse[["x1", "y1", "x2", "y2"]].tolist() == pytest.approx(
        [384.047619, 226.049233, 547.312925, 346.467773], abs=1e-6
    )


@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_worked_example_end_to_end_cli(examples, name):
    _, wid, task = EXAMPLES[name]
    f, r = examples[name], examples["dir"] / f"cli_{name}"
    steps = [
        ["extract", "--classifications", f["export"], "--subjects", f["subjects"], "--workflow-id", wid,
         "--clump-task", task, "--unusual-tools", "--out", r / "clicks.parquet"],
        ["subjects", "--subjects-export", f["subjects"], "--box-side", 100, "--out", r / "subjects.parquet"],
        ["boxes", "--clicks", r / "clicks.parquet", "--subjects", r / "subjects.parquet", "--out", r / "boxes.parquet"],
        ["aggregate", "--boxes", r / "boxes.parquet", "--out", r / "aggregate", "--seed", 1],
    ]  # fmt: skip
    for argv in steps:
        assert _cli(argv) == 0, argv[0]
    boxes = pd.read_parquet(r / "boxes.parquet")
    clicks = pd.read_parquet(r / "clicks.parquet")
    drawn = boxes["x1"].notna()
    np.testing.assert_array_equal(
        boxes.loc[drawn, ["x1", "y1", "x2", "y2"]], clicks.loc[drawn, ["x1", "y1", "x2", "y2"]]
    )
    labels = pd.read_parquet(r / "aggregate/labels.parquet")
    result = pd.read_parquet(r / "aggregate/assignments.parquet")
    means = (
        result[result["assignment"] == "clump"]
        .groupby(["subject_id", "cluster"])[["x1", "y1", "x2", "y2"]]
        .mean()
    )
    np.testing.assert_allclose(labels[["x1", "y1", "x2", "y2"]], means, rtol=1e-9)
    if name == "rectangles":
        # every page's readings boxed by all 3 volunteers: 21 labels of 3 rectangles
        assert (boxes.loc[drawn, "image_width"] == 933).all()
        assert len(labels) == 21 and (labels["n_marks"] == 3).all()
        assert (labels["p_fp"] < 0.01).all()
    else:
        # circles of star clusters and background galaxies (725 x 500 px); subjects with fewer
        # than 3 volunteers are not aggregated (min_volunteers_batch)
        circle = clicks["shape"] == "circle"
        assert np.allclose(
            clicks.loc[circle, "x2"] - clicks.loc[circle, "x1"],
            clicks.loc[circle, "y2"] - clicks.loc[circle, "y1"],
        )
        assert len(labels) >= 10 and (labels["n_marks"] >= 2).all()
        assert labels["subject_id"].nunique() >= 5


def example_config(examples, name: str, **extra) -> dict:
    _, wid, task = EXAMPLES[name]
    cfg = {
        "source": "export",
        "export": {
            "classifications": str(examples[name]["export"]),
            "subjects": str(examples[name]["subjects"]),
            "workflow_id": wid,
            "box_side": 100.0,
            "shape_extent": "drawn",
        },
        "extract": {"clump_task": task, "unusual_tools": []},
        "subsample": {"n": [3]},
        "baseline": {"n": 3},
        "figures": {"n_ref": 3},
    }
    for section, values in extra.items():
        cfg.setdefault(section, {}).update(values)
    return cfg


def run_workflow(workdir: Path, cfg: dict, *args: str, timeout: int = 900):
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    argv = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    argv += ["--configfile", str(workdir / "config.yaml"), *args]
    r = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return r


@pytest.mark.slow  # a Snakemake dry run each (~5 s)
@pytest.mark.shared
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_worked_example_workflow_dry_run(examples, name):
    r = run_workflow(
        examples["dir"] / f"dry_{name}", example_config(examples, name), "-n", "--quiet", "rules"
    )
    out = r.stdout + r.stderr
    for rule in ("extract", "boxes", "aggregate", "ledger"):
        assert rule in out


@pytest.mark.shared
@pytest.mark.slow
def test_rectangle_workflow_real_run(examples):
    """The whole DAG on the rectangle workflow (n = 3; about 40 s)."""
    d = examples["dir"] / "wf_rectangles"
    run_workflow(d, example_config(examples, "rectangles"), "--cores", "2")
    res = d / "results"
    boxes = pd.read_parquet(res / "boxes/boxes.parquet")
    assert set(boxes["shape"].dropna()) == {"rectangle"}
    for model in ("generative", "paper"):
        labels = pd.read_parquet(res / f"aggregate/{model}/n3/labels.parquet")
        assert len(labels) == 21, model
        ledger = pd.read_csv(res / f"ledger/{model}.csv")
        assert ledger["balanced"].all() and ledger["kept_clicks"].iloc[0] == 63
    assert (res / "project_report/example_images.png").is_file()
    assert (res / "catalogue.csv").is_file() and (res / "report.html").is_file()


def test_shape_names_are_the_documented_ones():
    assert SHAPES == ("point", "rectangle", "circle", "ellipse")
    text = (REPO / "docs/decisions.md").read_text()
    assert '<a id="shapes"></a>' in text and "shape_extent" in text
