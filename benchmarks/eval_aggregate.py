"""Score the aggregation against a simulated universe's truth (numbers for docs and notes).

    .venv/bin/python benchmarks/eval_aggregate.py --boxes results/subsamples/n20/boxes.parquet \
        --truth results/universe/truth_clumps.csv [--set distance_likelihood=d_squared ...] \
        [--baselines]

Prints, for our labels (and with ``--baselines`` for the MeanShift and single-linkage
baselines on the same clicks): completeness and purity at the p_fp threshold maximising
sqrt(C² + P²) and at p* = 1, the expected calibration error of p_fp (clumpscout.evaluation.compare),
and decisions.md#expected-counts-check: the sums of N_fp and N_fn over the aggregated subjects against the realised
numbers of false labels (containing no true clump) and missed true clumps.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time

import numpy as np
import pandas as pd


def _value(v: str):
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(v.lower(), v)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--boxes", required=True)
    ap.add_argument("--truth", required=True, help="truth_clumps.csv")
    ap.add_argument("--set", action="append", default=[], help="aggregate key=value override")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baselines", action="store_true")
    args = ap.parse_args(argv)

    from clumpscout.evaluation import baseline, compare
    from clumpscout.logs import setup_logging
    from clumpscout.metrics.containment import containment
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params

    setup_logging(None, logging.WARNING)
    boxes = pd.read_parquet(args.boxes)
    truth = pd.read_csv(args.truth)
    subjects = np.unique(boxes["subject_id"])

    def score(labels, name):
        _, summ, _ = compare.score_truth(labels, truth, subjects=subjects)
        s = summ[summ["subset"] == "all"].iloc[0]
        print(
            f"{name:34s} opt C={s.opt_completeness:.3f} P={s.opt_purity:.3f} "
            f"(p*={s.opt_threshold:.2f}) | p*=1 C={s.completeness_p1:.3f} P={s.purity_p1:.3f} "
            f"| ECE={s.ece:.3f} | labels={len(labels)}"
        )

    if args.baselines:
        score(baseline.meanshift_labels(boxes)[0], "MeanShift (decisions.md#meanshift-baseline)")
        score(baseline.single_linkage_labels(boxes)[0], "single linkage 1 FWHM, >=5 vol")
    over = dict(kv.split("=", 1) for kv in args.set)
    params = dataclasses.replace(Params(), **{k: _value(v) for k, v in over.items()})
    t0 = time.perf_counter()
    res = Aggregator(params, seed=args.seed).fit(boxes)
    wall = time.perf_counter() - t0
    score(res.labels_, "ours " + (" ".join(args.set) or "(defaults)"))
    lab, sub = res.labels_, res.subjects_
    tr = truth[truth["subject_id"].isin(subjects)]
    hit, _ = containment(lab, tr)
    agg = sub[sub["n_fn"].notna()]
    _, best = containment(lab, tr[tr["subject_id"].isin(agg["subject_id"])])
    missed = int((~np.isfinite(best)).sum())
    n_fp, n_fn = float(agg["n_fp"].sum()), float(agg["n_fn"].sum())
    print(f"   {wall:.1f} s; status {sub['status'].value_counts().to_dict()}")
    print(
        f"   decisions.md#expected-counts-check: sum N_fp = {n_fp:.2f} vs {int((~hit).sum())} false labels; "
        f"sum N_fn = {n_fn:.2f} vs {missed} missed true clumps (of {len(best)})"
    )
    print(
        f"   medians: p_fp {lab['p_fp'].median():.3g}, p_sigma {lab['p_sigma'].median():.3g}; "
        f"volunteer p_fp {res.volunteers_['p_fp'].median():.3f}, p_fn "
        f"{res.volunteers_['p_fn'].median():.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
