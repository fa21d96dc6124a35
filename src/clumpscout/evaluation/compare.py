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

The measures themselves (containment, the threshold grid, the curve and its optimal points,
the reliability table) are :mod:`clumpscout.metrics.containment` and
:mod:`clumpscout.metrics.reliability`; this module scores label tables with them.

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

from clumpscout.config import add_settings, defaults
from clumpscout.errors import InputError
from clumpscout.io import write_csv
from clumpscout.metrics.containment import (
    BOX_COLUMNS,
    POINT_COLUMNS,
    containment,
    curve_counts,
    label_p_fp,
    summarise_curve,
    threshold_grid,
)
from clumpscout.metrics.reliability import calibration

log = logging.getLogger(__name__)
#: the defaults of the config's compare section (config.schema.yaml)
_DEFAULTS = defaults("compare")

LABEL_COLUMNS = BOX_COLUMNS  # a label is scored by its box (metrics.containment)
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
def _require(df: pd.DataFrame, cols: Iterable[str], what: str, path: object) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"{what} table lacks column(s) {', '.join(missing)}", path=path)


def _is_unusual(points: pd.DataFrame) -> np.ndarray:
    if "unusual" not in points.columns:
        return np.zeros(len(points), dtype=bool)
    return points["unusual"].astype("boolean").fillna(False).to_numpy(dtype=bool)


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
    label_p_fp(labels, labels_path)


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
    thresholds: int = _DEFAULTS["thresholds"],
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
        hits.append((label_p_fp(lab), hit))
        curve = curve_counts(label_p_fp(lab), hit, best, grid)
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


def score_truth(
    labels_df: pd.DataFrame,
    truth_df: pd.DataFrame,
    thresholds: int = _DEFAULTS["thresholds"],
    subjects: Iterable | None = None,
    bins: int = _DEFAULTS["calibration_bins"],
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
    add_settings(p, "compare", {"thresholds": None, "calibration_bins": "--bins"})
    p.add_argument("--n", type=int, default=None, help="tag the outputs with this n")
    p.add_argument("--out-curve", required=True)
    p.add_argument("--out-summary", required=True)
    p.add_argument("--out-calibration", default=None, help="calibration CSV (truth)")


def run(args: argparse.Namespace) -> int:
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
