"""The evidence behind the default map without a gold standard (docs/decisions.md#no-gold-default).

    .venv/bin/python benchmarks/no_gold_default.py --out results/no_gold [--subjects 1000]
        [--weights 0 0.1 0.25 0.5 0.75 1] [--shared ../shared]

For every regime of the grid (benchmarks/regimes.py: 1,000 subjects, n = 20) and for the
real pedestrian boxes with experts (../shared; benchmarks/pedestrians.py), one aggregation by
the default model, then for each weight w of a weakly marked label (calibration.weak_real):
the share of weakly marked labels (p_empty < 0.5, p_weak ≥ 0.5) that are what the project
counts (the counted objects: true clumps, every object in ``counting``; the experts' boxes
for the pedestrians), the ECE of p_fp, the count MAE per subject of the labels with
p_fp < 0.5, and the mean absolute error of the expected count.

Writes ``no_gold_default.csv`` and prints it.
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


def _rows(source, labels, subjects, is_real, n_true, weights) -> list[dict]:
    """Per weight: ECE, count MAE, expected-count MAE; ``is_real`` per label, ``n_true`` per
    subject (indexed by subject_id, the subjects scored)."""
    from clumpscout.metrics.reliability import calibration
    from clumpscout.model.calibration import default_calibration

    weak = (labels["p_empty"] < 0.5) & (labels["p_weak"].fillna(0) >= 0.5)
    rows = []
    for w in weights:
        lab, sub, _ = default_calibration(labels, subjects, w)
        kept = lab.loc[lab["p_fp"] < 0.5, "subject_id"].value_counts()
        kept = kept.reindex(n_true.index, fill_value=0)
        exp = sub.set_index("subject_id")["expected_count"].reindex(n_true.index)
        ok = np.isfinite(exp.to_numpy())
        rows.append(
            {
                "source": source,
                "weak_real": w,
                "weak_labels": int(weak.sum()),
                "weak_real_share": float(is_real[weak.to_numpy()].mean()) if weak.any() else np.nan,
                "ece": calibration(lab["p_fp"].to_numpy(float), ~is_real, 10)[1],
                "count_mae": float(np.abs(kept - n_true).mean()),
                "expected_count_mae": float(np.abs(exp[ok] - n_true[ok]).mean()),
            }
        )
    return rows


def regime_rows(name, args) -> list[dict]:
    from clumpscout.metrics.containment import containment
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params
    from clumpscout.simulation.universe import stage_seed

    cfg = copy.deepcopy(grid.regime_config(name))
    cfg.setdefault("simulate", {})["n_subjects"] = int(args.subjects)
    seed = int(cfg.get("seed", 20231))
    u = Path(args.out) / "work" / name
    boxes, _ = grid.build_subsample(cfg, seed, 20, u, grid.Timer(name), "")
    truth = grid.truths(u)["clumps"]
    params = Params.from_dict({**(cfg.get("aggregate") or {}), "model": "generative"})
    res = Aggregator(params, seed=stage_seed(seed, "aggregate")).fit(boxes)
    shutil.rmtree(u, ignore_errors=True)
    subjects = np.unique(boxes["subject_id"])
    hit, _ = containment(res.labels_, truth)
    n_true = truth["subject_id"].value_counts().reindex(subjects, fill_value=0)
    return _rows(name, res.labels_, res.subjects_, hit, n_true, args.weights)


def pedestrian_rows(args) -> list[dict]:
    from benchmarks.crowd_boxes import read_crowd_boxes, read_crowd_gold
    from clumpscout.data.gold import gold_from_table
    from clumpscout.metrics.matching import match_one_to_one
    from clumpscout.model.aggregator import Aggregator

    d = Path(args.shared) / "data" / "crowd_boxes" / "lean_pedestrians"
    if not d.is_dir():
        return []
    boxes, _ = read_crowd_boxes(d / "workers_179_wh.json")
    experts = gold_from_table(read_crowd_gold(d / "experts_177_wh.json"))
    res = Aggregator(seed=0).fit(boxes)
    lab = res.labels_.loc[res.labels_["subject_id"].isin(experts.subjects)].reset_index(drop=True)
    sub = res.subjects_.loc[res.subjects_["subject_id"].isin(experts.subjects)]
    real, _ = match_one_to_one(lab, experts.marks, "box")
    return _rows("pedestrians (real)", lab, sub, real, experts.counts, args.weights)


def docs_markdown(df: pd.DataFrame, args, seconds: float) -> str:
    """The section of docs/benchmarks.md: per source the share of weakly marked labels that
    are counted, and the count MAE and ECE for each weight w."""
    from benchmarks.docs_table import markdown_table

    def by_weight(col: str) -> pd.DataFrame:
        t = df.pivot(index="source", columns="weak_real", values=col)
        t = t.reindex(list(dict.fromkeys(df["source"])))
        t.columns = [f"w = {w:g}" for w in t.columns]
        return t

    share = df.groupby("source", sort=False)[["weak_labels", "weak_real_share"]].first()
    mae = by_weight("count_mae")
    mae.insert(0, "weak labels that are counted", share["weak_real_share"])
    mae.insert(0, "weak labels", share["weak_labels"])
    return "\n\n".join(
        [
            "One aggregation by the default model per source (every regime of the grid: "
            f"{args.subjects:,} subjects, n = 20; the real pedestrian boxes with their experts' "
            "boxes when ../shared is present), then the default map without a gold standard for "
            "each weight w of a weakly marked label (`calibration.weak_real`; w = 1 is the "
            "model's own p_fp). Weak labels: p_empty < 0.5 and p_weak ≥ 0.5; counted: what the "
            "source counts (the true clumps, every object in `counting`, the experts' boxes). "
            "Count MAE per subject of the labels with p_fp < 0.5:",
            markdown_table(mae.rename_axis("source"), index=True),
            "ECE of p_fp against what each source counts:",
            markdown_table(by_weight("ece").rename_axis("source"), index=True),
            "MAE of the expected count per subject:",
            markdown_table(by_weight("expected_count_mae").rename_axis("source"), index=True),
            f"The whole run took {seconds:,.0f} s (wall).",
        ]
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--weights", type=float, nargs="+", default=[0.0, 0.1, 0.25, 0.5, 0.75, 1.0])
    ap.add_argument("--regimes", default=",".join(grid.REGIMES))
    ap.add_argument("--shared", default=str(REPO.parent / "shared"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = pedestrian_rows(args)
    for name in [r for r in args.regimes.split(",") if r]:
        rows += regime_rows(name, args)
    df = pd.DataFrame(rows)
    df.to_csv(out / "no_gold_default.csv", index=False)
    print(df.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    from benchmarks.docs_table import publish

    body = docs_markdown(df, args, time.perf_counter() - t0)
    publish("no-gold-default", "The default map without a gold standard", body, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
