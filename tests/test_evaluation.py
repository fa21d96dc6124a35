"""Scoring helpers of the regime benchmark (benchmarks.truth_scores), on hand-computed toys."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks import gold_size, regimes
from benchmarks import truth_scores as ev
from clumpscout.simulation.truth import truth_tables

REPO = Path(__file__).resolve().parents[1]


def _box(sid, x1, y1, x2, y2, p=None):
    row = {"subject_id": sid, "x1": x1, "y1": y1, "x2": x2, "y2": y2}
    if p is not None:
        row["p_fp"] = p
    return row


def _truth(*pts):
    return pd.DataFrame([{"subject_id": s, "x": x, "y": y} for s, x, y in pts])


def test_realised_errors_toy():
    # subject 1: A contains (5, 5), B contains nothing, (50, 50) is in no box;
    # subject 2: C, no truth; subject 3: no label, one true object
    labels = pd.DataFrame([_box(1, 0, 0, 10, 10), _box(1, 20, 20, 30, 30), _box(2, 0, 0, 10, 10)])
    truth = _truth((1, 5, 5), (1, 50, 50), (3, 1, 1))
    assert ev.realised_errors(labels, truth) == (2, 2)  # fp: B, C; fn: (50,50), (1,1)
    assert ev.realised_errors(labels, truth, subjects=[1]) == (1, 1)
    # a box edge counts as inside (closed box)
    assert ev.realised_errors(pd.DataFrame([_box(1, 5, 5, 8, 8)]), _truth((1, 5, 5))) == (0, 0)


def test_ece_toy():
    # p_fp 0.05 (true), 0.15 (true), 0.9 (false), 0.95 (true); 10 bins:
    # bin 0: |0 - 0.05|, bin 1: |0 - 0.15|, bin 9: n=2, frac false 0.5, mean p 0.925
    labels = pd.DataFrame(
        [
            _box(1, 0, 0, 10, 10, 0.05),
            _box(1, 20, 20, 30, 30, 0.15),
            _box(1, 40, 40, 50, 50, 0.9),
            _box(1, 60, 60, 70, 70, 0.95),
        ]
    )
    truth = _truth((1, 5, 5), (1, 25, 25), (1, 65, 65))
    expected = (0.05 + 0.15 + 2 * abs(0.5 - 0.925)) / 4  # 0.2625
    assert ev.label_ece(labels, truth) == pytest.approx(expected)
    assert math.isnan(ev.label_ece(labels.drop(columns="p_fp"), truth))


def test_matched_ece_counts_a_second_label_on_one_object_as_false():
    # two labels hold the object (5, 5): containment calls both true, one-to-one matching
    # only the one whose centre is nearer ((5, 5) is the centre of A, off-centre in B)
    labels = pd.DataFrame([_box(1, 0, 0, 10, 10, 0.1), _box(1, 2, 2, 14, 14, 0.2)])
    truth = _truth((1, 5, 5))
    assert ev.label_ece(labels, truth) == pytest.approx((0.1 + 0.2) / 2)
    # bin 1 holds A (true, p 0.1): |0 - 0.1|; bin 2 holds B (false, p 0.2): |1 - 0.2|
    assert ev.label_ece_matched(labels, truth) == pytest.approx((0.1 + 0.8) / 2)
    assert math.isnan(ev.label_ece_matched(labels.drop(columns="p_fp"), truth))


def test_count_mae_toy():
    labels = pd.DataFrame(
        [
            _box(1, 0, 0, 1, 1, 0.1),
            _box(1, 0, 0, 1, 1, 0.7),
            _box(2, 0, 0, 1, 1, 0.2),
            _box(2, 0, 0, 1, 1, 0.3),
            _box(2, 0, 0, 1, 1, 0.4),
            _box(4, 0, 0, 1, 1, 0.5),  # not < 0.5
        ]
    )
    truth = _truth((1, 0, 0), (2, 0, 0), (3, 0, 0), (3, 2, 2))
    # kept labels 1, 3, 0, 0 vs true 1, 1, 2, 0: |0| + |2| + |2| + |0| = 4 over 4 subjects
    assert ev.count_mae(labels, truth, [1, 2, 3, 4]) == pytest.approx(1.0)
    # without p_fp every label counts: 2, 3, 0, 1 vs 1, 1, 2, 0 -> (1 + 2 + 2 + 1) / 4
    assert ev.count_mae(labels.drop(columns="p_fp"), truth, [1, 2, 3, 4]) == pytest.approx(1.5)
    counts = ev.per_subject_counts(labels, truth, [4, 1, 3, 2])
    assert counts["subject_id"].tolist() == [1, 2, 3, 4]
    assert counts["n_labels"].tolist() == [1, 3, 0, 0]


def test_expected_count_error_toy():
    subjects = pd.DataFrame({"subject_id": [1, 2, 3], "n_fn": [0.5, np.nan, 0.0]})
    labels = pd.DataFrame([_box(1, 0, 0, 1, 1, 0.1), _box(1, 0, 0, 1, 1, 0.3)])
    truth = _truth((1, 0, 0), (1, 1, 1), (3, 0, 0))
    e = ev.expected_counts(subjects, labels)
    assert e.loc[1] == pytest.approx(0.9 + 0.7 + 0.5)  # 2.1
    assert np.isnan(e.loc[2]) and e.loc[3] == 0.0
    # subject 1: 2.1 - 2 = 0.1; subject 3: 0 - 1 = -1; subject 2 has no N_fn
    err, n = ev.expected_count_error(subjects, labels, truth)
    assert n == 2 and err == pytest.approx((0.1 - 1.0) / 2)
    # the subjects table's own expected_count wins
    subjects["expected_count"] = [2.0, 1.0, 1.0]
    err, n = ev.expected_count_error(subjects, labels, truth)
    assert n == 3 and err == pytest.approx((0.0 + 1.0 + 0.0) / 3)  # 2-2, 1-0, 1-1


def test_model_sums_toy():
    subjects = pd.DataFrame(
        {"subject_id": [1, 2, 3], "n_fp": [0.2, 0.0, 0.3], "n_fn": [0.1, np.nan, 0.4]}
    )
    n_fp, n_fn, agg = ev.model_sums(subjects)
    assert n_fp == pytest.approx(0.5) and n_fn == pytest.approx(0.5)
    assert agg.tolist() == [1, 3]


def test_marked_objects_toy():
    boxes = pd.DataFrame(
        {"subject_id": [1, 1, 1, 1, 1, 2, 2], "classification_id": [1, 2, 3, 4, 5, 6, 7]}
    )
    tc = pd.DataFrame(
        [
            # cls 1 marks clump 0 twice (a double click) and makes a spurious click
            (1, 1, False, "T1", "clump", 0, -1),
            (1, 1, False, "T1", "clump", 0, -1),
            (1, 1, False, "T1", "spurious", -1, -1),
            (2, 1, False, "T1", "clump", 0, -1),
            (3, 1, False, "T1", "faint_feature", -1, 1),
            (3, 1, False, "T0", "bulge", -1, -1),  # the bulge task is not a mark
            (900, 1, True, "T1", "clump", 0, -1),  # an expert
            (99, 1, False, "T1", "clump", 0, -1),  # not in the subsample
            (6, 2, False, "T1", "star", -1, 0),
        ],
        columns=["classification_id", "subject_id", "expert", "task", "source", "clump",
                 "distractor"],
    )  # fmt: skip
    m = ev.marked_objects(tc, boxes)
    got = {(r.subject_id, r.kind, r.object): r.fraction for r in m.itertuples()}
    assert got == {(1, "clump", 0): 2 / 5, (1, "faint_feature", 1): 1 / 5, (2, "star", 0): 1 / 2}
    m30 = ev.marked_objects(tc, boxes, 0.3)
    assert len(m30) == 2 and set(m30["kind"]) == {"clump", "star"}
    # a project whose marking task is T0 (the counting regime): only the bulge click counts
    t0 = ev.marked_objects(tc.assign(distractor=tc["distractor"].where(tc["task"] == "T1", 0)),
                           boxes, task="T0")  # fmt: skip
    assert t0[["subject_id", "kind", "n_marked"]].values.tolist() == [[1, "bulge", 1]]


def test_truth_tables(tmp_path):
    pd.DataFrame({"subject_id": [1], "clump": [0], "x": [1.0], "y": [2.0]}).to_csv(
        tmp_path / "truth_clumps.csv", index=False
    )
    pd.DataFrame(
        {"subject_id": [1, 2], "x": [3.0, 4.0], "y": [5.0, 6.0], "kind": ["star", "bulge"]}
    ).to_csv(tmp_path / "truth_distractors.csv", index=False)
    clumps, objects = truth_tables(tmp_path)
    assert len(clumps) == 1 and objects["kind"].tolist() == ["clump", "star", "bulge"]
    pd.DataFrame(
        {"subject_id": [1, 1], "object": [0, 1], "kind": ["clump", "faint_feature"],
         "x": [1.0, 7.0], "y": [2.0, 8.0]}
    ).to_csv(tmp_path / "truth_objects.csv", index=False)  # fmt: skip
    clumps, objects = truth_tables(tmp_path)
    assert len(clumps) == 1 and objects["kind"].tolist() == ["clump", "faint_feature"]


def test_score_method_toy():
    # two subjects; the model's true label has p_fp 0.1, its false one 0.8: at the optimal
    # p* (max sqrt(C^2 + P^2)) only the true label is kept -> P = 1, C = 1/2
    labels = pd.DataFrame(
        [_box(1, 0, 0, 10, 10, 0.1), _box(1, 20, 20, 30, 30, 0.8), _box(2, 0, 0, 10, 10, 0.9)]
    )
    truth = _truth((1, 5, 5), (2, 50, 50))
    subjects = pd.DataFrame({"subject_id": [1, 2], "n_fp": [0.8, 0.9], "n_fn": [0.0, np.nan]})
    row, curve = ev.score_method(labels, truth, [1, 2], subjects_df=subjects)
    assert row["purity"] == 1.0 and row["completeness"] == 0.5
    assert 0.1 <= row["p_star"] < 0.8
    assert row["labels"] == 3 and row["true_objects"] == 2
    assert row["realised_fp"] == 2
    assert row["realised_fn"] == 0  # subject 2 has no N_fn: its miss is not counted
    # sums over the subjects with a finite N_fn (subject 1)
    assert row["sum_n_fp"] == pytest.approx(0.8) and row["sum_n_fn"] == 0.0
    # count: subject 1 keeps 1 label (p < 0.5) vs 1 object, subject 2 keeps 0 vs 1
    assert row["count_mae"] == pytest.approx(0.5)
    assert len(curve) == 101
    # a baseline (no p_fp): every label, p_star and ece empty
    row, _ = ev.score_method(labels.drop(columns="p_fp"), truth, [1, 2])
    assert row["purity"] == pytest.approx(1 / 3) and row["completeness"] == pytest.approx(1 / 2)
    assert math.isnan(row["p_star"]) and math.isnan(row["ece"])
    assert math.isnan(row["sum_n_fp"]) and row["realised_fn"] == 1


def test_paper_old_config():
    mod = regimes
    old = mod.regime_config("paper_old")
    new = mod.regime_config("paper")
    for k, v in mod.OLD_SETTINGS.items():
        assert old["simulate"][k] == v
    assert {k: v for k, v in old["simulate"].items() if k not in mod.OLD_SETTINGS} == {
        k: v for k, v in new["simulate"].items() if k not in mod.OLD_SETTINGS
    }


def test_truth_gold_marks_every_counted_object_and_the_empty_subjects():
    """--gold-source truth: the counted objects of the gold subjects as marks; a gold
    subject without one is an examined, empty subject; other subjects' objects stay out."""
    mod = regimes
    truth = pd.DataFrame(
        {"subject_id": [1, 1, 3, 9], "x": [10.0, 30.0, 5.0, 1.0], "y": [20.0, 40.0, 6.0, 2.0]}
    )
    gold = mod.truth_gold(truth, np.array([1, 2, 3]))
    assert gold.kind == "marks" and gold.geometry == "point"
    assert gold.subjects.tolist() == [1, 2, 3]
    assert gold.counts.tolist() == [2, 0, 1]
    assert sorted(map(tuple, gold.marks[["subject_id", "x", "y"]].to_numpy().tolist())) == [
        (1, 10.0, 20.0),
        (1, 30.0, 40.0),
        (3, 5.0, 6.0),
    ]


