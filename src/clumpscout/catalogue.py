"""The catalogue a project takes away: one row per label, one row per image.

From the default model's output at the largest n (docs/decisions.md#project-report):

* ``catalogue.csv`` and ``catalogue.ecsv`` (the same rows, with units): subject, position,
  size, probability and marks of every label;
* ``images.csv``: per image the expected count and its range, the classifications used
  and whether it retired.

Columns: docs/tables.md#catalogue. When the labels carry a gold-standard calibration
(``p_empty``) and the subjects their own range (``count_low``, ``count_high``), those are
used; else the range is computed from the labels (:func:`count_table`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout.config import default
from clumpscout.counts import count_table
from clumpscout.ecsv import write_ecsv
from clumpscout.errors import InputError
from clumpscout.io import atomic_path

#: catalogue columns (those present are written, in this order), with their units
CATALOGUE_COLUMNS: dict[str, str | None] = {
    "subject_id": None,
    "label": None,
    "x": "pix",
    "y": "pix",
    "width": "pix",
    "height": "pix",
    "x1": "pix",
    "y1": "pix",
    "x2": "pix",
    "y2": "pix",
    "p_fp": None,
    "p_weak": None,
    "p_empty": None,
    "p_sigma": None,
    "n_marks": None,
    "tool": None,
}
IMAGE_COLUMNS = [
    "subject_id",
    "labels",
    "objects",
    "expected_count",
    "count_low",
    "count_high",
    "classifications",
    "retired",
    "status",
]


def catalogue_table(labels: pd.DataFrame) -> pd.DataFrame:
    """The labels as the catalogue writes them (:data:`CATALOGUE_COLUMNS`), sorted by
    subject and label."""
    t = labels.rename(columns={"clump": "label"}).copy()
    t["width"] = t["x2"] - t["x1"]
    t["height"] = t["y2"] - t["y1"]
    cols = [c for c in CATALOGUE_COLUMNS if c in t]
    return t[cols].sort_values(["subject_id", "label"], kind="stable").reset_index(drop=True)


def images_table(subjects: pd.DataFrame, labels: pd.DataFrame) -> pd.DataFrame:
    """One row per image (:data:`IMAGE_COLUMNS`), sorted by subject."""
    c = count_table(subjects, labels).rename(columns={"kept": "objects"})
    c["classifications"] = (
        subjects["n_volunteers"].to_numpy() if "n_volunteers" in subjects else pd.NA
    )
    status = subjects["status"].astype(str) if "status" in subjects else pd.Series("", c.index)
    c["retired"] = status.str.startswith("retired").to_numpy()
    c["status"] = status.to_numpy()
    return c[IMAGE_COLUMNS].sort_values("subject_id", kind="stable").reset_index(drop=True)


def ecsv_table(cat: pd.DataFrame, *, model: str, n: int):
    """The catalogue as an astropy Table with units (pixels of the subject image)."""
    import astropy.units as u
    from astropy.table import Table

    t = Table.from_pandas(cat)
    for col, unit in CATALOGUE_COLUMNS.items():
        if col in t.colnames and unit:
            t[col].unit = u.Unit(unit)
    t.meta["description"] = (
        "one row per label: position and size in subject-image pixels (x right, y down), "
        f"p_fp the probability that the label is not a real object; model {model}, "
        f"up to {n} classifications per image"
    )
    t.meta["model"] = model
    t.meta["n"] = int(n)
    return t


def write_catalogue(
    labels: pd.DataFrame,
    subjects: pd.DataFrame,
    out_dir: str | Path,
    *,
    model: str = default("aggregate.model"),
    n: int = 0,
) -> dict[str, Path]:
    """Write catalogue.csv, catalogue.ecsv and images.csv into ``out_dir`` (atomically)."""
    for what, df, cols in (
        ("labels", labels, ["subject_id", "clump", "x", "y", "x1", "y1", "x2", "y2", "p_fp"]),
        ("subjects", subjects, ["subject_id"]),
    ):
        missing = [c for c in cols if c not in df]
        if missing:
            raise InputError(f"{what}: missing column(s) {', '.join(missing)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cat = catalogue_table(labels)
    paths = {k: out / f for k, f in (("csv", "catalogue.csv"), ("ecsv", "catalogue.ecsv"))}
    paths["images"] = out / "images.csv"
    with atomic_path(paths["csv"]) as tmp:
        cat.to_csv(tmp, index=False)
    with atomic_path(paths["ecsv"]) as tmp:
        write_ecsv(ecsv_table(cat, model=model, n=n), tmp)
    with atomic_path(paths["images"]) as tmp:
        images_table(subjects, labels).to_csv(tmp, index=False)
    return paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--labels", required=True, help="labels.parquet of an aggregation")
    parser.add_argument("--subjects", required=True, help="subjects.parquet of the same run")
    parser.add_argument("--out", required=True, help="folder for catalogue.csv/.ecsv, images.csv")


def run(args: argparse.Namespace) -> int:
    labels = pd.read_parquet(args.labels)
    subjects = pd.read_parquet(args.subjects)
    n = int(np.max(subjects["n_volunteers"])) if "n_volunteers" in subjects and len(subjects) else 0
    write_catalogue(labels, subjects, args.out, n=n)
    return 0
