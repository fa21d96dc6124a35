"""Snakemake adapter: rule flux_figures -> clumpscout.figures.flux.build."""

from _common import main


def _run(sm):
    from pathlib import Path

    import pandas as pd

    from clumpscout.figures.flux import build

    tables = {k: pd.read_parquet(v) for k, v in sm.input.items()}
    names = [k[: -len("_png")] for k in sm.output.keys() if k.endswith("_png")]
    out = Path(sm.output[f"{names[0]}_png"]).parent
    build(tables, out, dpi=int(sm.params.dpi), only=names)


main(snakemake, _run)  # noqa: F821