@pytest.mark.slow  # ~4 s with numba's cache warm, ~30 s cold
def test_benchmark_smoke(tmp_path, monkeypatch, _benchmarks_md):
    """The benchmark's main on a tiny universe: one regime, every method, the three tables,
    and its section of the docs (here the suite's own file, tests/conftest.py)."""
    mod = regimes
    out = tmp_path / "out"
    argv = ["--subjects", "40", "--out", str(out), "--regimes", "paper", "--gold-draws", "2"]
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # docs_table, as run as a script
    assert mod.main(argv) == 0
    section = _benchmarks_md.read_text().split("<!-- begin regimes -->")[1]
    assert "benchmarks/regimes.py --subjects 40" in section.split("\n\n")[2]
    # a row per method, per truth of the acceptance checks, per truth of the draws, the time
    assert section.count("| paper | ") == len(mod.METHODS) + len(mod.TRUTHS) + 2 + 1
    for truth_file in ("regimes.csv", "regimes_any_object.csv", "regimes_experts.csv"):
        t = pd.read_csv(out / truth_file)
        assert t.columns.tolist() == mod.COLUMNS
        assert t["method"].tolist() == list(mod.METHODS)
        assert (t["regime"] == "paper").all()
        base = t["method"].isin(["single_linkage", "dbscan", "meanshift"])
        assert t.loc[base, "ece"].isna().all() and t.loc[~base, "ece"].notna().all()
        assert t["labels"].gt(0).all()
    acc = pd.read_csv(out / "regimes_acceptance.csv")
    assert len(acc) == len(mod.TRUTHS) * len(mod.SCORED_MODELS)
    assert set(acc["method"]) == set(mod.SCORED_MODELS) and set(acc["truth"]) == set(mod.TRUTHS)
    # scored on the subjects the experts did not mark (20 % are gold)
    assert (t["gold_subjects"] == 8).all()
    assert (out / "regimes.png").stat().st_size > 0
    assert (out / "regimes_any_object.png").stat().st_size > 0
    assert not (out / "work").exists()
    # draw 0 of the gold draws is the main gold standard: the same scores as the tables
    draws = pd.read_csv(out / "regimes_gold_draws.csv")
    assert sorted(draws["draw"].unique()) == [0, 1, 2]
    for truth_file, truth in (("regimes.csv", "clumps"), ("regimes_experts.csv", "experts")):
        main = pd.read_csv(out / truth_file).set_index("method")
        d0 = draws[(draws["draw"] == 0) & (draws["truth"] == truth)].set_index("method")
        for method in ("generative", "single_linkage", "dbscan"):
            for col in ("purity_05", "completeness_05", "count_mae"):
                assert d0.loc[method, col] == pytest.approx(main.loc[method, col], nan_ok=True)
        assert d0.loc["generative", "ece"] == pytest.approx(main.loc["generative", "ece"])
        acc = pd.read_csv(out / "regimes_acceptance.csv").set_index(["truth", "method"])
        margin = acc.loc[(truth, "generative"), "curve_margin"]
        assert d0.loc["generative", "curve_margin"] == pytest.approx(margin)
    summary = pd.read_csv(out / "regimes_gold_draws_summary.csv")
    assert set(summary["truth"]) == {"clumps", "experts"} and (summary["draws"] == 3).all()


