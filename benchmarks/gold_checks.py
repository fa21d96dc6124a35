"""The gold checks on every gold standard we have, sound and broken (docs/decisions.md#gold-checks).

    .venv/bin/python benchmarks/gold_checks.py --out results/gold_checks [--subjects 1000]
        [--regimes clean,paper,noisy,spammers,counting] [--draws 20] [--shared ../shared]
        [--dag-results results] [--no-docs]

The bounds of :mod:`clumpscout.model.gold_check` must let every real gold standard pass
and stop every broken one. This script measures the check's figures (strong labels matched
to an expert object, expert objects where no volunteer marked anything) and its verdict on:

* the simulated experts of every regime (``resources/regimes/*.yaml``), as
  ``benchmarks/regimes.py`` builds them: ``--subjects`` subjects, the experts' marks of a
  seeded 20 % of them (the regime grid's own draw), the default model's labels at n = 20;
* the pedestrians' expert boxes (``../shared/data/crowd_boxes/lean_pedestrians``), as
  ``benchmarks/pedestrians.py`` splits them (20 % of the expert images, seeds 0, 1, 2);
* the Clump Scout expert labels of the default DAG (``--dag-results``: ``gold/gold.csv``
  and the default model's labels at every n), when that folder exists;

each as given (``correct``) and broken as a user would break it: ``y flipped`` (y → H − y,
H the image height), ``random positions`` (uniform in the image), ``x/y swapped``,
``x0.5`` (coordinates halved) and ``half dropped`` (a random half of the expert objects).
``--draws K`` repeats the regimes' and pedestrians' cases on K more random gold draws (the
labels do not depend on the gold: one fit each).

Writes ``gold_checks.csv`` (one row per gold, draw and case) and ``gold_checks_draws.csv``
(per gold and case over the draws: the share with the expected verdict, the figures'
range) to ``--out``, and both tables to docs/benchmarks.md (section ``gold-checks``).
"""

from __future__ import annotations

import argparse
import copy
import logging
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

log = logging.getLogger("clumpscout.gold_checks")

CASES = ("correct", "y flipped", "random positions", "x/y swapped", "x0.5", "half dropped")
#: the verdict a sound check gives each case (``half dropped`` with fewer strong labels
#: than the check judges on: whatever the expert objects say, see :func:`expected`)
EXPECTED = {
    "correct": ("ok", "not judged"),
    "y flipped": ("implausible",),
    "random positions": ("implausible",),
    "x/y swapped": ("implausible",),
    "x0.5": ("implausible",),
    "half dropped": ("incomplete",),
}


