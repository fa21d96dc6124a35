"""The boxes table as a source of row blocks: a DataFrame in memory or a Parquet file.

The aggregation never needs the whole table as Python objects: :func:`clumpscout.model.prepare.prepare`
reads it block by block into compact arrays, and the assignments table (every input row plus
two columns) is written block by block from the input again
(:meth:`clumpscout.model.aggregator.Assignments.write`). A :class:`BoxSource` gives those
blocks, in input order, as DataFrames of at most :data:`BLOCK_ROWS` rows:

* :class:`FrameSource` slices a DataFrame (the in-memory API: tests, replay, benchmarks);
* :class:`ParquetSource` reads a Parquet file's record batches (the command line and the
  rule), so memory holds one block at a time; a block is what ``pd.read_parquet`` would
  give for those rows (same dtypes), so both sources give the same bytes out.

:func:`read_boxes` reads the whole table at once (the replay and the workflow's scripts).

:data:`BLOCK_ROWS` is pyarrow's row-group length (1,048,576 rows), so a table written block by
block has the row groups of the same table written at once.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from clumpscout.errors import InputError
from clumpscout.io import ROW_GROUP_ROWS

#: rows per block: pyarrow's default row-group length, so block-wise writes keep its layout
BLOCK_ROWS = ROW_GROUP_ROWS


class BoxSource:
    """Row blocks of a boxes table, in input order (see the module docstring)."""

    path: str | os.PathLike | None = None
    n_rows: int
    columns: list[str]
    #: the table prepared for the aggregation (clumpscout.model.prepare.prepare keeps it
    #: here, so that several fits on one source read the table once)
    prepared = None

    def blocks(
        self, columns: list[str] | None = None, rows: int | None = None
    ) -> Iterator[tuple[int, pd.DataFrame]]:
        """(first row, block) pairs of ``rows`` rows (default :data:`BLOCK_ROWS`);
        ``columns``: only those (that exist), None: all."""
        raise NotImplementedError

    def frame(self) -> pd.DataFrame:
        """The whole table (for what is not streamed, e.g. per-tool aggregation)."""
        raise NotImplementedError


class FrameSource(BoxSource):
    """A DataFrame in memory."""

    def __init__(self, df: pd.DataFrame, path=None):
        self.df = df
        self.path = path
        self.n_rows = len(df)
        self.columns = [str(c) for c in df.columns]

    def blocks(self, columns=None, rows=None):
        rows = rows or BLOCK_ROWS
        cols = None if columns is None else [c for c in columns if c in self.columns]
        if cols == self.columns:  # every column, in order: nothing to select
            cols = None
        for start in range(0, max(self.n_rows, 1), rows):
            block = self.df.iloc[start : start + rows]
            if cols is not None:
                block = block[cols]
            index = block.index
            if not (isinstance(index, pd.RangeIndex) and index.start == 0 and index.step == 1):
                block = block.reset_index(drop=True)
            # (a small table, e.g. one subject of a live request, pays for every copy)
            yield start, block

    def frame(self) -> pd.DataFrame:
        return self.df


class ParquetSource(BoxSource):
    """A Parquet file read one record batch at a time."""

    def __init__(self, path):
        import pyarrow.parquet as pq

        self.path = path
        try:
            self._file = pq.ParquetFile(path)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read boxes table ({exc})", path=path) from None
        self.n_rows = int(self._file.metadata.num_rows)
        self.columns = list(self._file.schema_arrow.names)

    def blocks(self, columns=None, rows=None):
        for start, table in self.tables(columns, rows):
            try:
                df = to_pandas(table)
            except (OSError, ValueError) as exc:
                raise InputError(f"cannot read boxes table ({exc})", path=self.path) from None
            yield start, df

    def tables(self, columns=None, rows=None):
        """(first row, block) pairs as :meth:`blocks` gives them, as pyarrow Tables (the
        file's types and schema metadata, no conversion)."""
        import pyarrow as pa

        rows = rows or BLOCK_ROWS
        cols = None if columns is None else [c for c in columns if c in self.columns]
        schema = self._file.schema_arrow
        if cols is not None:
            schema = pa.schema([schema.field(c) for c in cols], metadata=schema.metadata)
        pending, have, start = [], 0, 0
        try:
            for batch in self._file.iter_batches(batch_size=rows, columns=cols):
                pending.append(batch)
                have += batch.num_rows
                while have >= rows:
                    table = pa.Table.from_batches(pending, schema=schema)
                    yield start, table.slice(0, rows)
                    rest = table.slice(rows)
                    pending, have, start = rest.to_batches(), rest.num_rows, start + rows
            if have or start == 0:
                yield start, pa.Table.from_batches(pending, schema=schema)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read boxes table ({exc})", path=self.path) from None

    def frame(self) -> pd.DataFrame:
        return read_boxes(self.path)


def read_boxes(path, columns=None) -> pd.DataFrame:
    """The boxes table from Parquet; an unreadable file is an :class:`InputError`.
    ``columns``: only these are read (those the file has; a job that needs a missing one
    says so), not the whole table."""
    try:
        if columns is not None:
            import pyarrow.parquet as pq

            have = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in have]
        return pd.read_parquet(path, columns=columns)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read boxes table ({exc})", path=path) from None


def to_pandas(table) -> pd.DataFrame:
    """A block as ``pd.read_parquet`` converts it (pandas' own conversion of an Arrow table)."""
    from pandas.io._util import arrow_table_to_pandas

    return arrow_table_to_pandas(table)


def box_source(boxes, path=None) -> BoxSource:
    """A :class:`BoxSource` for a DataFrame, a source, or the path of a Parquet file."""
    if isinstance(boxes, BoxSource):
        return boxes
    if isinstance(boxes, pd.DataFrame):
        return FrameSource(boxes, path)
    if isinstance(boxes, (str, os.PathLike, Path)):
        return ParquetSource(boxes)
    raise TypeError(f"boxes must be a DataFrame or a Parquet path, not {type(boxes).__name__}")
