"""Snakemake adapter: rule render_frames -> clumpscout.render.render_frames."""

from _common import main


def _read_distractors(sm):
    """truth_distractors.csv: the declared input, else the file beside the truth (if any)."""
    from pathlib import Path

    import pandas as pd

    path = sm.input.get("distractors")
    if path and Path(path).exists():
        return pd.read_csv(path)
    import logging

    logging.getLogger("clumpscout.render").warning("no %s: rendering clumps only", path)
    return None


def _run(sm):
    import pandas as pd

    from clumpscout.render import render_frames

    render_frames(
        pd.read_csv(sm.input.galaxies),
        pd.read_parquet(sm.input.subjects),
        pd.read_csv(sm.input.truth),
        _read_distractors(sm),
        sm.output.frames,
        dict(sm.params.render),
        seed=int(sm.params.seed),
        workers=int(sm.threads),
    )


main(snakemake, _run)  # noqa: F821
