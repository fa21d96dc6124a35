"""The estimator API of clumpscout.model.aggregator (fit / fit_predict, fitted attributes,
its docstring example) and per-tool aggregation (docs/decisions.md#per-tool)."""

from __future__ import annotations

import doctest

import numpy as np
import pandas as pd
import pytest

from clumpscout import cli
from clumpscout.errors import InputError
from clumpscout.model import aggregator
from clumpscout.model.aggregator import Aggregator, GenerativeAggregator, PaperAggregator
from clumpscout.model.params import Params
from clumpscout.model.prepare import split_by_tool


def test_the_docstring_example_runs():
    """The Examples of Aggregator (three matching boxes -> one label) run as a doctest."""
    res = doctest.testmod(aggregator, optionflags=doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert res.attempted >= 5
    assert res.failed == 0


def _one_spot(tools=(0, 0, 0, 1, 1, 1), x1=(10.0, 11.0, 12.0, 13.0, 14.0, 15.0)):
    """Six volunteers each draw one 20 x 20 px box at nearly the same spot of subject 5, the
    first three with one tool and the last three with another; a seventh marks nothing."""
    n = len(tools)
    df = pd.DataFrame(
        {
            "classification_id": np.arange(1, n + 2),
            "subject_id": 5,
            "volunteer": [f"v{k}" for k in range(n + 1)],
            "x1": [*x1, np.nan],
            "y1": [20.0] * n + [np.nan],
            "x2": [x + 20.0 for x in x1] + [np.nan],
            "y2": [40.0] * n + [np.nan],
            "tool": pd.array([*tools, pd.NA], dtype="Int64"),
            "image_width": 100.0,
            "image_height": 100.0,
        }
    )
    return df


def test_fit_returns_the_fitted_estimator():
    df = _one_spot()
    agg = Aggregator(Params(), seed=0)
    assert agg.fit(df) is agg
    for name in ("labels_", "subjects_", "volunteers_", "assignments_"):
        assert isinstance(getattr(agg, name), pd.DataFrame)
    # one working batch; the generative EM logs its initial clustering and >= 1 more
    n_iter = len(agg.report_["cycles"][0]["em"])
    assert len(agg.report_["cycles"]) == 1 and n_iter >= 2
    assert len(agg.loglik_history_) == n_iter
    assert all(isinstance(v, float) and np.isfinite(v) for v in agg.loglik_history_)
    labels = Aggregator(Params(), seed=0).fit_predict(df)
    pd.testing.assert_frame_equal(labels, agg.labels_)


@pytest.mark.parametrize(
    ("estimator", "model", "other"),
    [(GenerativeAggregator, "generative", "paper"), (PaperAggregator, "paper", "generative")],
)
def test_one_estimator_class_per_model(estimator, model, other):
    """Each model's class is the estimator with its model fixed, whatever params.model says:
    the tables of Aggregator with params.model set to it; probas_ is p_fp per label, by
    (subject_id, clump)."""
    second = _one_spot().assign(subject_id=6, classification_id=lambda d: d.classification_id + 10)
    df = pd.concat([_one_spot(), second], ignore_index=True)
    agg = estimator(Params(model=other), seed=0)
    assert agg.params.model == model
    assert agg.fit(df) is agg
    assert agg.report_["model"]["name"] == model
    ref = Aggregator(Params(model=model), seed=0).fit(df)
    pd.testing.assert_frame_equal(agg.labels_, ref.labels_)
    pd.testing.assert_frame_equal(agg.subjects_, ref.subjects_)
    pd.testing.assert_frame_equal(agg.volunteers_, ref.volunteers_)
    assert list(agg.probas_.index.names) == ["subject_id", "clump"]
    assert agg.probas_.index.tolist() == list(zip(df["subject_id"].unique(), [0, 0], strict=True))
    np.testing.assert_array_equal(agg.probas_.to_numpy(), agg.labels_["p_fp"].to_numpy())
    per_tool = estimator(seed=0, per_tool=True).fit(_one_spot())
    assert list(per_tool.probas_.index.names) == ["subject_id", "tool", "clump"]
    keys = per_tool.labels_[["subject_id", "tool", "clump"]].itertuples(index=False)
    assert per_tool.probas_.index.tolist() == [tuple(k) for k in keys]


def test_without_per_tool_both_tools_make_one_label():
    """All six boxes coincide: one label, corners the mean of the six boxes' corners
    (x1 = (10 + 11 + 12 + 13 + 14 + 15) / 6 = 12.5)."""
    lab = Aggregator(Params(), seed=0).fit(_one_spot()).labels_
    assert "tool" not in lab.columns
    assert len(lab) == 1
    assert lab.loc[0, "n_marks"] == 6
    np.testing.assert_allclose(
        lab.loc[0, ["x1", "y1", "x2", "y2"]].to_numpy(float), [12.5, 20, 32.5, 40]
    )


def test_per_tool_makes_one_label_per_tool():
    """The same boxes aggregated per tool: tool 0's label from boxes 10, 11, 12 (x1 = 11),
    tool 1's from 13, 14, 15 (x1 = 14); each tool's unit is viewed by all 7 volunteers."""
    agg = Aggregator(Params(), seed=0, per_tool=True).fit(_one_spot())
    lab = agg.labels_
    assert list(lab.columns[:3]) == ["subject_id", "tool", "clump"]
    assert lab["subject_id"].tolist() == [5, 5] and lab["tool"].tolist() == [0, 1]
    assert lab["clump"].tolist() == [0, 0] and lab["n_marks"].tolist() == [3, 3]
    np.testing.assert_allclose(lab["x1"], [11.0, 14.0])
    np.testing.assert_allclose(lab["x2"], [31.0, 34.0])
    sub = agg.subjects_
    assert sub[["subject_id", "tool"]].values.tolist() == [[5, 0], [5, 1]]
    assert sub["n_volunteers"].tolist() == [7, 7] and sub["n_boxes"].tolist() == [3, 3]
    # volunteers count real subjects and classifications, not (subject, tool) units
    assert (agg.volunteers_["n_subjects"] == 1).all()
    assert (agg.volunteers_["n_classifications"] == 1).all()
    # assignments: the input's rows in input order, each box in clump 0 of its tool's unit
    a = agg.assignments_
    pd.testing.assert_frame_equal(a[_one_spot().columns], _one_spot())
    assert a["assignment"].tolist() == ["clump"] * 6 + ["empty"]
    assert a["cluster"].iloc[:6].tolist() == [0] * 6 and pd.isna(a["cluster"].iloc[6])
    assert agg.report_["per_tool"] == {
        "input_rows": 7,
        "subjects": 1,
        "tools": ["0", "1"],
        "units": 2,
    }


def test_split_by_tool_gives_every_classification_every_tool():
    """Classification 1 has a tool-0 box, classification 2 a tool-1 box, classification 3
    nothing: each unit keeps its tool's box and an empty row for the other two."""
    df = pd.DataFrame(
        {
            "classification_id": [1, 2, 3],
            "subject_id": [8, 8, 8],
            "volunteer": ["a", "b", "c"],
            "x1": [1.0, 2.0, np.nan],
            "y1": [1.0, 2.0, np.nan],
            "x2": [3.0, 4.0, np.nan],
            "y2": [3.0, 4.0, np.nan],
            "tool": pd.array([0, 1, pd.NA], dtype="Int64"),
            "image_width": 10.0,
            "image_height": 10.0,
        }
    )
    frame, units = split_by_tool(df)
    assert units["subject_id"].tolist() == [8, 8] and units["tool"].tolist() == [0, 1]
    got = frame.sort_values(["subject_id", "volunteer"])
    assert got["subject_id"].tolist() == [0, 0, 0, 1, 1, 1]
    assert got["volunteer"].tolist() == ["a", "b", "c", "a", "b", "c"]
    assert got["x1"].tolist()[:1] == [1.0] and got["x1"].isna().tolist() == [
        False, True, True, True, False, True,
    ]  # fmt: skip
    assert got["_row"].tolist() == [0, -1, -1, -1, 1, -1]
    # one classification number per (classification, tool)
    assert got["classification_id"].nunique() == 6


def test_per_tool_input_errors():
    df = _one_spot()
    with pytest.raises(InputError, match="tool column"):
        Aggregator(per_tool=True).fit(df.drop(columns="tool"))
    bad = df.copy()
    bad.loc[2, "tool"] = pd.NA
    with pytest.raises(InputError, match="box without a tool") as exc:
        Aggregator(per_tool=True).fit(bad)
    assert exc.value.row == 2


def test_cli_per_tool_flag(tmp_path):
    boxes = tmp_path / "boxes.parquet"
    _one_spot().to_parquet(boxes)
    out = tmp_path / "out"
    assert cli.main(["aggregate", "--boxes", str(boxes), "--out", str(out), "--per-tool"]) == 0
    lab = pd.read_parquet(out / "labels.parquet")
    assert lab["tool"].tolist() == [0, 1]
    assert cli.main(["aggregate", "--boxes", str(boxes), "--out", str(tmp_path / "o2")]) == 0
    assert "tool" not in pd.read_parquet(tmp_path / "o2" / "labels.parquet").columns


def test_per_tool_is_permutation_invariant():
    """docs/decisions.md#determinism holds per tool: shuffled rows give the same tables."""
    from test_aggregate import obvious_toy

    toy = obvious_toy(seed=2)
    vol = toy["volunteer"].str[-1].astype(int)
    toy["tool"] = pd.array(np.where(toy["x"].notna(), vol % 2, -1), dtype="Int64")
    toy.loc[toy["x"].isna(), "tool"] = pd.NA
    a = Aggregator(Params(), seed=4, per_tool=True).fit(toy)
    assert set(a.labels_["tool"]) == {0, 1}
    shuffled = toy.sample(frac=1.0, random_state=8)
    b = Aggregator(Params(), seed=4, per_tool=True).fit(shuffled)
    for name in ("labels_", "subjects_", "volunteers_"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))
    back = b.assignments_.set_axis(shuffled.index).sort_index()
    pd.testing.assert_frame_equal(a.assignments_, back)
