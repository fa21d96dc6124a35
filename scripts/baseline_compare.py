"""Snakemake adapter: rules baseline_counts / baseline_compare (reference experts or truth).

baseline_counts: clumps per subject, ours (the paper model) − each baseline.
baseline_compare: the expert / truth scores of every method at n = baseline.n (both models
and the baselines; ``params.methods`` names the label-table inputs) in the format of
clumpscout.evaluation.compare, tagged by ``method`` and ``n``.
"""

from _common import main


def _run(sm):
    import pandas as pd

    from clumpscout.evaluation.baseline import count_difference
    from clumpscout.evaluation.compare import read_table, score_points, score_truth, subjects_of
    from clumpscout.io import write_csv

    keys = set(sm.input.keys())
    if "truth" not in keys and "points" not in keys:
        baselines = [k for k in sm.input.keys() if k not in ("ours", "subjects")]
        counts = count_difference(
            read_table(sm.input.ours),
            {m: read_table(sm.input[m]) for m in baselines},
            subjects_of(sm.input.subjects),
        )
        write_csv(counts, sm.output[0])
        return
    outs = {"curve": [], "summary": [], "calibration": []}
    for method in sm.params.methods:
        tags = {"method": method, "n": int(sm.params.n)}
        labels = read_table(sm.input[method])
        if "truth" in keys:
            curve, summary, calib = score_truth(
                labels,
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
            points = read_table(sm.input.points)
            curve, summary = score_points(
                labels,
                points,
                thresholds=int(sm.params.thresholds),
                tags=tags,
                labels_path=sm.input[method],
                points_path=sm.input.points,
            )
            # p_fp calibration against the experts (decisions.md#reference-wildcard)
            outs["calibration"].append(
                score_truth(
                    labels,
                    points,
                    thresholds=int(sm.params.thresholds),
                    subjects=points["subject_id"].unique(),
                    bins=int(sm.params.bins),
                    tags=tags,
                    labels_path=sm.input[method],
                    truth_path=sm.input.points,
                )[2]
            )
        outs["curve"].append(curve)
        outs["summary"].append(summary)
    for key in sm.output.keys():
        write_csv(pd.concat(outs[key], ignore_index=True), sm.output[key])


main(snakemake, _run)  # noqa: F821
