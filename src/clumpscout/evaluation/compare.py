"""Purity and completeness of label boxes against points (paper §6.3, decisions.md#expert-comparison).

The paper (§6.3, subsec:expert_comparison) scores the labels ``Ŷ*_n(p*)`` —
the label boxes of the expert-annotated subjects computed from ``n``
annotations per subject, keeping the boxes whose ``p_fp`` passes the
threshold ``p*`` — against the clicks of three experts:

- ``N_TP``: kept label boxes that contain at least one expert click (of any
  expert); ``N_FP``: kept label boxes that contain none;
- ``N_FN``: expert *clicks* that lie inside no kept label box;
- completeness ``C_n(p*) = N_TP / (N_TP + N_FN)`` and purity
  ``P_n(p*) = N_TP / (N_TP + N_FP)``.

Note that ``N_TP`` counts label boxes while ``N_FN`` counts expert clicks (three
experts clicking one missed clump add three), exactly as the paper defines
them. We also report ``recall``, the fraction of points that lie inside at
least one kept box, which counts points on both sides.

Decisions (documented here, decisions.md#expert-comparison):

- a box *contains* a point when ``x1 <= x <= x2`` and ``y1 <= y <= y2`` (closed
  box, subject pixels);
- a label is kept at threshold ``p*`` when ``p_fp <= p*`` (so ``p* = 1`` keeps every
  label; the paper says "less than"; on a grid the difference is a boundary
  case only). Thresholds are ``linspace(0, 1, thresholds)``;
- only subjects the experts annotated count (every subject with a row in the
  expert clicks table, including experts' empty classifications); labels of
  other subjects are counted in ``n_labels_outside`` and not scored;
- the "normal" comparison: points not marked unusual (``unusual`` False or
  missing) against labels that a strict majority of their volunteers marked
  normal (``frac_unusual < 0.5``);
- the optimal point maximises ``sqrt(C² + P²)`` over the threshold grid (ties: the
  smallest threshold); the max-C point is the largest completeness (ties: the
  highest purity, then the smallest threshold), and symmetrically for max P;
- a label table without a ``p_fp`` column (the baselines) is kept whole at every
  threshold, so its curve is flat.

:func:`score_truth` does the same against the simulated *true* clumps
(``truth_clumps.csv``): a label is a true positive when a true clump position
lies inside it, a true clump inside no kept label is a false negative. Because
the truth is complete, it also measures the calibration of ``p_fp``: in bins of
``p_fp``, the fraction of labels that are false against the mean ``p_fp``, and
the expected calibration error ``ECE = Σ_b (n_b / N) |frac_false_b − mean p_fp_b|``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout.arrays import ranges as _ranges
from clumpscout.errors import InputError

log = logging.getLogger(__name__)

LABEL_COLUMNS = ("subject_id", "x1", "y1", "x2", "y2")
POINT_COLUMNS = ("subject_id", "x", "y")
SUBSETS = ("all", "normal")

CURVE_COLUMNS = [
    "subset",
    "threshold",
    "n_kept",
    "n_tp",
    "n_fp",
    "n_fn",
    "completeness",
    "purity",
    "hypot",
    "n_points",
    "n_points_found",
    "recall",
]


# ---------------------------------------------------------------- helpers
def threshold_grid(thresholds: int) -> np.ndarray:
    """The p_fp thresholds p*: ``thresholds`` evenly spaced values in [0, 1]."""
    if int(thresholds) < 2:
        raise InputError(f"need at least 2 thresholds, got {thresholds}")
    return np.linspace(0.0, 1.0, int(thresholds))


def _require(df: pd.DataFrame, cols: Iterable[str], what: str, path: object) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"{what} table lacks column(s) {', '.join(missing)}", path=path)


def _label_p(labels: pd.DataFrame, path: object = None) -> np.ndarray:
    """p_fp of each label; 0 for a table without p_fp (kept at every threshold)."""
    if "p_fp" not in labels.columns:
        return np.zeros(len(labels))
    p = labels["p_fp"].to_numpy(dtype=float)
    bad = ~np.isfinite(p) | (p < 0) | (p > 1)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(f"p_fp must be in [0, 1], got {p[row]!r}", path=path, row=row)
    return p


def _is_unusual(points: pd.DataFrame) -> np.ndarray:
    if "unusual" not in points.columns:
        return np.zeros(len(points), dtype=bool)
    return points["unusual"].astype("boolean").fillna(False).to_numpy(dtype=bool)


#: label-point pairs (of one subject) looked at in one block of :func:`containment`
_PAIRS_PER_BLOCK = 1 << 21


def containment(labels: pd.DataFrame, points: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Which labels contain which points (same subject, closed box).

    Returns ``(label_hit, point_best)``: for each label whether it contains at
    least one point, and for each point the smallest ``p_fp`` of the labels that
    contain it (``inf`` if none), so that the point is found at threshold ``p*``
    exactly when ``point_best <= p*``. The (label, point) pairs of a subject are formed
    for blocks of subjects of about :data:`_PAIRS_PER_BLOCK` pairs at a time, so memory
    does not grow with the project.
    """
    l_sid = labels["subject_id"].to_numpy()
    p_sid = points["subject_id"].to_numpy()
    xyxy = np.column_stack([labels[c].to_numpy(dtype=float) for c in ("x1", "y1", "x2", "y2")])
    xy = np.column_stack([points[c].to_numpy(dtype=float) for c in ("x", "y")])
    p_lab = _label_p(labels)
    label_hit = np.zeros(len(labels), dtype=bool)
    point_best = np.full(len(points), np.inf)
    if not len(labels) or not len(points):
        return label_hit, point_best
    lo = np.argsort(l_sid, kind="stable")
    po = np.argsort(p_sid, kind="stable")
    ls, ps = l_sid[lo], p_sid[po]
    common = np.intersect1d(ls, ps)
    l0, l1 = np.searchsorted(ls, common, "left"), np.searchsorted(ls, common, "right")
    p0, p1 = np.searchsorted(ps, common, "left"), np.searchsorted(ps, common, "right")
    n_pairs = (l1 - l0) * (p1 - p0)
    if not len(common):
        return label_hit, point_best
    block = np.cumsum(n_pairs) // _PAIRS_PER_BLOCK
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
    ends = [*starts[1:], len(common)]
    for a, b in zip(starts, ends, strict=True):
        # every (label, point) pair of each subject of the block, in sorted positions
        n_lab = l1[a:b] - l0[a:b]
        per_label = np.repeat(p1[a:b] - p0[a:b], n_lab)  # the subject's points per label
        first_point = np.repeat(p0[a:b], n_lab)
        li = lo[np.repeat(_ranges(l0[a:b], l1[a:b]), per_label)]
        pi = po[_ranges(first_point, first_point + per_label)]
        x, y = xy[pi, 0], xy[pi, 1]
        inside = (x >= xyxy[li, 0]) & (x <= xyxy[li, 2]) & (y >= xyxy[li, 1]) & (y <= xyxy[li, 3])
        li, pi = li[inside], pi[inside]
        label_hit[li] = True
        np.minimum.at(point_best, pi, p_lab[li])
    return label_hit, point_best


