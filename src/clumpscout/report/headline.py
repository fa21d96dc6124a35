"""Headline numbers of the run in the paper's terms (§6).

One long table (``results/headline.csv``), one row per number:

``section, quantity, method, n, subset, value, paper, note``

``method`` names the consensus model or baseline a number belongs to: the
paper's sections below describe the *paper* model (the reproduction; the
paper's values are for it), except ``dataset`` and ``truth`` counts (no method).

- ``dataset``: subjects, annotations (classifications), clump clicks, clicks of
  every task (clicks_all_tasks), volunteers of the full extracted dataset Z
  (paper §6: 85,286 subjects, 1,739,259 annotations, 3,561,454 click locations,
  20,999 volunteers; the paper's click count is compared with clicks_all_tasks);
- ``labels``: clumps and galaxies with ≥ 1 clump at the reference n (paper:
  128,100 clumps in 44,126 galaxies, from Z), and the volunteer activity
  (median subjects per volunteer, fraction under 10);
- ``per_n``: for each subsample Z̃_n the median clump p_fp and p_σ, and the
  fractions of subjects retired / retired_empty / stale / unretired (decisions.md#retirement);
- ``experts``: per n and subset (all, normal) the optimal threshold, optimal C
  and P, max C, max P and C, P at p* = 1 against the expert clicks (§6.3);
- ``truth``: the same against the simulated true clumps, plus the expected
  calibration error (ECE) of p_fp, which the paper could not measure;
- ``baseline``: fractions of subjects where our framework finds more / as
  many / fewer clumps than MeanShift (appendix);
- ``methods_truth`` / ``methods_experts``: both consensus models (``generative``,
  ``paper``) and the three baselines (``single_linkage``, ``dbscan``,
  ``meanshift``) side by side at n = ``baseline.n``: purity and completeness at
  the optimal p* and at p* = 1 (a baseline has no p_fp: both are the same),
  the optimal p*, and the labels kept at p* = 1 and at the optimal p*
  (``n_labels_p1``, ``n_labels_opt``; against the truth over every subject,
  against the experts over the expert subjects), plus the reference count
  (``n_true_clumps`` / ``n_expert_clicks``, method empty);
- ``trends``: each trend §6 describes, checked on our numbers: ``value`` is
  ``agrees``, ``disagrees`` or ``cannot check``; ``paper`` states the trend and
  ``note`` gives our numbers (:func:`trend_rows`). Only for Clump Scout data.

With the generic wording (a project that is not Clump Scout, such as a counting
project: docs/decisions.md#wording-follows-the-data) the ``paper`` column is empty, there
are no trend rows, and the clump / galaxy quantities are named for objects and images
(:data:`GENERIC_NAMES`).

``paper`` holds the value the paper quotes for the same quantity where it
quotes one (text, e.g. "≈0.04"), so the table doubles as the agreement check.
Empty ``n`` / ``subset`` mean "not per n" / "not per subset".
"""

from __future__ import annotations

import argparse
import html
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.config import add_setting
from clumpscout.errors import InputError
from clumpscout.figures import registry
from clumpscout.figures.common import DEFAULTS, read_stacked, read_table, reference_n
from clumpscout.figures.risk import clumps_per_subject
from clumpscout.figures.truth import METHOD_SUMMARY_COLS
from clumpscout.figures.truth import METHODS as FIGURE_METHODS
from clumpscout.io import read_json, write_csv, write_text

log = logging.getLogger(__name__)

COLUMNS = ["section", "quantity", "method", "n", "subset", "value", "paper", "note"]
#: the methods of the side-by-side sections, in display order (those of its figure)
METHODS = tuple(FIGURE_METHODS)
#: quantity -> summary column of the side-by-side sections (clumpscout.evaluation.compare
#: summaries), as its figure reads them
METHOD_QUANTITIES = METHOD_SUMMARY_COLS
STATUSES = ("retired", "retired_empty", "stale", "unretired")

#: what the paper says (§6), by (quantity, n, subset); n / subset None = any (the figure
#: registry holds them, each with the figure that shows it)
PAPER = registry.PAPER

