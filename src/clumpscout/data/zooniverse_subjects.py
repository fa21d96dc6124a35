"""The Zooniverse subject export: image sizes and metadata per subject (for
:mod:`clumpscout.data.zooniverse`; limits: :mod:`clumpscout.data.zooniverse_csv`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from clumpscout.data.zooniverse_csv import (
    bad_json_error,
    block_size,
    check_limits,
    first_true,
    json_depth_exceeds,
    loads_json,
    read_columns,
    read_header,
    short_repr,
    to_int,
)
from clumpscout.errors import InputError

# --------------------------------------------------------------------------- subjects export


def _clean_key(key: str) -> str:
    return str(key).lstrip("#!/ ").lower().replace(" ", "_")


_WIDTH_KEYS = ("image_width", "imagewidth", "naturalwidth", "width")
_HEIGHT_KEYS = ("image_height", "imageheight", "naturalheight", "height")
_SIZE_KEYS = ("image_size", "imagesize")


def side_number(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    try:
        f = float(v)
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return f if 0 < f < 2**31 else math.nan  # an image side in pixels (NaN, inf: unknown)


def metadata_image_size(md: dict) -> tuple[float, float]:
    """(width, height) from subject metadata keys such as ``#image_width`` or ``image_size``.

    Hidden-metadata prefixes (``#``, ``!``, ``//``) and case are ignored. NaN when absent.
    """
    if not isinstance(md, dict):
        return math.nan, math.nan
    clean = {_clean_key(k): v for k, v in md.items()}
    w = next((side_number(clean[k]) for k in _WIDTH_KEYS if k in clean), math.nan)
    h = next((side_number(clean[k]) for k in _HEIGHT_KEYS if k in clean), math.nan)
    size = next((side_number(clean[k]) for k in _SIZE_KEYS if k in clean), math.nan)
    if math.isnan(w):
        w = size
    if math.isnan(h):
        h = size if not math.isnan(size) else w
    return w, h


def metadata_value(md: dict, names: Iterable[str]) -> Any:
    """The first of ``names`` present in metadata ``md`` (prefix- and case-insensitive)."""
    if not isinstance(md, dict):
        return None
    clean = {_clean_key(k): v for k, v in md.items()}
    for n in names:
        if n in clean:
            return clean[n]
    return None


def _check_subject_metadata(
    path: object, rows: np.ndarray, metadata: pa.ChunkedArray, limits: Mapping[str, Any]
) -> None:
    """InputError naming the row and the limit for a metadata field too large."""
    size = np.asarray(pc.binary_length(metadata).to_numpy(zero_copy_only=False), dtype=np.int64)
    big = size > limits["max_field_bytes"]
    if big.any():
        i = first_true(big)
        raise InputError(
            f"metadata field of {int(size[i]):,} bytes is larger than the limit "
            f"extract.max_field_bytes = {limits['max_field_bytes']:,}",
            path=path,
            row=int(rows[i]),
        )


def read_subjects_export(path: str | Path, limits: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """A Zooniverse subject export -> one row per subject_id (first row of each subject).

    Columns: subject_id (int64), metadata (dict), image_width, image_height (float, NaN when the
    metadata does not say), ra, dec (float, NaN when absent), row (1-based data row).
    A subject appears once per subject set / workflow link in real exports; the first row wins.
    A metadata field beyond ``limits`` (:func:`check_limits`: ``max_field_bytes``,
    ``max_json_depth``) is an :class:`InputError` naming the row and the limit.
    """
    limits = check_limits(limits)
    header = read_header(path)
    missing = [c for c in ("subject_id", "metadata") if c not in header]
    if missing:
        raise InputError(
            f"not a Zooniverse subject export: missing column(s) {', '.join(missing)} "
            f"(found: {short_repr(', '.join(header), 300)})",
            path=path,
            row=0,
        )
    tab = read_columns(
        path, ["subject_id", "metadata"], len(header), block_size(limits["max_field_bytes"])
    )
    if tab.num_rows == 0:
        raise InputError("no subjects (the file has only a header)", path=path)
    rows = np.arange(1, tab.num_rows + 1)
    sid = to_int(tab.column("subject_id"), "subject_id", path)
    first = np.sort(np.unique(sid, return_index=True)[1])
    metadata = tab.column("metadata").take(pa.array(first))
    _check_subject_metadata(path, rows[first], metadata, limits)
    texts = metadata.to_pylist()
    mds, ws, hs, ras, decs = [], [], [], [], []
    depth = limits["max_json_depth"]
    for i, text in zip(first, texts, strict=True):
        if json_depth_exceeds(text, depth):
            raise InputError(
                f"metadata nests deeper than the limit extract.max_json_depth = {depth}",
                path=path,
                row=int(rows[i]),
            )
        try:
            md = loads_json(text) if text.strip() else {}
        except ValueError:
            raise bad_json_error(path, int(rows[i]), "metadata", text) from None
        if not isinstance(md, dict):
            md = {}
        w, h = metadata_image_size(md)
        mds.append(md)
        ws.append(w)
        hs.append(h)
        ras.append(_as_float(metadata_value(md, ("ra", "ra_deg"))))
        decs.append(_as_float(metadata_value(md, ("dec", "dec_deg"))))
    return pd.DataFrame(
        {
            "subject_id": sid[first],
            "metadata": mds,
            "image_width": np.array(ws, dtype=float),
            "image_height": np.array(hs, dtype=float),
            "ra": np.array(ras, dtype=float),
            "dec": np.array(decs, dtype=float),
            "row": rows[first],
        }
    )


def _as_float(v: Any) -> float:
    if isinstance(v, bool) or v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return math.nan
