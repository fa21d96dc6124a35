"""Headline numbers on a toy whose numbers are worked out by hand,
and the report wiring (item 6): `snakemake --report` on a tiny DAG of the figure rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from clumpscout.errors import InputError
from clumpscout.report import headline as H

REPO = Path(__file__).resolve().parents[1]


def toy_clicks() -> pd.DataFrame:
    """4 classifications by 3 volunteers of 3 subjects; 6 clicks; c2 marked nothing."""
    rows = [
        (1, 11, "v1", 10.0),
        (1, 11, "v1", 20.0),
        (2, 11, "v2", np.nan),
        (3, 12, "v1", 30.0),
        (4, 13, "v3", 40.0),
        (4, 13, "v3", 50.0),
        (4, 13, "v3", 60.0),
    ]
    df = pd.DataFrame(rows, columns=["classification_id", "subject_id", "volunteer", "x"])
    df["y"] = df["x"]
    return df


def toy_labels() -> pd.DataFrame:
    """n = 3: p_fp 0.1, 0.3, 0.9 (median 0.3); n = 5: 0.01, 0.02 on 2 subjects."""
    return pd.DataFrame(
        {
            "n": [3, 3, 3, 5, 5],
            "subject_id": [11, 11, 12, 11, 13],
            "p_fp": [0.1, 0.3, 0.9, 0.01, 0.02],
            "p_sigma": [0.2, 0.4, 0.6, 0.001, 0.003],
        }
    )


def toy_subjects() -> pd.DataFrame:
    status3 = ["retired", "stale", "unretired", "retired_empty"]
    status5 = ["retired", "retired", "retired", "retired_empty"]
    return pd.DataFrame(
        {
            "n": [3] * 4 + [5] * 4,
            "subject_id": [11, 12, 13, 14] * 2,
            "status": status3 + status5,
        }
    )


def toy_summary(ece: bool) -> pd.DataFrame:
    rows = []
    for n in (3, 5):
        for subset in ("all", "normal"):
            row = {
                "n": n,
                "subset": subset,
                "opt_threshold": 0.5,
                "opt_completeness": 0.6 + 0.01 * n,
                "opt_purity": 0.7 if subset == "all" else 0.4,
                "max_completeness": 0.9,
                "max_purity": 0.95,
                "completeness_p1": 0.9,
                "purity_p1": 0.35 if subset == "normal" else 0.5,
            }
            if ece:
                row["ece"] = 0.02 * n
            rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture()
def table() -> pd.DataFrame:
    return H.headline_table(
        clicks=toy_clicks(),
        labels=toy_labels(),
        subjects=toy_subjects(),
        n_ref=5,
        volunteers=pd.DataFrame({"n_subjects": [1, 2, 3, 30]}),
        experts_summary=toy_summary(False),
        truth_summary=toy_summary(True),
        truth=pd.DataFrame({"subject_id": [11, 11, 12]}),
        count_difference=pd.DataFrame(
            {"subject_id": [1, 2, 3, 4], "diff_meanshift": [1, 0, 2, -1]}
        ),
    )


def value(t: pd.DataFrame, quantity: str, n=None, subset=None, section=None) -> float:
    sel = t["quantity"] == quantity
    sel &= t["n"].isna() if n is None else t["n"].eq(n).fillna(False)
    sel &= t["subset"].isna() if subset is None else t["subset"].eq(subset)
    if section:
        sel &= t["section"] == section
    assert sel.sum() == 1, (quantity, n, subset, section, sel.sum())
    return float(t.loc[sel, "value"].iloc[0])


def test_dataset_counts_by_hand(table):
    assert value(table, "subjects") == 3
    assert value(table, "annotations") == 4  # the empty classification counts
    assert value(table, "clicks") == 6  # ... but it is not a click
    assert value(table, "volunteers") == 3


def test_label_counts_at_reference_n(table):
    assert value(table, "clumps", 5) == 2
    assert value(table, "galaxies_with_clumps", 5) == 2
    assert value(table, "median_subjects_per_volunteer", 5) == 2.5
    assert value(table, "fraction_volunteers_below_10_subjects", 5) == 0.75
    assert value(table, "true_clumps") == 3 and value(table, "galaxies_with_true_clumps") == 2


def test_per_n_medians_and_status_fractions(table):
    assert value(table, "median_p_fp", 3) == pytest.approx(0.3)
    assert value(table, "median_p_sigma", 3) == pytest.approx(0.4)
    assert value(table, "median_p_fp", 5) == pytest.approx(0.015)
    assert value(table, "median_p_sigma", 5) == pytest.approx(0.002)
    for status, frac in (("retired", 0.25), ("stale", 0.25), ("unretired", 0.25)):
        assert value(table, f"fraction_{status}", 3) == pytest.approx(frac)
    assert value(table, "fraction_retired_empty", 3) == pytest.approx(0.25)
    assert value(table, "fraction_retired_any", 3) == pytest.approx(0.5)
    assert value(table, "fraction_retired_any", 5) == pytest.approx(1.0)
    assert value(table, "fraction_stale", 5) == 0.0


def test_expert_and_truth_rows(table):
    assert value(table, "opt_completeness", 5, "all", "experts") == pytest.approx(0.65)
    assert value(table, "opt_purity", 3, "normal", "experts") == pytest.approx(0.4)
    assert value(table, "opt_purity", 3, "normal", "truth") == pytest.approx(0.4)
    assert value(table, "ece", 5, "all", "truth") == pytest.approx(0.1)
    assert not ((table["section"] == "experts") & (table["quantity"] == "ece")).any()


def test_baseline_fractions(table):
    assert value(table, "fraction_ours_more") == 0.5
    assert value(table, "fraction_equal") == 0.25
    assert value(table, "fraction_meanshift_more") == 0.25


def test_paper_values_attached_where_the_paper_quotes_them(table):
    paper = table.set_index(["section", "quantity"])["paper"]
    assert paper.loc[("dataset", "subjects")] == "85286"
    assert paper.loc[("dataset", "clicks")] == ""  # clump clicks only: not the paper's count
    assert paper.loc[("labels", "clumps")] == "128100"
    row = table[(table["quantity"] == "purity_p1") & (table["subset"] == "normal")]
    # only the n = 20 row would carry the paper's ≈0.35; none here (n = 3, 5), and never truth
    assert (row["paper"] == "").all()
    stale = table[table["quantity"] == "fraction_stale"]
    assert (stale["paper"] != "").all()
    assert (table.loc[table["section"] == "truth", "paper"] == "").all()
    assert list(table.columns) == H.COLUMNS


def test_trend_checks_by_hand(table):
    def verdict(q):
        t = table[(table["section"] == "trends") & (table["quantity"] == q)]
        assert len(t) == 1, q
        return t["value"].iloc[0]

    assert verdict("median_p_fp_falls_with_n") == "agrees"  # 0.3 -> 0.015
    assert verdict("median_p_sigma_falls_with_n") == "agrees"  # 0.4 -> 0.002
    assert verdict("p_fp_bimodal") == "disagrees"  # n = 5: 0.01, 0.02: nothing above 0.8
    assert verdict("retired_above_90pc") == "disagrees"  # 50 % at n = 3
    assert verdict("stale_7_to_9pc") == "disagrees"  # 25 %, 0 %
    assert verdict("unretired_below_1pc") == "disagrees"  # 25 % at n = 3
    assert verdict("optimal_completeness_rises_with_n") == "agrees"  # 0.63 -> 0.65
    assert verdict("optimal_purity_falls_with_n") == "cannot check"  # 0.7 at both n: no trend
    assert verdict("normal_more_complete_less_pure") == "disagrees"  # C 0.9 = 0.9
    assert verdict("ours_more_than_meanshift") == "disagrees"  # exactly half is not a majority
    trends = table[table["section"] == "trends"]
    assert (trends["paper"] != "").all() and (trends["note"] != "").all()


def test_trends_agree_when_the_numbers_follow_the_paper():
    labels = pd.DataFrame(
        {
            "n": [3] * 3 + [20] * 10,
            "subject_id": 1,
            "p_fp": [0.05, 0.1, 0.2] + [1e-5] * 8 + [0.9, 0.95],
            "p_sigma": [0.05, 0.06, 0.04] + [1e-4] * 10,
        }  # fmt: skip
    )
    status = ["retired"] * 92 + ["stale"] * 8
    subjects = pd.DataFrame({"n": [3] * 100 + [20] * 100, "subject_id": list(range(100)) * 2,
                             "status": status * 2})  # fmt: skip
    summ = pd.DataFrame(
        {
            "n": [3, 3, 20, 20],
            "subset": ["all", "normal"] * 2,
            "opt_completeness": [0.6, 0.7, 0.8, 0.9],
            "opt_purity": [0.8, 0.6, 0.6, 0.4],
            "completeness_p1": [0.7, 0.8, 0.9, 0.97],
            "purity_p1": [0.6, 0.5, 0.5, 0.35],
        }  # fmt: skip
    )
    t = H.headline_table(
        clicks=toy_clicks(), labels=labels, subjects=subjects, n_ref=20, experts_summary=summ,
        count_difference=pd.DataFrame({"subject_id": [1, 2, 3], "diff_meanshift": [1, 2, -1]}),
    )  # fmt: skip
    trends = t[t["section"] == "trends"].set_index("quantity")["value"]
    assert (trends == "agrees").all(), trends[trends != "agrees"]
    assert len(trends) == 10


def risk_tables(n_fp_20: int, n_fn: dict, clumps: dict):
    """100 subjects at n = 7, 15, 20. ``n_fp_20`` subjects with N_fp = 1.5 at n = 20;
    ``n_fn[n]`` subjects with N_fn = 2 at n; ``clumps[n]`` labels with p_fp 0.1 spread over
    the subjects, plus 10 labels with p_fp 0.9 (above the 0.85 cut) at every n. Subject 99
    has undefined N_fp / N_fn (NaN: not above 1)."""
    subj, lab = [], []
    for n in (7, 15, 20):
        n_fp = np.where(np.arange(100) < (n_fp_20 if n == 20 else 0), 1.5, 0.2)
        n_fn_ = np.where(np.arange(100) < n_fn[n], 2.0, 0.0)
        n_fp[99] = n_fn_[99] = np.nan
        subj.append(pd.DataFrame({"n": n, "subject_id": range(100), "status": "retired",
                                  "n_fp": n_fp, "n_fn": n_fn_}))  # fmt: skip
        k = clumps.get(n, 0)
        lab.append(pd.DataFrame({"n": n, "subject_id": np.arange(k) % 100, "p_fp": 0.1,
                                 "p_sigma": 0.01}))  # fmt: skip
        lab.append(pd.DataFrame({"n": n, "subject_id": range(10), "p_fp": 0.9, "p_sigma": 0.01}))
    return pd.concat(lab, ignore_index=True), pd.concat(subj, ignore_index=True)


def test_risk_trends_agree_with_the_paper_by_hand():
    # N_fp > 1: 8 of 100 at n = 20; N_fn > 1: 0, 1, 2 % (rising); clumps with p_fp < 0.85
    # per galaxy 0.5 (n = 7) -> 1.0 (n = 20): +0.5 (the ten p_fp = 0.9 labels do not count)
    labels, subjects = risk_tables(8, {7: 0, 15: 1, 20: 2}, {7: 50, 15: 80, 20: 100})
    t = H.headline_table(clicks=toy_clicks(), labels=labels, subjects=subjects, n_ref=20)
    trends = t[t["section"] == "trends"].set_index("quantity")
    for q in ("n_fp_above_1_8_to_10pc", "n_fn_above_1_rises_to_2pc",
              "clumps_per_galaxy_gain_7_to_20"):  # fmt: skip
        assert trends.loc[q, "value"] == "agrees", (q, trends.loc[q, "note"])
        assert trends.loc[q, "paper"] != ""
    assert "8.0% (n=20)" in trends.loc["n_fp_above_1_8_to_10pc", "note"]
    assert "0.5 (n=7) → 1 (n=20): +0.5" in trends.loc["clumps_per_galaxy_gain_7_to_20", "note"]
    assert "0 (n=7) → 2 (n=20)" in trends.loc["n_fn_above_1_rises_to_2pc", "note"]


def test_risk_trends_disagree_with_the_paper_by_hand():
    # what the recalibrated universe gave: nothing above 1, N_fn falling, +0.01 per galaxy
    labels, subjects = risk_tables(0, {7: 3, 15: 1, 20: 0}, {7: 100, 15: 100, 20: 101})
    rows = {r["quantity"]: r for r in H.risk_trend_rows(labels, subjects)}
    assert rows["n_fp_above_1_8_to_10pc"]["value"] == "disagrees"
    assert rows["n_fn_above_1_rises_to_2pc"]["value"] == "disagrees"  # falls (and 0% at n = 20)
    assert rows["clumps_per_galaxy_gain_7_to_20"]["value"] == "disagrees"
    assert "+0.01" in rows["clumps_per_galaxy_gain_7_to_20"]["note"]
    # rising but only to 5%: still disagrees; 13% N_fp > 1 is outside 6-12%
    labels, subjects = risk_tables(13, {7: 0, 15: 2, 20: 5}, {7: 50, 20: 80})
    rows = {r["quantity"]: r for r in H.risk_trend_rows(labels, subjects)}
    assert rows["n_fn_above_1_rises_to_2pc"]["value"] == "disagrees"
    assert rows["n_fp_above_1_8_to_10pc"]["value"] == "disagrees"
    assert rows["clumps_per_galaxy_gain_7_to_20"]["value"] == "agrees"  # +0.3 is the edge


def test_risk_trends_left_out_without_their_inputs():
    labels, subjects = risk_tables(8, {7: 0, 15: 1, 20: 2}, {7: 50, 20: 100})
    no_risk = subjects.drop(columns=["n_fp", "n_fn"])
    assert [r["quantity"] for r in H.risk_trend_rows(labels, no_risk)] == [
        "clumps_per_galaxy_gain_7_to_20"
    ]
    only_20 = subjects[subjects["n"] == 20]
    rows = {r["quantity"]: r for r in H.risk_trend_rows(labels, only_20)}
    assert "clumps_per_galaxy_gain_7_to_20" not in rows  # needs n = 7 and 20
    assert rows["n_fn_above_1_rises_to_2pc"]["value"] == "cannot check"  # one n: no trend


def test_html_holds_the_numbers(table):
    page = H.to_html(table)
    assert page.startswith("<!DOCTYPE html>") and "85286" in page
    wide = H.per_n_wide(table)
    assert list(wide.index) == [3, 5]
    assert wide.loc[5, "experts opt_completeness (all)"] == pytest.approx(0.65)
    assert "truth ece (normal)" in wide.columns


def test_methods_side_by_side_by_hand():
    from test_figures import METHOD_NUMBERS, N_TRUE, method_tables

    _, summary = method_tables()
    experts = summary.assign(n_points=40)
    t = H.headline_table(
        clicks=toy_clicks(), labels=toy_labels(), subjects=toy_subjects(), n_ref=5,
        methods_truth=summary, methods_experts=experts,
    )  # fmt: skip
    for section in ("methods_truth", "methods_experts"):
        sec = t[t["section"] == section]
        assert (sec["paper"] == "").all() and (sec["n"] == 20).all()
        for m, (thr, c, p, c1, p1, n1, nopt) in METHOD_NUMBERS.items():
            got = sec[(sec["method"] == m) & (sec["subset"] == "all")].set_index("quantity")
            assert got.loc["opt_threshold", "value"] == thr
            assert got.loc["opt_completeness", "value"] == c
            assert got.loc["opt_purity", "value"] == p
            assert got.loc["completeness_p1", "value"] == c1
            assert got.loc["purity_p1", "value"] == p1
            assert got.loc["n_labels_p1", "value"] == n1
            assert got.loc["n_labels_opt", "value"] == nopt
        normal = sec[(sec["method"] == "dbscan") & (sec["subset"] == "normal")]
        assert normal.set_index("quantity").loc["opt_purity", "value"] == pytest.approx(0.7)
    ref = t[t["method"].isna() & t["section"].str.startswith("methods_")]
    assert ref.set_index(["section", "subset"]).loc[("methods_truth", "all"), "quantity"] == (
        "n_true_clumps"
    )
    assert value(t, "n_true_clumps", 20, "all") == N_TRUE
    assert value(t, "n_expert_clicks", 20, "all") == 40
    # the paper's sections are the paper model's
    assert set(t.loc[t["section"] == "per_n", "method"]) == {"paper"}
    wide = H.methods_wide(t)
    assert list(wide.index) == list(METHOD_NUMBERS)
    assert wide.loc["generative", "truth opt_purity"] == 0.9
    assert wide.loc["meanshift", "experts n_labels_p1"] == 90
    page = H.to_html(t)
    assert "side by side (n = 20)" in page and "single_linkage" in page


def test_missing_clicks_column_is_an_input_error():
    with pytest.raises(InputError, match="volunteer"):
        H.dataset_counts(toy_clicks().drop(columns="volunteer"))


def test_cli_on_a_results_folder(tmp_path):
    from test_figures import make_results

    from clumpscout.cli import main

    root = make_results(tmp_path / "results", images=False)
    toy_clicks().to_parquet(root / "clicks" / "clicks.parquet")
    out = tmp_path / "headline.csv"
    rc = main(["headline", "--results", str(root), "--n", "3", "20", "--out", str(out),
               "--html", str(tmp_path / "h.html")])  # fmt: skip
    assert rc == 0
    t = pd.read_csv(out)
    assert list(t.columns) == H.COLUMNS
    row = t[(t["quantity"] == "clumps") & (t["n"] == 20)]
    assert float(row["value"].iloc[0]) == 10  # the 10 clumps of test_figures' n = 20 labels
    assert (t["section"] == "truth").sum() > 0  # truth_summary.csv present
    assert set(t.loc[t["section"] == "methods_truth", "method"].dropna()) == {
        "generative",
        "paper",
        "single_linkage",
        "dbscan",
        "meanshift",
    }
    assert (tmp_path / "h.html").read_text().count("<tr>") > 10


# ------------------------------------------------------------------ report on a tiny DAG

TINY_SNAKEFILE = """
configfile: "config.yaml"

