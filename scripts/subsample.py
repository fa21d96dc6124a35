"""Snakemake adapter: rule subsample -> clumpscout.data.subsample.draw_subsample (decisions.md#subsamples).

The boxes table is read, filtered and written as a pyarrow Table (no round trip through
pandas; the same bytes as through a DataFrame)."""

from _common import main


def _run(sm):
    from clumpscout.data.subsample import draw_subsample, read_boxes_table
    from clumpscout.io import write_json, write_table

    boxes, report = draw_subsample(
        read_boxes_table(sm.input[0]),
        n=int(sm.params.n),
        seed=int(sm.params.seed),
        nested=bool(sm.params.nested),
        path=sm.input[0],
    )
    write_table(boxes, sm.output.boxes)
    write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
