"""Snakemake adapter: rule report -> clumpscout.htmlreport (the report inside the DAG)."""

from _common import main


def _run(sm):
    from clumpscout.htmlreport import write_report

    write_report(sm.params.entries, sm.output[0], intro=sm.input.intro, title=sm.params.title)


main(snakemake, _run)  # noqa: F821
