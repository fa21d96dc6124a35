"""§6.2, aggregated clump properties: p_fp and p_σ distributions, clump positions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.patches import Circle
from matplotlib.ticker import (
    NullFormatter,
)
from scipy.special import expit, logit

from clumpscout.figures.common import (
    DEFAULTS,
    SYM,
    WHITE_BOX,
    axes_note,
    count_mesh,
    figure_settings,
    integer_x_ticks,
    logit_limits,
    n_edges,
    new_figure,
    no_data,
    nouns,
    ns_and_ref,
    quantiles,
    quiet_colorbar,
    read_stacked,
    read_table,
    reference_n,
    require,
    save_figure,
)


def _reference_panel(ax, p_ref: np.ndarray, sym: str, inset_max: float, objects: str) -> None:
    """Histogram of the values at n_ref (log counts) with an inset below ``inset_max``."""
    if not p_ref.size:
        no_data(ax, f"no {objects}")
        return
    below = p_ref[p_ref < inset_max]
    ax.hist(p_ref, bins=np.linspace(0.0, 1.0, 51), color="tab:blue", log=True)
    ax.set_xlim(0.0, 1.0)
    inset = ax.inset_axes([0.33, 0.42, 0.42, 0.42])
    inset.hist(below, bins=np.linspace(0.0, inset_max, 21), color="tab:green")
    inset.set_xlim(0.0, inset_max)
    inset.tick_params(labelsize=7)
    frac = below.size / p_ref.size
    inset.set_title(f"{sym} < {inset_max:g}: {below.size} ({100 * frac:.1f}%)", fontsize=8)


def _versus_n_panel(ax, df: pd.DataFrame, column: str, objects: str, stats: dict) -> None:
    """``column`` versus n on a logistic y axis: colour = items per bin (the bins are equal
    on the axes as drawn), red = median and inter-quartile range per n. Values beyond
    the axis are drawn in its edge bins and counted in the panel's title (above the
    data, so that it never hides the top bins)."""
    ns = sorted(df["n"].unique().tolist())
    p_all = df[column].to_numpy(float)
    lo, hi = logit_limits(p_all)
    clipped = np.clip(p_all, lo, hi)
    stats["logit_limits"] = [lo, hi]
    stats["n_clipped"] = int(np.count_nonzero(clipped != p_all))
    y_edges = expit(np.linspace(logit(lo), logit(hi), 49))
    counts = count_mesh(
        ax, df["n"].to_numpy(float), clipped, n_edges(ns), y_edges, f"{objects} per bin"
    )
    stats["colour_max"] = int(counts.max()) if counts.size else 0
    med, q25, q75 = [], [], []
    for n in ns:
        q = quantiles(df.loc[df["n"] == n, column].to_numpy(float))
        stats["per_n"][int(n)] = q | {"count": int((df["n"] == n).sum())}
        med.append(q["median"])
        q25.append(q["q25"])
        q75.append(q["q75"])
    med_c, q25_c, q75_c = (np.clip(np.asarray(v), lo, hi) for v in (med, q25, q75))
    ax.errorbar(ns, med_c, yerr=[med_c - q25_c, q75_c - med_c], fmt="o", color="tab:red",
                ms=4, capsize=2, label="median, IQR")  # fmt: skip
    ax.set_yscale("logit")
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(lo, hi)
    ax.set_xlim(min(ns) - 0.5, max(ns) + 0.5)
    ax.legend(loc="upper right", fontsize=8)
    if stats["n_clipped"]:
        ax.set_title(
            f"{stats['n_clipped']} of {p_all.size} values beyond the axis, drawn at its edge",
            fontsize=8,
        )


def _probability_distribution(
    labels: pd.DataFrame,
    column: str,
    stem: str | Path,
    *,
    n_ref: int | None,
    inset_max: float,
    dpi: int,
    wording: str | None = None,
) -> dict:
    """Left: histogram of ``column`` at n_ref with an inset below ``inset_max``.
    Right: its distribution versus n (:func:`_versus_n_panel`)."""
    require(labels, ["n", column], "labels")
    objects = nouns(wording)["objects"]
    df = labels[["n", column]].dropna()
    ns = sorted(df["n"].unique().tolist())
    nr = reference_n(ns, n_ref)
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
    _reference_panel(ax_l, p_ref, sym, inset_max, objects)
    ax_l.set_xlabel(sym)
    ax_l.set_ylabel(objects)
    ax_l.set_title(f"n = {nr}: {p_ref.size} {objects}" if nr is not None else "no subsample")
    if ns:
        _versus_n_panel(ax_r, df, column, objects, stats)
    else:
        no_data(ax_r)
    ax_r.set_xlabel("n (annotations per subject)")
    integer_x_ticks(ax_r)
    ax_r.set_ylabel(sym)
    save_figure(fig, stem)
    return stats


def plot_pfp_distribution(
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    n_ref: int | None = DEFAULTS["n_ref"],
    inset_max: float = DEFAULTS["inset_max"],
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """fig:clump_fpp_dist: clump p_fp (decisions.md#clump-false-positive-probability) at
    n = 20 and versus n.

    ``labels``: stacked labels.parquet (n, p_fp). Returns the fraction below the
    inset limit at n_ref, the fraction outside [0.2, 0.8] (the paper's ~90 %), the
    median / quartiles per n and the fullest bin of the right panel (``colour_max``)."""
    return _probability_distribution(
        labels, "p_fp", stem, n_ref=n_ref, inset_max=inset_max, dpi=dpi, wording=wording
    )


def plot_psigma_distribution(
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    n_ref: int | None = DEFAULTS["n_ref"],
    inset_max: float = DEFAULTS["inset_max"],
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """fig:clump_variance_dist: clump p_σ (decisions.md#location-variance) at n = 20 and
    versus n."""
    return _probability_distribution(
        labels, "p_sigma", stem, n_ref=n_ref, inset_max=inset_max, dpi=dpi, wording=wording
    )


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
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """fig:clump_location_vs_pfp: clump positions in normalised coordinates per p_fp bin.

    ``labels``: one subsample's labels (subject_id, x, y, p_fp). Bins are
    [b_k, b_k+1) with the last one closed. The circle R = ``radius`` is drawn and
    the fraction of clumps outside it is given per bin."""
    require(labels, ["subject_id", "x", "y", "p_fp"], "labels")
    objects = nouns(wording)["objects"]
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
            no_data(ax, f"no {objects}")
        ax.add_patch(Circle((0, 0), radius, fill=False, ls="--", color="tab:red", lw=1))
        ax.set_aspect("equal")
        ax.set_xlim(-0.5, 0.5)
        ax.set_ylim(0.5, -0.5)  # image orientation: y down
        upper = "≤" if close == "]" else "<"
        ax.set_title(f"{edges[b]:g} ≤ {SYM['p_fp']} {upper} {edges[b + 1]:g}", fontsize=9)
        pct = "–" if not len(sel) else f"{100 * frac:.2f}%"
        text = f"{len(sel)} {objects}\nR > {radius:g}: {pct}"
        axes_note(ax, 0.03, 0.03, text, fontsize=8, color="k", bbox=WHITE_BOX)
        ax.set_xlabel(r"$X/X_{\max} - \frac{1}{2}$")
    axes[0].set_ylabel(r"$Y/Y_{\max} - \frac{1}{2}$")
    if mesh is not None:
        quiet_colorbar(fig.colorbar(mesh, ax=list(axes), label=f"{objects} per bin"))
    save_figure(fig, stem)
    return stats


def _build_distribution(inp, stem, params, column, plot):
    """A per-label probability's distribution per n (p_fp or p_sigma) from the stacked labels."""
    ns, nr = ns_and_ref(params)
    cfg = figure_settings(params)
    lab = read_stacked(inp["labels"], ns, [column], "labels", [])
    return plot(
        lab,
        stem,
        n_ref=nr,
        inset_max=cfg["inset_max"],
        dpi=cfg["dpi"],
        wording=params.get("wording"),
    )


def build_pfp(inp, stem, params):
    return _build_distribution(inp, stem, params, "p_fp", plot_pfp_distribution)


def build_psigma(inp, stem, params):
    return _build_distribution(inp, stem, params, "p_sigma", plot_psigma_distribution)


def build_positions(inp, stem, params):
    cfg = figure_settings(params)
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
        wording=params.get("wording"),
    )
