"""The default model against the project's gold standard (no counterpart in the paper).

Both figures read the default model's outputs at the baseline's n, in which every gold
subject's numbers are cross-fitted (docs/decisions.md#gold-standard): a gold subject's p_fp
and expected count come from a map fitted without its own gold, so these figures show what
the calibration does on subjects it has not seen.

* :func:`plot_gold_reliability`: the reliability diagram of p_fp on the gold subjects
  (fraction of labels the experts do not count against the mean p_fp, bins of at least
  ``calibration_min_labels`` labels) and the same for the model's own ``p_empty``;
* :func:`plot_gold_counts`: the expected count per gold subject (with the count range
  ``count_low``-``count_high``) against the experts' count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.figures.common import (
    figure_settings,
    new_figure,
    no_data,
    nouns,
    read_table,
    save_figure,
)
from clumpscout.figures.truth import merge_sparse_bins, reliability_panel
from clumpscout.metrics.reliability import calibration


def _reliability(p: np.ndarray, false: np.ndarray, min_labels: int) -> tuple[pd.DataFrame, float]:
    table, ece = calibration(p, false, 10)
    return merge_sparse_bins(table, min_labels), ece


def plot_gold_reliability(
    labels: pd.DataFrame, stem: str | Path, *, min_labels: int = 20, dpi: int = 150,
    wording: str | None = None,
) -> dict:  # fmt: skip
    """Reliability of the calibrated p_fp and of p_empty on the gold subjects (module doc)."""
    objects = nouns(wording)["objects"]
    gold = labels.loc[labels["gold_real"].notna()] if "gold_real" in labels else labels.iloc[:0]
    fig = new_figure(6.0, 4.6, dpi)
    ax = fig.subplots(1, 1)
    ax.plot([0, 1], [0, 1], ":", color="0.5", lw=1)
    stats: dict[str, Any] = {"labels": int(len(gold)), "ece": {}, "bins": {}}
    if not len(gold):
        no_data(ax, "no gold subjects with expert marks")
    else:
        false = gold["gold_real"].to_numpy() < 0.5
        for k, (col, name) in enumerate(
            (("p_fp", "p_fp (calibrated, cross-fitted)"), ("p_empty", "p_empty (the model's own)"))
        ):
            if col not in gold:
                continue
            bins, ece = _reliability(gold[col].to_numpy(dtype=float), false, int(min_labels))
            stats["ece"][col] = ece
            stats["bins"][col] = bins.to_dict(orient="records")
            reliability_panel(ax, bins, k, f"{name}: ECE {ece:.3f}")
        ax.legend(fontsize=8, loc="upper left")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean probability in bin")
    ax.set_ylabel("fraction the experts do not count")
    ax.set_title(f"gold subjects: {len(gold)} {objects} (numbers: {objects} per bin)", fontsize=9)
    save_figure(fig, stem)
    return stats


def plot_gold_counts(
    subjects: pd.DataFrame, stem: str | Path, *, dpi: int = 150, wording: str | None = None
) -> dict:
    """Expected count (and count range) against the experts' count on the gold subjects."""
    words = nouns(wording)
    col = "gold_count"
    s = subjects.loc[subjects[col].notna()] if col in subjects else subjects.iloc[:0]
    s = s.loc[np.isfinite(s["expected_count"].to_numpy(dtype=float))]
    fig = new_figure(6.0, 4.6, dpi)
    ax = fig.subplots(1, 1)
    stats: dict[str, Any] = {"subjects": int(len(s))}
    if not len(s):
        no_data(ax, "no gold subjects")
    else:
        rng = np.random.default_rng(0)  # horizontal jitter only: counts are whole numbers
        x = s[col].to_numpy(dtype=float) + rng.uniform(-0.15, 0.15, len(s))
        y = s["expected_count"].to_numpy(dtype=float)
        if {"count_low", "count_high"} <= set(s.columns):
            lo, hi = s["count_low"].to_numpy(float), s["count_high"].to_numpy(float)
            ax.vlines(x, lo, hi, color="0.75", lw=1, label="count range (strong … all marked)")
        ax.plot(x, y, "o", ms=3, alpha=0.7, label="expected count")
        top = float(max(np.nanmax(s[col]), np.nanmax(y), 1.0)) + 0.5
        ax.plot([0, top], [0, top], ":", color="0.5", lw=1)
        ax.set_xlim(-0.5, top)
        ax.set_ylim(-0.5, top)
        err = y - s[col].to_numpy(dtype=float)
        stats.update(
            {
                "mae_rounded": float(np.mean(np.abs(np.round(y) - s[col]))),
                "bias": float(np.mean(err)),
                "experts_total": float(s[col].sum()),
                "expected_total": float(np.sum(y)),
            }
        )
        ax.set_title(
            f"{len(s)} gold {words['subjects']}: bias {stats['bias']:+.2f}, "
            f"MAE (rounded) {stats['mae_rounded']:.2f}",
            fontsize=9,
        )
        ax.legend(fontsize=8, loc="upper left")
    ax.set_xlabel(f"experts' count of {words['objects']}")
    ax.set_ylabel("expected count (cross-fitted)")
    save_figure(fig, stem)
    return stats


def build_gold_reliability(inp, stem, params):
    cfg = figure_settings(params)
    labels = read_table(inp["labels"], ["p_fp"], "labels", optional=["p_empty", "gold_real"])
    return plot_gold_reliability(
        labels, stem, min_labels=int(cfg["calibration_min_labels"]), dpi=cfg["dpi"],
        wording=params.get("wording"),
    )  # fmt: skip


def build_gold_counts(inp, stem, params):
    cfg = figure_settings(params)
    subjects = read_table(
        inp["subjects"], ["expected_count"], "subjects",
        optional=["gold_count", "count_low", "count_high"],
    )  # fmt: skip
    return plot_gold_counts(subjects, stem, dpi=cfg["dpi"], wording=params.get("wording"))
