"""Snakemake adapter: the figure rules (one per clumpscout.figures.registry entry) ->
clumpscout.figures.paper.build."""

from _common import main


def _inputs(sm) -> dict:
    """Named inputs as str (one file) or list (per-n files, image tables)."""
    lists = set(sm.params.get("lists", []))
    out = {}
    for key, value in sm.input.items():
        if isinstance(value, str) and key not in lists:
            out[key] = value
        else:
            out[key] = [value] if isinstance(value, str) else list(value)
    return out


def _run(sm):
    from clumpscout.figures.paper import build

    params = {
        "ns": list(sm.params.ns),
        "figures": dict(sm.params.figures),
        "seed": int(sm.params.get("seed", 0)),
        "reference": sm.params.get("reference", "experts"),
        "wording": sm.params.get("wording", "clump_scout"),
    }
    stem = sm.output.png[: -len(".png")]
    build(sm.params.figure, _inputs(sm), stem, params)


main(snakemake, _run)  # noqa: F821
