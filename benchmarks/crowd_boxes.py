"""Bounding boxes in the Lean Crowdsourcing JSON format (Branson, Van Horn & Perona 2017).

The format of the public ``online_crowdsourcing`` data sets (e.g. the pedestrian boxes in
``../shared/data/crowd_boxes/lean_pedestrians``)::

    {"images": {image_id: {"width": W, "height": H, ...}},
     "annotations": [{"id": task, "worker": name,
                      "answer": {"images": {image_id: [[name, box], ...]}}}]}

A box is ``{"x", "y", "scaleX", "scaleY", "timestamp", ...}``: its **centre** (x, y) and its
width and height (pixels); ``timestamp`` in milliseconds. A ``null`` entry is skipped (and
counted); an empty list means the worker looked at the image and drew nothing.

:func:`read_crowd_boxes` turns a file into the boxes table of :mod:`clumpscout.data.boxes`
(one row per box, a coordinate-less row for an empty classification), each worker's answer
for one image being one classification; boxes are clipped to the image (people cut by the
frame edge run past it) and boxes with no area after clipping are dropped and counted.
:func:`read_crowd_gold` reads the experts' file of the same format as a gold-standard marks
table (:mod:`clumpscout.data.gold`): one row per expert box, an empty row for an image the
experts found empty.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout.errors import InputError


def _load(path: str | Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read the crowd-boxes JSON: {e}", path) from e
    for key in ("images", "annotations"):
        if key not in data:
            raise InputError(f"no {key!r} key: not a Lean Crowdsourcing boxes file", path)
    return data


def _rows(data: dict, path) -> tuple[pd.DataFrame, dict]:
    """One row per box (NaN coordinates: a classification with no box) and the counts."""
    images = data["images"]
    rows = []
    counts = {"annotations": 0, "null_boxes": 0, "empty_classifications": 0, "unknown_images": 0}
    for ann in data["annotations"]:
        counts["annotations"] += 1
        answers = ((ann.get("answer") or {}).get("images")) or {}
        for image_id, boxes in answers.items():
            if image_id not in images:
                counts["unknown_images"] += 1
                continue
            im = images[image_id]
            base = {
                "classification_id": f"{ann.get('id')}:{image_id}",
                "subject_id": int(image_id) if str(image_id).isdigit() else image_id,
                "volunteer": str(ann.get("worker")),
                "image_width": float(im["width"]),
                "image_height": float(im["height"]),
            }
            drawn = 0
            for entry in boxes or []:
                box = entry[1] if isinstance(entry, list) and len(entry) > 1 else None
                if not isinstance(box, dict):
                    counts["null_boxes"] += 1
                    continue
                try:
                    x, y = float(box["x"]), float(box["y"])
                    w, h = float(box["scaleX"]), float(box["scaleY"])
                except (KeyError, TypeError, ValueError) as e:
                    raise InputError(
                        f"annotation {ann.get('id')}, image {image_id}: bad box ({e})", path
                    ) from e
                t = box.get("timestamp")
                rows.append(
                    base
                    | {
                        "x1": x - w / 2,
                        "y1": y - h / 2,
                        "x2": x + w / 2,
                        "y2": y + h / 2,
                        "created_at": pd.to_datetime(t, unit="ms", utc=True) if t else pd.NaT,
                    }
                )
                drawn += 1
            if drawn == 0:
                counts["empty_classifications"] += 1
                rows.append(
                    base
                    | {"x1": np.nan, "y1": np.nan, "x2": np.nan, "y2": np.nan, "created_at": pd.NaT}
                )
    return pd.DataFrame(rows), counts


def _clip(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Boxes clipped to the image; boxes with no area left dropped (their count)."""
    df = df.copy()
    has = df["x1"].notna()
    df.loc[has, "x1"] = df.loc[has, "x1"].clip(lower=0)
    df.loc[has, "y1"] = df.loc[has, "y1"].clip(lower=0)
    df.loc[has, "x2"] = np.minimum(df.loc[has, "x2"], df.loc[has, "image_width"])
    df.loc[has, "y2"] = np.minimum(df.loc[has, "y2"], df.loc[has, "image_height"])
    bad = has & ~((df["x2"] > df["x1"]) & (df["y2"] > df["y1"]))
    return df.loc[~bad].reset_index(drop=True), int(bad.sum())


def read_crowd_boxes(path: str | Path) -> tuple[pd.DataFrame, dict]:
    """(boxes table, report) of a workers' file (module docstring)."""
    df, counts = _rows(_load(path), path)
    if not len(df):
        raise InputError("no boxes and no classifications in the file", path)
    n_box = int(df["x1"].notna().sum())
    before = df.drop_duplicates("classification_id")
    df, dropped = _clip(df)
    # a classification whose every box was dropped is still a view: one empty row
    gone = before.loc[~before["classification_id"].isin(df["classification_id"])].copy()
    gone[["x1", "y1", "x2", "y2"]] = np.nan
    gone["created_at"] = pd.NaT
    df = pd.concat([df, gone], ignore_index=True) if len(gone) else df
    counts.update({"boxes": n_box, "boxes_without_area": dropped})
    cols = ["classification_id", "subject_id", "volunteer", "x1", "y1", "x2", "y2",
            "image_width", "image_height", "created_at"]  # fmt: skip
    df = df[cols].sort_values(["subject_id", "classification_id"], kind="stable")
    # integer classification ids, 1.. in (image, task) order: the boxes table's contract
    codes, _ = pd.factorize(df["classification_id"], sort=False)
    df["classification_id"] = codes.astype(np.int64) + 1
    return df.reset_index(drop=True), counts


def read_crowd_gold(path: str | Path) -> pd.DataFrame:
    """The experts' file as a gold marks table (subject_id, x1, y1, x2, y2), clipped."""
    df, _ = _rows(_load(path), path)
    df, _ = _clip(df)
    # an image is empty for the experts when none of its rows has a box
    has = df.groupby("subject_id")["x1"].transform(lambda s: s.notna().any())
    df = df.loc[df["x1"].notna() | ~has].drop_duplicates(
        subset=["subject_id", "x1", "y1", "x2", "y2"]
    )
    return df[["subject_id", "x1", "y1", "x2", "y2"]].reset_index(drop=True)
