"""§6.3, comparison with the experts: purity versus completeness, p_fp of empirically
true and false positives."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize

from clumpscout.figures.common import (
    BOX_COLS,
    CURVE_COLS,
    DEFAULTS,
    FP_COLOUR,
    SYM,
    TP_COLOUR,
    figure_settings,
    new_figure,
    no_data,
    nouns,
    ns_and_ref,
    read_stacked,
    read_table,
    require,
    save_figure,
)
from clumpscout.metrics.containment import containment


def curve_markers(curve: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Optimal, max-C and max-P points of one purity–completeness curve (§6.3).

    optimal = the threshold maximising sqrt(C² + P²); max C = the point with the
    largest completeness (highest purity among ties); max P likewise. Rows with an
    undefined purity or completeness (no boxes / no clumps) are ignored."""
    c = curve.dropna(subset=["completeness", "purity"])
    if c.empty:
        nan = float("nan")
        empty = {"threshold": nan, "completeness": nan, "purity": nan}
        return {"optimal": empty, "max_c": dict(empty), "max_p": dict(empty)}

    def row(r) -> dict[str, float]:
        return {k: float(r[k]) for k in ("threshold", "completeness", "purity")}

    hyp = np.hypot(c["completeness"], c["purity"])
    opt = c.loc[hyp.idxmax()]
    max_c = c.sort_values(["completeness", "purity"], ascending=False, kind="stable").iloc[0]
    max_p = c.sort_values(["purity", "completeness"], ascending=False, kind="stable").iloc[0]
    return {"optimal": row(opt), "max_c": row(max_c), "max_p": row(max_p)}


#: marker -> (threshold, completeness, purity) columns of a clumpscout.evaluation.compare summary
SUMMARY_MARKERS = {
    "optimal": ("opt_threshold", "opt_completeness", "opt_purity"),
    "max_c": ("max_completeness_threshold", "max_completeness", "purity_at_max_completeness"),
    "max_p": ("max_purity_threshold", "completeness_at_max_purity", "max_purity"),
}


def summary_markers(summary: pd.DataFrame, n: int, subset: str) -> dict[str, dict[str, float]]:
    """The optimal / max-C / max-P points of (n, subset) as the compare summary gives them."""
    if not {"n", "subset"} <= set(summary.columns):
        return {}
    row = summary[(summary["n"] == n) & (summary["subset"] == subset)]
    if "method" in row.columns:
        row = row[row["method"].isin(["clumpscout", "ours"])]
    out = {}
    for key, cols in SUMMARY_MARKERS.items():
        if len(row) and set(cols) <= set(row.columns):
            vals = [float(row[c].iloc[0]) for c in cols]
            out[key] = dict(zip(("threshold", "completeness", "purity"), vals, strict=True))
    return out


def plot_purity_completeness(
    curves: pd.DataFrame,
    stem: str | Path,
    *,
    summary: pd.DataFrame | None = None,
    subsets: Sequence[str] = ("all", "normal"),
    reference: str = "expert",
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """fig:pseudo_roc_volunteer_counts: purity vs completeness for every n.

    ``curves``: stacked compare curves (n, subset, threshold, completeness, purity),
    one panel per subset, one curve per n coloured by n. Crosses mark the optimal
    point, squares the maximum completeness and triangles the maximum purity:
    from ``summary`` (clumpscout.evaluation.compare's opt_*, max_* columns) when given, else
    computed from the curve (:func:`curve_markers`, same tie rules)."""
    require(curves, ["n", "subset", "threshold", "completeness", "purity"], "curves")
    present = [s for s in subsets if (curves["subset"] == s).any()] or list(subsets)[:1]
    fig = new_figure(5.4 * len(present) + 1.0, 5.0, dpi)
    axes = np.atleast_1d(fig.subplots(1, len(present), sharex=True, sharey=True))
    ns = sorted(curves["n"].unique().tolist())
    norm = Normalize(vmin=min(ns, default=0), vmax=max(ns, default=1) + 1e-9)
    cmap = "viridis"
    cm = colormaps[cmap]
    stats: dict[str, Any] = {}
    for ax, subset in zip(axes, present, strict=True):
        stats[subset] = {}
        sub = curves[curves["subset"] == subset]
        for n in ns:
            c = sub[sub["n"] == n].sort_values("threshold")
            if c.empty:
                continue
            mk = curve_markers(c)
            if summary is not None:
                mk.update(summary_markers(summary, n, subset))
            stats[subset][int(n)] = mk
            col = cm(norm(n))
            ax.plot(c["completeness"], c["purity"], "-", color=col, lw=1.2)
            for key, marker, size in (("optimal", "x", 60), ("max_c", "s", 30), ("max_p", "^", 34)):
                ax.scatter(
                    mk[key]["completeness"],
                    mk[key]["purity"],
                    marker=marker,
                    s=size,
                    color=col,
                    edgecolors="k" if marker != "x" else None,
                    linewidths=0.5 if marker != "x" else 1.5,
                    zorder=3,
                )
        ax.set_xlim(0.0, 1.02)
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel(r"completeness $\mathcal{C}_n(p^{\star,\mathrm{fp}})$")
        ax.set_title(f"{subset} {nouns(wording)['objects']} vs {reference}")
        ax.grid(alpha=0.3)
        if sub.empty:
            no_data(ax)
    axes[0].set_ylabel(r"purity $\mathcal{P}_n(p^{\star,\mathrm{fp}})$")
    handles = [
        axes[0].scatter([], [], marker="x", color="k", label="optimal"),
        axes[0].scatter([], [], marker="s", color="w", edgecolors="k", label="max C"),
        axes[0].scatter([], [], marker="^", color="w", edgecolors="k", label="max P"),
    ]
    axes[0].legend(handles=handles, loc="lower left", fontsize=8)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=list(axes), label="n")
    save_figure(fig, stem)
    return stats


