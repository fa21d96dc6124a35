"""Snakemake adapter: rule replay -> clumpscout.evaluation.replay."""

from _common import main


def _run(sm):
    from clumpscout.numba_cache import metered

    with metered():  # the numba compile seconds of the job (imports included), in its log
        from pathlib import Path

        import pandas as pd

        from clumpscout.data.gold import read_gold
        from clumpscout.evaluation import replay as rp
        from clumpscout.model.params import Params
        from clumpscout.model.source import read_boxes
        from clumpscout.simulation.truth import truth_tables

        params = Params.from_dict(dict(sm.params.aggregate))
        settings = rp.Settings.from_dict(dict(sm.params.replay))
        truth = None
        if "truth" in sm.input.keys():
            truth = truth_tables(Path(sm.input.truth).parent)[0]  # what the project counts
        gold = None
        if "gold" in sm.input.keys():  # read in its declared frame; checked before it is used
            gold = read_gold(sm.input.gold, **dict(sm.params.gold))
        boxes = read_boxes(sm.input.boxes, rp.READ_COLUMNS)  # only what it reads
        table, points, report = rp.replay(
            boxes,
            params,
            settings,
            full_labels=pd.read_parquet(sm.input.full_labels),  # rule replay_labels
            truth=truth,
            seed=int(sm.params.seed),
            path=sm.input.boxes,
            gold=gold,
            calibration=dict(sm.params.calibration),
            workers=int(sm.threads),  # refits beside epochs' assessments (same result)
        )
        rp.write_outputs(Path(sm.output.table).parent, table, points, report)


main(snakemake, _run)  # noqa: F821