NOTES: dict[str, str] = {
    "subjects": "distinct subjects with ≥ 1 classification",
    "annotations": "distinct classifications (one volunteer inspecting one subject)",
    "clicks": "clump clicks (rows with coordinates)",
    "clicks_all_tasks": "every click of the export, all tasks (bulge clicks of T0 included, as the "
    "paper's 'click locations'): kept + dropped (clicks_report.json)",
    "volunteers": "distinct volunteers (not-logged-in users by session name)",
    "galaxies_with_clumps": "subjects with ≥ 1 label clump at the reference n",
    "clumps": "label clumps at the reference n, any p_fp",
    "true_clumps": "clumps in the simulated universe (truth)",
    "galaxies_with_true_clumps": "simulated galaxies with ≥ 1 true clump",
    "median_subjects_per_volunteer": "at the reference n (volunteers.parquet)",
    "fraction_volunteers_below_10_subjects": "at the reference n",
    "median_p_fp": "median clump p_fp (decisions.md#clump-false-positive-probability)",
    "median_p_sigma": "median clump p_sigma (decisions.md#location-variance)",
    "fraction_retired": "retired by the risk criterion (decisions.md#retirement)",
    "fraction_retired_empty": "retired with no clump click",
    "fraction_retired_any": "retired + retired_empty (the paper's 'retired')",
    "fraction_stale": "stale after the maximum number of cycles",
    "fraction_unretired": "neither retired nor stale",
    "opt_threshold": "p* maximising sqrt(C² + P²)",
    "opt_completeness": "completeness at the optimal p*",
    "opt_purity": "purity at the optimal p*",
    "max_completeness": "largest completeness over p*",
    "max_purity": "largest purity over p*",
    "completeness_p1": "completeness at p* = 1 (every label)",
    "purity_p1": "purity at p* = 1 (every label)",
    "ece": "expected calibration error of p_fp against the truth",
    "fraction_ours_more": "subjects where we find more clumps than MeanShift",
    "fraction_equal": "subjects with as many clumps as MeanShift",
    "fraction_meanshift_more": "subjects where MeanShift finds more clumps",
    "n_labels_p1": "labels kept at p* = 1 (every label) in the scored subjects",
    "n_labels_opt": "labels kept at the optimal p* in the scored subjects",
    "n_true_clumps": "true clumps in the scored subjects (every subject of Z~_n)",
    "n_expert_clicks": "expert clicks in the expert subjects",
}

#: quantity names of the generic wording (a project of objects in images)
GENERIC_NAMES = {
    "clumps": "objects",
    "galaxies_with_clumps": "images_with_objects",
    "true_clumps": "true_objects",
    "galaxies_with_true_clumps": "images_with_true_objects",
    "n_true_clumps": "n_true_objects",
}
#: verdicts of the trend rows
AGREES, DISAGREES, CANNOT_CHECK = "agrees", "disagrees", "cannot check"

SUMMARY_QUANTITIES = (
    "opt_threshold",
    "opt_completeness",
    "opt_purity",
    "max_completeness",
    "max_purity",
    "completeness_p1",
    "purity_p1",
)


def _row(
    section: str,
    quantity: str,
    value: Any,
    n: int | None = None,
    subset: str | None = None,
    method: str | None = None,
):
    paper = ""
    # the paper had no truth to compare with, and no other methods side by side
    if section != "truth" and not section.startswith("methods"):
        keys = [(quantity, n, subset), (quantity, None, subset), (quantity, n, None)]
        keys.append((quantity, None, None))
        paper = next((PAPER[k] for k in keys if k in PAPER), "")
    return {
        "section": section,
        "quantity": quantity,
        "method": method,
        "n": n,
        "subset": subset,
        "value": float(value) if value is not None and not pd.isna(value) else float("nan"),
        "paper": paper,
        "note": NOTES.get(quantity, ""),
    }


def dataset_counts(clicks: pd.DataFrame) -> dict[str, int]:
    """Subjects, annotations, clicks and volunteers of the extracted dataset (clicks.parquet).

    A click is a row with coordinates; a classification that marked nothing has
    one coordinate-less row, so it counts as an annotation but not as a click."""
    for col in ("subject_id", "classification_id", "volunteer", "x"):
        if col not in clicks.columns:
            raise InputError(f"clicks table: missing column {col}")
    return {
        "subjects": int(clicks["subject_id"].nunique()),
        "annotations": int(clicks["classification_id"].nunique()),
        "clicks": int(clicks["x"].notna().sum()),
        "volunteers": int(clicks["volunteer"].nunique()),
    }


def export_click_total(report: Mapping[str, Any]) -> int:
    """Every click of the export, all tasks: the extract report's kept clump clicks plus
    every dropped click by reason (clicks of other tasks, such as the T0 bulge, are one
    reason). The paper's 3,561,454 "click locations" are counted this way."""
    try:
        kept = int(report["clicks_kept"])
        dropped = sum(int(v) for v in (report.get("dropped_clicks") or {}).values())
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"clicks report: no usable clicks_kept / dropped_clicks ({exc})") from None
    return kept + dropped