def curve_counts(
    p: np.ndarray, label_hit: np.ndarray, point_best: np.ndarray, grid: np.ndarray
) -> pd.DataFrame:
    """N_TP, N_FP, N_FN, C, P and recall at every threshold of ``grid`` (§6.3).

    A label with ``p_fp <= p*`` is kept; a point is a false negative at ``p*`` when
    no kept label contains it (``point_best > p*``).
    """
    tp = np.searchsorted(np.sort(p[label_hit]), grid, side="right")
    kept = np.searchsorted(np.sort(p), grid, side="right")
    fp = kept - tp
    n_points = len(point_best)
    found = np.searchsorted(np.sort(point_best), grid, side="right")
    fn = n_points - found
    with np.errstate(invalid="ignore", divide="ignore"):
        completeness = np.where(tp + fn > 0, tp / np.maximum(tp + fn, 1), np.nan)
        purity = np.where(kept > 0, tp / np.maximum(kept, 1), np.nan)
        recall = np.where(n_points > 0, found / max(n_points, 1), np.nan)
    return pd.DataFrame(
        {
            "threshold": grid,
            "n_kept": kept,
            "n_tp": tp,
            "n_fp": fp,
            "n_fn": fn,
            "completeness": completeness,
            "purity": purity,
            "hypot": np.hypot(completeness, purity),
            "n_points": n_points,
            "n_points_found": found,
            "recall": recall,
        }
    )


