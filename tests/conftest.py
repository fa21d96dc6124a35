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


@pytest.fixture(autouse=True)
def _reset_cli_logging():
    """The CLI attaches handlers to the package logger; remove them after each test."""
    yield
    lg = logging.getLogger("clumpscout")
    for h in list(lg.handlers):
        lg.removeHandler(h)
    lg.propagate = True
