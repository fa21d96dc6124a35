"""The clicks of pass 2 held by subject range, so that extract's memory is a range, not the
export (docs/decisions.md#extract-memory).

The clicks table is sorted by subject, then classification and click order, but the export
holds classifications in arrival order. :class:`ClickBuckets` splits the kept
classifications into ranges of subject ids of about :data:`BUCKET_CLASSIFICATIONS`
classifications each (from pass 1, before any JSON is read), and pass 2 hands its clicks on
in blocks (:meth:`clumpscout.data.zooniverse_annotations.Pass2.run`): each block's clicks are appended
to their range's file (Arrow IPC, in a temporary folder). The ranges are then read back one
at a time, in subject order, and each is sorted and assembled on its own: the concatenation
is the table one sort of every click would give. A project with one range keeps its clicks
in memory and writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

#: kept classifications per subject range (a range's clicks are sorted and assembled at once)
BUCKET_CLASSIFICATIONS = 500_000


def subject_ranges(sid: np.ndarray, per_range: int = BUCKET_CLASSIFICATIONS) -> np.ndarray:
    """The range of each classification (``sid``: its subject): ranges of consecutive subject
    ids, numbered in subject order, each starting at a subject before which a multiple of
    ``per_range`` classifications has passed (a subject is never split; a range may be
    empty)."""
    if len(sid) == 0:
        return np.zeros(0, dtype=np.int32)
    _, inverse, counts = np.unique(sid, return_inverse=True, return_counts=True)
    before = np.cumsum(counts) - counts
    return (before // int(per_range))[inverse].astype(np.int32)


class ClickBuckets:
    """Clicks (column dicts of :meth:`clumpscout.data.zooniverse_annotations.Collector.drain`, whose
    ``row`` is the kept classification's position) kept by subject range.

    Every click gets ``seq``, its place in the order the clicks were added (the click order
    of the one-sort table). ``directory`` holds the ranges' files when there is more than one
    range; the caller removes it.
    """

    def __init__(self, sid: np.ndarray, directory: str | Path, per_range: int | None = None):
        self.range_of = subject_ranges(sid, per_range or BUCKET_CLASSIFICATIONS)
        self.n_ranges = int(self.range_of.max()) + 1 if len(self.range_of) else 1
        self.directory = Path(directory)
        self.seq = 0
        self.in_memory: list[dict[str, np.ndarray]] = []
        self.writers: dict[int, tuple[pa.NativeFile, pa.ipc.RecordBatchStreamWriter]] = {}
        self.template: dict[str, np.ndarray] | None = None

    def add(self, cols: dict[str, np.ndarray]) -> None:
        """Append one block of clicks (file order)."""
        n = len(cols["row"])
        cols["seq"] = np.arange(self.seq, self.seq + n, dtype=np.int64)
        self.seq += n
        if self.template is None:
            self.template = {k: v[:0] for k, v in cols.items()}
        if n == 0:
            return
        if self.n_ranges == 1:
            self.in_memory.append(cols)
            return
        b = self.range_of[cols["row"]]
        order = np.argsort(b, kind="stable")
        sorted_b = b[order]
        starts = np.flatnonzero(np.r_[True, sorted_b[1:] != sorted_b[:-1]])
        for s, e in zip(starts, np.r_[starts[1:], n], strict=True):
            idx = order[s:e]
            batch = pa.RecordBatch.from_pydict({k: v[idx] for k, v in cols.items()})
            self._writer(int(sorted_b[s]), batch.schema).write_batch(batch)

    def _writer(self, b: int, schema: pa.Schema) -> pa.ipc.RecordBatchStreamWriter:
        if b not in self.writers:
            sink = pa.OSFile(str(self.directory / f"range-{b:06d}.arrows"), "wb")
            self.writers[b] = (sink, pa.ipc.new_stream(sink, schema))
        return self.writers[b][1]

    def close(self) -> None:
        """Close the ranges' files (done by :meth:`ranges`; also on an error)."""
        for sink, writer in self.writers.values():
            writer.close()
            sink.close()
        self.writers = {}

    def ranges(self) -> Iterator[dict[str, np.ndarray]]:
        """The clicks of each range that has any, in subject order, one range in memory at a
        time (none at all: one empty column dict)."""
        if self.n_ranges == 1:
            parts, self.in_memory = self.in_memory, []
            if parts:
                yield {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
            elif self.template is not None:
                yield self.template
            return
        names = sorted(self.writers)
        self.close()
        if not names and self.template is not None:
            yield self.template
        for b in names:
            path = self.directory / f"range-{b:06d}.arrows"
            with pa.OSFile(str(path), "rb") as source:  # read into memory, not mapped
                table = pa.ipc.open_stream(source).read_all()
            cols = {k: table.column(k).to_numpy() for k in table.column_names}
            del table
            path.unlink()
            yield cols
