"""Snakemake adapter: rule baseline -> clumpscout.baseline (appendix, SPEC 24; issue 3)."""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.baseline import meanshift_labels, single_linkage_labels
    from clumpscout.io import write_json, write_parquet

    boxes = pd.read_parquet(sm.input[0])
    ms, ms_report = meanshift_labels(
        boxes, bandwidth=sm.params.bandwidth, impl=sm.params.impl, path=sm.input[0]
    )
    sl, sl_report = single_linkage_labels(
        boxes,
        cut=float(sm.params.cut),
        min_volunteers=int(sm.params.min_volunteers),
        path=sm.input[0],
    )
    write_parquet(ms, sm.output.meanshift)
    write_parquet(sl, sm.output.single_linkage)
    write_json(
        {"n": int(sm.params.n), "meanshift": ms_report, "single_linkage": sl_report},
        sm.output.report,
    )


main(snakemake, _run)  # noqa: F821
