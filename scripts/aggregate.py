"""Snakemake adapter: rule aggregate -> clumpscout.model.aggregate.Aggregator."""

from _common import main


def _run(sm):
    from pathlib import Path

    from clumpscout.model.aggregate import Aggregator, Params, read_boxes

    params = Params.from_dict(dict(sm.params.aggregate))
    boxes = read_boxes(sm.input[0])
    result = Aggregator(params, seed=int(sm.params.seed)).fit(boxes, path=sm.input[0])
    out_dir = Path(sm.output.labels).parent
    result.write(out_dir)


main(snakemake, _run)  # noqa: F821
