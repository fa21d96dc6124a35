"""Shared helper for the thin ``script:`` adapters in this folder.

Snakemake runs each adapter in a fresh interpreter with this folder on
``sys.path``; :func:`main` puts the repository's ``src/`` first on the path (so
the adapters also work in a conda env where the package is not installed, and a
copy of the project runs its own code, not an installed checkout's), sets
NUMBA_NUM_THREADS from the rule's ``threads:``, logs to the rule's log file and
turns a data error into a one-line message and a non-zero exit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

_SRC = Path(__file__).resolve().parents[1] / "src"


def main(snakemake, fn: Callable[[object], object]) -> None:
    """Run ``fn(snakemake)`` with logging, thread settings and clean errors."""
    threads = str(getattr(snakemake, "threads", 1) or 1)
    os.environ["NUMBA_NUM_THREADS"] = threads
    os.environ.setdefault("OMP_NUM_THREADS", threads)
    if _SRC.is_dir() and sys.path[:1] != [str(_SRC)]:
        # first, even when already on the path: Snakemake's preamble appends it after
        # site-packages, where an installed (or editable) clumpscout of another checkout
        # would win, and a copied project would run that checkout's code
        if str(_SRC) in sys.path:
            sys.path.remove(str(_SRC))
        sys.path.insert(0, str(_SRC))
    from clumpscout.errors import InputError, exit_cleanly_on_sigterm
    from clumpscout.logs import log_resources, setup_logging

    log = snakemake.log[0] if len(snakemake.log) else None
    setup_logging(log)
    exit_cleanly_on_sigterm()
    try:
        fn(snakemake)
        log_resources()  # the job's exact CPU seconds and peak memory, last in its log
    except InputError as exc:
        msg = f"error: {exc.one_line()}"
        print(msg, file=sys.stderr)
        if log:
            with open(log, "a") as fh:
                fh.write(msg + "\n")
        sys.exit(2)
