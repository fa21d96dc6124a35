"""Snakemake adapter: rules extract / extract_experts -> clumpscout.data.zooniverse.write_clicks.

With ``params.flat_clicks`` true (workflow ``source: clicks``) ``input.classifications`` is a
flattened clicks table, checked and typed by clumpscout.data.boxes.load_flat_clicks.
"""

from _common import main


def _run(sm):
    from clumpscout.data.zooniverse import LIMIT_DEFAULTS, write_clicks
    from clumpscout.io import write_json, write_parquet

    if getattr(sm.params, "flat_clicks", False):
        from clumpscout.data.boxes import load_flat_clicks

        clicks, report = load_flat_clicks(sm.input.classifications)
        write_parquet(clicks, sm.output.clicks)
    else:
        cfg = dict(sm.params.extract)
        report = write_clicks(
            sm.output.clicks,
            sm.input.classifications,
            sm.input.subjects_export or None,
            workflow_id=sm.params.workflow_id,
            workflow_version=sm.params.workflow_version,
            clump_task=cfg["clump_task"],
            unusual_tools=cfg["unusual_tools"],
            tools=cfg.get("tools"),
            missing_subjects=cfg["missing_subjects"],
            limits={k: cfg[k] for k in LIMIT_DEFAULTS if k in cfg},
            workers=int(sm.threads),
        )
    write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
