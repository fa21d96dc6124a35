"""Snakemake adapter: rules aggregate (every model of one n) and replay_labels (the replay's
full-data labels) -> clumpscout.model.aggregator.Aggregator (with the gold standard of the
default model, docs/decisions.md#gold-standard). The rule's ``fits`` are fitted one after the
other in this one process (the start-up and the prepared table shared,
docs/decisions.md#aggregate-per-n), each with
the rule's seed and freed before the next; each writes the outputs the rule declares for it,
nothing else (docs/decisions.md#outputs-someone-reads)."""

from _common import main


def _run(sm):
    from clumpscout.numba_cache import metered

    with metered():  # the numba compile seconds of the job (imports included), in its log
        from pathlib import Path

        from clumpscout.data.gold import read_gold
        from clumpscout.io import release_memory
        from clumpscout.logs import log_startup, timed
        from clumpscout.model.aggregator import Aggregator
        from clumpscout.model.params import Params
        from clumpscout.model.source import box_source

        log_startup()  # interpreter, Snakemake's preamble and the imports (the job's split)
        boxes = box_source(sm.input.boxes)  # one source: the models read and prepare it once
        columns = sm.params.get("assignment_columns")  # rule replay_labels writes none
        if columns is not None:  # those the boxes have (shape: only drawn shapes have it)
            columns = [c for c in columns if c in boxes.columns]

        def fit_and_write(fit: dict) -> None:
            """Fit one model (an entry of the rule's ``fits``) and write its outputs."""
            gold = None
            if fit["gold"]:  # read in its declared frame; checked before it is used
                gold = read_gold(sm.input.gold, **dict(fit["gold"]))
            agg = Aggregator(
                Params.from_dict(dict(fit["aggregate"])),
                seed=int(sm.params.seed),  # every model the same seed (its own job's, before)
                per_tool=bool(sm.params.per_tool),
                calibration=dict(sm.params.calibration),
            )
            agg.fit(boxes, gold=gold)  # the file is read block by block
            # only the files the rule declares for this model: what something downstream reads
            files = [Path(sm.output[name]) for name in fit["outputs"]]
            (folder,) = {f.parent for f in files}  # one model's outputs: one folder
            agg.write(folder, outputs=[f.name for f in files], assignment_columns=columns)

        fits = list(sm.params.fits)
        for i, fit in enumerate(fits):
            if i:
                release_memory()  # the last model's result (freed on return) handed back
            with timed(f"aggregation by the {fit['model']} model ({i + 1} of {len(fits)})"):
                fit_and_write(fit)


main(snakemake, _run)  # noqa: F821
