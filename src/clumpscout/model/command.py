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

Input: the boxes table of ``clumpscout boxes``: one row per click (x1, y1, x2, y2 in
subject pixels), or one coordinate-less row (NaN) for a classification that marked nothing.
"""

from __future__ import annotations

import argparse

from clumpscout.data.gold import add_gold_options, read_gold_option
from clumpscout.logs import timed
from clumpscout.model.params import Params, load_calibration, load_config, load_sections

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--boxes", required=True, help="boxes.parquet from `clumpscout boxes`")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--config", default=None, help="YAML with an `aggregate:` section")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: config seed or 0)")
    parser.add_argument(
        "--per-tool",
        action="store_true",
        default=None,
        help="aggregate each tool's boxes separately; labels carry the tool column "
        "(default: the config's aggregate.per_tool, else off)",
    )
    parser.add_argument(
        "--gold",
        default=None,
        metavar="FILE",
        help="the project's gold standard (CSV or Parquet): expert marks (subject_id with x, y "
        "or x1, y1, x2, y2; a row with empty coordinates for a subject found empty) or expert "
        "counts (subject_id, count). p_fp is calibrated on it, cross-fitted "
        "(docs/decisions.md#gold-standard); without it the default map "
        "(docs/decisions.md#no-gold-default); checked against the volunteers first "
        "(docs/decisions.md#gold-checks)",
    )
    add_gold_options(parser)


def run(args: argparse.Namespace) -> int:
    params, cfg_seed = (Params(), None) if args.config is None else load_config(args.config)
    calibration = {} if args.config is None else load_calibration(args.config)
    seed = args.seed if args.seed is not None else (cfg_seed or 0)
    # the gold standard is read before the (numba-compiling) aggregation is imported
    gold = read_gold_option(args, None if args.config is None else load_sections(args.config))
    from clumpscout.model.aggregator import Aggregator

    agg = Aggregator(params, seed, per_tool=args.per_tool, calibration=calibration)
    agg.fit(args.boxes, gold=gold)  # the file is read block by block
    with timed(f"writing {args.out}"):
        agg.write(args.out)
    return 0