def label_counts(labels: pd.DataFrame) -> dict[str, int]:
    """Clumps and galaxies (subjects) with at least one clump in a label table."""
    return {
        "clumps": int(len(labels)),
        "galaxies_with_clumps": int(labels["subject_id"].nunique()),
    }


def truth_counts(truth: pd.DataFrame) -> dict[str, int]:
    """True clumps and galaxies with ≥ 1 true clump in the simulated universe."""
    return {
        "true_clumps": int(len(truth)),
        "galaxies_with_true_clumps": int(truth["subject_id"].nunique()),
    }


def volunteer_activity(volunteers: pd.DataFrame) -> dict[str, float]:
    """Median subjects per volunteer and the fraction with fewer than 10 (§6.4)."""
    ns = volunteers["n_subjects"].to_numpy(float)
    ns = ns[ns >= 1]
    if ns.size == 0:
        return {}
    return {
        "median_subjects_per_volunteer": float(np.median(ns)),
        "fraction_volunteers_below_10_subjects": float((ns < 10).mean()),
    }


def per_n_numbers(labels: pd.DataFrame, subjects: pd.DataFrame) -> pd.DataFrame:
    """Per n: median p_fp and p_σ of the clumps and the status fractions (decisions.md#retirement).

    ``labels`` and ``subjects`` are stacked over n (an ``n`` column)."""
    ns = sorted(set(subjects["n"].unique()) | set(labels["n"].unique()))
    med = labels.groupby("n")[["p_fp", "p_sigma"]].median()
    counts = subjects.groupby("n")["status"].value_counts().unstack(fill_value=0)
    counts = counts.reindex(index=ns, columns=list(STATUSES), fill_value=0)
    total = subjects.groupby("n").size().reindex(ns, fill_value=0)
    frac = counts.div(total.replace(0, np.nan), axis=0)
    out = pd.DataFrame(index=pd.Index(ns, name="n"))
    out["median_p_fp"] = med["p_fp"].reindex(ns)
    out["median_p_sigma"] = med["p_sigma"].reindex(ns)
    for s in STATUSES:
        out[f"fraction_{s}"] = frac[s]
    out["fraction_retired_any"] = frac["retired"] + frac["retired_empty"]
    return out.reset_index()


def summary_rows(summary: pd.DataFrame, section: str, method: str | None = None) -> list[dict]:
    """Rows for a compare summary (clumpscout.evaluation.compare columns: n, subset, opt_*, …, ece)."""
    rows = []
    quantities = [q for q in SUMMARY_QUANTITIES if q in summary.columns]
    if "ece" in summary.columns:
        quantities.append("ece")
    if "method" in summary.columns:
        summary = summary[summary["method"].isin(["clumpscout", "ours"])]
    for r in summary.sort_values(["n", "subset"], kind="stable").itertuples(index=False):
        for q in quantities:
            rows.append(_row(section, q, getattr(r, q), int(r.n), str(r.subset), method))
    return rows


def method_rows(summary: pd.DataFrame, reference: str) -> list[dict]:
    """Rows of section ``methods_<reference>``: every method of a side-by-side summary
    (clumpscout.evaluation.compare summary rows tagged ``method`` and ``n``), see the module docstring."""
    for col in ("method", "n", "subset"):
        if col not in summary.columns:
            raise InputError(f"{reference} method summary: missing column {col}")
    section = f"methods_{reference}"
    order = {m: i for i, m in enumerate(METHODS)}
    summary = summary.assign(_o=summary["method"].map(order).fillna(len(order)))
    summary = summary.sort_values(["n", "subset", "_o"], kind="stable")
    rows = []
    for r in summary.to_dict(orient="records"):
        n, subset, method = int(r["n"]), str(r["subset"]), str(r["method"])
        for q, col in METHOD_QUANTITIES.items():
            rows.append(_row(section, q, r.get(col), n, subset, method))
        tp, fp = r.get("opt_n_tp"), r.get("opt_n_fp")
        kept = float(tp) + float(fp) if tp is not None and not pd.isna(tp) else None
        rows.append(_row(section, "n_labels_opt", kept, n, subset, method))
    ref_q = "n_true_clumps" if reference == "truth" else "n_expert_clicks"
    if "n_points" in summary.columns:
        first = summary.drop_duplicates(["n", "subset"])
        for r in first.to_dict(orient="records"):
            rows.append(_row(section, ref_q, r["n_points"], int(r["n"]), str(r["subset"])))
    return rows


def baseline_fractions(count_difference: pd.DataFrame) -> dict[str, float]:
    """Fractions of subjects where ours − MeanShift is > 0, = 0, < 0 (appendix)."""
    col = "diff_meanshift" if "diff_meanshift" in count_difference else "difference"
    d = count_difference[col].dropna().to_numpy()
    if d.size == 0:
        return {}
    return {
        "fraction_ours_more": float((d > 0).mean()),
        "fraction_equal": float((d == 0).mean()),
        "fraction_meanshift_more": float((d < 0).mean()),
    }


