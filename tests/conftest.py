"""Shared test fixtures: paths to the repository and to ../shared."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

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
