"""The ``clumpscout`` command (also ``python -m clumpscout``).

Each sub-command lives in the module that implements its paper section; that
module provides ``add_arguments(parser)`` and ``run(args)``. Only the module of
the sub-command being run is imported, so ``clumpscout extract`` does not pay
for numba compilation of the aggregation kernels.

An option that is a setting is built from the config schema
(:func:`clumpscout.config.add_setting`, docs/decisions.md#cli-settings); ``--help`` shows
every default. A data error (:class:`clumpscout.errors.InputError`) ends in one line on
stderr naming the file, the row and the problem, and exit code 2; no traceback; so does a
usage error (a value out of an option's bounds, a missing option).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from types import ModuleType

from clumpscout import __version__
from clumpscout.config import DefaultsHelpFormatter
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


class CommandParser(argparse.ArgumentParser):
    """An argparse parser whose usage errors are one line, as the data errors are:
    ``error: argument --tau: '-1' is not a number >= 0 (clumpscout aggregate --help)``."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _top_parser() -> argparse.ArgumentParser:
    p = CommandParser(
        prog="clumpscout",
        description="Galaxy Zoo: Clump Scout aggregation pipeline (Dickinson et al.). "
        "`clumpscout COMMAND --help` lists a command's options with their defaults: a "
        "setting's option takes the default of config.schema.yaml (or of the --config file).",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"clumpscout {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, helptext) in COMMANDS.items():
        sub.add_parser(name, help=helptext, add_help=False)
    return p


def command_parser(name: str) -> tuple[ModuleType, argparse.ArgumentParser]:
    """The module of sub-command ``name`` and its argument parser (imports the module)."""
    modname, helptext = COMMANDS[name]
    module = importlib.import_module(modname)
    parser = CommandParser(
        prog=f"clumpscout {name}", description=helptext, formatter_class=DefaultsHelpFormatter
    )
    parser.add_argument("--log", default=None, help="also write the log to this file")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    module.add_arguments(parser)
    return module, parser


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
    module, parser = command_parser(name)
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
