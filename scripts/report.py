"""Snakemake adapter: rule report -> clumpscout.report.html (the report inside the DAG):
the reproduction report, or the project report (params.project)."""

from _common import main


def _run(sm):
    if sm.params.get("project"):
        from clumpscout.report.html import write_project_report

        write_project_report(
            sm.params.stems,
            sm.output[0],
            about=dict(sm.params.about),
            clicks=sm.input.clicks,
            clicks_report=sm.input.clicks_report,
        )
        return
    from clumpscout.report.html import read_warnings, write_report

    warnings = read_warnings(sm.input.gold_agreement) if "gold_agreement" in sm.input.keys() else []
    write_report(
        sm.params.entries,
        sm.output[0],
        intro=sm.input.intro,
        title=sm.params.title,
        warnings=warnings,
    )


main(snakemake, _run)  # noqa: F821
