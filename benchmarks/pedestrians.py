"""Worked example: real crowd boxes with experts (the Lean Crowdsourcing pedestrians).

    .venv/bin/python benchmarks/pedestrians.py --out results/pedestrians [--gold-fraction 0.2]
        [--seeds 0 1 2] [--shared ../shared] [--set merge=inverse_variance]

Data: ``../shared/data/crowd_boxes/lean_pedestrians`` (Branson, Van Horn & Perona, "Lean
Crowdsourcing", CVPR 2017; MIT licence, copyright 2016 Grant Van Horn; README there): 1,448
street frames, 7 crowd workers each, expert boxes on 938 of them.

For each seed: the workers' boxes (benchmarks.crowd_boxes) are aggregated by the default
model with the expert boxes of ``--gold-fraction`` of the expert images as the gold standard
(clumpscout.data.gold; the rest of the expert images are held out), and the labels of the
held-out expert images are scored against the experts (benchmarks.expert_scores:
one-to-one matching at IoU ≥ 0.5, boxes clipped to the image): precision, recall and F1 of
the labels with p_fp < 0.5, ECE of p_fp, count MAE per image. The same fit is scored with
the default map without gold (docs/decisions.md#no-gold-default) and with the model's own
p_fp (p_empty). The authors' full model on the same boxes: F1 0.933 (README there).

Writes ``pedestrians.csv`` (one row per seed and view) and prints the table.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

#: the authors' full model, 7 workers per image, same scoring (README of the data)
AUTHORS_F1 = 0.933


def run(shared: Path, gold_fraction: float = 0.2, seed: int = 0, params=None) -> list[dict]:
    """The rows of one seed (gold-calibrated, no gold, p_empty)."""
    from benchmarks.crowd_boxes import read_crowd_boxes, read_crowd_gold
    from benchmarks.expert_scores import score_against_gold, split_gold
    from clumpscout.data.gold import gold_from_table
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.calibration import default_calibration

    d = shared / "data" / "crowd_boxes" / "lean_pedestrians"
    boxes, _ = read_crowd_boxes(d / "workers_179_wh.json")
    experts = gold_from_table(read_crowd_gold(d / "experts_177_wh.json"))
    gold, held_out = split_gold(experts, gold_fraction, seed)
    t0 = time.perf_counter()
    agg = Aggregator(params, seed=seed).fit(boxes, gold=gold)
    seconds = time.perf_counter() - t0
    cal = agg.report_["calibration"]
    # without gold the label boxes are the model's own (the gold run corrects them against
    # the expert boxes, docs/decisions.md#gold-boxes)
    plain = Aggregator(params, seed=seed).fit(boxes)
    views = {
        "gold": agg.labels_,
        "no_gold": plain.labels_,
        "p_empty": default_calibration(plain.labels_, plain.subjects_, 1.0)[0],
    }
    rows = []
    for view, labels in views.items():
        s = score_against_gold(labels, experts, held_out)
        rows.append(
            {
                "seed": seed,
                "view": view,
                "gold_subjects": int(len(gold.subjects)),
                **s,
                "aggregate_seconds": seconds,
                "calibration_seconds": cal.get("seconds"),
            }
        )
    return rows


def docs_markdown(df: pd.DataFrame, args, seconds: float) -> str:
    """The section of docs/benchmarks.md: the views' means over the seeds, the spread of the
    gold-calibrated view over the seeds (gold splits), and the time."""
    from benchmarks.docs_table import markdown_table

    names = {
        "gold": "calibrated on the gold images",
        "no_gold": "no gold (default map)",
        "p_empty": "the model's own p_fp (p_empty)",
    }
    cols = ["precision", "recall", "f1", "ece", "count_mae", "max_p_fp"]
    mean = df.groupby("view", sort=False)[cols].mean()
    mean.index = pd.Index([names.get(v, v) for v in mean.index], name="p_fp")
    mean = mean.rename(columns={"f1": "F1", "ece": "ECE", "count_mae": "count MAE",
                                "max_p_fp": "highest p_fp"})  # fmt: skip
    gold = df.loc[df["view"] == "gold"]
    spread = pd.DataFrame(
        [
            {
                "seeds": len(gold),
                "gold images": int(gold["gold_subjects"].iloc[0]),
                "F1 mean": gold["f1"].mean(),
                "F1 SD": gold["f1"].std(),
                "F1 median": gold["f1"].median(),
                "F1 lowest": gold["f1"].min(),
                "F1 highest": gold["f1"].max(),
                f"splits with F1 ≥ {AUTHORS_F1}": int((gold["f1"] >= AUTHORS_F1).sum()),
                "ECE median": gold["ece"].median(),
                "ECE lowest": gold["ece"].min(),
                "ECE highest": gold["ece"].max(),
            }
        ]
    )
    return "\n\n".join(
        [
            "The Lean Crowdsourcing pedestrians (Branson, Van Horn & Perona, CVPR 2017; data MIT, "
            "© 2016 Grant Van Horn; 1,448 street frames, 7 crowd workers each, expert boxes on "
            f"938): the expert boxes of {args.gold_fraction:.0%} of the expert images are the "
            "gold standard, and the labels of the other expert images are scored against the "
            "experts (one-to-one at IoU ≥ 0.5, boxes clipped to the image; precision, recall and "
            "F1 of the labels with p_fp < 0.5). Means over the seeds (random gold splits): "
            f"{', '.join(map(str, args.seeds))}.",
            markdown_table(mean, index=True),
            f"The authors' full model on the same boxes: F1 {AUTHORS_F1} (README of the data). "
            "The gold-calibrated view over the seeds:",
            markdown_table(spread),
            f"One aggregation with gold took {gold['aggregate_seconds'].mean():.1f} s on "
            f"average; the whole run {seconds:,.0f} s (wall).",
        ]
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gold-fraction", type=float, default=0.2)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an aggregate: setting for this run, e.g. --set merge=inverse_variance",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    import yaml

    params = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    rows = [r for s in args.seeds for r in run(args.shared, args.gold_fraction, s, params)]
    df = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "pedestrians.csv", index=False)
    cols = ["seed", "view", "gold_subjects", "kept", "precision", "recall", "f1", "ece",
            "count_mae", "max_p_fp"]  # fmt: skip
    print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    mean = df.groupby("view")[["precision", "recall", "f1", "ece", "count_mae"]].mean()
    print("\nmean over seeds:\n" + mean.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"the authors' full model: F1 {AUTHORS_F1}")
    from benchmarks.docs_table import publish

    body = docs_markdown(df, args, time.perf_counter() - t0)
    publish("pedestrians", "Real boxes with experts: the pedestrians", body, __file__, argv)
    return 0 if np.isfinite(df["f1"]).all() else 1


if __name__ == "__main__":
    sys.exit(main())