include: "{repo}/workflow/rules/common.smk"
include: "{repo}/workflow/rules/figures.smk"

rule all:
    input:
        "results/figures/clump_fpp_dist.png",
        "results/figures/retirement_reason_fraction.png",
        "results/headline.csv",
        "results/headline.html",
"""


@pytest.mark.slow
def test_snakemake_report_on_a_tiny_dag(tmp_path):
    """The figure and headline rules run through Snakemake on synthetic inputs, and
    `snakemake --report` embeds their figures, captions and the headline table."""
    from test_figures import make_results

    make_results(tmp_path / "results", images=False)
    toy_clicks().to_parquet(tmp_path / "results" / "clicks" / "clicks.parquet")
    (tmp_path / "results" / "clicks" / "clicks_report.json").write_text(
        '{"clicks_kept": 6, "dropped_clicks": {"other_task": 4}}'
    )
    (tmp_path / "results" / "universe").mkdir()
    pd.DataFrame({"subject_id": [1, 2], "x": [1.0, 2.0], "y": [1.0, 2.0]}).to_csv(
        tmp_path / "results" / "universe" / "truth_clumps.csv", index=False
    )
    cfg = (REPO / "config.yaml").read_text()
    cfg = cfg.replace(
        "n: [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20]", "n: [3, 20]"
    )
    cfg = cfg.replace("dpi: 150", "dpi: 20")
    assert "n: [3, 20]" in cfg
    (tmp_path / "config.yaml").write_text(cfg)
    snakefile = tmp_path / "Snakefile"
    snakefile.write_text(TINY_SNAKEFILE.format(repo=REPO))
    for name in ("src", "scripts"):  # code digests read them beside the Snakefile
        (tmp_path / name).symlink_to(REPO / name)
    base = [sys.executable, "-m", "snakemake", "-s", str(snakefile), "-d", str(tmp_path)]
    run = subprocess.run([*base, "--cores", "2", "-q"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "results/figures/clump_fpp_dist.pdf").exists()
    assert (tmp_path / "results/headline.csv").exists()
    rep = subprocess.run(
        [*base, "--report", str(tmp_path / "report.html")], capture_output=True, text=True
    )
    assert rep.returncode == 0, rep.stderr[-3000:]
    html = (tmp_path / "report.html").read_text()
    assert "clump_fpp_dist.png" in html and "retirement_reason_fraction.png" in html
    assert "headline.html" in html
    # a sentence of each caption and of the workflow description made it into the report
    for rst in ("clump_fpp_dist.rst", "retirement_reason_fraction.rst", "workflow.rst"):
        text = (REPO / "workflow/report" / rst).read_text()
        words = [w for w in text.split() if w.isalpha() and len(w) > 7][:3]
        assert all(w in html for w in words), (rst, words)
    # the report-time labels: our numbers (n = 20: 30 % of p_fp below 0.01) next to the paper's
    assert "30.0% < 0.01" in html and "5e-5" in html

    # a figure-only setting re-runs only the figures using it
    def planned(cfg_text: str) -> set[str]:
        (tmp_path / "config.yaml").write_text(cfg_text)
        dry = subprocess.run([*base, "-n", "-q", "rules"], capture_output=True, text=True)
        assert dry.returncode == 0, dry.stderr[-3000:]
        names = {"fig_clump_fpp_dist", "fig_retirement_reason_fraction", "headline"}
        return {w for w in dry.stdout.split() if w in names}

    assert planned(cfg) == set()  # nothing changed: nothing to do
    assert planned(cfg.replace("inset_max: 0.01", "inset_max: 0.02")) == {"fig_clump_fpp_dist"}
    assert planned(cfg.replace("dpi: 20", "dpi: 21")) == {
        "fig_clump_fpp_dist",
        "fig_retirement_reason_fraction",
    }


def test_clicks_all_tasks_counts_kept_and_every_dropped_click():
    # 7 kept clump clicks + 5 T0 (other task) + 2 non-finite = 14 clicks in the export
    report = {"clicks_kept": 7, "dropped_clicks": {"other_task": 5, "nonfinite_coordinates": 2}}
    assert H.export_click_total(report) == 14
    t = H.headline_table(
        clicks=toy_clicks(), labels=toy_labels(), subjects=toy_subjects(), n_ref=5,
        clicks_report=report,
    )  # fmt: skip
    row = t[(t["section"] == "dataset") & (t["quantity"] == "clicks_all_tasks")].iloc[0]
    assert row["value"] == 14 and row["paper"] == "3561454"
    with pytest.raises(InputError, match="clicks_kept"):
        H.export_click_total({"dropped_clicks": {}})


def test_trend_rows_are_words_in_the_csv(table, tmp_path):
    trends = table[table["section"] == "trends"]
    assert set(trends["value"]) <= {"agrees", "disagrees", "cannot check"}
    H.write_csv(table, tmp_path / "h.csv")
    back = pd.read_csv(tmp_path / "h.csv")
    assert set(back.loc[back["section"] == "trends", "value"]) == set(trends["value"])
    assert "<b>disagrees</b>" in H.to_html(table)


def test_generic_wording_has_objects_and_no_paper():
    t = H.headline_table(
        clicks=toy_clicks(),
        labels=toy_labels(),
        subjects=toy_subjects(),
        n_ref=5,
        truth=pd.DataFrame({"subject_id": [11, 11, 12]}),
        wording="generic",
    )
    q = set(t["quantity"])
    assert {"objects", "images_with_objects", "true_objects"} <= q
    assert not q & {"clumps", "galaxies_with_clumps", "true_clumps"}
    assert (t["paper"] == "").all()
    assert not (t["section"] == "trends").any()
    assert not t["note"].str.contains("clump|galax").any()
