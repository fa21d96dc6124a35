"""How much gold is enough: held-out ECE and count MAE against the number of gold subjects.

    .venv/bin/python benchmarks/gold_size.py --subjects 1000 --out results/gold_size \
        [--sizes 25 50 100 200 500] [--regimes clean,paper,noisy,spammers,counting] [--repeats 3]

For each regime of the grid (benchmarks/regimes.py: the same configs and stages) one universe
is simulated whose experts mark ``max(--sizes)`` subjects; the default model aggregates it
once (the fit does not depend on the gold standard: the calibration maps its labels
afterwards, clumpscout.model.calibration). Then, for each size k and repeat r, the gold
standard is the experts' marks on a random k of the expert subjects, and the calibrated
labels are scored on the subjects the experts never marked (the same held-out set for every
k) against what the project counts (the true clumps; every object in ``counting``):
ECE of p_fp, count MAE per subject (labels with p_fp < 0.5), purity and completeness at
p_fp < 0.5. The row ``gold_subjects = 0`` is the default map without a gold standard.

Writes ``gold_size.csv`` (one row per regime, size and repeat), ``gold_size_mean.csv``
(mean over repeats) and ``gold_size.png`` (ECE and count MAE against the gold size, a line
per regime), and prints the mean table.
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

from benchmarks import regimes as grid  # noqa: E402  (configs and stages)


def _scores(labels, subjects_df, truth, held_out) -> dict:
    from benchmarks.truth_scores import count_mae, label_ece

    row = {
        "ece": label_ece(labels, truth, held_out),
        "count_mae": count_mae(labels, truth, held_out),
    }
    row.update(grid._at_half(labels, truth, held_out))
    return row


def run_regime(name: str, args, work: Path) -> list[dict]:
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.calibration import CalibrationSettings, calibrate, default_calibration
    from clumpscout.model.gold_check import check_gold
    from clumpscout.model.params import Params
    from clumpscout.simulation.universe import stage_seed

    cfg = copy.deepcopy(grid.regime_config(name))
    sim = cfg.setdefault("simulate", {})
    sim["n_subjects"] = int(args.subjects)
    sim["n_expert_subjects"] = int(max(args.sizes))
    seed = int(cfg.get("seed", 20231))
    timer = grid.Timer(name)
    u = work / name
    boxes, _ = grid.build_subsample(cfg, seed, args.n, u, timer, "")
    truth = grid.truths(u)["clumps"]
    experts = grid.expert_gold(cfg, u, boxes)
    subjects = np.unique(boxes["subject_id"])
    experts = experts.restrict(np.intersect1d(experts.subjects, subjects))
    held_out = np.setdiff1d(subjects, experts.subjects)
    with timer("aggregate"):
        params = Params.from_dict({**(cfg.get("aggregate") or {}), "model": "generative"})
        res = Aggregator(params, seed=stage_seed(seed, "aggregate")).fit(boxes)
    # the experts checked against the volunteers once, before any map is fitted on them
    # (docs/decisions.md#gold-checks); every draw below is a part of them
    check_gold(res.labels_, res.subjects_, experts)
    settings = CalibrationSettings(**{**(cfg.get("calibration") or {}), "seed": seed})
    rows = []
    lab0, sub0, _ = default_calibration(res.labels_, res.subjects_, settings.weak_real)
    rows.append(
        {"regime": name, "gold_subjects": 0, "repeat": 0, **_scores(lab0, sub0, truth, held_out)}
    )
    rng = np.random.default_rng(seed)
    for k in args.sizes:
        for r in range(args.repeats if k < len(experts.subjects) else 1):
            pick = rng.choice(experts.subjects, size=min(k, len(experts.subjects)), replace=False)
            t0 = time.perf_counter()
            lab, sub, rep = calibrate(
                res.labels_, res.subjects_, experts.restrict(pick), settings, res.assignments_
            )
            rows.append(
                {
                    "regime": name,
                    "gold_subjects": int(len(pick)),
                    "repeat": r,
                    **_scores(lab, sub, truth, held_out),
                    "method": rep["method"],
                    "calibration_seconds": time.perf_counter() - t0,
                }
            )
    shutil.rmtree(u, ignore_errors=True)
    return rows


def plot(mean: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for regime, g in mean.groupby("regime", sort=False):
        g = g.loc[g["gold_subjects"] > 0]
        for ax, col in zip(axes, ("ece", "count_mae"), strict=True):
            ax.plot(g["gold_subjects"], g[col], "o-", label=regime)
    for ax, col in zip(axes, ("ECE of p_fp (held out)", "count MAE per subject"), strict=True):
        ax.set_xscale("log")
        ax.set_xlabel("gold subjects")
        ax.set_ylabel(col)
        ax.grid(alpha=0.3)
    axes[0].axhline(0.05, color="k", lw=0.8, ls="--")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def docs_markdown(df: pd.DataFrame, args, seconds: float) -> str:
    """The section of docs/benchmarks.md: ECE / count MAE per regime and gold size (means over
    the repeats), their spread over the repeats, and the time."""
    from benchmarks.docs_table import markdown_table

    g = df.groupby(["regime", "gold_subjects"], sort=False)
    mean, sd = g[["ece", "count_mae"]].mean(), g[["ece", "count_mae"]].std()
    sizes = list(dict.fromkeys(df["gold_subjects"]))
    heads = {k: "no gold" if k == 0 else f"{k} gold" for k in sizes}
    cells = pd.DataFrame(
        {
            heads[k]: [
                f"{mean.loc[(r, k), 'ece']:.3f} / {mean.loc[(r, k), 'count_mae']:.2f}"
                for r in dict.fromkeys(df["regime"])
            ]
            for k in sizes
        },
        index=list(dict.fromkeys(df["regime"])),
    ).rename_axis("regime")
    spread = (
        sd["ece"]
        .unstack(level=1)
        .reindex(columns=[k for k in sizes if k > 0])
        .rename(columns=heads)
    ).rename_axis("regime")
    repeats = g.size().unstack(level=1).rename(columns=heads).rename_axis("regime")
    return "\n\n".join(
        [
            f"{args.subjects:,} simulated subjects per regime, n = {args.n}; the simulated experts "
            f"mark {max(args.sizes):,} of them, and the gold standard is their marks on a random "
            "k of those (k in the columns; the default map without gold: `no gold`). Every "
            "number is scored on the subjects the experts never marked, against what each "
            "regime counts: ECE of p_fp / count MAE per subject, the mean over the repeats "
            "(random gold standards of each size; one where k is every expert subject).",
            markdown_table(cells, index=True),
            "The spread between gold standards of one size: the standard deviation of the ECE "
            "over the repeats.",
            markdown_table(spread, index=True),
            "Repeats per size:",
            markdown_table(repeats, index=True),
            f"The whole run took {seconds:,.0f} s (wall).",
        ]
    )


def main(argv=None) -> int:
    from clumpscout.logs import setup_logging

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--out", required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[25, 50, 100, 200, 500])
    ap.add_argument("--regimes", default=",".join(grid.REGIMES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(str(out / "gold_size.log"))
    rows = []
    for name in [r.strip() for r in args.regimes.split(",") if r.strip()]:
        rows += run_regime(name, args, out / "work")
    shutil.rmtree(out / "work", ignore_errors=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "gold_size.csv", index=False)
    cols = ["ece", "count_mae", "purity_05", "completeness_05"]
    mean = df.groupby(["regime", "gold_subjects"], sort=False)[cols].mean().reset_index()
    mean.to_csv(out / "gold_size_mean.csv", index=False)
    plot(mean, out / "gold_size.png")
    print(mean.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    from benchmarks.docs_table import publish

    body = docs_markdown(df, args, time.perf_counter() - t0)
    publish("gold-size", "How much gold is enough", body, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
