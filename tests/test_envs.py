"""envs/*.yaml pin exactly the versions pyproject.toml pins (and the venv runs)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata

import pytest
import yaml
from conftest import REPO

# PyPI name -> conda-forge name where they differ
CONDA_NAME = {}


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


@pytest.mark.parametrize("env_file", _env_files(), ids=lambda p: p.name)
def test_env_pins_match_pyproject(env_file):
    env = yaml.safe_load(env_file.read_text())
    assert env["channels"] == ["conda-forge", "nodefaults"]
    deps = {}
    for dep in env["dependencies"]:
        assert isinstance(dep, str), f"{env_file.name}: unexpected entry {dep!r}"
        name, _, version = dep.partition("=")
        deps[name.lower()] = version
    assert deps.get("python", "").startswith("3.11")
    for name, version in _pyproject_pins().items():
        conda = CONDA_NAME.get(name, name)
        assert deps.get(conda) == version, f"{env_file.name}: {conda} should be pinned to {version}"
    extra = set(deps) - {CONDA_NAME.get(n, n) for n in _pyproject_pins()} - {"python"}
    assert not extra, f"{env_file.name}: packages not pinned in pyproject.toml: {sorted(extra)}"


def test_venv_runs_the_pinned_versions():
    for name, version in _pyproject_pins().items():
        assert metadata.version(name) == version, f"{name}: venv has {metadata.version(name)}"


def test_every_rule_uses_an_existing_env():
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        for rel in re.findall(r'conda:\s*\n\s*"([^"]+)"', smk.read_text()):
            assert (smk.parent / rel).resolve().is_file(), f"{smk.name}: missing env {rel}"
