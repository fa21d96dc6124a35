"""The ``clumpscout`` command (also ``python -m clumpscout``).

Each sub-command lives in the module that implements its paper section; that
module provides ``add_arguments(parser)`` and ``run(args)``. Only the module of
the sub-command being run is imported, so ``clumpscout extract`` does not pay
for numba compilation of the aggregation kernels.

A data error (:class:`clumpscout.errors.InputError`) ends in one line on stderr
naming the file, the row and the problem, and exit code 2; no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from clumpscout import __version__
from clumpscout.errors import InputError, exit_cleanly_on_sigterm
from clumpscout.logs import setup_logging

#: sub-command -> (module, one-line help). Contract names: keep them stable.
COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": (
        "clumpscout.simulation.universe",
        "simulate a Clump Scout universe as a Zooniverse export",
    ),
    "subjects": (
        "clumpscout.data.subjects",
        "cutout side and PSF FWHM per subject from a galaxy catalogue",
    ),
    "extract": (
        "clumpscout.data.zooniverse",
        "Zooniverse classification export -> tidy clicks table",
    ),
    "boxes": ("clumpscout.data.boxes", "clicks -> square boxes of side 2 FWHM"),
    "gold": (
        "clumpscout.data.gold",
        "the experts' clicks -> a gold-standard marks table (objects a majority marked)",
    ),
    "aggregate": (
        "clumpscout.model.command",
        "consensus labels with p_fp: the generative model or the paper's (§4-5)",
    ),
    "subsample": ("clumpscout.data.subsample", "draw n classifications per subject (Z~_n)"),
    "compare": (
        "clumpscout.evaluation.compare",
        "purity and completeness against expert clicks or truth",
    ),
    "baseline": (
        "clumpscout.evaluation.baseline",
        "clustering baselines: MeanShift (appendix), single linkage, DBSCAN",
    ),
    "cutouts": ("clumpscout.images.cutouts", "SDSS frames -> colour subject images (§2.2)"),
    "photometry": ("clumpscout.images.photometry", "g, r, i flux inside clump boxes"),
    "figures": ("clumpscout.figures.paper", "the paper's figures"),
    "headline": ("clumpscout.report.headline", "headline numbers table"),
    "ledger": ("clumpscout.data.ledger", "account for every input click"),
    "replay": (
        "clumpscout.evaluation.replay",
        "early retirement replayed on the classifications in arrival order",
    ),
    "serve": (
        "clumpscout.service.main",
        "the live retirement service: a Caesar external reducer over HTTP(S)",
    ),
    "catalogue": (
        "clumpscout.catalogue",
        "catalogue.csv / .ecsv (one row per label) and images.csv (one row per image)",
    ),
}


def _top_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="clumpscout",
        description="Galaxy Zoo: Clump Scout aggregation pipeline (Dickinson et al.).",
    )
    p.add_argument("--version", action="version", version=f"clumpscout {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, helptext) in COMMANDS.items():
        sub.add_parser(name, help=helptext, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        parser = _top_parser()
        if not argv:
            parser.print_help()
            return 2
        parser.parse_args(argv)  # prints usage / version and exits
        return 2
    name = argv[0]
    modname, helptext = COMMANDS[name]
    module = importlib.import_module(modname)
    parser = argparse.ArgumentParser(prog=f"clumpscout {name}", description=helptext)
    parser.add_argument("--log", default=None, help="also write the log to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    setup_logging(args.log, logging.DEBUG if args.verbose else logging.INFO)
    exit_cleanly_on_sigterm()
    try:
        rc = module.run(args)
    except InputError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
