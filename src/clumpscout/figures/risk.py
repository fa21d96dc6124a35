"""§6.5, subject risk and retirement: risk components, clumps per galaxy, retirement
reasons versus n."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    NullLocator,
)

from clumpscout.figures.common import (
    DEFAULTS,
    STATUSES,
    SYM,
    count_mesh,
    figure_settings,
    integer_x_ticks,
    n_edges,
    new_figure,
    no_data,
    nouns,
    ns_and_ref,
    quantiles,
    quiet_colorbar,
    read_stacked,
    require,
    save_figure,
)


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


def _risk_panel(ax, n_of: np.ndarray, y: np.ndarray, ns: Sequence[int]) -> dict:
    """One risk component versus n: subjects per bin on a y axis that is logarithmic
    below 1 and linear above (:class:`LogLinear`; the bins are equal on the axes as
    drawn), red dots = medians. Returns per n the median, mean, share above 1 and count,
    the axis floor, the values drawn at it and the fullest bin (``colour_max``)."""
    out: dict[str, Any] = {"per_n": {}}
    pos = y[y > 0]
    floor = 10.0 ** math.floor(math.log10(np.quantile(pos, 0.01))) if pos.size else 1e-3
    floor = float(min(max(floor, 1e-8), 0.1))
    tr = LogLinear(1.0, floor)
    top = max(float(y.max()), 2.0)
    y_edges = tr.inverse(np.linspace(tr.forward(floor), tr.forward(top), 41))
    ax.set_yscale("function", functions=(tr.forward, tr.inverse))
    counts = count_mesh(ax, n_of, np.clip(y, floor, top), n_edges(ns), y_edges,
                         "subjects per bin")  # fmt: skip
    out["colour_max"] = int(counts.max()) if counts.size else 0
    med = []
    for n in ns:
        yn = y[n_of == n]
        q = quantiles(yn)
        out["per_n"][int(n)] = {
            "median": q["median"],
            "mean": q["mean"],
            "frac_above_1": float((yn > 1).mean()) if yn.size else float("nan"),
            "count": int(yn.size),
        }
        med.append(q["median"])
    ax.plot(ns, np.clip(med, floor, None), "o", color="tab:red", ms=4, label="median")
    ax.axhline(1.0, color="k", ls="--", lw=1)
    n_floor = int((y < floor).sum())
    out["floor"] = floor
    out["n_below_floor"] = n_floor
    if n_floor:  # said above the panel, where it hides no bin
        out["floor_note"] = (
            f"{n_floor} of {y.size} values < {floor:g} (zeros included) drawn at the floor"
        )
    ax.yaxis.set_major_locator(FixedLocator(tr.ticks(top)))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.set_ylim(floor, top)
    ax.set_xlim(min(ns) - 0.5, max(ns) + 0.5)
    ax.legend(loc="upper right", fontsize=8)
    return out


def plot_risk_components(
    subjects: pd.DataFrame,
    labels: pd.DataFrame,
    stem: str | Path,
    *,
    p_fp_cut: float = DEFAULTS["p_fp_cut"],
    dpi: int = DEFAULTS["dpi"],
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
            no_data(ax)
            ax.set_title(label)
            continue
        stats[col] |= _risk_panel(ax, vals["n"].to_numpy(float), vals[col].to_numpy(float), ns)
        note = stats[col].pop("floor_note", "")
        ax.set_title(f"{label}\n{note}" if note else label, fontsize=9 if note else None)
        ax.set_ylabel(label)
    for ax in axes[2:]:
        ax.set_xlabel("n (annotations per subject)")
        integer_x_ticks(ax)
    save_figure(fig, stem)
    return stats


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
    p_fp_cut: float = DEFAULTS["p_fp_cut"],
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """fig:clumps_per_galaxy_filtered: clumps per galaxy vs n (all; p_fp < cut).

    Every subject of the subsample counts (zero-clump galaxies included). Colour =
    number of galaxies; red markers and line = the mean per n. With the generic
    ``wording``, objects per image."""
    w = nouns(wording)
    require(subjects, ["n", "subject_id"], "subjects")
    require(labels, ["n", "subject_id", "p_fp"], "labels")
    ns = sorted(subjects["n"].unique().tolist())
    fig = new_figure(6.5, 8.0, dpi)
    axes = fig.subplots(2, 1, sharex=True)
    stats: dict[str, Any] = {"p_fp_cut": p_fp_cut}
    for ax, (key, cut, title) in zip(
        axes,
        (
            ("all", None, f"all {w['objects']}"),
            ("cut", p_fp_cut, rf"{w['objects']} with {SYM['p_fp']} < {p_fp_cut:g}"),
        ),
        strict=True,
    ):
        cps = clumps_per_subject(subjects, labels, cut)
        stats[key] = {}
        if cps.empty:
            no_data(ax)
            ax.set_title(title)
            continue
        top = int(cps["clumps"].max())
        counts, _, _ = np.histogram2d(
            cps["n"], cps["clumps"], bins=[n_edges(ns), np.arange(-0.5, top + 1.5)]
        )
        c = np.ma.masked_equal(counts, 0)
        mesh = ax.pcolormesh(
            n_edges(ns),
            np.arange(-0.5, top + 1.5),
            c.T,
            norm=LogNorm(vmin=1, vmax=max(c.max(), 1.0001)),
            cmap="viridis",
            rasterized=True,
        )
        quiet_colorbar(fig.colorbar(mesh, ax=ax, label=w["subjects"]))
        means = cps.groupby("n")["clumps"].mean()
        ax.plot(means.index, means.values, "o-", color="tab:red", ms=4, label="mean")
        for n, m in means.items():
            stats[key][int(n)] = {
                "mean": float(m),
                "galaxies": int((cps["n"] == n).sum()),
                "clumps": int(cps.loc[cps["n"] == n, "clumps"].sum()),
            }
        ax.set_ylabel(f"{w['objects']} per {w['subject']}")
        ax.set_title(title)
        ax.legend(loc="upper left", fontsize=8)
    axes[-1].set_xlabel("n (annotations per subject)")
    integer_x_ticks(axes[-1])
    save_figure(fig, stem)
    return stats


def status_fractions(subjects: pd.DataFrame) -> pd.DataFrame:
    """Fraction of subjects per status (decisions.md#retirement) for each n: rows n, columns statuses.

    Unknown status values are counted in an ``other`` column."""
    require(subjects, ["n", "status"], "subjects")
    st = subjects["status"].astype(str).where(subjects["status"].isin(STATUSES), "other")
    tab = pd.crosstab(subjects["n"], st, normalize="index")
    cols = list(STATUSES) + (["other"] if "other" in tab.columns else [])
    return tab.reindex(columns=cols, fill_value=0.0)


#: status -> (line style, legend words)
STATUS_LEGEND = {
    "retired": ("o-", "retired (risk criterion)"),
    "retired_empty": ("s-", "retired, nothing marked"),
    "stale": ("^-", "stale (cycle limit reached)"),
    "unretired": ("v-", "not retired"),
    "other": ("x-", "other status"),
}


def plot_retirement_reasons(
    subjects: pd.DataFrame, stem: str | Path, *, dpi: int = DEFAULTS["dpi"]
) -> dict:
    """fig:retirement_reason_fraction: fraction of subjects per status vs n.

    Statuses of the aggregation contract: retired (risk criterion), retired_empty
    (≥ min volunteers, no clump click), stale (max cycles), unretired. Log y axis so
    that the sub-percent fractions are visible; zero fractions are not drawn."""
    frac = status_fractions(subjects)
    fig = new_figure(6.0, 4.5, dpi)
    ax = fig.subplots()
    for col in frac.columns:
        y = frac[col].where(frac[col] > 0)
        if y.notna().any():
            style, label = STATUS_LEGEND[col]
            ax.plot(frac.index, y, style, ms=4, label=label)
    if frac.empty:
        no_data(ax)
    else:
        ax.set_yscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("n (annotations per subject)")
    integer_x_ticks(ax)
    ax.set_ylabel("fraction of subjects")
    ax.grid(alpha=0.3, which="both")
    save_figure(fig, stem)
    return {
        "fractions": {int(n): {k: float(v) for k, v in r.items()} for n, r in frac.iterrows()},
        "counts": subjects.groupby("n").size().astype(int).to_dict(),
    }


def build_risk(inp, stem, params):
    ns, _ = ns_and_ref(params)
    cfg = figure_settings(params)
    need = ["subject_id", "n_fp", "n_fn", "n_sigma"]
    subj = read_stacked(inp["subjects"], ns, need, "subjects", [])
    lab = read_stacked(inp["labels"], ns, ["subject_id", "p_fp"], "labels", [])
    return plot_risk_components(subj, lab, stem, p_fp_cut=cfg["p_fp_cut"], dpi=cfg["dpi"])


def build_clumps_per_galaxy(inp, stem, params):
    ns, _ = ns_and_ref(params)
    cfg = figure_settings(params)
    subj = read_stacked(inp["subjects"], ns, ["subject_id"], "subjects", [])
    lab = read_stacked(inp["labels"], ns, ["subject_id", "p_fp"], "labels", [])
    return plot_clumps_per_galaxy(
        subj, lab, stem, p_fp_cut=cfg["p_fp_cut"], dpi=cfg["dpi"], wording=params.get("wording")
    )


def build_retirement(inp, stem, params):
    ns, _ = ns_and_ref(params)
    cfg = figure_settings(params)
    subj = read_stacked(inp["subjects"], ns, ["subject_id", "status"], "subjects", [])
    return plot_retirement_reasons(subj, stem, dpi=cfg["dpi"])
