"""Reliability of a probability: p_fp in bins against the fraction that is false, and the
expected calibration error (docs/decisions.md#expert-comparison).

Shared by the truth comparison (:func:`clumpscout.evaluation.compare.score_truth`), the
calibration's held-out summary (:mod:`clumpscout.model.calibration`) and the figures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def calibration(p: np.ndarray, is_false: np.ndarray, bins: int = 10) -> tuple[pd.DataFrame, float]:
    """Reliability table of p_fp and the expected calibration error.

    ``bins`` equal-width bins on [0, 1] (the last one closed). Per bin: number of
    labels, mean p_fp, fraction that is actually false (with its binomial
    standard error). ``ECE = Σ_b (n_b / N) |frac_false_b − mean_p_fp_b|`` over the
    non-empty bins; NaN with no labels.
    """
    edges = np.linspace(0.0, 1.0, int(bins) + 1)
    p = np.asarray(p, dtype=float)
    is_false = np.asarray(is_false, dtype=bool)
    idx = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, int(bins) - 1)
    n = np.bincount(idx, minlength=bins)
    sum_p = np.bincount(idx, weights=p, minlength=bins)
    n_false = np.bincount(idx, weights=is_false.astype(float), minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(n > 0, sum_p / np.maximum(n, 1), np.nan)
        frac = np.where(n > 0, n_false / np.maximum(n, 1), np.nan)
        se = np.sqrt(frac * (1 - frac) / np.where(n > 0, n, np.nan))
    table = pd.DataFrame(
        {
            "bin_lo": edges[:-1],
            "bin_hi": edges[1:],
            "n_labels": n,
            "n_false": n_false.astype(np.int64),
            "mean_p_fp": mean_p,
            "frac_false": frac,
            "frac_false_se": se,
        }
    )
    total = n.sum()
    ece = float(np.nansum(n * np.abs(frac - mean_p)) / total) if total else float("nan")
    return table, ece
