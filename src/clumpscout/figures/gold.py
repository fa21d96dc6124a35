"""The default model against the project's gold standard (no counterpart in the paper).

Both figures read the default model's outputs at the baseline's n, in which every gold
subject's numbers are cross-fitted (docs/decisions.md#gold-standard): a gold subject's p_fp
and expected count come from a map fitted without its own gold, so these figures show what
the calibration does on subjects it has not seen.

* :func:`plot_gold_reliability`: the reliability diagram of p_fp on the gold subjects
  (fraction of labels the experts do not count against the mean p_fp, bins of at least
  ``calibration_min_labels`` labels) and the same for the model's own ``p_empty``;
* :func:`plot_gold_counts`: the expected count per gold subject (with the count range
  ``count_low``-``count_high``) against the experts' count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.figures.common import (
    DEFAULTS,
    figure_settings,
    new_figure,
    no_data,
    nouns,
    read_table,
    save_figure,
)
from clumpscout.figures.truth import merge_sparse_bins, reliability_panel
from clumpscout.io import atomic_path, write_json, write_text
from clumpscout.metrics.reliability import calibration


def _reliability(p: np.ndarray, false: np.ndarray, min_labels: int) -> tuple[pd.DataFrame, float]:
    table, ece = calibration(p, false, 10)
    return merge_sparse_bins(table, min_labels), ece


def plot_gold_reliability(
    labels: pd.DataFrame, stem: str | Path, *, min_labels: int = DEFAULTS["calibration_min_labels"], dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:  # fmt: skip
    """Reliability of the calibrated p_fp and of p_empty on the gold subjects (module doc)."""
    objects = nouns(wording)["objects"]
    gold = labels.loc[labels["gold_real"].notna()] if "gold_real" in labels else labels.iloc[:0]
    fig = new_figure(6.0, 4.6, dpi)
    ax = fig.subplots(1, 1)
    ax.plot([0, 1], [0, 1], ":", color="0.5", lw=1)
    stats: dict[str, Any] = {"labels": int(len(gold)), "ece": {}, "bins": {}}
    if not len(gold):
        no_data(ax, "no gold subjects with expert marks")
    else:
        false = gold["gold_real"].to_numpy() < 0.5
        for k, (col, name) in enumerate(
            (("p_fp", "p_fp (calibrated, cross-fitted)"), ("p_empty", "p_empty (the model's own)"))
        ):
            if col not in gold:
                continue
            bins, ece = _reliability(gold[col].to_numpy(dtype=float), false, int(min_labels))
            stats["ece"][col] = ece
            stats["bins"][col] = bins.to_dict(orient="records")
            reliability_panel(ax, bins, k, f"{name}: ECE {ece:.3f}")
        ax.legend(fontsize=8, loc="upper left")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean probability in bin")
    ax.set_ylabel("fraction the experts do not count")
    ax.set_title(f"gold subjects: {len(gold)} {objects} (numbers: {objects} per bin)", fontsize=9)
    save_figure(fig, stem)
    return stats


def plot_gold_counts(
    subjects: pd.DataFrame,
    stem: str | Path,
    *,
    dpi: int = DEFAULTS["dpi"],
    wording: str | None = None,
) -> dict:
    """Expected count (and count range) against the experts' count on the gold subjects."""
    words = nouns(wording)
    col = "gold_count"
    s = subjects.loc[subjects[col].notna()] if col in subjects else subjects.iloc[:0]
    s = s.loc[np.isfinite(s["expected_count"].to_numpy(dtype=float))]
    fig = new_figure(6.0, 4.6, dpi)
    ax = fig.subplots(1, 1)
    stats: dict[str, Any] = {"subjects": int(len(s))}
    if not len(s):
        no_data(ax, "no gold subjects")
    else:
        rng = np.random.default_rng(0)  # horizontal jitter only: counts are whole numbers
        x = s[col].to_numpy(dtype=float) + rng.uniform(-0.15, 0.15, len(s))
        y = s["expected_count"].to_numpy(dtype=float)
        if {"count_low", "count_high"} <= set(s.columns):
            lo, hi = s["count_low"].to_numpy(float), s["count_high"].to_numpy(float)
            ax.vlines(x, lo, hi, color="0.75", lw=1, label="count range (strong … all marked)")
        ax.plot(x, y, "o", ms=3, alpha=0.7, label="expected count")
        top = float(max(np.nanmax(s[col]), np.nanmax(y), 1.0)) + 0.5
        ax.plot([0, top], [0, top], ":", color="0.5", lw=1)
        ax.set_xlim(-0.5, top)
        ax.set_ylim(-0.5, top)
        err = y - s[col].to_numpy(dtype=float)
        stats.update(
            {
                "mae_rounded": float(np.mean(np.abs(np.round(y) - s[col]))),
                "bias": float(np.mean(err)),
                "experts_total": float(s[col].sum()),
                "expected_total": float(np.sum(y)),
            }
        )
        ax.set_title(
            f"{len(s)} gold {words['subjects']}: bias {stats['bias']:+.2f}, "
            f"MAE (rounded) {stats['mae_rounded']:.2f}",
            fontsize=9,
        )
        ax.legend(fontsize=8, loc="upper left")
    ax.set_xlabel(f"experts' count of {words['objects']}")
    ax.set_ylabel("expected count (cross-fitted)")
    save_figure(fig, stem)
    return stats


