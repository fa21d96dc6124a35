"""Snakemake adapter: rules aggregate and replay_labels (the replay's full-data labels) ->
clumpscout.model.aggregator.Aggregator (with the gold standard of the default model,
docs/decisions.md#gold-standard). Writes the outputs the rule declares, nothing else
(docs/decisions.md#outputs-someone-reads)."""

from _common import main


def _run(sm):
    from clumpscout.numba_cache import metered

    with metered():  # the numba compile seconds of the job (imports included), in its log
        from pathlib import Path

        from clumpscout.data.gold import read_gold
        from clumpscout.logs import log_startup
        from clumpscout.model.aggregator import Aggregator
        from clumpscout.model.params import Params

        log_startup()  # interpreter, Snakemake's preamble and the imports (the job's split)
        params = Params.from_dict(dict(sm.params.aggregate))
        gold = None
        if "gold" in sm.input.keys():  # read in its declared frame; checked before it is used
            gold = read_gold(sm.input.gold, **dict(sm.params.gold))
        agg = Aggregator(
            params,
            seed=int(sm.params.seed),
            per_tool=bool(sm.params.per_tool),
            calibration=dict(sm.params.calibration),
        )
        agg.fit(sm.input.boxes, gold=gold)  # the file is read block by block
        # only the files the rule declares: what something downstream reads
        outputs = [Path(f).name for f in sm.output]
        columns = sm.params.get("assignment_columns")  # rule replay_labels writes none
        if columns is not None:  # those the boxes have (shape: only drawn shapes have it)
            import pyarrow.parquet as pq

            have = set(pq.read_schema(sm.input.boxes).names)
            columns = [c for c in columns if c in have]
        agg.write(Path(sm.output.labels).parent, outputs=outputs, assignment_columns=columns)


main(snakemake, _run)  # noqa: F821
