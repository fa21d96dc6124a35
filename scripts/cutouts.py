"""Snakemake adapter: rule cutouts -> clumpscout.images.cutouts.make_cutouts (+ the report montage)."""

from _common import main


def _run(sm):
    from pathlib import Path

    import pandas as pd

    from clumpscout.figures.flux import montage_items, plot_subject_montage
    from clumpscout.images.cutouts import make_cutouts

    frames = Path(sm.input.frames)
    out = Path(sm.output.table).parent
    meta, _ = make_cutouts(
        frames, frames / "frames.csv", out, dict(sm.params.cutouts), workers=int(sm.threads)
    )
    truth, distractors = pd.read_csv(sm.input.truth), pd.read_csv(sm.input.distractors)
    items = montage_items(meta, out, int(sm.params.montage), truth, distractors)
    plot_subject_montage(items, Path(sm.output.montage).with_suffix(""), dpi=int(sm.params.dpi))


main(snakemake, _run)  # noqa: F821
