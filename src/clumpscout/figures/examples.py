"""§6, fig. agg_examples: example subjects with their volunteer boxes, clusters and labels,
and the frame helpers the MeanShift examples share."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from clumpscout.figures.common import (
    BOX_COLS,
    DEFAULTS,
    figure_settings,
    load_images,
    new_figure,
    no_data,
    read_table,
    require,
    save_figure,
)


def pick_examples(candidates: Sequence[int], k: int, seed: int) -> list[int]:
    """``k`` subject ids drawn without replacement with ``seed``, in ascending order."""
    cand = np.unique(np.asarray(list(candidates), dtype=np.int64))
    if cand.size <= k:
        return [int(c) for c in cand]
    rng = np.random.default_rng(seed)
    return sorted(int(c) for c in rng.choice(cand, size=k, replace=False))


def _frame(ax, width: float, height: float, image: np.ndarray | None, grey: bool) -> None:
    """Draw the subject image (or a blank frame) in pixel coordinates, y down."""
    if image is not None:
        img = np.asarray(image)
        if grey and img.ndim == 3:
            img = img[..., :3].astype(float).mean(axis=2)
            ax.imshow(img, cmap="gray", extent=(0, width, height, 0), interpolation="nearest")
        else:
            ax.imshow(img, extent=(0, width, height, 0), interpolation="nearest")
    else:  # no image: the subject's extent, outlined on white
        ax.add_patch(Rectangle((0, 0), width, height, fc="white", ec="0.6", lw=0.8))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])


def _box(ax, r, colour, ls="-", lw=1.0) -> None:
    ax.add_patch(
        Rectangle((r.x1, r.y1), r.x2 - r.x1, r.y2 - r.y1, fill=False, ec=colour, ls=ls, lw=lw)
    )


def _subject_size(boxes: pd.DataFrame) -> tuple[float, float]:
    w = boxes["image_width"].dropna() if "image_width" in boxes else pd.Series(dtype=float)
    h = boxes["image_height"].dropna() if "image_height" in boxes else pd.Series(dtype=float)
    return (float(w.iloc[0]) if len(w) else 400.0, float(h.iloc[0]) if len(h) else 400.0)


def _cluster_colours(clusters: Sequence[int]) -> dict[int, Any]:
    cm = colormaps["tab10"]
    return {int(c): cm(i % 10) for i, c in enumerate(sorted(c for c in clusters if c >= 0))}


def example_grid(
    ids: Sequence[int], heads: Sequence[str], dpi: int, *, extra_height: float = 0.0
) -> tuple[Figure, np.ndarray]:
    """The figure of an example panel: one row per subject, one column per entry of
    ``heads`` (its title); with no subject, one row of empty frames and a note."""
    rows = max(len(ids), 1)
    fig = new_figure(3.0 * len(heads), 3.1 * rows + extra_height, dpi)
    axes = np.asarray(fig.subplots(rows, len(heads), squeeze=False))
    for j, t in enumerate(heads):
        axes[0, j].set_title(t, fontsize=9)
    if not ids:
        for ax in axes[0]:
            _frame(ax, 400, 400, None, False)
        no_data(axes[0, 0], "no example subjects")
    return fig, axes


def example_row(
    axes: np.ndarray, sid: int, boxes: pd.DataFrame, image, with_subject: bool
) -> pd.DataFrame:
    """The common columns of one example row: the subject in every column (grey scale
    after the first; the subject column only ``with_subject``) and all of its volunteer
    boxes in the next. ``boxes``: the subject's rows (with empty classifications);
    returns those with a box."""
    b = boxes.dropna(subset=["x1", "y1", "x2", "y2"])
    w, h = _subject_size(boxes)
    for j, ax in enumerate(axes):
        _frame(ax, w, h, image, grey=j > 0 or not with_subject)
    axes[0].set_ylabel(f"subject {sid}", fontsize=8)
    for r in b.itertuples():
        _box(axes[int(with_subject)], r, "tab:cyan", lw=0.7)
    return b


def example_columns(
    heads: Sequence[str], ids: Sequence[int], images: Mapping[int, np.ndarray]
) -> tuple[list[str], bool]:
    """The column titles of an example figure: without the first (the subject as
    volunteers saw it) when none of the subjects ``ids`` has an image, so that a
    project without subject images gets no empty panels. Returns (titles, with_subject)."""
    with_subject = any(images.get(int(sid)) is not None for sid in ids)
    return (list(heads) if with_subject else list(heads[1:])), with_subject


def label_boxes(ax, labels: pd.DataFrame, p_fp_dashed: float) -> int:
    """Label boxes, red and dashed where p_fp > ``p_fp_dashed``; returns how many are."""
    n_dashed = 0
    for r in labels.itertuples():
        dashed = float(r.p_fp) > p_fp_dashed
        n_dashed += dashed
        _box(ax, r, "tab:red" if dashed else "lime", ls="--" if dashed else "-", lw=1.5)
    return n_dashed


def plot_annotation_examples(
    subject_ids: Sequence[int],
    assignments: pd.DataFrame,
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    images: Mapping[int, np.ndarray] | None = None,
    p_fp_dashed: float = DEFAULTS["p_fp_dashed"],
    dpi: int = DEFAULTS["dpi"],
) -> dict:
    """fig:agg_examples: one row per subject, four columns.

    (1) the subject as volunteers saw it (left out when no example subject has an
    image, :func:`example_columns`); (2) all volunteer boxes on a grey-scale image
    (else on the subject's outline); (3) boxes coloured by their cluster,
    boxes assigned to the dummy facility (cluster −1) in black; (4) the final
    label, dashed where p_fp > ``p_fp_dashed``. Returns, per subject, the counts
    of what was drawn."""
    require(assignments, ["subject_id", "x1", "y1", "x2", "y2", "cluster"], "assignments")
    require(labels, ["subject_id", "x1", "y1", "x2", "y2", "p_fp"], "labels")
    images = images or {}
    ids = list(subject_ids)
    heads = (
        "subject",
        "all boxes",
        "clusters (dummy: black)",
        f"label (dashed: p_fp > {p_fp_dashed:g})",
    )
    heads, with_subject = example_columns(heads, ids, images)
    col = int(with_subject)  # the column of all boxes; clusters and labels follow
    fig, axes = example_grid(ids, heads, dpi)
    stats: dict[str, Any] = {"subjects": []}
    for i, sid in enumerate(ids):
        img = images.get(int(sid))
        rows = assignments[assignments["subject_id"] == sid]
        b = example_row(axes[i], sid, rows, img, with_subject)
        lab = labels[labels["subject_id"] == sid]
        cluster = b["cluster"].astype("Float64").fillna(-3).astype(int).to_numpy()
        colours = _cluster_colours(np.unique(cluster))
        n_dummy = 0
        for r, c in zip(b.itertuples(), cluster, strict=True):
            if c < -1:  # not aggregated (no cluster): not drawn in this column
                continue
            n_dummy += c == -1
            _box(axes[i, col + 1], r, "k" if c == -1 else colours[c], lw=1.2 if c == -1 else 0.8)
        n_dashed = label_boxes(axes[i, col + 2], lab, p_fp_dashed)
        stats["subjects"].append(
            {
                "subject_id": int(sid),
                "image": img is not None,
                "boxes": int(len(b)),
                "dummy_boxes": int(n_dummy),
                "clusters": int(len(colours)),
                "labels": int(len(lab)),
                "dashed": int(n_dashed),
            }
        )
    save_figure(fig, stem)
    return stats


def annotation_candidates(assignments: pd.DataFrame, labels: pd.DataFrame) -> list[int]:
    """Subjects that show what the figure is about: ≥ 1 label clump with p_fp < 0.5
    and ≥ 1 box assigned to the dummy facility; else any subject with a clump."""
    good = labels.loc[labels["p_fp"] < 0.5, "subject_id"].unique()
    is_dummy = assignments["cluster"].astype("Float64").eq(-1).fillna(False).to_numpy(bool)
    dummy = assignments.loc[is_dummy, "subject_id"].unique()
    both = np.intersect1d(good, dummy)
    if both.size:
        return both.tolist()
    return labels["subject_id"].unique().tolist()


def build_agg_examples(inp, stem, params):
    cfg = figure_settings(params)
    a = read_table(
        inp["assignments"], [*BOX_COLS, "cluster"], "assignments", ["image_width", "image_height"]
    )
    labels = read_table(inp["labels"], [*BOX_COLS, "p_fp"], "labels", [])
    seed = int(params.get("seed", 0))
    ids = pick_examples(annotation_candidates(a, labels), int(cfg["n_examples"]), seed)
    imgs = load_images(inp.get("images") or [], ids)
    return plot_annotation_examples(
        ids,
        a[a["subject_id"].isin(ids)],
        labels,
        stem,
        images=imgs,
        p_fp_dashed=cfg["p_fp_dashed"],
        dpi=cfg["dpi"],
    )
