"""Snakemake adapter: rule compare (reference experts or truth) -> clumpscout.evaluation.compare (§6.3, decisions.md#expert-comparison).

The tables are tagged with the consensus model and n (columns ``model``, ``n``). Both
references get a p_fp calibration table (decisions.md#reference-wildcard): against the
experts, a label counts as false when no expert click lies in its box."""

from _common import main


def _run(sm):
    from clumpscout.evaluation.compare import (
        read_labels,
        read_points,
        score_points,
        score_truth,
        subjects_of,
    )
    from clumpscout.io import write_csv

    labels = read_labels(sm.input.labels)
    tags = {"model": str(sm.params.model), "n": int(sm.params.n)}
    if "truth" in sm.input.keys():
        curve, summary, calib = score_truth(
            labels,
            read_points(sm.input.truth),
            thresholds=int(sm.params.thresholds),
            subjects=subjects_of(sm.input.subjects),
            bins=int(sm.params.bins),
            tags=tags,
            labels_path=sm.input.labels,
            truth_path=sm.input.truth,
        )
    else:
        points = read_points(sm.input.points)
        curve, summary = score_points(
            labels,
            points,
            thresholds=int(sm.params.thresholds),
            tags=tags,
            labels_path=sm.input.labels,
            points_path=sm.input.points,
        )
        calib = score_truth(
            labels,
            points,
            thresholds=int(sm.params.thresholds),
            subjects=points["subject_id"].unique(),
            bins=int(sm.params.bins),
            tags=tags,
            labels_path=sm.input.labels,
            truth_path=sm.input.points,
        )[2]
    write_csv(calib, sm.output.calibration)
    write_csv(curve, sm.output.curve)
    write_csv(summary, sm.output.summary)


main(snakemake, _run)  # noqa: F821
