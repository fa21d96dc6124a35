"""Snakemake adapter: rule compare_collect -> one table over every n (clumpscout.evaluation.compare)."""

from _common import main


def _run(sm):
    from clumpscout.evaluation.compare import collect_tables
    from clumpscout.io import write_csv

    for key in sm.output.keys():
        write_csv(collect_tables(sm.input[key]), sm.output[key])


main(snakemake, _run)  # noqa: F821
