"""Snakemake adapter: rule subjects -> clumpscout.data.subjects.build_subjects.

Optional rule part: ``input.clicks`` (workflow ``source: clicks``), a flattened clicks table
that gives the subject list and image sizes when there is no subject export.
"""

from _common import main


def _run(sm):
    from clumpscout.data.subjects import build_subjects
    from clumpscout.io import write_json, write_parquet

    table = build_subjects(
        catalogue=sm.input.catalogue or None,
        subjects_export=sm.input.subjects_export or None,
        cfg=dict(sm.params.subjects),
        box_side=sm.params.box_side,
        psfield=sm.input.psfield or None,
        clicks=getattr(sm.input, "clicks", None) or None,
    )
    report = table.attrs.pop("report", {})
    write_parquet(table, sm.output[0])
    write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