def _pick(curve: pd.DataFrame, primary: str, secondary: str) -> int | None:
    """Row index maximising ``primary`` (ties: max ``secondary``, then smallest threshold)."""
    v = curve[primary].to_numpy(dtype=float)
    if not np.isfinite(v).any():
        return None
    best = np.nanmax(v)
    cand = np.flatnonzero(v == best)
    if len(cand) > 1 and secondary:
        s = curve[secondary].to_numpy(dtype=float)[cand]
        s = np.where(np.isfinite(s), s, -np.inf)
        cand = cand[s == s.max()]
    return int(cand[0])


def summarise_curve(curve: pd.DataFrame) -> dict:
    """Optimal (max sqrt(C²+P²)), max-C and max-P points and the p* = 1 point of one curve."""
    out: dict = {}
    i_opt = _pick(curve, "hypot", "")
    i_c = _pick(curve, "completeness", "purity")
    i_p = _pick(curve, "purity", "completeness")

    def get(i, col):
        return np.nan if i is None else curve[col].iloc[i]

    out["opt_threshold"] = get(i_opt, "threshold")
    out["opt_completeness"] = get(i_opt, "completeness")
    out["opt_purity"] = get(i_opt, "purity")
    out["opt_hypot"] = get(i_opt, "hypot")
    for c in ("n_tp", "n_fp", "n_fn"):
        v = get(i_opt, c)
        out[f"opt_{c}"] = pd.NA if i_opt is None else int(v)
    out["opt_recall"] = get(i_opt, "recall")
    out["max_completeness"] = get(i_c, "completeness")
    out["max_completeness_threshold"] = get(i_c, "threshold")
    out["purity_at_max_completeness"] = get(i_c, "purity")
    out["max_purity"] = get(i_p, "purity")
    out["max_purity_threshold"] = get(i_p, "threshold")
    out["completeness_at_max_purity"] = get(i_p, "completeness")
    last = len(curve) - 1
    out["completeness_p1"] = curve["completeness"].iloc[last]
    out["purity_p1"] = curve["purity"].iloc[last]
    return out


