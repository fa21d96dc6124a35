"""Shared test fixtures: paths to the repository and to ../shared."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

# Two xdist workers share two cores: OpenBLAS (numpy, scipy) would otherwise start a thread
# per core in each worker and in every process a test starts, and the workers' threads spin
# against each other. One BLAS thread per process; a caller's own setting wins.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared() -> Path:
    """../shared; tests that need it skip cleanly when it is absent."""
    if not SHARED.is_dir():
        pytest.skip("../shared is absent")
    return SHARED


@pytest.fixture(autouse=True, scope="session")
def _benchmarks_md(tmp_path_factory):
    """A benchmark's main run by a test writes its docs section here, never into
    docs/benchmarks.md (benchmarks/docs_table.py reads the variable)."""
    path = tmp_path_factory.mktemp("docs") / "benchmarks.md"
    old = os.environ.get("CLUMPSCOUT_BENCHMARKS_MD")
    os.environ["CLUMPSCOUT_BENCHMARKS_MD"] = str(path)
    yield path
    if old is None:
        os.environ.pop("CLUMPSCOUT_BENCHMARKS_MD", None)
    else:
        os.environ["CLUMPSCOUT_BENCHMARKS_MD"] = old


@pytest.fixture(autouse=True)
def _reset_cli_logging():
    """The CLI attaches handlers to the package logger; remove them after each test."""
    yield
    lg = logging.getLogger("clumpscout")
    for h in list(lg.handlers):
        lg.removeHandler(h)
    lg.propagate = True