def test_gold_draws_summary_by_hand():
    """Three draws, hand-checked: the median and share of ECE <= 0.05, and each check
    against the better of the two baselines on the same draw."""
    mod = regimes
    rows = []
    # (ece, purity_05, completeness_05, count_mae) of the model; baselines' P, C, MAE
    model = [(0.04, 0.80, 0.90, 0.20), (0.06, 0.70, 0.95, 0.40), (0.05, 0.90, 0.80, 0.10)]
    sl = [(0.75, 0.91, 0.30), (0.60, 0.94, 0.35), (0.85, 0.82, 0.15)]
    db = [(0.79, 0.85, 0.25), (0.72, 0.90, 0.50), (0.80, 0.90, 0.12)]
    for r in range(3):
        e, p, c, m = model[r]
        rows.append({"regime": "x", "truth": "clumps", "draw": r, "method": "generative",
                     "ece": e, "ece_matched": e, "purity_05": p, "completeness_05": c,
                     "count_mae": m, "curve_margin": [0.02, -0.005, -0.03][r]})  # fmt: skip
        for name, t in (("single_linkage", sl[r]), ("dbscan", db[r])):
            rows.append({"regime": "x", "truth": "clumps", "draw": r, "method": name,
                         "ece": np.nan, "ece_matched": np.nan, "purity_05": t[0],
                         "completeness_05": t[1], "count_mae": t[2],
                         "curve_margin": np.nan})  # fmt: skip
    s = mod.summarise_draws(pd.DataFrame(rows)).iloc[0]
    assert s["draws"] == 3 and s["ece_main_draw"] == 0.04
    assert s["ece_median"] == pytest.approx(0.05)
    assert s["share_ece_le_005"] == pytest.approx(2 / 3)
    # draw 0: P 0.80 >= 0.79 - 0.01, C 0.90 >= 0.91 - 0.01: pass; draw 1: P 0.70 < 0.72 - 0.01;
    # draw 2: C 0.80 < 0.90 - 0.01
    assert s["share_purity_completeness_05"] == pytest.approx(1 / 3)
    # MAE: 0.20 <= 0.25 yes; 0.40 > 0.35 no; 0.10 <= 0.12 yes
    assert s["share_count_mae"] == pytest.approx(2 / 3)
    assert s["count_mae_best_baseline_median"] == pytest.approx(0.25)
    assert s["share_curve"] == pytest.approx(2 / 3) and s["curve_margin_min"] == -0.03


@pytest.mark.slow
def test_gold_size_smoke(tmp_path, _benchmarks_md):
    """benchmarks/gold_size.py on a tiny counting universe: a row per size and the no-gold row,
    and its section of the docs: a column per size."""
    mod = gold_size
    out = tmp_path / "gs"
    args = ["--subjects", "60", "--out", str(out), "--regimes", "counting", "--sizes", "12", "24",
            "--repeats", "1"]  # fmt: skip
    assert mod.main(args) == 0
    t = pd.read_csv(out / "gold_size.csv")
    assert t["gold_subjects"].tolist() == [0, 12, 24]
    assert t["ece"].between(0, 1).all() and t["count_mae"].ge(0).all()
    assert (out / "gold_size.png").stat().st_size > 0
    section = _benchmarks_md.read_text().split("<!-- begin gold-size -->")[1]
    assert "| regime | no gold | 12 gold | 24 gold |" in section
