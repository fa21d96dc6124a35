"""The clicks table that :func:`clumpscout.data.boxes.make_boxes` reads: ``clumpscout extract``'s
Parquet or a flattened CSV (workflow ``source: clicks``), read and checked (ids, coordinates,
one subject and one volunteer per classification, drawn extents, the image size it carries).
Row numbers follow :mod:`clumpscout.errors`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.errors import InputError

log = logging.getLogger(__name__)

CLICK_REQUIRED = ("classification_id", "subject_id", "volunteer", "x", "y")
EXTENT_COLUMNS = ("x1", "y1", "x2", "y2")


#: image-size columns a clicks table may carry (extract's, then a flattened table's)
SIZE_COLUMNS = (("natural_width", "natural_height"), ("image_width", "image_height"))


def check_columns(df: pd.DataFrame, required: tuple[str, ...], what: str, path: object) -> None:
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(
            f"{what} table lacks column(s) {', '.join(missing)} (has: {', '.join(map(str, df.columns))})",
            path=path,
        )


def row_base(path: object) -> int:
    """Row numbering of a file (clumpscout.errors): 1 for the data rows of a CSV, else 0."""
    name = str(path or "").lower()
    return 1 if name.endswith((".csv", ".csv.gz", ".tsv", ".txt")) else 0


def _rows_text(positions: np.ndarray, base: int, n: int = 10) -> str:
    rows = [str(int(p) + base) for p in positions[:n]]
    more = f" ... ({len(positions) - n} more)" if len(positions) > n else ""
    return ", ".join(rows) + more


def _value(v: Any) -> str:
    """A cell for an error message: text quoted, numbers as written."""
    return repr(v) if isinstance(v, str) else str(v)


def int_column(clicks: pd.DataFrame, col: str, path: object, base: int) -> np.ndarray:
    """An id column as int64; a missing or non-integer value is an error naming its row."""
    s = clicks[col]
    if pd.api.types.is_integer_dtype(s.dtype) and not s.isna().any():
        return s.to_numpy(dtype=np.int64)
    num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isfinite(num) | (num != np.round(num))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        v = s.iloc[i]
        what = "is missing" if pd.isna(v) else f"{_value(v)} is not an integer"
        raise InputError(f"{col} {what}", path=path, row=i + base)
    return num.astype(np.int64)


def click_coordinates(
    clicks: pd.DataFrame, path: object, base: int
) -> tuple[np.ndarray, np.ndarray]:
    """x, y as float (NaN: no mark); not a number, infinite, or only one of the two: an error."""
    out = []
    for col in ("x", "y"):
        s = clicks[col]
        num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = np.isnan(num) & s.notna().to_numpy()
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{col} {_value(s.iloc[i])} is not a number", path=path, row=i + base)
        if np.isinf(num).any():
            i = int(np.flatnonzero(np.isinf(num))[0])
            raise InputError(f"{col} is not finite ({num[i]})", path=path, row=i + base)
        out.append(num)
    x, y = out
    half = np.isnan(x) != np.isnan(y)
    if half.any():
        i = int(np.flatnonzero(half)[0])
        raise InputError(
            "a click has one of x, y and not the other (a classification that marked nothing "
            "has both empty)",
            path=path,
            row=i + base,
        )
    return x, y


def volunteer_codes(clicks: pd.DataFrame) -> tuple[pd.Series, np.ndarray]:
    """The volunteer column as strings (NA kept) and which rows have none (NA or blank)."""
    v = clicks["volunteer"].astype("str").reset_index(drop=True)
    missing = v.isna().to_numpy() | (v.fillna("x").str.strip() == "").to_numpy()
    v = v.mask(missing)
    return v, missing


def check_classifications(
    cid: np.ndarray,
    sid: np.ndarray,
    vol: pd.Series,
    vol_missing: np.ndarray,
    path: object,
    base: int,
) -> int:
    """One subject and one volunteer per classification (an error naming the classification
    and its rows otherwise); returns the number of classifications without a volunteer."""
    n = len(cid)
    if n == 0:
        return 0
    order = np.argsort(cid, kind="stable")
    cs = cid[order]
    start = np.r_[True, cs[1:] != cs[:-1]]
    group = np.cumsum(start) - 1
    first = np.flatnonzero(start)

    def rows_of(g: int) -> np.ndarray:
        return np.sort(order[group == g])

    ss = sid[order]
    bad = ss != ss[first][group]
    if bad.any():
        g = int(group[np.flatnonzero(bad)[0]])
        rows = rows_of(g)
        raise InputError(
            f"classification {cs[first[g]]} appears under subjects "
            f"{', '.join(map(str, pd.unique(sid[rows])[:5]))} (rows {_rows_text(rows, base)}); "
            "a classification belongs to one subject",
            path=path,
        )
    miss = vol_missing[order]
    any_miss = np.logical_or.reduceat(miss, first)
    all_miss = np.logical_and.reduceat(miss, first)
    partial = any_miss & ~all_miss
    if partial.any():
        g = int(np.flatnonzero(partial)[0])
        rows = rows_of(g)
        without = rows[vol_missing[rows]]
        with_ = rows[~vol_missing[rows]]
        raise InputError(
            f"classification {cs[first[g]]}: volunteer is missing on row(s) "
            f"{_rows_text(without, base)} but {vol.iloc[with_[0]]!r} on row(s) "
            f"{_rows_text(with_, base)}; give every row of a classification its volunteer",
            path=path,
        )
    codes = pd.factorize(vol)[0][order]
    bad = (codes != codes[first][group]) & ~miss
    if bad.any():
        g = int(group[np.flatnonzero(bad)[0]])
        rows = rows_of(g)
        names = ", ".join(repr(v) for v in pd.unique(vol.iloc[rows])[:5])
        raise InputError(
            f"classification {cs[first[g]]} has several volunteers ({names}; rows "
            f"{_rows_text(rows, base)}); a classification is one volunteer's",
            path=path,
        )
    return int(all_miss.sum())


def clicks_sizes(clicks: pd.DataFrame) -> pd.DataFrame:
    """Most common image size per subject among its classifications, from the clicks table's
    ``natural_width/height`` (extract) or else ``image_width/height`` (a flattened table)."""
    empty = pd.DataFrame({"subject_id": [], "w": [], "h": []})
    for wc, hc in SIZE_COLUMNS:
        if wc not in clicks.columns or hc not in clicks.columns:
            continue
        d = pd.DataFrame(
            {
                "subject_id": clicks["subject_id"].to_numpy(),
                "classification_id": clicks["classification_id"].to_numpy(),
                "w": pd.to_numeric(clicks[wc], errors="coerce").to_numpy(float, na_value=np.nan),
                "h": pd.to_numeric(clicks[hc], errors="coerce").to_numpy(float, na_value=np.nan),
            }
        )
        d = d[(d["w"] > 0) & (d["h"] > 0)].drop_duplicates(["subject_id", "classification_id"])
        if d.empty:
            continue
        counts = d.groupby(["subject_id", "w", "h"]).size().reset_index(name="n")
        counts = counts.sort_values(
            ["subject_id", "n", "w", "h"], ascending=[True, False, True, True]
        )
        best = counts.drop_duplicates("subject_id")
        return pd.DataFrame(
            {
                "subject_id": best["subject_id"].to_numpy(dtype=np.int64),
                "w": best["w"].to_numpy(dtype=float),
                "h": best["h"].to_numpy(dtype=float),
            }
        )
    return empty


def drawn_extents(clicks: pd.DataFrame, path: object = None) -> np.ndarray:
    """Rows of ``clicks`` that carry a drawn extent (finite ``x1, y1, x2, y2`` and a centre).

    A row with only some of the four, or with ``x2 <= x1`` or ``y2 <= y1``, is an
    :class:`InputError` naming it.
    """
    if not set(EXTENT_COLUMNS) <= set(clicks.columns):
        return np.zeros(len(clicks), dtype=bool)
    e = np.column_stack(
        [
            pd.to_numeric(clicks[c], errors="coerce").to_numpy(float, na_value=np.nan)
            for c in EXTENT_COLUMNS
        ]
    )
    finite = np.isfinite(e)
    x = pd.to_numeric(clicks["x"], errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    has = finite.all(axis=1) & np.isfinite(x)
    bad = (finite.any(axis=1) & ~has) | (has & ~((e[:, 2] > e[:, 0]) & (e[:, 3] > e[:, 1])))
    if bad.any():
        raise InputError(
            "a drawn extent (x1, y1, x2, y2) is incomplete or has x2 <= x1 or y2 <= y1",
            path=path,
            row=int(np.flatnonzero(bad)[0]) + row_base(path),
        )
    return has


def has_shapes(clicks: pd.DataFrame) -> bool:
    """Do the clicks hold marks other than points (column ``shape``)?"""
    if "shape" not in clicks.columns:
        return False
    s = clicks["shape"]
    return bool((s.notna() & (s.astype("str") != "point")).any())


# --------------------------------------------------------------------------- reading


def read_clicks(path: str | Path) -> pd.DataFrame:
    """A clicks table: Parquet (``clumpscout extract``) or a flattened CSV (a name ending in
    .csv, .csv.gz, .tsv or .txt) with at least the columns of :data:`CLICK_REQUIRED`."""
    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", path=path)
    try:
        if row_base(p):
            sep = "\t" if p.name.lower().endswith(".tsv") else ","
            return pd.read_csv(p, sep=sep, dtype={"volunteer": "str"}, keep_default_na=True)
        return pd.read_parquet(p)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        kind = "CSV" if row_base(p) else "Parquet"
        raise InputError(f"cannot read {kind} file: {exc}", path=path) from None


def load_flat_clicks(path: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A flattened clicks table (workflow ``source: clicks``) checked as :func:`make_boxes`
    checks it, with typed columns (ids int64, volunteer str, x and y float; the other columns
    as read), and a report of what it holds. Nothing is dropped."""
    clicks = read_clicks(path).reset_index(drop=True)
    check_columns(clicks, CLICK_REQUIRED, "clicks", path)
    base = row_base(path)
    cid = int_column(clicks, "classification_id", path, base)
    sid = int_column(clicks, "subject_id", path, base)
    x, y = click_coordinates(clicks, path, base)
    vol, vol_missing = volunteer_codes(clicks)
    no_volunteer = check_classifications(cid, sid, vol, vol_missing, path, base)
    drawn_extents(clicks, path)
    clicks = clicks.assign(classification_id=cid, subject_id=sid, volunteer=vol, x=x, y=y)
    if "unusual" in clicks.columns:
        clicks["unusual"] = clicks["unusual"].astype("boolean")
    empty = np.isnan(x)
    report = {
        "clicks_table": str(path),
        "rows_read": int(len(clicks)),
        "clicks_kept": int((~empty).sum()),
        "empty_classifications": int(empty.sum()),
        "classifications_kept": int(len(np.unique(cid))),
        "classifications_without_volunteer": no_volunteer,
        "subjects": int(len(np.unique(sid))),
        "volunteers": int(vol.dropna().nunique()),
    }
    log.info(
        "%s: %d clicks and %d empty classifications of %d subjects",
        path,
        report["clicks_kept"],
        report["empty_classifications"],
        report["subjects"],
    )
    return clicks, report
