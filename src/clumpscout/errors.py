"""Errors for bad user input.

A data error is raised as :class:`InputError`; the command-line front end
turns it into a single line ``error: FILE:ROW: what is wrong`` and exit code 2,
never a Python traceback.

ROW follows the file's own convention, so a user finds the row where their tool
shows it: in a CSV file it counts data rows from 1 (the header line is row 0,
i.e. ROW + 1 is the line number in an editor); in a Parquet table it is the
table position from 0, as pandas and pyarrow index it.
"""

from __future__ import annotations

import signal
import sys
import threading


class InputError(Exception):
    """Bad user input: names the file, the row (if any) and the problem."""

    def __init__(self, message: str, path: object = None, row: int | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.row = row
        super().__init__(self.one_line())

    def __reduce__(self):
        # rebuilt from its parts, so that an error raised in a worker process reaches the
        # caller whole (subclasses with other constructors pickle as usual)
        if type(self).__init__ is InputError.__init__:
            return (type(self), (self.message, self.path, self.row))
        return super().__reduce__()

    def one_line(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.row is not None:
                where += f":row {self.row}"
            where += ": "
        return f"{where}{self.message}"


def exit_cleanly_on_sigterm() -> None:
    """Turn SIGTERM (a scheduler cancelling the job, Snakemake stopping a run) into
    ``SystemExit(143)``, so that the command's cleanup runs as on an error: a half-written
    output's temporary file and extract's temporary folder are removed, not left beside the
    outputs. Installed only from the main thread (where Python delivers signals)."""

    def _exit(signum, _frame):
        sys.exit(128 + signum)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _exit)
