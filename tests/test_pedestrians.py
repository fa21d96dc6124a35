"""Real crowd boxes with experts: the Lean Crowdsourcing pedestrians (../shared; README there).

Known answers: the counts of the data's README (verified by its authors' tooling, not by
ours), and the acceptance of the gold-standard calibration on real boxes.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.crowd_boxes import read_crowd_boxes, read_crowd_gold
from clumpscout.data.gold import gold_from_table

pytestmark = pytest.mark.shared


@pytest.fixture(scope="module")
def data(shared):
    d = shared / "data" / "crowd_boxes" / "lean_pedestrians"
    if not d.is_dir():
        pytest.skip("../shared/data/crowd_boxes/lean_pedestrians is absent")
    boxes, report = read_crowd_boxes(d / "workers_179_wh.json")
    experts = gold_from_table(read_crowd_gold(d / "experts_177_wh.json"))
    return boxes, report, experts


def test_reader_counts_match_the_readme(data):
    boxes, report, experts = data
    # README: 1,448 images, 7 workers each (10,136 pairs), 11,765 boxes plus 321 nulls,
    # 1,912 pairs with no box, 31 boxes with zero width or height
    assert boxes["subject_id"].nunique() == 1448
    assert boxes["classification_id"].nunique() == 10136
    assert report["boxes"] == 11765 and report["null_boxes"] == 321
    assert report["empty_classifications"] == 1912
    assert report["boxes_without_area"] == 31
    assert (boxes.groupby("subject_id")["classification_id"].nunique() == 7).all()
    # experts: 938 images, 1,218 boxes (11 nulls), 142 confirmed empty
    assert len(experts.subjects) == 938
    assert int(experts.counts.sum()) == 1218
    assert int((experts.counts == 0).sum()) == 142
    has = boxes["x1"].notna()
    assert (boxes.loc[has, "x1"] >= 0).all() and (boxes.loc[has, "x2"] <= 1280).all()


@pytest.mark.slow
def test_gold_calibration_on_real_boxes(data):
    """20 % of the expert images as gold, scored on the other expert images: the calibrated
    p_fp is calibrated (ECE ≤ 0.05) and beats the model's own p_fp in F1 and ECE."""
    from benchmarks.expert_scores import score_against_gold, split_gold
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.calibration import default_calibration

    boxes, _, experts = data
    gold, held_out = split_gold(experts, 0.2, seed=0)
    agg = Aggregator(seed=0).fit(boxes, gold=gold)
    assert agg.report_["calibration"]["gold_subjects_used"] == len(gold.subjects) == 188
    s = score_against_gold(agg.labels_, experts, held_out)
    raw = score_against_gold(
        default_calibration(agg.labels_, agg.subjects_, 1.0)[0], experts, held_out
    )
    assert s["ece"] <= 0.05
    assert s["f1"] > raw["f1"] and s["ece"] < raw["ece"]
    # the two-worker labels that match no expert box no longer all pass as real
    two = agg.labels_.loc[agg.labels_["subject_id"].isin(held_out) & (agg.labels_["n_marks"] == 2)]
    assert np.mean(two["p_fp"] >= 0.5) > 0.5
