"""Snakemake adapter: rules compare_experts / compare_truth -> clumpscout.evaluation.compare (§6.3, decisions.md#expert-comparison).

The tables are tagged with the consensus model and n (columns ``model``, ``n``)."""

from _common import main


def _run(sm):
    from clumpscout.evaluation.compare import read_table, score_points, score_truth, subjects_of
    from clumpscout.io import write_csv

    labels = read_table(sm.input.labels)
    tags = {"model": str(sm.params.model), "n": int(sm.params.n)}
    if "truth" in sm.input.keys():
        curve, summary, calib = score_truth(
            labels,
            read_table(sm.input.truth),
            thresholds=int(sm.params.thresholds),
            subjects=subjects_of(sm.input.subjects),
            bins=int(sm.params.bins),
            tags=tags,
            labels_path=sm.input.labels,
            truth_path=sm.input.truth,
        )
        write_csv(calib, sm.output.calibration)
    else:
        curve, summary = score_points(
            labels,
            read_table(sm.input.points),
            thresholds=int(sm.params.thresholds),
            tags=tags,
            labels_path=sm.input.labels,
            points_path=sm.input.points,
        )
    write_csv(curve, sm.output.curve)
    write_csv(summary, sm.output.summary)


main(snakemake, _run)  # noqa: F821
