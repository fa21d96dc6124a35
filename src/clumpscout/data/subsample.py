"""Subsamples Z~_n of n classifications per subject (paper §6.1, decisions.md#subsamples).

The paper assembles ``{Z~_n}_{n=3}^{20}``: for every subject, ``n`` of its
annotations (classifications) drawn at random, and aggregates each subsample on
its own to see how the results depend on the number of volunteers per subject.

Decisions (decisions.md#subsamples):

- the unit of a draw is a *classification* (``classification_id``), i.e. one
  volunteer's annotation of one subject; all of its box rows (or its single
  coordinate-less row when it marked nothing) are kept or dropped together;
- draws are without replacement; a subject with fewer than ``n``
  classifications keeps all of them and is counted in the report; an ``n`` above every
  subject's count gives the complete data, which the report (``complete_data``) and a
  warning say (docs/decisions.md#subsample-n: it still runs, the workflow's targets are
  fixed before the data exist);
- nested draws (default): one seeded random permutation of each subject's
  classifications, ``Z~_n`` = its first ``n``, so ``Z~_n ⊂ Z~_{n+1}`` and trends
  in ``n`` are not blurred by resampling noise. ``nested=False`` draws each
  ``n`` from its own stream (seeded by ``(seed, n)``).

The draw is fully vectorised: every classification gets uniform random bits
from ``np.random.default_rng(seed)`` in (subject_id, classification_id) order;
one sort by (subject, random bits) gives an independent uniform permutation per
subject.
The keys depend only on the set of classifications and the seed, never on the
input row order, so the same input and seed give the same bytes.
"""

from __future__ import annotations

import argparse
import logging

import numpy as np
import pandas as pd
import pyarrow as pa

from clumpscout.config import add_setting
from clumpscout.errors import InputError
from clumpscout.io import write_json, write_table
from clumpscout.logs import timed

log = logging.getLogger(__name__)

REQUIRED = ("classification_id", "subject_id")


