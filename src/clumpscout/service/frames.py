"""The boxes table the model reads, made of stored classifications (one subject per prefix)."""

from __future__ import annotations

import numpy as np
import pandas as pd

#: classification ids of the assessed frames: prefix * BIG + n (unique, ordered by n)
BIG = 1 << 24
_COLUMNS = ("classification_id", "subject_id", "volunteer", "x1", "y1", "x2", "y2",
            "image_width", "image_height", "unusual")  # fmt: skip


def frame_of(pairs: list[tuple[int, list[tuple[int, str, np.ndarray]]]], sizes) -> pd.DataFrame:
    """The boxes table the model reads: for each (prefix index, classifications) one
    subject (subject_id = prefix index) holding those classifications (n, volunteer,
    boxes); a classification without a box is one row without coordinates.
    ``sizes``: (width, height) per prefix."""
    cid, sid, vol, blocks, w, h = [], [], [], [], [], []
    empty = np.full((1, 5), np.nan)
    empty[0, 4] = 0.0
    for (p, cls), (pw, ph) in zip(pairs, sizes, strict=True):
        for n, volunteer, boxes in cls:
            blocks.append(boxes if len(boxes) else empty)
            cid.append(p * BIG + n)
            sid.append(p)
            vol.append(volunteer)
            w.append(pw)
            h.append(ph)
    if not blocks:
        return pd.DataFrame({c: [] for c in _COLUMNS})
    b = np.concatenate(blocks)
    k = np.fromiter((len(x) for x in blocks), np.int64, len(blocks))  # rows per classification

    def rows(values, dtype):  # one value per classification, repeated on its rows
        return np.repeat(np.asarray(values, dtype=dtype), k)

    return pd.DataFrame(
        {
            "classification_id": rows(cid, np.int64),
            "subject_id": rows(sid, np.int64),
            "volunteer": pd.array(rows(vol, object), dtype="str"),
            "x1": b[:, 0], "y1": b[:, 1], "x2": b[:, 2], "y2": b[:, 3],
            "image_width": rows(w, np.float64), "image_height": rows(h, np.float64),
            "unusual": b[:, 4] > 0.5,
        }
    )  # fmt: skip