def headline_table(
    *,
    clicks: pd.DataFrame,
    labels: pd.DataFrame,
    subjects: pd.DataFrame,
    n_ref: int,
    volunteers: pd.DataFrame | None = None,
    experts_summary: pd.DataFrame | None = None,
    truth_summary: pd.DataFrame | None = None,
    truth: pd.DataFrame | None = None,
    count_difference: pd.DataFrame | None = None,
    clicks_report: Mapping[str, Any] | None = None,
    methods_truth: pd.DataFrame | None = None,
    methods_experts: pd.DataFrame | None = None,
    model: str = "paper",
    wording: str = "clump_scout",
) -> pd.DataFrame:
    """The headline numbers as a long table (see the module docstring).

    ``labels``, ``subjects``, ``volunteers``, ``experts_summary``, ``truth_summary`` and
    ``count_difference`` are those of consensus model ``model`` (the paper's sections);
    ``methods_truth`` / ``methods_experts`` the side-by-side summaries of every method.
    ``wording``: ``clump_scout`` or ``generic`` (:func:`generic`)."""
    m = model
    rows = [_row("dataset", q, v) for q, v in dataset_counts(clicks).items()]
    if clicks_report is not None:
        rows.append(_row("dataset", "clicks_all_tasks", export_click_total(clicks_report)))
    ref = labels[labels["n"] == n_ref]
    rows += [_row("labels", q, v, n_ref, method=m) for q, v in label_counts(ref).items()]
    if volunteers is not None:
        act = volunteer_activity(volunteers)
        rows += [_row("labels", q, v, n_ref, method=m) for q, v in act.items()]
    if truth is not None:
        rows += [_row("truth", q, v) for q, v in truth_counts(truth).items()]
    per_n = per_n_numbers(labels, subjects)
    for r in per_n.to_dict(orient="records"):
        n = int(r.pop("n"))
        rows += [_row("per_n", q, v, n, method=m) for q, v in r.items()]
    if experts_summary is not None:
        rows += summary_rows(experts_summary, "experts", m)
    if truth_summary is not None:
        rows += summary_rows(truth_summary, "truth", m)
    if count_difference is not None:
        fr = baseline_fractions(count_difference)
        rows += [_row("baseline", q, v, method=m) for q, v in fr.items()]
    if methods_truth is not None:
        rows += method_rows(methods_truth, "truth")
    if methods_experts is not None:
        rows += method_rows(methods_experts, "experts")
    if wording == "clump_scout":
        rows += trend_rows(pd.DataFrame(rows, columns=COLUMNS), ref, labels, subjects)
    out = pd.DataFrame(rows, columns=COLUMNS)
    out["n"] = out["n"].astype("Int64")
    return out if wording == "clump_scout" else generic(out)


def _generic_text(text: str) -> str:
    for old, new in (("clump", "object"), ("galaxies", "images"), ("galaxy", "image")):
        text = text.replace(old, new)
    return text


def generic(table: pd.DataFrame) -> pd.DataFrame:
    """The table in a generic project's words: objects per image rather than clumps per
    galaxy (:data:`GENERIC_NAMES`), and no paper values (its data are not Clump Scout's)."""
    out = table.copy()
    out["quantity"] = out["quantity"].map(lambda q: GENERIC_NAMES.get(q, q))
    out["note"] = out["note"].map(_generic_text)
    out["paper"] = ""
    return out


# ------------------------------------------------------------------ §6 trends


def _series(table: pd.DataFrame, section: str, quantity: str, subset=None) -> pd.Series:
    sel = (table["section"] == section) & (table["quantity"] == quantity) & table["n"].notna()
    sel &= table["subset"].isna() if subset is None else table["subset"].eq(subset)
    t = table[sel]
    return pd.Series(t["value"].to_numpy(float), index=t["n"].astype(int).to_numpy()).sort_index()


def _scalar(table: pd.DataFrame, section: str, quantity: str) -> float:
    t = table[(table["section"] == section) & (table["quantity"] == quantity)]
    return float(t["value"].iloc[0]) if len(t) else float("nan")


def _trend(quantity: str, ok: bool | None, paper: str, note: str) -> dict:
    return {
        "section": "trends",
        "quantity": quantity,
        "method": None,
        "n": None,
        "subset": None,
        "value": CANNOT_CHECK if ok is None else (AGREES if ok else DISAGREES),
        "paper": paper,
        "note": note,
    }