def _restrict(
    labels: pd.DataFrame, points: pd.DataFrame, subjects: np.ndarray | None
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Keep the scored subjects; drop coordinate-less point rows; count both."""
    counts = {}
    has_xy = points["x"].notna().to_numpy() & points["y"].notna().to_numpy()
    counts["n_point_rows_without_xy"] = int((~has_xy).sum())
    if subjects is None:
        subjects = np.unique(points["subject_id"].to_numpy())
    subjects = np.unique(np.asarray(subjects))
    in_l = labels["subject_id"].isin(subjects).to_numpy()
    in_p = points["subject_id"].isin(subjects).to_numpy()
    counts["n_subjects"] = int(len(subjects))
    counts["n_labels_outside"] = int((~in_l).sum())
    counts["n_points_outside"] = int((has_xy & ~in_p).sum())
    return (
        labels.loc[in_l].reset_index(drop=True),
        points.loc[in_p & has_xy].reset_index(drop=True),
        counts,
    )


def _subset(labels: pd.DataFrame, points: pd.DataFrame, subset: str):
    if subset == "all":
        return labels, points
    normal_l = labels["frac_unusual"].to_numpy(dtype=float) < 0.5
    normal_p = ~_is_unusual(points)
    return labels.loc[normal_l].reset_index(drop=True), points.loc[normal_p].reset_index(drop=True)


def _validate(labels, points, labels_path, points_path):
    _require(labels, LABEL_COLUMNS, "labels", labels_path)
    _require(points, POINT_COLUMNS, "points", points_path)
    _label_p(labels, labels_path)


def _subsets_for(labels: pd.DataFrame) -> tuple[str, ...]:
    if "frac_unusual" in labels.columns:
        return SUBSETS
    log.warning("labels have no frac_unusual column: the 'normal' subset is not scored")
    return ("all",)


def _tagged(df: pd.DataFrame, tags: dict | None) -> pd.DataFrame:
    if not tags:
        return df
    for i, (k, v) in enumerate(tags.items()):
        df.insert(i, k, v)
    return df


# ---------------------------------------------------------------- public API
def score_points(
    labels_df: pd.DataFrame,
    points_df: pd.DataFrame,
    thresholds: int = 101,
    subjects: Iterable | None = None,
    tags: dict | None = None,
    labels_path: object = None,
    points_path: object = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score label boxes against points (expert clicks) over a p_fp threshold grid (§6.3).

    Parameters
    ----------
    labels_df : subject_id, x1, y1, x2, y2 (px), optional p_fp, optional frac_unusual.
    points_df : subject_id, x, y (px; NaN rows are experts' empty classifications),
        optional unusual.
    thresholds : number of thresholds p* in [0, 1] (config ``compare.thresholds``).
    subjects : the subjects to score; default every subject in ``points_df``
        (the expert-annotated subjects).
    tags : constant columns put first in both outputs (e.g. ``{"n": 20}``).

    Returns
    -------
    (curve, summary) : ``curve`` has one row per subset and threshold
        (:data:`CURVE_COLUMNS`); ``summary`` one row per subset with the optimal,
        max-C and max-P points (:func:`summarise_curve`) and the counts of what
        was not scored.
    """
    curve, summary, _ = _score_points(
        labels_df, points_df, thresholds, subjects, tags, labels_path, points_path
    )
    return curve, summary


def _score_points(labels_df, points_df, thresholds, subjects, tags, labels_path, points_path):
    """:func:`score_points`, plus each subset's (labels' p_fp, label contains a point)."""
    _validate(labels_df, points_df, labels_path, points_path)
    grid = threshold_grid(thresholds)
    labels, points, counts = _restrict(labels_df, points_df, subjects)
    del labels_df, points_df
    curves, rows, hits = [], [], []
    for subset in _subsets_for(labels):
        lab, pts = _subset(labels, points, subset)
        hit, best = containment(lab, pts)
        hits.append((_label_p(lab), hit))
        curve = curve_counts(_label_p(lab), hit, best, grid)
        curve.insert(0, "subset", subset)
        curves.append(curve)
        row = {"subset": subset, **counts, "n_labels": len(lab), "n_points": len(pts)}
        row.update(summarise_curve(curve))
        rows.append(row)
        log.info(
            "%s%s: %d labels, %d points; optimal p*=%.3g C=%.3f P=%.3f; max C=%.3f; max P=%.3f",
            "".join(f"{k}={v} " for k, v in (tags or {}).items()),
            subset,
            row["n_labels"],
            row["n_points"],
            row["opt_threshold"],
            row["opt_completeness"],
            row["opt_purity"],
            row["max_completeness"],
            row["max_purity"],
        )
    for k, v in counts.items():
        if k.endswith("outside") or k.endswith("without_xy"):
            log.info("not scored: %s = %d", k, v)
    curve = _tagged(pd.concat(curves, ignore_index=True), tags)
    summary = _tagged(pd.DataFrame(rows), tags)
    return curve, summary, hits


def calibration(p: np.ndarray, is_false: np.ndarray, bins: int = 10) -> tuple[pd.DataFrame, float]:
    """Reliability table of p_fp and the expected calibration error.

    ``bins`` equal-width bins on [0, 1] (the last one closed). Per bin: number of
    labels, mean p_fp, fraction that is actually false (with its binomial
    standard error). ``ECE = Σ_b (n_b / N) |frac_false_b − mean_p_fp_b|`` over the
    non-empty bins; NaN with no labels.
    """
    edges = np.linspace(0.0, 1.0, int(bins) + 1)
    p = np.asarray(p, dtype=float)
    is_false = np.asarray(is_false, dtype=bool)
    idx = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, int(bins) - 1)
    n = np.bincount(idx, minlength=bins)
    sum_p = np.bincount(idx, weights=p, minlength=bins)
    n_false = np.bincount(idx, weights=is_false.astype(float), minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.where(n > 0, sum_p / np.maximum(n, 1), np.nan)
        frac = np.where(n > 0, n_false / np.maximum(n, 1), np.nan)
        se = np.sqrt(frac * (1 - frac) / np.where(n > 0, n, np.nan))
    table = pd.DataFrame(
        {
            "bin_lo": edges[:-1],
            "bin_hi": edges[1:],
            "n_labels": n,
            "n_false": n_false.astype(np.int64),
            "mean_p_fp": mean_p,
            "frac_false": frac,
            "frac_false_se": se,
        }
    )
    total = n.sum()
    ece = float(np.nansum(n * np.abs(frac - mean_p)) / total) if total else float("nan")
    return table, ece


def score_truth(
    labels_df: pd.DataFrame,
    truth_df: pd.DataFrame,
    thresholds: int = 101,
    subjects: Iterable | None = None,
    bins: int = 10,
    tags: dict | None = None,
    labels_path: object = None,
    truth_path: object = None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Score labels against the simulated true clumps, plus p_fp calibration.

    Same definitions as :func:`score_points` with the true clump positions
    (``truth_clumps.csv``: subject_id, clump, x, y, ..., unusual) as the points:
    a label is a true positive when at least one true clump position lies inside
    its box. ``subjects`` should be every subject that was aggregated (those of
    the subsample): true clumps of a subject nobody saw are not counted, and
    the default (subjects of the truth table) would leave out subjects without
    true clumps, whose labels are all false.

    Returns ``(curve, summary, calibration)``; ``summary`` has the columns of
    :func:`score_points` plus ``ece`` and ``n_calibration_labels``;
    ``calibration`` has one row per subset and p_fp bin (:func:`calibration`).
    """
    _validate(labels_df, truth_df, labels_path, truth_path)
    if subjects is None:
        log.warning("no subject list given: scoring only subjects that have true clumps")
    curve, summary, hits = _score_points(
        labels_df, truth_df, thresholds, subjects, None, labels_path, truth_path
    )
    tables, eces = [], []
    for subset, (p, hit) in zip(summary["subset"], hits, strict=True):
        table, ece = calibration(p, ~hit, bins)
        table.insert(0, "subset", subset)
        tables.append(table)
        eces.append(ece)
        log.info("%s: p_fp calibration ECE = %.4f over %d labels", subset, ece, len(p))
    summary["ece"] = eces
    summary["n_calibration_labels"] = [int(t["n_labels"].sum()) for t in tables]
    return (
        _tagged(curve, tags),
        _tagged(summary, tags),
        _tagged(pd.concat(tables, ignore_index=True), tags),
    )


def collect_tables(paths: Iterable[str | Path]) -> pd.DataFrame:
    """Concatenate per-n CSV tables (same columns) into one, sorted by their tag columns."""
    return collect_frames([pd.read_csv(p) for p in paths])


def collect_frames(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-n tables (same columns) into one, sorted by their tag columns."""
    if not frames:
        return pd.DataFrame()
    out = pd.concat(frames, ignore_index=True)
    keys = [c for c in ("method", "n", "subset") if c in out.columns]
    if keys:
        out = out.sort_values(keys, kind="stable").reset_index(drop=True)
    return out


# ---------------------------------------------------------------- I/O
def read_table(
    path: str | Path, columns: list[str] | None = None, optional: Iterable[str] = ()
) -> pd.DataFrame:
    """Read a parquet or CSV table (by suffix); unreadable -> InputError. ``columns``: only
    those; ``optional``: those too where the table has them."""
    path = Path(path)
    try:
        if columns is not None and optional:
            names = (
                pd.read_csv(path, nrows=0).columns
                if path.suffix == ".csv"
                else _parquet_names(path)
            )
            columns = [*columns, *(c for c in optional if c in names and c not in columns)]
        if path.suffix == ".csv":
            return pd.read_csv(path, usecols=columns)
        return pd.read_parquet(path, columns=columns)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read table: {exc}", path=path) from exc


def _parquet_names(path) -> list[str]:
    import pyarrow.parquet as pq

    return list(pq.read_schema(path).names)


def read_labels(path: str | Path) -> pd.DataFrame:
    """The columns of a labels table that the comparison scores (the rest is not read)."""
    return read_table(path, [], optional=(*LABEL_COLUMNS, "p_fp", "frac_unusual"))


def read_points(path: str | Path) -> pd.DataFrame:
    """The columns of a points or truth table that the comparison scores."""
    return read_table(path, [], optional=(*POINT_COLUMNS, "unusual"))


def subjects_of(path: str | Path | None) -> np.ndarray | None:
    """Unique subject_id of a table (e.g. the subsample's boxes), or None; a Parquet file
    is read one row group at a time."""
    if not path:
        return None
    if Path(path).suffix == ".csv":
        t = read_table(path, columns=["subject_id"])
        return np.unique(t["subject_id"].to_numpy())
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
        parts = [
            np.unique(f.read_row_group(i, columns=["subject_id"]).column(0).to_numpy())
            for i in range(f.num_row_groups)
        ]
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"cannot read table: {exc}", path=path) from exc
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


# ---------------------------------------------------------------- CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--labels", required=True, help="labels.parquet (clumpscout aggregate)")
    p.add_argument(
        "--points",
        required=True,
        help="expert_clicks.parquet (--kind experts) or truth_clumps.csv (--kind truth)",
    )
    p.add_argument("--kind", choices=("experts", "truth"), default="experts")
    p.add_argument(
        "--subjects",
        default=None,
        help="table whose subject_id are the scored subjects "
        "(default: the subjects of --points); for --kind truth pass the subsample's boxes",
    )
    from clumpscout.config import defaults

    d = defaults("compare")  # config keys compare.thresholds, compare.calibration_bins
    p.add_argument("--thresholds", type=int, default=d["thresholds"], help="p_fp thresholds")
    p.add_argument("--bins", type=int, default=d["calibration_bins"], help="calibration bins")
    p.add_argument("--n", type=int, default=None, help="tag the outputs with this n")
    p.add_argument("--out-curve", required=True)
    p.add_argument("--out-summary", required=True)
    p.add_argument("--out-calibration", default=None, help="calibration CSV (truth)")


def run(args: argparse.Namespace) -> int:
    from clumpscout.io import write_csv

    labels = read_labels(args.labels)
    points = read_points(args.points)
    subjects = subjects_of(args.subjects)
    tags = {"n": args.n} if args.n is not None else None
    if args.kind == "experts":
        curve, summary = score_points(
            labels, points, args.thresholds, subjects, tags, args.labels, args.points
        )
    else:
        curve, summary, calib = score_truth(
            labels, points, args.thresholds, subjects, args.bins, tags, args.labels, args.points
        )
        if args.out_calibration:
            write_csv(calib, args.out_calibration)
    write_csv(curve, args.out_curve)
    write_csv(summary, args.out_summary)
    return 0
