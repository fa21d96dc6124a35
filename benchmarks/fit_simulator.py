"""Fit simulator knobs to the calibration targets (the evidence, never a model's score).

    .venv/bin/python benchmarks/fit_simulator.py --subjects 85286 --seeds 20231 7 --workers 2 \
        --out results/fit [--knobs spurious_median,faint_boost_mean,...] [--max-evals 150]

The fit runs at the paper's size (85,286 subjects: the paper model's label totals depend on
the project's size) over two seeds, the loss summed (docs/decisions.md#calibration-size);
about 100 s per candidate with the two seeds on two cores.

The objective is a distance between one simulated universe and the evidence rows of
``benchmarks/calibration.py`` (:data:`calibration.TARGETS`: the paper's totals, the real
consensus boxes at label level, the paper's §6 numbers and trends), each row measured in
units of its own tolerance:

    loss = Σ_rows w_row log(1 + d²),  d = |simulated − real| / tolerance

(a sign row has d = 0 when its sign is right, 2 when not; a row that cannot be computed
d = 3). The logarithm keeps one hopeless row from drowning the others. The weight is
``--total-weight`` (default 4) on the totals (:data:`TOTALS`: classifications and clicks
per classification, the volunteer cohort, labels per subject and the share of labelled
subjects), 1 on every other row: a universe that matches the shape of the labels by
losing half of them is not the paper's. The consensus model's purity or completeness
against the simulated truth is never part of it.

Search: a coordinate search over the named knobs (:data:`KNOBS`, each with its bounds and
a log or linear scale). Each sweep tries every knob one step up and one step down from the
current best; an improvement is taken at once and the same step repeated while it keeps
improving; a sweep without any improvement halves the step; the search ends after
``--max-evals`` candidates or when the step falls below 1/8 of its start. Every candidate
simulates the same seeds (common random numbers), so the fit is deterministic and
differences between candidates are not sampling noise; its loss is the sum of its seeds'
losses. Only the subsamples the rows use are aggregated (n = 7 and 20).

Outputs in ``--out``: fit_log.csv (every candidate, written after each: knobs, loss, rows
agreeing and labels per subject per seed), fit_result.json (start and best knobs, loss and
its totals / other parts, rows agreeing per seed), calibration_start_seed<S>.csv and
calibration_best_seed<S>.csv (the two tables per seed at the fit's size). The best knobs are
printed as ``--set`` arguments for calibration.py; they are not written to any config.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks import calibration as cal  # noqa: E402

log = logging.getLogger("clumpscout.fit")

#: knob -> (lower bound, upper bound, scale, start step in that scale)
KNOBS: dict[str, tuple[float, float, str, float]] = {
    "spurious_median": (0.005, 2.0, "log", 0.5),
    "spurious_sigma": (0.1, 2.0, "log", 0.4),
    "faint_features_mean": (0.05, 12.0, "log", 0.5),
    "faint_boost_mean": (0.05, 6.0, "log", 0.5),
    "faint_boost_shape": (0.1, 10.0, "log", 0.5),
    "faint_contrast_mean": (5.5, 9.0, "lin", 0.3),
    "faint_contrast_sd": (0.1, 2.0, "log", 0.4),
    "faint_radius_scale": (0.1, 0.6, "log", 0.2),
    "threshold_mean": (-3.0, 1.0, "lin", 0.3),
    "threshold_sd": (0.05, 2.0, "log", 0.4),
    "scatter_median": (0.03, 0.5, "log", 0.3),
    "p_unusual_hit_mean": (0.05, 0.95, "lin", 0.1),
    "p_unusual_false_mean": (0.01, 0.5, "log", 0.4),
    "clumps_extra_mean": (0.3, 5.0, "log", 0.3),
    "clumpy_fwhm_peak": (3.0, 15.0, "log", 0.2),
    "clumpy_fwhm_width": (0.2, 1.5, "log", 0.3),
    "expert_threshold": (-2.0, 3.0, "lin", 0.3),
}
SIGN_MISS = 2.0
NAN_MISS = 3.0
#: the rows weighted by ``--total-weight`` in the loss
TOTALS = (
    "classifications_per_subject",
    "clicks_per_classification",
    "volunteers_per_subject",
    "subjects_per_volunteer_median",
    "subjects_per_volunteer_mean",
    "volunteers_below_10_share",
    "volunteers_above_200_share",
    "labels_per_subject",
    "subjects_with_label_share",
)
TOTAL_WEIGHT = 4.0


def row_distance(row) -> float:
    """d of one calibration row (see the module docstring)."""
    if row["tolerance"] == "sign":
        return 0.0 if row["agrees"] else SIGN_MISS
    sim, real, tol = row["simulated_value"], row["real_value"], row["tolerance"]
    try:
        sim, real, tol = float(sim), float(real), float(tol)
    except (TypeError, ValueError):
        return NAN_MISS
    if not (np.isfinite(sim) and np.isfinite(real)):
        return NAN_MISS
    return abs(sim - real) / max(tol, 1e-9)


def loss_parts(table: pd.DataFrame, total_weight: float = TOTAL_WEIGHT) -> dict[str, float]:
    """The loss split into the weighted totals and the other rows (module docstring)."""
    parts = {"totals": 0.0, "other": 0.0}
    for r in table.to_dict("records"):
        term = math.log1p(row_distance(r) ** 2)
        if r.get("target") in TOTALS:
            parts["totals"] += total_weight * term
        else:
            parts["other"] += term
    return parts


def loss(table: pd.DataFrame, total_weight: float = TOTAL_WEIGHT) -> float:
    return float(sum(loss_parts(table, total_weight).values()))


def _step(value: float, knob: str, direction: int, scale: float) -> float:
    lo, hi, kind, step = KNOBS[knob]
    if kind == "log":
        v = math.exp(math.log(value) + direction * step * scale)
    else:
        v = value + direction * step * scale
    return float(np.clip(round(v, 4), lo, hi))


def _measure_seed(cfg: dict, seed: int, work: str, consensus, n_boot: int) -> pd.DataFrame:
    """One seed's calibration table (a worker process's task); only the subsamples the rows
    use are aggregated."""
    logging.getLogger("clumpscout").setLevel(logging.WARNING)
    table, _ = cal.measure(cfg, seed, Path(work), consensus, n_boot, ns=cal.ROW_NS)
    return table


class Fit:
    """Evaluations of knob sets, cached. Each candidate is simulated once per seed (the
    seeds in parallel worker processes) and its loss is the sum of the seeds' losses."""

    def __init__(self, args, base: dict, consensus, pool=None):
        self.args, self.base, self.consensus, self.pool = args, base, consensus, pool
        self.cache: dict[tuple, tuple[float, list[pd.DataFrame]]] = {}
        self.log: list[dict] = []

    def tables(self, cfg: dict) -> list[pd.DataFrame]:
        out = Path(self.args.out)
        jobs = [
            (cfg, seed, str(out / f"work_{seed}"), self.consensus, self.args.boot)
            for seed in self.args.seeds
        ]
        if self.pool is None:
            return [_measure_seed(*job) for job in jobs]
        return [f.result() for f in [self.pool.submit(_measure_seed, *job) for job in jobs]]

    def __call__(self, knobs: dict) -> tuple[float, list[pd.DataFrame]]:
        key = tuple(sorted(knobs.items()))
        if key in self.cache:
            return self.cache[key]
        cfg = cal.universe_config(self.args.regime, self.args.subjects, {**self.base, **knobs})
        t0 = time.perf_counter()
        tables = self.tables(cfg)
        value = float(sum(loss(t, self.args.total_weight) for t in tables))
        self.cache[key] = (value, tables)
        agree = [int(t["agrees"].sum()) for t in tables]
        lps = [float(t.set_index("target").loc["labels_per_subject", "simulated_value"])
               for t in tables]  # fmt: skip
        self.log.append(
            {
                **knobs,
                "loss": value,
                "agree": "/".join(map(str, agree)),
                "labels_per_subject": "/".join(f"{v:.3f}" for v in lps),
                "seconds": time.perf_counter() - t0,
            }
        )
        pd.DataFrame(self.log).to_csv(Path(self.args.out) / "fit_log.csv", index=False)
        log.info("eval %d: loss %.3f, rows agree %s, labels per subject %s (%.0f s): %s",
                 len(self.log), value, agree, [round(v, 3) for v in lps],
                 time.perf_counter() - t0, knobs)  # fmt: skip
        return value, tables


