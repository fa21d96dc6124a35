"""Scale invariance: k independent copies of a project against one copy, per consensus model.

    .venv/bin/python benchmarks/scale_invariance.py \
        --boxes results/subsamples/n20/boxes.parquet --k 1 3 --models generative paper

Every copy is the boxes table with its own subject, classification and volunteer ids (no
volunteer is shared between copies), so k copies are k projects that know nothing of each
other, and a consensus model whose answer depends only on the evidence should give k times
the labels of one copy.

Arrival order (``--arrangement``):

* ``interleaved`` (default): every copy keeps its ``created_at``; the copies of a subject
  arrive together, so each working batch holds the same time slice of every copy. This is
  "the same project with k times the volunteers", the way a larger project grows, and the
  question the benchmark asks: with a fixed batch target in classifications, a batch now
  spans 1/k of the time it spanned, and the project takes k times the cycles.
* ``appended``: copy c's timestamps are shifted by c times the project's span, so the copies
  arrive one after another ("the same project run k times as long"); every copy then meets
  the batch boundaries of the single project, up to the subjects left over where two copies
  meet.

Per model and k: labels, labels / (k x labels at 1x), the labels of each copy, the subjects'
status counts, the number of cycles, the share of each cycle's boxes on the dummy facility
(first, median, last and the maximum), the health warnings, time and peak RSS of the run.
Each (model, k) runs in a fresh process (``--one``) so that its peak RSS is its own.
Timings are wall-clock on whatever else the machine is doing. docs/decisions.md#scale-invariance
explains the paper model's result.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

ARRANGEMENTS = ("interleaved", "appended")


def replicate(boxes: pd.DataFrame, k: int, arrangement: str = "interleaved") -> pd.DataFrame:
    """``k`` independent copies of a boxes table (copy 0 is the table itself).

    Copy c gets subject and classification ids shifted by c times (largest id + 1), and its
    volunteers are renamed ``c{c}:{name}`` (a prefix keeps the copy's volunteers in the same
    order as the original's); ``user_id`` (when present) is shifted like the ids. With
    ``appended`` copy c's ``created_at`` is shifted by c times (latest − earliest + 1 s).
    """
    if arrangement not in ARRANGEMENTS:
        raise ValueError(f"arrangement must be one of {ARRANGEMENTS}, not {arrangement!r}")
    if k < 1:
        raise ValueError(f"k must be at least 1, not {k}")
    s_step = int(boxes["subject_id"].max()) + 1
    c_step = int(boxes["classification_id"].max()) + 1
    has_time = "created_at" in boxes.columns
    if arrangement == "appended" and not has_time:
        raise ValueError("appended copies need a created_at column (the arrival order)")
    if has_time:
        t = boxes["created_at"]
        t_step = (t.max() - t.min()) + pd.Timedelta(seconds=1)
    u_step = None
    if "user_id" in boxes.columns and boxes["user_id"].notna().any():
        u_step = int(boxes["user_id"].max()) + 1
    names = boxes["volunteer"].astype(str)
    parts = []
    for c in range(k):
        part = boxes.copy()
        if c:
            part["subject_id"] = boxes["subject_id"] + c * s_step
            part["classification_id"] = boxes["classification_id"] + c * c_step
            part["volunteer"] = f"c{c}:" + names
            if u_step is not None:
                part["user_id"] = boxes["user_id"] + c * u_step
            if arrangement == "appended":
                part["created_at"] = boxes["created_at"] + c * t_step
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def copy_of(subject_ids, boxes: pd.DataFrame) -> np.ndarray:
    """The copy index of each (replicated) subject id."""
    s_step = int(boxes["subject_id"].max()) + 1
    return np.asarray(subject_ids, np.int64) // s_step


def _dummy_shares(report: dict) -> list[float]:
    """Per cycle: the share of the batch's boxes on the dummy facility in the kept state."""
    best = report["model"]["em_stop"] == "converge"  # else paper_code: the last state
    out = []
    for c in report["cycles"]:
        if not c["em"] or not c["boxes"]:
            continue  # a reused cycle (same batch and skills) has no EM log of its own
        kept = max(c["em"], key=lambda it: it["log_likelihood"]) if best else c["em"][-1]
        out.append(kept["dummy_boxes"] / c["boxes"])
    return out


def run_one(
    boxes_path: Path, model: str, k: int, arrangement: str, seed: int, scale_batch: bool
) -> dict:
    """One aggregation of k copies; the numbers of the benchmark table."""
    from benchmarks._measure import peak_rss_mb
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params

    boxes = pd.read_parquet(boxes_path)
    one = replicate(boxes, k, arrangement) if k > 1 else boxes
    t0 = time.perf_counter()
    params = Params.from_dict({"model": model})
    if scale_batch:
        params = replace(params, min_batch_classifications=k * params.min_batch_classifications)
    agg = Aggregator(params, seed=seed).fit(one)
    seconds = time.perf_counter() - t0
    rep = agg.report_
    per_copy = np.bincount(copy_of(agg.labels_["subject_id"], boxes), minlength=k)
    shares = _dummy_shares(rep)
    return {
        "model": model,
        "k": k,
        "arrangement": arrangement,
        "min_batch_classifications": params.min_batch_classifications,
        "labels": int(len(agg.labels_)),
        "labels_per_copy": per_copy.tolist(),
        "status": rep["status_counts"],
        "cycles": len(rep["cycles"]),
        "dummy_share_first": shares[0] if shares else None,
        "dummy_share_median": float(np.median(shares)) if shares else None,
        "dummy_share_last": shares[-1] if shares else None,
        "dummy_share_max": max(shares) if shares else None,
        "dummy_share_per_cycle": [round(s, 4) for s in shares],
        "warnings": rep["warnings"],
        "seconds": round(seconds, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def docs_markdown(rows: list[dict], args) -> str:
    """The section of docs/benchmarks.md: labels of k copies against k times one copy, the
    dummy's share per cycle, warnings and the time of each run."""
    from benchmarks.docs_table import markdown_table

    base = {r["model"]: r["labels"] for r in rows if r["k"] == 1}
    table = pd.DataFrame(
        [
            {
                "model": r["model"],
                "copies": r["k"],
                "batch (classifications)": f"{r['min_batch_classifications']:,}",
                "labels": f"{r['labels']:,}",
                "ratio to k × 1 copy": (
                    f"{r['labels'] / (r['k'] * base[r['model']]):.4f}"
                    if base.get(r["model"])
                    else ""
                ),
                "labels per copy": ", ".join(f"{x:,}" for x in r["labels_per_copy"]),
                "cycles": r["cycles"],
                "boxes on the dummy per cycle: first / median / last": " / ".join(
                    "" if v is None else f"{v:.2f}"
                    for v in (
                        r["dummy_share_first"],
                        r["dummy_share_median"],
                        r["dummy_share_last"],
                    )
                ),
                "health warnings": len(r["warnings"]),
                "seconds": r["seconds"],
                "peak RSS (MB)": r["peak_rss_mb"],
            }
            for r in rows
        ]
    )
    return "\n\n".join(
        [
            f"k independent copies of `{args.boxes}` (own subject, classification and volunteer "
            f"ids per copy), arriving {args.arrangement}, one aggregation per model and k in a "
            "process of its own"
            + (", in batches of k times the batch target" if args.scale_batch else "")
            + ". A model whose answer depends only on the evidence gives k times the labels of "
            "one copy (docs/decisions.md#scale-invariance).",
            markdown_table(table, floatfmt="{:.0f}"),
        ]
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--boxes", type=Path, required=True, help="a boxes table (Parquet)")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 3], help="numbers of copies")
    ap.add_argument("--models", nargs="+", default=["generative", "paper"])
    ap.add_argument("--arrangement", choices=ARRANGEMENTS, default="interleaved")
    ap.add_argument(
        "--scale-batch",
        action="store_true",
        help="k copies in batches of k x min_batch_classifications (the paper model's "
        "invariance, docs/decisions.md#scale-invariance)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="write every run's numbers here (JSON)")
    ap.add_argument("--one", action="store_true", help="run the first model and k only, here")
    args = ap.parse_args(argv)

    if args.one:
        from clumpscout.logs import setup_logging

        setup_logging(None, logging.WARNING)
        res = run_one(
            args.boxes, args.models[0], args.k[0], args.arrangement, args.seed, args.scale_batch
        )
        print(json.dumps(res))
        return 0

    rows = []
    for model in args.models:
        for k in args.k:
            cmd = [sys.executable, __file__, "--one", "--boxes", str(args.boxes), "--k", str(k)]
            cmd += ["--models", model, "--arrangement", args.arrangement]
            cmd += ["--seed", str(args.seed)] + (["--scale-batch"] if args.scale_batch else [])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
            r = rows[-1]
            base = next((x["labels"] for x in rows if x["model"] == model and x["k"] == 1), None)
            ratio = f"{r['labels'] / (k * base):.4f}" if base else "n/a (no k = 1 run)"
            print(
                f"{model:10s} k={k:2d} {args.arrangement:11s} batch {r['min_batch_classifications']:>7,} "
                f"labels {r['labels']:>9,} ratio to k x 1x {ratio}  per copy {r['labels_per_copy']}  "
                f"cycles {r['cycles']}  dummy share first/median/last "
                f"{r['dummy_share_first']:.3f}/{r['dummy_share_median']:.3f}/"
                f"{r['dummy_share_last']:.3f}  {r['seconds']:.0f} s, {r['peak_rss_mb']:.0f} MB",
                flush=True,
            )
            for w in r["warnings"]:
                print(f"    warning: {w}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    from benchmarks.docs_table import publish

    title = "Scale invariance: k copies of a project"
    publish("scale-invariance", title, docs_markdown(rows, args), __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