def broken(gold, case: str, width: pd.Series, height: pd.Series, seed: int = 0):
    """``gold`` broken as ``case`` says (module docstring); ``width``, ``height``: the image
    size per subject_id. Boxes keep their size."""
    from clumpscout.data.gold import GoldFrame

    m = gold.marks
    rng = np.random.default_rng(seed)
    geom = gold.geometry
    if case == "correct":
        return gold
    if case == "half dropped":
        return gold.with_marks(m.iloc[np.sort(rng.permutation(len(m))[: len(m) // 2])])
    if case == "random positions":
        w = width.reindex(m["subject_id"]).to_numpy(dtype=float)
        h = height.reindex(m["subject_id"]).to_numpy(dtype=float)
        dx = rng.uniform(0, w) - m["x"].to_numpy()
        dy = rng.uniform(0, h) - m["y"].to_numpy()
        moved = m.assign(x=m["x"] + dx, y=m["y"] + dy)
        if geom == "box":
            moved = moved.assign(x1=m["x1"] + dx, x2=m["x2"] + dx, y1=m["y1"] + dy, y2=m["y2"] + dy)
        return gold.with_marks(moved)
    if case == "y flipped":  # per subject: its own image height
        parts = [
            GoldFrame(flip_y=float(h)).apply(g, geom)
            for h, g in m.groupby(height.reindex(m["subject_id"]).to_numpy())
        ]
        return gold.with_marks(pd.concat(parts))
    frame = {"x/y swapped": GoldFrame(swap_xy=True), "x0.5": GoldFrame(scale=0.5)}[case]
    return gold.with_marks(frame.apply(m, geom))


def expected(case: str, verdict: str, matched_judged: bool) -> bool:
    """Whether the check gave ``case`` its expected verdict; experts who dropped half their
    objects can only be seen with enough strong labels."""
    if case == "half dropped" and not matched_judged:
        return verdict in ("ok", "not judged")
    return verdict in EXPECTED[case]


def check_cases(source: str, draw: int, labels, subjects, gold, width, height) -> list[dict]:
    """The check's figures and verdict for every case of one gold standard."""
    from clumpscout.model.gold_check import gold_agreement, viewers_of

    viewers = viewers_of(subjects)
    rows = []
    for case in CASES:
        a = gold_agreement(labels, broken(gold, case, width, height, seed=draw), viewers)
        g = a.given
        rows.append(
            {
                "gold": source,
                "draw": draw,
                "case": case,
                "gold_subjects": a.gold_subjects,
                "strong_share": a.strong_share,
                "strong_labels": g.strong,
                "strong_matched": g.matched_share,
                "expert_objects": g.experts,
                "expert_unmarked": g.unmarked_share,
                "verdict": a.verdict,
                "matched_judged": g.judged_matched,
                "named": ""
                if a.likely is None
                else f"{a.likely.name}: {a.likely.frame.describe()}",
                "as_expected": expected(case, a.verdict, g.judged_matched),
            }
        )
    return rows


# ---------------------------------------------------------------- the gold standards
def regime_golds(names: list[str], n_subjects: int, draws: int, work: Path) -> list[dict]:
    """Every regime's simulated experts, as benchmarks/regimes.py draws them."""
    import regimes as rg

    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params
    from clumpscout.simulation.universe import stage_seed

    rows = []
    for name in names:
        cfg = copy.deepcopy(rg.regime_config(name))
        cfg["simulate"].update(n_subjects=n_subjects, n_expert_subjects=n_subjects)
        seed = int(cfg.get("seed", 20231))
        u = work / name
        boxes, _ = rg.build_subsample(cfg, seed, 20, u, rg.Timer(name), "")
        experts = rg.expert_gold(cfg, u, boxes)
        subjects = np.unique(boxes["subject_id"])
        experts = experts.restrict(np.intersect1d(experts.subjects, subjects))
        n_gold = max(1, int(round(0.2 * len(subjects))))
        params = Params.from_dict({**(cfg.get("aggregate") or {}), "model": "generative"})
        fit = Aggregator(params, seed=stage_seed(seed, "aggregate")).fit(boxes)
        size = boxes.groupby("subject_id")[["image_width", "image_height"]].first()
        for r in range(draws + 1):
            tag = "gold" if r == 0 else f"gold-draw-{r}"
            pick = np.random.default_rng(stage_seed(seed, tag)).permutation(experts.subjects)
            gold = experts.restrict(pick[:n_gold])
            rows += check_cases(
                f"regime {name}", r, fit.labels_, fit.subjects_, gold,
                size["image_width"], size["image_height"],
            )  # fmt: skip
        log.info("[%s] checked", name)
    return rows


def pedestrian_golds(shared: Path, draws: int) -> list[dict]:
    """The pedestrians' expert boxes, split as benchmarks/pedestrians.py splits them."""
    from benchmarks.crowd_boxes import read_crowd_boxes, read_crowd_gold
    from benchmarks.expert_scores import split_gold
    from clumpscout.data.gold import gold_from_table
    from clumpscout.model.aggregator import Aggregator

    d = shared / "data" / "crowd_boxes" / "lean_pedestrians"
    if not d.is_dir():
        log.warning("%s is absent: no pedestrians", d)
        return []
    boxes, _ = read_crowd_boxes(d / "workers_179_wh.json")
    experts = gold_from_table(read_crowd_gold(d / "experts_177_wh.json"))
    size = boxes.groupby("subject_id")[["image_width", "image_height"]].first()
    rows = []
    for seed in (0, 1, 2):
        fit = Aggregator(None, seed=seed).fit(boxes)
        for r in range(draws + 1 if seed == 0 else 1):
            gold, _ = split_gold(experts, 0.2, seed if r == 0 else 100 + r)
            rows += check_cases(
                f"pedestrians seed {seed}", r, fit.labels_, fit.subjects_, gold,
                size["image_width"], size["image_height"],
            )  # fmt: skip
    return rows


def dag_golds(results: Path) -> list[dict]:
    """The default DAG's gold (results/gold/gold.csv) at every n of the default model."""
    from clumpscout.data.gold import read_gold

    path = results / "gold" / "gold.csv"
    if not path.is_file():
        log.warning("%s is absent: no DAG gold (run `snakemake --cores 2` first)", path)
        return []
    gold = read_gold(path)
    geo = pd.read_parquet(results / "subjects" / "subjects.parquet").set_index("subject_id")
    rows = []
    agg = sorted((results / "aggregate" / "generative").glob("n*"), key=lambda p: int(p.name[1:]))
    for d in agg:
        labels = pd.read_parquet(d / "labels.parquet")
        subjects = pd.read_parquet(d / "subjects.parquet")
        rows += check_cases(
            f"DAG {d.name}", 0, labels, subjects, gold, geo["image_width"], geo["image_height"]
        )
    return rows


# ---------------------------------------------------------------- tables
def cell(r) -> str:
    """``verdict (matched / unmarked)`` of one case, the figures in %."""

    def pct(v):
        return "–" if pd.isna(v) else f"{100 * v:.0f}"

    mark = "" if r["as_expected"] else " ✗"
    star = "" if r["matched_judged"] or pd.isna(r["strong_matched"]) else "*"
    return f"{r['verdict']} ({pct(r['strong_matched'])}{star} / {pct(r['expert_unmarked'])}){mark}"


def main_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per gold standard (main draw): its size and every case's verdict and figures."""
    main = df.loc[df["draw"] == 0].copy()
    main["cell"] = main.apply(cell, axis=1)
    wide = main.pivot(index="gold", columns="case", values="cell")[list(CASES)]
    first = main.loc[main["case"] == "correct"].set_index("gold")
    wide.insert(0, "strong (share)", [
        f"{first.loc[g, 'strong_labels']} (≥ {first.loc[g, 'strong_share']:.0%})" for g in wide.index
    ])  # fmt: skip
    wide.insert(0, "expert objects", first["expert_objects"].reindex(wide.index))
    wide.insert(0, "gold subjects", first["gold_subjects"].reindex(wide.index))
    order = list(dict.fromkeys(main["gold"]))
    return wide.loc[order].reset_index()


def draws_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per gold standard with draws and case: the share of draws with the expected verdict
    and the range of the two figures."""
    out = []
    many = df.groupby("gold")["draw"].nunique()
    for (gold, case), g in df.loc[df["gold"].isin(many[many > 1].index)].groupby(
        ["gold", "case"], sort=False
    ):
        out.append(
            {
                "gold": gold,
                "case": case,
                "draws": int(len(g)),
                "as expected": f"{g['as_expected'].mean():.0%}",
                "verdicts": ", ".join(f"{k} {v}" for k, v in g["verdict"].value_counts().items()),
                "strong matched %": _range(g["strong_matched"]),
                "expert unmarked %": _range(g["expert_unmarked"]),
            }
        )
    return pd.DataFrame(out)


def _range(s: pd.Series) -> str:
    s = s.dropna()
    return "–" if s.empty else f"{100 * s.min():.0f}–{100 * s.max():.0f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--subjects", type=int, default=1000)
    ap.add_argument("--regimes", default="clean,paper,noisy,spammers,counting")
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    ap.add_argument("--dag-results", type=Path, default=REPO / "results")
    ap.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args(argv)
    from clumpscout.logs import setup_logging

    setup_logging()
    t0 = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [r for r in args.regimes.split(",") if r]
    rows = regime_golds(names, args.subjects, args.draws, args.out / "work")
    rows += pedestrian_golds(args.shared, args.draws)
    rows += dag_golds(args.dag_results)
    df = pd.DataFrame(rows)
    df.to_csv(args.out / "gold_checks.csv", index=False)
    table, draws = main_table(df), draws_table(df)
    draws.to_csv(args.out / "gold_checks_draws.csv", index=False)
    print(table.to_string(index=False))
    print(draws.to_string(index=False))
    wrong = df.loc[~df["as_expected"], ["gold", "draw", "case", "verdict"]]
    log.info("%d of %d checks as expected in %.0f s", len(df) - len(wrong), len(df),
             time.perf_counter() - t0)  # fmt: skip
    if not args.no_docs:
        from benchmarks.docs_table import markdown_table, write_section

        body = (
            "Each cell: the check's verdict (strong labels matched % / expert objects unmarked "
            "%), ✗ where it is not the expected one (correct: ok; half dropped: incomplete; "
            "the others: implausible); * and –: fewer strong labels than the check judges "
            "on (30), so it cannot see dropped objects. Strong labels: marked by at least the "
            "share shown of their subject's viewers (docs/decisions.md#gold-checks).\n\n"
            + markdown_table(table)
            + f"\n\nOver {args.draws} more random gold draws (the same labels):\n\n"
            + markdown_table(draws)
        )
        write_section(
            "gold-checks", "Gold checks: every gold standard, sound and broken", body, sys.argv
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