def _classifications(
    boxes_df: pd.DataFrame, path: object = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Classifications of a boxes table, validated.

    Returns ``(codes, cls_id, cls_subject)``: for every row the index of its
    classification, and per classification its id and subject, sorted by
    (subject_id, classification_id).
    """
    missing = [c for c in REQUIRED if c not in boxes_df.columns]
    if missing:
        raise InputError(f"boxes table lacks column(s) {', '.join(missing)}", path=path)
    for c in REQUIRED:
        if boxes_df[c].isna().any():
            row = int(np.flatnonzero(boxes_df[c].isna().to_numpy())[0])
            raise InputError(f"missing {c}", path=path, row=row)
    cid = boxes_df["classification_id"].to_numpy()
    sid = boxes_df["subject_id"].to_numpy()
    codes, uniques = pd.factorize(cid)
    subject = np.empty(len(uniques), dtype=sid.dtype)
    subject[codes] = sid
    bad = subject[codes] != sid
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"classification {cid[row]} appears under more than one subject_id", path=path, row=row
        )
    order = np.lexsort((uniques, subject))
    rank_of = np.empty(len(order), dtype=np.int64)
    rank_of[order] = np.arange(len(order))
    return rank_of[codes], np.asarray(uniques)[order], subject[order]


def permutation_rank(subject_id: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rank (0..k-1) of each item in a uniform random permutation of its subject's items.

    ``subject_id`` must be sorted. One sort of 64-bit keys ``(subject index, random
    bits)``; ties of the random bits (probability ~k²/2^47 per subject) fall back to
    the input order, so the result stays deterministic.
    """
    m = len(subject_id)
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    new = np.r_[True, subject_id[1:] != subject_id[:-1]]
    group = np.cumsum(new, dtype=np.uint64) - np.uint64(1)
    rand_bits = 63 - max(1, int(group[-1]).bit_length())
    key = (group << np.uint64(rand_bits)) | rng.integers(
        0, 1 << rand_bits, m, dtype=np.uint64, endpoint=False
    )
    order = np.argsort(key, kind="stable")
    start = np.flatnonzero(new)
    group_start = np.repeat(start, np.diff(np.r_[start, m]))
    rank = np.empty(m, dtype=np.int64)
    rank[order] = np.arange(m) - group_start
    return rank


def _id_columns(boxes: pd.DataFrame | pa.Table) -> pd.DataFrame:
    """The id columns of the boxes table (a pyarrow Table's as a small DataFrame)."""
    if isinstance(boxes, pa.Table):
        return pd.DataFrame(
            {c: boxes.column(c).to_pandas() for c in REQUIRED if c in boxes.column_names}
        )
    return boxes


def read_boxes_table(path) -> pa.Table:
    """The boxes table as a pyarrow Table (what the subsample keeps is filtered and written
    without a round trip through pandas); an unreadable file is an :class:`InputError`."""
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read parquet: {exc}", path=path) from None


def draw_subsample(
    boxes_df: pd.DataFrame | pa.Table,
    n: int,
    seed: int,
    nested: bool = True,
    path: object = None,
) -> tuple[pd.DataFrame | pa.Table, dict]:
    """Draw ``Z~_n``: ``n`` classifications per subject without replacement (decisions.md#subsamples).

    Parameters
    ----------
    boxes_df : the boxes table (docs/tables.md#boxes), a DataFrame or a pyarrow Table (the
        result is of the same kind; the workflow filters the Table read from Parquet,
        which is faster and gives the same file); only ``classification_id`` and
        ``subject_id`` are used, every column is passed through.
    n : classifications per subject (>= 1).
    seed : the subsample seed (``seed_for("subsample")`` in the workflow).
    nested : one permutation per subject shared by every ``n`` (``Z~_n ⊂ Z~_{n+1}``);
        ``False`` draws each ``n`` independently (seed stream ``(seed, n)``).
    path : the input file, only for error messages.

    Returns
    -------
    (boxes_n, report) : the selected rows in input order (all rows of a
        selected classification, none of the others) and a report dict with the
        counts of subjects, classifications and rows kept and dropped, and the
        number of subjects that had fewer than ``n`` classifications (kept whole).
    """
    n = int(n)
    if n < 1:
        raise InputError(f"n must be >= 1, got {n}")
    codes, cls_id, sid = _classifications(_id_columns(boxes_df), path)
    rng = np.random.default_rng(int(seed) if nested else [int(seed), n])
    keep = permutation_rank(sid, rng) < n
    mask = keep[codes]
    if isinstance(boxes_df, pa.Table):
        out = boxes_df.filter(pa.array(mask))
    else:
        out = boxes_df.loc[mask].reset_index(drop=True)

    per_subject = np.unique(sid, return_counts=True)[1]
    short = per_subject < n
    n_out = int(keep.sum())
    report = {
        "n": n,
        "seed": int(seed),
        "nested": bool(nested),
        "n_subjects": int(len(per_subject)),
        "n_subjects_short": int(short.sum()),
        "n_classifications_in_short_subjects": int(per_subject[short].sum()),
        "n_classifications_in": int(len(cls_id)),
        "n_classifications_out": n_out,
        "n_classifications_dropped": int(len(cls_id) - n_out),
        "n_rows_in": int(len(boxes_df)),
        "n_rows_out": int(mask.sum()),
        "n_rows_dropped": int(len(boxes_df) - mask.sum()),
        "classifications_per_subject": {
            "min": int(per_subject.min()) if len(per_subject) else 0,
            "median": float(np.median(per_subject)) if len(per_subject) else 0.0,
            "max": int(per_subject.max()) if len(per_subject) else 0,
        },
    }
    log.info(
        "Z~_%d: kept %d of %d classifications (%d of %d rows) of %d subjects; "
        "%d subjects had fewer than %d classifications and keep all",
        n,
        report["n_classifications_out"],
        report["n_classifications_in"],
        report["n_rows_out"],
        report["n_rows_in"],
        report["n_subjects"],
        report["n_subjects_short"],
        n,
    )
    report["warnings"] = []
    # n at or above what every subject holds: Z~_n is the complete data (decisions.md#subsample-n)
    report["complete_data"] = bool(len(per_subject) and n >= per_subject.max())
    if len(per_subject) and n > per_subject.max():
        msg = (
            f"Z~_{n}: no subject holds more than {per_subject.max()} classifications, so this "
            f"subsample is the complete data (the same as Z~_{per_subject.max()}); drop n above "
            f"{per_subject.max()} from subsample.n (docs/decisions.md#subsample-n)"
        )
        log.warning(msg)
        report["warnings"].append(msg)
    elif len(per_subject) and short.mean() > 0.5:
        msg = (
            f"Z~_{n}: {short.mean():.0%} of the subjects have fewer than {n} classifications "
            f"(median {np.median(per_subject):g}, max {per_subject.max()}): this subsample is "
            "mostly the complete data, so its results repeat those of smaller n; drop such n "
            "from subsample.n"
        )
        log.warning(msg)
        report["warnings"].append(msg)
    return out, report


# ---------------------------------------------------------------- CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Draw Z~_n: n classifications per subject without replacement (subjects with fewer "
        "keep all of them and are counted; docs/decisions.md#subsamples)."
    )
    p.add_argument("--boxes", required=True, help="boxes.parquet (clumpscout boxes)")
    add_setting(p, "subsample.n", item=True, required=True, note="here one n")
    add_setting(p, "seed", required=True, note="here the subsample's own seed")
    add_setting(p, "subsample.nested", "--independent")
    p.add_argument("--out", required=True, help="output boxes parquet")
    p.add_argument("--report", default=None, help="report JSON (default: not written)")


def run(args: argparse.Namespace) -> int:
    boxes = read_boxes_table(args.boxes)
    with timed(f"subsample n={args.n}"):
        out, report = draw_subsample(boxes, args.n, args.seed, nested=args.nested, path=args.boxes)
    write_table(out, args.out)
    if args.report:
        write_json(report, args.report)
    return 0
