"""The paper's expert comparison (§6.3) at the paper's size, with the cross-fitted gold standard.

    .venv/bin/python benchmarks/expert_comparison.py --out results/expert_comparison \
        [--subjects 85286] [--experts 1000] [--n 20]

A universe of the paper's size (resources/paper_scale.yaml over config.yaml: 85,286 subjects,
three experts on 1,000 of them) goes through extract → subjects → boxes → subsample to n
classifications per subject (the workflow's Python API, as benchmarks/regimes.py). The
default model aggregates it with the experts' marks as the gold standard (every expert
subject is a gold subject, so each one's p_fp is cross-fitted: its own experts never enter
its map, docs/decisions.md#gold-standard); the paper's model aggregates it too. Both are
scored against the experts' clicks with the paper's rule (clumpscout.evaluation.compare:
a kept label is true when it holds a click of any expert; completeness counts expert clicks)
at p_fp < 0.5, for all labels and for the normal subset, beside the paper's numbers
(all clumps: purity ≈ 0.35, completeness ≈ 0.97).

Writes ``expert_comparison.csv`` and prints it.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks import regimes as grid  # noqa: E402

#: the paper's §6.3 numbers for all clumps at its chosen threshold
PAPER = {"purity": 0.35, "completeness": 0.97}


def _at_half(labels: pd.DataFrame, points: pd.DataFrame, subjects) -> list[dict]:
    from clumpscout.evaluation.compare import score_points

    kept = labels.assign(p_fp=np.where(labels["p_fp"] < 0.5, 0.0, 1.0))
    curve, _ = score_points(kept, points, thresholds=3, subjects=subjects)
    rows = curve.loc[curve["threshold"] == 0.5]  # p* = 0.5 keeps exactly p_fp < 0.5
    return [
        {
            "subset": r.subset,
            "purity": r.purity,
            "completeness": r.completeness,
            "kept": int(r.n_kept),
            "expert_clicks": int(r.n_points),
        }  # fmt: skip
        for r in rows.itertuples()
    ]


def docs_markdown(df: pd.DataFrame, args, cal: dict, seconds: float) -> str:
    """The section of docs/benchmarks.md: purity and completeness at p_fp < 0.5 per method and
    subset beside the paper's, the calibration's held-out agreement, and the time."""
    from benchmarks.docs_table import markdown_table

    wide = df.pivot_table(
        index="method", columns="subset", values=["purity", "completeness"], sort=False
    )
    wide.columns = [f"{what} ({subset})" for what, subset in wide.columns]
    kept = df.groupby("method", sort=False)["kept"].max()
    table = wide.assign(**{"kept labels": kept}).reset_index()
    paper = {"method": "the paper (§6.3, all clumps)"}
    paper.update({c: "" for c in table.columns if c != "method"})
    paper.update(
        {f"purity ({s})": f"≈ {PAPER['purity']}" for s in df["subset"].unique() if s == "all"}
    )
    paper.update(
        {
            f"completeness ({s})": f"≈ {PAPER['completeness']}"
            for s in df["subset"].unique()
            if s == "all"
        }
    )
    table = pd.concat([table.astype(object), pd.DataFrame([paper])], ignore_index=True)
    held = cal.get("held_out") or {}
    agg = df.groupby("method", sort=False)["aggregate_seconds"].first()
    return "\n\n".join(
        [
            f"A universe with the paper-scale settings ({args.subjects:,} subjects, three experts on "
            f"{args.experts:,}), n = {args.n}; the paper's scoring: a kept label (p_fp < 0.5) is "
            "true when it holds a click of any expert, completeness counts expert clicks. "
            "`generative` is calibrated on every expert subject (cross-fitted: a subject's own "
            "experts never enter its map); `generative_no_gold` is the default map, "
            "`generative_p_empty` the model's own p_fp; `paper` is the reproduction preset.",
            markdown_table(table),
            "The calibration's own agreement with the experts on the gold subjects (held out "
            "by the cross-fitting): "
            + (", ".join(f"{k} {v:.3f}" for k, v in held.items() if isinstance(v, float)) or "-")
            + f"; it took {cal.get('seconds', float('nan')):.1f} s.",
            "Aggregation: "
            + ", ".join(f"{m} {v:,.0f} s" for m, v in agg.items() if m in ("generative", "paper"))
            + f"; the whole run {seconds:,.0f} s (wall).",
        ]
    )


def main(argv=None) -> int:
    from clumpscout.logs import setup_logging
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.calibration import default_calibration
    from clumpscout.model.params import Params
    from clumpscout.simulation.universe import stage_seed

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--subjects", type=int, default=85286)
    ap.add_argument("--experts", type=int, default=1000)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(str(out / "expert_comparison.log"))
    cfg = grid._deep_update(
        grid._load_yaml(REPO / "config.yaml"), grid._load_yaml(REPO / "resources/paper_scale.yaml")
    )
    cfg = copy.deepcopy(cfg)
    cfg["simulate"]["n_subjects"] = args.subjects
    cfg["simulate"]["n_expert_subjects"] = args.experts
    seed = int(cfg.get("seed", 20231))
    timer = grid.Timer("paper scale")
    u = out / "work"
    boxes, _ = grid.build_subsample(cfg, seed, args.n, u, timer, "")
    clicks, _ = grid.extract_with_config(cfg, u / "expert_classifications.csv", u)
    gold = grid.expert_gold(cfg, u, boxes)
    experts = np.intersect1d(gold.subjects, np.unique(boxes["subject_id"]))
    rows = []
    agg = dict(cfg.get("aggregate") or {})
    for model in ("generative", "paper"):
        t0 = time.perf_counter()
        res = Aggregator(
            Params.from_dict({**agg, "model": model}), seed=stage_seed(seed, "aggregate")
        ).fit(boxes, gold=gold if model == "generative" else None)
        seconds = time.perf_counter() - t0
        views = {model: res.labels_}
        if model == "generative":
            views["generative_no_gold"] = default_calibration(res.labels_, res.subjects_)[0]
            views["generative_p_empty"] = default_calibration(res.labels_, res.subjects_, 1.0)[0]
            cal = res.report_["calibration"]
        for view, labels in views.items():
            for r in _at_half(labels, clicks, experts):
                rows.append({"method": view, **r, "aggregate_seconds": seconds})
    shutil.rmtree(u, ignore_errors=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "expert_comparison.csv", index=False)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"paper (all clumps): purity ≈ {PAPER['purity']}, completeness ≈ {PAPER['completeness']}")
    print(f"calibration: {cal.get('seconds')} s, held out: {cal.get('held_out')}")
    from benchmarks.docs_table import publish

    body = docs_markdown(df, args, cal, time.perf_counter() - t_start)
    title = "The paper's expert comparison at the paper's size"
    publish("expert-comparison", title, body, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
