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


@pytest.mark.slow  # snakemake --lint reads the whole workflow (~6 s)
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


def parsed_rules(snakefile: Path, workdir: Path, configfiles=()) -> list:
    """Every rule of a workflow (indented ones under ``if`` included), parsed in-process by
    Snakemake's API: the Rule objects, with their directives."""
    import os

    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (
        ConfigSettings,
        OutputSettings,
        ResourceSettings,
        StorageSettings,
    )

    cwd = os.getcwd()
    try:
        with SnakemakeApi(OutputSettings()) as api:
            wf = api.workflow(
                resource_settings=ResourceSettings(),
                config_settings=ConfigSettings(configfiles=[Path(c) for c in configfiles]),
                storage_settings=StorageSettings(),
                snakefile=snakefile,
                workdir=workdir,
            )
            workflow = wf._workflow
            rules = list(workflow.rules)
            for r in rules:  # a rule's line in its own file (lineno counts compiled lines)
                r.source_line = workflow.linemaps[r.snakefile].get(r.lineno, r.lineno)
            return rules
    finally:
        os.chdir(cwd)


def incomplete_rules(snakefile: Path, workdir: Path, configfiles=()) -> list[str]:
    """One line per rule that lacks log, benchmark, threads, resources (mem_mb, runtime), conda, params
    (with the code digest) or has a run: block. `threads:` is read from the rule's text (a
    parsed rule has a thread count either way), located by the rule's own line number."""
    rules = parsed_rules(snakefile, workdir, configfiles)
    starts: dict[str, list[int]] = {}
    for r in rules:
        starts.setdefault(r.snakefile, []).append(r.source_line)
    out = []
    for r in rules:
        if r.name == "all":
            continue
        lines = Path(r.snakefile).read_text().splitlines()
        after = sorted(n for n in starts[r.snakefile] if n > r.source_line)
        text = "\n".join(lines[r.source_line - 1 : after[0] - 1 if after else len(lines)])
        missing = [
            name
            for name, ok in (
                ("log:", bool(r.log)),
                ("benchmark:", bool(r.benchmark)),  # benchmarks/bench_dag_scale.py reads it
                ("threads:", "threads:" in text),
                ("resources:", {"mem_mb", "runtime"} <= set(r.resources.keys())),
                ("conda:", bool(r.conda_env)),
                ("params: code", "code" in r.params.keys()),
                ("script:", bool(r.script or r.shellcmd) and not r.is_run),
            )
            if not ok
        ]
        if missing:
            out.append(f"{Path(r.snakefile).name}: rule {r.name} lacks {', '.join(missing)}")
    return out


