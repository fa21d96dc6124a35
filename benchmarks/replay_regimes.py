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


def _pct(x) -> str:
    return "" if pd.isna(x) else f"{x:.1%}"


def docs_markdown(table: pd.DataFrame, reports: dict, args, seconds: float) -> str:
    """The section of docs/benchmarks.md: per regime the best setting against fixed n and
    Caesar's rule at the same target, and the time per stage (--speed: the time only)."""
    from benchmarks.docs_table import markdown_table
    from clumpscout.evaluation import replay as rp

    rows = []
    for _, b in best_rows(table, reports).iterrows():
        regime = b["regime"]
        t = table.loc[table["regime"] == regime].drop(columns="regime")
        full = t.loc[t["policy"] == "full"].iloc[0]
        settings = rp.Settings.from_dict(grid.regime_config(regime).get("replay"))
        caesar = rp.best_setting(t.loc[t["policy"].isin(["full", "caesar"])], settings)
        row = {
            "regime": regime,
            "full data: P / C / count MAE": (
                f"{full['purity']:.3f} / {full['completeness']:.3f} / {full['count_mae']:.3f}"
            ),
            "best setting": "none meets the target"
            if pd.isna(b["effort"])
            else f"{b['policy']} {b['setting']:g}",
            "saved": _pct(1 - b["effort"]),
            "lost": _pct(b.get("lost")),
            "purity": b.get("purity"),
            "C / count MAE": ""
            if pd.isna(b["effort"])
            else f"{b['completeness']:.3f} / {b['count_mae']:.3f}",
            "fixed n at ≤ that effort: saved, lost, C / MAE": ""
            if pd.isna(b.get("fixed_effort", np.nan))
            else (
                f"n = {b['fixed_n_same_effort']:g}: {_pct(1 - b['fixed_effort'])}, "
                f"{_pct(b['fixed_lost'])}, {b['fixed_completeness']:.3f} / "
                f"{b['fixed_count_mae']:.3f}"
            ),
            "Caesar's rule at the same target": "none"
            if caesar is None
            else f"k = {caesar['setting']:g}: {_pct(1 - caesar['effort'])} saved, "
            f"{_pct(caesar['lost'])} lost",
        }
        if pd.isna(b["effort"]):  # the least loss any setting reaches, and what fixed 20 loses
            t2 = t.loc[t["policy"] != "full"]
            fixed = t2.loc[t2["policy"] == "fixed"].sort_values("effort")
            if len(fixed):
                row["fixed n at ≤ that effort: saved, lost, C / MAE"] = (
                    f"(largest fixed n, {fixed.iloc[-1]['setting']:g}, loses "
                    f"{_pct(fixed.iloc[-1]['lost'])})"
                )
        rows.append(row)
    timing = pd.DataFrame(
        [
            {
                "regime": name,
                "classifications": rep["classifications"],
                "refits": rep["refits"],
                "refit seconds": rep["refit_seconds"],
                **{f"{k} (s)": v for k, v in rep["seconds"].items()},
            }
            for name, rep in reports.items()
        ]
    )
    intro = (
        f"{args.subjects:,} simulated subjects per regime, every classification (no "
        f"subsample), replayed in arrival order; the simulated experts' marks on "
        f"{args.gold_fraction:.0%} of the subjects are the gold standard (never retired "
        "early, not scored). Best: the least effort that loses at most the regime's "
        "`replay.max_lost` of the full-data objects with purity at most "
        "`replay.max_purity_drop` below the full data's; then the fixed n with the largest "
        "effort not above it, and Caesar's rule (retire after k empty classifications) at the "
        "same target. Purity, completeness (C) and count MAE against what the project counts, "
        "at p_fp < 0.5; every setting of every policy is in `replay.csv`."
    )
    time_note = f"The whole run took {seconds:,.0f} s (wall); per regime:"
    if args.speed:
        return "\n\n".join(
            [
                f"The replay's own time ({args.subjects:,} subjects; no full-data aggregation, so "
                "no losses are measured): classifications, skill refits and seconds per stage. "
                f"Peak resident memory of the process: {_peak_rss_gb():.1f} GB.",
                time_note,
                markdown_table(timing, floatfmt="{:.0f}"),
            ]
        )
    return "\n\n".join(
        [intro, markdown_table(pd.DataFrame(rows)), time_note, markdown_table(timing, "{:.0f}")]
    )


def _peak_rss_gb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


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
    from benchmarks.docs_table import publish

    body = docs_markdown(table, reports, args, time.perf_counter() - t0)
    name, title = (
        ("replay-speed", "The replay at the paper's size")
        if args.speed
        else ("replay", "Early retirement replayed in arrival order")
    )
    publish(name, title, body, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
