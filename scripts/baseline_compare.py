"""Snakemake adapter: rules baseline_counts / baseline_compare_{experts,truth}.

Counts per subject (ours − baseline), and the expert / truth scores of our labels and of both
baselines in the format of clumpscout.compare, tagged by ``method`` and ``n``.
"""

from _common import main

METHODS = ("ours", "meanshift", "single_linkage")


def _run(sm):
    import pandas as pd

    from clumpscout.baseline import count_difference
    from clumpscout.compare import read_table, score_points, score_truth, subjects_of
    from clumpscout.io import write_csv

    tables = {m: read_table(sm.input[m]) for m in METHODS}
    keys = set(sm.input.keys())
    if "truth" not in keys and "points" not in keys:
        counts = count_difference(
            tables["ours"], {m: tables[m] for m in METHODS[1:]}, subjects_of(sm.input.subjects)
        )
        write_csv(counts, sm.output[0])
        return
    outs = {"curve": [], "summary": [], "calibration": []}
    for method in METHODS:
        tags = {"method": "clumpscout" if method == "ours" else method, "n": int(sm.params.n)}
        if "truth" in keys:
            curve, summary, calib = score_truth(
                tables[method],
                read_table(sm.input.truth),
                thresholds=int(sm.params.thresholds),
                subjects=subjects_of(sm.input.subjects),
                bins=int(sm.params.bins),
                tags=tags,
                labels_path=sm.input[method],
                truth_path=sm.input.truth,
            )
            outs["calibration"].append(calib)
        else:
            curve, summary = score_points(
                tables[method],
                read_table(sm.input.points),
                thresholds=int(sm.params.thresholds),
                tags=tags,
                labels_path=sm.input[method],
                points_path=sm.input.points,
            )
        outs["curve"].append(curve)
        outs["summary"].append(summary)
    for key in sm.output.keys():
        write_csv(pd.concat(outs[key], ignore_index=True), sm.output[key])


main(snakemake, _run)  # noqa: F821
