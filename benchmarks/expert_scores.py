"""Labels against a gold standard on held-out subjects: F1, calibration, counts.

Used by the worked examples and benchmarks that calibrate on part of a project's gold
standard and score on the rest (benchmarks/pedestrians.py, benchmarks/gold_size.py):

* :func:`split_gold`: the gold subjects split at random (seeded) into the calibration part
  and the held-out part;
* :func:`score_against_gold`: on the held-out subjects, precision, recall and F1 of the
  labels with p_fp < ``p_cut`` matched one-to-one to the experts' objects
  (:mod:`clumpscout.metrics.matching`), the ECE of p_fp with "false" = matched to no
  expert object (every label), and the count MAE per subject (labels with p_fp < p_cut
  against the experts' count).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from clumpscout.data.gold import Gold
from clumpscout.metrics.matching import match_one_to_one
from clumpscout.metrics.reliability import calibration


def split_gold(gold: Gold, fraction: float, seed: int = 0) -> tuple[Gold, np.ndarray]:
    """(the gold standard on a random ``fraction`` of its subjects, the other subjects)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(np.sort(gold.subjects))
    k = int(round(fraction * len(perm)))
    return gold.restrict(perm[:k]), np.sort(perm[k:])


def score_against_gold(
    labels: pd.DataFrame,
    gold: Gold,
    subjects,
    p_cut: float = 0.5,
    iou_min: float = 0.5,
    bins: int = 10,
) -> dict:
    """Scores of ``labels`` against ``gold`` (marks) on ``subjects`` (module docstring)."""
    subjects = np.asarray(subjects)
    lab = labels.loc[labels["subject_id"].isin(subjects)].reset_index(drop=True)
    obj = gold.marks.loc[gold.marks["subject_id"].isin(subjects)].reset_index(drop=True)
    kept = lab.loc[lab["p_fp"] < p_cut].reset_index(drop=True)
    matched_kept, _ = match_one_to_one(kept, obj, gold.geometry, iou_min)
    matched_all, _ = match_one_to_one(lab, obj, gold.geometry, iou_min)
    tp = int(matched_kept.sum())
    precision = tp / len(kept) if len(kept) else float("nan")
    recall = tp / len(obj) if len(obj) else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if tp else 0.0
    n_lab = kept["subject_id"].value_counts().reindex(subjects, fill_value=0)
    n_obj = gold.counts.reindex(subjects).fillna(0)
    return {
        "subjects": int(len(subjects)),
        "expert_objects": int(len(obj)),
        "labels": int(len(lab)),
        "kept": int(len(kept)),
        "precision": precision,
        "recall": recall,
        "f1": f1,
        "ece": calibration(lab["p_fp"].to_numpy(dtype=float), ~matched_all, bins)[1]
        if len(lab)
        else float("nan"),
        "count_mae": float(np.abs(n_lab.to_numpy() - n_obj.to_numpy()).mean()),
        "count_bias": float((n_lab.to_numpy() - n_obj.to_numpy()).mean()),
        "max_p_fp": float(lab["p_fp"].max()) if len(lab) else float("nan"),
    }
