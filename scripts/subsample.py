"""Snakemake adapter: rule subsample -> clumpscout.data.subsample.draw_subsample (decisions.md#subsamples)."""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.data.subsample import draw_subsample
    from clumpscout.io import write_json, write_parquet

    boxes, report = draw_subsample(
        pd.read_parquet(sm.input[0]),
        n=int(sm.params.n),
        seed=int(sm.params.seed),
        nested=bool(sm.params.nested),
        path=sm.input[0],
    )
    write_parquet(boxes, sm.output.boxes)
    write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
