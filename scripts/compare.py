"""Snakemake adapter: rule compare (reference experts or truth) -> clumpscout.evaluation.compare (§6.3, decisions.md#expert-comparison).

One job scores the labels of every n against the reference, read once; the tables are
tagged with the consensus model and n (columns ``model``, ``n``) and collected into one per
kind (curve, summary, calibration). Both references get a p_fp calibration table
(decisions.md#reference-wildcard): against the experts, a label counts as false when no
expert click lies in its box."""

from _common import main


def _score(sm, labels_path, n, reference, subjects_path):
    """(curve, summary, calibration) of the labels of subsample n."""
    from clumpscout.evaluation.compare import read_labels, score_points, score_truth, subjects_of

    labels = read_labels(labels_path)
    tags = {"model": str(sm.params.model), "n": int(n)}
    if "truth" in sm.input.keys():
        return score_truth(
            labels,
            reference,
            thresholds=int(sm.params.thresholds),
            subjects=subjects_of(subjects_path),
            bins=int(sm.params.bins),
            tags=tags,
            labels_path=labels_path,
            truth_path=sm.input.truth,
        )
    curve, summary = score_points(
        labels,
        reference,
        thresholds=int(sm.params.thresholds),
        tags=tags,
        labels_path=labels_path,
        points_path=sm.input.points,
    )
    calib = score_truth(
        labels,
        reference,
        thresholds=int(sm.params.thresholds),
        subjects=reference["subject_id"].unique(),
        bins=int(sm.params.bins),
        tags=tags,
        labels_path=labels_path,
        truth_path=sm.input.points,
    )[2]
    return curve, summary, calib


def _run(sm):
    from clumpscout.evaluation.compare import collect_frames, read_points
    from clumpscout.io import write_csv

    truth = "truth" in sm.input.keys()
    reference = read_points(sm.input.truth if truth else sm.input.points)
    ns = [int(n) for n in sm.params.ns]
    subjects = list(sm.input.subjects) if truth else [None] * len(ns)
    tables = [
        _score(sm, labels, n, reference, subj)
        for labels, n, subj in zip(sm.input.labels, ns, subjects, strict=True)
    ]
    for k, name in enumerate(("curve", "summary", "calibration")):
        write_csv(collect_frames([t[k] for t in tables]), sm.output[name])


main(snakemake, _run)  # noqa: F821
