"""§6.4, volunteer skills: subjects per volunteer and skills versus subjects inspected."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.figures.common import (
    DEFAULTS,
    corner_summary,
    figure_settings,
    new_figure,
    no_data,
    quantiles,
    read_table,
    require,
    save_figure,
)


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
            for name, val in quantiles(sel[skill].dropna().to_numpy(float)).items():
                row[f"{skill}_{name}"] = val
        rows.append(row)
    return pd.DataFrame(rows)


def plot_volunteer_skills(
    volunteers: pd.DataFrame, stem: str | Path, *, dpi: int = DEFAULTS["dpi"]
) -> dict:
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
        corner_summary(
            ax,
            f"{len(v)} volunteers\nmedian {stats['median_subjects']:g} subjects\n"
            f"{100 * stats['frac_below_10']:.1f}% < 10, {stats['n_above_200']} > 200",
        )
    else:
        no_data(ax, "no volunteers")
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
            no_data(ax)
    axes[1].legend(fontsize=7, ncol=3, loc="upper left")
    axes[-1].set_xscale("log")
    axes[-1].set_xlim(edges[0], edges[-1])
    axes[-1].set_xlabel("subjects inspected")
    save_figure(fig, stem)
    return stats


def build_skills(inp, stem, params):
    cfg = figure_settings(params)
    need = ["n_subjects", "p_fp", "p_fn", "sigma2"]
    v = read_table(inp["volunteers"], need, "volunteers", [])
    return plot_volunteer_skills(v, stem, dpi=cfg["dpi"])
