"""End to end: the whole DAG on a tiny simulated universe.

One real run (module fixture) is shared by the tests here: outputs and report,
the click ledger, byte-identical reruns (determinism), partial reruns after
config / code changes (dry-run job lists), resume after a killed job, and the
SLURM executor run is in test_e2e_slurm.py (another file, so pytest-xdist runs it on
the other worker).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO

pytestmark = pytest.mark.slow

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
TABLE_SUFFIXES = {".parquet", ".csv", ".ecsv", ".json"}
COPY = ["Snakefile", "config.yaml", "workflow", "scripts", "src", "envs", "profiles", "resources"]


def tiny_config() -> dict:
    """60 subjects and two n: every n is aggregated by both models (2 aggregation jobs, each
    fits both models of its n)."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["simulate"].update(n_subjects=60, n_expert_subjects=20)
    cfg["subsample"]["n"] = [3, 20]
    return cfg


def make_project(dest: Path, cfg: dict) -> Path:
    """A self-contained copy of the workflow (so code edits don't touch the repo), whose jobs
    run the copy's own code. numba's cache files come along (``__pycache__`` without the
    bytecode): an entry is valid while its source file keeps its time stamp and size, which
    the copy keeps, so the copy does not compile the kernels again (an edited module is)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in COPY:
        src = REPO / name
        if not src.exists():
            continue
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("*.pyc", "*.egg-info"))
        else:
            shutil.copy2(src, dest / name)
    (dest / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dest


def snakemake(project: Path, *args: str, check: bool = True, timeout: int = 1200, env=None):
    r = subprocess.run(
        [*SNAKEMAKE, *args], cwd=project, capture_output=True, text=True, timeout=timeout, env=env
    )
    if check and r.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed:\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}"
        )
    return r


def _without_timings(obj):
    """A JSON report minus its run timings (keys named ``seconds``): the one thing two runs
    of the same config and seed may differ in."""
    if isinstance(obj, dict):
        return {k: _without_timings(v) for k, v in obj.items() if k != "seconds"}
    if isinstance(obj, list):
        return [_without_timings(v) for v in obj]
    return obj


def table_hashes(results: Path) -> dict[str, str]:
    """sha256 of every table (Parquet, CSV, ECSV: the raw bytes) and JSON report (without
    run timings) under ``results``, figures' sidecar JSON included; logs and benchmarks
    excluded, and numba_cache.json (what this run found in numba's cache and how long it
    compiled: the machine's state, not a result)."""
    out = {}
    for path in sorted(results.rglob("*")):
        if (
            not path.is_file()
            or path.suffix not in TABLE_SUFFIXES
            or "logs" in path.parts
            or "benchmarks" in path.parts
            or path.name == "numba_cache.json"
        ):
            continue
        data = path.read_bytes()
        if path.suffix == ".json":
            data = json.dumps(_without_timings(json.loads(data)), sort_keys=True).encode()
        out[str(path.relative_to(results))] = hashlib.sha256(data).hexdigest()
    return out


def planned_rules(project: Path, *extra: str) -> set[str]:
    r = snakemake(project, "-n", "--quiet", "rules", *extra)
    rules = set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in {"total", "job"}:
            rules.add(parts[0])
    return rules


@pytest.fixture(scope="module")
def run_a(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("run_a"), tiny_config())
    snakemake(project, "--cores", "2")
    return project


def test_dag_produces_every_stage(run_a):
    res = run_a / "results"
    for rel in [
        "boxes/boxes.parquet",
        "clicks/clicks_report.json",
        *(f"aggregate/{m}/n20/labels.parquet" for m in ("generative", "paper")),
        *(f"aggregate/{m}/n3/subjects.parquet" for m in ("generative", "paper")),
        "catalogue.ecsv",
        "compare/generative/truth_summary.csv",
        "compare/paper/experts_summary.csv",
        "baseline/dbscan_labels.parquet",
        "baseline/truth_summary.csv",
        "ledger/generative.csv",
        "ledger/paper.csv",
        "figures/method_comparison.png",
    ]:
        assert (res / rel).is_file(), rel
    # the ECSV is written once, where a user reads it: the catalogue, not every aggregation
    assert not list(res.glob("aggregate/*/*/clumps.ecsv"))
    assert sorted(p.name for p in (res / "replay/full").iterdir()) == [
        "labels.parquet",
        "report.json",
    ]
    pngs = list((res / "figures").rglob("*.png"))
    assert len(pngs) >= 10, pngs
    import pandas as pd

    methods = pd.read_csv(res / "baseline/truth_summary.csv")
    assert set(methods["method"]) == {
        "generative",
        "paper",
        "single_linkage",
        "dbscan",
        "meanshift",
    }
    headline = pd.read_csv(res / "headline.csv")
    assert (headline["section"] == "methods_truth").sum() > 0


def test_outputs_have_the_documented_columns(run_a):
    """docs/tables.md against the tables of a real run: every documented column, in the
    documented order, and no other. The run has a gold standard (the simulated experts) and
    points only, no per-tool aggregation; each exception below is a column the reference
    itself makes conditional."""
    import pandas as pd
    import pyarrow.parquet as pq
    from astropy.table import Table
    from doc_tables import documented_columns

    res = run_a / "results"

    def parquet(rel: str) -> list[str]:
        return pq.read_schema(res / rel).names

    def csv(rel: str) -> list[str]:
        return list(pd.read_csv(res / rel, nrows=1).columns)

    def ecsv(rel: str) -> list[str]:
        return Table.read(res / rel, format="ascii.ecsv").colnames

    def expected(anchor: str, absent=(), which: int = 0) -> list[str]:
        return [c for c in documented_columns(anchor, which) if c not in set(absent)]

    not_paper_labels = ["p_empty", "p_gold_fold", "gold_real"]  # generative model, gold
    paper_subjects = ["n_fn_model", "count_low", "count_high", "gold", "gold_count"]
    boxes = expected("boxes", absent=["shape"])  # only when the clicks hold drawn shapes
    # the workflow's assignments keep these of Z~_n's columns, as docs/tables.md says
    kept = ["classification_id", "subject_id", "volunteer", "x1", "y1", "x2", "y2"]
    kept += ["image_width", "image_height", "x", "y"]  # (and shape: not in these boxes)
    tables_md = " ".join((REPO / "docs" / "tables.md").read_text().split())
    assert f"keeps {', '.join(kept[:-1])} and {kept[-1]} of Z̃_n's rows" in tables_md
    checks = {
        "clicks/clicks.parquet": (parquet, expected("clicks")),
        "subjects/subjects.parquet": (parquet, expected("subject-geometry")),
        "boxes/boxes.parquet": (parquet, boxes),
        "subsamples/n3/boxes.parquet": (parquet, boxes),
        "aggregate/generative/n20/labels.parquet": (parquet, expected("labels")),
        "aggregate/paper/n20/labels.parquet": (parquet, expected("labels", not_paper_labels)),
        "aggregate/generative/n3/subjects.parquet": (parquet, expected("subjects")),
        "aggregate/paper/n3/subjects.parquet": (parquet, expected("subjects", paper_subjects)),
        "aggregate/generative/n20/volunteers.parquet": (parquet, expected("volunteers")),
        "aggregate/paper/n20/volunteers.parquet": (parquet, expected("volunteers", ["fp_rate"])),
        "aggregate/paper/n3/assignments.parquet": (parquet, kept + expected("assignments")),
        "catalogue.csv": (csv, expected("catalogue", ["tool"])),  # tool: with per_tool only
        "catalogue.ecsv": (ecsv, expected("catalogue", ["tool"])),
        "images.csv": (csv, expected("catalogue", which=1)),
    }
    for rel, (read, columns) in checks.items():
        assert read(rel) == columns, rel
    # the gold standard the workflow built from the experts: one of the documented forms
    gold = csv("gold/gold.csv")
    assert gold == ["subject_id", "x", "y"] and set(gold) <= set(expected("gold-standard"))


def test_report_builds(run_a):
    """The DAG itself leaves report.html (every figure inline); Snakemake's own report
    still builds on request, beside it."""
    html = (run_a / "results/report.html").read_text(errors="replace")
    assert len(html) > 100_000 and html.count("data:image/png;base64,") >= 15
    snakemake(run_a, "--report", "results/snakemake_report.html")
    assert (run_a / "results/snakemake_report.html").stat().st_size > 100_000


def test_nothing_to_do_after_a_complete_run(run_a):
    assert planned_rules(run_a) == set()


def _with(project: Path, dest: Path, edit) -> Path:
    """Copy a finished project (results included) and edit its config."""
    shutil.copytree(project, dest, symlinks=True)
    cfg = yaml.safe_load((dest / "config.yaml").read_text())
    edit(cfg)
    (dest / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dest


def test_figure_setting_reruns_only_figures(run_a, tmp_path):
    proj = _with(run_a, tmp_path / "p", lambda c: c["figures"].update(dpi=c["figures"]["dpi"] + 1))
    rules = planned_rules(proj, "--rerun-triggers", "mtime", "params", "input", "code")
    assert rules, "changing dpi must re-run the figures"
    upstream = {"simulate", "subjects", "extract", "boxes", "subsample", "aggregate"}
    assert not rules & upstream, rules


def test_aggregate_setting_reruns_aggregation_and_downstream_only(run_a, tmp_path):
    proj = _with(run_a, tmp_path / "p", lambda c: c["aggregate"].update(tau=4.0))
    rules = planned_rules(proj, "--rerun-triggers", "mtime", "params", "input", "code")
    assert "aggregate" in rules
    assert not rules & {
        "simulate",
        "subjects",
        "extract",
        "extract_experts",
        "boxes",
        "subsample",
    }, rules


def test_code_change_is_tracked(run_a, tmp_path):
    proj = _with(run_a, tmp_path / "p", lambda c: None)
    module = proj / "src/clumpscout/model/risk.py"
    module.write_text(module.read_text() + "\n# an edit\n")
    rules = planned_rules(proj, "--rerun-triggers", "mtime", "params", "input", "code")
    assert "aggregate" in rules
    assert "simulate" not in rules and "extract" not in rules, rules


def test_a_job_of_both_models_writes_what_one_model_runs_write(run_a, tmp_path):
    """The workflow fits both models of an n in one job (decisions.md#aggregate-per-n): each
    model's files are byte for byte what `clumpscout aggregate` writes for that model alone,
    in a process of its own (same settings, gold for the generative model, the workflow's
    seed: sha256 of "<seed>:aggregate", its first 8 hex digits); report.json without its
    timings. The job's log names both fits."""
    cfg = yaml.safe_load((run_a / "config.yaml").read_text())
    seed = int(hashlib.sha256(f"{cfg['seed']}:aggregate".encode()).hexdigest()[:8], 16)
    kept = "classification_id subject_id volunteer x1 y1 x2 y2 image_width image_height x y"
    for model in ("generative", "paper"):
        conf = tmp_path / f"{model}.yaml"
        conf.write_text(yaml.safe_dump({**cfg, "aggregate": {**cfg["aggregate"], "model": model}}))
        out = tmp_path / model
        cmd = [sys.executable, "-m", "clumpscout", "aggregate", "--config", str(conf),
               "--boxes", "results/subsamples/n3/boxes.parquet", "--out", str(out),
               "--seed", str(seed), "--assignment-columns", *kept.split(),
               *(["--gold", "results/gold/gold.csv"] if model == "generative" else [])]  # fmt: skip
        r = subprocess.run(cmd, cwd=run_a, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        wf = run_a / f"results/aggregate/{model}/n3"
        for name in ("labels", "subjects", "volunteers", "assignments"):
            f = f"{name}.parquet"
            assert (out / f).read_bytes() == (wf / f).read_bytes(), (model, name)
        got, want = (json.loads((d / "report.json").read_text()) for d in (out, wf))
        assert got["model"]["name"] == model and got["seed"] == seed
        assert _without_timings(got) == _without_timings(want), model
    log = (run_a / "results/logs/aggregate/n3.log").read_text()
    for i, model in enumerate(("generative", "paper")):
        assert f"aggregation by the {model} model ({i + 1} of 2) done in" in log, model
    assert log.count("start-up done in") == 1 and log.count("cycles done in") == 2


def test_resume_after_kill_gives_the_same_bytes(run_a, tmp_path):
    """A second run from scratch, started on ONE core (every rule and numba single-threaded),
    killed (SIGKILL, whole process group) while an aggregation job runs, then resumed with
    ``--rerun-incomplete`` on two cores, ends with tables byte-identical to the uninterrupted
    two-core run: determinism, thread-count independence and resumability in one."""
    project = make_project(tmp_path / "run_k", tiny_config())
    proc = subprocess.Popen(
        [*SNAKEMAKE, "--cores", "1"],
        cwd=project,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 900
    logs = project / "results/logs"
    killed_mid_job = False
    try:
        while time.time() < deadline and proc.poll() is None:
            if any(logs.rglob("aggregate*")):
                time.sleep(1.0)
                killed_mid_job = proc.poll() is None
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert killed_mid_job, "the run ended before it could be killed during aggregation"
    # nothing that looks complete may be left half-written: temporaries end in .tmp
    leftovers = [p for p in (project / "results").rglob("*") if p.is_file() and p.suffix == ".tmp"]
    for p in leftovers:
        assert p.name.startswith("."), p
    # a killed Snakemake leaves its lock behind: --unlock, then resume
    snakemake(project, "--unlock")
    snakemake(project, "--cores", "2", "--rerun-incomplete")
    a, b = table_hashes(run_a / "results"), table_hashes(project / "results")
    assert a.keys() == b.keys()
    differing = [k for k in a if a[k] != b[k]]
    assert not differing, differing


@pytest.mark.slow
def test_bench_scale_on_a_real_run(run_a, tmp_path):
    """benchmarks/bench_scale.py on a finished DAG: its Snakemake log gives every job and a
    consistent summary, and the copies stage (extract and both models, 1 and 2 copies) runs."""
    from benchmarks import bench_scale

    logs = (p.read_text() for p in (run_a / ".snakemake/log").glob("*.snakemake.log"))
    jobs = max(map(bench_scale.parse_log, logs), key=len)  # the run (other logs: dry runs)
    assert {"simulate", "extract", "boxes", "subsample", "aggregate"} <= {j.rule for j in jobs}
    assert sum(j.rule == "aggregate" for j in jobs) == 2 and all(j.seconds >= 0 for j in jobs)
    s = bench_scale.dag_summary(jobs)
    assert 0 < s["serial_prefix_s"] < s["wall_s"] and s["critical_path_s"] <= s["rule_seconds"]
    assert s["critical_path"][0] in {"simulate", "numba_cache"}
    rows = bench_scale.copies(tmp_path, run_a, [1, 2], 6.0, False)
    by = {(r["stage"], r["k"]): r for r in rows}
    assert set(by) == {(st, k) for st in ("extract", "aggregate generative", "aggregate paper")
                       for k in (1, 2)}  # fmt: skip
    assert all(r["status"] == "ok" for r in rows), rows
    # two independent copies: twice the generative model's labels, give or take a few
    one, two = by["aggregate generative", 1]["labels"], by["aggregate generative", 2]["labels"]
    assert abs(two - 2 * one) <= 0.02 * 2 * one, (one, two)
    text = bench_scale.markdown([], rows, {"date": "d", "machine": "m", "note": "n"})
    assert "extract" in text
