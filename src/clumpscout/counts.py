"""Objects per image from a consensus model's labels: the best-guess count and its range
(docs/decisions.md#project-report). Shared by the catalogue (clumpscout.catalogue) and the
project report (clumpscout.report.project); pandas only."""

from __future__ import annotations

import pandas as pd

#: a label counts as an object when its p_fp is below this (the best-guess count)
KEEP = 0.5


def count_table(subjects: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """One row per subject of ``subjects`` (in its order): ``labels``, ``kept`` (labels
    with p_fp < 0.5), ``expected_count`` and the count range ``count_low``, ``count_high``.

    The subjects' own ``count_low`` / ``count_high`` (clumpscout.model.calibration) when
    both are there; else count_low = labels with p_fp < 0.5 and p_weak < 0.5 (objects
    most volunteers marked), count_high = labels with p_fp < 0.5. ``expected_count`` is
    the subjects' own, else Σ (1 − p_fp) over the labels."""
    kept = labels["p_fp"] < KEEP
    weak = labels["p_weak"].fillna(0.0) if "p_weak" in labels else pd.Series(0.0, labels.index)
    per = pd.DataFrame(
        {
            "subject_id": labels["subject_id"].to_numpy(),
            "labels": 1,
            "kept": kept.astype(int).to_numpy(),
            "strong": (kept & (weak < KEEP)).astype(int).to_numpy(),
            "real": 1.0 - labels["p_fp"].to_numpy(float),
        }
    )
    g = per.groupby("subject_id").sum()
    out = subjects[["subject_id"]].reset_index(drop=True).join(g, on="subject_id").fillna(0)
    for c in ("labels", "kept", "strong"):
        out[c] = out[c].astype("int64")
    if "expected_count" in subjects:
        out["expected_count"] = subjects["expected_count"].to_numpy(float)
    else:
        out["expected_count"] = out["real"].to_numpy(float)
    own = "count_low" in subjects and "count_high" in subjects
    out["count_low"] = subjects["count_low"].to_numpy(float) if own else out["strong"]
    out["count_high"] = subjects["count_high"].to_numpy(float) if own else out["kept"]
    return out.drop(columns=["real", "strong"])
