"""The paper's figures (§6 and the appendix), one small plotting function per figure.

Every ``plot_*`` function takes pandas DataFrames (never paths) and an output path
*stem*; it writes ``<stem>.png`` and ``<stem>.pdf`` (atomically, without dates or
software versions in the metadata, so the same data give the same bytes) and
returns a dict of the numbers the figure shows (fractions, medians, counts), which
the workflow stores beside the figure as ``<stem>.json`` and the tests check.

Tables that cover several subsamples Z̃_n (decisions.md#subsamples) are passed *stacked*: one
DataFrame with an ``n`` column (see :func:`stack_by_n`).

Figures use matplotlib's object API (:class:`matplotlib.figure.Figure` on the Agg
canvas), never pyplot, so nothing depends on a display or on global state.

The second half of the module maps the workflow's files to these functions
(:data:`FIGURES`, :func:`build`); it is what the Snakemake adapter
``scripts/figures.py`` and the ``clumpscout figures`` command call.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Circle, Rectangle
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    MaxNLocator,
    NullFormatter,
    NullLocator,
)
from scipy.special import expit, logit

from clumpscout.errors import InputError
from clumpscout.io import atomic_path, write_json
from clumpscout.logs import timed

log = logging.getLogger(__name__)

#: output formats and the metadata that keeps them free of dates/versions
FORMATS: dict[str, dict[str, Any]] = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "Creator": None, "Producer": None},
}
#: subject status values of the aggregation contract (subjects.parquet)
STATUSES = ("retired", "retired_empty", "stale", "unretired")
TP_COLOUR, FP_COLOUR = (
    "tab:orange",
    "tab:blue",
)  # the paper's colours (fig:volunteer_normal_set_fpp_dist)
SYM = {
    "p_fp": r"$p^{\mathrm{fp}}_{l}$",
    "p_sigma": r"$p^{\sigma}_{l}$",
    "n_fp": r"$N^{\mathrm{fp}}_{i}$",
    "n_fn": r"$N^{\mathrm{fn}}_{i}$",
    "n_sigma": r"$N^{\sigma}_{i}$",
}
DEFAULTS: dict[str, Any] = {
    "dpi": 150,
    "n_examples": 4,
    "n_ref": None,
    "inset_max": 0.01,
    "p_fp_cut": 0.85,
    "p_fp_dashed": 0.8,
    "position_bins": [0.0, 0.2, 0.5, 0.8, 1.0],
    "position_radius": 0.25,
    "tp_cut": 0.3,
}
#: the consensus model the paper's figures show (the reproduction)
PAPER_MODEL = "paper"
#: a white, half-transparent box behind text drawn over data
WHITE_BOX = {"fc": "white", "alpha": 0.7, "lw": 0}


# --------------------------------------------------------------------------- helpers


def require(df: pd.DataFrame, columns: Sequence[str], what: str, path: object = None) -> None:
    """Raise :class:`InputError` naming the table if a contract column is missing."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(missing)}", path=path)


