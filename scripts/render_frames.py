"""Snakemake adapter: rule render_frames -> clumpscout.images.render.render_frames."""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.images.render import render_frames

    render_frames(
        pd.read_csv(sm.input.galaxies),
        pd.read_parquet(sm.input.subjects),
        pd.read_csv(sm.input.truth),
        pd.read_csv(sm.input.distractors),
        sm.output.frames,
        dict(sm.params.render),
        seed=int(sm.params.seed),
        workers=int(sm.threads),
        report_path=sm.output.report,
    )


main(snakemake, _run)  # noqa: F821
