"""ECSV tables written fast, byte for byte as astropy writes them.

astropy's ECSV writer turns every cell into text with ``str(col[idx])``, one numpy scalar
at a time (~5 µs a cell: 10-25 s for the labels of one paper-scale aggregation).
:func:`write_ecsv` is the same writer (header, quoting, line ends: astropy's own code) with
the cells of 1-d integer, boolean and float64 columns converted in one pass through
``tolist()``: Python's ``str`` of an int, a bool or a float gives the same text as numpy's
for the scalar (both print the shortest repr that round-trips, ``nan``, ``inf``), so the
file is unchanged; other columns (text, objects, several dimensions) go the usual way. A
table of such columns only (the labels) is also joined into lines without the csv module.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
from astropy.io.ascii import ecsv as _ecsv
from astropy.table import Table


def _fast_kind(col) -> bool:
    """Can the column's cells be converted with ``tolist()`` and give numpy's text?"""
    dt = col.info.dtype
    return col.ndim == 1 and (dt.kind in "biu" or (dt.kind == "f" and dt.itemsize == 8))


def _cell_text(col) -> list[str]:
    """astropy's text of every cell of ``col`` (EcsvData.str_vals, one column)."""
    if _fast_kind(col):
        vals = [str(v) for v in np.asarray(col).tolist()]
    elif col.ndim > 1 or col.info.dtype.kind == "O":
        vals = []
        for idx in range(len(col)):
            obj = col[idx]
            try:
                obj = obj.tolist()
            except AttributeError:
                pass
            vals.append(json.dumps(obj, separators=(",", ":")))
    else:
        vals = [str(col[idx]) for idx in range(len(col))]
    if hasattr(col, "mask") and col.ndim == 1:
        for idx in np.flatnonzero(np.asarray(col.mask)):
            vals[idx] = ""
    return vals


class _FastEcsvData(_ecsv.EcsvData):
    def write(self, lines):
        """The data lines; a table of 1-d numeric and boolean columns only is joined here:
        its cells never hold the delimiter, a quote or a line end, so the csv module would
        quote nothing but the empty (masked) cells, which astropy writes as ``""``."""
        if self.splitter.delimiter != " " or not all(_fast_kind(c) for c in self.cols):
            return super().write(lines)
        if callable(self.start_line):
            raise TypeError("Start_line attribute cannot be callable for write()")
        while len(lines) < (self.start_line or 0):
            lines.append(itertools.cycle(self.write_spacer_lines))
        cols = []
        for col in self.str_vals():
            cols.append([v if v else '""' for v in col] if "" in col else col)
        lines.extend(map(" ".join, zip(*cols, strict=True)))
        return None

    def str_vals(self):
        for col in self.cols:
            try:
                col.str_vals = _cell_text(col)
            except TypeError as exc:
                raise TypeError(
                    f"could not convert column {col.info.name!r} to string: {exc}"
                ) from exc
        return [col.str_vals for col in self.cols]


class _FastEcsv(_ecsv.Ecsv):
    """astropy's ECSV writer with :class:`_FastEcsvData` (format name ``clumpscout_ecsv``)."""

    _format_name = "clumpscout_ecsv"
    _description = "ECSV, numeric cells converted in one pass (clumpscout)"
    _io_registry_can_write = False  # not offered as Table.write(format=...)
    data_class = _FastEcsvData


def write_ecsv(table: Table, path: str | Path, rows: int = 100_000) -> None:
    """Write ``table`` to ``path`` as ECSV, the bytes of ``table.write(path,
    format="ascii.ecsv")``, ``rows`` rows at a time (the header once, then every block's data
    lines), so a large table's cells are never all held as text at once."""
    import gc
    import io

    from astropy.io import ascii as _ascii

    with open(path, "w") as fh:
        for start in range(0, max(len(table), 1), rows):
            buf = io.StringIO()
            _ascii.write(table[start : start + rows], buf, format=_FastEcsv._format_name)
            lines = buf.getvalue().splitlines(keepends=True)
            if start > 0:  # drop the header: its comment lines and the column names
                n_head = next(i for i, line in enumerate(lines) if not line.startswith("#"))
                lines = lines[n_head + 1 :]
            fh.writelines(lines)
            del buf, lines
            gc.collect()  # a slice's table is cyclic garbage: free it before the next block
