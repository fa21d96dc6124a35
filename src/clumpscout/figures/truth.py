"""Not in the paper: p_fp calibration against the simulated truth, and both consensus
models with the three baselines side by side."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.errors import InputError
from clumpscout.figures.common import (
    DEFAULTS,
    figure_settings,
    integer_x_ticks,
    new_figure,
    no_data,
    nouns,
    ns_and_ref,
    read_stacked,
    read_table,
    reference_n,
    require,
    save_figure,
)

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
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
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
    objects = nouns(wording)["objects"]
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
        ax.set_title(f"{subset} {objects} vs {who}" + (f", n = {ns[0]}" if len(ns) == 1 else ""))
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
        ax.axhline(n_true, color="k", ls="--", lw=1.0, label=f"true {objects}")
    ax.set_xticks(x, [METHODS.get(m, (m, ""))[0] for m in methods], rotation=30, ha="right")
    ax.set_ylabel(f"label {objects}")
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


def expected_calibration_error(table: pd.DataFrame) -> float:
    """ECE = Σ_b (n_b / N) |frac_false_b − mean_p_fp_b| over the non-empty bins."""
    t = table[table["n_labels"] > 0]
    total = t["n_labels"].sum()
    if not total:
        return float("nan")
    return float((t["n_labels"] * (t["frac_false"] - t["mean_p_fp"]).abs()).sum() / total)


def merge_sparse_bins(table: pd.DataFrame, min_labels: int) -> pd.DataFrame:
    """Reliability bins of one (n, subset), neighbours merged until each holds at least
    ``min_labels`` label clumps (a short remainder joins the last full bin); empty bins
    are dropped. A merged bin's mean p_fp is the count-weighted mean, its fraction
    false the pooled one and ``frac_false_se`` the binomial standard error
    sqrt(f (1 − f) / n). Fewer than ``min_labels`` labels in all: one bin."""
    t = table[table["n_labels"] > 0]
    if "bin_lo" in t.columns:
        t = t.sort_values("bin_lo", kind="stable")
    groups: list[list[int]] = []
    count = 0
    for i, n_lab in zip(t.index, t["n_labels"], strict=True):
        if not groups or count >= min_labels:
            groups.append([])
            count = 0
        groups[-1].append(i)
        count += int(n_lab)
    if len(groups) > 1 and count < min_labels:
        last = groups.pop()
        groups[-1] += last
    rows = []
    for g in groups:
        b = t.loc[g]
        n_lab = int(b["n_labels"].sum())
        n_false = float((b["frac_false"] * b["n_labels"]).sum())
        f = n_false / n_lab
        rows.append(
            {
                "bin_lo": float(b["bin_lo"].min()) if "bin_lo" in b else float("nan"),
                "bin_hi": float(b["bin_hi"].max()) if "bin_hi" in b else float("nan"),
                "n_labels": n_lab,
                "mean_p_fp": float((b["mean_p_fp"] * b["n_labels"]).sum() / n_lab),
                "frac_false": f,
                "frac_false_se": float(np.sqrt(f * (1.0 - f) / n_lab)),
            }
        )
    cols = ["bin_lo", "bin_hi", "n_labels", "mean_p_fp", "frac_false", "frac_false_se"]
    return pd.DataFrame(rows, columns=cols)


def reliability_panel(ax, ref: pd.DataFrame, k: int, label: str) -> None:
    """One subset's merged bins: fraction truly false with its standard error against
    the mean p_fp, each point labelled with its number of label clumps."""
    x = ref["mean_p_fp"].to_numpy(float) + 0.004 * k
    y = ref["frac_false"].to_numpy(float)
    bars = ax.errorbar(x, y, yerr=ref["frac_false_se"], fmt="o", ms=4, capsize=2, label=label)
    for xi, yi, n_lab in zip(x, y, ref["n_labels"], strict=True):
        ax.annotate(f"{int(n_lab)}", (xi, yi), xytext=(4, 4 - 12 * k), textcoords="offset points",
                    fontsize=6, color=bars[0].get_color())  # fmt: skip


def plot_calibration(
    calibration: pd.DataFrame,
    stem: str | Path,
    *,
    n_ref: int | None = DEFAULTS["n_ref"],
    min_labels: int = DEFAULTS["calibration_min_labels"],
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """p_fp against the simulated truth (no counterpart in the paper).

    ``calibration``: clumpscout.evaluation.compare's stacked reliability table (n, subset,
    bin_lo, bin_hi, n_labels, mean_p_fp, frac_false, frac_false_se). Left: the
    fraction of label clumps that are truly false vs their mean p_fp at n_ref, in bins
    of at least ``min_labels`` clumps (:func:`merge_sparse_bins`: a bin of a few clumps
    is noise, not calibration), with standard errors and counts (a calibrated p_fp lies
    on the diagonal). Right: the expected calibration error per n and subset, from the
    table's own bins."""
    need = ["n", "subset", "n_labels", "mean_p_fp", "frac_false"]
    require(calibration, need, "calibration")
    objects = nouns(wording)["objects"]
    ns = sorted(calibration["n"].unique().tolist())
    nr = reference_n(ns, n_ref)
    fig = new_figure(11.0, 4.5, dpi)
    ax_l, ax_r = fig.subplots(1, 2)
    ax_l.plot([0, 1], [0, 1], ":", color="0.5", lw=1)
    stats: dict[str, Any] = {"n_ref": nr, "min_labels": int(min_labels), "ece": {}, "bins": {}}
    subsets = list(dict.fromkeys(calibration["subset"]))
    for k, subset in enumerate(subsets):
        sub = calibration[calibration["subset"] == subset]
        eces = {int(n): expected_calibration_error(g) for n, g in sub.groupby("n")}
        stats["ece"][subset] = eces
        name = f"{subset} {objects}"
        ax_r.plot(list(eces), list(eces.values()), "o-", ms=4, label=name)
        ref = merge_sparse_bins(sub[sub["n"] == nr], int(min_labels))
        stats["bins"][subset] = ref.to_dict(orient="records")
        reliability_panel(ax_l, ref, k, f"{name}: ECE {eces.get(nr, float('nan')):.3f}")
    if not subsets:
        no_data(ax_l)
        no_data(ax_r)
    else:
        ax_l.legend(fontsize=8, loc="upper left")
        ax_r.legend(fontsize=8)
    ax_l.set_xlim(0, 1)
    ax_l.set_ylim(0, 1)
    ax_l.set_xlabel(r"mean $p^{\mathrm{fp}}_{l}$ in bin")
    ax_l.set_ylabel("fraction truly false")
    ax_l.set_title(f"n = {nr}; bins of ≥ {min_labels} {objects} (numbers: {objects} per bin)",
                   fontsize=9)  # fmt: skip
    ax_r.set_xlabel("n (annotations per subject)")
    integer_x_ticks(ax_r)
    ax_r.set_ylabel("expected calibration error")
    ax_r.set_ylim(bottom=0)
    save_figure(fig, stem)
    return stats


def build_calibration(inp, stem, params):
    ns, nr = ns_and_ref(params)
    cfg = figure_settings(params)
    need = ["subset", "n_labels", "mean_p_fp", "frac_false"]
    opt = ["frac_false_se", "bin_lo", "bin_hi"]
    cal = read_stacked(inp["calibration"], ns, need, "calibration", opt)
    return plot_calibration(
        cal,
        stem,
        n_ref=nr,
        min_labels=int(cfg["calibration_min_labels"]),
        dpi=cfg["dpi"],
        wording=params.get("wording"),
    )


def build_method_comparison(inp, stem, params):
    cfg = figure_settings(params)
    curves, summaries = {}, {}
    for ref in ("truth", "experts"):
        if inp.get(f"{ref}_summary"):
            summaries[ref] = read_table(
                inp[f"{ref}_summary"], ["method", "n", "subset"], f"{ref} method summary"
            )
        if inp.get(f"{ref}_curves"):
            need = ["method", "subset", "threshold", "completeness", "purity"]
            curves[ref] = read_table(inp[f"{ref}_curves"], need, f"{ref} method curves", [])
    return plot_method_comparison(
        curves, summaries, stem, dpi=cfg["dpi"], wording=params.get("wording")
    )