def coordinate_search(fit: Fit, start: dict, knobs: list[str], max_evals: int):
    best = dict(start)
    best_loss, _ = fit(best)
    scale = 1.0
    while scale >= 1.0 / 8 and len(fit.log) < max_evals:
        improved = False
        start_of_sweep = dict(best)
        for knob in knobs:
            for direction in (1, -1):
                if len(fit.log) >= max_evals:
                    break
                cand = {**best, knob: _step(best[knob], knob, direction, scale)}
                if cand[knob] == best[knob]:
                    continue
                value, _ = fit(cand)
                while value < best_loss - 1e-9:  # improved: keep going that way
                    best, best_loss, improved = cand, value, True
                    cand = {**best, knob: _step(best[knob], knob, direction, scale)}
                    if cand[knob] == best[knob] or len(fit.log) >= max_evals:
                        break
                    value, _ = fit(cand)
                if improved and best[knob] != start_of_sweep[knob]:
                    break
        if not improved:
            scale /= 2.0
            log.info("no improvement in a sweep: step scale %.3g", scale)
    return best, best_loss


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--subjects", type=int, default=3000, help="simulated subjects (default 3000)")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--knobs", default=",".join(KNOBS), help="comma-separated knobs to fit")
    ap.add_argument("--max-evals", type=int, default=150, help="universes simulated at most")
    ap.add_argument("--regime", default="paper")
    ap.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[20231],
        help="master seeds; the loss is summed over them (default 20231)",
    )
    ap.add_argument(
        "--workers", type=int, default=1, help="processes running the seeds in parallel"
    )
    ap.add_argument("--boot", type=int, default=50, help="bootstrap replicates per evaluation")
    ap.add_argument(
        "--total-weight",
        type=float,
        default=TOTAL_WEIGHT,
        help=f"weight of the totals rows in the loss (default {TOTAL_WEIGHT:g})",
    )
    ap.add_argument(
        "--start",
        nargs="*",
        default=[],
        help="start values knob=value (knobs not fitted are held at the value given)",
    )
    return ap.parse_args(argv)