def _ends_note(v: pd.Series) -> str:
    return f"{v.iloc[0]:.3g} (n={v.index[0]}) → {v.iloc[-1]:.3g} (n={v.index[-1]})"


def _monotone_down(v: pd.Series) -> bool | None:
    v = v.dropna()
    return None if len(v) < 2 else bool((np.diff(v.to_numpy()) < 0).all())


def _rank_corr(v: pd.Series) -> float:
    from scipy.stats import spearmanr

    v = v.dropna()
    if len(v) < 2 or v.nunique() < 2:
        return float("nan")
    return float(spearmanr(v.index.to_numpy(), v.to_numpy()).statistic)


def trend_rows(
    table: pd.DataFrame,
    labels_ref: pd.DataFrame | None = None,
    labels: pd.DataFrame | None = None,
    subjects: pd.DataFrame | None = None,
) -> list[dict]:
    """Check the trends of §6 on our numbers (rows of section ``trends``).

    - median p_fp and median p_σ fall monotonically with n (fig. clump_fpp_dist,
      clump_variance_dist);
    - p_fp is bimodal at the reference n: ≥ 80 % of clumps outside [0.2, 0.8] *and*
      ≥ 2 % above 0.8 (the paper: ≈ 90 % outside, both modes populated);
    - > 90 % of subjects retire for every n; 5-12 % stale (paper 7-9 %); < 1 % unretired;
    - against the experts (all clumps) the optimal completeness rises and the optimal
      purity falls with n (Spearman rank correlation with n > 0, < 0);
    - at the reference n and p* = 1 the normal subsets are more complete and less
      pure than all clumps;
    - our framework finds more clumps than MeanShift for the majority of subjects;
    - from the stacked ``labels`` and ``subjects`` (with ``n``): the risk and
      clumps-per-galaxy trends of :func:`risk_trend_rows`."""
    rows = []
    for q, name in (("median_p_fp", "p_fp"), ("median_p_sigma", "p_σ")):
        v = _series(table, "per_n", q)
        paper = f"median {name} falls monotonically with n"
        rows.append(
            _trend(f"{q}_falls_with_n", _monotone_down(v), paper, _ends_note(v) if len(v) else "")
        )
    if labels_ref is not None and len(labels_ref):
        p = labels_ref["p_fp"].to_numpy(float)
        outside, high = float(((p < 0.2) | (p > 0.8)).mean()), float((p > 0.8).mean())
        ok = outside >= 0.8 and high >= 0.02
        note = f"{100 * outside:.1f}% outside [0.2, 0.8], {100 * high:.1f}% above 0.8"
        rows.append(
            _trend("p_fp_bimodal", ok, "≈90% of clumps have p_fp < 0.2 or > 0.8 (two modes)", note)
        )
    retired = _series(table, "per_n", "fraction_retired_any")
    stale = _series(table, "per_n", "fraction_stale")
    unretired = _series(table, "per_n", "fraction_unretired")
    if len(retired):
        rows.append(_trend("retired_above_90pc", bool(retired.min() > 0.9), "> 90% retired for every n",
                           f"min {100 * retired.min():.1f}% (n={retired.idxmin()})"))  # fmt: skip
        rows.append(_trend("stale_7_to_9pc", bool(stale.between(0.05, 0.12).all()),
                           "≈7-9% stale for every n (checked: 5-12%)",
                           f"{100 * stale.min():.1f}% to {100 * stale.max():.1f}%"))  # fmt: skip
        rows.append(_trend("unretired_below_1pc", bool(unretired.max() < 0.01), "< 1% unretired for every n",
                           f"max {100 * unretired.max():.2f}% (n={unretired.idxmax()})"))  # fmt: skip
    c = _series(table, "experts", "opt_completeness", "all")
    p = _series(table, "experts", "opt_purity", "all")
    if len(c) >= 2:
        rc, rp = _rank_corr(c), _rank_corr(p)
        rows.append(_trend("optimal_completeness_rises_with_n", None if np.isnan(rc) else rc > 0,
                           "optimal completeness rises with n (experts, all clumps)",
                           f"{_ends_note(c)}; rank correlation {rc:.2f}"))  # fmt: skip
        rows.append(_trend("optimal_purity_falls_with_n", None if np.isnan(rp) else rp < 0,
                           "optimal purity falls with n (experts, all clumps)",
                           f"{_ends_note(p)}; rank correlation {rp:.2f}"))  # fmt: skip
    ca, cn = (
        _series(table, "experts", "completeness_p1", "all"),
        _series(table, "experts", "completeness_p1", "normal"),
    )
    pa, pn = (
        _series(table, "experts", "purity_p1", "all"),
        _series(table, "experts", "purity_p1", "normal"),
    )
    if len(ca) and len(cn):
        n = int(ca.index.max())
        ok = bool(cn.get(n, np.nan) > ca[n] and pn.get(n, np.nan) < pa[n])
        note = f"n={n}, p*=1: C {ca[n]:.3g} (all) vs {cn.get(n, np.nan):.3g} (normal); P {pa[n]:.3g} vs {pn.get(n, np.nan):.3g}"
        rows.append(_trend("normal_more_complete_less_pure", ok,
                           "normal subsets: higher completeness, lower purity than all clumps", note))  # fmt: skip
    more = _scalar(table, "baseline", "fraction_ours_more")
    if not np.isnan(more):
        less = _scalar(table, "baseline", "fraction_meanshift_more")
        rows.append(_trend("ours_more_than_meanshift", more > 0.5,
                           "our framework finds more clumps than MeanShift for most subjects",
                           f"ours more for {100 * more:.1f}%, MeanShift more for {100 * less:.1f}%"))  # fmt: skip
    if labels is not None and subjects is not None:
        rows += risk_trend_rows(labels, subjects)
    return rows


