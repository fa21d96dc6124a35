"""Snakemake adapter: rule simulate -> clumpscout.simulation.universe.simulate_universe."""

from _common import main


def _run(sm):
    from clumpscout.simulation.universe import simulate_universe

    simulate_universe(
        dict(sm.params.simulate),
        seed=int(sm.params.seed),
        out_dir=sm.output.classifications.rsplit("/", 1)[0],
    )


main(snakemake, _run)  # noqa: F821
