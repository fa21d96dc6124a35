"""Errors for bad user input.

A data error is raised as :class:`InputError`; the command-line front end
turns it into a single line ``error: FILE:ROW: what is wrong`` and exit code 2,
never a Python traceback.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad user input: names the file, the row (if any) and the problem."""

    def __init__(self, message: str, path: object = None, row: int | None = None):
        self.message = message
        self.path = None if path is None else str(path)
        self.row = row
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.row is not None:
                where += f":row {self.row}"
            where += ": "
        return f"{where}{self.message}"
