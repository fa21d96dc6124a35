"""Appendix, the MeanShift comparison: per-subject count difference and example subjects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Circle

from clumpscout.figures.common import (
    BOX_COLS,
    DEFAULTS,
    corner_summary,
    figure_settings,
    load_images,
    new_figure,
    no_data,
    nouns,
    read_table,
    require,
    save_figure,
)
from clumpscout.figures.examples import (
    example_columns,
    example_grid,
    example_row,
    label_boxes,
    pick_examples,
)


def plot_meanshift_difference(
    count_difference: pd.DataFrame,
    stem: str | Path,
    *,
    column: str = "diff_meanshift",
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """fig:agg_v_ms_dist: per-subject clump count difference, ours − MeanShift (decisions.md#meanshift-baseline).

    ``count_difference``: clumpscout.evaluation.baseline.count_difference's table (subject_id,
    ``diff_meanshift`` = n_ours − n_meanshift; a plain ``difference`` column works too).
    Every subject counts, zero-clump ones included; all clumps whatever their p_fp."""
    if column not in count_difference.columns and "difference" in count_difference.columns:
        column = "difference"
    require(count_difference, ["subject_id", column], "count_difference")
    d = count_difference[column].dropna().astype(int).to_numpy()
    fig = new_figure(6.0, 4.5, dpi)
    ax = fig.subplots()
    stats = {
        "subjects": int(d.size),
        "frac_ours_more": float((d > 0).mean()) if d.size else float("nan"),
        "frac_equal": float((d == 0).mean()) if d.size else float("nan"),
        "frac_meanshift_more": float((d < 0).mean()) if d.size else float("nan"),
        "mean_difference": float(d.mean()) if d.size else float("nan"),
    }
    if d.size:
        ax.hist(d, bins=np.arange(d.min() - 0.5, d.max() + 1.5), color="tab:blue", log=True)
        ax.axvline(0, color="k", lw=1, ls="--")
        corner_summary(
            ax,
            f"{d.size} subjects\nours more: {100 * stats['frac_ours_more']:.1f}%\n"
            f"equal: {100 * stats['frac_equal']:.1f}%\n"
            f"MeanShift more: {100 * stats['frac_meanshift_more']:.1f}%",
        )
    else:
        no_data(ax)
    objects = nouns(wording)["objects"]
    ax.set_xlabel(rf"$N_{{\mathrm{{{objects}}}}}$(ours) − $N_{{\mathrm{{{objects}}}}}$(MeanShift)")
    ax.set_ylabel("subjects")
    save_figure(fig, stem)
    return stats


def plot_meanshift_examples(
    subject_ids: Sequence[int],
    boxes: pd.DataFrame,
    labels: pd.DataFrame,
    meanshift: pd.DataFrame,
    stem: str | Path,
    *,
    images: Mapping[int, np.ndarray] | None = None,
    p_fp_dashed: float = DEFAULTS["p_fp_dashed"],
    title: str = "",
    dpi: int = DEFAULTS["dpi"],
) -> dict:
    """fig:agg_v_ms_more_examples / fig:agg_v_ms_less_examples: one row per subject.

    (1) subject image (left out when no example subject has one,
    :func:`~clumpscout.figures.examples.example_columns`); (2) all volunteer boxes on
    grey scale; (3) our label boxes, dashed where p_fp > ``p_fp_dashed``; (4) MeanShift
    clump centres as red circles of radius box_side / 2 (= one FWHM, decisions.md#meanshift-baseline)."""
    require(boxes, ["subject_id", "x1", "y1", "x2", "y2"], "boxes")
    require(labels, ["subject_id", "x1", "y1", "x2", "y2", "p_fp"], "labels")
    require(meanshift, ["subject_id", "x", "y"], "meanshift labels")
    images = images or {}
    ids = list(subject_ids)
    heads = ("subject", "all boxes", f"ours (dashed: p_fp > {p_fp_dashed:g})", "MeanShift")
    heads, with_subject = example_columns(heads, ids, images)
    col = int(with_subject)  # the column of all boxes; ours and MeanShift follow
    fig, axes = example_grid(ids, heads, dpi, extra_height=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    stats: dict[str, Any] = {"subjects": []}
    for i, sid in enumerate(ids):
        img = images.get(int(sid))
        b = example_row(axes[i], sid, boxes[boxes["subject_id"] == sid], img, with_subject)
        lab = labels[labels["subject_id"] == sid]
        ms = meanshift[meanshift["subject_id"] == sid]
        n_dashed = label_boxes(axes[i, col + 1], lab, p_fp_dashed)
        side = (b["x2"] - b["x1"]).median() if len(b) else 20.0
        sides = ms["box_side"].to_numpy(float) if "box_side" in ms else np.full(len(ms), side)
        for r, sd in zip(ms.itertuples(), sides, strict=True):
            axes[i, col + 2].add_patch(Circle((r.x, r.y), sd / 2.0, fill=False, ec="red", lw=1.5))
        stats["subjects"].append(
            {
                "subject_id": int(sid),
                "image": img is not None,
                "boxes": int(len(b)),
                "ours": int(len(lab)),
                "dashed": int(n_dashed),
                "meanshift": int(len(ms)),
            }
        )
    save_figure(fig, stem)
    return stats


def plot_meanshift_more_examples(subject_ids, boxes, labels, meanshift, stem, **kw) -> dict:
    """fig:agg_v_ms_more_examples_0-5: subjects where our framework finds more clumps."""
    objects = nouns(kw.pop("wording", None))["objects"]
    kw.setdefault("title", f"our framework finds more {objects} than MeanShift")
    return plot_meanshift_examples(subject_ids, boxes, labels, meanshift, stem, **kw)


def plot_meanshift_fewer_examples(subject_ids, boxes, labels, meanshift, stem, **kw) -> dict:
    """fig:agg_v_ms_less_examples_0-5: subjects where MeanShift finds more clumps."""
    objects = nouns(kw.pop("wording", None))["objects"]
    kw.setdefault("title", f"MeanShift finds more {objects} than our framework")
    return plot_meanshift_examples(subject_ids, boxes, labels, meanshift, stem, **kw)


def build_difference(inp, stem, params):
    cfg = figure_settings(params)
    d = read_table(inp["count_difference"], ["subject_id"], "count difference")
    return plot_meanshift_difference(d, stem, dpi=cfg["dpi"], wording=params.get("wording"))


def _ms_examples(inp, stem, params, sign: int):
    cfg = figure_settings(params)
    d = read_table(inp["count_difference"], ["subject_id"], "count difference")
    col = "diff_meanshift" if "diff_meanshift" in d.columns else "difference"
    require(d, [col], "count difference", inp["count_difference"])
    cand = d.loc[np.sign(d[col]) == sign, "subject_id"]
    ids = pick_examples(cand, int(cfg["n_examples"]), int(params.get("seed", 0)) + (sign > 0))
    boxes = read_table(inp["boxes"], BOX_COLS, "boxes", ["image_width", "image_height"])
    boxes = boxes[boxes["subject_id"].isin(ids)]
    labels = read_table(inp["labels"], [*BOX_COLS, "p_fp"], "labels", [])
    ms = read_table(inp["meanshift"], ["subject_id", "x", "y"], "MeanShift labels", ["box_side"])
    imgs = load_images(inp.get("images") or [], ids)
    fn = plot_meanshift_more_examples if sign > 0 else plot_meanshift_fewer_examples
    return fn(
        ids,
        boxes,
        labels,
        ms,
        stem,
        images=imgs,
        p_fp_dashed=cfg["p_fp_dashed"],
        dpi=cfg["dpi"],
        wording=params.get("wording"),
    )


def build_more(inp, stem, params):
    return _ms_examples(inp, stem, params, +1)


def build_fewer(inp, stem, params):
    return _ms_examples(inp, stem, params, -1)
