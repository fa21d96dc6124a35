"""Early retirement replayed on every regime of the grid (clumpscout.evaluation.replay).

    .venv/bin/python benchmarks/replay_regimes.py --subjects 10000 --out results/replay \
        [--regimes paper,counting] [--seed S] [--keep-work] [--gold-fraction 0.05]

For each regime (``resources/regimes/{regime}.yaml`` merged over config.yaml, as in
``benchmarks/regimes.py``) the script simulates the universe with ``--subjects`` subjects
(all their classifications: no subsample), makes the boxes table (extract → subjects →
boxes, as the workflow does), aggregates all classifications (the full-data labels) and
replays them in arrival order with every policy of the regime's ``replay:`` section.

Gold standard (docs/decisions.md#gold-standard): the simulated experts mark
``--gold-fraction`` of the subjects, as in the regime grid; the full-data labels are
calibrated on them (cross-fitted) and the replay learns its label map from them as their
classifications arrive (docs/decisions.md#live-retirement). Gold subjects are never
retired early (every policy pays their classifications in ``effort``) and are not scored.
``--gold-fraction 0`` runs without gold (the default map). Truth: what the project counts
(the true clumps; in ``counting`` every object), as the regime grid scores; ``lost`` is
against the full-data labels with p_fp < 0.5.

Outputs in ``--out``: ``replay.csv`` (one row per regime, policy and setting; columns
regime plus those of :data:`clumpscout.evaluation.replay.COLUMNS`; one ``policy = full``
row per regime), ``replay_best.csv`` (per regime the least-effort setting losing at most
``replay.max_lost`` of the full-data objects with purity within ``max_purity_drop``, and
at the same effort the fixed-n setting next below it), ``replay_<regime>.png`` (the Pareto
figure), ``retirement_<regime>.parquet`` and ``replay_report.json`` (timings per stage).

``--speed`` times the replay alone (simulate and boxes aside, no full-data aggregation:
``lost`` is then meaningless), e.g. at the paper's size:
``benchmarks/replay_regimes.py --speed --subjects 85286 --regimes paper --refit-growth 0.2 --out DIR``.
"""

from __future__ import annotations

import argparse
import json
import logging
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

log = logging.getLogger("clumpscout.replay_benchmark")


def full_boxes(cfg: dict, seed: int, universe: Path, timer) -> pd.DataFrame:
    """Simulate the regime's universe and make its boxes table (every classification)."""
    from clumpscout.data.boxes import make_boxes
    from clumpscout.data.subjects import build_subjects
    from clumpscout.simulation.universe import simulate_universe, stage_seed

    with timer("simulate"):
        simulate_universe(dict(cfg["simulate"]), stage_seed(seed, "simulate"), universe)
    with timer("extract, subjects, boxes"):
        clicks, _ = grid.extract_with_config(cfg, universe / "classifications.csv", universe)
        subjects = build_subjects(
            catalogue=universe / "galaxies.csv" if grid.has_catalogue(cfg) else None,
            subjects_export=universe / "subjects_export.csv",
            cfg=dict(cfg.get("subjects") or {}),
            box_side=(cfg.get("export") or {}).get("box_side"),
        )
        return make_boxes(clicks, subjects)


