"""Snakemake adapter: rule ledger -> clumpscout.data.ledger.run_ledger, once per consensus
model, with the export counted once for both (decisions.md#click-ledger)."""

from _common import main


def _run(sm):
    from clumpscout.data.ledger import ledger_of_export, run_ledger

    ns = [int(n) for n in sm.params.ns]
    shared = (sm.input.classifications, sm.input.clicks_report, sm.input.boxes)
    export = ledger_of_export(*shared, subjects_csv=sm.input.subjects_export)
    for m, model in enumerate(sm.params.models):
        per_n = {
            n: {
                "subsample": sm.input.subsamples[i],
                "subsample_report": sm.input.subsample_reports[i],
                "assignments": sm.input.assignments[m * len(ns) + i],
                "aggregate_report": sm.input.aggregate_reports[m * len(ns) + i],
            }
            for i, n in enumerate(ns)
        }
        run_ledger(
            *shared,
            per_n,
            sm.output[f"{model}_csv"],
            sm.output[f"{model}_json"],
            subjects_csv=sm.input.subjects_export,
            export=export,
        )


main(snakemake, _run)  # noqa: F821
