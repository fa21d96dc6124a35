"""Z~_n subsamples (paper §6.1, decisions.md#subsamples): exact counts, nestedness, seeds, whole classifications."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clumpscout.data.subsample import draw_subsample
from clumpscout.errors import InputError


def make_boxes(rows_per_class: dict[int, list[int]], seed: int = 0) -> pd.DataFrame:
    """A boxes table: subject -> list of box-row counts per classification (0 = marked nothing)."""
    rng = np.random.default_rng(seed)
    out = []
    cid = 1000
    for sid, counts in rows_per_class.items():
        for k in counts:
            cid += 1
            if k == 0:
                out.append((cid, sid, f"v{cid}", np.nan, np.nan))
            for _ in range(k):
                out.append((cid, sid, f"v{cid}", *rng.uniform(0, 400, 2)))
    df = pd.DataFrame(out, columns=["classification_id", "subject_id", "volunteer", "x", "y"])
    df["x1"] = df["x"] - 5
    df["y1"] = df["y"] - 5
    df["x2"] = df["x"] + 5
    df["y2"] = df["y"] + 5
    return df


# subject 1: 6 classifications (one empty), subject 2: 2 (fewer than n=3), subject 3: 4
TOY = {1: [2, 1, 0, 3, 1, 2], 2: [1, 0], 3: [1, 1, 4, 0]}


def classifications(df):
    return df.groupby("subject_id")["classification_id"].agg(lambda s: set(s.unique()))


def test_counts_per_subject_and_short_subjects_are_counted():
    boxes = make_boxes(TOY)
    out, rep = draw_subsample(boxes, 3, seed=7)
    per = out.groupby("subject_id")["classification_id"].nunique()
    assert per.to_dict() == {1: 3, 2: 2, 3: 3}
    assert rep["n_subjects"] == 3
    assert rep["n_subjects_short"] == 1  # subject 2 has 2 < 3 classifications
    assert rep["n_classifications_in_short_subjects"] == 2
    assert rep["n_classifications_in"] == 12
    assert rep["n_classifications_out"] == 8
    assert rep["n_classifications_dropped"] == 4
    assert rep["n_rows_in"] == len(boxes)
    assert rep["n_rows_out"] == len(out)
    assert rep["n_rows_in"] - rep["n_rows_out"] == rep["n_rows_dropped"]


def test_rows_of_one_classification_stay_together():
    boxes = make_boxes(TOY)
    out, _ = draw_subsample(boxes, 2, seed=3)
    rows_in = boxes.groupby("classification_id").size()
    rows_out = out.groupby("classification_id").size()
    assert (rows_out == rows_in.loc[rows_out.index]).all()
    # the empty classifications' NaN rows travel too when drawn
    kept = set(out["classification_id"])
    nan_cls = set(boxes.loc[boxes["x"].isna(), "classification_id"])
    assert out["x"].isna().sum() == len(kept & nan_cls)
    # rows come out in input order
    assert (np.diff(out.merge(boxes.reset_index(), how="left")["index"]) > 0).all()


def test_nested_draws_are_nested_and_n_at_least_size_keeps_everything():
    boxes = make_boxes({s: [1] * (3 + s % 5) for s in range(30)}, seed=1)
    prev = None
    for n in range(1, 9):
        out, _ = draw_subsample(boxes, n, seed=11)
        cur = classifications(out)
        if prev is not None:
            for sid in cur.index:
                assert prev[sid] <= cur[sid], f"Z~_{n - 1} not inside Z~_{n} for subject {sid}"
        prev = cur
    out, rep = draw_subsample(boxes, 8, seed=11)
    assert len(out) == len(boxes) and rep["n_subjects_short"] == 30 - sum(
        1 for s in range(30) if 3 + s % 5 >= 8
    )


def test_same_seed_same_output_other_seed_differs_and_row_order_does_not_matter():
    boxes = make_boxes({s: [1, 2, 0, 1, 1, 3] for s in range(50)}, seed=2)
    a, _ = draw_subsample(boxes, 3, seed=5)
    b, _ = draw_subsample(boxes, 3, seed=5)
    pd.testing.assert_frame_equal(a, b)
    c, _ = draw_subsample(boxes, 3, seed=6)
    assert set(a["classification_id"]) != set(c["classification_id"])
    shuffled = boxes.sample(frac=1.0, random_state=0).reset_index(drop=True)
    d, _ = draw_subsample(shuffled, 3, seed=5)
    assert set(d["classification_id"]) == set(a["classification_id"])


def test_independent_draws_have_exact_counts_and_differ_from_nested():
    boxes = make_boxes({s: [1] * 10 for s in range(40)}, seed=4)
    nested = {n: set(draw_subsample(boxes, n, 9)[0]["classification_id"]) for n in (4, 5)}
    indep = {
        n: set(draw_subsample(boxes, n, 9, nested=False)[0]["classification_id"]) for n in (4, 5)
    }
    assert nested[4] <= nested[5]
    assert not indep[4] <= indep[5]  # 40 subjects: nesting by chance has probability 0.5^40
    for n in (4, 5):
        out, rep = draw_subsample(boxes, n, 9, nested=False)
        assert (out.groupby("subject_id")["classification_id"].nunique() == n).all()
        assert rep["nested"] is False
    a, _ = draw_subsample(boxes, 4, 9, nested=False)
    b, _ = draw_subsample(boxes, 4, 9, nested=False)
    pd.testing.assert_frame_equal(a, b)


def test_draw_is_uniform_over_a_subjects_classifications():
    """Each of k classifications is drawn with probability n/k (no bias towards any position)."""
    k, n, subjects = 5, 2, 4000
    boxes = make_boxes({s: [1] * k for s in range(subjects)}, seed=5)
    out, _ = draw_subsample(boxes, n, seed=21)
    position = boxes.groupby("subject_id").cumcount()
    picked = boxes["classification_id"].isin(out["classification_id"])
    freq = picked.groupby(position).mean().to_numpy()
    se = np.sqrt(0.4 * 0.6 / subjects)
    assert np.all(np.abs(freq - n / k) < 5 * se), freq


@settings(max_examples=30, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 8), min_size=1, max_size=12),
    n=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_counts_are_min_of_n_and_size(sizes, n, seed):
    boxes = make_boxes({s: [1 + (i % 2) for i in range(k)] for s, k in enumerate(sizes)})
    out, rep = draw_subsample(boxes, n, seed)
    per = out.groupby("subject_id")["classification_id"].nunique()
    assert per.to_dict() == {s: min(n, k) for s, k in enumerate(sizes)}
    assert rep["n_subjects_short"] == sum(k < n for k in sizes)


def test_bad_input_is_an_input_error():
    boxes = make_boxes(TOY)
    with pytest.raises(InputError, match="subject_id"):
        draw_subsample(boxes.drop(columns="subject_id"), 3, 1)
    bad = boxes.copy()
    bad.loc[0, "subject_id"] = 2  # classification 1001 now spans subjects 1 and 2
    with pytest.raises(InputError, match="more than one subject"):
        draw_subsample(bad, 3, 1)
    with pytest.raises(InputError, match="n must be"):
        draw_subsample(boxes, 0, 1)


def test_cli_writes_boxes_and_report(tmp_path):
    from clumpscout.cli import main

    boxes = make_boxes(TOY)
    src = tmp_path / "boxes.parquet"
    boxes.to_parquet(src)
    out = tmp_path / "n3" / "boxes.parquet"
    rep = tmp_path / "n3" / "report.json"
    rc = main(["subsample", "--boxes", str(src), "--n", "3", "--seed", "7", "--out", str(out),
               "--report", str(rep)])  # fmt: skip
    assert rc == 0
    got = pd.read_parquet(out)
    assert got.groupby("subject_id")["classification_id"].nunique().to_dict() == {1: 3, 2: 2, 3: 3}
    assert json.loads(rep.read_text())["n_subjects_short"] == 1
    assert main(["subsample", "--boxes", str(tmp_path / "nope.parquet"), "--n", "3", "--seed",
                 "1", "--out", str(out)]) == 2  # fmt: skip


def test_n_beyond_what_most_subjects_hold_is_said_loudly(caplog):
    boxes = make_boxes(TOY)
    _, rep = draw_subsample(boxes, 3, seed=7)
    assert rep["warnings"] == []  # one subject of three is short
    _, rep = draw_subsample(boxes, 5, seed=7)  # subjects 2 and 3 are short
    assert len(rep["warnings"]) == 1 and "67%" in rep["warnings"][0]
    assert any("fewer than 5" in r.message for r in caplog.records)


def test_n_above_every_subject_is_the_complete_data_with_a_warning(caplog):
    """TOY holds at most 6 classifications per subject: n = 7 keeps everything, says so in the
    report and warns; n = 6 is the complete data too, without the warning (one subject holds 6)."""
    boxes = make_boxes(TOY)
    with caplog.at_level("WARNING", logger="clumpscout"):
        out, rep = draw_subsample(boxes, 7, seed=1)
    assert len(out) == len(boxes) and rep["n_classifications_dropped"] == 0
    assert rep["complete_data"] is True
    assert len(rep["warnings"]) == 1 and "no subject holds more than 6" in rep["warnings"][0]
    assert "the same as Z~_6" in caplog.text
    _, rep6 = draw_subsample(boxes, 6, seed=1)
    assert rep6["complete_data"] is True and not any("no subject" in w for w in rep6["warnings"])
    _, rep3 = draw_subsample(boxes, 3, seed=1)
    assert rep3["complete_data"] is False


def test_a_pyarrow_table_gives_the_rows_and_the_file_of_the_dataframe(tmp_path):
    """The workflow filters the Table read from Parquet: same rows, same report and the same
    bytes on disk as the DataFrame path."""
    import pyarrow.parquet as pq

    from clumpscout.data.subsample import read_boxes_table
    from clumpscout.io import write_parquet, write_table

    boxes = make_boxes({s: [1, 0, 2, 1, 3, 1, 0][: 3 + s % 4] for s in range(40)}, seed=2)
    boxes["created_at"] = pd.Timestamp("2020-01-01", tz="UTC")
    write_parquet(boxes, tmp_path / "boxes.parquet")
    df = pd.read_parquet(tmp_path / "boxes.parquet")
    tab = read_boxes_table(tmp_path / "boxes.parquet")
    for n in (1, 6, 3):
        a, rep_a = draw_subsample(df, n, seed=4)
        b, rep_b = draw_subsample(tab, n, seed=4)
        assert rep_a == rep_b
        pd.testing.assert_frame_equal(a, b.to_pandas())
        write_parquet(a, tmp_path / "a.parquet")
        write_table(b, tmp_path / "b.parquet")
        assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert pq.read_table(tmp_path / "b.parquet").num_rows == len(a) < len(boxes)
    with pytest.raises(InputError, match="cannot read parquet"):
        read_boxes_table(tmp_path / "missing.parquet")
