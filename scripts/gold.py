"""Snakemake adapter: rule gold -> clumpscout.data.gold.build_gold (docs/decisions.md#gold-from-experts)."""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.data.gold import build_gold
    from clumpscout.io import write_csv

    clicks = pd.read_parquet(sm.input.expert_clicks)
    boxes = pd.read_parquet(sm.input.boxes, columns=["subject_id", "x1", "y1", "x2", "y2"])
    write_csv(build_gold(clicks, boxes, float(sm.params.majority)), sm.output[0])


main(snakemake, _run)  # noqa: F821
