"""k independent copies of a project, for the scale benchmarks (benchmarks/bench_scale.py).

Copy 0 is the project itself; copy j > 0 has every subject, classification and volunteer
of the project again under new ids: subject_id + j x SUBJECT_STEP, classification_id + j x
CLASSIFICATION_STEP, user_id + j x USER_STEP and user_name / volunteer + "-copy<j>". A
subject id inside a JSON or text field of the copied row (subject_data, the subject
export's metadata and locations) is renamed too, so every copy is a self-consistent
Zooniverse project of its own. Rows are written block by block, each block followed by
its copies (the copies run side by side in time, as a larger project would), streamed:
memory is a block, not the project.

    replicate_export(classifications, subjects_export, k, out_dir)  # the two CSV exports
    replicate_boxes(boxes_parquet, k, out)                          # a box (or clicks) table
    replicate_gold(gold_csv, k, out)                                # a gold-standard table
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

SUBJECT_STEP = 10**9
CLASSIFICATION_STEP = 10**10
USER_STEP = 10**9
BLOCK = 1 << 24  # bytes of CSV (or rows of Parquet / 16) read at a time


def _shift_text_ints(col: pa.Array, step: int, name: str) -> pa.Array:
    """A column of decimal integers as text, each + ``step`` (empty text stays empty)."""
    text = pc.utf8_trim_whitespace(col)
    empty = pc.equal(text, "")
    ints = pc.cast(pc.if_else(empty, "0", text), pa.int64())  # raises on a non-integer
    if pc.any(pc.greater(ints, step - 1)).as_py():
        raise ValueError(f"{name}: ids reach the copy step {step:,}: copies would collide")
    shifted = pc.cast(pc.add(ints, step), pa.string())
    return pc.if_else(empty, text, shifted)


def _suffixed(col: pa.Array, j: int) -> pa.Array:
    """Each name + "-copy<j>"."""
    return pc.binary_join_element_wise(
        col, pa.scalar(f"-copy{j}", col.type), pa.scalar("", col.type)
    )


def _rename_in_text(texts: pa.Array, old_ids: np.ndarray, new_ids: np.ndarray) -> pa.Array:
    """Each text with its row's id ``old`` replaced by ``new`` (once per distinct text)."""
    enc = pc.dictionary_encode(texts)
    idx = enc.indices.to_numpy(zero_copy_only=False)
    first = np.full(len(enc.dictionary), -1, np.int64)
    first[idx[::-1]] = np.arange(len(idx))[::-1]  # first row of each distinct text
    values = enc.dictionary.to_pylist()
    renamed = [
        v.replace(str(old_ids[r]), str(new_ids[r])) if r >= 0 else v
        for v, r in zip(values, first.tolist(), strict=True)
    ]
    return pc.take(pa.array(renamed, pa.string()), enc.indices)


def copy_export_batch(batch: pa.RecordBatch, j: int) -> pa.RecordBatch:
    """Copy ``j`` of a block of a classification export (every column text)."""
    if j == 0:
        return batch
    cols = {name: batch.column(name) for name in batch.schema.names}
    sid_old = pc.cast(pc.utf8_trim_whitespace(cols["subject_ids"]), pa.int64())
    cols["subject_ids"] = _shift_text_ints(cols["subject_ids"], j * SUBJECT_STEP, "subject_ids")
    cols["classification_id"] = _shift_text_ints(
        cols["classification_id"], j * CLASSIFICATION_STEP, "classification_id"
    )
    if "user_id" in cols:
        cols["user_id"] = _shift_text_ints(cols["user_id"], j * USER_STEP, "user_id")
    cols["user_name"] = _suffixed(cols["user_name"], j)
    if "subject_data" in cols:
        old = sid_old.to_numpy(zero_copy_only=False)
        cols["subject_data"] = _rename_in_text(cols["subject_data"], old, old + j * SUBJECT_STEP)
    return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))


def replicate_export(
    classifications: str | Path, subjects_export: str | Path, k: int, out_dir: str | Path,
    compress: bool = False,
) -> tuple[Path, Path]:  # fmt: skip
    """Write ``k`` copies of a classification export (classifications.csv, or
    classifications.csv.zst with ``compress``) and of its subject export
    (subjects_export.csv) into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cls_out = out_dir / ("classifications.csv.zst" if compress else "classifications.csv")
    with open(classifications, newline="", encoding="utf-8") as fh:
        header = next(csv.reader([fh.readline()]))
    reader = pacsv.open_csv(
        classifications,
        read_options=pacsv.ReadOptions(block_size=BLOCK),
        parse_options=pacsv.ParseOptions(newlines_in_values=True),
        convert_options=pacsv.ConvertOptions(
            column_types={c: pa.string() for c in header}, strings_can_be_null=False
        ),
    )
    sink = pa.output_stream(str(cls_out), compression="zstd" if compress else None)
    options = pacsv.WriteOptions(quoting_style="needed")
    with sink, pacsv.CSVWriter(sink, reader.schema, write_options=options) as writer:
        for batch in reader:
            for j in range(k):
                writer.write_batch(copy_export_batch(batch, j))
    subj_out = out_dir / "subjects_export.csv"
    subjects = pd.read_csv(subjects_export, dtype=str, keep_default_na=False)
    copies = []
    sid = subjects["subject_id"].str.strip().astype(np.int64)
    for j in range(k):
        c = subjects.copy()
        new = (sid + j * SUBJECT_STEP).astype(str)
        c["subject_id"] = new
        for col in ("metadata", "locations"):
            if col in c.columns and j:
                c[col] = [
                    t.replace(o, n) for t, o, n in zip(c[col], sid.astype(str), new, strict=True)
                ]
        copies.append(c)
    pd.concat(copies, ignore_index=True).to_csv(subj_out, index=False, lineterminator="\n")
    return cls_out, subj_out


def copy_table_batch(batch: pa.RecordBatch, j: int) -> pa.RecordBatch:
    """Copy ``j`` of a block of a box or clicks table (ids shifted, volunteer renamed)."""
    if j == 0:
        return batch
    shifts = {"subject_id": SUBJECT_STEP, "classification_id": CLASSIFICATION_STEP,
              "user_id": USER_STEP}  # fmt: skip
    arrays = []
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if name in shifts:
            col = pc.add(col, pa.scalar(j * shifts[name], col.type))
        elif name == "volunteer":
            col = _suffixed(col, j)
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


def replicate_boxes(path: str | Path, k: int, out: str | Path) -> Path:
    """Write ``k`` copies of a box (or clicks) Parquet table to ``out``."""
    src = pq.ParquetFile(path)
    for name in ("subject_id", "classification_id"):
        if name in src.schema_arrow.names:
            top = pc.max(pq.read_table(path, columns=[name]).column(name)).as_py() or 0
            step = SUBJECT_STEP if name == "subject_id" else CLASSIFICATION_STEP
            if top >= step:
                raise ValueError(f"{name}: ids reach the copy step {step:,}: copies would collide")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(out, src.schema_arrow, compression="zstd") as writer:
        for batch in src.iter_batches(batch_size=BLOCK // 16):
            for j in range(k):
                writer.write_batch(copy_table_batch(batch, j))
    return out


def replicate_gold(path: str | Path, k: int, out: str | Path) -> Path:
    """Write ``k`` copies of a gold-standard CSV (subject_id shifted) to ``out``."""
    gold = pd.read_csv(path)
    parts = [gold.assign(subject_id=gold["subject_id"] + j * SUBJECT_STEP) for j in range(k)]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.concat(parts, ignore_index=True).to_csv(out, index=False, lineterminator="\n")
    return out