def build_gold_reliability(inp, stem, params):
    cfg = figure_settings(params)
    labels = read_table(inp["labels"], ["p_fp"], "labels", optional=["p_empty", "gold_real"])
    return plot_gold_reliability(
        labels, stem, min_labels=int(cfg["calibration_min_labels"]), dpi=cfg["dpi"],
        wording=params.get("wording"),
    )  # fmt: skip


def build_gold_counts(inp, stem, params):
    cfg = figure_settings(params)
    subjects = read_table(
        inp["subjects"], ["expected_count"], "subjects",
        optional=["gold_count", "count_low", "count_high"],
    )  # fmt: skip
    return plot_gold_counts(subjects, stem, dpi=cfg["dpi"], wording=params.get("wording"))


# ------------------------------------------------------------ the gold against the volunteers
def _of(k: int, n: int) -> str:
    return f"{k:,} of {n:,} ({k / n:.0%})" if n else "–"


def _best(frames: list[dict]) -> dict | None:
    """The frame tried with the fewest expert objects unmarked (then the most strong labels
    matched)."""
    judged = [f for f in frames if f["expert_objects"]]
    if not judged:
        return None
    return min(
        judged, key=lambda f: (f["expert_unmarked_share"], -(f["strong_matched_share"] or 0.0))
    )


