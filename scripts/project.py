"""Snakemake adapter: the project report's section rules (workflow/rules/project.smk) ->
clumpscout.report.project.build."""

from _common import main


def _run(sm):
    from clumpscout.report.project import build

    inputs = {k: str(v) for k, v in sm.input.items()}
    build(sm.params.section, inputs, sm.output.png[: -len(".png")], dict(sm.params.settings))


main(snakemake, _run)  # noqa: F821
