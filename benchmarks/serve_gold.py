"""The gold checks in the live service: sound and broken golds of every regime, checked each
time the service learns a label map from them (docs/decisions.md#live-service).

    nice -n 5 .venv/bin/python benchmarks/serve_gold.py --out results/serve_gold \
        [--subjects 400] [--regimes clean,paper,noisy,spammers,counting] [--no-docs]

For each regime (``resources/regimes/<regime>.yaml`` over config.yaml): a universe of
``--subjects`` subjects with every classification and experts on every subject; the gold a
seeded 20 % of them (as benchmarks/gold_checks.py draws it); every classification fed to the
service's engine (:class:`clumpscout.service.engine.Engine`, refits in line), 64 requests
per batch, the skills refitted every ``--refit-every`` classifications (1000: about eight
refits, as in a project whose refit_every is a tenth of its size), in arrival order as simulated and as if the subjects came in two subject sets,
one after the other; ``replay.horizon`` is the fewest classifications a subject has (a gold
subject is complete at the horizon: live, Caesar's cap gives it that many); the gold as
given with ``on_implausible: warn``, so every map the replay fits is fitted and checked. At
each check the gold subjects' states are kept; the labels and the moments of the checks do
not depend on where the experts' marks are, so every case of benchmarks/gold_checks.py
(correct, y flipped, random positions, x/y swapped, ×0.5, half dropped) is checked on the
same states, on three sets of gold subjects: the complete ones, those classified at least 3
times (what the service reads: :meth:`clumpscout.service.gold.GoldWatch.agreement`) and all
classified so far.

Writes ``serve_gold.csv`` (one row per regime, check, case and subject set) to ``--out``
and its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (REPO / "src", HERE, REPO / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import gold_checks as gcb  # noqa: E402
import regimes as grid  # noqa: E402
import replay_regimes as replay_bench  # noqa: E402
from caesar_feed import boxes_as_caesar_sees_them, export_extracts, in_order  # noqa: E402

log = logging.getLogger("clumpscout.serve_gold")
BATCH = 64


def regime_project(name: str, n_subjects: int, refit_every: int, work: Path):
    """(config, boxes, extracts in arrival order, subjects table path, experts' gold, gold
    subjects) of one regime's universe."""
    from clumpscout.simulation.universe import stage_seed

    cfg = copy.deepcopy(grid.regime_config(name))
    cfg["simulate"].update(n_subjects=n_subjects, n_expert_subjects=n_subjects)
    cfg["replay"]["refit_every"] = int(refit_every)
    seed = int(cfg.get("seed", 20231))
    u = work / name
    timer = grid.Timer(name)
    boxes = boxes_as_caesar_sees_them(replay_bench.full_boxes(cfg, seed, u, timer))
    # every subject's classifications without early retirement: the fewest any subject has
    # (a gold subject counts as complete at the horizon; live, Caesar's cap gives it that)
    cfg["replay"]["horizon"] = int(boxes.groupby("subject_id")["classification_id"].nunique().min())
    experts = grid.expert_gold(cfg, u, boxes)
    subjects = np.unique(boxes["subject_id"])
    experts = experts.restrict(np.intersect1d(experts.subjects, subjects))
    n_gold = max(1, int(round(0.2 * len(subjects))))
    pick = np.random.default_rng(stage_seed(seed, "gold")).permutation(experts.subjects)
    gold = experts.restrict(pick[:n_gold])
    ex = cfg["extract"]
    extracts = in_order(
        export_extracts(u / "classifications.csv", ex["clump_task"], ex["tools"],
                        keep=boxes["classification_id"])
    )  # fmt: skip
    per = boxes.groupby("subject_id").first()
    table = work / f"{name}_subjects.parquet"
    pd.DataFrame(
        {
            "subject_id": per.index.to_numpy(),
            "box_side": per["box_side"].to_numpy(float),
            "image_width": per["image_width"].to_numpy(float),
            "image_height": per["image_height"].to_numpy(float),
            "image_size_source": "boxes",
        }
    ).to_parquet(table, index=False)
    return cfg, boxes, extracts, table, gold


def feed(cfg, extracts, table: Path, gold_path: Path, work: Path) -> list[dict]:
    """The engine fed every classification; the gold subjects' states at each check."""
    from clumpscout.service import settings as ss
    from clumpscout.service import store
    from clumpscout.service.engine import Engine
    from clumpscout.service.extracts import caesar_extracts
    from clumpscout.service.gold import GoldWatch

    c = copy.deepcopy(cfg)
    c["serve"] = {**c.get("serve", {}), "refit": "sync"}
    c["gold"] = {"table": str(gold_path), "on_implausible": "warn"}
    s = ss.from_config(ss.check(c), table)
    db = work / "engine.db"
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    snapshots = []
    check = GoldWatch.check

    def keep(watch, map_version, g, stopping=False):
        snapshots.append({"map": map_version, "g": g, "latest": dict(watch.latest)})
        return check(watch, map_version, g, stopping)

    GoldWatch.check = keep
    try:
        engine = Engine(store.open_store(db, s.fingerprint()), s)
        so_far: dict = {}
        for lo in range(0, len(extracts), BATCH):
            batch = []
            for e in extracts[lo : lo + BATCH]:
                so_far.setdefault(e["subject_id"], []).append(e)
                batch.append(caesar_extracts(json.dumps(so_far[e["subject_id"]]).encode(), s))
            engine.process(batch)
        engine.con.close()
    finally:
        GoldWatch.check = check
    return snapshots


