"""Logging and progress helpers: every stage says what it did and how long it took."""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger("clumpscout")

#: the prefix of every run-health warning in a log (a collapsed model, an implausible gold
#: standard): the reports find the warnings by it
WARNING_PREFIX = "RUN HEALTH WARNING:"


def setup_logging(logfile: str | None = None, level: int = logging.INFO) -> None:
    """Log to stderr (and to ``logfile`` if given) with timestamps."""
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S")
    root = logging.getLogger("clumpscout")
    root.setLevel(level)
    for h in list(root.handlers):
        root.removeHandler(h)
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if logfile:
        handlers.append(logging.FileHandler(logfile, mode="w"))
    for h in handlers:
        h.setFormatter(fmt)
        root.addHandler(h)
    root.propagate = False


@contextlib.contextmanager
def timed(what: str, logger: logging.Logger = log) -> Iterator[None]:
    """Log ``what`` when it starts and how long it took when it ends."""
    logger.info("%s ...", what)
    t0 = time.perf_counter()
    yield
    logger.info("%s done in %.2f s", what, time.perf_counter() - t0)


def progress(it: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """A tqdm progress bar on stderr (quiet when stderr is not a terminal and short)."""
    from tqdm.auto import tqdm

    yield from tqdm(it, desc=desc, total=total, mininterval=1.0, file=sys.stderr, leave=False)