def _share_above_1(subjects: pd.DataFrame, col: str) -> pd.Series:
    """Per n, the share of subjects with ``col`` > 1 (undefined values count as not above)."""
    above = subjects[col].to_numpy(float) > 1.0
    return pd.Series(above, index=subjects["n"].astype(int).to_numpy()).groupby(level=0).mean()


def risk_trend_rows(
    labels: pd.DataFrame, subjects: pd.DataFrame, p_fp_cut: float = DEFAULTS["p_fp_cut"]
) -> list[dict]:
    """The §6.5 trends of the subject risk and of the clumps per galaxy (stacked over n).

    - N_fp > 1 for ≈8% of subjects at n = 20 (peak ≈10% at n = 15): checked 6-12% at
      the largest n;
    - the share of subjects with N_fn > 1 rises with n (Spearman rank correlation
      with n > 0) to ≈2%: checked 1-3% at the largest n;
    - clumps per galaxy with p_fp < ``p_fp_cut`` (every subject, zeros included) grow by
      ≈0.5 from n = 7 to n = 20: checked 0.3-0.7.

    Shares are over every subject of Z̃_n; a row is left out when its columns (n_fp,
    n_fn) or its n values are absent."""
    rows = []
    if "n_fp" in subjects.columns and len(subjects):
        fp = _share_above_1(subjects, "n_fp")
        n = int(fp.index.max())
        peak = int(fp.idxmax())
        note = f"{100 * fp[n]:.1f}% (n={n}); largest {100 * fp[peak]:.1f}% (n={peak})"
        rows.append(_trend("n_fp_above_1_8_to_10pc", bool(0.06 <= fp[n] <= 0.12),
                           "N_fp > 1 for ≈8% of subjects at n = 20, ≈10% at n = 15 "
                           "(checked: 6-12% at the largest n)", note))  # fmt: skip
    if "n_fn" in subjects.columns and len(subjects):
        fn = _share_above_1(subjects, "n_fn")
        n = int(fn.index.max())
        rc = _rank_corr(fn)
        ok = None if np.isnan(rc) else bool(rc > 0 and 0.01 <= fn[n] <= 0.03)
        note = f"{_ends_note(100 * fn)} (%); rank correlation {rc:.2f}"
        rows.append(_trend("n_fn_above_1_rises_to_2pc", ok,
                           "share of subjects with N_fn > 1 rises with n to ≈2% "
                           "(checked: rank correlation > 0, 1-3% at the largest n)", note))  # fmt: skip
    ns = set(subjects["n"].astype(int)) if len(subjects) else set()
    if {7, 20} <= ns:
        both = subjects[subjects["n"].isin([7, 20])]
        cps = clumps_per_subject(both, labels[labels["n"].isin([7, 20])], p_fp_cut)
        mean = cps.groupby("n")["clumps"].mean()
        gain = float(mean[20] - mean[7])
        note = f"{mean[7]:.3g} (n=7) → {mean[20]:.3g} (n=20): {gain:+.3g}"
        rows.append(_trend("clumps_per_galaxy_gain_7_to_20", bool(0.3 <= gain <= 0.7),
                           f"≈0.5 more clumps with p_fp < {p_fp_cut:g} per galaxy from n = 7 "
                           "to 20 (checked: 0.3-0.7)", note))  # fmt: skip
    return rows


# ------------------------------------------------------------------ report rendering


def _fmt(v: float) -> str:
    if pd.isna(v):
        return "–"
    if float(v).is_integer() and abs(v) >= 1:
        return f"{int(v):,}"
    return f"{v:.3g}"


