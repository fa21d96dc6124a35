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
            b = boxes if len(boxes) else empty
            k = len(b)
            cid.append(np.full(k, p * BIG + n, np.int64))
            sid.append(np.full(k, p, np.int64))
            vol.extend([volunteer] * k)
            blocks.append(b)
            w.append(np.full(k, pw))
            h.append(np.full(k, ph))
    if not blocks:
        return pd.DataFrame({c: [] for c in _COLUMNS})
    b = np.concatenate(blocks)
    return pd.DataFrame(
        {
            "classification_id": np.concatenate(cid),
            "subject_id": np.concatenate(sid),
            "volunteer": pd.array(vol, dtype="str"),
            "x1": b[:, 0], "y1": b[:, 1], "x2": b[:, 2], "y2": b[:, 3],
            "image_width": np.concatenate(w), "image_height": np.concatenate(h),
            "unusual": b[:, 4] > 0.5,
        }
    )  # fmt: skip