def main(argv=None) -> int:
    from clumpscout.logs import setup_logging
    from clumpscout.simulation.universe import resolve_config

    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    setup_logging(str(out / "fit.log"))
    logging.getLogger("clumpscout").setLevel(logging.WARNING)
    log.setLevel(logging.INFO)
    knobs = [k.strip() for k in args.knobs.split(",") if k.strip()]
    unknown = sorted(set(knobs) - set(KNOBS))
    if unknown:
        raise SystemExit(f"unknown knobs: {', '.join(unknown)} (known: {', '.join(KNOBS)})")
    sim = resolve_config(cal.universe_config(args.regime, args.subjects)["simulate"])
    given = {
        k: v if isinstance(v, bool) else float(v) for k, v in cal._parse_set(args.start).items()
    }
    resolve_config(given)  # unknown knobs or bad values stop here
    start = {k: given.get(k, float(sim[k])) for k in knobs}
    fixed = {k: v for k, v in given.items() if k not in knobs}  # held at the given value
    consensus = cal.load_consensus()
    pool = None
    if args.workers > 1 and len(args.seeds) > 1:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(args.workers, mp_context=mp.get_context("fork"))
    fit = Fit(args, fixed, consensus, pool)
    t0 = time.perf_counter()
    try:
        best, best_loss = coordinate_search(fit, start, knobs, args.max_evals)
        start_loss, start_tables = fit(start)
        _, best_tables = fit(best)
    finally:  # fit_log.csv is written by Fit after every candidate
        if pool is not None:
            pool.shutdown()
    for seed, st, bt in zip(args.seeds, start_tables, best_tables, strict=True):
        st.to_csv(out / f"calibration_start_seed{seed}.csv", index=False)
        bt.to_csv(out / f"calibration_best_seed{seed}.csv", index=False)

    def parts(tables):
        ps = [loss_parts(t, args.total_weight) for t in tables]
        return {k: float(sum(p[k] for p in ps)) for k in ps[0]}

    result = {
        "subjects": args.subjects,
        "seeds": args.seeds,
        "evaluations": len(fit.log),
        "seconds": time.perf_counter() - t0,
        "fixed": fixed,
        "start": start,
        "best": best,
        "total_weight": args.total_weight,
        "loss_start": start_loss,
        "loss_best": best_loss,
        "loss_parts_start": parts(start_tables),
        "loss_parts_best": parts(best_tables),
        "agree_start": [int(t["agrees"].sum()) for t in start_tables],
        "agree_best": [int(t["agrees"].sum()) for t in best_tables],
        "rows": len(best_tables[0]),
    }
    with open(out / "fit_result.json", "w") as fh:
        json.dump(result, fh, indent=2)
    for seed, st, bt in zip(args.seeds, start_tables, best_tables, strict=True):
        both = st[["target", "real_value", "tolerance"]].assign(
            start=st["simulated_value"],
            start_ok=st["agrees"],
            best=bt["simulated_value"],
            best_ok=bt["agrees"],
        )
        print(f"\n== seed {seed}")
        print(both.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\n{len(fit.log)} evaluations in {result['seconds']:.0f} s "
          f"({args.subjects} subjects, seeds {args.seeds})")  # fmt: skip
    ps, pb = result["loss_parts_start"], result["loss_parts_best"]
    print(f"objective over the seeds (totals x {args.total_weight:g} + other rows): "
          f"{ps['totals']:.3f} + {ps['other']:.3f} -> {pb['totals']:.3f} + {pb['other']:.3f}")  # fmt: skip
    print(f"loss {start_loss:.3f} -> {best_loss:.3f}; rows agreeing per seed "
          f"{result['agree_start']} -> {result['agree_best']} of {result['rows']}")  # fmt: skip
    changed = {k: v for k, v in best.items() if v != start[k]}
    print("best knobs:", " ".join(f"{k}={v:g}" for k, v in {**fixed, **best}.items()))
    print("changed:   ", " ".join(f"{k}={start[k]:g}->{v:g}" for k, v in changed.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
