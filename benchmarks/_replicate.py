"""k independent copies of a project's boxes table: a project k times as large.

    .venv/bin/python benchmarks/_replicate.py --boxes results/subsamples/n20/boxes.parquet \\
        --k 10 --out /tmp/x10/boxes.parquet [--gold results/gold/gold.csv]

Copy c (0 ≤ c < k) of every row gets its own subject, classification and volunteer: ids
``id + c · stride`` (``stride``: the power of ten above the largest id, so copy 0 keeps the
input's ids and a copy's ids read as the original's), volunteer names ``name`` for copy 0
and ``name~c`` for the others (``user_id`` shifted like the ids; a row without a name stays
without one, it is a volunteer of its own per classification anyway).

Arrival order: interleaved. Every copy keeps its rows' ``created_at``, so the copies'
subjects arrive side by side over the same period, as the subjects of one project k times
as large (k times the subjects and volunteers in the same months) would; the aggregation's
queue (subjects by their last classification, subject_id breaking ties) then alternates
between copies, and every working batch holds a mix of them. Appending the copies one after
the other in time would instead be one project run k times as long, whose batches each
hold one copy. In the file, each input block is followed by its k copies, so a file sorted
by subject stays sorted by subject within each copy.

The gold standard (``--gold``) is copied the same way (subject ids), so that a calibration
on it sees k times the gold subjects.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

#: integer id columns shifted by ``c · stride`` in copy c
ID_COLUMNS = ("subject_id", "classification_id", "user_id")


def strides(df: pd.DataFrame) -> dict[str, int]:
    """Per id column, the power of ten above its largest value."""
    out = {}
    for col in ID_COLUMNS:
        if col in df.columns and df[col].notna().any():
            out[col] = 10 ** len(str(int(df[col].max())))
    return out


def copy_frame(df: pd.DataFrame, c: int, stride: dict[str, int]) -> pd.DataFrame:
    """Copy ``c`` of the rows ``df`` (copy 0 is ``df`` itself)."""
    if c == 0:
        return df
    out = df.copy()
    for col, s in stride.items():
        if col in out.columns:
            out[col] = out[col] + c * s
    if "volunteer" in out.columns:
        v = out["volunteer"]
        out["volunteer"] = v.where(v.isna(), v.astype(str) + f"~{c}")
    return out


def replicate_frame(df: pd.DataFrame, k: int) -> pd.DataFrame:
    """k copies of a boxes table (module docstring), copy after copy."""
    stride = strides(df)
    return pd.concat([copy_frame(df, c, stride) for c in range(k)], ignore_index=True)


def replicate_parquet(src, dst, k: int) -> int:
    """k copies of the Parquet boxes table ``src`` written to ``dst`` block by block (each
    input block followed by its copies); the number of rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = pq.ParquetFile(src)
    ids = [c for c in ID_COLUMNS if c in f.schema_arrow.names]
    maxima = pq.read_table(src, columns=ids).to_pandas()
    stride = strides(maxima)
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    writer = None
    try:
        for batch in f.iter_batches(batch_size=1 << 20):
            df = pa.Table.from_batches([batch]).to_pandas()
            for c in range(k):
                t = pa.Table.from_pandas(copy_frame(df, c, stride), preserve_index=False)
                if writer is None:
                    writer = pq.ParquetWriter(dst, t.schema, compression="zstd")
                writer.write_table(t.cast(writer.schema))
                n += t.num_rows
    finally:
        if writer is not None:
            writer.close()
    return n


def replicate_gold(src, dst, k: int, boxes_src) -> None:
    """The gold-standard CSV with its subjects copied as :func:`replicate_parquet` copies
    the boxes' (same stride as the boxes table ``boxes_src``)."""
    import pyarrow.parquet as pq

    gold = pd.read_csv(src)
    ids = pq.read_table(boxes_src, columns=["subject_id"]).to_pandas()
    s = strides(ids)["subject_id"]
    out = pd.concat(
        [gold.assign(subject_id=gold["subject_id"] + c * s) for c in range(k)], ignore_index=True
    )
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    out.to_csv(dst, index=False, lineterminator="\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boxes", required=True, help="the boxes table (Parquet)")
    ap.add_argument("--k", type=int, required=True, help="number of copies (1: the input)")
    ap.add_argument("--out", required=True, help="the replicated boxes table (Parquet)")
    ap.add_argument("--gold", default=None, help="gold-standard CSV to replicate too")
    ap.add_argument("--gold-out", default=None, help="where (default: beside --out)")
    a = ap.parse_args(argv)
    n = replicate_parquet(a.boxes, a.out, a.k)
    print(f"{a.out}: {n:,} rows ({a.k} copies)")
    if a.gold:
        dst = a.gold_out or str(Path(a.out).with_name("gold.csv"))
        replicate_gold(a.gold, dst, a.k, a.boxes)
        print(f"{dst}: gold of {a.k} copies")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