#: the gold subjects a check reads: (name, fewest classifications so far; None: horizon)
SUBJECT_SETS = (("complete", None), ("≥ 3 so far (the service)", 3), ("all so far", 1))


def check_rows(name, order, snapshots, gold, horizon, width, height) -> list[dict]:
    from clumpscout.service.gold import GoldWatch

    rows = []
    for snap in snapshots:
        for subjects, least in SUBJECT_SETS:
            for case in gcb.CASES:
                w = GoldWatch(gcb.broken(gold, case, width, height), horizon, least or horizon)
                w.latest = snap["latest"]
                a = w.agreement()
                g = a.given
                rows.append(
                    {
                        "regime": name, "order": order, "map": snap["map"], "g": snap["g"],
                        "subjects": subjects, "case": case, "gold_subjects": a.subjects_checked,
                        "strong_labels": g.strong, "strong_matched": g.matched_share,
                        "expert_objects": g.experts, "expert_unmarked": g.unmarked_share,
                        "verdict": a.verdict, "matched_judged": g.judged_matched,
                        "named": "" if a.likely is None else a.likely.name,
                        "as_expected": gcb.expected(case, a.verdict, g.judged_matched),
                    }
                )  # fmt: skip
    return rows


def two_sets(extracts: list[dict]) -> list[dict]:
    """Arrival order when the project's subjects come in two subject sets: every
    classification of the first half of the subjects (by first arrival), then the second's."""
    first: dict = {}
    for e in extracts:
        first.setdefault(e["subject_id"], len(first))
    half = len(first) // 2
    return sorted(extracts, key=lambda e: first[e["subject_id"]] >= half)  # stable


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per regime and subject set: the checks, and per case the verdicts at the first check
    and over all of them (the share as expected)."""
    out = []
    for (regime, order, subjects), g in df.groupby(["regime", "order", "subjects"], sort=False):
        first = g.loc[g["map"] == g["map"].min()]
        row = {
            "regime": regime,
            "arrival": order,
            "gold subjects checked": f"{first['gold_subjects'].iloc[0]}–{g['gold_subjects'].max()}",
            "subjects": subjects,
            "checks": int(g["map"].nunique()),
        }
        for case in gcb.CASES:
            c = g.loc[g["case"] == case]
            f = first.loc[first["case"] == case].iloc[0]
            row[case] = (
                f"{f['verdict']} ({_pct(f['strong_matched'])} / {_pct(f['expert_unmarked'])}); "
                f"{c['as_expected'].mean():.0%}"
            )
        out.append(row)
    return pd.DataFrame(out)


def _pct(v) -> str:
    return "–" if pd.isna(v) else f"{100 * v:.0f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--subjects", type=int, default=400)
    ap.add_argument("--regimes", default="clean,paper,noisy,spammers,counting")
    ap.add_argument(
        "--refit-every", type=int, default=1000, help="replay.refit_every (skills refitted)"
    )
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args(argv)
    from clumpscout.logs import setup_logging

    setup_logging()
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "work"
    work.mkdir(exist_ok=True)
    rows = []
    for name in [r for r in args.regimes.split(",") if r]:
        cfg, boxes, extracts, table, gold = regime_project(
            name, args.subjects, args.refit_every, work
        )
        gold_path = work / f"{name}_gold.csv"
        marks = gold.marks[["subject_id", "x", "y"]]
        empty = np.setdiff1d(gold.subjects, marks["subject_id"].to_numpy())  # experts: nothing
        pd.concat([marks, pd.DataFrame({"subject_id": empty})]).to_csv(gold_path, index=False)
        size = boxes.groupby("subject_id")[["image_width", "image_height"]].first()
        horizon = int(cfg["replay"]["horizon"])
        for order, ex in (("as simulated", extracts), ("two subject sets", two_sets(extracts))):
            t1 = time.perf_counter()
            snaps = feed(cfg, ex, table, gold_path, work)
            log.info("[%s, %s] %d classifications fed in %.0f s, %d checks", name, order,
                     len(ex), time.perf_counter() - t1, len(snaps))  # fmt: skip
            rows += check_rows(
                name, order, snaps, gold, horizon, size["image_width"], size["image_height"]
            )
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "serve_gold.csv", index=False)
    table = summary(df)
    print(table.to_string(index=False))
    log.info("done in %.0f s", time.perf_counter() - t0)
    if not args.no_docs:
        from docs_table import markdown_table, write_section

        body = (
            f"Every regime's universe ({args.subjects} subjects, every classification, the "
            "experts' marks of a seeded 20 % of the subjects as the gold) fed to the service's "
            f"engine in arrival order, skills refitted every {args.refit_every} classifications; at each label map the service fits, the gold checked as "
            "given and broken, on the complete gold subjects (what the service checks) and, "
            "for comparison, on every gold subject classified so far. Each case: the verdict "
            "at the first check (strong labels matched % / expert objects unmarked %); then "
            "the share of all checks with the expected verdict (correct: ok or not judged; "
            "half dropped: incomplete when the strong labels are judged; the others: "
            "implausible).\n\n" + markdown_table(table)
        )
        write_section("serve-gold", "Gold checks in the live service", body, sys.argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
