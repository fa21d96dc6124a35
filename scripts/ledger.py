"""Snakemake adapter: rule ledger -> clumpscout.data.ledger.run_ledger (decisions.md#click-ledger)."""

from _common import main


def _run(sm):
    from clumpscout.data.ledger import run_ledger

    ns = [int(n) for n in sm.params.ns]
    per_n = {
        n: {
            "subsample": sm.input.subsamples[i],
            "subsample_report": sm.input.subsample_reports[i],
            "assignments": sm.input.assignments[i],
            "aggregate_report": sm.input.aggregate_reports[i],
        }
        for i, n in enumerate(ns)
    }
    run_ledger(
        sm.input.classifications,
        sm.input.clicks_report,
        sm.input.boxes,
        per_n,
        sm.output.csv,
        sm.output.json,
        subjects_csv=sm.input.subjects_export,
    )


main(snakemake, _run)  # noqa: F821
