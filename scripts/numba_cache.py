"""Snakemake adapter: rule numba_cache -> clumpscout.numba_cache.warm_up (docs/decisions.md#numba-warm-up)."""

from _common import main


def _run(sm):
    from clumpscout.io import write_json
    from clumpscout.numba_cache import warm_up

    write_json(warm_up(), sm.output[0])


main(snakemake, _run)  # noqa: F821
