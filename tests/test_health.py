"""Run-health diagnostics on hand-built tables whose answers are known.

Boxes are in subject pixels. The coinciding boxes used below are 10x10 squares shifted
by one pixel: intersection 9x9 = 81, union 200 − 81 = 119, Jaccard distance 38/119 ≈ 0.32,
well under the default 0.5. The "far" box is disjoint from them (distance 1).
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pandas as pd
import pytest

from clumpscout.model.health import WARNING_PREFIX, diagnose, log_warnings

NEAR = [(10, 10, 20, 20), (11, 10, 21, 20), (10, 11, 20, 21), (11, 11, 21, 21)]
FAR = (50, 50, 60, 60)
NAN_BOX = (np.nan, np.nan, np.nan, np.nan)


def assignments(rows) -> pd.DataFrame:
    """rows: (subject_id, volunteer, box, assignment); one classification per row."""
    return pd.DataFrame(
        {
            "classification_id": np.arange(len(rows), dtype=np.int64),
            "subject_id": pd.array([r[0] for r in rows], dtype="int64"),
            "volunteer": pd.array([r[1] for r in rows], dtype=object),
            "x1": pd.array([r[2][0] for r in rows], dtype="float64"),
            "y1": pd.array([r[2][1] for r in rows], dtype="float64"),
            "x2": pd.array([r[2][2] for r in rows], dtype="float64"),
            "y2": pd.array([r[2][3] for r in rows], dtype="float64"),
            "image_width": 100.0,
            "image_height": 100.0,
            "cluster": pd.array([0] * len(rows), dtype="Int64"),
            "assignment": pd.array([r[3] for r in rows], dtype=object),
        }
    )


def labels(rows) -> pd.DataFrame:
    """rows: (subject_id, box)."""
    cols = {"subject_id": pd.array([r[0] for r in rows], dtype="int64")}
    for k, c in enumerate(("x1", "y1", "x2", "y2")):
        cols[c] = pd.array([float(r[1][k]) for r in rows], dtype="float64")
    out = pd.DataFrame(cols)
    out["clump"] = np.arange(len(out))
    out["p_fp"] = 0.1
    return out


def four_agree(kind="dummy", subject=7):
    return [(subject, f"v{i}", NEAR[i], kind) for i in range(4)]


def agree_warnings(diag):
    return [w for w in diag["warnings"] if "coinciding" in w]


def test_four_agreeing_volunteers_without_a_label_are_flagged():
    # a label on another subject must not cover subject 7
    a = assignments(four_agree() + [(8, "v0", FAR, "clump")])
    diag = diagnose(a, labels([(8, FAR)]))
    assert diag["subjects_with_agreement"] == 1
    assert diag["agree_unlabelled"] == 1
    assert diag["agree_unlabelled_share"] == 1.0
    assert diag["agree_unlabelled_examples"] == [7]
    assert len(agree_warnings(diag)) == 1
    assert "1 of 1 subjects" in agree_warnings(diag)[0]
    assert diag["ok"] is False


def test_a_label_on_the_agreement_clears_the_flag():
    diag = diagnose(assignments(four_agree("clump")), labels([(7, (10, 10, 20, 20))]))
    assert diag["subjects_with_agreement"] == 1
    assert diag["agree_unlabelled"] == 0
    assert diag["agree_unlabelled_share"] == 0.0
    assert diag["agree_unlabelled_examples"] == []
    assert diag["warnings"] == []
    assert diag["ok"] is True


def test_a_label_elsewhere_in_the_subject_does_not_count():
    diag = diagnose(assignments(four_agree("clump")), labels([(7, FAR)]))
    assert diag["agree_unlabelled"] == 1


def test_two_agreeing_volunteers_are_not_agreement():
    a = assignments([(7, "v0", NEAR[0], "dummy"), (7, "v1", NEAR[1], "dummy")])
    diag = diagnose(a, labels([]))
    assert diag["subjects_with_agreement"] == 0
    assert diag["agree_unlabelled"] == 0
    assert agree_warnings(diag) == []


def test_exactly_min_agreeing_volunteers_is_agreement():
    a = assignments([(7, f"v{i}", NEAR[i], "dummy") for i in range(3)])
    assert diagnose(a, labels([]))["subjects_with_agreement"] == 1
    assert diagnose(a, labels([]), min_agreeing=4)["subjects_with_agreement"] == 0


def test_boxes_of_the_same_volunteer_count_once():
    # v0 drew three coinciding boxes, v1 one: two volunteers, not four
    rows = [
        (7, "v0", NEAR[0], "dummy"),
        (7, "v0", NEAR[1], "dummy"),
        (7, "v0", NEAR[2], "dummy"),
        (7, "v1", NEAR[3], "dummy"),
    ]
    diag = diagnose(assignments(rows), labels([]))
    assert diag["subjects_with_agreement"] == 0
    # a third volunteer makes it agreement
    diag = diagnose(assignments(rows + [(7, "v2", NEAR[0], "dummy")]), labels([]))
    assert diag["subjects_with_agreement"] == 1


def test_far_boxes_do_not_agree_and_agree_distance_is_strict():
    rows = [(7, "v0", NEAR[0], "dummy"), (7, "v1", NEAR[1], "dummy"), (7, "v2", FAR, "dummy")]
    assert diagnose(assignments(rows), labels([]))["subjects_with_agreement"] == 0
    # boxes at distance exactly 0.5: (0,0,10,10) and (0,0,10,20) -> 1 − 100/200
    half = [(7, "v0", (0, 0, 10, 10), "dummy")] + [
        (7, f"v{i}", (0, 0, 10, 20), "dummy") for i in (1, 2)
    ]
    assert diagnose(assignments(half), labels([]))["subjects_with_agreement"] == 0
    assert (
        diagnose(assignments(half), labels([]), agree_distance=0.51)["subjects_with_agreement"] == 1
    )


def test_agreement_around_one_box_need_not_be_pairwise():
    # b = (0,0,20,10) (area 200); the other two are 9x10 boxes on its left and right
    # halves: each at distance 1 − 90/200 = 0.55 from b, and disjoint from each other
    b = (0, 0, 20, 10)
    rows = [(7, "v0", b, "dummy"), (7, "v1", (0, 0, 9, 10), "dummy")]
    rows += [(7, "v2", (11, 0, 20, 10), "dummy")]
    diag = diagnose(assignments(rows), labels([]), agree_distance=0.6)
    assert diag["subjects_with_agreement"] == 1


def test_dummy_share_by_hand():
    rows = [
        (1, "v0", NEAR[0], "dummy"),
        (1, "v1", FAR, "clump"),
        (2, "v0", NEAR[1], "dummy"),
        (2, "v2", NEAR[2], "dummy"),
        (3, "v3", FAR, "not_aggregated"),  # not aggregated: not a box here
        (4, "v4", NAN_BOX, "empty"),  # empty classification
    ]
    diag = diagnose(assignments(rows), labels([(1, FAR)]), max_dummy_share=0.5)
    assert diag["boxes"] == 4
    assert diag["boxes_on_dummy"] == 3
    assert diag["dummy_share"] == pytest.approx(0.75)
    assert diag["boxes_not_aggregated"] == 1
    assert diag["empty_rows"] == 1
    assert diag["subjects_aggregated"] == 2
    dummy = [w for w in diag["warnings"] if "false positives" in w]
    assert len(dummy) == 1 and "75%" in dummy[0] and "3 of 4" in dummy[0]
    # at the threshold exactly: no warning
    assert diagnose(assignments(rows), labels([(1, FAR)]), max_dummy_share=0.75)["ok"]


def test_empty_classifications_are_ignored():
    rows = four_agree("clump") + [(7, f"e{i}", NAN_BOX, "empty") for i in range(5)]
    rows += [(9, "e9", NAN_BOX, "empty")]
    diag = diagnose(assignments(rows), labels([(7, NEAR[0])]))
    assert diag["boxes"] == 4
    assert diag["empty_rows"] == 6
    assert diag["subjects_aggregated"] == 1
    assert diag["dummy_share"] == 0.0
    assert diag["warnings"] == []


def test_not_aggregated_subjects_are_not_flagged():
    diag = diagnose(assignments(four_agree("not_aggregated")), labels([]))
    assert diag["subjects_with_agreement"] == 0
    assert diag["boxes"] == 0
    assert diag["warnings"] == []


def test_zero_labels_with_boxes_warns():
    rows = [(7, "v0", NEAR[0], "clump"), (8, "v1", FAR, "clump")]
    diag = diagnose(assignments(rows), labels([]))
    no_labels = [w for w in diag["warnings"] if "no labels" in w]
    assert len(no_labels) == 1 and "2 boxes" in no_labels[0]


def test_anonymous_volunteers_count_per_classification():
    rows = [(7, None, NEAR[i], "dummy") for i in range(3)]
    assert diagnose(assignments(rows), labels([]))["subjects_with_agreement"] == 1


def test_empty_inputs_give_zeros():
    diag = diagnose(assignments([]), labels([]))
    assert diag["boxes"] == diag["boxes_on_dummy"] == 0
    assert diag["dummy_share"] == 0.0
    assert diag["subjects_with_agreement"] == diag["agree_unlabelled"] == 0
    assert diag["agree_unlabelled_share"] == 0.0
    assert diag["warnings"] == [] and diag["ok"]


def test_result_is_json_serialisable_and_inputs_untouched():
    a = assignments(four_agree())
    lab = labels([(8, FAR)])
    a0, lab0 = a.copy(), lab.copy()
    diag = diagnose(a, lab)
    assert json.loads(json.dumps(diag)) == diag
    pd.testing.assert_frame_equal(a, a0)
    pd.testing.assert_frame_equal(lab, lab0)


def test_examples_are_capped_at_ten():
    rows = [r for s in range(25) for r in four_agree(subject=s)]
    diag = diagnose(assignments(rows), labels([]))
    assert diag["agree_unlabelled"] == 25
    assert diag["agree_unlabelled_examples"] == list(range(10))


def test_missing_column_and_bad_threshold_raise():
    with pytest.raises(ValueError, match="assignment"):
        diagnose(assignments([]).drop(columns="assignment"), labels([]))
    with pytest.raises(ValueError, match="min_agreeing"):
        diagnose(assignments([]), labels([]), min_agreeing=0)


def test_log_warnings_logs_each_warning_loudly(caplog):
    diag = diagnose(assignments(four_agree()), labels([]))
    assert len(diag["warnings"]) == 3  # dummy share, agreement thrown away, no labels
    logger = logging.getLogger("clumpscout.test_health")
    with caplog.at_level(logging.WARNING, logger="clumpscout.test_health"):
        assert log_warnings(diag, logger) == 3
    recs = [r for r in caplog.records if r.name == "clumpscout.test_health"]
    assert [r.levelno for r in recs] == [logging.WARNING] * 3
    assert all(r.getMessage().startswith(WARNING_PREFIX) for r in recs)


def test_agrees_with_a_brute_force_reference():
    rng = np.random.default_rng(3)
    rows, labs = [], []
    for s in range(40):
        cx, cy = rng.uniform(0, 40, 2)  # a feature some volunteers mark, plus random clicks
        for _ in range(int(rng.integers(0, 12))):
            x, y = (cx, cy) + rng.normal(0, 2, 2) if rng.random() < 0.6 else rng.uniform(0, 40, 2)
            w = rng.uniform(8, 12)
            rows.append((s, f"v{rng.integers(0, 5)}", (x, y, x + w, y + w), "dummy"))
        if rng.random() < 0.6:
            x, y = (cx, cy) + rng.normal(0, 3, 2)
            labs.append((s, (x, y, x + 10, y + 10)))
    a, lab = assignments(rows), labels(labs)
    diag = diagnose(a, lab)
    expected_agree = expected_unlab = 0
    from clumpscout.model.distance import jaccard_distance

    for s, g in a.groupby("subject_id"):
        xy = g[["x1", "y1", "x2", "y2"]].to_numpy()
        v = g["volunteer"].to_numpy()
        d = jaccard_distance(xy[:, None, :], xy[None, :, :])
        agreeing = [i for i in range(len(g)) if len(set(v[(d[i] < 0.5) & (v != v[i])])) >= 2]
        if not agreeing:
            continue
        expected_agree += 1
        lxy = lab.loc[lab["subject_id"] == s, ["x1", "y1", "x2", "y2"]].to_numpy()
        if not (jaccard_distance(xy[agreeing][:, None, :], lxy[None, :, :]) < 0.5).any():
            expected_unlab += 1
    assert expected_agree > 5 and 0 < expected_unlab < expected_agree  # the case is not trivial
    assert diag["subjects_with_agreement"] == expected_agree
    assert diag["agree_unlabelled"] == expected_unlab
