"""envs/*.yaml: each lists exactly what the scripts of its rules import, pinned as pyproject.toml.

For every rule of workflow/rules/*.smk (rules indented under ``if`` included), the files its
``script:`` runs (:func:`clumpscout.codedeps.import_closure`: the script, its helpers and the
package modules it imports, transitively) are parsed with :mod:`ast`; every third-party module
they import must be in the rule's ``conda:`` env, and every package of an env must be imported
by one of its rules (python aside; the package itself is not installed in the envs: the
scripts put the checkout's ``src/`` on ``sys.path``, scripts/_common.py).
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from clumpscout.codedeps import import_closure

# PyPI name -> conda-forge name where they differ
CONDA_NAME = {}
#: import name -> package name where they differ
PACKAGE_OF = {"sklearn": "scikit-learn", "yaml": "pyyaml", "PIL": "pillow"}
#: pandas reads and writes Parquet through pyarrow (pandas' optional engine, which pandas
#: imports itself): a file that calls read_parquet / to_parquet needs it installed
PARQUET_CALLS = {"read_parquet", "to_parquet"}
#: modules that are not third-party packages: the package, the scripts' helper
LOCAL = {"clumpscout", "_common"}


def _pyproject_pins() -> dict[str, str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    pins = {}
    for req in data["project"]["dependencies"]:
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([0-9][^\s;]*)", req.strip())
        assert m, f"dependency not pinned exactly: {req!r}"
        pins[m.group(1).lower()] = m.group(2)
    return pins


def _env_files():
    files = sorted((REPO / "envs").glob("*.yaml"))
    assert files, "no conda env files in envs/"
    return files


def _env_deps(env_file: Path) -> dict[str, str]:
    env = yaml.safe_load(env_file.read_text())
    assert env["channels"] == ["conda-forge", "nodefaults"]
    deps = {}
    for dep in env["dependencies"]:
        assert isinstance(dep, str), f"{env_file.name}: unexpected entry {dep!r}"
        name, _, version = dep.partition("=")
        deps[name.lower()] = version
    return deps


@functools.cache
def rules() -> dict[str, tuple[Path, Path]]:
    """rule name -> (conda env file, script) for every rule of the workflow, parsed by
    Snakemake itself (rules under ``if`` and the figure rules generated in a loop included),
    with every optional branch on (images and the real-SDSS demo)."""
    import tempfile

    import yaml
    from test_workflow import parsed_rules

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["images"].update(enabled=True, real_demo=True)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg["images"]["demo"]["shared_dir"] = tmp
        path = Path(tmp) / "all_branches.yaml"
        path.write_text(yaml.safe_dump(cfg))
        for r in parsed_rules(REPO / "Snakefile", REPO, [path]):
            if r.name == "all":
                continue
            here = Path(r.snakefile).parent
            assert r.conda_env and r.script, f"rule {r.name} lacks conda: or script:"
            out[r.name] = ((here / r.conda_env).resolve(), (here / r.script).resolve())
    return out


@functools.cache  # every env's test walks the same package files
def third_party_imports(path: Path) -> frozenset[str]:
    """Package names (PyPI spelling) of the third-party modules ``path`` imports anywhere
    (lazy and optional imports included), plus pyarrow when it calls pandas' Parquet I/O."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Attribute) and node.attr in PARQUET_CALLS:
            names.add("pyarrow")
    names -= set(sys.stdlib_module_names) | LOCAL | {"__future__"}
    return frozenset(PACKAGE_OF.get(n, n).lower() for n in names)


def rule_imports(script: Path) -> set[str]:
    out: set[str] = set()
    for f in import_closure(script, REPO / "src"):
        out |= third_party_imports(f)
    return out


def test_rules_are_found_including_those_under_if():
    found = rules()
    # top level, under `if`, and under an `if` inside an `if`
    assert {"aggregate", "ledger", "compare", "report", "real_demo", "photometry_labels"} <= set(
        found
    )
    assert len(found) >= 30


@pytest.mark.parametrize("env_file", _env_files(), ids=lambda p: p.name)
def test_env_lists_exactly_what_its_rules_import(env_file):
    used = {
        name: rule_imports(script) for name, (env, script) in rules().items() if env == env_file
    }
    assert used, f"{env_file.name}: no rule uses it"
    deps = set(_env_deps(env_file)) - {"python"}
    for name, imports in sorted(used.items()):
        missing = {CONDA_NAME.get(p, p) for p in imports} - deps
        assert not missing, (
            f"{env_file.name}: rule {name} imports {sorted(missing)}, not in the env"
        )
    needed = {CONDA_NAME.get(p, p) for imports in used.values() for p in imports}
    unused = deps - needed
    assert not unused, f"{env_file.name}: {sorted(unused)} imported by none of its rules"


def test_rule_scripts_find_the_package_without_installing_it():
    """The envs do not install clumpscout: every script runs through scripts/_common.main,
    which puts the checkout's src/ first on sys.path."""
    assert "sys.path.insert(0, str(_SRC))" in (REPO / "scripts" / "_common.py").read_text()
    for _, script in rules().values():
        assert "from _common import main" in script.read_text(), script.name


def test_import_names_map_to_pinned_packages():
    """Every third-party import of the package is a pyproject dependency (under its name)."""
    pins = _pyproject_pins()
    imports = set()
    for f in (REPO / "src" / "clumpscout").rglob("*.py"):
        imports |= third_party_imports(f)
    assert imports <= set(pins), sorted(imports - set(pins))


@pytest.mark.parametrize("env_file", _env_files(), ids=lambda p: p.name)
def test_env_pins_match_pyproject(env_file):
    deps = _env_deps(env_file)
    assert deps.get("python", "").startswith("3.11")
    pins = {CONDA_NAME.get(n, n): v for n, v in _pyproject_pins().items()}
    for name, version in deps.items():
        if name == "python":
            continue
        assert name in pins, f"{env_file.name}: {name} is not pinned in pyproject.toml"
        assert version == pins[name], f"{env_file.name}: {name} should be pinned to {pins[name]}"


def test_venv_runs_the_pinned_versions():
    for name, version in _pyproject_pins().items():
        assert metadata.version(name) == version, f"{name}: venv has {metadata.version(name)}"


def test_every_rule_uses_an_existing_env():
    for name, (env, script) in rules().items():
        assert env.is_file(), f"rule {name}: missing env {env}"
        assert script.is_file(), f"rule {name}: missing script {script}"