def run_regime(name: str, args, out: Path, work: Path) -> tuple[pd.DataFrame, dict]:
    from clumpscout.evaluation import replay as rp
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.calibration import CalibrationSettings
    from clumpscout.model.params import Params
    from clumpscout.simulation.universe import stage_seed

    cfg = grid.regime_config(name)
    sim = cfg.setdefault("simulate", {})
    sim["n_subjects"] = int(args.subjects)
    sim["n_expert_subjects"] = max(1, int(round(args.gold_fraction * args.subjects)))
    seed = int(args.seed if args.seed is not None else cfg.get("seed", 20231))
    timer = grid.Timer(name)
    universe = work / name
    boxes = full_boxes(cfg, seed, universe, timer)
    truth = grid.truths(universe)["clumps"]
    gold = None
    if args.gold_fraction > 0:
        with timer("gold standard"):
            gold = grid.expert_gold(cfg, universe, boxes)
    cal = CalibrationSettings(
        **{**dict(cfg.get("calibration") or {}), "seed": stage_seed(seed, "aggregate")}
    )
    params = Params.from_dict(dict(cfg.get("aggregate") or {}))
    settings = rp.Settings.from_dict(cfg.get("replay"))
    if args.speed:  # the replay's own cost only: no full-data labels to score against
        settings = rp.Settings.from_dict({**(cfg.get("replay") or {}), **args.speed_settings})
        cols = ("subject_id", "x1", "y1", "x2", "y2", "x", "y", "p_fp")
        full = pd.DataFrame({c: pd.Series(dtype=float) for c in cols})
    else:
        with timer("full-data aggregation"):
            agg = Aggregator(params, seed=stage_seed(seed, "aggregate"), calibration=cal)
            full = agg.fit(boxes, gold=gold).labels_
    with timer("replay"):
        r = rp.run_replay(boxes, params, settings, gold=gold, calibration=cal)
    with timer("scoring"):
        table, points = rp.evaluate(r, params, settings, full, truth)
    rp.plot(table, out / f"replay_{name}.png", title=f"{name}, {args.subjects} subjects")
    points.to_parquet(out / f"retirement_{name}.parquet", index=False)
    if not args.keep_work:
        shutil.rmtree(universe, ignore_errors=True)
    table.insert(0, "regime", name)
    report = {
        "seed": seed,
        "classifications": int(len(r.cls)),
        "subjects": int(r.cls["subject_id"].nunique()),
        "refits": len(r.refits),
        "gold_subjects": int(len(r.gold_subjects)),
        "label_maps": len(r.maps),
        "refit_seconds": round(sum(f["seconds"] for f in r.refits), 1),
        "seconds": {k: round(v, 1) for k, v in timer.seconds.items()},
        "best": rp.best_setting(table.drop(columns="regime"), settings),
    }
    return table, report


def best_rows(table: pd.DataFrame, reports: dict) -> pd.DataFrame:
    """Per regime the best setting and the fixed n with the largest effort not above it."""
    rows = []
    for regime, rep in reports.items():
        best = rep["best"]
        t = table.loc[table["regime"] == regime]
        full = t.loc[t["policy"] == "full"].iloc[0]
        if best is None:
            rows.append({"regime": regime, "policy": "none meets the loss", "effort": np.nan})
            continue
        fixed = t.loc[(t["policy"] == "fixed") & (t["effort"] <= best["effort"] + 1e-12)]
        fx = fixed.sort_values("effort").iloc[-1] if len(fixed) else None
        rows.append(
            {
                "regime": regime,
                **{k: best[k] for k in ("policy", "setting", "effort", "lost", "purity")},
                **{k: best[k] for k in ("completeness", "count_mae")},
                "saved": 1.0 - best["effort"],
                "purity_full_data": full["purity"],
                "fixed_n_same_effort": np.nan if fx is None else fx["setting"],
                "fixed_effort": np.nan if fx is None else fx["effort"],
                "fixed_lost": np.nan if fx is None else fx["lost"],
                "fixed_completeness": np.nan if fx is None else fx["completeness"],
                "fixed_count_mae": np.nan if fx is None else fx["count_mae"],
            }
        )
    return pd.DataFrame(rows)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--subjects", type=int, default=1000)
    p.add_argument("--out", required=True)
    p.add_argument("--regimes", default=None, help="comma-separated (default: every regime)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep-work", action="store_true")
    p.add_argument(
        "--gold-fraction",
        type=float,
        default=0.05,
        help="share of the subjects the simulated experts mark (the gold standard; 0: none)",
    )
    p.add_argument(
        "--speed",
        action="store_true",
        help="time the replay only (no full-data aggregation; lost is not measured)",
    )
    p.add_argument("--refit-growth", type=float, default=None, help="override replay.refit_growth")
    args = p.parse_args(argv)
    args.speed_settings = {} if args.refit_growth is None else {"refit_growth": args.refit_growth}
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from clumpscout.logs import setup_logging

    setup_logging(out / "replay.log", logging.INFO)
    for name in ("clumpscout.model.em", "clumpscout.model.aggregator"):
        logging.getLogger(name).setLevel(logging.WARNING)
    regimes = args.regimes.split(",") if args.regimes else grid.available_regimes()
    work = out / "work"
    tables, reports = [], {}
    t0 = time.perf_counter()
    for name in regimes:
        table, rep = run_regime(name, args, out, work)
        tables.append(table)
        reports[name] = rep
        log.info("[%s] best: %s", name, rep["best"])
        # written after every regime, so a long run leaves what it has
        pd.concat(tables).to_csv(out / "replay.csv", index=False, float_format="%.6g")
        (out / "replay_report.json").write_text(json.dumps(reports, indent=1, default=float))
    table = pd.concat(tables, ignore_index=True)
    best_rows(table, reports).to_csv(out / "replay_best.csv", index=False, float_format="%.4g")
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    log.info("replay benchmark done in %.1f s: %s", time.perf_counter() - t0, out / "replay.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
