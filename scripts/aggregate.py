"""Snakemake adapter: rule aggregate -> clumpscout.model.aggregator.Aggregator."""

from _common import main


def _run(sm):
    from pathlib import Path

    from clumpscout.model.aggregate import Params
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.prepare import read_boxes

    params = Params.from_dict(dict(sm.params.aggregate))
    boxes = read_boxes(sm.input[0])
    agg = Aggregator(params, seed=int(sm.params.seed), per_tool=bool(sm.params.per_tool)).fit(
        boxes, path=sm.input[0]
    )
    agg.write(Path(sm.output.labels).parent)


main(snakemake, _run)  # noqa: F821
