"""The paper's clump-flux figures (§6.3, §6.5) and subject-image montages (§2.2).

- :func:`plot_flux_true_false` — fig:expert_all_set_hitmiss_band_flux_dists_lscale:
  g, r, i flux distributions (log axis, dashed lines at the means) and flux-ratio
  distributions (dashed lines at the medians) of aggregated clumps that are
  empirically true / false positives against the expert clicks (decisions.md#expert-comparison).
- :func:`plot_flux_vs_pfp` — fig:flux_versus_fpp: flux and flux ratio against
  ``p_fp`` for every clump at n = 20 (points, and binned means / medians).
- :func:`plot_flux_truth` — not in the paper (it had no truth): the same fluxes
  for the simulated true clumps and each kind of distractor, which shows what
  the volunteers were given to tell apart.
- :func:`plot_subject_montage` — subject PNGs in a grid with their side, PSF FWHM
  in subject px and (simulated subjects) the true clumps and distractors marked.

Fluxes are the ``flux_g/r/i`` columns of :mod:`clumpscout.images.photometry`: the
background-subtracted light in the box, asinh-scaled with the band's β like the
subject images (decisions.md#colour-composite); ratios g/r, r/i, g/i of those are larger for bluer clumps. Every function
follows :mod:`clumpscout.figures.common`' conventions: DataFrames in, an output stem,
``<stem>.png`` and ``<stem>.pdf`` written without dates, a dict of the plotted
numbers returned (stored as ``<stem>.json`` by :func:`build`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.patches import Circle
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from clumpscout.figures.common import (
    DEFAULTS,
    FP_COLOUR,
    SYM,
    TP_COLOUR,
    new_figure,
    require,
    save_figure,
)
from clumpscout.io import write_json

BANDS = ("g", "r", "i")
RATIOS = ("ratio_g_r", "ratio_r_i", "ratio_g_i")
RATIO_LABEL = {"ratio_g_r": "g / r", "ratio_r_i": "r / i", "ratio_g_i": "g / i"}
BAND_COLOUR = {"g": "tab:green", "r": "tab:red", "i": "tab:purple"}


def _positive(v: pd.Series) -> np.ndarray:
    a = pd.to_numeric(v, errors="coerce").to_numpy(float)
    return a[np.isfinite(a) & (a > 0)]


def _log_edges(*arrays: np.ndarray, n: int = 30) -> np.ndarray:
    vals = np.concatenate([a for a in arrays if a.size]) if any(a.size for a in arrays) else []
    if len(vals) == 0:
        return np.logspace(-1, 1, n + 1)
    lo, hi = np.quantile(vals, [0.005, 0.995])
    lo, hi = max(lo, 1e-6) / 1.01, max(hi, lo) * 1.01
    return np.logspace(np.log10(lo), np.log10(hi), n + 1)


def _lin_edges(*arrays: np.ndarray, n: int = 30) -> np.ndarray:
    vals = np.concatenate([a for a in arrays if a.size]) if any(a.size for a in arrays) else []
    if len(vals) == 0:
        return np.linspace(0.0, 2.0, n + 1)
    lo, hi = np.quantile(vals, [0.02, 0.98])
    pad = 0.05 * max(hi - lo, 1e-3)
    return np.linspace(lo - pad, hi + pad, n + 1)


def _plain_log(ax, which: str = "x") -> None:
    """A log axis labelled 1-2-5 per decade in plain numbers, without minor labels: the
    default labels every minor tick of an axis spanning under a decade (3×10⁻¹ 4×10⁻¹
    ...), which overlap at the figure's size."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _hist_pair(
    ax, groups: Mapping[str, np.ndarray], colours, label: str, stat: str, log: bool = True
) -> dict:
    """Density histograms of positive values per group (log or linear x), dashed line at ``stat``."""
    edges = _log_edges(*groups.values()) if log else _lin_edges(*groups.values())
    out = {}
    for name, vals in groups.items():
        if vals.size == 0:
            out[name] = {"n": 0, stat: None}
            continue
        centre = float(np.mean(vals) if stat == "mean" else np.median(vals))
        out[name] = {"n": int(vals.size), stat: centre}
        ax.axvline(centre, color=colours[name], ls="--", lw=1.0)
        if not ((vals >= edges[0]) & (vals <= edges[-1])).any():
            continue
        ax.hist(
            vals,
            bins=edges,
            density=True,
            histtype="step",
            lw=1.5,
            color=colours[name],
            label=f"{name} (n={vals.size})",
        )
    if log:
        _plain_log(ax)
    ax.set_xlabel(label)
    ax.set_ylabel("density")
    return out


