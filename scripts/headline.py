"""Snakemake adapter: rule headline -> clumpscout.report.headline.build."""

from _common import main


def _run(sm):
    from clumpscout.report.headline import build

    inputs = {k: (v if isinstance(v, str) else list(v)) for k, v in sm.input.items()}
    for key in ("labels", "subjects"):  # per-n inputs are lists even for one n
        if isinstance(inputs.get(key), str):
            inputs[key] = [inputs[key]]
    params = {
        "ns": list(sm.params.ns),
        "figures": {"n_ref": sm.params.n_ref},
        "model": sm.params.get("model", "paper"),
        "wording": sm.params.get("wording", "clump_scout"),
    }
    build(inputs, sm.output.csv, sm.output.html, params)


main(snakemake, _run)  # noqa: F821
