"""Snakemake adapter: rule boxes -> clumpscout.data.boxes.make_boxes."""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.data.boxes import make_boxes
    from clumpscout.io import write_parquet

    boxes = make_boxes(
        pd.read_parquet(sm.input.clicks),
        pd.read_parquet(sm.input.subjects),
        clicks_path=sm.input.clicks,
        subjects_path=sm.input.subjects,
        shape_extent=getattr(sm.params, "shape_extent", "drawn"),
    )
    write_parquet(boxes, sm.output[0])


main(snakemake, _run)  # noqa: F821
