"""Small array helpers shared by the aggregation and the evaluation (numpy only)."""

from __future__ import annotations

import numpy as np


def ranges(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, e)`` for every (s, e), vectorised."""
    starts = np.asarray(starts, np.int64)
    lens = np.asarray(ends, np.int64) - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    keep = lens > 0
    starts, lens = starts[keep], lens[keep]
    offs = np.repeat(starts - np.concatenate([[0], np.cumsum(lens)[:-1]]), lens)
    return offs + np.arange(total, dtype=np.int64)