def _verdict(v: str) -> str:
    return f"<b>{v}</b>" if v == DISAGREES else html.escape(str(v))


def per_n_wide(table: pd.DataFrame) -> pd.DataFrame:
    """Per-n rows as one row per n and one column per quantity (subset appended)."""
    t = table[table["n"].notna() & table["section"].isin(["per_n", "experts", "truth"])].copy()
    if t.empty:
        return pd.DataFrame()
    t["value"] = t["value"].astype(float)
    t["column"] = np.where(
        t["subset"].notna(),
        t["section"] + " " + t["quantity"] + " (" + t["subset"].fillna("") + ")",
        t["quantity"],
    )
    order = list(dict.fromkeys(t["column"]))
    return t.pivot_table(index="n", columns="column", values="value", aggfunc="first")[order]


def methods_wide(table: pd.DataFrame, subset: str = "all") -> pd.DataFrame:
    """The side-by-side sections as one row per method (display order) and one column
    per reference and quantity, e.g. ``truth opt_purity``."""
    t = table[table["section"].str.startswith("methods_") & table["method"].notna()]
    t = t[t["subset"] == subset]
    if t.empty:
        return pd.DataFrame()
    t = t.assign(
        value=t["value"].astype(float),
        column=t["section"].str.removeprefix("methods_") + " " + t["quantity"],
    )
    order = list(dict.fromkeys(t["column"]))
    wide = t.pivot_table(index="method", columns="column", values="value", aggfunc="first")
    methods = [m for m in METHODS if m in wide.index]
    methods += sorted(set(wide.index) - set(methods))
    return wide.loc[methods, order]