@pytest.fixture(scope="module")
def images_config(tmp_path_factory) -> Path:
    """config.yaml with every optional branch of the DAG on (images, the real SDSS demo)."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["images"].update(enabled=True, real_demo=True)
    demo = tmp_path_factory.mktemp("sdss")
    cfg["images"]["demo"]["shared_dir"] = str(demo)
    path = demo / "all_branches.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_no_run_blocks_and_every_rule_is_complete(tmp_path, images_config):
    """Every rule the workflow defines (Snakemake's own parse, not a regex) is complete."""
    names = {r.name for r in parsed_rules(REPO / "Snakefile", tmp_path, [images_config])}
    assert {"compare", "photometry_labels", "real_demo", "report", "fig_method_comparison"} <= names
    assert incomplete_rules(REPO / "Snakefile", tmp_path, [images_config]) == []


def test_the_completeness_check_sees_indented_rules(tmp_path):
    """Deleting `resources:` from a rule indented under two `if`s makes the check fail."""
    import shutil

    project = tmp_path / "p"
    project.mkdir()
    for name in ("Snakefile", "config.yaml"):
        shutil.copy(REPO / name, project / name)
    for name in ("workflow", "scripts", "src", "envs"):
        shutil.copytree(REPO / name, project / name, ignore=shutil.ignore_patterns("__pycache__"))
    smk = project / "workflow/rules/images.smk"
    text = smk.read_text()
    block = text.index("        rule photometry_labels:")
    start = text.index("            resources:\n", block)
    end = text.index("            params:\n", start)
    smk.write_text(text[:start] + text[end:])
    assert incomplete_rules(project / "Snakefile", tmp_path / "run") == [
        "images.smk: rule photometry_labels lacks resources:"
    ]


@pytest.fixture(scope="module")
def default_dry_run(tmp_path_factory) -> list[tuple[str, dict[str, str], str]]:
    """(rule, wildcards, the job's block of text) of every job a dry run of the default
    config plans (one dry run for the tests that read it)."""
    d = tmp_path_factory.mktemp("dry")
    r = _run([*SNAKEMAKE, "-n", "-d", str(d), "-s", str(REPO / "Snakefile"),
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


def test_dry_run_default_config_plans_the_data_stages(default_dry_run):
    planned = {rule for rule, _, _ in default_dry_run}
    for rule in ("simulate", "subjects", "extract", "boxes"):
        assert rule in planned, f"rule {rule} not planned: {sorted(planned)}"


def test_dry_run_aggregates_both_models_for_every_n_and_runs_dbscan(default_dry_run):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    ns = {str(n) for n in cfg["subsample"]["n"]}
    jobs = default_dry_run
    models = ("generative", "paper")
    # one job per n fits both models (their start-up shared, decisions.md#aggregate-per-n)
    agg = [(wc, b) for r, wc, b in jobs if r == "aggregate"]
    assert sorted(wc["n"] for wc, _ in agg) == sorted(ns) and all(set(wc) == {"n"} for wc, _ in agg)
    names = ("labels.parquet", "subjects.parquet", "volunteers.parquet", "assignments.parquet",
             "report.json")  # fmt: skip
    for wc, block in agg:
        out = block.split("output:", 1)[1].split("\n", 1)[0]
        for m in models:
            for name in names:
                assert f"results/aggregate/{m}/n{wc['n']}/{name}" in out, (wc, m, name)
        assert f"log: results/logs/aggregate/n{wc['n']}.log" in block
    # one comparison job per model and reference scores every n (the reference read once)
    compare = [(wc, b) for r, wc, b in jobs if r == "compare"]
    assert sorted((wc["model"], wc["reference"]) for wc, _ in compare) == sorted(
        (m, ref) for m in models for ref in ("experts", "truth")
    )
    for wc, block in compare:
        labels = {n for n in ns if f"aggregate/{wc['model']}/n{n}/labels.parquet" in block}
        assert labels == ns, (wc, labels)
    # one ledger job writes both models' ledgers (the export counted once)
    ledger = [b for r, _, b in jobs if r == "ledger"]
    assert len(ledger) == 1 and all(f"ledger/{m}.csv" in ledger[0] for m in models)
    got = {wc["reference"]: b for r, wc, b in jobs if r == "baseline_compare"}
    assert set(got) == {"experts", "truth"}
    blocks = {r: b for r, _, b in jobs}
    for rule in ("baseline_dbscan", "fig_method_comparison", "headline", "report"):
        assert rule in blocks, rule
    n = cfg["baseline"]["n"]
    assert f"results/subsamples/n{n}/boxes.parquet" in blocks["baseline_dbscan"]
    for block in got.values():
        for path in (f"results/aggregate/generative/n{n}/labels.parquet",
                     f"results/aggregate/paper/n{n}/labels.parquet",
                     "results/baseline/dbscan_labels.parquet",
                     "results/baseline/single_linkage_labels.parquet",
                     "results/baseline/meanshift_labels.parquet"):  # fmt: skip
            assert path in block, path
    # the paper's figures, the appendix counts and the photometry read the paper model; the
    # gold-standard figures read the default model (its cross-fitted p_fp)
    for rule, b in blocks.items():
        if rule.startswith("fig_gold_"):
            assert f"results/aggregate/generative/n{n}/" in b, rule
        elif rule.startswith("fig_") or rule in ("baseline_counts", "photometry_labels"):
            assert "aggregate/generative" not in b, rule
    assert {"fig_gold_reliability", "fig_gold_counts"} <= set(blocks)
    assert "results/aggregate/paper/n" in blocks["fig_clump_fpp_dist"]
    assert "results/compare/paper/experts_curve.csv" in blocks["fig_pseudo_roc_volunteer_counts"]


@pytest.mark.parametrize(
    "override, complaint",
    [
        ({"no_such_key": 1}, "(top level): Additional properties are not allowed ('no_such_key'"),
        ({"aggregate": {"tau": -1.0}}, "aggregate.tau: -1.0 is less than the minimum of 0"),
        ({"aggregate": {"distance_likelihood": "manhattan"}}, "aggregate.distance_likelihood:"),
        ({"source": "elsewhere"}, "source: 'elsewhere' is not one of"),
        ({"baseline": {"dbscan_eps_factor": 0}}, "baseline.dbscan_eps_factor:"),
        ({"baseline": {"dbscan_min_samples": 0}}, "baseline.dbscan_min_samples:"),
        ({"export": {"box_side": "big"}}, "export.box_side:"),
        ({"results_dir": ""}, "results_dir:"),
    ],
)
def test_config_schema_rejects_bad_values(override, complaint):
    """In-process (clumpscout.config, what the workflow calls first): one line per problem,
    naming the key."""
    from clumpscout import config

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    for key, value in override.items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    with pytest.raises(config.ConfigError) as err:
        config.check(cfg)
    assert len(err.value.problems) == 1, err.value.problems
    assert err.value.problems[0].startswith(complaint), err.value.problems
    assert len(str(err.value).splitlines()) == 1 and complaint in str(err.value)


def test_every_key_has_a_default_and_config_yaml_shows_the_defaults():
    """The schema is the one source of defaults (decisions.md#one-config-source): every
    setting has one, and config.yaml, the documented user-facing copy, differs nowhere."""
    from clumpscout import config

    def leaves(node, prefix=""):
        for name, spec in node.get("properties", {}).items():
            if spec.get("default") == {}:  # a section
                yield from leaves(spec, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}", spec

    no_default = [key for key, spec in leaves(config.schema()) if "default" not in spec]
    assert no_default == []
    user = yaml.safe_load((REPO / "config.yaml").read_text())
    assert config.problems(user) == []  # fills in what config.yaml leaves out

    def differ(a, b, prefix=""):
        if isinstance(a, dict) and isinstance(b, dict):
            for k in set(a) | set(b):
                yield from differ(a.get(k), b.get(k), f"{prefix}{k}.")
        elif a != b:
            yield f"{prefix.rstrip('.')}: config.yaml {a!r}, schema default {b!r}"

    yaml_values = yaml.safe_load((REPO / "config.yaml").read_text())
    assert list(differ(user, config.defaults())) == []
    assert set(yaml_values) <= set(config.defaults())


def test_a_partial_config_is_completed_with_the_defaults():
    from clumpscout import config

    cfg = {"subsample": {"n": [3]}, "images": None}
    assert config.problems(cfg) == []
    assert cfg["subsample"] == {"n": [3], "nested": True}
    assert cfg["images"]["render"]["margin_px"] == 6
    assert cfg["results_dir"] == "results" and cfg["aggregate"]["per_tool"] is False
    assert isinstance(cfg["aggregate"]["n_beta_fp"], float)  # a `number` default is a float


def test_every_input_path_is_checked_naming_the_key(tmp_path):
    from clumpscout import config

    (tmp_path / "c.csv").write_text("x\n")
    cfg = {"source": "export", "export": {"classifications": "c.csv", "subjects": "nosuch.csv"},
           "subjects": {"psfield": "psf.fits"},
           "images": {"real_demo": True, "demo": {"shared_dir": "sdss"}}}  # fmt: skip
    config.problems(cfg)
    assert config.input_problems(cfg, base=tmp_path) == [
        f"export.subjects: nosuch.csv is not a file (a relative path is read from {tmp_path})",
        f"subjects.psfield: psf.fits is not a file (a relative path is read from {tmp_path})",
        f"images.demo.shared_dir: sdss is not a directory (a relative path is read from {tmp_path})",
    ]
    cfg = {"source": "export"}
    config.problems(cfg)
    assert config.input_problems(cfg, base=tmp_path) == [
        "export.classifications: must be set",
        "export.subjects: must be set",
    ]
    cfg = {"export": {"classifications": "unused.csv"}}  # source: simulate ignores export
    config.problems(cfg)
    assert config.input_problems(cfg, base=tmp_path) == []


def test_a_misspelled_export_path_is_an_error_naming_the_key(tmp_path):
    cfg = tmp_path / "export.yaml"
    cfg.write_text("source: export\nexport: {classifications: nosuch.csv, subjects: s.csv}\n")
    (tmp_path / "results" / "clicks").mkdir(parents=True)
    (tmp_path / "results" / "clicks" / "clicks.parquet").write_text("an earlier run's output")
    args = ["-n", "-d", str(tmp_path), "-s", str(REPO / "Snakefile"), "--configfile", str(cfg)]
    r = _run([*SNAKEMAKE, *args])
    assert r.returncode != 0
    assert "export.classifications: nosuch.csv is not a file" in r.stdout + r.stderr


@pytest.mark.slow  # a Snakemake dry run (~7 s)
def test_a_partial_config_in_another_directory_extends_the_defaults(tmp_path):
    """``-d elsewhere --configfile small.yaml`` reads the repository's config.yaml first."""
    small = tmp_path / "small.yaml"
    small.write_text("subsample: {n: [3]}\nresults_dir: runs/small\n")
    args = ["-n", "-d", str(tmp_path), "-s", str(REPO / "Snakefile"), "--configfile", str(small)]
    r = _run([*SNAKEMAKE, *args], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "runs/small/aggregate/paper/n3/labels.parquet" in r.stdout
    assert "runs/small/report.html" in r.stdout
    assert " results/" not in r.stdout and "\tresults/" not in r.stdout  # one folder per config


def test_config_defaults_follow_the_paper_tables():
    """Table prior_param_values and subject_retirement_params, decisions.md#hyper-parameters."""
    from clumpscout import config

    agg = config.defaults("aggregate")
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
def test_every_rule_digests_its_own_script(images_config):
    """Every rule with a script (generated and indented rules included, parsed by Snakemake)
    passes as ``code`` the digest of that script's own import closure (clumpscout.codedeps),
    so editing any code it runs re-runs it."""
    from clumpscout.codedeps import code_digest

    rules = [r for r in parsed_rules(REPO / "Snakefile", REPO, [images_config]) if r.name != "all"]
    names = {r.name for r in rules}
    assert len(rules) > 35 and {"aggregate", "compare", "fig_clump_fpp_dist", "report"} <= names
    wrong = []
    for r in rules:
        script = Path(r.snakefile).parent / r.script
        expected = code_digest(script.resolve(), REPO / "src", REPO)
        if r.params.code != expected:
            wrong.append(f"{r.name} ({Path(r.script).name})")
    assert not wrong, wrong


def _closure(script: Path, src: Path) -> set[str]:
    from clumpscout.codedeps import import_closure

    return {str(p.relative_to(src.parent)) for p in import_closure(script, src)}


def test_import_closure_on_a_hand_built_package(tmp_path):
    """Known answer on a package written here: top-level, lazy, transitive, relative and
    ``from package import module`` imports are followed; names that are attributes, other
    packages and unimported modules are not."""
    src = tmp_path / "src"
    pkg = src / "clumpscout"
    files = {
        "__init__.py": "",
        "io.py": "import json\n",
        "unused.py": "",
        "data/__init__.py": "",
        "data/reader.py": "from clumpscout.io import write\nfrom . import helpers\n",
        "data/helpers.py": "from ..model.core import Thing\n",
        "model/__init__.py": "",
        "model/core.py": "import numpy as np\nThing = 1\n",
        "model/lazy.py": "def f():\n    import clumpscout.io\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "_common.py").write_text("def g():\n    from clumpscout.model import lazy\n")
    (scripts / "run.py").write_text(
        "import _common\nfrom clumpscout.data.reader import read, write\n"
    )
    got = _closure(scripts / "run.py", src)
    assert got == {
        "scripts/run.py",
        "scripts/_common.py",
        "src/clumpscout/__init__.py",
        "src/clumpscout/io.py",
        "src/clumpscout/data/__init__.py",
        "src/clumpscout/data/reader.py",
        "src/clumpscout/data/helpers.py",
        "src/clumpscout/model/__init__.py",
        "src/clumpscout/model/core.py",
        "src/clumpscout/model/lazy.py",
    }
    # the closure follows an edit made in the same process (files are parsed once per
    # version, not once per path): a new import is seen, a removed one is gone
    (pkg / "io.py").write_text("import json\nfrom clumpscout import unused\n")
    assert "src/clumpscout/unused.py" in _closure(scripts / "run.py", src)
    (pkg / "io.py").write_text("import json\n")
    assert "src/clumpscout/unused.py" not in _closure(scripts / "run.py", src)


def test_import_closure_of_the_real_scripts():
    """The defects the hand-kept lists had: the subjects rule runs the export reader, and
    the simulate rule runs the counting universe and the export writer (a lazy import)."""
    src = REPO / "src"
    assert "src/clumpscout/data/zooniverse.py" in _closure(REPO / "scripts/subjects.py", src)
    sim = _closure(REPO / "scripts/simulate.py", src)
    assert {
        "src/clumpscout/simulation/counting.py",
        "src/clumpscout/simulation/export.py",
    } <= sim
    assert not any("/model/" in f or "/figures/" in f for f in sim)


@pytest.mark.slow
def test_editing_the_export_reader_replans_exactly_the_rules_that_run_it(tmp_path):
    """In a copy of the project with the boxes built, a comment added to the export reader
    (data/zooniverse.py) replans the rules whose scripts import it, directly or not
    (extract; subjects, which reads the subject export with it; boxes, which reads shapes
    with it), and not simulate, whose code reads no export."""
    from test_e2e import make_project, snakemake, tiny_config

    project = make_project(tmp_path / "p", tiny_config())
    target = "results/boxes/boxes.parquet"
    snakemake(project, "--cores", "2", target)
    assert _planned(project, target) == set()
    module = project / "src/clumpscout/data/zooniverse.py"
    module.write_text(module.read_text() + "\n# edited\n")
    assert _planned(project, target) == {"extract", "subjects", "boxes"}


def _planned(project, *args) -> set[str]:
    """The rules a dry run of ``args`` in ``project`` plans."""
    from test_e2e import snakemake

    r = snakemake(project, *args, "-n", "--quiet", "rules")
    return {
        parts[0]
        for parts in map(str.split, r.stdout.splitlines())
        if len(parts) == 2 and parts[1].isdigit() and parts[0] not in {"total", "job"}
    }


# ------------------------------------------------------------------ the report in the DAG
def test_html_report_embeds_figures_and_captions(tmp_path):
    """clumpscout.report.html (rule report): one self-contained file, figures inline, the
    reStructuredText captions rendered, grouped by category."""
    import base64

    from clumpscout.report.html import write_report

    png = tmp_path / "fig.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n fake")
    (tmp_path / "fig.rst").write_text("**Bold** caption, 10\\ :sup:`-5`.\n")
    (tmp_path / "h.html").write_text("<table><tr><td>1</td></tr></table>")
    (tmp_path / "intro.rst").write_text("The *intro*.\n")
    items = [
        {"path": str(png), "caption": str(tmp_path / "fig.rst"), "category": "1. Figures"},
        {"path": str(tmp_path / "h.html"), "caption": None, "category": "0. Headline"},
    ]
    html = write_report(items, tmp_path / "r.html", intro=tmp_path / "intro.rst").read_text()
    assert base64.b64encode(png.read_bytes()).decode() in html
    assert "<strong>Bold</strong>" in html and "<sup>-5</sup>" in html
    assert "<em>intro</em>" in html and "srcdoc=" in html
    assert html.index("0. Headline") < html.index("1. Figures")


def test_report_rule_collects_every_report_output(tmp_path):
    """The report rule's inputs are every output marked report(...) by a rule."""
    rules = {r.name: r for r in parsed_rules(REPO / "Snakefile", tmp_path)}
    marked = {
        str(f)
        for r in rules.values()
        if not r.has_wildcards()
        for f in r.output
        if "report" in getattr(f, "flags", {})
    }
    assert len(marked) > 20
    assert marked <= {str(f) for f in rules["report"].input}
    assert "results/report.html" in {str(f) for f in rules["all"].input}


def test_config_command_checks_a_file(tmp_path, capsys):
    from clumpscout import config

    bad = tmp_path / "bad.yaml"
    bad.write_text("aggregate: {tau: -2}\n")
    assert config.main([str(bad)]) == 2
    assert "aggregate.tau: -2 is less than the minimum of 0" in capsys.readouterr().err
    assert config.main([str(REPO / "config.yaml")]) == 0
    assert capsys.readouterr().out.endswith("config.yaml: ok\n")
    assert config.main(["--defaults"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == config.defaults()


@pytest.mark.slow
def test_compressed_universe_is_what_extract_reads_and_click_truth_is_optional(tmp_path):
    """simulate.compress_classifications: the simulate rule writes classifications.csv.zst and
    extract and the ledger read it; write_click_truth false: no truth_clicks.parquet output."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("simulate:\n  compress_classifications: true\n  write_click_truth: false\n")
    r = _run([*SNAKEMAKE, "-n", "-d", str(tmp_path / "run"), "-s", str(REPO / "Snakefile"),
              "--configfile", str(REPO / "config.yaml"), str(cfg)])  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    blocks = {b.split(":", 1)[0].strip(): b for b in r.stdout.split("\nrule ")[1:]}
    out = blocks["simulate"].split("output:", 1)[1].splitlines()[0]
    assert "universe/classifications.csv.zst" in out and "truth_clicks" not in out
    assert "universe/classifications.csv.zst" in blocks["extract"].split("output:")[0]


# ------------------------------------------------------------------ numba's cache warmed first
def test_numba_cache_is_warmed_once_before_every_job_that_runs_the_kernels(default_dry_run):
    """One numba_cache job, no input of its own (it starts with the data stages); every
    aggregation (the replay's full-data one included) and the replay wait for it, through a
    plain input."""
    jobs = default_dry_run
    warm = [b for r, _, b in jobs if r == "numba_cache"]
    assert len(warm) == 1
    assert "input:" not in warm[0].split("output:")[0]
    waiting = [r for r, _, b in jobs if "results/numba_cache.json" in b.split("output:")[0]]
    assert set(waiting) == {"aggregate", "replay_labels", "replay"}
    assert waiting.count("aggregate") == sum(r == "aggregate" for r, _, _ in jobs)


def test_the_warm_up_runs_no_code_the_jobs_behind_it_do_not():
    """The warm-up re-runs when its code changes and takes the jobs behind it along: right
    only if that code is theirs too (every package file it runs, they run)."""
    from clumpscout.codedeps import import_closure

    src = REPO / "src"
    warm = set(import_closure(REPO / "scripts/numba_cache.py", src)) - {
        REPO / "scripts/numba_cache.py"
    }
    assert len(warm) > 10
    for script in ("aggregate", "replay"):
        assert warm <= set(import_closure(REPO / f"scripts/{script}.py", src)), script


@pytest.mark.slow
def test_an_edited_model_reruns_the_warm_up_and_the_aggregation(tmp_path):
    """After a run the aggregation's log says numba compiled nothing (the warm-up did), and an
    edit to the model plans the warm-up and the aggregation again (Snakemake checks the
    aggregation's own code digest only if no ancient() input hides it)."""
    from test_e2e import make_project, snakemake, tiny_config

    project = make_project(tmp_path / "p", tiny_config())
    target = "results/aggregate/generative/n3/labels.parquet"
    snakemake(project, "--cores", "2", target)
    log = (project / "results/logs/aggregate/n3.log").read_text()  # both models' job
    assert "numba: 0 kernel(s) compiled" in log
    assert "aggregation by the generative model" in log and "aggregation by the paper model" in log
    assert _planned(project, target) == set()
    module = project / "src/clumpscout/model/calibration.py"
    module.write_text(module.read_text() + "\n# an edit\n")
    assert _planned(project, target) == {"numba_cache", "aggregate"}