def agreement_table(check: dict | None) -> pd.DataFrame:
    """The reports' table of a run's gold check (report.json ``calibration.gold_check``,
    :mod:`clumpscout.model.gold_check`): per frame (as given first), the strong labels
    matched to an expert object and the expert objects no volunteer marked, and which frame
    is the best tried and which one the check names as the likely cause."""
    cols = ["frame", "strong labels matched", "expert objects unmarked", "note"]
    if not check:
        return pd.DataFrame(columns=cols)
    best = _best(check["frames"])
    if best is not None and not best["expert_unmarked_share"] < (
        check["given"]["expert_unmarked_share"] or 0.0
    ):
        best = None  # no frame agrees better than the gold as given
    likely = (check.get("likely_frame") or {}).get("frame")
    rows = []
    for f in [check["given"], *check["frames"]]:
        note = ""
        if f is check["given"]:
            note = f"as given: {check['verdict']}"
        elif f["frame"] == likely:
            note = "named as the likely cause"
        elif best is not None and f is best:
            note = "best frame tried"
        name = f["frame"] if f["transform"] == "as given" else f"{f['frame']}: {f['transform']}"
        rows.append(
            {
                "frame": name,
                "strong labels matched": _of(f["strong_matched"], f["strong_labels"]),
                "expert objects unmarked": _of(f["expert_unmarked"], f["expert_objects"]),
                "note": note,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def agreement_summary(check: dict | None, wording: str | None = None) -> str:
    """One paragraph: what was checked and what was found (the table's caption)."""
    if not check:
        return "No check of the gold standard against the volunteers in this run's report."
    w = nouns(wording)
    share = check.get("strong_share") or 0.9
    text = (
        f"The gold standard ({check.get('path') or 'in memory'}, expert {check['kind']}) against "
        f"the volunteers on its {check['subjects_checked']:,} {w['subjects']} with "
        f"classifications (of {check['gold_subjects']:,}): strong labels are those marked by "
        f"at least {share:.0%} of their {w['subject']}'s viewers (and by at least "
        f"{check['bounds']['min_strong_marks']}); an expert object is unmarked when it lies in "
        "no label's box (docs/decisions.md#gold-checks). "
    )
    verdicts = {
        "ok": "They agree: the gold standard is used as given.",
        "not judged": "Too few strong labels and expert objects to judge.",
        "implausible": "They do not agree: the run stops unless gold.on_implausible is warn.",
        "incomplete": "The experts left many strongly marked objects unmarked.",
    }
    text += verdicts.get(check["verdict"], "")
    n_strong, need = check["given"]["strong_labels"], check["bounds"]["min_strong"]
    if check["verdict"] == "ok" and n_strong < need:
        text += (
            f" With {n_strong} strong labels ({need} needed), whether the experts left strongly "
            "marked objects out is not judged."
        )
    return text + "".join(f" {m}" for m in check.get("warnings", []))


def gold_check_of(report_json: str | Path) -> dict | None:
    """The gold check of an aggregation's report.json (None: there was none)."""
    import json

    report = json.loads(Path(report_json).read_text())
    return (report.get("calibration") or {}).get("gold_check")


def agreement_warnings(checks: dict[int, dict | None], n: int) -> list[str]:
    """The gold check's warnings at ``n`` (the run the reports show), and the other n at
    which it warned."""
    out = list((checks.get(n) or {}).get("warnings", []))
    others = [k for k, c in sorted(checks.items()) if k != n and c and c.get("warnings")]
    if others:
        out.append(f"The gold check also warned at n = {', '.join(map(str, others))}.")
    return out


def write_gold_agreement(
    reports: list[str | Path], ns: list[int], n: int, out_html, out_csv, out_json,
    wording: str | None = None,
) -> dict:  # fmt: skip
    """The reproduction report's gold-agreement table (HTML, CSV) and its numbers (JSON:
    the check at ``n`` and ``warnings``), from the default model's report.json at every n
    (``reports``, in ``ns`` order)."""
    import html

    checks = {int(k): gold_check_of(p) for k, p in zip(ns, reports, strict=True)}
    check = checks.get(n)
    table = agreement_table(check)
    warnings = agreement_warnings(checks, n)
    with atomic_path(out_csv) as tmp:
        table.to_csv(tmp, index=False)
    title = f"The gold standard against the volunteers (n = {n})"
    page = (
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;font-size:13px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
        "text-align:left}th{background:#eee}</style></head><body>"
        f"<h2>{html.escape(title)}</h2><p>{html.escape(agreement_summary(check, wording))}</p>"
        + table.to_html(index=False, border=0, escape=True, justify="left")
        + "</body></html>\n"
    )
    write_text(page, out_html)
    doc = {"n": n, "check": check, "warnings": warnings}
    write_json(doc, out_json)
    return doc


def plot_agreement(check: dict | None, ax) -> None:
    """Per frame tried (as given on top): the share of strong labels matched to an expert
    object and of expert objects no volunteer marked, as bars."""
    if not check:
        no_data(ax, "no gold check in the run's report")
        return
    frames = [check["given"], *check["frames"]]
    y = np.arange(len(frames))[::-1]
    matched = [np.nan_to_num(f["strong_matched_share"] or np.nan) for f in frames]
    unmarked = [np.nan_to_num(f["expert_unmarked_share"] or np.nan) for f in frames]
    ax.barh(y + 0.2, matched, 0.4, color="tab:blue", label="strong labels matched")
    ax.barh(y - 0.2, unmarked, 0.4, color="tab:red", label="expert objects unmarked")
    ax.set_yticks(y, [f["frame"] for f in frames], fontsize=8)
    ax.set_xlim(0, 1)
    ax.axvline(check["bounds"]["max_unmarked"], color="tab:red", ls=":", lw=1)
    ax.axvline(check["bounds"]["min_matched"], color="tab:blue", ls=":", lw=1)
    ax.set_xlabel("share")
    ax.legend(fontsize=8, loc="lower right")
