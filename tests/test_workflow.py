"""The Snakemake workflow: lint-clean, formatted, schema-validated config, dry runs."""

from __future__ import annotations

import functools
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
    # one line per problem, not the whole schema
    assert len((r.stdout + r.stderr).splitlines()) < 30


def test_a_misspelled_export_path_is_an_error_naming_the_key(tmp_path):
    cfg = tmp_path / "export.yaml"
    cfg.write_text("source: export\nexport: {classifications: nosuch.csv, subjects: s.csv}\n")
    (tmp_path / "results" / "clicks").mkdir(parents=True)
    (tmp_path / "results" / "clicks" / "clicks.parquet").write_text("an earlier run's output")
    args = ["-n", "-d", str(tmp_path), "-s", str(REPO / "Snakefile"), "--configfile", str(cfg)]
    r = _run([*SNAKEMAKE, *args])
    assert r.returncode != 0
    assert "export.classifications: nosuch.csv is not a file" in r.stdout + r.stderr


def test_a_partial_config_in_another_directory_extends_the_defaults(tmp_path):
    """``-d elsewhere --configfile small.yaml`` reads the repository's config.yaml first."""
    small = tmp_path / "small.yaml"
    small.write_text("subsample: {n: [3]}\n")
    args = ["-n", "-d", str(tmp_path), "-s", str(REPO / "Snakefile"), "--configfile", str(small)]
    r = _run([*SNAKEMAKE, *args], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "aggregate" in r.stdout


def test_config_defaults_follow_the_paper_tables():
    """Table prior_param_values and subject_retirement_params, decisions.md#hyper-parameters."""
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


# ------------------------------------------------------------- code digests of the rules
SHARED_MODULES = {"io", "errors", "logs"}  # common.smk's code_digest always adds these


@functools.cache
def _package_imports(path: Path, modules: frozenset[str], local: bool = False) -> frozenset[str]:
    """clumpscout modules ``path`` imports (anywhere: lazy imports in functions too);
    ``local``: also the modules of its own folder (scripts/_common.py), as ``./name``."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import inside the package
                base = "clumpscout" + ("." + base if base else "")
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "clumpscout" and len(parts) > 1 and parts[1] in modules:
                found.add(parts[1])
            elif local and len(parts) == 1 and (path.parent / f"{name}.py").is_file():
                found.add(f"./{name}")
    return frozenset(found)


def _script_modules(script: Path) -> set[str]:
    """Every clumpscout module a rule's script runs: its imports, transitively."""
    src = REPO / "src" / "clumpscout"
    modules = frozenset(p.stem for p in src.glob("*.py"))
    seen: set[str] = set()
    todo = list(_package_imports(script, modules, local=True))
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        if m.startswith("./"):
            todo += _package_imports(script.parent / f"{m[2:]}.py", modules, local=True)
        else:
            todo += _package_imports(src / f"{m}.py", modules)
    return {m for m in seen if not m.startswith("./")}


def _rule_digests() -> dict[str, tuple[Path, set[str] | None]]:
    """rule -> (its script, the modules of its ``code_digest(...)`` param or None), read
    from the text of workflow/rules/*.smk."""
    import ast
    import re

    out = {}
    for smk in sorted((REPO / "workflow/rules").glob("*.smk")):
        text = smk.read_text()
        starts = [m for m in re.finditer(r"^[ \t]*rule (\w+):", text, re.M)]
        for i, m in enumerate(starts):
            block = text[m.end() : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
            script = re.search(r"script:\s*\n\s*[\"']([^\"']+)[\"']", block)
            if not script:
                continue
            path = (smk.parent / script.group(1)).resolve()
            call = re.search(r"code_digest\(", block)
            mods = None
            if call:  # the call's text up to its closing parenthesis
                depth, j = 0, call.end() - 1
                while True:
                    depth += {"(": 1, ")": -1}.get(block[j], 0)
                    if depth == 0:
                        break
                    j += 1
                expr = ast.parse(block[call.start() : j + 1], mode="eval").body
                mods = {a.value for a in expr.args if isinstance(a, ast.Constant)}
                assert len(mods) == len(expr.args), (
                    f"{m.group(1)}: distinct literal module names only"
                )
            out[f"{smk.name}: rule {m.group(1)}"] = (path, mods)
    return out


def test_every_rule_digests_exactly_the_modules_its_script_runs():
    """A rule's ``code=code_digest(...)`` param must name every clumpscout module its
    script imports, directly or through other modules of the package (else editing that
    module does not re-run the rule), and nothing else (else it re-runs needlessly)."""
    modules = {p.stem for p in (REPO / "src" / "clumpscout").glob("*.py")}
    digests = _rule_digests()
    assert len(digests) > 20 and any("rule aggregate" in k for k in digests)
    problems = []
    for rule, (script, listed) in digests.items():
        if listed is None:
            problems.append(f"{rule}: no code=code_digest(...) param")
            continue
        runs = _script_modules(script) - SHARED_MODULES
        if unknown := listed - modules:
            problems.append(f"{rule}: no such module {sorted(unknown)}")
        if missing := runs - listed:
            problems.append(f"{rule} ({script.name}) misses {sorted(missing)}")
        if extra := listed - runs - SHARED_MODULES - unknown:
            problems.append(f"{rule} ({script.name}) does not run {sorted(extra)}")
    assert not problems, "\n".join(problems)


def test_script_import_closure_follows_lazy_and_transitive_imports(tmp_path):
    # scripts/simulate.py imports clumpscout.simulate, which imports simulate_counting at
    # the top and simulate_export inside functions
    runs = _script_modules(REPO / "scripts" / "simulate.py")
    assert {"simulate", "simulate_counting", "simulate_export", "errors", "logs"} <= runs
    script = tmp_path / "s.py"
    script.write_text("def f():\n    from clumpscout import boxes\n")
    assert {"boxes"} <= _script_modules(script) <= {"boxes"} | SHARED_MODULES
