"""Snakemake adapter: rule real_demo -> clumpscout.images.real_demo.real_demo."""

from _common import main


def _run(sm):
    from pathlib import Path

    from clumpscout.images.real_demo import real_demo

    real_demo(
        field_dir=Path(sm.input.psfield).parent,
        psfield=sm.input.psfield,
        photofield=sm.input.photofield,
        hcg_dir=Path(sm.input.hcg[0]).parent,
        out_field=sm.output.field,
        out_hcg=sm.output.hcg88,
        fwhm_csv=sm.output.fwhm,
        montage=sm.output.montage,
        cfg=dict(sm.params.cutouts),
        n_galaxies=int(sm.params.n_galaxies),
        dpi=int(sm.params.dpi),
    )


main(snakemake, _run)  # noqa: F821
