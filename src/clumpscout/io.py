"""Atomic, deterministic output writers (and the JSON report reader).

Every file we produce is written under a temporary name in the same folder and
renamed into place, so a killed job never leaves a file that looks complete.
Parquet files are written without pandas' index and with fixed options, so the
same table gives the same bytes.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

import pandas as pd

from clumpscout.errors import InputError
from clumpscout.logs import release_free_memory


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` on success.

    On any exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        # mkstemp creates the file 0600; a finished output is readable like any file the
        # user creates (0666 less the umask), by colleagues, other users' jobs, web servers
        os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


#: compressed-file name endings and their codecs: those pyarrow's CSV reader decompresses
#: on its own when given such a path (a ``.csv.gz`` Zooniverse export is read as it is)
COMPRESSION_SUFFIXES = {".gz": "gzip", ".bz2": "bz2", ".lz4": "lz4", ".zst": "zstd"}


def compression_of(path: str | os.PathLike) -> str | None:
    """The codec of a compressed file name (:data:`COMPRESSION_SUFFIXES`), else None."""
    return COMPRESSION_SUFFIXES.get(Path(path).suffix)


def open_bytes(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading bytes, decompressed on the fly when its name ends in
    one of :data:`COMPRESSION_SUFFIXES`. Damaged compressed data raise :class:`OSError`."""
    codec = compression_of(path)
    if codec is None:
        return open(path, "rb")
    import pyarrow as pa

    return io.BufferedReader(pa.input_stream(str(path), compression=codec))


@contextlib.contextmanager
def open_text_out(path: str | os.PathLike, compression: str | None = None) -> Iterator[TextIO]:
    """``path`` opened for writing UTF-8 text (newlines as written), through the
    ``compression`` codec of pyarrow when given (e.g. "zstd")."""
    if compression is None:
        with open(path, "w", newline="", encoding="utf-8") as fh:
            yield fh
        return
    import pyarrow as pa

    with io.TextIOWrapper(
        pa.output_stream(str(path), compression=compression), encoding="utf-8", newline=""
    ) as fh:
        yield fh


def _umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def parquet_options(schema) -> dict:
    """The Parquet writer's options of every table this package writes, for an Arrow
    ``schema``: zstd, and dictionary encoding for the text columns only (ids, names,
    categories: few distinct values). Numbers are written plainly: trying a dictionary on a
    column of coordinates costs a third of the writing time and saves nothing."""
    import pyarrow as pa

    def text(t) -> bool:
        return (
            pa.types.is_string(t)
            or pa.types.is_large_string(t)
            or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)
            or pa.types.is_dictionary(t)
        )

    return {
        "compression": "zstd",
        "use_dictionary": [f.name for f in schema if text(f.type)],
    }


def write_parquet(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write ``df`` to Parquet atomically and reproducibly (no index,
    :func:`parquet_options`)."""
    import pyarrow as pa

    write_table(pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False), path)


def write_table(table, path: str | os.PathLike) -> None:
    """Write a pyarrow Table to Parquet atomically with :func:`write_parquet`'s options (a
    Table read from a file that :func:`write_parquet` wrote, filtered, gives the bytes
    :func:`write_parquet` gives for the same rows as a DataFrame)."""
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, **parquet_options(table.schema))


def write_parquet_blocks(blocks: Iterable[pd.DataFrame], path: str | os.PathLike) -> None:
    """Write the concatenation of ``blocks`` to Parquet atomically, one block in memory at a
    time: each block becomes its own row group(s), so blocks of pyarrow's row-group length
    (:data:`clumpscout.model.source.BLOCK_ROWS`) give the bytes of :func:`write_parquet` on
    the whole table. The file's schema is the first block's; every block must have its
    columns and types."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        writer = None
        try:
            for df in blocks:
                table = pa.Table.from_pandas(df.reset_index(drop=True), preserve_index=False)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, **parquet_options(table.schema))
                writer.write_table(table)
                del table
                gc.collect()  # a block's frames may be cyclic garbage: free them now
                pa.default_memory_pool().release_unused()  # not cached between blocks
        finally:
            if writer is not None:
                writer.close()


def write_table_blocks(tables: Iterable, path: str | os.PathLike) -> None:
    """Write pyarrow Tables (one schema) to one Parquet file atomically, one in memory at a
    time, each its own row group(s): :func:`write_parquet_blocks` without pandas (Tables
    with the schema ``pa.Table.from_pandas`` gives their rows as a DataFrame give the same
    bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with atomic_path(path) as tmp:
        writer = None
        try:
            for table in tables:
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, **parquet_options(table.schema))
                writer.write_table(table)
                del table
                pa.default_memory_pool().release_unused()  # not cached between blocks
        finally:
            if writer is not None:
                writer.close()


def release_memory() -> None:
    """Give freed memory back to the system: collect cyclic garbage, empty pyarrow's pool
    and trim the C heap (glibc's ``malloc_trim``; a no-op elsewhere). Many small arrays
    freed at once (a pass read block by block) otherwise stay in the process's resident
    memory until they are reused. No subprocess (``ctypes.util.find_library`` runs one: a fork
    of a large process, counted in its children's peak memory)."""
    import pyarrow as pa

    gc.collect()
    pa.default_memory_pool().release_unused()
    release_free_memory()


#: pyarrow's default row-group length: blocks of this many rows, written one by one with
#: :func:`write_parquet_blocks`, give the bytes :func:`write_parquet` gives for the whole table
ROW_GROUP_ROWS = 1024 * 1024


def rechunked(frames: Iterable[pd.DataFrame], rows: int = ROW_GROUP_ROWS) -> Iterator[pd.DataFrame]:
    """The rows of ``frames`` (same columns and types) again, in blocks of exactly ``rows``
    rows but the last; frames of no rows at all give one empty block."""
    held: list[pd.DataFrame] = []
    n_held = 0
    empty = None  # the columns, from the first frame
    yielded = False
    for df in frames:
        if empty is None:
            empty = df.iloc[:0]
        while len(df):
            take = df.iloc[: rows - n_held]
            held.append(take)
            n_held += len(take)
            df = df.iloc[len(take) :]
            if n_held == rows:
                yield pd.concat(held, ignore_index=True) if len(held) > 1 else held[0]
                held, n_held, yielded = [], 0, True
    if held:
        yield pd.concat(held, ignore_index=True) if len(held) > 1 else held[0]
    elif not yielded and empty is not None:
        yield empty


def write_csv(df: pd.DataFrame, path: str | os.PathLike) -> None:
    """Write ``df`` to CSV atomically (no index)."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, lineterminator="\n")


def write_json(obj: object, path: str | os.PathLike) -> None:
    """Write ``obj`` as pretty, key-sorted JSON atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=_jsonable) + "\n")


def report_path(out: str | os.PathLike) -> Path:
    """Where a stage writes the report of output ``out``: ``<out stem>_report.json`` beside it."""
    out = Path(out)
    return out.with_name(f"{out.stem}_report.json")


def write_text(text: str, path: str | os.PathLike) -> None:
    """Write ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _jsonable(x: object) -> object:
    import numpy as np

    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return str(x)
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def read_json(path: str | os.PathLike) -> dict:
    """A JSON report another stage wrote; unreadable or broken -> :class:`InputError`."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read JSON report: {exc}", path=path) from None
