"""The Snakemake workflow: lint-clean, formatted, schema-validated config, dry runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO

SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def _run(args, cwd=REPO, **kw):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, **kw)


def test_lint_is_clean():
    r = _run([*SNAKEMAKE, "--lint"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "good condition" in (r.stdout + r.stderr)


def test_snakefmt_clean():
    files = [
        "Snakefile",
        *sorted(str(p.relative_to(REPO)) for p in (REPO / "workflow/rules").glob("*.smk")),
    ]
    r = _run([sys.executable, "-m", "snakefmt", "--check", *files])
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_run_blocks_and_every_rule_is_complete():
    import re

    for smk in (REPO / "workflow/rules").glob("*.smk"):
        text = smk.read_text()
        assert not re.search(r"^\s+run:\s*$", text, re.M), f"{smk.name} has a run: block"
        for block in re.split(r"^rule ", text, flags=re.M)[1:]:
            name = block.split(":", 1)[0]
            for directive in ("log:", "threads:", "resources:", "conda:", "params:"):
                if name in {"all"}:
                    continue
                assert directive in block, f"{smk.name}: rule {name} lacks {directive}"


def test_dry_run_default_config_plans_the_data_stages(tmp_path):
    r = _run(
        [
            *SNAKEMAKE,
            "-n",
            "--quiet",
            "rules",
            "-d",
            str(tmp_path),
            "-s",
            str(REPO / "Snakefile"),
            "--configfile",
            str(REPO / "config.yaml"),
        ]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for rule in ("simulate", "subjects", "extract", "boxes"):
        assert rule in r.stdout, f"rule {rule} not planned:\n{r.stdout}"


def _dry_run_jobs(tmp_path) -> list[tuple[str, dict[str, str], str]]:
    """(rule, wildcards, the job's block of text) of every job a dry run of the default
    config plans."""
    r = _run([*SNAKEMAKE, "-n", "-d", str(tmp_path), "-s", str(REPO / "Snakefile"),
              "--configfile", str(REPO / "config.yaml")])  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = []
    for block in r.stdout.split("\nrule ")[1:]:
        rule = block.split(":", 1)[0].strip()
        wc = {}
        for line in block.splitlines():
            if line.strip().startswith("wildcards:"):
                for item in line.split(":", 1)[1].split(","):
                    k, v = item.strip().split("=", 1)
                    wc[k] = v
        jobs.append((rule, wc, block))
    return jobs


def test_dry_run_aggregates_both_models_for_every_n_and_runs_dbscan(tmp_path):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    ns = {str(n) for n in cfg["subsample"]["n"]}
    jobs = _dry_run_jobs(tmp_path)
    for rule in ("aggregate", "compare_experts", "compare_truth"):
        got = {(wc["model"], wc["n"]) for r, wc, _ in jobs if r == rule}
        assert got == {(m, n) for m in ("generative", "paper") for n in ns}, rule
    for rule in ("compare_experts_collect", "compare_truth_collect", "ledger"):
        assert {wc["model"] for r, wc, _ in jobs if r == rule} == {"generative", "paper"}, rule
    blocks = {r: b for r, _, b in jobs}
    for rule in ("baseline_dbscan", "baseline_compare_experts", "baseline_compare_truth",
                 "fig_method_comparison", "headline"):  # fmt: skip
        assert rule in blocks, rule
    n = cfg["baseline"]["n"]
    assert f"results/subsamples/n{n}/boxes.parquet" in blocks["baseline_dbscan"]
    for rule in ("baseline_compare_experts", "baseline_compare_truth"):
        for path in (f"results/aggregate/generative/n{n}/labels.parquet",
                     f"results/aggregate/paper/n{n}/labels.parquet",
                     "results/baseline/dbscan_labels.parquet",
                     "results/baseline/single_linkage_labels.parquet",
                     "results/baseline/meanshift_labels.parquet"):  # fmt: skip
            assert path in blocks[rule], (rule, path)
    # the paper's figures, the appendix counts and the photometry read the paper model
    for rule, b in blocks.items():
        if rule.startswith("fig_") or rule in ("baseline_counts", "photometry_labels"):
            assert "aggregate/generative" not in b, rule
    assert "results/aggregate/paper/n" in blocks["fig_clump_fpp_dist"]
    assert "results/compare/paper/experts_curve.csv" in blocks["fig_pseudo_roc_volunteer_counts"]


@pytest.mark.parametrize(
    "override, complaint",
    [
        ({"no_such_key": 1}, "no_such_key"),
        ({"aggregate": {"tau": -1.0}}, "tau"),
        ({"aggregate": {"distance_likelihood": "manhattan"}}, "manhattan"),
        ({"source": "elsewhere"}, "elsewhere"),
        ({"baseline": {"dbscan_eps_factor": 0}}, "dbscan_eps_factor"),
        ({"baseline": {"dbscan_min_samples": 0}}, "dbscan_min_samples"),
    ],
)
def test_config_schema_rejects_bad_values(tmp_path, override, complaint):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    for key, value in override.items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = _run(
        [
            *SNAKEMAKE,
            "-n",
            "-d",
            str(tmp_path),
            "-s",
            str(REPO / "Snakefile"),
            "--configfile",
            str(path),
        ]
    )
    assert r.returncode != 0
    assert complaint in (r.stdout + r.stderr)


def test_config_defaults_follow_the_paper_tables():
    """Table prior_param_values and subject_retirement_params, SPEC 8."""
    agg = yaml.safe_load((REPO / "config.yaml").read_text())["aggregate"]
    expected = dict(
        p0_fp=0.1,
        p0_fn=0.1,
        n_beta_fp=500,
        n_beta_fn=50,
        sigma2_0_S=0.1,
        n_chi_S=10,
        sigma2_0_V=0.1,
        n_chi_V=10,
        f_V=0.1,
        d_max=0.9,
        alpha_fp=1,
        alpha_fn=1,
        alpha_sigma=2,
        delta=0.5,
        n_fp_max=1,
        n_fn_max=0.3,
        n_sigma_max=3,
        tau=5,
        max_cycles=10,
    )
    for key, value in expected.items():
        assert agg[key] == pytest.approx(value), key


def test_readme_has_exactly_two_commands():
    text = (REPO / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = [b for b in quick.split("```")[1::2]]
    commands = [
        ln for b in blocks for ln in b.splitlines()[1:] if ln.strip() and not ln.startswith("#")
    ]
    assert len(commands) == 2, commands
    ci = (REPO / ".ci/run").read_text()
    assert commands[1].strip() in ci, "CI must run the README's test command"
    assert Path(REPO / "setup.sh").is_file()


def test_ruff_clean():
    paths = ["src", "scripts", "tests", "benchmarks"]
    r = _run([sys.executable, "-m", "ruff", "check", *paths])
    assert r.returncode == 0, r.stdout + r.stderr
    r = _run([sys.executable, "-m", "ruff", "format", "--check", *paths])
    assert r.returncode == 0, r.stdout + r.stderr