def empirical_matches(labels: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Label clumps of the expert subjects, each flagged ``tp`` when its box holds
    at least one expert click of any expert (decisions.md#expert-comparison, clumpscout.metrics.containment.containment),
    and ``normal`` when a strict majority of its volunteers marked it normal
    (frac_unusual < 0.5). Subjects without expert classifications are left out."""
    require(labels, ["subject_id", "x1", "y1", "x2", "y2", "p_fp"], "labels")
    require(points, ["subject_id", "x", "y"], "expert clicks")
    subjects = points["subject_id"].unique()
    lab = labels[labels["subject_id"].isin(subjects)].reset_index(drop=True)
    pts = points.dropna(subset=["x", "y"]).reset_index(drop=True)
    hit, _ = containment(lab, pts)
    out = lab[["subject_id", "p_fp"]].copy()
    out["tp"] = hit
    if "frac_unusual" in lab.columns:
        out["normal"] = lab["frac_unusual"].to_numpy(float) < 0.5
    else:
        out["normal"] = True
    return out


def plot_pfp_true_false(
    matches: pd.DataFrame,
    stem: str | Path,
    *,
    inset_max: float = DEFAULTS["inset_max"],
    cut: float = DEFAULTS["tp_cut"],
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """fig:volunteer_normal_set_fpp_dist: p_fp of empirically true vs false positives.

    ``matches``: one row per label clump of the compared subjects with ``p_fp`` and
    boolean ``tp`` (contains an expert click, decisions.md#expert-comparison); the caller restricts it to
    the clumps a majority of volunteers called normal. Orange = true positives,
    blue = false positives (the paper's colours); the inset zooms below
    ``inset_max``. Returns the fraction of each class with p_fp < ``cut`` (the
    paper: 95 % of true vs 68 % of false positives below 0.3)."""
    require(matches, ["p_fp", "tp"], "matches")
    m = matches.dropna(subset=["p_fp", "tp"])
    tp = m["tp"].astype(bool).to_numpy()
    p = m["p_fp"].to_numpy(float)
    groups = {"true positive": (p[tp], TP_COLOUR), "false positive": (p[~tp], FP_COLOUR)}
    fig = new_figure(6.0, 4.5, dpi)
    ax = fig.subplots()
    inset = ax.inset_axes([0.3, 0.4, 0.4, 0.4])
    stats: dict[str, Any] = {"cut": cut, "inset_max": inset_max}
    for name, (vals, colour) in groups.items():
        key = "tp" if name.startswith("true") else "fp"
        frac = float((vals < cut).mean()) if vals.size else float("nan")
        stats[f"n_{key}"] = int(vals.size)
        stats[f"frac_{key}_below_cut"] = frac
        stats[f"n_{key}_below_inset"] = int((vals < inset_max).sum())
        if not vals.size:  # keep the empty class in the legend
            ax.plot([], [], color=colour, lw=1.6, label=f"{name}: 0")
        else:
            ax.hist(
                vals,
                bins=np.linspace(0, 1, 41),
                histtype="step",
                lw=1.6,
                color=colour,
                log=True,
                label=f"{name}: {vals.size} ({100 * frac:.0f}% < {cut:g})",
            )
            inset.hist(
                vals[vals < inset_max],
                bins=np.linspace(0, inset_max, 21),
                histtype="step",
                lw=1.3,
                color=colour,
            )
    if p.size:
        ax.legend(loc="lower center", fontsize=8, bbox_to_anchor=(0.5, 1.0), ncol=2)
    else:
        no_data(ax, f"no compared {nouns(wording)['objects']}")
    ax.set_xlim(0, 1)
    inset.set_xlim(0, inset_max)
    inset.tick_params(labelsize=7)
    inset.set_title(f"{SYM['p_fp']} < {inset_max:g}", fontsize=8)
    ax.set_xlabel(SYM["p_fp"])
    ax.set_ylabel(nouns(wording)["objects"])
    save_figure(fig, stem)
    return stats


def build_pseudo_roc(inp, stem, params):
    ns, _ = ns_and_ref(params)
    cfg = figure_settings(params)
    curves = read_stacked(inp["curves"], ns, CURVE_COLS, "comparison curve", [])
    summary = None
    if inp.get("summary"):
        summary = read_table(inp["summary"], ["n", "subset"], "comparison summary")
    return plot_purity_completeness(
        curves,
        stem,
        summary=summary,
        reference=params.get("reference", "experts"),
        dpi=cfg["dpi"],
        wording=params.get("wording"),
    )


def build_true_false(inp, stem, params):
    cfg = figure_settings(params)
    labels = read_table(inp["labels"], [*BOX_COLS, "p_fp"], "labels", ["frac_unusual"])
    points = read_table(inp["points"], ["subject_id", "x", "y"], "expert clicks", [])
    m = empirical_matches(labels, points)
    m = m[m["normal"]]
    return plot_pfp_true_false(
        m,
        stem,
        inset_max=cfg["inset_max"],
        cut=cfg["tp_cut"],
        dpi=cfg["dpi"],
        wording=params.get("wording"),
    )
