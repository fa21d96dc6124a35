"""Snakemake adapter: rules baseline / baseline_dbscan -> clumpscout.evaluation.baseline.

Rule baseline writes MeanShift (appendix, decisions.md#meanshift-baseline) and single linkage; rule
baseline_dbscan writes DBSCAN.
"""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.evaluation.baseline import (
        dbscan_labels,
        meanshift_labels,
        single_linkage_labels,
    )
    from clumpscout.io import write_json, write_parquet

    boxes = pd.read_parquet(sm.input[0])
    report = {"n": int(sm.params.n)}
    if "dbscan" in sm.output.keys():
        db, report["dbscan"] = dbscan_labels(
            boxes,
            eps_factor=float(sm.params.eps_factor),
            min_samples=int(sm.params.min_samples),
            path=sm.input[0],
        )
        write_parquet(db, sm.output.dbscan)
    else:
        ms, report["meanshift"] = meanshift_labels(
            boxes, bandwidth=sm.params.bandwidth, impl=sm.params.impl, path=sm.input[0]
        )
        sl, report["single_linkage"] = single_linkage_labels(
            boxes,
            cut=float(sm.params.cut),
            min_volunteers=int(sm.params.min_volunteers),
            path=sm.input[0],
        )
        write_parquet(ms, sm.output.meanshift)
        write_parquet(sl, sm.output.single_linkage)
    write_json(report, sm.output.report)


main(snakemake, _run)  # noqa: F821
