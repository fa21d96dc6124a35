"""The report's columns of each figure: its key numbers in this run next to what the paper
reports (the paper's side comes from :mod:`clumpscout.figures.registry`)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clumpscout.figures import registry
from clumpscout.figures.truth import METHODS


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
    return ours


def _labels_psigma(s):
    return _median_trend(s) or "–"


def _labels_positions(s):
    bins = s.get("bins", [])
    parts = [
        f"[{b['lo']:g}, {b['hi']:g}{']' if i == len(bins) - 1 else ')'}: "
        f"{_pct(b['frac_outside'])} of {b['count']}"
        for i, b in enumerate(bins)
    ]
    return f"outside R > {s.get('radius', 0.25):g} per p_fp bin: " + "; ".join(parts)


def _labels_roc(s):
    out = []
    for subset in ("all", "normal"):
        t = _trend(
            s.get(subset, {}),
            lambda m: m["optimal"],
            lambda o: f"({_g(o['completeness'])}, {_g(o['purity'])})",
        )
        if t:
            out.append(f"{subset} optimal (C, P) {t}")
    return "; ".join(out) or "–"


def _labels_true_false(s):
    ours = (
        f"true positives {_pct(s.get('frac_tp_below_cut'))} < {s.get('cut')} (of {s.get('n_tp')}), "
        f"false positives {_pct(s.get('frac_fp_below_cut'))} (of {s.get('n_fp')})"
    )
    return ours


def _labels_calibration(s):
    out = []
    for subset, per in s.get("ece", {}).items():
        t = _trend(per)
        if t:
            out.append(f"ECE {subset}: {t}")
    return "; ".join(out) or "–"


def _labels_skills(s):
    ours = (
        f"{s.get('n_volunteers')} volunteers; median {_g(s.get('median_subjects'))} subjects; "
        f"{_pct(s.get('frac_below_10'))} < 10; {s.get('n_above_200')} > 200"
    )
    return ours


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
    return "; ".join(out) or "–"


def _labels_cpg(s):
    out = []
    for key, name in (("all", "all"), ("cut", f"p_fp < {s.get('p_fp_cut')}")):
        t = _trend(s.get(key, {}), lambda q: q["mean"])
        if t:
            out.append(f"mean {name}: {t}")
    return "; ".join(out) or "–"


def _labels_retirement(s):
    per = s.get("fractions", {})
    out = []
    for n in _ends(per) or ():
        f = per[n]
        out.append(
            f"n={n}: retired {_pct(f.get('retired', 0) + f.get('retired_empty', 0))}, "
            f"stale {_pct(f.get('stale'))}, unretired {_pct(f.get('unretired'))}"
        )
    return "; ".join(out) or "–"


def _labels_ms(s):
    ours = (
        f"ours more {_pct(s.get('frac_ours_more'))}, equal {_pct(s.get('frac_equal'))}, "
        f"MeanShift more {_pct(s.get('frac_meanshift_more'))}; mean difference {_g(s.get('mean_difference'))}"
    )
    return ours


def _labels_methods(s):
    ref = "truth" if s.get("truth") else "experts"
    per = s.get(ref, {})
    parts = [
        f"{METHODS.get(m, (m,))[0]} C {_g(v.get('opt_completeness'))} P {_g(v.get('opt_purity'))}"
        for m, v in per.items()
    ]
    return f"vs {ref}, optimal p*: " + "; ".join(parts)


def _labels_examples(s):
    ids = [str(r["subject_id"]) for r in s.get("subjects", [])]
    return "subjects " + (", ".join(ids) or "–")


def _labels_gold_reliability(s):
    ece = s.get("ece", {})
    if not ece:
        return "–"
    return f"{s.get('labels')} gold labels; ECE p_fp {_g(ece.get('p_fp'))}, p_empty {_g(ece.get('p_empty'))}"


def _labels_gold_counts(s):
    if not s.get("subjects"):
        return "–"
    return (
        f"{s['subjects']} gold subjects: bias {_g(s.get('bias'))}, "
        f"MAE (rounded) {_g(s.get('mae_rounded'))}"
    )


#: figure -> its key numbers in this run, from the figure's JSON
REPORT_LABELS: dict[str, Callable[[dict], str]] = {
    "clump_fpp_dist": _labels_pfp,
    "clump_variance_dist": _labels_psigma,
    "clump_location_vs_pfp": _labels_positions,
    "pseudo_roc_volunteer_counts": _labels_roc,
    "pseudo_roc_truth": _labels_roc,
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
    "gold_reliability": _labels_gold_reliability,
    "gold_counts": _labels_gold_counts,
}


def report_labels(name: str, stats_json: str | Path | None = None) -> dict[str, str]:
    """The columns of figure ``name`` in the Snakemake report: its key numbers in
    this run (from ``<stem>.json``) next to what the paper reports (the registry's
    :attr:`~clumpscout.figures.registry.Figure.paper`; none for a figure made with the
    generic wording, whose data are not Clump Scout's). Evaluated when the report is
    built (``report(..., labels=...)``), so it never goes stale."""
    stats: dict = {}
    if stats_json and Path(stats_json).exists():
        try:
            stats = json.loads(Path(stats_json).read_text())
        except ValueError:
            stats = {}
    try:
        ours = REPORT_LABELS[name](stats) if stats else "–"
    except (KeyError, TypeError, IndexError):
        ours = "–"
    fig = registry.BY_NAME.get(name)
    paper = fig.paper if fig else ""
    if stats.get("wording", "clump_scout") != "clump_scout":
        paper = registry.NOT_COMPARABLE
    return {"figure": name, "ours": ours, "paper": paper}
