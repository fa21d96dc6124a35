"""Snakemake adapter: rule catalogue -> clumpscout.catalogue.write_catalogue."""

from _common import main


def _run(sm):
    from pathlib import Path

    import pandas as pd

    from clumpscout.catalogue import write_catalogue

    write_catalogue(
        pd.read_parquet(sm.input.labels),
        pd.read_parquet(sm.input.subjects),
        Path(sm.output.csv).parent,
        model=sm.params.model,
        n=int(sm.params.n),
    )


main(snakemake, _run)  # noqa: F821
