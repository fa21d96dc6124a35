"""The truth files of a simulated universe (either kind): every real object with how many
volunteers saw and marked it (truth_objects.csv), every volunteer and expert with their
skills (volunteers_truth.csv) and every click with where it came from (truth_clicks.parquet);
and the truth read back (:func:`truth_tables`: what the project counts, for the replay and
the benchmarks).

The model behind them is documented in :mod:`clumpscout.simulation.universe`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from clumpscout.io import atomic_path, parquet_options
from clumpscout.simulation.export import format_times, write_table_csv

log = logging.getLogger(__name__)

#: columns of truth_objects.csv
OBJECT_COLUMNS = (
    "subject_id", "object", "kind", "x", "y", "unusual", "clump", "distractor",
    "flux_g", "flux_r", "flux_i", "n_viewers", "n_marked",
)  # fmt: skip


#: clicks handled at once when counting the marks of each object (memory: a block)
MARK_BLOCK = 1_000_000


def _marks_per_object(obj: pd.DataFrame, clicks: pd.DataFrame, cls_sub: np.ndarray):
    """Distinct classifications that clicked each object (real-object clicks only).

    ``clicks`` are sorted by classification, so blocks of whole classifications
    (about :data:`MARK_BLOCK` clicks each) are counted one at a time."""
    n = np.zeros(len(obj), np.int64)
    key = pd.MultiIndex.from_arrays([obj["_gal"].to_numpy(), obj["clump"], obj["distractor"]])
    cls = clicks["cls"].to_numpy()
    clump = clicks["clump"].to_numpy()
    dist = clicks["distractor"].to_numpy()
    cuts = np.searchsorted(cls, cls[np.arange(MARK_BLOCK, len(cls), MARK_BLOCK)], side="left")
    bounds = np.unique(np.r_[0, cuts, len(cls)])
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        hit = (clump[a:b] >= 0) | (dist[a:b] >= 0)
        cl = pd.DataFrame(
            {"cls": cls[a:b][hit], "clump": clump[a:b][hit], "distractor": dist[a:b][hit]}
        ).drop_duplicates()
        if len(cl):
            idx = key.get_indexer(
                pd.MultiIndex.from_arrays(
                    [cls_sub[cl["cls"].to_numpy()], cl["clump"], cl["distractor"]]
                )
            )
            n += np.bincount(idx[idx >= 0], minlength=len(obj))
    return n


def write_common_truth(out: Path, p, objects, q, clicks, ex, ids, sid, start) -> pd.DataFrame:
    """Write truth_objects.csv, volunteers_truth.csv and truth_clicks.parquet; returns
    the objects with ``n_viewers`` (volunteer classifications of the subject) and
    ``n_marked`` (those that clicked the object)."""
    obj = objects.copy()
    obj["n_viewers"] = q["n_classified"][obj["_gal"].to_numpy()]
    obj["n_marked"] = _marks_per_object(obj, clicks, q["sub"])
    write_table_csv(obj[list(OBJECT_COLUMNS)], out / "truth_objects.csv", {"x": ".3f", "y": ".3f"})
    vt = _volunteer_truth(
        q["volunteers"], ids["names"], ids["uids"], q["vol"], q["t"], ex["skills"],
        ids["e_names"], ids["e_uids"], ex["vol"], ex["t"], start,
    )  # fmt: skip
    write_table_csv(vt, out / "volunteers_truth.csv", {})
    if p["write_click_truth"]:
        write_click_truth(
            out / "truth_clicks.parquet",
            [(clicks, q["cls_id"], q["sub"], False), (ex["clicks"], ex["cls_id"], ex["sub"], True)],
            sid,
        )
    else:
        (out / "truth_clicks.parquet").unlink(missing_ok=True)  # no stale truth
    return obj


def objects_report(objects, vols, cls_vol, clicks, task: int = 1) -> dict:
    """Real objects by kind, the share of spurious clump-task clicks and the spammers."""
    t = clicks["task"].to_numpy() == task
    spurious = clicks["source"].isin(("spurious", "star", "bulge")).to_numpy(bool)[t]
    rep: dict[str, Any] = {
        "truth_objects_by_kind": {
            str(k): int(v) for k, v in objects["kind"].value_counts().sort_index().items()
        },
        "clump_task_clicks_spurious_share": float(spurious.mean()) if len(spurious) else 0.0,
    }
    if "spammer" in vols.columns:
        spam = vols["spammer"].to_numpy(bool)
        by_spam = spam[cls_vol[clicks["cls"].to_numpy()[t]]]
        rep["spammers"] = int(spam[np.unique(cls_vol)].sum())
        rep["spammer_classifications_fraction"] = float(spam[cls_vol].mean())
        rep["spammer_clicks_spurious_share"] = (
            float(spurious[by_spam].mean()) if by_spam.any() else 0.0
        )
    return rep


def _volunteer_truth(
    vols, names, uids, cls_vol, cls_t, experts, e_names, e_uids, e_vol, e_t, start
):
    n = len(vols)
    cnt = np.bincount(cls_vol, minlength=n)
    first = np.full(n, np.nan)
    last = np.full(n, np.nan)
    np.fmin.at(first, cls_vol, cls_t)
    np.fmax.at(last, cls_vol, cls_t)
    v = vols.copy()
    v.insert(0, "volunteer", names)
    v.insert(1, "user_id", uids)
    v.insert(2, "expert", False)
    v.insert(4, "n_classifications", cnt)
    ecnt = np.bincount(e_vol, minlength=len(experts)) if len(experts) else np.zeros(0, np.int64)
    e = experts.copy()
    e.insert(0, "volunteer", e_names)
    e.insert(1, "user_id", e_uids)
    e.insert(2, "expert", True)
    e.insert(4, "n_classifications", ecnt)
    e["n_planned"] = ecnt
    efirst = np.full(len(experts), np.nan)
    elast = np.full(len(experts), np.nan)
    if len(e_vol):
        np.fmin.at(efirst, e_vol, e_t)
        np.fmax.at(elast, e_vol, e_t)
    out = pd.concat([v, e], ignore_index=True)
    for col, arr in (
        ("first_classification", np.r_[first, efirst]),
        ("last_classification", np.r_[last, elast]),
    ):
        created, _ = format_times(np.nan_to_num(arr), start)
        out[col] = np.where(np.isnan(arr), "", np.asarray(created, dtype=object))
    return out[out["n_classifications"] > 0].reset_index(drop=True)


#: rows per row group of truth_clicks.parquet (pyarrow's default, so that the streamed file
#: is the one a whole-table write would give)
CLICK_TRUTH_ROW_GROUP = 1024 * 1024


def write_click_truth(path: Path, parts: list, sid: np.ndarray, row_group: int | None = None):
    """Write truth_clicks.parquet: the rows of :func:`_click_truth` of each part (clicks,
    classification ids, classification subjects, expert), one after the other, with
    ``task`` and ``source`` categorical, streamed one row group at a time (memory: a
    row group, not the project). With the default ``row_group``
    (:data:`CLICK_TRUTH_ROW_GROUP`) the bytes are those of writing the whole table with
    :func:`clumpscout.io.write_parquet`."""
    groups = [_click_groups(c["cls"].to_numpy(), c["task"].to_numpy()) for c, *_ in parts]
    cats = _click_truth_categories([c for c, *_ in parts])
    ends = np.cumsum([0] + [len(c) for c, *_ in parts])
    total = int(ends[-1])
    row_group = row_group or CLICK_TRUTH_ROW_GROUP
    writer = None
    with atomic_path(path) as tmp:
        try:
            for a in range(0, max(total, 1), row_group):
                b = min(total, a + row_group)
                pieces = []
                for (clicks, cls_id, cls_gal, expert), grp, lo, hi in zip(
                    parts, groups, ends[:-1], ends[1:], strict=True
                ):
                    i0, i1 = max(a, lo) - lo, min(b, hi) - lo
                    if i1 > i0 or (total == 0 and not pieces):
                        sl = slice(int(i0), int(max(i1, i0)))
                        pieces.append(
                            _click_truth(clicks.iloc[sl], cls_id, cls_gal, sid, expert, grp[sl])
                        )
                ct = pd.concat(pieces, ignore_index=True) if len(pieces) > 1 else pieces[0]
                for c in ("task", "source"):
                    ct[c] = ct[c].astype(cats[c])
                table = pa.Table.from_pandas(ct, preserve_index=False)
                if writer is None:
                    writer = pq.ParquetWriter(tmp, table.schema, **parquet_options(table.schema))
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()


def _click_groups(cls: np.ndarray, task: np.ndarray) -> np.ndarray:
    """Index of each click within its classification and task (clicks sorted by both)."""
    key = cls * 2 + task
    first = np.r_[True, key[1:] != key[:-1]]
    grp_start = np.maximum.accumulate(np.where(first, np.arange(len(cls)), 0))
    return np.arange(len(cls)) - grp_start


def _click_truth_categories(frames: list) -> dict:
    """The categories of ``task`` and ``source`` over every click (as a whole-table
    ``astype("category")`` gives them)."""
    task = np.unique(np.concatenate([f["task"].to_numpy() for f in frames]))
    src = pd.concat([f["source"].drop_duplicates() for f in frames], ignore_index=True)
    return {
        "task": pd.Series(np.where(task == 0, "T0", "T1")).astype("category").dtype,
        "source": src.astype("category").dtype,
    }


def _click_truth(clicks, cls_id, cls_gal, sid, expert, click_index):
    c = clicks["cls"].to_numpy()
    task = clicks["task"].to_numpy()
    return pd.DataFrame(
        {
            "classification_id": cls_id[c],
            "subject_id": sid[cls_gal[c]],
            "expert": np.full(len(c), expert),
            "task": np.where(task == 0, "T0", "T1"),
            "click": click_index,
            "x": clicks["x"].to_numpy().round(2),
            "y": clicks["y"].to_numpy().round(2),
            "tool": clicks["tool"].to_numpy(),
            "source": clicks["source"].to_numpy(),
            "double": clicks["double"].to_numpy(),
            "clump": clicks["clump"].to_numpy(),
            "distractor": clicks["distractor"].to_numpy(),
        }
    )


# --------------------------------------------------------------------------- reading it back


def truth_tables(universe: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(clumps, any real object) of a simulated universe, each with subject_id, kind, x, y.

    The objects table is ``truth_objects.csv`` when the simulator wrote one, else the
    true clumps plus every row of ``truth_distractors.csv`` (faint features, stars,
    bulges). The clumps table is ``truth_clumps.csv``, or the ``kind == "clump"`` rows of
    ``truth_objects.csv`` when there is no ``truth_clumps.csv``.
    """
    u = Path(universe)
    objects = None
    if (u / "truth_objects.csv").exists():
        objects = pd.read_csv(u / "truth_objects.csv")
        if "kind" not in objects.columns:
            objects["kind"] = "object"
    if (u / "truth_clumps.csv").exists():
        clumps = pd.read_csv(u / "truth_clumps.csv")
        clumps["kind"] = "clump"
    elif objects is not None:
        clumps = objects.loc[objects["kind"] == "clump"].reset_index(drop=True)
    else:
        raise FileNotFoundError(f"no truth_clumps.csv or truth_objects.csv in {u}")
    if objects is None:
        parts = [clumps[["subject_id", "kind", "x", "y"]]]
        if (u / "truth_distractors.csv").exists():
            d = pd.read_csv(u / "truth_distractors.csv")
            parts.append(d[["subject_id", "kind", "x", "y"]])
        else:
            log.warning("%s has no truth_distractors.csv: 'any object' = the clumps", u)
        objects = pd.concat(parts, ignore_index=True)
    return clumps, objects
