"""Snakemake adapter: rules photometry_truth / photometry_labels -> clumpscout.images.photometry."""

from _common import main


def _run(sm):
    from pathlib import Path

    import pandas as pd

    from clumpscout.images.photometry import photometry_labels, photometry_truth
    from clumpscout.io import write_json, write_parquet

    cutouts = Path(sm.input.table).parent
    if "labels" in sm.input.keys():
        experts = sm.input.get("experts")
        table, report = photometry_labels(
            pd.read_parquet(sm.input.labels),
            cutouts,
            pd.read_parquet(experts) if experts else None,
            float(sm.params.bg_factor),
        )
        report["n"] = int(sm.params.n)
    else:
        table, report = photometry_truth(
            pd.read_csv(sm.input.truth),
            pd.read_parquet(sm.input.subjects),
            cutouts,
            pd.read_csv(sm.input.distractors),
            float(sm.params.bg_factor),
        )
    write_parquet(table, sm.output.table)
    write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
