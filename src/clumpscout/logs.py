"""Logging and progress helpers: every stage says what it did and how long it took."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
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
    """Log ``what`` when it starts and how long it took when it ends: wall seconds and the
    process's CPU seconds (every thread; on a busy machine the wall time varies, the CPU
    time much less)."""
    logger.info("%s ...", what)
    t0, c0 = time.perf_counter(), time.process_time()
    yield
    logger.info(
        "%s done in %.2f s (CPU %.2f s)",
        what,
        time.perf_counter() - t0,
        time.process_time() - c0,
    )


def since_start() -> float | None:
    """Wall seconds since this process started (Linux: /proc; None elsewhere)."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def log_startup(logger: logging.Logger = log) -> None:
    """Log the job's start-up: the seconds from the process's start to now (interpreter,
    imports, configuration) and its CPU seconds so far. Call it where the work begins."""
    wall = since_start()
    logger.info(
        "start-up done in %s s (CPU %.2f s)",
        "?" if wall is None else f"{wall:.2f}",
        time.process_time(),
    )


def log_resources(logger: logging.Logger = log) -> None:
    """Log what the process has used so far: wall seconds since it started, CPU seconds and
    peak resident memory, its own and its finished children's (exact, from the kernel;
    Snakemake's ``benchmark:`` files sample a job every 30 s). The workflow's scripts log it
    as their last line; benchmarks/bench_dag_scale.py reads it."""
    import resource

    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    wall = since_start()
    logger.info(
        "job resources: wall %s s, CPU %.2f s, peak RSS %.0f MB; children CPU %.2f s, "
        "peak RSS %.0f MB",
        "?" if wall is None else f"{wall:.2f}",
        me.ru_utime + me.ru_stime,
        me.ru_maxrss / 1024,
        kids.ru_utime + kids.ru_stime,
        kids.ru_maxrss / 1024,
    )


@functools.cache
def _libc():
    try:
        return ctypes.CDLL(None)  # the process's own symbols (libc's among them)
    except OSError:
        return None


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system now (glibc's ``malloc_trim``; a
    no-op elsewhere). Arrays freed by a thread stay in its arena, so without it a job's
    peak RSS adds up every arena's high-water mark, not what it holds at once
    (docs/decisions.md#replay-memory)."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def progress(it: Iterable[T], desc: str, total: int | None = None) -> Iterator[T]:
    """A tqdm progress bar on stderr (quiet when stderr is not a terminal and short)."""
    from tqdm.auto import tqdm

    yield from tqdm(it, desc=desc, total=total, mininterval=1.0, file=sys.stderr, leave=False)
