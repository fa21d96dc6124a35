"""Snakemake adapter: rule subjects -> clumpscout.data.subjects.build_subjects."""

from _common import main


def _run(sm):
    from clumpscout.data.subjects import build_subjects
    from clumpscout.io import write_json, write_parquet

    table = build_subjects(
        catalogue=sm.input.catalogue or None,
        subjects_export=sm.input.subjects_export,
        cfg=dict(sm.params.subjects),
        box_side=sm.params.box_side,
        psfield=sm.input.psfield or None,
    )
    report = table.attrs.pop("report", {})
    write_parquet(table, sm.output[0])
    write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