def plot_flux_true_false(
    phot: pd.DataFrame, stem: str | Path, *, dpi: int = DEFAULTS["dpi"]
) -> dict:
    """fig:expert_all_set_hitmiss_band_flux_dists_lscale from a labels photometry table.

    Needs ``expert_match`` ("tp" / "fp"; other rows are ignored), flux_g/r/i and
    the ratios. Top row: fluxes with the means dashed; bottom row: ratios with
    the medians dashed. Returns per band and ratio the n and mean / median of
    each class and the TP/FP ratio of the means.
    """
    require(phot, ["expert_match", *(f"flux_{b}" for b in BANDS), *RATIOS], "photometry")
    cls = phot["expert_match"].astype("string")
    tp, fp = phot[cls == "tp"], phot[cls == "fp"]
    colours = {"true positive": TP_COLOUR, "false positive": FP_COLOUR}
    fig = new_figure(12.0, 7.0, dpi)
    axes = fig.subplots(2, 3)
    stats: dict[str, Any] = {"n_tp": int(len(tp)), "n_fp": int(len(fp)), "flux": {}, "ratio": {}}
    for ax, b in zip(axes[0], BANDS, strict=True):
        s = _hist_pair(
            ax,
            {
                "true positive": _positive(tp[f"flux_{b}"]),
                "false positive": _positive(fp[f"flux_{b}"]),
            },
            colours,
            f"{b}-band flux (asinh-scaled like the image)",
            "mean",
        )
        m_tp, m_fp = s["true positive"]["mean"], s["false positive"]["mean"]
        s["tp_over_fp_mean"] = m_tp / m_fp if m_tp and m_fp else None
        stats["flux"][b] = s
    for ax, r in zip(axes[1], RATIOS, strict=True):
        stats["ratio"][r] = _hist_pair(
            ax,
            {"true positive": _positive(tp[r]), "false positive": _positive(fp[r])},
            colours,
            f"flux ratio {RATIO_LABEL[r]} (larger = bluer)",
            "median",
            log=False,
        )
    axes[0, 0].legend(fontsize=8)
    fig.suptitle("Clumps that coincide with an expert click (true) or not (false), n = 20")
    save_figure(fig, stem)
    return stats


def _binned(
    x: np.ndarray, y: np.ndarray, edges: np.ndarray, how: str
) -> tuple[np.ndarray, np.ndarray]:
    centres = 0.5 * (edges[1:] + edges[:-1])
    vals = np.full(centres.size, np.nan)
    k = np.clip(np.digitize(x, edges) - 1, 0, centres.size - 1)
    for j in range(centres.size):
        sel = y[k == j]
        if sel.size:
            vals[j] = np.mean(sel) if how == "mean" else np.median(sel)
    return centres, vals


def _scatter_binned(ax, p, values, edges, how, colour, label, p_split):
    """One quantity against p_fp on ``ax``: the clumps as points, its binned ``how`` (mean
    or median) as a line. Returns its positive values below and at or above ``p_split``."""
    y = pd.to_numeric(values, errors="coerce").to_numpy(float)
    ok = np.isfinite(p) & np.isfinite(y) & (y > 0)
    ax.scatter(p[ok], y[ok], s=3, alpha=0.25, color=colour, rasterized=True)
    cx, cy = _binned(p[ok], y[ok], edges, how)
    ax.plot(cx, cy, "o-", color=colour, label=f"{label} (binned {how})")
    return y[ok & (p < p_split)], y[ok & (p >= p_split)]