def to_html(table: pd.DataFrame, title: str = "Headline numbers") -> str:
    """A self-contained HTML page: the global numbers, the methods side by side and a
    per-n table."""
    esc = html.escape
    is_methods = table["section"].str.startswith("methods_")
    glob = table[(table["n"].isna() | table["section"].isin(["labels"])) & ~is_methods]
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;font-size:13px}"
        "table{border-collapse:collapse;margin-bottom:1.5em}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}"
        "th{background:#eee}td.l{text-align:left}</style></head><body>",
        f"<h2>{esc(title)}</h2><table><tr><th>section</th><th>quantity</th><th>n</th>"
        "<th>ours</th><th>paper</th><th>meaning</th></tr>",
    ]
    for r in glob.itertuples(index=False):
        n = "" if pd.isna(r.n) else str(int(r.n))
        parts.append(
            f"<tr><td class='l'>{esc(r.section)}</td><td class='l'>{esc(r.quantity)}</td>"
            f"<td>{n}</td><td>{_verdict(r.value) if r.section == 'trends' else _fmt(r.value)}</td>"
            f"<td>{esc(str(r.paper))}</td>"
            f"<td class='l'>{esc(str(r.note))}</td></tr>"
        )
    parts.append("</table>")
    side = methods_wide(table)
    if not side.empty:
        ns = table.loc[is_methods, "n"].dropna().unique()
        n_txt = f" (n = {int(ns[0])})" if len(ns) == 1 else ""
        refs = table.loc[is_methods & table["method"].isna()]
        parts.append(
            f"<h3>Both models and the baselines side by side{n_txt}, all clumps</h3>"
            "<p>optimal p* = the p_fp threshold maximising √(C² + P²); a baseline keeps every "
            "label at every p*. "
            + "; ".join(
                f"{esc(str(r.section).removeprefix('methods_'))}: {esc(r.quantity)} = {_fmt(r.value)}"
                for r in refs[refs["subset"] == "all"].itertuples(index=False)
            )
            + "</p><table><tr><th>method</th>"
        )
        parts += [f"<th>{esc(c)}</th>" for c in side.columns]
        parts.append("</tr>")
        for method, r in side.iterrows():
            parts.append(
                f"<tr><th>{esc(str(method))}</th>"
                + "".join(f"<td>{_fmt(v)}</td>" for v in r)
                + "</tr>"
            )
        parts.append("</table>")
    wide = per_n_wide(table)
    if not wide.empty:
        parts.append("<h3>Per number of annotations per subject n</h3><table><tr><th>n</th>")
        parts += [f"<th>{esc(c)}</th>" for c in wide.columns]
        parts.append("</tr>")
        for n, r in wide.iterrows():
            parts.append(
                f"<tr><th>{int(n)}</th>" + "".join(f"<td>{_fmt(v)}</td>" for v in r) + "</tr>"
            )
        parts.append("</table>")
        quoted = table[(table["paper"] != "") & table["n"].notna()]
        if len(quoted):
            parts.append("<h3>Per-n values the paper quotes</h3><table><tr><th>quantity</th>")
            parts.append("<th>n</th><th>subset</th><th>ours</th><th>paper</th></tr>")
            for r in quoted.itertuples(index=False):
                sub = "" if pd.isna(r.subset) else esc(str(r.subset))
                parts.append(
                    f"<tr><td class='l'>{esc(r.section)} {esc(r.quantity)}</td><td>{int(r.n)}</td>"
                    f"<td>{sub}</td><td>{_fmt(r.value)}</td><td>{esc(str(r.paper))}</td></tr>"
                )
            parts.append("</table>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


# ------------------------------------------------------------------ files


def _read(path: str | Path | None, what: str, columns: Sequence[str] | None = None):
    if not path:
        return None
    return read_table(path, columns or [], what, None)


def build(
    inputs: Mapping[str, Any], out_csv: str | Path, out_html: str | Path | None, params
) -> pd.DataFrame:
    """Read the workflow files, compute the table, write CSV (+ HTML)."""
    ns = [int(n) for n in params["ns"]]
    n_ref = reference_n(ns, (params.get("figures") or {}).get("n_ref"))
    clicks = read_table(
        inputs["clicks"], ["subject_id", "classification_id", "volunteer", "x"], "clicks", []
    )
    labels = read_stacked(inputs["labels"], ns, ["subject_id", "p_fp", "p_sigma"], "labels")
    subjects = read_stacked(inputs["subjects"], ns, ["subject_id", "status"], "subjects")
    table = headline_table(
        clicks=clicks,
        labels=labels,
        subjects=subjects,
        n_ref=n_ref,
        volunteers=_read(inputs.get("volunteers"), "volunteers", ["n_subjects"]),
        experts_summary=_read(inputs.get("experts_summary"), "experts summary", ["n", "subset"]),
        truth_summary=_read(inputs.get("truth_summary"), "truth summary", ["n", "subset"]),
        truth=_read(inputs.get("truth"), "truth clumps", ["subject_id"]),
        count_difference=_read(inputs.get("count_difference"), "count difference", ["subject_id"]),
        clicks_report=read_json(inputs["clicks_report"]) if inputs.get("clicks_report") else None,
        methods_truth=_read(inputs.get("methods_truth"), "truth method summary", ["method", "n"]),
        methods_experts=_read(
            inputs.get("methods_experts"), "experts method summary", ["method", "n"]
        ),
        model=str(params.get("model", "paper")),
        wording=str(params.get("wording", "clump_scout")),
    )
    write_csv(table, out_csv)
    if out_html:
        write_text(to_html(table), out_html)
    log.info("%d headline numbers written to %s", len(table), out_csv)
    return table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", required=True, help="results folder of a workflow run")
    add_setting(parser, "subsample.n", required=True, note="here those of the run")
    add_setting(parser, "figures.n_ref")
    parser.add_argument("--out", required=True, help="headline CSV")
    parser.add_argument("--html", default=None, help="also write this HTML table")
    parser.add_argument(
        "--model",
        choices=("paper", "generative"),
        default="paper",
        help="consensus model of the paper's sections (results/aggregate/<model>/)",
    )


def run(args: argparse.Namespace) -> int:
    res = Path(args.results)
    ns = sorted(args.n)
    n_ref = reference_n(ns, args.n_ref)

    def opt(p: Path):
        return p if p.exists() else None

    agg, cmp_ = res / "aggregate" / args.model, res / "compare" / args.model
    inputs = {
        "clicks": res / "clicks" / "clicks.parquet",
        "labels": [agg / f"n{n}" / "labels.parquet" for n in ns],
        "subjects": [agg / f"n{n}" / "subjects.parquet" for n in ns],
        "volunteers": opt(agg / f"n{n_ref}" / "volunteers.parquet"),
        "experts_summary": opt(cmp_ / "experts_summary.csv"),
        "truth_summary": opt(cmp_ / "truth_summary.csv"),
        "truth": opt(res / "universe" / "truth_clumps.csv"),
        "count_difference": opt(res / "baseline" / "count_difference.csv"),
        "clicks_report": opt(res / "clicks" / "clicks_report.json"),
        "methods_truth": opt(res / "baseline" / "truth_summary.csv"),
        "methods_experts": opt(res / "baseline" / "experts_summary.csv"),
    }
    if not inputs["clicks"].exists():
        raise InputError("clicks table not found", path=inputs["clicks"])
    params = {"ns": ns, "figures": {"n_ref": n_ref}, "model": args.model}
    build(inputs, args.out, args.html, params)
    return 0
