"""Snakemake adapter: rule boxes -> clumpscout.data.boxes.make_boxes.

Optional rule parts (docs/tables.md#boxes): ``input.subjects`` (absent or empty: no
subjects table, the side comes from ``params.box_side``), ``params.box_side`` (pixels or
"auto"; None: the subjects table's), ``params.image_size`` ([W, H] or None) and
``output.report`` (the boxes report JSON).
"""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.data.boxes import make_boxes, read_clicks
    from clumpscout.io import write_json, write_parquet

    subjects_path = getattr(sm.input, "subjects", None) or None
    report = {}
    boxes = make_boxes(
        read_clicks(sm.input.clicks),
        None if subjects_path is None else pd.read_parquet(subjects_path),
        box_side=getattr(sm.params, "box_side", None),
        clicks_path=sm.input.clicks,
        subjects_path=subjects_path,
        shape_extent=getattr(sm.params, "shape_extent", "drawn"),
        image_size=getattr(sm.params, "image_size", None),
        report=report,
    )
    write_parquet(boxes, sm.output[0])
    if getattr(sm.output, "report", None):
        write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
