"""benchmarks/bench_scale.py and benchmarks/_replicate.py: the Snakemake log read by hand
(known start and end times), replicated projects with k times everything (the benchmark on a real run's log and
project: tests/test_e2e.py)."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import pandas as pd
import pytest

from benchmarks import _replicate, bench_dag_scale, bench_scale
from clumpscout.data.zooniverse import extract_clicks
from clumpscout.simulation.universe import simulate_universe


def _stamp(seconds: int) -> str:
    t = datetime(2026, 11, 27, 9, 0, 0).timestamp() + seconds
    return datetime.fromtimestamp(t).strftime("[%a %b %d %H:%M:%S %Y]")


def _job(t, rule, jobid, inputs, outputs, wildcards=""):
    lines = [_stamp(t), f"localrule {rule}:"]
    if inputs:
        lines.append(f"    input: {', '.join(inputs)}")
    lines.append(f"    output: {', '.join(outputs)}")
    lines.append(f"    jobid: {jobid}")
    if wildcards:
        lines.append(f"    wildcards: {wildcards}")
    lines.append("    resources: tmpdir=/tmp")
    return lines


def _done(t, rule, jobid):
    return [_stamp(t), f"Finished jobid: {jobid} (Rule: {rule})", "1 of 6 steps (17%) done"]


# A DAG with known times (seconds after 09:00:00): simulate 0-10, extract 10-40 and
# extract_experts 10-15 side by side, boxes 40-45, subsample n3 45-47 and n20 45-50,
# aggregate n3 47-107 and n20 50-80.
LOG = "\n".join(
    ["Building DAG of jobs...", "Execute 1 jobs..."]
    + _job(0, "simulate", 3, [], ["u/c.csv", "u/s.csv"])
    + _done(10, "simulate", 3)
    + _job(10, "extract", 2, ["u/c.csv", "u/s.csv"], ["clicks.parquet"])
    + _job(10, "extract_experts", 7, ["u/s.csv"], ["expert.parquet"])
    + _done(15, "extract_experts", 7)
    + _done(40, "extract", 2)
    + _job(40, "boxes", 1, ["clicks.parquet"], ["boxes.parquet"])
    + _done(45, "boxes", 1)
    + _job(45, "subsample", 4, ["boxes.parquet"], ["n3.parquet"], "n=3")
    + _job(45, "subsample", 5, ["boxes.parquet"], ["n20.parquet"], "n=20")
    + _done(47, "subsample", 4)
    + _job(47, "aggregate", 8, ["n3.parquet", "expert.parquet"], ["a3"], "model=paper, n=3")
    + _done(50, "subsample", 5)
    + _job(50, "aggregate", 9, ["n20.parquet"], ["a20"], "model=paper, n=20")
    + _done(80, "aggregate", 9)
    + _done(107, "aggregate", 8)
    + ["Complete log(s): x"]
)


def test_the_log_gives_each_job_its_times_and_the_dag_its_critical_path():
    mod = bench_scale
    jobs = mod.parse_log(LOG)
    secs = {j.name: j.seconds for j in jobs}
    assert secs == {
        "simulate": 10, "extract": 30, "extract_experts": 5, "boxes": 5,
        "subsample[n=3]": 2, "subsample[n=20]": 5,
        "aggregate[model=paper, n=3]": 60, "aggregate[model=paper, n=20]": 30,
    }  # fmt: skip
    s = mod.dag_summary(jobs)
    assert s["wall_s"] == 107
    assert s["serial_prefix_s"] == 47  # the first subsample job ends at 47 s
    assert s["prefix_job_s"] == {"simulate": 10, "extract": 30, "boxes": 5, "subsample": 5}
    assert s["rule_seconds"] == 147
    # simulate 10 + extract 30 + boxes 5 + subsample n3 2 + aggregate n3 60
    assert s["critical_path_s"] == 107
    assert s["critical_path"] == ["simulate", "extract", "boxes", "subsample[n=3]",
                                  "aggregate[model=paper, n=3]"]  # fmt: skip
    assert s["ideal_speedup"] == pytest.approx(147 / 107)
    assert s["longest_job"] == "aggregate[model=paper, n=3]" and s["longest_job_s"] == 60
    rules = {r["rule"]: r for r in mod.per_rule(jobs, [{"job": "aggregate_paper_n3", "max_rss_mb": 700.0},
                                                       {"job": "aggregate_paper_n20", "max_rss_mb": 900.0}])}  # fmt: skip
    assert rules["aggregate"]["jobs"] == 2 and rules["aggregate"]["s_sum"] == 90
    assert rules["aggregate"]["max_rss_mb"] == 900.0 and "max_rss_mb" not in rules["boxes"]


def test_k_copies_of_a_project_are_k_times_the_project(tmp_path):
    """Three copies of an export extract to three times every count, with three times the
    subjects, volunteers and classifications (distinct ids); the box table and the gold
    standard likewise."""
    rep = _replicate
    u = tmp_path / "u"
    simulate_universe({"n_subjects": 60, "n_expert_subjects": 10}, 5, u)
    cls, subj = rep.replicate_export(u / "classifications.csv", u / "subjects_export.csv", 3,
                                     tmp_path / "k3")  # fmt: skip
    one, r1 = extract_clicks(u / "classifications.csv", u / "subjects_export.csv")
    three, r3 = extract_clicks(cls, subj)
    assert len(three) == 3 * len(one)
    for col in ("subject_id", "volunteer", "classification_id", "user_id"):
        assert three[col].nunique() == 3 * one[col].nunique(), col
    for key in ("classifications_kept", "clicks_kept", "subjects", "volunteers"):
        assert r3[key] == 3 * r1[key], key
    # copy 2 of a click: the same mark under the copy's ids
    sid = one["subject_id"].iloc[0]
    a = one[one["subject_id"] == sid].sort_values(["x", "y"])
    b = three[three["subject_id"] == sid + 2 * rep.SUBJECT_STEP].sort_values(["x", "y"])
    np.testing.assert_array_equal(a["x"].to_numpy(), b["x"].to_numpy())
    assert (b["volunteer"] == a["volunteer"].to_numpy() + "-copy2").all()
    assert (b["classification_id"].to_numpy() == a["classification_id"].to_numpy()
            + 2 * rep.CLASSIFICATION_STEP).all()  # fmt: skip
    subjects = pd.read_csv(subj)
    assert len(subjects) == 3 * 60 and subjects["subject_id"].is_unique
    assert subjects["locations"].str.contains(str(sid + rep.SUBJECT_STEP)).sum() == 1
    boxes = tmp_path / "clicks3.parquet"
    one.to_parquet(tmp_path / "clicks.parquet")
    rep.replicate_boxes(tmp_path / "clicks.parquet", 3, boxes)
    got = pd.read_parquet(boxes)
    assert len(got) == 3 * len(one) and got["volunteer"].nunique() == 3 * one["volunteer"].nunique()
    pd.DataFrame({"subject_id": [sid], "x": [1.0], "y": [2.0]}).to_csv(
        tmp_path / "g.csv", index=False
    )
    gold = pd.read_csv(rep.replicate_gold(tmp_path / "g.csv", 3, tmp_path / "g3.csv"))
    assert gold["subject_id"].tolist() == [sid + j * rep.SUBJECT_STEP for j in range(3)]


def test_an_aggregation_log_gives_the_jobs_split(tmp_path):
    """bench_dag_scale reads a job's phases from its log (CPU seconds; preparing without the
    reading it includes; writing summed over the files) and its exact resources line."""
    mod = bench_dag_scale
    log = tmp_path / "n3.log"
    log.write_text(
        "09:00:01 INFO clumpscout: start-up done in 3.10 s (CPU 1.50 s)\n"
        "09:00:01 INFO clumpscout: preparing 10 rows ...\n"
        "09:00:02 INFO clumpscout.model.prepare: reading 10 rows done in 0.90 s (CPU 0.20 s)\n"
        "09:00:02 INFO clumpscout: preparing 10 rows done in 1.00 s (CPU 0.50 s)\n"
        "09:00:09 INFO clumpscout: cycles done in 7.00 s (CPU 4.00 s)\n"
        "09:00:10 INFO clumpscout.model.aggregator: calibration (marks): 5 labels, p_fp < 0.5 "
        "on 3, done in 1.20 s (CPU 0.70 s)\n"
        "09:00:10 INFO clumpscout: writing labels.parquet done in 0.20 s (CPU 0.10 s)\n"
        "09:00:11 INFO clumpscout: writing assignments.parquet done in 0.90 s (CPU 0.60 s)\n"
        "09:00:11 INFO clumpscout: job resources: wall 12.00 s, CPU 8.25 s, peak RSS 700 MB; "
        "children CPU 0.50 s, peak RSS 900 MB\n"
    )
    split = mod.aggregation_split(log)
    assert split["start-up"] == pytest.approx(1.5) and split["reading"] == pytest.approx(0.2)
    assert split["preparing"] == pytest.approx(0.3) and split["cycles"] == pytest.approx(4.0)
    assert split["calibration"] == pytest.approx(0.7)
    assert split["writing"] == pytest.approx(0.7)
    assert split["writing assignments.parquet"] == pytest.approx(0.6)
    res = mod.job_resources(log)
    assert res == {"cpu_s": pytest.approx(8.75), "max_rss_mb": 900.0}
    assert mod.job_resources(tmp_path / "absent.log") is None


def test_a_job_that_fits_two_models_gives_one_row_with_their_phases_summed(tmp_path):
    """One aggregate job per n fits both models in one log: the split sums each phase over
    the fits (start-up once; a fit's own "aggregation by ..." line is no phase), and the
    table has one row per job (aggregate n=3, n=20, then replay_labels)."""
    mod = bench_dag_scale

    def fit(model, read, prep, cycles, labels, assignments):
        return (
            f"09:00:01 INFO clumpscout: aggregation by the {model} model (1 of 2) ...\n"
            f"09:00:02 INFO clumpscout.model.prepare: reading 10 rows done in 0.90 s (CPU {read:.2f} s)\n"
            f"09:00:02 INFO clumpscout: preparing 10 rows done in 1.00 s (CPU {prep:.2f} s)\n"
            f"09:00:09 INFO clumpscout: cycles done in 7.00 s (CPU {cycles:.2f} s)\n"
            f"09:00:10 INFO clumpscout: writing labels.parquet done in 0.20 s (CPU {labels:.2f} s)\n"
            f"09:00:11 INFO clumpscout: writing assignments.parquet done in 0.9 s (CPU {assignments:.2f} s)\n"
            f"09:00:11 INFO clumpscout: aggregation by the {model} model (1 of 2) done in 10.00 s (CPU 9.00 s)\n"
        )  # fmt: skip

    start = "09:00:01 INFO clumpscout: start-up done in 3.10 s (CPU 1.50 s)\n"
    calibration = (
        "09:00:10 INFO clumpscout.model.aggregator: calibration (marks): 5 labels, p_fp < 0.5 "
        "on 3, done in 1.20 s (CPU 0.70 s)\n"
    )
    n3 = tmp_path / "n3.log"
    n3.write_text(
        start
        + fit("generative", 0.20, 0.50, 4.00, 0.10, 0.60)
        + calibration
        + fit("paper", 0.05, 0.25, 1.00, 0.10, 0.40)
    )
    split = mod.aggregation_split(n3)
    assert split["start-up"] == pytest.approx(1.5)
    assert split["reading"] == pytest.approx(0.25)
    assert split["preparing"] == pytest.approx(0.75 - 0.25)
    assert split["cycles"] == pytest.approx(5.0) and split["calibration"] == pytest.approx(0.7)
    assert split["writing assignments.parquet"] == pytest.approx(1.0)
    assert split["writing"] == pytest.approx(1.2)
    n20 = tmp_path / "n20.log"
    n20.write_text("09:00:01 INFO clumpscout: start-up done in 1.00 s (CPU 2.00 s)\n")
    full = tmp_path / "replay_labels.log"
    full.write_text("09:00:01 INFO clumpscout: start-up done in 1.00 s (CPU 1.00 s)\n")
    jobs = [
        {"rule": "replay_labels", "wildcards": "", "s": 5.0, "cpu_s": 4.0, "log": full},
        {"rule": "aggregate", "wildcards": "n=20", "s": 9.0, "cpu_s": 8.0, "log": n20},
        {"rule": "aggregate", "wildcards": "n=3", "s": 11.0, "cpu_s": 10.0, "log": n3},
        {"rule": "boxes", "wildcards": "", "s": 1.0, "cpu_s": 1.0, "log": n3},
    ]
    table = mod.split_table(jobs)
    assert table["job"].tolist() == ["aggregate n=3", "aggregate n=20", "replay_labels"]
    row = table.iloc[0]
    # other: 10 - (1.5 + 0.25 + 0.5 + 5 + 0.7 + 1.2); start-up + IO: 1.5 + 0.25 + 1.2 of 10
    assert row["other"] == pytest.approx(0.85)
    assert row["start-up+IO %"] == pytest.approx(29.5)
    assert table.iloc[1]["start-up+IO %"] == pytest.approx(25.0)


def test_each_model_fit_of_a_job_gets_its_own_seconds(tmp_path):
    """The per-fit table reads each model's "aggregation by the <model> model ... done" line
    of a job's log: the wall and CPU seconds of that fit, one column pair per model."""
    log = tmp_path / "n3.log"
    log.write_text(
        "09:00:01 INFO clumpscout: start-up done in 1.00 s (CPU 1.00 s)\n"
        "09:00:20 INFO clumpscout: aggregation by the generative model (1 of 2) done in "
        "19.50 s (CPU 18.25 s)\n"
        "09:00:31 INFO clumpscout: aggregation by the paper model (2 of 2) done in 11.00 s "
        "(CPU 10.50 s)\n"
    )
    jobs = [
        {"rule": "aggregate", "wildcards": "n=3", "s": 32.0, "cpu_s": 30.0, "log": log},
        {"rule": "replay_labels", "wildcards": "", "s": 5.0, "cpu_s": 4.0, "log": log},
    ]
    t = bench_dag_scale.fit_table(jobs)
    assert t["n"].tolist() == [3]
    row = t.iloc[0]
    assert (row["generative wall_s"], row["generative cpu_s"]) == (19.5, 18.25)
    assert (row["paper wall_s"], row["paper cpu_s"]) == (11.0, 10.5)