def stack_by_n(tables: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-n tables into one with an ``n`` column (n ascending)."""
    parts = [df.assign(n=int(n)) for n, df in sorted(tables.items())]
    if not parts:
        return pd.DataFrame({"n": pd.Series(dtype="int64")})
    return pd.concat(parts, ignore_index=True)


def output_paths(stem: str | Path) -> dict[str, Path]:
    """``{"png": <stem>.png, "pdf": <stem>.pdf}`` (a stem may contain dots)."""
    stem = Path(stem)
    return {ext: stem.with_name(f"{stem.name}.{ext}") for ext in FORMATS}


def new_figure(width: float, height: float, dpi: int) -> Figure:
    """A constrained-layout figure on the Agg canvas (no pyplot)."""
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, stem: str | Path) -> dict[str, Path]:
    """Write the PNG and the PDF of ``fig`` atomically; PNG size = figsize x dpi."""
    paths = output_paths(stem)
    for ext, path in paths.items():
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=fig.dpi, metadata=FORMATS[ext])
        # the layout is computed on the first draw; keep it for the other formats
        fig.set_layout_engine("none")
    return paths


def _note(ax, x: float, y: float, text: str, **kw) -> None:
    """Text at (x, y) in axes coordinates (0..1)."""
    ax.text(x, y, text, transform=ax.transAxes, **kw)


def _summary(ax, text: str) -> None:
    """A panel's key numbers in its top right corner."""
    _note(ax, 0.98, 0.95, text, ha="right", va="top", fontsize=8)


def _no_data(ax, text: str = "no data") -> None:
    _note(ax, 0.5, 0.5, text, ha="center", va="center", color="0.4")


def _n_ref(ns: Sequence[int], n_ref: int | None) -> int | None:
    """The subsample used by single-n panels: ``n_ref`` if present, else the largest n."""
    ns = sorted({int(n) for n in ns})
    if not ns:
        return None
    return int(n_ref) if n_ref is not None and int(n_ref) in ns else ns[-1]


def _integer_x(*axes) -> None:
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _n_edges(ns: Sequence[int]) -> np.ndarray:
    """Histogram edges centred on the integers from min(n) to max(n)."""
    return np.arange(min(ns) - 0.5, max(ns) + 1.0, 1.0)


def _density_mesh(ax, x, y, x_edges, y_edges, label: str, cmap: str = "viridis"):
    """2D histogram shown as number *density* (count / bin area), log colour scale.

    The paper's 2D histograms (fig:clump_fpp_dist, fig:clump_variance_dist) use
    the density because their bins cover different areas on a non-linear axis.
    Returns the counts per bin.
    """
    counts, _, _ = np.histogram2d(x, y, bins=[x_edges, y_edges])
    area = np.diff(x_edges)[:, None] * np.diff(y_edges)[None, :]
    dens = np.ma.masked_equal(counts / area, 0.0)
    if dens.count():
        norm = LogNorm(vmin=dens.min(), vmax=max(dens.max(), dens.min() * 1.0001))
        mesh = ax.pcolormesh(x_edges, y_edges, dens.T, norm=norm, cmap=cmap, rasterized=True)
        _quiet_colorbar(ax.figure.colorbar(mesh, ax=ax, label=label))
    return counts


def _quiet_colorbar(cbar) -> None:
    """Label only the major ticks of a log colour bar spanning a decade or more
    (readable and much faster); a narrower one keeps its minor labels."""
    norm = cbar.mappable.norm
    if isinstance(norm, LogNorm) and norm.vmax >= 10 * norm.vmin:
        cbar.ax.yaxis.set_minor_formatter(NullFormatter())


def _decade_below(v: float, smallest: float) -> float:
    return 10.0 ** math.floor(math.log10(max(v, smallest)))


def logit_limits(p: np.ndarray, smallest: float = 1e-15) -> tuple[float, float]:
    """Limits of a logistic axis: the decades beyond the 0.5 % tails on each side,
    no closer to 0 or 1 than ``smallest`` and always including [0.01, 0.99]."""
    inside = p[(p > 0) & (p < 1)]
    if inside.size == 0:
        return 1e-3, 1.0 - 1e-3
    lo = min(_decade_below(float(np.quantile(inside, 0.005)), smallest), 1e-2)
    up = min(_decade_below(1.0 - float(np.quantile(inside, 0.995)), smallest), 1e-2)
    return float(lo), float(1.0 - up)


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {k: float("nan") for k in ("q05", "q25", "median", "q75", "q95", "mean")}
    q = np.quantile(values, [0.05, 0.25, 0.5, 0.75, 0.95])
    return {
        "q05": float(q[0]),
        "q25": float(q[1]),
        "median": float(q[2]),
        "q75": float(q[3]),
        "q95": float(q[4]),
        "mean": float(np.mean(values)),
    }


# ----------------------------------------------------- p_fp and p_sigma distributions


def _probability_distribution(
    labels: pd.DataFrame,
    column: str,
    stem: str | Path,
    *,
    n_ref: int | None,
    inset_max: float,
    dpi: int,
) -> dict:
    """Left: histogram of ``column`` at n_ref with an inset below ``inset_max``.
    Right: its distribution versus n on a logistic y axis, colour = number density,
    with the median and the inter-quartile range per n marked."""
    require(labels, ["n", column], "labels")
    df = labels[["n", column]].dropna()
    ns = sorted(df["n"].unique().tolist())
    nr = _n_ref(ns, n_ref)
    sym = SYM[column]
    fig = new_figure(12.0, 4.5, dpi)
    ax_l, ax_r = fig.subplots(1, 2, width_ratios=[1.0, 1.25])
    stats: dict[str, Any] = {"n_ref": nr, "inset_max": inset_max, "per_n": {}}

    p_ref = df.loc[df["n"] == nr, column].to_numpy(float) if nr is not None else np.array([])
    stats["n_clumps_ref"] = int(p_ref.size)
    below = p_ref[p_ref < inset_max]
    stats["n_below_inset"] = int(below.size)
    stats["frac_below_inset"] = float(below.size / p_ref.size) if p_ref.size else float("nan")
    outside = (p_ref < 0.2) | (p_ref > 0.8)
    stats["frac_outside_0.2_0.8"] = float(outside.mean()) if p_ref.size else float("nan")
    if p_ref.size:
        ax_l.hist(p_ref, bins=np.linspace(0.0, 1.0, 51), color="tab:blue", log=True)
        ax_l.set_xlim(0.0, 1.0)
        inset = ax_l.inset_axes([0.33, 0.42, 0.42, 0.42])
        inset.hist(below, bins=np.linspace(0.0, inset_max, 21), color="tab:green")
        inset.set_xlim(0.0, inset_max)
        inset.tick_params(labelsize=7)
        inset.set_title(
            f"{sym} < {inset_max:g}: {below.size} ({100 * stats['frac_below_inset']:.1f}%)",
            fontsize=8,
        )
    else:
        _no_data(ax_l, "no clumps")
    ax_l.set_xlabel(sym)
    ax_l.set_ylabel("clumps")
    ax_l.set_title(f"n = {nr}: {p_ref.size} clumps" if nr is not None else "no subsample")

    if ns:
        p_all = df[column].to_numpy(float)
        lo, hi = logit_limits(p_all)
        clipped = np.clip(p_all, lo, hi)
        stats["logit_limits"] = [lo, hi]
        stats["n_clipped"] = int(np.count_nonzero(clipped != p_all))
        y_edges = expit(np.linspace(logit(lo), logit(hi), 49))
        _density_mesh(
            ax_r, df["n"].to_numpy(float), clipped, _n_edges(ns), y_edges, "clumps per unit n, p"
        )
        med, q25, q75 = [], [], []
        for n in ns:
            q = _quantiles(df.loc[df["n"] == n, column].to_numpy(float))
            stats["per_n"][int(n)] = q | {"count": int((df["n"] == n).sum())}
            med.append(q["median"])
            q25.append(q["q25"])
            q75.append(q["q75"])
        med_c, q25_c, q75_c = (np.clip(np.asarray(v), lo, hi) for v in (med, q25, q75))
        ax_r.errorbar(
            ns,
            med_c,
            yerr=[med_c - q25_c, q75_c - med_c],
            fmt="o",
            color="tab:red",
            ms=4,
            capsize=2,
            label="median, IQR",
        )
        ax_r.set_yscale("logit")
        ax_r.yaxis.set_minor_formatter(NullFormatter())
        ax_r.set_ylim(lo, hi)
        ax_r.set_xlim(min(ns) - 0.5, max(ns) + 0.5)
        ax_r.legend(loc="upper right", fontsize=8)
        if stats["n_clipped"]:
            _note(
                ax_r,
                0.01,
                0.99,
                f"{stats['n_clipped']} of {p_all.size} values beyond the axis, drawn at its edge",
                ha="left",
                va="top",
                fontsize=7,
            )
    else:
        _no_data(ax_r)
    ax_r.set_xlabel("n (annotations per subject)")
    _integer_x(ax_r)
    ax_r.set_ylabel(sym)
    save_figure(fig, stem)
    return stats


def plot_pfp_distribution(
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    n_ref: int | None = 20,
    inset_max: float = 0.01,
    dpi: int = 150,
) -> dict:
    """fig:clump_fpp_dist: clump p_fp (decisions.md#clump-false-positive-probability) at n = 20 and versus n.

    ``labels``: stacked labels.parquet (n, p_fp). Returns the fraction below the
    inset limit at n_ref, the fraction outside [0.2, 0.8] (the paper's ~90 %) and
    the median / quartiles per n."""
    return _probability_distribution(
        labels, "p_fp", stem, n_ref=n_ref, inset_max=inset_max, dpi=dpi
    )


def plot_psigma_distribution(
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    n_ref: int | None = 20,
    inset_max: float = 0.01,
    dpi: int = 150,
) -> dict:
    """fig:clump_variance_dist: clump p_σ (decisions.md#location-variance) at n = 20 and versus n."""
    return _probability_distribution(
        labels, "p_sigma", stem, n_ref=n_ref, inset_max=inset_max, dpi=dpi
    )


# ------------------------------------------------------------------ clump positions


def normalised_offsets(labels: pd.DataFrame, sizes: pd.DataFrame | None = None) -> pd.DataFrame:
    """Clump centres in normalised image coordinates about the image centre.

    X = x / image_width − ½, Y = y / image_height − ½ (decisions.md#box-geometry normalisation) and
    R = sqrt(X² + Y²) (fig:clump_location_vs_pfp's R_clump). Sizes come from
    ``sizes`` (subject_id, image_width, image_height); 400 × 400 when absent."""
    require(labels, ["subject_id", "x", "y"], "labels")
    out = labels.copy()
    if sizes is not None and len(sizes):
        require(sizes, ["subject_id", "image_width", "image_height"], "subjects")
        dims = sizes[["subject_id", "image_width", "image_height"]].drop_duplicates("subject_id")
        out = out.merge(dims, on="subject_id", how="left")
    for col in ("image_width", "image_height"):
        if col not in out.columns:
            out[col] = 400.0
        out[col] = out[col].astype(float).fillna(400.0)
    out["X"] = out["x"] / out["image_width"] - 0.5
    out["Y"] = out["y"] / out["image_height"] - 0.5
    out["R"] = np.hypot(out["X"], out["Y"])
    return out


def plot_clump_positions(
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    sizes: pd.DataFrame | None = None,
    bins: Sequence[float] = (0.0, 0.2, 0.5, 0.8, 1.0),
    radius: float = 0.25,
    dpi: int = 150,
) -> dict:
    """fig:clump_location_vs_pfp: clump positions in normalised coordinates per p_fp bin.

    ``labels``: one subsample's labels (subject_id, x, y, p_fp). Bins are
    [b_k, b_k+1) with the last one closed. The circle R = ``radius`` is drawn and
    the fraction of clumps outside it is given per bin."""
    require(labels, ["subject_id", "x", "y", "p_fp"], "labels")
    pos = normalised_offsets(labels.dropna(subset=["x", "y", "p_fp"]), sizes)
    edges = np.asarray(bins, float)
    k = len(edges) - 1
    fig = new_figure(2.9 * k + 1.2, 3.6, dpi)
    axes = np.atleast_1d(fig.subplots(1, k, sharex=True, sharey=True))
    grid = np.linspace(-0.5, 0.5, 51)
    idx = np.clip(np.searchsorted(edges, pos["p_fp"].to_numpy(), side="right") - 1, 0, k - 1)
    stats: dict[str, Any] = {"radius": radius, "bins": []}
    all_counts = []
    for b in range(k):
        sel = pos[idx == b]
        counts, _, _ = np.histogram2d(sel["X"], sel["Y"], bins=[grid, grid])
        all_counts.append(counts)
    vmax = max((c.max() for c in all_counts), default=1.0) or 1.0
    norm = LogNorm(vmin=1.0, vmax=max(vmax, 1.0001))
    mesh = None
    for b, ax in enumerate(axes):
        sel = pos[idx == b]
        n_out = int((sel["R"] > radius).sum())
        frac = n_out / len(sel) if len(sel) else float("nan")
        close = "]" if b == k - 1 else ")"
        stats["bins"].append(
            {
                "lo": float(edges[b]),
                "hi": float(edges[b + 1]),
                "count": int(len(sel)),
                "n_outside": n_out,
                "frac_outside": float(frac),
            }
        )
        counts = np.ma.masked_equal(all_counts[b], 0.0)
        if counts.count():
            mesh = ax.pcolormesh(grid, grid, counts.T, norm=norm, cmap="viridis", rasterized=True)
        else:
            _no_data(ax, "no clumps")
        ax.add_patch(Circle((0, 0), radius, fill=False, ls="--", color="tab:red", lw=1))
        ax.set_aspect("equal")
        ax.set_xlim(-0.5, 0.5)
        ax.set_ylim(0.5, -0.5)  # image orientation: y down
        upper = "≤" if close == "]" else "<"
        ax.set_title(f"{edges[b]:g} ≤ {SYM['p_fp']} {upper} {edges[b + 1]:g}", fontsize=9)
        pct = "–" if not len(sel) else f"{100 * frac:.2f}%"
        text = f"{len(sel)} clumps\nR > {radius:g}: {pct}"
        _note(ax, 0.03, 0.03, text, fontsize=8, color="k", bbox=WHITE_BOX)
        ax.set_xlabel(r"$X/X_{\max} - \frac{1}{2}$")
    axes[0].set_ylabel(r"$Y/Y_{\max} - \frac{1}{2}$")
    if mesh is not None:
        _quiet_colorbar(fig.colorbar(mesh, ax=list(axes), label="clumps per bin"))
    save_figure(fig, stem)
    return stats


# --------------------------------------------------------- purity vs completeness


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
    dpi: int = 150,
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
        ax.set_title(f"{subset} clumps vs {reference}")
        ax.grid(alpha=0.3)
        if sub.empty:
            _no_data(ax)
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


# ---------------------------------------------- both models and the baselines side by side

#: the methods of the side-by-side comparison, in display order: the two consensus models
#: (with a p_fp per label: a curve over p*) and the three clustering baselines (one point)
METHODS: dict[str, tuple[str, str]] = {
    "generative": ("generative model", "tab:red"),
    "paper": ("paper model", "tab:blue"),
    "single_linkage": ("single linkage", "tab:green"),
    "dbscan": ("DBSCAN", "tab:purple"),
    "meanshift": ("MeanShift", "tab:orange"),
}
METHOD_SUMMARY_COLS = {
    "opt_threshold": "opt_threshold",
    "opt_completeness": "opt_completeness",
    "opt_purity": "opt_purity",
    "completeness_p1": "completeness_p1",
    "purity_p1": "purity_p1",
    "n_labels_p1": "n_labels",
}


def method_numbers(summary: pd.DataFrame, subset: str = "all") -> dict[str, dict[str, float]]:
    """Per method (compare summary rows tagged ``method``): the optimal p*, C and P there,
    C and P at p* = 1, the labels kept at p* = 1 (``n_labels``: every label of the
    scored subjects) and at the optimal p* (``opt_n_tp + opt_n_fp``), and the
    reference points (``n_points``: true clumps or expert clicks). A baseline has no
    p_fp: every p* keeps all its labels, so its optimal and p* = 1 numbers coincide."""
    require(summary, ["method", "subset"], "method comparison summary")
    out: dict[str, dict[str, float]] = {}
    rows = summary[summary["subset"] == subset]
    for r in rows.to_dict(orient="records"):
        vals = {k: float(r.get(c, np.nan)) for k, c in METHOD_SUMMARY_COLS.items()}
        tp, fp = r.get("opt_n_tp", np.nan), r.get("opt_n_fp", np.nan)
        vals["n_labels_opt"] = float(tp) + float(fp) if not pd.isna(tp) else float("nan")
        vals["n_points"] = float(r.get("n_points", np.nan))
        out[str(r["method"])] = vals
    return out


def _method_order(methods) -> list[str]:
    known = [m for m in METHODS if m in set(methods)]
    return known + sorted(set(methods) - set(known))


def plot_method_comparison(
    curves: Mapping[str, pd.DataFrame],
    summaries: Mapping[str, pd.DataFrame],
    stem: str | Path,
    *,
    subset: str = "all",
    dpi: int = 150,
) -> dict:
    """Both consensus models and the three baselines against the truth and the experts.

    ``curves`` / ``summaries``: per reference (``truth``, ``experts``; either may be
    absent) the comparison tables of every method at one n (clumpscout.evaluation.compare
    columns tagged ``method``). One purity–completeness panel per reference: each
    model's curve over p* with a cross at its optimal p* and a circle at p* = 1;
    each baseline as one diamond (it has no p_fp). The last panel counts the labels
    per method at p* = 1 and at the optimal p* (hatched), with the number of true
    clumps as a dashed line (from the truth when present, else over the expert
    subjects, without a line). Returns the numbers per reference and method
    (:func:`method_numbers`)."""
    refs = [r for r in ("truth", "experts") if r in summaries and summaries[r] is not None]
    if not refs:
        raise InputError("method comparison: neither a truth nor an expert summary")
    numbers = {r: method_numbers(summaries[r], subset) for r in refs}
    ns = sorted({int(n) for r in refs for n in summaries[r].get("n", pd.Series(dtype=int))})
    methods = _method_order({m for r in refs for m in numbers[r]})
    fig = new_figure(5.0 * len(refs) + 5.5, 4.8, dpi)
    axes = np.atleast_1d(fig.subplots(1, len(refs) + 1))
    for ax, ref in zip(axes, refs, strict=False):
        cur = curves.get(ref)
        for m in methods:
            if m not in numbers[ref]:
                continue
            name, colour = METHODS.get(m, (m, "0.3"))
            v = numbers[ref][m]
            c = None
            if cur is not None and len(cur):
                c = cur[(cur["method"] == m) & (cur["subset"] == subset)].sort_values("threshold")
            flat = c is None or c[["completeness", "purity"]].drop_duplicates().shape[0] <= 1
            if flat:
                ax.scatter(v["completeness_p1"], v["purity_p1"], marker="D", s=42, color=colour,
                           edgecolors="k", linewidths=0.6, zorder=4, label=name)  # fmt: skip
                continue
            ax.plot(c["completeness"], c["purity"], "-", color=colour, lw=1.3, label=name)
            ax.scatter(v["opt_completeness"], v["opt_purity"], marker="x", s=60, color=colour,
                       linewidths=1.6, zorder=4)  # fmt: skip
            ax.scatter(v["completeness_p1"], v["purity_p1"], marker="o", s=30, color="w",
                       edgecolors=colour, linewidths=1.4, zorder=4)  # fmt: skip
        ax.set_xlim(0.0, 1.02)
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel("completeness")
        ax.set_ylabel("purity")
        who = "the simulated truth" if ref == "truth" else "the experts"
        ax.set_title(f"{subset} clumps vs {who}" + (f", n = {ns[0]}" if len(ns) == 1 else ""))
        ax.grid(alpha=0.3)
    handles, _ = axes[0].get_legend_handles_labels()
    handles += [
        axes[0].scatter([], [], marker="x", color="k", label="optimal p*"),
        axes[0].scatter([], [], marker="o", color="w", edgecolors="k", label="p* = 1"),
    ]
    axes[0].legend(handles=handles, loc="lower left", fontsize=7)
    # label counts
    ax = axes[-1]
    ref = refs[0]
    x = np.arange(len(methods))
    p1 = [numbers[ref].get(m, {}).get("n_labels_p1", np.nan) for m in methods]
    opt = [numbers[ref].get(m, {}).get("n_labels_opt", np.nan) for m in methods]
    colours = [METHODS.get(m, (m, "0.3"))[1] for m in methods]
    ax.bar(x - 0.2, p1, width=0.4, color=colours, edgecolor="k", lw=0.5, label="p* = 1")
    ax.bar(x + 0.2, opt, width=0.4, color=colours, edgecolor="k", lw=0.5, hatch="//",
           alpha=0.6, label="optimal p*")  # fmt: skip
    n_true = float("nan")
    if ref == "truth" and methods:
        n_true = next(iter(numbers[ref].values()))["n_points"]
        ax.axhline(n_true, color="k", ls="--", lw=1.0, label="true clumps")
    ax.set_xticks(x, [METHODS.get(m, (m, ""))[0] for m in methods], rotation=30, ha="right")
    ax.set_ylabel("label clumps")
    where = "all subjects" if ref == "truth" else "expert subjects"
    ax.set_title(f"labels ({where})")
    ax.legend(fontsize=7)
    save_figure(fig, stem)
    return {
        "subset": subset,
        "n": ns[0] if len(ns) == 1 else ns,
        "methods": methods,
        "n_true_clumps": n_true,
        **numbers,
    }


# ---------------------------------------------- p_fp of empirical true/false positives


def empirical_matches(labels: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Label clumps of the expert subjects, each flagged ``tp`` when its box holds
    at least one expert click of any expert (decisions.md#expert-comparison, clumpscout.evaluation.compare.containment),
    and ``normal`` when a strict majority of its volunteers marked it normal
    (frac_unusual < 0.5). Subjects without expert classifications are left out."""
    from clumpscout.evaluation.compare import containment

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
    inset_max: float = 0.01,
    cut: float = 0.3,
    dpi: int = 150,
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
        _no_data(ax, "no compared clumps")
    ax.set_xlim(0, 1)
    inset.set_xlim(0, inset_max)
    inset.tick_params(labelsize=7)
    inset.set_title(f"{SYM['p_fp']} < {inset_max:g}", fontsize=8)
    ax.set_xlabel(SYM["p_fp"])
    ax.set_ylabel("clumps")
    save_figure(fig, stem)
    return stats


# ---------------------------------------------------------------- volunteer skills


def skill_bins(n_subjects: np.ndarray) -> np.ndarray:
    """Bin edges [1, 2, 3, 5, 10, 20, 50, …] covering the largest n_subjects."""
    top = max(int(np.max(n_subjects)) if n_subjects.size else 1, 1)
    edges = [1, 2, 3]
    decade = 1
    while edges[-1] <= top:
        for m in (5, 10, 20):
            e = m * decade
            if e > edges[-1]:
                edges.append(e)
        decade *= 10
    while len(edges) > 2 and edges[-2] > top:
        edges.pop()
    return np.asarray(edges, float)


def skill_statistics(volunteers: pd.DataFrame, edges: np.ndarray) -> pd.DataFrame:
    """Per n_subjects bin [e_k, e_k+1): volunteer count and the 5/25/50/75/95th
    percentiles and mean of p_fp, p_fn and σ = sqrt(σ²) (fig:worker_skill_evolution)."""
    v = volunteers.assign(sigma=np.sqrt(volunteers["sigma2"].astype(float)))
    k = np.searchsorted(edges, v["n_subjects"].to_numpy(float), side="right") - 1
    rows = []
    for b in range(len(edges) - 1):
        sel = v[k == b]
        row: dict[str, Any] = {"lo": edges[b], "hi": edges[b + 1], "count": len(sel)}
        for skill in ("p_fp", "p_fn", "sigma"):
            for name, val in _quantiles(sel[skill].dropna().to_numpy(float)).items():
                row[f"{skill}_{name}"] = val
        rows.append(row)
    return pd.DataFrame(rows)


def plot_volunteer_skills(volunteers: pd.DataFrame, stem: str | Path, *, dpi: int = 150) -> dict:
    """fig:worker_skill_evolution: classification counts and skills vs subjects inspected.

    ``volunteers``: one subsample's volunteers.parquet (n_subjects, p_fp, p_fn,
    sigma2). Our volunteers carry only their final skills, so a volunteer counts
    in the one bin of their final n_subjects (the paper sampled each volunteer's
    skill history in every bin it passed through). Top: histogram of subjects per
    volunteer (log). Below, per bin: median (red), mean (blue), IQR band
    (orange), 5th (dotted) and 95th (dashed) percentiles of p_fp, p_fn and σ."""
    require(volunteers, ["n_subjects", "p_fp", "p_fn", "sigma2"], "volunteers")
    v = volunteers[volunteers["n_subjects"] >= 1]
    ns = v["n_subjects"].to_numpy(float)
    edges = skill_bins(ns)
    table = skill_statistics(v, edges)
    centres = np.sqrt(edges[:-1] * edges[1:])
    fig = new_figure(6.0, 10.0, dpi)
    axes = fig.subplots(4, 1, sharex=True, height_ratios=[1.0, 1.0, 1.0, 1.0])
    stats: dict[str, Any] = {
        "n_volunteers": int(len(v)),
        "n_dropped_no_subjects": int(len(volunteers) - len(v)),
        "median_subjects": float(np.median(ns)) if ns.size else float("nan"),
        "frac_below_10": float((ns < 10).mean()) if ns.size else float("nan"),
        "n_above_200": int((ns > 200).sum()),
        "bins": table.to_dict(orient="records"),
    }
    ax = axes[0]
    if ns.size:
        ax.hist(ns, bins=edges, color="0.5", log=True)
        _summary(
            ax,
            f"{len(v)} volunteers\nmedian {stats['median_subjects']:g} subjects\n"
            f"{100 * stats['frac_below_10']:.1f}% < 10, {stats['n_above_200']} > 200",
        )
    else:
        _no_data(ax, "no volunteers")
    ax.set_ylabel("volunteers")
    labels = {
        "p_fp": r"$p^{\mathrm{fp}}_{j}$",
        "p_fn": r"$p^{\mathrm{fn}}_{j}$",
        "sigma": r"$\sigma_j$",
    }
    ok = table["count"].to_numpy() > 0
    for ax, skill in zip(axes[1:], ("p_fp", "p_fn", "sigma"), strict=True):
        x = centres[ok]
        t = table[ok]
        ax.fill_between(
            x,
            t[f"{skill}_q25"],
            t[f"{skill}_q75"],
            color="tab:orange",
            alpha=0.4,
            lw=0,
            label="IQR",
        )
        ax.plot(x, t[f"{skill}_q05"], ":", color="k", lw=1, label="5th pct")
        ax.plot(x, t[f"{skill}_q95"], "--", color="k", lw=1, label="95th pct")
        ax.plot(x, t[f"{skill}_median"], "o", color="tab:red", ms=4, label="median")
        ax.plot(x, t[f"{skill}_mean"], "s", color="tab:blue", ms=3, label="mean")
        ax.set_ylabel(labels[skill])
        if not ok.any():
            _no_data(ax)
    axes[1].legend(fontsize=7, ncol=3, loc="upper left")
    axes[-1].set_xscale("log")
    axes[-1].set_xlim(edges[0], edges[-1])
    axes[-1].set_xlabel("subjects inspected")
    save_figure(fig, stem)
    return stats


# -------------------------------------------------------------------- risk components


class LogLinear:
    """Axis transform: log10 below ``switch``, linear above (C¹ at the switch).

    fig:subject_risk_param_evolution: "the y axis changes from logarithmic to
    linear scaling at the values indicated by the black horizontal dashed lines"."""

    def __init__(self, switch: float = 1.0, floor: float = 1e-6):
        self.switch, self.floor = float(switch), float(floor)
        self.s = math.log10(self.switch)
        self.k = self.switch * math.log(10.0)

    def forward(self, y):
        y = np.asarray(y, float)
        with np.errstate(divide="ignore", invalid="ignore"):
            lg = np.log10(np.maximum(y, self.floor))
        return np.where(y < self.switch, lg, self.s + (y - self.switch) / self.k)

    def inverse(self, u):
        u = np.asarray(u, float)
        return np.where(u < self.s, 10.0**u, self.switch + (u - self.s) * self.k)

    def ticks(self, top: float) -> list[float]:
        dec = [10.0**e for e in range(int(math.log10(self.floor)), int(math.floor(self.s)) + 1)]
        step = max(1.0, float(np.ceil((top - self.switch) / 5.0))) if top > self.switch else 1.0
        lin = list(np.arange(self.switch + step, top + 1e-9, step))
        return [t for t in dec if t <= self.switch] + lin


def filtered_n_fp(labels: pd.DataFrame, p_fp_cut: float) -> pd.DataFrame:
    """N_fp per (n, subject) after discarding clumps with p_fp > ``p_fp_cut``.

    N_fp,i = Σ_l p_fp,l (the normalised p_fp of decisions.md#clump-false-positive-probability; §5.7 N_i^fp), summed over
    the clumps that remain."""
    keep = labels[labels["p_fp"] <= p_fp_cut]
    return (
        keep.groupby(["n", "subject_id"], as_index=False)["p_fp"]
        .sum()
        .rename(columns={"p_fp": "n_fp_cut"})
    )


def plot_risk_components(
    subjects: pd.DataFrame,
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    p_fp_cut: float = 0.85,
    dpi: int = 150,
) -> dict:
    """fig:subject_risk_param_evolution: N_fp, N_fp (p_fp ≤ cut), N_fn, N_σ vs n.

    ``subjects``: stacked aggregate subjects.parquet (n, subject_id, n_fp, n_fn,
    n_sigma); ``labels``: stacked labels (n, subject_id, p_fp) for the filtered N_fp.
    Subjects with undefined components (e.g. retired empty without a risk) are
    left out and counted. Each panel: 2D histogram (number density) on a y axis
    that is logarithmic below 1 and linear above; red dots = medians; per n the
    fraction of subjects with a component > 1 is returned."""
    require(subjects, ["n", "subject_id", "n_fp", "n_fn", "n_sigma"], "subjects")
    require(labels, ["n", "subject_id", "p_fp"], "labels")
    s = subjects[["n", "subject_id", "n_fp", "n_fn", "n_sigma"]].copy()
    s = s.merge(filtered_n_fp(labels, p_fp_cut), on=["n", "subject_id"], how="left")
    s["n_fp_cut"] = s["n_fp_cut"].fillna(0.0).where(s["n_fp"].notna())
    panels = [
        ("n_fp", SYM["n_fp"]),
        ("n_fp_cut", SYM["n_fp"] + rf" ($p^{{\mathrm{{fp}}}}_l \leq {p_fp_cut:g}$)"),
        ("n_fn", SYM["n_fn"]),
        ("n_sigma", SYM["n_sigma"]),
    ]
    ns = sorted(s["n"].unique().tolist())
    fig = new_figure(12.0, 8.0, dpi)
    axes = fig.subplots(2, 2, sharex=True).ravel()
    stats: dict[str, Any] = {"p_fp_cut": p_fp_cut}
    for ax, (col, label) in zip(axes, panels, strict=True):
        vals = s[["n", col]].dropna()
        stats[col] = {"n_undefined": int(s[col].isna().sum()), "per_n": {}}
        if vals.empty:
            _no_data(ax)
            ax.set_title(label)
            continue
        y = vals[col].to_numpy(float)
        pos = y[y > 0]
        floor = 10.0 ** math.floor(math.log10(np.quantile(pos, 0.01))) if pos.size else 1e-3
        floor = float(min(max(floor, 1e-8), 0.1))
        tr = LogLinear(1.0, floor)
        top = max(float(y.max()), 2.0)
        u_edges = np.linspace(tr.forward(floor), tr.forward(top), 41)
        y_edges = tr.inverse(u_edges)
        ax.set_yscale("function", functions=(tr.forward, tr.inverse))
        _density_mesh(
            ax,
            vals["n"].to_numpy(float),
            np.clip(y, floor, top),
            _n_edges(ns),
            y_edges,
            "subjects per unit n, N",
        )
        med = []
        for n in ns:
            yn = vals.loc[vals["n"] == n, col].to_numpy(float)
            q = _quantiles(yn)
            stats[col]["per_n"][int(n)] = {
                "median": q["median"],
                "mean": q["mean"],
                "frac_above_1": float((yn > 1).mean()) if yn.size else float("nan"),
                "count": int(yn.size),
            }
            med.append(q["median"])
        ax.plot(ns, np.clip(med, floor, None), "o", color="tab:red", ms=4, label="median")
        ax.axhline(1.0, color="k", ls="--", lw=1)
        n_floor = int((y < floor).sum())
        stats[col]["floor"] = floor
        stats[col]["n_below_floor"] = n_floor
        if n_floor:
            text = f"{n_floor} of {y.size} values < {floor:g} (zeros included) drawn at the floor"
            _note(ax, 0.01, 0.01, text, fontsize=7, va="bottom", bbox=WHITE_BOX)
        ax.yaxis.set_major_locator(FixedLocator(tr.ticks(top)))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set_ylim(floor, top)
        ax.set_xlim(min(ns) - 0.5, max(ns) + 0.5)
        ax.set_title(label)
        ax.set_ylabel(label)
        ax.legend(loc="upper right", fontsize=8)
    for ax in axes[2:]:
        ax.set_xlabel("n (annotations per subject)")
        _integer_x(ax)
    save_figure(fig, stem)
    return stats


# ------------------------------------------------------------- clumps per galaxy


def clumps_per_subject(
    subjects: pd.DataFrame, labels: pd.DataFrame, p_fp_cut: float | None = None
) -> pd.DataFrame:
    """Number of label clumps per (n, subject), zero for subjects without clumps.

    With ``p_fp_cut``, only clumps with p_fp < cut count (fig:clumps_per_galaxy_filtered)."""
    lab = labels if p_fp_cut is None else labels[labels["p_fp"] < p_fp_cut]
    counts = lab.groupby(["n", "subject_id"]).size().rename("clumps").reset_index()
    base = subjects[["n", "subject_id"]].drop_duplicates()
    out = base.merge(counts, on=["n", "subject_id"], how="left")
    out["clumps"] = out["clumps"].fillna(0).astype(int)
    return out


def plot_clumps_per_galaxy(
    subjects: pd.DataFrame,
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    p_fp_cut: float = 0.85,
    dpi: int = 150,
) -> dict:
    """fig:clumps_per_galaxy_filtered: clumps per galaxy vs n (all; p_fp < cut).

    Every subject of the subsample counts (zero-clump galaxies included). Colour =
    number of galaxies; red markers and line = the mean per n."""
    require(subjects, ["n", "subject_id"], "subjects")
    require(labels, ["n", "subject_id", "p_fp"], "labels")
    ns = sorted(subjects["n"].unique().tolist())
    fig = new_figure(6.5, 8.0, dpi)
    axes = fig.subplots(2, 1, sharex=True)
    stats: dict[str, Any] = {"p_fp_cut": p_fp_cut}
    for ax, (key, cut, title) in zip(
        axes,
        (
            ("all", None, "all clumps"),
            ("cut", p_fp_cut, rf"clumps with {SYM['p_fp']} < {p_fp_cut:g}"),
        ),
        strict=True,
    ):
        cps = clumps_per_subject(subjects, labels, cut)
        stats[key] = {}
        if cps.empty:
            _no_data(ax)
            ax.set_title(title)
            continue
        top = int(cps["clumps"].max())
        counts, _, _ = np.histogram2d(
            cps["n"], cps["clumps"], bins=[_n_edges(ns), np.arange(-0.5, top + 1.5)]
        )
        c = np.ma.masked_equal(counts, 0)
        mesh = ax.pcolormesh(
            _n_edges(ns),
            np.arange(-0.5, top + 1.5),
            c.T,
            norm=LogNorm(vmin=1, vmax=max(c.max(), 1.0001)),
            cmap="viridis",
            rasterized=True,
        )
        _quiet_colorbar(fig.colorbar(mesh, ax=ax, label="galaxies"))
        means = cps.groupby("n")["clumps"].mean()
        ax.plot(means.index, means.values, "o-", color="tab:red", ms=4, label="mean")
        for n, m in means.items():
            stats[key][int(n)] = {
                "mean": float(m),
                "galaxies": int((cps["n"] == n).sum()),
                "clumps": int(cps.loc[cps["n"] == n, "clumps"].sum()),
            }
        ax.set_ylabel("clumps per galaxy")
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("n (annotations per subject)")
    _integer_x(axes[-1])
    save_figure(fig, stem)
    return stats


# ------------------------------------------------------------- retirement reasons


def status_fractions(subjects: pd.DataFrame) -> pd.DataFrame:
    """Fraction of subjects per status (decisions.md#retirement) for each n: rows n, columns statuses.

    Unknown status values are counted in an ``other`` column."""
    require(subjects, ["n", "status"], "subjects")
    st = subjects["status"].astype(str).where(subjects["status"].isin(STATUSES), "other")
    tab = pd.crosstab(subjects["n"], st, normalize="index")
    cols = list(STATUSES) + (["other"] if "other" in tab.columns else [])
    return tab.reindex(columns=cols, fill_value=0.0)


def plot_retirement_reasons(subjects: pd.DataFrame, stem: str | Path, *, dpi: int = 150) -> dict:
    """fig:retirement_reason_fraction: fraction of subjects per status vs n.

    Statuses of the aggregation contract: retired (risk criterion), retired_empty
    (≥ min volunteers, no clump click), stale (max cycles), unretired. Log y axis so
    that the sub-percent fractions are visible; zero fractions are not drawn."""
    frac = status_fractions(subjects)
    fig = new_figure(6.0, 4.5, dpi)
    ax = fig.subplots()
    styles = {
        "retired": "o-",
        "retired_empty": "s-",
        "stale": "^-",
        "unretired": "v-",
        "other": "x-",
    }
    for col in frac.columns:
        y = frac[col].where(frac[col] > 0)
        if y.notna().any():
            ax.plot(frac.index, y, styles[col], ms=4, label=col)
    if frac.empty:
        _no_data(ax)
    else:
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("n (annotations per subject)")
    _integer_x(ax)
    ax.set_ylabel("fraction of subjects")
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, stem)
    return {
        "fractions": {int(n): {k: float(v) for k, v in r.items()} for n, r in frac.iterrows()},
        "counts": subjects.groupby("n").size().astype(int).to_dict(),
    }


# --------------------------------------------------------------------- MeanShift


def plot_meanshift_difference(
    count_difference: pd.DataFrame,
    stem: str | Path,
    *,
    column: str = "diff_meanshift",
    dpi: int = 150,
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
        _summary(
            ax,
            f"{d.size} subjects\nours more: {100 * stats['frac_ours_more']:.1f}%\n"
            f"equal: {100 * stats['frac_equal']:.1f}%\n"
            f"MeanShift more: {100 * stats['frac_meanshift_more']:.1f}%",
        )
    else:
        _no_data(ax)
    ax.set_xlabel(r"$N_{\mathrm{clumps}}$(ours) − $N_{\mathrm{clumps}}$(MeanShift)")
    ax.set_ylabel("subjects")
    save_figure(fig, stem)
    return stats


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
    else:
        ax.add_patch(Rectangle((0, 0), width, height, fc="0.93" if grey else "0.85", ec="none"))
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


def _example_grid(
    ids: Sequence[int], heads: Sequence[str], dpi: int, *, extra_height: float = 0.0
) -> tuple[Figure, np.ndarray]:
    """The figure of an example panel: one row per subject, one column per entry of
    ``heads`` (its title); with no subject, one row of blank frames and a note."""
    rows = max(len(ids), 1)
    fig = new_figure(12.0, 3.1 * rows + extra_height, dpi)
    axes = np.asarray(fig.subplots(rows, len(heads), squeeze=False))
    for j, t in enumerate(heads):
        axes[0, j].set_title(t, fontsize=9)
    if not ids:
        for ax in axes[0]:
            _frame(ax, 400, 400, None, False)
        _no_data(axes[0, 0], "no example subjects")
    return fig, axes


def _example_row(axes: np.ndarray, sid: int, boxes: pd.DataFrame, image) -> pd.DataFrame:
    """The common columns of one example row: the subject in every column (grey
    scale after the first) and all of its volunteer boxes in the second. ``boxes``:
    the subject's rows (with empty classifications); returns those with a box."""
    b = boxes.dropna(subset=["x1", "y1", "x2", "y2"])
    w, h = _subject_size(boxes)
    for j, ax in enumerate(axes):
        _frame(ax, w, h, image, grey=j > 0)
    axes[0].set_ylabel(f"subject {sid}", fontsize=8)
    for r in b.itertuples():
        _box(axes[1], r, "tab:cyan", lw=0.7)
    return b


def _label_boxes(ax, labels: pd.DataFrame, p_fp_dashed: float) -> int:
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
    p_fp_dashed: float = 0.8,
    dpi: int = 150,
) -> dict:
    """fig:agg_examples: one row per subject, four columns.

    (1) the subject as volunteers saw it (its image, else a blank frame); (2) all
    volunteer boxes on a grey-scale image; (3) boxes coloured by their cluster,
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
    fig, axes = _example_grid(ids, heads, dpi)
    stats: dict[str, Any] = {"subjects": []}
    for i, sid in enumerate(ids):
        img = images.get(int(sid))
        b = _example_row(axes[i], sid, assignments[assignments["subject_id"] == sid], img)
        lab = labels[labels["subject_id"] == sid]
        cluster = b["cluster"].astype("Float64").fillna(-3).astype(int).to_numpy()
        colours = _cluster_colours(np.unique(cluster))
        n_dummy = 0
        for r, c in zip(b.itertuples(), cluster, strict=True):
            if c < -1:  # not aggregated (no cluster): not drawn in this column
                continue
            n_dummy += c == -1
            _box(axes[i, 2], r, "k" if c == -1 else colours[c], lw=1.2 if c == -1 else 0.8)
        n_dashed = _label_boxes(axes[i, 3], lab, p_fp_dashed)
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


def plot_meanshift_examples(
    subject_ids: Sequence[int],
    boxes: pd.DataFrame,
    labels: pd.DataFrame,
    meanshift: pd.DataFrame,
    stem: str | Path,
    *,
    images: Mapping[int, np.ndarray] | None = None,
    p_fp_dashed: float = 0.8,
    title: str = "",
    dpi: int = 150,
) -> dict:
    """fig:agg_v_ms_more_examples / fig:agg_v_ms_less_examples: one row per subject.

    (1) subject image (else a blank frame); (2) all volunteer boxes on grey
    scale; (3) our label boxes, dashed where p_fp > ``p_fp_dashed``; (4) MeanShift
    clump centres as red circles of radius box_side / 2 (= one FWHM, decisions.md#meanshift-baseline)."""
    require(boxes, ["subject_id", "x1", "y1", "x2", "y2"], "boxes")
    require(labels, ["subject_id", "x1", "y1", "x2", "y2", "p_fp"], "labels")
    require(meanshift, ["subject_id", "x", "y"], "meanshift labels")
    images = images or {}
    ids = list(subject_ids)
    heads = ("subject", "all boxes", f"ours (dashed: p_fp > {p_fp_dashed:g})", "MeanShift")
    fig, axes = _example_grid(ids, heads, dpi, extra_height=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    stats: dict[str, Any] = {"subjects": []}
    for i, sid in enumerate(ids):
        img = images.get(int(sid))
        b = _example_row(axes[i], sid, boxes[boxes["subject_id"] == sid], img)
        lab = labels[labels["subject_id"] == sid]
        ms = meanshift[meanshift["subject_id"] == sid]
        n_dashed = _label_boxes(axes[i, 2], lab, p_fp_dashed)
        side = (b["x2"] - b["x1"]).median() if len(b) else 20.0
        sides = ms["box_side"].to_numpy(float) if "box_side" in ms else np.full(len(ms), side)
        for r, sd in zip(ms.itertuples(), sides, strict=True):
            axes[i, 3].add_patch(Circle((r.x, r.y), sd / 2.0, fill=False, ec="red", lw=1.5))
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
    kw.setdefault("title", "our framework finds more clumps than MeanShift")
    return plot_meanshift_examples(subject_ids, boxes, labels, meanshift, stem, **kw)


def plot_meanshift_fewer_examples(subject_ids, boxes, labels, meanshift, stem, **kw) -> dict:
    """fig:agg_v_ms_less_examples_0-5: subjects where MeanShift finds more clumps."""
    kw.setdefault("title", "MeanShift finds more clumps than our framework")
    return plot_meanshift_examples(subject_ids, boxes, labels, meanshift, stem, **kw)


# ------------------------------------------------------------- p_fp calibration


def expected_calibration_error(table: pd.DataFrame) -> float:
    """ECE = Σ_b (n_b / N) |frac_false_b − mean_p_fp_b| over the non-empty bins."""
    t = table[table["n_labels"] > 0]
    total = t["n_labels"].sum()
    if not total:
        return float("nan")
    return float((t["n_labels"] * (t["frac_false"] - t["mean_p_fp"]).abs()).sum() / total)


def plot_calibration(
    calibration: pd.DataFrame,
    stem: str | Path,
    *,
    n_ref: int | None = 20,
    dpi: int = 150,
) -> dict:
    """p_fp against the simulated truth (no counterpart in the paper).

    ``calibration``: clumpscout.evaluation.compare's stacked reliability table (n, subset,
    bin_lo, bin_hi, n_labels, mean_p_fp, frac_false, frac_false_se). Left: the
    fraction of label clumps that are truly false vs their mean p_fp per bin at
    n_ref (a calibrated p_fp lies on the diagonal). Right: the expected
    calibration error per n and subset."""
    need = ["n", "subset", "n_labels", "mean_p_fp", "frac_false"]
    require(calibration, need, "calibration")
    ns = sorted(calibration["n"].unique().tolist())
    nr = _n_ref(ns, n_ref)
    fig = new_figure(11.0, 4.5, dpi)
    ax_l, ax_r = fig.subplots(1, 2)
    ax_l.plot([0, 1], [0, 1], ":", color="0.5", lw=1)
    stats: dict[str, Any] = {"n_ref": nr, "ece": {}}
    subsets = list(dict.fromkeys(calibration["subset"]))
    for k, subset in enumerate(subsets):
        sub = calibration[calibration["subset"] == subset]
        eces = {int(n): expected_calibration_error(g) for n, g in sub.groupby("n")}
        stats["ece"][subset] = eces
        ax_r.plot(list(eces), list(eces.values()), "o-", ms=4, label=subset)
        ref = sub[(sub["n"] == nr) & (sub["n_labels"] > 0)]
        yerr = ref["frac_false_se"] if "frac_false_se" in ref else None
        ax_l.errorbar(
            ref["mean_p_fp"] + 0.004 * k,
            ref["frac_false"],
            yerr=yerr,
            fmt="o-",
            ms=4,
            capsize=2,
            label=f"{subset}: ECE {eces.get(nr, float('nan')):.3f}",
        )
    if not subsets:
        _no_data(ax_l)
        _no_data(ax_r)
    else:
        ax_l.legend(fontsize=8, loc="upper left")
        ax_r.legend(fontsize=8)
    ax_l.set_xlim(0, 1)
    ax_l.set_ylim(0, 1)
    ax_l.set_xlabel(r"mean $p^{\mathrm{fp}}_{l}$ in bin")
    ax_l.set_ylabel("fraction truly false")
    ax_l.set_title(f"n = {nr}")
    ax_r.set_xlabel("n (annotations per subject)")
    _integer_x(ax_r)
    ax_r.set_ylabel("expected calibration error")
    ax_r.set_ylim(bottom=0)
    save_figure(fig, stem)
    return stats


# ------------------------------------------------------ report labels: ours vs paper


def _pct(v: Any) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.1f}%"


def _g(v: Any) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.2g}"


def _ends(per_n: Mapping[str, Any]) -> tuple[str, str] | None:
    """The smallest and largest n of a JSON ``{n: ...}`` mapping (keys are strings)."""
    keys = sorted(per_n, key=int)
    return (keys[0], keys[-1]) if keys else None


def _trend(
    per_n: Mapping[str, Any], value: Callable[[Any], Any] = lambda v: v, fmt=_g
) -> str | None:
    """``n=<smallest>: v → n=<largest>: v`` of a JSON ``{n: ...}`` mapping, with
    v = ``fmt(value(per_n[n]))``; None when the mapping is empty."""
    e = _ends(per_n)
    if not e:
        return None
    return f"n={e[0]}: {fmt(value(per_n[e[0]]))} → n={e[1]}: {fmt(value(per_n[e[1]]))}"


def _median_trend(s) -> str | None:
    t = _trend(s.get("per_n", {}), lambda q: q["median"])
    return t and f"median {t}"


def _labels_pfp(s):
    med = _median_trend(s)
    ours = (f"{med}; " if med else "") + (
        f"n={s.get('n_ref')}: {_pct(s.get('frac_below_inset'))} < {s.get('inset_max')}, "
        f"{_pct(s.get('frac_outside_0.2_0.8'))} outside [0.2, 0.8]"
    )
    return ours, "median n=3: ≈0.04 → n=20: ≈5e-5; n=20: ≈90% outside [0.2, 0.8]"


def _labels_psigma(s):
    return _median_trend(s) or "–", "median n=3: ≈0.05 → n=20: ≈4e-4; all ≲ 0.3 at n=20"


def _labels_positions(s):
    bins = s.get("bins", [])
    parts = [
        f"[{b['lo']:g}, {b['hi']:g}{']' if i == len(bins) - 1 else ')'}: "
        f"{_pct(b['frac_outside'])} of {b['count']}"
        for i, b in enumerate(bins)
    ]
    return "outside R > 0.25 per p_fp bin: " + "; ".join(parts), (
        "p_fp ≲ 0.5: 0.1% outside R = 0.25; p_fp ≳ 0.5: ~1%"
    )


def _labels_roc(s, paper):
    out = []
    for subset in ("all", "normal"):
        t = _trend(
            s.get(subset, {}),
            lambda m: m["optimal"],
            lambda o: f"({_g(o['completeness'])}, {_g(o['purity'])})",
        )
        if t:
            out.append(f"{subset} optimal (C, P) {t}")
    return "; ".join(out) or "–", paper


def _labels_true_false(s):
    ours = (
        f"true positives {_pct(s.get('frac_tp_below_cut'))} < {s.get('cut')} (of {s.get('n_tp')}), "
        f"false positives {_pct(s.get('frac_fp_below_cut'))} (of {s.get('n_fp')})"
    )
    return ours, "95% of true vs 68% of false positives have p_fp < 0.3"


def _labels_calibration(s):
    out = []
    for subset, per in s.get("ece", {}).items():
        t = _trend(per)
        if t:
            out.append(f"ECE {subset}: {t}")
    return "; ".join(out) or "–", "not measurable (no truth)"


def _labels_skills(s):
    ours = (
        f"{s.get('n_volunteers')} volunteers; median {_g(s.get('median_subjects'))} subjects; "
        f"{_pct(s.get('frac_below_10'))} < 10; {s.get('n_above_200')} > 200"
    )
    return ours, "20,999 volunteers; median 3 subjects; ≈95% < 10; 176 > 200"


def _labels_risk(s):
    out = []
    for col, name in (
        ("n_fp", "N_fp"),
        ("n_fp_cut", "N_fp(p_fp≤cut)"),
        ("n_fn", "N_fn"),
        ("n_sigma", "N_σ"),
    ):
        t = _trend(s.get(col, {}).get("per_n", {}), lambda q: q["frac_above_1"], _pct)
        if t:
            out.append(f"{name} > 1: {t}")
    paper = (
        "N_fp > 1: peak ~10% (n=15), ~8% (n=20); filtered ≲ 0.1%; N_fn > 1 → ~2%; N_σ > 1 < 0.05%"
    )
    return "; ".join(out) or "–", paper


def _labels_cpg(s):
    out = []
    for key, name in (("all", "all"), ("cut", f"p_fp < {s.get('p_fp_cut')}")):
        t = _trend(s.get(key, {}), lambda q: q["mean"])
        if t:
            out.append(f"mean {name}: {t}")
    return "; ".join(
        out
    ) or "–", "slow growth for n > 7: +0.5 clumps (p_fp < 0.85) per galaxy from n=7 to 20"


def _labels_retirement(s):
    per = s.get("fractions", {})
    out = []
    for n in _ends(per) or ():
        f = per[n]
        out.append(
            f"n={n}: retired {_pct(f.get('retired', 0) + f.get('retired_empty', 0))}, "
            f"stale {_pct(f.get('stale'))}, unretired {_pct(f.get('unretired'))}"
        )
    return "; ".join(out) or "–", "> 90% retired, 7-9% stale, unretired 0.9% (n=3) → < 0.1% (n=20)"


def _labels_ms(s):
    ours = (
        f"ours more {_pct(s.get('frac_ours_more'))}, equal {_pct(s.get('frac_equal'))}, "
        f"MeanShift more {_pct(s.get('frac_meanshift_more'))}; mean difference {_g(s.get('mean_difference'))}"
    )
    return ours, "our framework finds more clumps for the majority of subjects"


def _labels_methods(s):
    ref = "truth" if s.get("truth") else "experts"
    per = s.get(ref, {})
    parts = [
        f"{METHODS.get(m, (m,))[0]} C {_g(v.get('opt_completeness'))} P {_g(v.get('opt_purity'))}"
        for m, v in per.items()
    ]
    return f"vs {ref}, optimal p*: " + "; ".join(parts), "not in the paper (MeanShift counts only)"


def _labels_examples(s):
    ids = [str(r["subject_id"]) for r in s.get("subjects", [])]
    return "subjects " + (", ".join(ids) or "–"), "representative examples"


REPORT_LABELS: dict[str, Callable[[dict], tuple[str, str]]] = {
    "clump_fpp_dist": _labels_pfp,
    "clump_variance_dist": _labels_psigma,
    "clump_location_vs_pfp": _labels_positions,
    "pseudo_roc_volunteer_counts": lambda s: _labels_roc(
        s,
        "optimal C rises and P falls with n; best compromise n ≈ 7; normal, n=20, p*=1: C ≈ 0.97, P ≈ 0.35",
    ),
    "pseudo_roc_truth": lambda s: _labels_roc(s, "not measurable (no truth)"),
    "volunteer_normal_set_fpp_dist": _labels_true_false,
    "pfp_calibration_truth": _labels_calibration,
    "worker_skill_evolution": _labels_skills,
    "subject_risk_param_evolution": _labels_risk,
    "clumps_per_galaxy_filtered": _labels_cpg,
    "retirement_reason_fraction": _labels_retirement,
    "agg_v_ms_dist": _labels_ms,
    "agg_v_ms_more_examples": _labels_examples,
    "agg_v_ms_less_examples": _labels_examples,
    "agg_examples": _labels_examples,
    "method_comparison": _labels_methods,
}


def report_labels(name: str, stats_json: str | Path | None = None) -> dict[str, str]:
    """The columns of figure ``name`` in the Snakemake report: its key numbers in
    this run (from ``<stem>.json``) next to what the paper reports. Evaluated when the
    report is built (``report(..., labels=...)``), so it never goes stale."""
    stats: dict = {}
    if stats_json and Path(stats_json).exists():
        try:
            stats = json.loads(Path(stats_json).read_text())
        except ValueError:
            stats = {}
    try:
        ours, paper = REPORT_LABELS[name](stats) if stats else ("–", "")
    except (KeyError, TypeError, IndexError):
        ours, paper = "–", ""
    if not paper:
        paper = REPORT_LABELS[name]({})[1] if name in REPORT_LABELS else ""
    return {"figure": name, "ours": ours, "paper": paper}


# ============================================================ workflow files -> figures


def read_table(
    path: str | Path,
    columns: Sequence[str],
    what: str,
    optional: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Read a Parquet or CSV table and check its contract ``columns`` (InputError if not).

    With ``optional`` given, only ``columns`` and the optional columns present are
    read (cheap on the large assignments / clicks tables); else every column."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what}: file not found", path=path)
    try:
        if path.suffix == ".csv":
            head = pd.read_csv(path, nrows=0).columns
        else:
            import pyarrow.parquet as pq

            head = pq.read_schema(path).names
        require(pd.DataFrame(columns=list(head)), columns, what, path)
        use = None
        if optional is not None:
            use = list(dict.fromkeys([*columns, *(c for c in optional if c in head)]))
        if path.suffix == ".csv":
            return pd.read_csv(path, usecols=use)
        return pd.read_parquet(path, columns=use)
    except InputError:
        raise
    except Exception as exc:  # unreadable file: one line, no traceback
        raise InputError(f"{what}: cannot read ({type(exc).__name__}: {exc})", path=path) from exc


def read_stacked(
    paths: str | Path | Sequence[str | Path],
    ns: Sequence[int],
    columns: Sequence[str],
    what: str,
    optional: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One table per n (``paths`` aligned with ``ns``) read into one stacked table;
    a single path is a table that already has an ``n`` column (a collected table)."""
    if isinstance(paths, str | Path):
        df = read_table(paths, ["n", *columns], what, optional)
        return df[df["n"].isin([int(n) for n in ns])].reset_index(drop=True)
    if len(paths) != len(ns):
        raise InputError(f"{what}: {len(paths)} files for {len(ns)} values of n")
    return stack_by_n(
        {int(n): read_table(p, columns, what, optional) for n, p in zip(ns, paths, strict=True)}
    )


def image_paths(sources: Sequence[str | Path]) -> dict[int, Path]:
    """Subject PNGs: from image metadata tables (a ``cutouts.parquet`` with
    subject_id and ``png`` relative to the table's folder), from folders of
    ``<subject_id>.png``, or given directly as such files."""
    found: dict[int, Path] = {}
    for src in map(Path, sources):
        if src.suffix in (".parquet", ".csv") and src.exists():
            t = read_table(src, ["subject_id", "png"], "image table", [])
            for sid, png in zip(t["subject_id"], t["png"], strict=True):
                if isinstance(png, str) and png:
                    found[int(sid)] = src.parent / png
        elif src.is_dir():
            for f in sorted(src.rglob("*.png")):
                if f.stem.isdigit():
                    found.setdefault(int(f.stem), f)
        elif src.suffix == ".png" and src.stem.isdigit():
            found[int(src.stem)] = src
    return found


def load_images(sources: Sequence[str | Path], subject_ids: Sequence[int]) -> dict[int, np.ndarray]:
    """RGB arrays of the wanted subjects' PNGs (see :func:`image_paths`). A subject
    without an image is simply absent (the figure draws a blank frame)."""
    from PIL import Image

    paths = image_paths(sources)
    out = {}
    for sid in sorted({int(s) for s in subject_ids}):
        f = paths.get(sid)
        if f is not None and f.exists():
            with Image.open(f) as im:
                out[sid] = np.asarray(im.convert("RGB"))
    log.info("subject images: %d of %d example subjects have one", len(out), len(subject_ids))
    return out


BOX_COLS = ["subject_id", "x1", "y1", "x2", "y2"]
CURVE_COLS = ["subset", "threshold", "completeness", "purity"]


def _cfg(params: Mapping[str, Any]) -> dict[str, Any]:
    return DEFAULTS | {k: v for k, v in dict(params.get("figures") or {}).items() if v is not None}


def _ns(params: Mapping[str, Any]) -> tuple[list[int], int | None]:
    ns = [int(n) for n in params["ns"]]
    return ns, _n_ref(ns, _cfg(params)["n_ref"])


def _build_pfp(inp, stem, params):
    ns, nr = _ns(params)
    cfg = _cfg(params)
    lab = read_stacked(inp["labels"], ns, ["p_fp"], "labels", [])
    return plot_pfp_distribution(lab, stem, n_ref=nr, inset_max=cfg["inset_max"], dpi=cfg["dpi"])


def _build_psigma(inp, stem, params):
    ns, nr = _ns(params)
    cfg = _cfg(params)
    lab = read_stacked(inp["labels"], ns, ["p_sigma"], "labels", [])
    return plot_psigma_distribution(lab, stem, n_ref=nr, inset_max=cfg["inset_max"], dpi=cfg["dpi"])


def _build_positions(inp, stem, params):
    cfg = _cfg(params)
    lab = read_table(inp["labels"], ["subject_id", "x", "y", "p_fp"], "labels", [])
    sizes = None
    if inp.get("subjects"):
        sizes = read_table(
            inp["subjects"], ["subject_id", "image_width", "image_height"], "subjects", []
        )
    return plot_clump_positions(
        lab,
        stem,
        sizes=sizes,
        bins=cfg["position_bins"],
        radius=cfg["position_radius"],
        dpi=cfg["dpi"],
    )


def _build_pseudo_roc(inp, stem, params):
    ns, _ = _ns(params)
    cfg = _cfg(params)
    curves = read_stacked(inp["curves"], ns, CURVE_COLS, "comparison curve", [])
    summary = None
    if inp.get("summary"):
        summary = read_table(inp["summary"], ["n", "subset"], "comparison summary")
    return plot_purity_completeness(
        curves, stem, summary=summary, reference=params.get("reference", "experts"), dpi=cfg["dpi"]
    )


def _build_true_false(inp, stem, params):
    cfg = _cfg(params)
    labels = read_table(inp["labels"], [*BOX_COLS, "p_fp"], "labels", ["frac_unusual"])
    points = read_table(inp["points"], ["subject_id", "x", "y"], "expert clicks", [])
    m = empirical_matches(labels, points)
    m = m[m["normal"]]
    return plot_pfp_true_false(
        m, stem, inset_max=cfg["inset_max"], cut=cfg["tp_cut"], dpi=cfg["dpi"]
    )


def _build_calibration(inp, stem, params):
    ns, nr = _ns(params)
    cfg = _cfg(params)
    need = ["subset", "n_labels", "mean_p_fp", "frac_false"]
    cal = read_stacked(inp["calibration"], ns, need, "calibration", ["frac_false_se"])
    return plot_calibration(cal, stem, n_ref=nr, dpi=cfg["dpi"])


def _build_skills(inp, stem, params):
    cfg = _cfg(params)
    need = ["n_subjects", "p_fp", "p_fn", "sigma2"]
    v = read_table(inp["volunteers"], need, "volunteers", [])
    return plot_volunteer_skills(v, stem, dpi=cfg["dpi"])


def _build_risk(inp, stem, params):
    ns, _ = _ns(params)
    cfg = _cfg(params)
    need = ["subject_id", "n_fp", "n_fn", "n_sigma"]
    subj = read_stacked(inp["subjects"], ns, need, "subjects", [])
    lab = read_stacked(inp["labels"], ns, ["subject_id", "p_fp"], "labels", [])
    return plot_risk_components(subj, lab, stem, p_fp_cut=cfg["p_fp_cut"], dpi=cfg["dpi"])


def _build_clumps_per_galaxy(inp, stem, params):
    ns, _ = _ns(params)
    cfg = _cfg(params)
    subj = read_stacked(inp["subjects"], ns, ["subject_id"], "subjects", [])
    lab = read_stacked(inp["labels"], ns, ["subject_id", "p_fp"], "labels", [])
    return plot_clumps_per_galaxy(subj, lab, stem, p_fp_cut=cfg["p_fp_cut"], dpi=cfg["dpi"])


def _build_retirement(inp, stem, params):
    ns, _ = _ns(params)
    cfg = _cfg(params)
    subj = read_stacked(inp["subjects"], ns, ["subject_id", "status"], "subjects", [])
    return plot_retirement_reasons(subj, stem, dpi=cfg["dpi"])


def _build_ms_difference(inp, stem, params):
    cfg = _cfg(params)
    d = read_table(inp["count_difference"], ["subject_id"], "count difference")
    return plot_meanshift_difference(d, stem, dpi=cfg["dpi"])


def _ms_examples(inp, stem, params, sign: int):
    cfg = _cfg(params)
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
        ids, boxes, labels, ms, stem, images=imgs, p_fp_dashed=cfg["p_fp_dashed"], dpi=cfg["dpi"]
    )


def _build_ms_more(inp, stem, params):
    return _ms_examples(inp, stem, params, +1)


def _build_ms_fewer(inp, stem, params):
    return _ms_examples(inp, stem, params, -1)


def _build_method_comparison(inp, stem, params):
    cfg = _cfg(params)
    curves, summaries = {}, {}
    for ref in ("truth", "experts"):
        if inp.get(f"{ref}_summary"):
            summaries[ref] = read_table(
                inp[f"{ref}_summary"], ["method", "n", "subset"], f"{ref} method summary"
            )
        if inp.get(f"{ref}_curves"):
            need = ["method", "subset", "threshold", "completeness", "purity"]
            curves[ref] = read_table(inp[f"{ref}_curves"], need, f"{ref} method curves", [])
    return plot_method_comparison(curves, summaries, stem, dpi=cfg["dpi"])


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


def _build_agg_examples(inp, stem, params):
    cfg = _cfg(params)
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


#: figure name (= output stem in results/figures) -> builder(inputs, stem, params)
FIGURES: dict[str, Callable[[Mapping[str, Any], Path, Mapping[str, Any]], dict]] = {
    "clump_fpp_dist": _build_pfp,
    "clump_variance_dist": _build_psigma,
    "clump_location_vs_pfp": _build_positions,
    "pseudo_roc_volunteer_counts": _build_pseudo_roc,
    "pseudo_roc_truth": _build_pseudo_roc,
    "volunteer_normal_set_fpp_dist": _build_true_false,
    "pfp_calibration_truth": _build_calibration,
    "worker_skill_evolution": _build_skills,
    "subject_risk_param_evolution": _build_risk,
    "clumps_per_galaxy_filtered": _build_clumps_per_galaxy,
    "retirement_reason_fraction": _build_retirement,
    "agg_v_ms_dist": _build_ms_difference,
    "agg_v_ms_more_examples": _build_ms_more,
    "agg_v_ms_less_examples": _build_ms_fewer,
    "agg_examples": _build_agg_examples,
    "method_comparison": _build_method_comparison,
}


def build(
    name: str, inputs: Mapping[str, Any], stem: str | Path, params: Mapping[str, Any]
) -> dict:
    """Make figure ``name`` from the workflow files in ``inputs``; write
    ``<stem>.png``, ``<stem>.pdf`` and the figure's numbers as ``<stem>.json``.

    ``params``: ``ns`` (the subsample sizes, aligned with per-n input lists),
    ``figures`` (config section), ``seed`` (example picks), ``reference``."""
    if name not in FIGURES:
        raise InputError(f"unknown figure {name!r}; known: {', '.join(FIGURES)}")
    with timed(f"figure {name}", log):
        stats = FIGURES[name](inputs, Path(stem), params)
    write_json({"figure": name, **stats}, output_paths(stem)["png"].with_suffix(".json"))
    return stats


# ------------------------------------------------------------------------------ CLI


def results_inputs(results: Path, ns: list[int], nr: int, n_base: int | None = None):
    """The inputs of every figure in a results folder laid out as the workflow does
    (the paper's figures from the paper model, results/aggregate/paper/n{n}/...)."""
    n_base = nr if n_base is None else n_base
    agg = results / "aggregate" / PAPER_MODEL
    per_n = {k: [agg / f"n{n}" / f"{k}.parquet" for n in ns] for k in ("labels", "subjects")}
    ref = {k: agg / f"n{nr}" / f"{k}.parquet" for k in ("labels", "volunteers", "assignments")}
    images = sorted(results.glob("images/**/cutouts.parquet"))
    base = results / "baseline"
    cmp_ = results / "compare" / PAPER_MODEL
    methods = {
        f"{ref}_{key}": base / f"{ref}_{name}.csv"
        for ref in ("truth", "experts")
        for key, name in (("curves", "curve"), ("summary", "summary"))
        if (base / f"{ref}_summary.csv").exists()
    }
    ms = {
        "count_difference": base / "count_difference.csv",
        "boxes": results / "subsamples" / f"n{n_base}" / "boxes.parquet",
        "labels": agg / f"n{n_base}" / "labels.parquet",
        "meanshift": base / "meanshift_labels.parquet",
        "images": images,
    }
    return {
        "clump_fpp_dist": {"labels": per_n["labels"]},
        "clump_variance_dist": {"labels": per_n["labels"]},
        "clump_location_vs_pfp": {
            "labels": ref["labels"],
            "subjects": results / "subjects" / "subjects.parquet",
        },
        "pseudo_roc_volunteer_counts": {
            "curves": cmp_ / "experts_curve.csv",
            "summary": cmp_ / "experts_summary.csv",
        },
        "pseudo_roc_truth": {
            "curves": cmp_ / "truth_curve.csv",
            "summary": cmp_ / "truth_summary.csv",
        },
        "volunteer_normal_set_fpp_dist": {
            "labels": ref["labels"],
            "points": results / "clicks" / "expert_clicks.parquet",
        },
        "pfp_calibration_truth": {"calibration": cmp_ / "truth_calibration.csv"},
        "worker_skill_evolution": {"volunteers": ref["volunteers"]},
        "subject_risk_param_evolution": per_n,
        "clumps_per_galaxy_filtered": per_n,
        "retirement_reason_fraction": {"subjects": per_n["subjects"]},
        "agg_v_ms_dist": {"count_difference": base / "count_difference.csv"},
        "agg_v_ms_more_examples": ms,
        "agg_v_ms_less_examples": ms,
        "agg_examples": {
            "assignments": ref["assignments"],
            "labels": ref["labels"],
            "images": images,
        },
        "method_comparison": methods or {"truth_summary": base / "truth_summary.csv"},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True, help="results folder of a workflow run")
    parser.add_argument("--out", required=True, help="folder for the PNG / PDF / JSON files")
    parser.add_argument("--n", type=int, nargs="+", required=True, help="subsample sizes n")
    parser.add_argument("--config", default=None, help="config.yaml (its figures section)")
    parser.add_argument(
        "--only", nargs="+", choices=sorted(FIGURES), metavar="NAME", help="only these figures"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for picking example subjects")


def run(args: argparse.Namespace) -> int:
    """Build every figure whose inputs exist; say which were skipped and why."""
    import yaml

    cfg: dict[str, Any] = {}
    base_n = None
    if args.config:
        with open(args.config) as fh:
            full = yaml.safe_load(fh) or {}
        cfg = dict(full.get("figures") or {})
        base_n = (full.get("baseline") or {}).get("n")
    ns = sorted(args.n)
    nr = _n_ref(ns, cfg.get("n_ref"))
    params = {"ns": ns, "figures": cfg, "seed": args.seed}
    out = Path(args.out)
    skipped = 0
    for name, inputs in results_inputs(Path(args.results), ns, nr, base_n).items():
        if args.only and name not in args.only:
            continue
        files = [p for k, v in inputs.items() if k != "images" for p in np.atleast_1d(v)]
        missing = [str(p) for p in files if not Path(p).exists()]
        if missing:
            log.warning("skipping %s: %d input(s) missing, e.g. %s", name, len(missing), missing[0])
            skipped += 1
            continue
        ref = "truth" if "truth" in name else "experts"
        build(name, inputs, out / name, params | {"reference": ref})
    log.info("figures written to %s (%d skipped for missing inputs)", out, skipped)
    return 0
