"""Scoring helpers for benchmarks against a simulated truth (the regime grid).

Built on :mod:`clumpscout.evaluation.compare`, which defines purity, completeness, the p_fp threshold
grid, the optimal point and the calibration error. This module adds the per-method numbers
the regime benchmark (``benchmarks/regimes.py``) reports:

- **True label.** A label is true when its box contains the centre of a real object of
  its subject (closed box, subject pixels; :func:`clumpscout.metrics.containment.containment`). "Real
  object" is either the true clumps (``truth_clumps.csv``) or any real object: clumps,
  faint features, foreground stars and bulges (``truth_objects.csv``, or
  ``truth_clumps.csv`` + ``truth_distractors.csv``), see
  :func:`clumpscout.simulation.truth.truth_tables`.
- **Realised errors** (:func:`realised_errors`): realised false labels are labels (every
  label, i.e. at p* = 1) that contain no real object's centre; realised misses are real
  objects that lie inside no label. They are what the model's Σ N_fp and Σ N_fn
  estimate.
- **Count error** (:func:`count_mae`): per subject, the number of labels with
  p_fp < ``p_cut`` (every label for a method without p_fp) minus the number of real
  objects; the mean of its absolute value over the scored subjects (subjects without
  labels or objects count, with 0).
- **Expected count** (:func:`expected_counts`): per subject ``Σ_labels (1 − p_fp) + N_fn``
  (the model's posterior mean number of objects), or the ``expected_count`` column of
  the subjects table when the model writes one; :func:`expected_count_error` is its mean
  signed error against the true count over the subjects that have one (subjects that
  never went through a batch have no N_fn and are left out).
- **Marked objects** (:func:`marked_objects`): from the simulator's click truth, the
  fraction of a subject's classifications (those of the scored subsample) that put at
  least one click on each real object; the benchmark's "no collapse" check compares the
  label count with the number of objects marked by at least 30% of the viewers.
- **ECE** (:func:`label_ece`): :func:`clumpscout.metrics.reliability.calibration` with "false" =
  the label contains no real object's centre. ``ece_matched`` (:func:`label_ece_matched`):
  "false" = the label is matched one-to-one to no real object
  (:func:`clumpscout.metrics.matching.match_one_to_one`), the event the calibrated p_fp
  predicts (docs/decisions.md#gold-standard): a second label on an object already counted
  is false there, true under containment.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np
import pandas as pd

from clumpscout.evaluation.compare import score_truth
from clumpscout.metrics.containment import containment
from clumpscout.metrics.matching import match_one_to_one
from clumpscout.metrics.reliability import calibration

log = logging.getLogger(__name__)

#: kinds of real objects that are not clumps (truth_distractors.csv)
DISTRACTOR_KINDS = ("faint_feature", "star", "bulge")


# ---------------------------------------------------------------- truth
def marked_objects(
    truth_clicks: pd.DataFrame,
    boxes: pd.DataFrame,
    min_fraction: float = 0.0,
    task: str | None = "T1",
) -> pd.DataFrame:
    """Real objects and the fraction of their subject's classifications that marked them.

    ``truth_clicks``: the simulator's click truth (classification_id, subject_id, task,
    source, and either ``object`` or the ``clump`` / ``distractor`` indices). Only clicks
    of the marking task ``task`` (None: every task) count; expert rows and clicks with no
    object (index < 0, or source ``spurious``) are ignored. ``kind`` is the click's
    ``source``. ``boxes``: the scored subsample; its classifications are the viewers.
    Returns one row per marked object (subject_id, kind, object, n_marked, n_viewers,
    fraction) with ``fraction >= min_fraction``. Objects nobody marked are absent.
    """
    viewers = boxes.groupby("subject_id")["classification_id"].nunique()
    tc = truth_clicks
    keep = tc["classification_id"].isin(boxes["classification_id"].unique()).to_numpy(copy=True)
    if "expert" in tc.columns:
        keep = keep & ~tc["expert"].astype(bool).to_numpy()
    if task is not None and str(task).lower() not in ("", "all", "none") and "task" in tc:
        keep = keep & (tc["task"].astype(str) == str(task)).to_numpy()
    tc = tc.loc[keep]
    kind = tc["source"].astype(str).to_numpy() if "source" in tc.columns else "object"
    if "object" in tc.columns:
        obj = tc["object"].to_numpy(dtype=np.int64)
    else:
        obj = np.where(
            tc["clump"].to_numpy() >= 0, tc["clump"].to_numpy(), tc["distractor"].to_numpy()
        ).astype(np.int64)
    marks = pd.DataFrame(
        {
            "subject_id": tc["subject_id"].to_numpy(),
            "kind": kind,
            "object": obj,
            "classification_id": tc["classification_id"].to_numpy(),
        }
    )
    marks = marks.loc[(marks["object"] >= 0) & (marks["kind"] != "spurious")]
    out = (
        marks.groupby(["subject_id", "kind", "object"], sort=True)["classification_id"]
        .nunique()
        .rename("n_marked")
        .reset_index()
    )
    out["n_viewers"] = viewers.reindex(out["subject_id"]).to_numpy()
    out["fraction"] = out["n_marked"] / out["n_viewers"]
    return out.loc[out["fraction"] >= min_fraction].reset_index(drop=True)


# ---------------------------------------------------------------- per-label numbers
def _p_fp(labels: pd.DataFrame) -> np.ndarray | None:
    return labels["p_fp"].to_numpy(dtype=float) if "p_fp" in labels.columns else None


def _in(df: pd.DataFrame, subjects: Iterable | None) -> pd.DataFrame:
    if subjects is None:
        return df
    return df.loc[df["subject_id"].isin(np.asarray(list(subjects)))].reset_index(drop=True)


def realised_errors(
    labels: pd.DataFrame, truth: pd.DataFrame, subjects: Iterable | None = None
) -> tuple[int, int]:
    """(realised false labels, realised misses) at p* = 1 over ``subjects``.

    A false label contains no true position of its subject; a miss is a true position
    inside no label. ``subjects`` None: every subject of the labels and the truth.
    """
    lab = _in(labels, subjects)
    tr = _in(truth, subjects)
    hit, best = containment(lab, tr)
    return int((~hit).sum()), int((~np.isfinite(best)).sum())


def per_subject_counts(
    labels: pd.DataFrame, truth: pd.DataFrame, subjects: Iterable, p_cut: float = 0.5
) -> pd.DataFrame:
    """Per subject: labels with p_fp < ``p_cut`` (all labels without p_fp) and true objects."""
    subjects = np.unique(np.asarray(list(subjects)))
    p = _p_fp(labels)
    kept = labels if p is None else labels.loc[p < p_cut]
    n_lab = kept["subject_id"].value_counts().reindex(subjects, fill_value=0)
    n_true = truth["subject_id"].value_counts().reindex(subjects, fill_value=0)
    return pd.DataFrame(
        {
            "subject_id": subjects,
            "n_labels": n_lab.to_numpy(np.int64),
            "n_true": n_true.to_numpy(np.int64),
        }
    )


def count_mae(
    labels: pd.DataFrame, truth: pd.DataFrame, subjects: Iterable, p_cut: float = 0.5
) -> float:
    """Mean over ``subjects`` of |labels with p_fp < p_cut − true objects| (NaN if none)."""
    c = per_subject_counts(labels, truth, subjects, p_cut)
    if not len(c):
        return float("nan")
    return float(np.abs(c["n_labels"] - c["n_true"]).mean())


def label_ece(
    labels: pd.DataFrame, truth: pd.DataFrame, subjects: Iterable | None = None, bins: int = 10
) -> float:
    """ECE of p_fp, "false" meaning the label contains no true position (NaN without p_fp)."""
    p = _p_fp(labels)
    if p is None:
        return float("nan")
    lab = _in(labels, subjects)
    hit, _ = containment(lab, _in(truth, subjects))
    return calibration(lab["p_fp"].to_numpy(dtype=float), ~hit, bins)[1]


def label_ece_matched(
    labels: pd.DataFrame, truth: pd.DataFrame, subjects: Iterable | None = None, bins: int = 10
) -> float:
    """ECE of p_fp, "false" meaning the label is matched one-to-one to no true position of
    its subject (NaN without p_fp)."""
    p = _p_fp(labels)
    if p is None:
        return float("nan")
    lab = _in(labels, subjects)
    matched, _ = match_one_to_one(lab, _in(truth, subjects)[["subject_id", "x", "y"]], "point")
    return calibration(lab["p_fp"].to_numpy(dtype=float), ~matched, bins)[1]


def expected_counts(subjects_df: pd.DataFrame, labels: pd.DataFrame) -> pd.Series:
    """Per subject the model's expected object count, indexed by subject_id.

    The subjects table's ``expected_count`` column when present, else
    ``Σ_labels (1 − p_fp) + n_fn``; NaN where n_fn is NaN (never aggregated).
    """
    sid = subjects_df["subject_id"].to_numpy()
    if "expected_count" in subjects_df.columns:
        return pd.Series(subjects_df["expected_count"].to_numpy(dtype=float), index=sid)
    one_minus = (1.0 - labels["p_fp"].astype(float)).groupby(labels["subject_id"]).sum()
    s = one_minus.reindex(sid, fill_value=0.0).to_numpy() + subjects_df["n_fn"].to_numpy(
        dtype=float
    )
    return pd.Series(s, index=sid)


def expected_count_error(
    subjects_df: pd.DataFrame, labels: pd.DataFrame, truth: pd.DataFrame
) -> tuple[float, int]:
    """(mean signed error of the expected count against the true count, subjects used).

    Over the subjects of ``subjects_df`` with a finite expected count.
    """
    e = expected_counts(subjects_df, labels)
    e = e[np.isfinite(e.to_numpy())]
    if not len(e):
        return float("nan"), 0
    n_true = truth["subject_id"].value_counts().reindex(e.index, fill_value=0).to_numpy()
    return float(np.mean(e.to_numpy() - n_true)), int(len(e))


def model_sums(subjects_df: pd.DataFrame) -> tuple[float, float, np.ndarray]:
    """(Σ N_fp, Σ N_fn, subjects with a finite N_fn) of a model's subjects table.

    N_fn counts every real object the labels miss: for the generative model's own numbers the
    weak objects nobody recognised (``n_fn_weak``) are added to ``n_fn``; a calibrated table
    (with ``n_fn_model``, :mod:`clumpscout.model.calibration`) already counts them in n_fn.
    """
    agg = subjects_df.loc[np.isfinite(subjects_df["n_fn"].to_numpy(dtype=float))]
    n_fn = agg["n_fn"].to_numpy(dtype=float)
    if "n_fn_weak" in agg.columns and "n_fn_model" not in agg.columns:
        n_fn = n_fn + np.nan_to_num(agg["n_fn_weak"].to_numpy(dtype=float))
    return (
        float(agg["n_fp"].sum()),
        float(n_fn.sum()),
        np.unique(agg["subject_id"].to_numpy()),
    )


# ---------------------------------------------------------------- one method, one truth
def score_method(
    labels: pd.DataFrame,
    truth: pd.DataFrame,
    subjects: Iterable,
    subjects_df: pd.DataFrame | None = None,
    thresholds: int = 101,
    bins: int = 10,
    p_cut: float = 0.5,
) -> tuple[dict, pd.DataFrame]:
    """The benchmark row of one method against one truth table, and its C/P curve.

    purity / completeness / p_star: at the threshold maximising √(C² + P²)
    (:func:`clumpscout.metrics.containment.summarise_curve`) for labels with p_fp; at p* = 1 (the
    method's own settings) for labels without. ``subjects_df`` (a model's subjects
    table) adds sum_n_fp, sum_n_fn and restricts realised_fn to the subjects with a
    finite N_fn, like Σ N_fn.
    """
    subjects = np.unique(np.asarray(list(subjects)))
    has_p = "p_fp" in labels.columns
    curve, summary, _ = score_truth(
        labels, truth, thresholds=thresholds, subjects=subjects, bins=bins
    )
    s = summary.loc[summary["subset"] == "all"].iloc[0]
    curve = curve.loc[curve["subset"] == "all"].reset_index(drop=True)
    lab = _in(labels, subjects)
    tr = _in(truth, subjects)
    realised_fp, realised_fn = realised_errors(lab, tr)
    row = {
        "purity": float(s["opt_purity"] if has_p else s["purity_p1"]),
        "completeness": float(s["opt_completeness"] if has_p else s["completeness_p1"]),
        "p_star": float(s["opt_threshold"]) if has_p else float("nan"),
        "ece": float(s["ece"]) if has_p else float("nan"),
        "ece_matched": label_ece_matched(lab, tr, bins=bins),
        "labels": int(len(lab)),
        "true_objects": int(len(tr)),
        "sum_n_fp": float("nan"),
        "realised_fp": realised_fp,
        "sum_n_fn": float("nan"),
        "realised_fn": realised_fn,
        "count_mae": count_mae(lab, tr, subjects, p_cut),
    }
    if subjects_df is not None:
        n_fp, n_fn, agg = model_sums(subjects_df)
        row["sum_n_fp"] = n_fp
        row["sum_n_fn"] = n_fn
        row["realised_fn"] = realised_errors(lab, tr, agg)[1]
    return row, curve