def plot_flux_vs_pfp(
    phot: pd.DataFrame,
    stem: str | Path,
    *,
    dpi: int = DEFAULTS["dpi"],
    bins: int = 10,
    p_split: float = 0.2,
) -> dict:
    """fig:flux_versus_fpp: flux (left) and flux ratios (right) against the clump's p_fp.

    Points are clumps; lines the binned mean flux / median ratio in ``bins`` bins
    of p_fp. Returns the mean flux (median ratio) below and above ``p_split``
    (the paper: clumps with p_fp < 0.2 are ~1.5 times brighter).
    """
    require(phot, ["p_fp", *(f"flux_{b}" for b in BANDS), *RATIOS], "photometry")
    p = pd.to_numeric(phot["p_fp"], errors="coerce").to_numpy(float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    fig = new_figure(12.0, 4.8, dpi)
    ax_f, ax_r = fig.subplots(1, 2)
    stats: dict[str, Any] = {
        "n_clumps": int(np.isfinite(p).sum()),
        "p_split": p_split,
        "flux": {},
        "ratio": {},
    }
    for b in BANDS:
        y = phot[f"flux_{b}"]
        lo, hi = _scatter_binned(ax_f, p, y, edges, "mean", BAND_COLOUR[b], b, p_split)
        stats["flux"][b] = {
            "mean_low_pfp": float(lo.mean()) if lo.size else None,
            "mean_high_pfp": float(hi.mean()) if hi.size else None,
            "low_over_high": float(lo.mean() / hi.mean()) if lo.size and hi.size else None,
        }
    _plain_log(ax_f, "y")
    ax_f.set_xlim(-0.02, 1.02)
    ax_f.set_xlabel(SYM["p_fp"])
    ax_f.set_ylabel("flux (asinh-scaled like the image)")
    ax_f.legend(fontsize=8)
    colours = dict(zip(RATIOS, ("tab:blue", "tab:orange", "tab:gray"), strict=True))
    for r in RATIOS:
        lo, hi = _scatter_binned(
            ax_r, p, phot[r], edges, "median", colours[r], RATIO_LABEL[r], p_split
        )
        stats["ratio"][r] = {
            "median_low_pfp": float(np.median(lo)) if lo.size else None,
            "median_high_pfp": float(np.median(hi)) if hi.size else None,
        }
    every = pd.concat([pd.to_numeric(phot[r], errors="coerce") for r in RATIOS]).to_numpy(float)
    every = every[np.isfinite(every)]
    if every.size:
        lo, hi = np.quantile(every, [0.01, 0.99])
        ax_r.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    ax_r.set_xlim(-0.02, 1.02)
    ax_r.set_xlabel(SYM["p_fp"])
    ax_r.set_ylabel("flux ratio (larger = bluer)")
    ax_r.legend(fontsize=8)
    save_figure(fig, stem)
    return stats


def plot_flux_truth(phot: pd.DataFrame, stem: str | Path, *, dpi: int = DEFAULTS["dpi"]) -> dict:
    """r-band flux and g/r ratio of the simulated true clumps and of each distractor kind."""
    require(phot, ["source", "flux_r", "ratio_g_r"], "truth photometry")
    sources = sorted(phot["source"].astype(str).unique(), key=lambda s: (s != "clump", s))
    palette = ["tab:orange", "tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:gray"]
    colours = {s: palette[k % len(palette)] for k, s in enumerate(sources)}
    fig = new_figure(10.0, 4.2, dpi)
    ax_f, ax_r = fig.subplots(1, 2)
    groups_f = {s: _positive(phot.loc[phot["source"] == s, "flux_r"]) for s in sources}
    groups_r = {s: _positive(phot.loc[phot["source"] == s, "ratio_g_r"]) for s in sources}
    stats = {
        "flux_r": _hist_pair(
            ax_f, groups_f, colours, "r-band flux (asinh-scaled like the image)", "median"
        ),
        "ratio_g_r": _hist_pair(
            ax_r, groups_r, colours, "flux ratio g / r (larger = bluer)", "median", log=False
        ),
    }
    ax_f.legend(fontsize=8)
    fig.suptitle("Simulated truth: real clumps and distractors as shown to volunteers")
    save_figure(fig, stem)
    return stats


def plot_subject_montage(
    items: Sequence[Mapping[str, Any]],
    stem: str | Path,
    *,
    ncols: int = 4,
    dpi: int = DEFAULTS["dpi"],
) -> dict:
    """Subject images in a grid; each item: ``png`` (path), ``title`` and optionally
    ``clumps`` [(x, y)] (orange circles of radius ``box_side``/2) and ``others``
    [(x, y, kind)] (cyan crosses) in subject px, and ``edge`` (title says EDGE)."""
    from PIL import Image

    n = max(len(items), 1)
    ncols = max(1, min(ncols, n))
    nrows = int(np.ceil(n / ncols))
    fig = new_figure(3.0 * ncols, 3.25 * nrows, dpi)
    axes = np.atleast_1d(fig.subplots(nrows, ncols)).ravel()
    shown = 0
    for ax in axes:
        ax.set_axis_off()
    for ax, item in zip(axes, items, strict=False):
        with Image.open(item["png"]) as im:
            rgb = np.asarray(im.convert("RGB"))
        h, w = rgb.shape[:2]
        ax.imshow(rgb, extent=(0, w, h, 0), interpolation="nearest")
        r = float(item.get("box_side") or 20.0) / 2.0
        for x, y in item.get("clumps", []):
            ax.add_patch(Circle((x, y), r, fill=False, ec=TP_COLOUR, lw=1.0))
        for x, y, _kind in item.get("others", []):
            ax.plot([x], [y], "x", color="cyan", ms=5, mew=1.0)
        title = str(item.get("title", ""))
        if item.get("edge"):
            title += " EDGE"
        ax.set_title(title, fontsize=7)
        shown += 1
    save_figure(fig, stem)
    return {"n_subjects": shown}


def montage_items(
    meta: pd.DataFrame,
    folder: str | Path,
    k: int,
    truth: pd.DataFrame | None = None,
    distractors: pd.DataFrame | None = None,
) -> list[dict]:
    """Up to ``k`` subjects of a cutouts table, evenly spread over those with a true
    clump (all subjects without truth), plus one edge subject if there is one."""
    folder = Path(folder)
    ids = meta["subject_id"].to_numpy()
    if truth is not None and len(truth):
        with_clumps = np.isin(ids, truth["subject_id"].to_numpy())
        pool = ids[with_clumps] if with_clumps.any() else ids
    else:
        pool = ids
    pick = (
        list(pool[np.unique(np.linspace(0, len(pool) - 1, min(k, len(pool))).round().astype(int))])
        if k and len(pool)
        else []
    )
    edge = meta.loc[meta["edge"].astype(bool), "subject_id"].to_numpy() if "edge" in meta else []
    if len(edge) and k and edge[0] not in pick:
        pick = pick[: max(k - 1, 0)] + [edge[0]]
    rows = meta.set_index("subject_id")
    items = []
    for sid in pick:
        r = rows.loc[sid]
        item = {
            "png": folder / r["png"],
            "title": f"{sid}  side {int(r['side_native'])} px\nFWHM {r['fwhm_subject']:.1f} subject px",
            "box_side": float(r["box_side"]),
            "edge": bool(r.get("edge", False)),
        }
        if truth is not None:
            t = truth[truth["subject_id"] == sid]
            item["clumps"] = list(zip(t["x"], t["y"], strict=True))
        if distractors is not None:
            d = distractors[distractors["subject_id"] == sid]
            item["others"] = list(zip(d["x"], d["y"], d["kind"], strict=True))
        items.append(item)
    return items


def plot_demo_montage(
    table: pd.DataFrame,
    field: pd.DataFrame,
    field_dir: str | Path,
    group: pd.DataFrame,
    group_dir: str | Path,
    stem: str | Path,
    *,
    dpi: int = DEFAULTS["dpi"],
) -> dict:
    """The real-SDSS demo's montage (:func:`clumpscout.images.real_demo.real_demo`): every
    subject of the field's and the group's cutouts tables, titled with its target, side and
    PSF FWHM from the demo's ``table`` (the field's rows, then the group's)."""
    items = montage_items(field, field_dir, len(field)) + montage_items(
        group, group_dir, len(group)
    )
    for item, r in zip(items, table.itertuples(index=False), strict=True):
        item["title"] = (
            f"{r.target} {r.subject_id}\nside {r.side_native} px, FWHM {r.fwhm_subject:.1f} subject px"
        )
    return plot_subject_montage(items, stem, ncols=4, dpi=dpi)


#: figure name → (plotting function, photometry table it needs)
FIGURES = {
    "flux_true_false": (plot_flux_true_false, "labels"),
    "flux_vs_pfp": (plot_flux_vs_pfp, "labels"),
    "flux_truth": (plot_flux_truth, "truth"),
}


def build(
    tables: Mapping[str, pd.DataFrame],
    out_dir: str | Path,
    *,
    dpi: int = DEFAULTS["dpi"],
    only=None,
) -> dict:
    """Write every flux figure whose table is given: ``<out_dir>/<name>.{png,pdf,json}``."""
    out = Path(out_dir)
    results = {}
    for name, (fn, table) in FIGURES.items():
        if (only and name not in only) or table not in tables:
            continue
        stats = fn(tables[table], out / name, dpi=dpi)
        write_json({"figure": name, **stats}, out / f"{name}.json")
        results[name] = stats
    return results
