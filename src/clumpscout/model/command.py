"""``clumpscout aggregate``: consensus labels from volunteers' boxes (paper §4-5, Appendix A).

The command line of :mod:`clumpscout.model.aggregator`, whose estimators do the work:
:class:`~clumpscout.model.aggregator.GenerativeAggregator` (the default model) or
:class:`~clumpscout.model.aggregator.PaperAggregator` (the paper's, kept for the
reproduction), as config ``aggregate.model`` says; the hyper-parameters are
:class:`clumpscout.model.params.Params` (config.yaml's ``aggregate:`` section). The
estimators' docstrings describe the models and the outputs; ``docs/model.md`` indexes where
each equation of both models is implemented.

Python API (estimator style)::

    from clumpscout.model.aggregator import GenerativeAggregator
    agg = GenerativeAggregator(seed=1).fit(boxes_df)  # or PaperAggregator(Params(...), seed)
    agg.labels_, agg.probas_, agg.subjects_, agg.volunteers_, agg.assignments_
    agg.write("out/")

Command line::

    clumpscout aggregate --boxes boxes.parquet --out DIR [--config FILE] [--seed N] [--per-tool]
                         [--gold FILE [--gold-on-implausible stop|warn] [--gold-flip-y H] ...]
                         [--skip FILE ...] [--assignment-columns COL ...]

Input: the boxes table of ``clumpscout boxes``: one row per click (x1, y1, x2, y2 in
subject pixels), or one coordinate-less row (NaN) for a classification that marked nothing.
"""

from __future__ import annotations

import argparse

from clumpscout.config import add_setting, resolve
from clumpscout.data.gold import add_gold_options, read_gold_option
from clumpscout.logs import log_startup, timed
from clumpscout.model.params import Params, load_config, load_sections

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--boxes", required=True, help="boxes.parquet from `clumpscout boxes`")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument(
        "--config",
        default=None,
        help="a config file (its aggregate:, calibration:, gold: sections and seed), or a flat "
        "file of aggregate settings",
    )
    add_setting(parser, "seed", from_config=True)
    add_setting(parser, "aggregate.per_tool", from_config=True)
    add_gold_options(
        parser,
        "p_fp is calibrated on it, cross-fitted (docs/decisions.md#gold-standard); without it "
        "the default map (docs/decisions.md#no-gold-default)",
    )
    parser.add_argument(
        "--skip",
        nargs="+",
        default=[],
        metavar="FILE",
        choices=["assignments.parquet", "clumps.ecsv", "subjects.parquet", "volunteers.parquet"],
        help="do not write these outputs (e.g. assignments.parquet: every input row again)",
    )
    parser.add_argument(
        "--assignment-columns",
        nargs="+",
        default=None,
        metavar="COL",
        help="the boxes table's columns assignments.parquet keeps, before cluster and "
        "assignment (default: all; the rows are the input's, in its order)",
    )


def run(args: argparse.Namespace) -> int:
    log_startup()
    params, cfg_seed = (Params(), None) if args.config is None else load_config(args.config)
    cfg = {} if args.config is None else load_sections(args.config)
    if cfg_seed is not None:  # a flat file of aggregate settings may hold the seed too
        cfg["seed"] = cfg_seed
    resolve(args, cfg)
    # the gold standard is read before the (numba-compiling) aggregation is imported
    gold = read_gold_option(args, cfg)
    from clumpscout.model.aggregator import OUTPUTS, Aggregator

    calibration = dict(cfg.get("calibration") or {})
    agg = Aggregator(params, args.seed, per_tool=args.per_tool, calibration=calibration)
    agg.fit(args.boxes, gold=gold)  # the file is read block by block
    with timed(f"writing {args.out}"):
        outputs = [f for f in OUTPUTS if f not in args.skip]
        agg.write(args.out, outputs=outputs, assignment_columns=args.assignment_columns)
    return 0
