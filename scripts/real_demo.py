"""Snakemake adapter: rule real_demo -> clumpscout.images.real_demo.real_demo (+ its montage,
clumpscout.figures.flux.plot_demo_montage)."""

from _common import main


def _run(sm):
    from pathlib import Path

    from clumpscout.figures.flux import plot_demo_montage
    from clumpscout.images.real_demo import real_demo

    table, field, group = real_demo(
        field_dir=Path(sm.input.psfield).parent,
        psfield=sm.input.psfield,
        photofield=sm.input.photofield,
        hcg_dir=Path(sm.input.hcg[0]).parent,
        out_field=sm.output.field,
        out_hcg=sm.output.hcg88,
        fwhm_csv=sm.output.fwhm,
        cfg=dict(sm.params.cutouts),
        n_galaxies=int(sm.params.n_galaxies),
    )
    stem = Path(sm.output.montage).with_suffix("")
    plot_demo_montage(
        table, field, sm.output.field, group, sm.output.hcg88, stem, dpi=int(sm.params.dpi)
    )


main(snakemake, _run)  # noqa: F821
