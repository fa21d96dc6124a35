"""Snakemake adapter: rule gold_agreement -> clumpscout.figures.gold.write_gold_agreement (the
gold standard against the volunteers, docs/decisions.md#gold-checks, in the reproduction report)."""

from _common import main


def _run(sm):
    from clumpscout.figures.gold import write_gold_agreement

    write_gold_agreement(
        list(sm.input.reports),
        [int(n) for n in sm.params.ns],
        int(sm.params.n),
        sm.output.html,
        sm.output.csv,
        sm.output.json,
        wording=sm.params.wording,
    )


main(snakemake, _run)  # noqa: F821
