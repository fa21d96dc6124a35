"""The project report: what a project team reads first about its own data.

The report of a project that is not Clump Scout (docs/decisions.md#project-report) has one
section per question, each a figure, a table and a caption written from the config and the
data (no paper wording): objects per image with their count range, how much to trust a
label, example images, the volunteers, what was dropped and why, how well the gold standard
(when one was given) agrees with the volunteers, what early retirement
would have saved (when a replay ran) and, last, the other methods side by side. Every
section but the last reads the default model's output
(``results/aggregate/generative/n<largest n>/``); the last is the only one that shows the
paper's model and the baselines.

:func:`build` writes ``<stem>.png`` / ``.pdf`` (the figure), ``<stem>.csv`` (the table) and
``<stem>.json`` (title, caption, the numbers shown and the input files read), which
:mod:`clumpscout.report.html` puts together.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm, Normalize
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

from clumpscout.counts import KEEP, count_table
from clumpscout.errors import InputError
from clumpscout.figures.common import (
    new_figure,
    no_data,
    output_paths,
    read_table,
    save_figure,
)
from clumpscout.figures.gold import (
    agreement_summary,
    agreement_table,
    gold_check_of,
    plot_agreement,
)
from clumpscout.io import atomic_path, write_json
from clumpscout.logs import timed

log = logging.getLogger(__name__)

#: the model every section but the comparison reads (the workflow's default model)
DEFAULT_MODEL = "generative"


def plural(noun: str) -> str:
    """English plural of a simple noun ("penguin" -> "penguins", "galaxy" -> "galaxies")."""
    noun = noun.strip()
    if noun.endswith(("s", "x", "z", "ch", "sh")):
        return noun + "es"
    if noun.endswith("y") and len(noun) > 1 and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def words(params: Mapping[str, Any]) -> dict[str, str]:
    """What an object is called (config ``figures.object_name``), singular and plural."""
    obj = str(params.get("object_name") or "object")
    return {"object": obj, "objects": plural(obj)}


# ------------------------------------------------------------------------------ counts


def _n(k: int, one: str, many: str) -> str:
    """``1 mark lies`` / ``3 marks lie``: a count with its noun phrase."""
    return f"{k:,} {one if k == 1 else many}"


def plot_counts(counts: pd.DataFrame, w: Mapping[str, str], dpi: int) -> dict:
    """Left: how many images hold k objects (kept labels); right: every image's expected
    count with its range, images sorted by it."""
    fig = new_figure(10.0, 3.8, dpi)
    ax1, ax2 = fig.subplots(1, 2)
    k = counts["kept"].to_numpy(int)
    if k.size:
        edges = np.arange(-0.5, k.max() + 1.5, 1.0)
        ax1.hist(k, bins=edges, color="tab:blue", ec="white", lw=0.5)
    else:
        no_data(ax1)
    ax1.set_xlabel(f"{w['objects']} per image (labels with p_fp < {KEEP:g})")
    ax1.set_ylabel("images")
    ax1.yaxis.set_major_locator(MaxNLocator(integer=True))
    c = counts.sort_values(["kept", "expected_count", "subject_id"]).reset_index(drop=True)
    x = np.arange(len(c))
    if len(c):
        lo, hi = c["count_low"].to_numpy(float), c["count_high"].to_numpy(float)
        ax2.vlines(x, lo, hi, color="0.6", lw=1.5, label="count range")
        ax2.plot(x, c["kept"], "o", ms=3, color="tab:blue", label=f"labels with p_fp < {KEEP:g}")
        ax2.plot(
            x,
            c["expected_count"],
            "o",
            ms=4,
            mfc="none",
            color="tab:orange",
            label="expected count",
        )
        ax2.legend(loc="upper left", fontsize=8)
    else:
        no_data(ax2)
    ax2.set_xlabel(f"images, sorted by {w['objects']} counted")
    ax2.set_ylabel(f"{w['objects']} in the image")
    return {
        "images": int(len(counts)),
        "images_with_objects": int((counts["kept"] > 0).sum()),
        "kept_total": int(counts["kept"].sum()),
        "expected_total": float(counts["expected_count"].sum()),
        "low_total": float(counts["count_low"].sum()),
        "high_total": float(counts["count_high"].sum()),
        "kept_median": float(np.median(k)) if k.size else float("nan"),
        "kept_max": int(k.max()) if k.size else 0,
    }, fig


def build_counts(inp, params):
    w = words(params)
    subjects = read_table(inp["subjects"], ["subject_id"], "subjects", None)
    labels = read_table(inp["labels"], ["subject_id", "p_fp"], "labels", None)
    counts = count_table(subjects, labels)
    stats, fig = plot_counts(counts, w, params["dpi"])
    own = "count_low" in subjects and "count_high" in subjects
    table = pd.DataFrame(
        [
            ("images", f"{stats['images']:,}"),
            (f"images with at least one {w['object']}", f"{stats['images_with_objects']:,}"),
            (f"{w['objects']} (labels with p_fp < {KEEP:g})", f"{stats['kept_total']:,}"),
            (f"expected number of {w['objects']}", f"{stats['expected_total']:,.1f}"),
            (
                "count range, summed over images",
                f"{stats['low_total']:,.0f} – {stats['high_total']:,.0f}",
            ),
            (f"{w['objects']} per image: median", f"{stats['kept_median']:g}"),
            (f"{w['objects']} per image: largest", f"{stats['kept_max']:,}"),
        ],
        columns=["quantity", "value"],
    )
    rng = (
        "the model's own count range: at the low end only the labels most volunteers marked, "
        "at the high end every marked label (count_low, count_high in images.csv)"
        if own
        else (
            f"from the labels with p_fp < {KEEP:g}, at the low end only those most volunteers "
            f"marked (p_weak < {KEEP:g}), at the high end all of them"
        )
    )
    caption = (
        f"How many {w['objects']} each image holds. Left: images by the number of labels "
        f"with p_fp < {KEEP:g} (the best-guess count). Right: every image's best-guess count "
        f"(blue) with its count range (grey bar): {rng}; orange circles: the expected number "
        f"of {w['objects']}, the sum over the labels of the probability that each is real plus "
        f"the {w['objects']} the model expects every volunteer to have missed (so it can lie "
        f"above the range). Per image: images.csv; per label: catalogue.csv."
    )
    return fig, table, caption, stats


# ------------------------------------------------------------------------------ p_fp


def probability_sentence(w: Mapping[str, str], gold: bool) -> str:
    """What p_fp means, in plain words, with and without a gold standard."""
    if gold:
        return (
            f"p_fp is calibrated against the gold standard given in the config: it is the "
            f"probability that a label is not a real {w['object']} as the project's experts "
            f"count {w['objects']}. Of 100 labels with p_fp = 0.2, about 20 are not "
            f"{w['objects']} by the experts' count."
        )
    return (
        f"p_fp is the probability that a label is not a real {w['object']}, estimated from "
        f"the volunteers' agreement alone: a spot several independent volunteers marked gets "
        f"a small p_fp, weighed by how often each volunteer misses or adds marks. No gold "
        f"standard was given (config key gold), so nothing says whether the things only a "
        f"few volunteers marked are {w['objects']} your experts would count: each such label "
        f"is taken as three chances in four of being one (config calibration.weak_real) and "
        f"the count range shows how much rests on that. Fifty to a hundred images marked or "
        f"counted by experts (config key gold) would settle it."
    )


BINS = (0.0, 0.05, 0.2, 0.5, 0.8, 0.95, 1.0)


def build_probability(inp, params):
    w = words(params)
    labels = read_table(inp["labels"], ["subject_id", "p_fp"], "labels", None)
    p = labels["p_fp"].to_numpy(float)
    fig = new_figure(7.0, 3.6, dpi=params["dpi"])
    ax = fig.subplots()
    if p.size:
        ax.hist(p, bins=np.linspace(0, 1, 41), color="tab:blue", ec="white", lw=0.4)
        ax.set_yscale("log")
        ax.set_ylim(bottom=0.7)
        ax.axvline(KEEP, color="k", ls="--", lw=1)
        ax.text(KEEP, 1.0, f" {KEEP:g}", transform=ax.get_xaxis_transform(), va="top", fontsize=8)
    else:
        no_data(ax)
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"p_fp: probability that the label is not a real {w['object']}")
    ax.set_ylabel("labels")
    rows = []
    cut = pd.cut(labels["p_fp"], BINS, right=False, include_lowest=True)
    counts = cut.value_counts(sort=False)
    for (lo, hi), n in zip(zip(BINS[:-1], BINS[1:], strict=True), counts.to_numpy(), strict=True):
        rows.append(
            {
                "p_fp": f"{lo:g} – {hi:g}" + (" (incl.)" if hi == 1.0 else ""),
                "labels": int(n),
                "share": f"{100 * n / max(len(p), 1):.1f}%",
            }
        )
    # p_fp == 1 exactly falls outside right-open bins: count it in the last
    rows[-1]["labels"] += int((p >= 1.0).sum())
    rows[-1]["share"] = f"{100 * rows[-1]['labels'] / max(len(p), 1):.1f}%"
    table = pd.DataFrame(rows)
    extra = []
    if "p_weak" in labels:
        weak = int(((labels["p_fp"] < KEEP) & (labels["p_weak"].fillna(0) >= KEEP)).sum())
        extra.append(
            f"{weak:,} of the labels with p_fp < {KEEP:g} have p_weak ≥ {KEEP:g}: real "
            f"{w['objects']} by the model, but of the kind most volunteers miss (faint, small "
            "or partly hidden)."
        )
    if "p_empty" in labels:
        extra.append(
            "p_empty (in catalogue.csv) is the probability that nothing at all is at the "
            "label's place."
        )
    stats = {
        "labels": int(p.size),
        "below_keep": int((p < KEEP).sum()),
        "median": float(np.median(p)) if p.size else float("nan"),
        "gold": bool(params.get("gold")),
    }
    caption = (
        f"How much to trust each label: the distribution of p_fp over the {p.size:,} labels "
        f"(logarithmic count axis; dashed: {KEEP:g}). {probability_sentence(w, stats['gold'])} "
        f"{stats['below_keep']:,} labels have p_fp < {KEEP:g}. " + " ".join(extra)
    ).strip()
    return fig, table, caption, stats


# ------------------------------------------------------------------------------ examples

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".tif", ".tiff", ".webp")


def subject_file_names(subjects_export: str | Path | None) -> dict[int, list[str]]:
    """Subject id -> the file names the subject export gives it: every metadata value that
    names an image file, then the file name of every location URL."""
    if not subjects_export or not Path(subjects_export).exists():
        return {}
    head = pd.read_csv(subjects_export, nrows=0).columns
    use = [c for c in ("subject_id", "metadata", "locations") if c in head]
    if "subject_id" not in use:
        return {}
    t = pd.read_csv(subjects_export, usecols=use, dtype=str)
    out: dict[int, list[str]] = {}
    for row in t.itertuples(index=False):
        try:
            sid = int(float(row.subject_id))
        except (TypeError, ValueError):
            continue
        names: list[str] = []
        for col in ("metadata", "locations"):
            text = getattr(row, col, None)
            try:
                d = json.loads(text) if isinstance(text, str) else {}
            except ValueError:
                d = {}
            for v in d.values() if isinstance(d, dict) else []:
                if isinstance(v, str) and Path(v.split("?")[0]).suffix.lower() in _IMAGE_SUFFIXES:
                    names.append(Path(v.split("?")[0]).name)
        out.setdefault(sid, []).extend(names)
    return out


def find_subject_images(
    folder: str | Path | None, subject_ids: Sequence[int], names: Mapping[int, Sequence[str]]
) -> dict[int, Path]:
    """The image of each subject in ``folder``: a file named as the subject export names it
    (exact name, else the same stem with any image suffix, case-insensitive), else
    ``<subject_id>.<suffix>``. Subjects without one are absent."""
    if not folder or not Path(folder).is_dir():
        return {}
    files = sorted(
        f for f in Path(folder).rglob("*") if f.is_file() and f.suffix.lower() in _IMAGE_SUFFIXES
    )
    by_name = {f.name.lower(): f for f in reversed(files)}
    by_stem = {f.stem.lower(): f for f in reversed(files)}
    out = {}
    for sid in subject_ids:
        for name in [*names.get(int(sid), []), str(sid)]:
            f = by_name.get(name.lower()) or by_stem.get(Path(name).stem.lower())
            if f is not None:
                out[int(sid)] = f
                break
    return out


def pick_by_count(counts: pd.DataFrame, k: int) -> list[int]:
    """``k`` images spread over the range of counts: the images at evenly spaced quantiles
    of the kept-label count (ties by subject id), so a reader sees sparse and crowded ones."""
    c = counts.sort_values(["kept", "subject_id"]).reset_index(drop=True)
    if len(c) <= k:
        return c["subject_id"].astype(int).tolist()
    pos = np.unique(np.round(np.linspace(0, len(c) - 1, k)).astype(int))
    return sorted(int(s) for s in c.loc[pos, "subject_id"])


def _aspect(marks: pd.DataFrame, files: Mapping[int, Path]) -> float:
    """Height / width of the example images (the first image file's, else the median of the
    sizes the marks carry; 0.75 when nothing says), kept within [0.3, 1.5]."""
    from PIL import Image

    for f in files.values():
        with Image.open(f) as im:
            return float(np.clip(im.height / im.width, 0.3, 1.5))
    if {"image_width", "image_height"} <= set(marks.columns):
        r = (marks["image_height"] / marks["image_width"]).dropna()
        if len(r):
            return float(np.clip(r.median(), 0.3, 1.5))
    return 0.75


def build_examples(inp, params):
    from PIL import Image

    w = words(params)
    subjects = read_table(inp["subjects"], ["subject_id"], "subjects", None)
    labels = read_table(
        inp["labels"], ["subject_id", "x1", "y1", "x2", "y2", "p_fp"], "labels", None
    )
    a = read_table(
        inp["assignments"],
        ["subject_id", "x", "y", "x1", "y1", "x2", "y2"],
        "assignments",
        ["image_width", "image_height", "shape", "classification_id"],
    )
    counts = count_table(subjects, labels)
    ids = pick_by_count(counts, int(params.get("n_examples", 4)))
    names = subject_file_names(inp.get("subjects_export") or params.get("subjects_export"))
    files = find_subject_images(params.get("subject_images"), ids, names)
    ncol = 2 if len(ids) > 1 else 1
    nrow = max(1, -(-len(ids) // ncol))
    aspect = _aspect(a[a["subject_id"].isin(ids)], files)
    fig = new_figure(5.2 * ncol, (5.0 * aspect + 0.45) * nrow, params["dpi"])
    axes = np.atleast_1d(fig.subplots(nrow, ncol, squeeze=False)).ravel()
    rows = []
    for ax in axes[len(ids) :]:
        ax.set_axis_off()
    if not ids:
        no_data(axes[0], "no images")
    for ax, sid in zip(axes, ids, strict=False):
        b = a[a["subject_id"] == sid]
        lab = labels[labels["subject_id"] == sid]
        img = None
        if sid in files:
            with Image.open(files[sid]) as im:
                img = np.asarray(im.convert("RGB"))
        wd = b["image_width"].dropna() if "image_width" in b else pd.Series(dtype=float)
        ht = b["image_height"].dropna() if "image_height" in b else pd.Series(dtype=float)
        if img is not None:
            width, height = float(img.shape[1]), float(img.shape[0])
        elif len(wd) and len(ht):
            width, height = float(wd.iloc[0]), float(ht.iloc[0])
        else:  # no size anywhere: the marks' extent
            width = float(np.nanmax(b[["x2"]].to_numpy(), initial=100.0)) * 1.05
            height = float(np.nanmax(b[["y2"]].to_numpy(), initial=100.0)) * 1.05
        if img is not None:
            ax.imshow(img, extent=(0, width, height, 0), interpolation="antialiased")
        else:
            ax.add_patch(Rectangle((0, 0), width, height, fc="white", ec="0.5", lw=0.8))
        marks = b.dropna(subset=["x", "y"])
        shaped = marks["shape"].fillna("point").ne("point") if "shape" in marks else None
        pts = marks if shaped is None else marks[~shaped]
        ax.plot(pts["x"], pts["y"], "+", ms=4, mew=0.8, color="tab:cyan", label="volunteers' marks")
        if shaped is not None:
            for r in marks[shaped].itertuples():
                ax.add_patch(
                    Rectangle(
                        (r.x1, r.y1), r.x2 - r.x1, r.y2 - r.y1, fill=False, ec="tab:cyan", lw=0.5
                    )
                )
        kept = lab["p_fp"] < KEEP
        for r, k in zip(lab.itertuples(), kept, strict=True):
            ax.add_patch(
                Rectangle(
                    (r.x1, r.y1),
                    r.x2 - r.x1,
                    r.y2 - r.y1,
                    fill=False,
                    ec="yellow" if k and img is not None else ("tab:green" if k else "tab:red"),
                    ls="-" if k else "--",
                    lw=1.3,
                )
            )
        ax.set_xlim(0, width)
        ax.set_ylim(height, 0)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        row = counts[counts["subject_id"] == sid].iloc[0]
        n_cls = int(b["classification_id"].nunique()) if "classification_id" in b else None
        k = int(row["kept"])
        ax.set_title(
            f"image {sid}: {k} {w['object'] if k == 1 else w['objects']} "
            f"(range {row['count_low']:.0f}–{row['count_high']:.0f})",
            fontsize=9,
        )
        rows.append(
            {
                "image": int(sid),
                "file": files[sid].name if sid in files else "",
                "classifications": n_cls,
                "marks": int(len(marks)),
                "labels": int(len(lab)),
                f"{w['objects']} (p_fp < {KEEP:g})": int(row["kept"]),
                "expected": round(float(row["expected_count"]), 1),
                "range": f"{row['count_low']:.0f}–{row['count_high']:.0f}",
            }
        )
    table = pd.DataFrame(rows)
    if not files and len(table):
        table = table.drop(columns="file")
    on_image = "the subject image" if files else "a blank canvas of the image's size"
    how = (
        ""
        if files
        else " (no subject images: set export.subject_images to a folder of the images to "
        "draw them underneath)"
    )
    kept_colour = "yellow" if files else "green"
    shapes = "shape" in a and bool(a["shape"].fillna("point").ne("point").any())
    points = "shape" not in a or bool(a["shape"].fillna("point").eq("point").any())
    marks_are = " and ".join(
        [*(["crosses"] if points else []), *(["thin boxes"] if shapes else [])]
    )
    caption = (
        f"{len(ids)} example images, picked evenly over the range of counts, each drawn on "
        f"{on_image}{how}. Cyan {marks_are}: the volunteers' marks; {kept_colour} boxes: labels "
        f"with p_fp < {KEEP:g} (counted as {w['objects']}); red dashed boxes: labels with "
        f"p_fp ≥ {KEEP:g}. Titles: the count and its range."
    )
    stats = {"subjects": rows, "images_found": len(files)}
    return fig, table, caption, stats


# ------------------------------------------------------------------------------ volunteers


def build_volunteers(inp, params):
    v = read_table(
        inp["volunteers"], ["volunteer", "p_fn", "n_classifications"], "volunteers", None
    )
    w = words(params)
    fig = new_figure(10.0, 3.8, params["dpi"])
    ax1, ax2 = fig.subplots(1, 2)
    n = v["n_classifications"].to_numpy(int)
    if n.size and n.max() <= 30:  # few: one bar per number of classifications
        k, m = np.unique(n, return_counts=True)
        ax1.bar(k, m, width=0.8, color="tab:blue")
        ax1.set_xlim(0.4, k.max() + 0.6)
        ax1.xaxis.set_major_locator(MaxNLocator(integer=True))
    elif n.size:
        edges = np.unique(np.round(np.logspace(0, np.log10(n.max() + 1), 25)))
        edges = np.append(edges, edges[-1] + 1) - 0.5
        ax1.hist(n, bins=edges, color="tab:blue", ec="white", lw=0.4)
        ax1.set_xscale("log")
    else:
        no_data(ax1)
    ax1.set_xlabel("classifications per volunteer")
    ax1.set_ylabel("volunteers")
    ax1.yaxis.set_major_locator(MaxNLocator(integer=True))
    rate = "fp_rate" in v
    if n.size:
        y = v["fp_rate"] if rate else v["p_fp"]
        top = max(int(n.max()), 2)
        norm = Normalize(vmin=1, vmax=top) if top <= 30 else LogNorm(vmin=1, vmax=top)
        sc = ax2.scatter(
            v["p_fn"], y, s=8 + 4 * np.sqrt(n), c=n, norm=norm, cmap="viridis", alpha=0.7, lw=0
        )
        cb = fig.colorbar(sc, ax=ax2, label="classifications")
        cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        cb.ax.yaxis.set_minor_formatter(NullFormatter())
        cb.ax.tick_params(labelsize=8)
    else:
        no_data(ax2)
    ax2.set_xlabel(f"miss rate: probability of missing a real {w['object']}")
    ax2.set_ylabel("false marks per classification" if rate else "share of false marks")
    ax2.set_xlim(0, 1)
    anon = v["volunteer"].astype(str).str.startswith(("not-logged-in", "anonymous"))
    heavy = int(n.max()) if n.size else 0
    stats = {
        "volunteers": int(len(v)),
        "not_logged_in": int(anon.sum()),
        "classifications": int(n.sum()),
        "median_classifications": float(np.median(n)) if n.size else float("nan"),
        "one_classification": int((n == 1).sum()),
        "most_classifications": heavy,
        "median_miss_rate": float(v["p_fn"].median()) if n.size else float("nan"),
    }
    if rate:
        stats["median_false_marks"] = float(v["fp_rate"].median()) if n.size else float("nan")
    rows = [
        ("volunteers", f"{stats['volunteers']:,}"),
        ("of them not logged in (one per session)", f"{stats['not_logged_in']:,}"),
        ("classifications", f"{stats['classifications']:,}"),
        ("classifications per volunteer: median", f"{stats['median_classifications']:g}"),
        ("volunteers with one classification", f"{stats['one_classification']:,}"),
        ("classifications of the most active volunteer", f"{heavy:,}"),
        ("miss rate: median", f"{stats['median_miss_rate']:.2f}"),
    ]
    if rate:
        rows.append(
            ("false marks per classification: median", f"{stats['median_false_marks']:.2f}")
        )
    table = pd.DataFrame(rows, columns=["quantity", "value"])
    caption = (
        "Who did the work and how well. Left: how many volunteers made how many classifications. "
        f"Right: each volunteer's skill as the model learned it: how often they miss a real "
        f"{w['object']} (miss rate) against "
        + (
            "how many false marks they add per classification"
            if rate
            else "the share of their marks that are false"
        )
        + "; size and colour: their classifications. Volunteers with few classifications "
        "sit near the population's average (the model shrinks them towards it). Volunteers who "
        "are not logged in count once per session."
    )
    return fig, table, caption, stats


# ------------------------------------------------------------------------------ dropped

#: reasons in clicks_report.json, in plain words
REASONS = {
    "other_workflow": "classification of another workflow",
    "other_workflow_version": "classification of another workflow version",
    "older_workflow_version": "classification of an older workflow version",
    "duplicate_classification_id": "duplicate classification id",
    "duplicate_volunteer_subject": "volunteer classified the image again",
    "multiple_subjects": "classification of several images",
    "subject_missing_from_subjects_export": "image not in the subject export",
    "json_too_deep": "JSON nested too deep",
    "field_too_large": "JSON field too large",
    "too_many_marks": "too many marks",
    "flagged_many_marks": "flagged: many marks",
    "flagged_too_fast": "flagged: too fast",
    "flagged_volunteer": "flagged volunteer",
    "other_task": "mark of another task",
    "other_tool": "mark of another tool",
}


def dropped_table(report: Mapping[str, Any]) -> pd.DataFrame:
    """What was dropped, by reason: classifications, then marks (non-zero only), and
    the kept totals for scale."""
    rows = []
    for what, key in (("classifications", "dropped_classifications"), ("marks", "dropped_clicks")):
        for reason, n in sorted((report.get(key) or {}).items()):
            if isinstance(n, int | float) and n:
                rows.append((what, REASONS.get(reason, reason.replace("_", " ")), int(n)))
    for what, key in (("marks", "unsupported_shapes"), ("marks", "malformed_shapes")):
        for shape, n in sorted((report.get(key) or {}).items()):
            if isinstance(n, int | float) and n:
                label = "unsupported" if key == "unsupported_shapes" else "malformed"
                rows.append((what, f"{label} shape: {shape}", int(n)))
    return pd.DataFrame(rows, columns=["dropped", "reason", "count"])


def build_dropped(inp, params):
    path = Path(inp["clicks_report"])
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"clicks report: cannot read ({exc})", path=path) from exc
    t = dropped_table(report)
    fig = new_figure(7.0, max(1.8, 0.9 + 0.32 * len(t)) if len(t) else 0.6, params["dpi"])
    ax = fig.subplots()
    if len(t):
        y = np.arange(len(t))
        colours = ["tab:orange" if d == "classifications" else "tab:blue" for d in t["dropped"]]
        ax.barh(y, t["count"], color=colours)
        for yi, c in zip(y, t["count"], strict=True):
            ax.text(c, yi, f" {c:,}", va="center", fontsize=8)
        ax.set_xlim(0, 1.15 * float(t["count"].max()))
        ax.set_yticks(
            y, [f"{r} ({d})" for d, r in zip(t["dropped"], t["reason"], strict=True)], fontsize=8
        )
        ax.invert_yaxis()
        ax.set_xlabel("dropped")
    else:
        no_data(ax, "nothing was dropped")
        ax.set_axis_off()
    action = "kept" if (report.get("flagged") or {}).get("action", "none") == "none" else "dropped"
    kept_cls = int(report.get("classifications_kept", 0))
    kept_marks = int(report.get("clicks_kept", 0))
    outside = int(report.get("clicks_outside_image", 0) or 0)
    flagged = (report.get("flagged") or {}).get("classifications") or {}
    n_flagged = int(sum(v for v in flagged.values() if isinstance(v, int | float)))
    stats = {
        "classifications_kept": kept_cls,
        "marks_kept": kept_marks,
        "empty_classifications": int(report.get("empty_classifications", 0) or 0),
        "outside_image": outside,
        "flagged": n_flagged,
        "dropped": {f"{d}: {r}": int(c) for d, r, c in t.itertuples(index=False)},
    }
    caption = (
        f"What was left out, by reason (orange: whole classifications, blue: single marks). "
        f"Kept: {kept_cls:,} classifications ({stats['empty_classifications']:,} of them "
        f"marked nothing, which counts as evidence that there is nothing to mark) with "
        f"{kept_marks:,} marks; {_n(outside, 'mark lies', 'marks lie')} outside the image and "
        "are kept. "
        f"{_n(n_flagged, 'classification was', 'classifications were')} flagged as possible "
        f"bots (too many marks or too fast) and {action}. "
        "Every count is in clicks/clicks_report.json."
    )
    return fig, t, caption, stats


# ------------------------------------------------------------------------------ replay

#: the loss a retirement setting may cause (share of the full-data objects)
MAX_LOST = 0.01

REPLAY_COLS = [
    "regime",
    "policy",
    "setting",
    "effort",
    "lost",
    "purity",
    "completeness",
    "count_mae",
]


def build_replay(inp, params):
    # the workflow's replay.csv has no regime column (one project); the benchmark's has one
    r = read_table(inp["replay"], REPLAY_COLS[1:], "replay", None)
    if "regime" not in r.columns:
        r.insert(0, "regime", "")
    w = words(params)
    fig = new_figure(10.0, 3.8, params["dpi"])
    ax1, ax2 = fig.subplots(1, 2)
    share = bool(len(r)) and float(r["effort"].max()) <= 1.0
    for (regime, policy), g in r.groupby(["regime", "policy"], sort=True):
        g = g.sort_values("effort")
        lab = f"{policy}" if r["regime"].nunique() == 1 else f"{regime}: {policy}"
        ax1.plot(g["effort"], g["count_mae"], "o-", ms=3, label=lab)
        ax2.plot(g["effort"], g["lost"], "o-", ms=3, label=lab)
    if not len(r):
        no_data(ax1)
        no_data(ax2)
    else:
        ax1.legend(fontsize=7)
    xl = "classifications used (share of all)" if share else "classifications used"
    ax1.set_xlabel(xl)
    ax2.set_xlabel(xl)
    ax1.set_ylabel(f"count error: mean |{w['objects']} − full count| per image")
    ax2.set_ylabel(f"{w['objects']} lost")
    t = r[REPLAY_COLS].copy()
    if share:
        t.insert(4, "saved", (1.0 - t["effort"]).round(3))
    for c in ("effort", "lost", "purity", "completeness", "count_mae"):
        t[c] = t[c].round(3)
    best = None
    cand = r[(r["policy"] != "full") & (r["lost"] <= MAX_LOST)]
    if len(cand):
        best = cand.sort_values(["effort", "lost"]).iloc[0].to_dict()
    stats = {"rows": int(len(r)), "cheapest_within_loss": best, "max_lost": MAX_LOST}
    caption = (
        "What early retirement would have saved: the classifications were replayed in the "
        "order they arrived, retiring each image as soon as each policy was satisfied. Left: "
        "the count error against the classifications used (empty without a truth to count "
        f"against); right: the share of the full-data {w['objects']} lost. One line per "
        "policy, one point per setting."
    )
    if best:
        caption += (
            f" Cheapest setting losing at most {MAX_LOST:.0%} of the {w['objects']}: "
            f"{best['policy']} ({best['setting']:g}), {1 - best['effort']:.0%} of the "
            "classifications saved."
        )
    else:
        caption += f" No setting loses at most {MAX_LOST:.0%} of the {w['objects']}."
    return fig, t, caption, stats


# ------------------------------------------------------------------------------ methods

#: the methods of the comparison section, in order: name in the report, input key
METHODS = (
    ("default model", "labels"),
    ("the paper's model", "paper_labels"),
    ("single linkage", "single_linkage"),
    ("DBSCAN", "dbscan"),
    ("MeanShift", "meanshift"),
)


def method_counts(subject_ids: Sequence[int], tables: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Objects per image by each method (columns in :data:`METHODS` order): the consensus
    models' labels with p_fp < 0.5, every label of a baseline."""
    out = pd.DataFrame(index=pd.Index(sorted({int(s) for s in subject_ids}), name="subject_id"))
    for name, key in METHODS:
        t = tables.get(key)
        if t is None:
            continue
        if "p_fp" in t:
            t = t[t["p_fp"] < KEEP]
        out[name] = t.groupby("subject_id").size().reindex(out.index, fill_value=0).astype(int)
    return out


def build_methods(inp, params):
    w = words(params)
    subjects = read_table(inp["subjects"], ["subject_id"], "subjects", None)
    tables = {
        key: read_table(inp[key], ["subject_id"], key, ["p_fp"])
        for _, key in METHODS
        if inp.get(key)
    }
    counts = method_counts(subjects["subject_id"], tables)
    ref = counts["default model"] if "default model" in counts else None
    others = [m for m in counts.columns if m != "default model"] if ref is not None else []
    fig = new_figure(8.0, 1.2 + 0.55 * max(len(others), 1), params["dpi"])
    ax = fig.subplots()
    rows = []
    for name in counts.columns:
        c = counts[name]
        row = {
            "method": name,
            f"{w['objects']}": int(c.sum()),
            "per image (mean)": round(float(c.mean()), 2) if len(c) else float("nan"),
        }
        if ref is not None:
            row["mean |difference| from the default"] = round(float((c - ref).abs().mean()), 2)
            row["images with the same count"] = int((c == ref).sum())
        rows.append(row)
    for i, name in enumerate(others):
        d, m = np.unique((counts[name] - ref).to_numpy(int), return_counts=True)
        ax.scatter(d, np.full(d.size, i), s=12 + 160 * m / max(int(m.max()), 1), alpha=0.7)
    if others:
        ax.axvline(0, color="0.5", lw=0.8, ls=":")
        ax.set_yticks(range(len(others)), others)
        ax.set_ylim(len(others) - 0.5, -0.5)
        ax.set_xlabel(f"{w['objects']} per image: other method − default model (p_fp < {KEEP:g})")
    else:
        no_data(ax)
    table = pd.DataFrame(rows)
    n_base = params.get("n_base")
    caption = (
        f"The default model beside the other methods this workflow runs on the same marks: "
        f"the paper's model (the published likelihood the workflow also reproduces; labels with "
        f"p_fp < {KEEP:g}) and three clusterings without probabilities (single linkage, DBSCAN, "
        f"MeanShift; every cluster a label): per method, how many images it counts how many "
        f"{w['objects']} more (right) or fewer (left) than the default model (dot area: "
        f"images; dotted: the same count)"
        + (f", on the first {n_base} classifications of each image." if n_base else ".")
        + " Only this section shows other methods; every other section shows the default model."
    )
    stats = {"methods": rows}
    return fig, table, caption, stats


# ------------------------------------------------------------------------------ gold


def build_gold_agreement(inp, params):
    """The gold standard against the volunteers (docs/decisions.md#gold-checks): the
    default model's gold check (its report.json) as a figure, the agreement table and a
    caption; the check's warnings go to the top of the report."""
    check = gold_check_of(inp["report"])
    fig = new_figure(7.0, 3.6, dpi=params["dpi"])
    plot_agreement(check, fig.subplots())
    caption = (
        agreement_summary(check, "generic")
        + " Bars: per frame tried (as given on top), the share of strong labels matched to an "
        "expert object and of expert objects no volunteer marked (dotted: the bounds)."
    )
    stats = {
        "verdict": (check or {}).get("verdict"),
        "warnings": list((check or {}).get("warnings", [])),
    }
    return fig, agreement_table(check), caption, stats


# ------------------------------------------------------------------------------ registry


@dataclass(frozen=True)
class Section:
    name: str
    title: str
    builder: Callable[[Mapping[str, Any], Mapping[str, Any]], tuple]
    #: inputs the section needs (all must be given)
    inputs: tuple[str, ...]


SECTIONS: tuple[Section, ...] = (
    Section("objects_per_image", "{Objects} per image", build_counts, ("subjects", "labels")),
    Section("label_probability", "How much to trust each label", build_probability, ("labels",)),
    Section(
        "example_images",
        "Example images",
        build_examples,
        ("subjects", "labels", "assignments"),
    ),
    Section("volunteers", "Volunteers", build_volunteers, ("volunteers",)),
    Section("dropped", "What was dropped and why", build_dropped, ("clicks_report",)),
    Section(
        "gold_agreement",
        "The gold standard against the volunteers",
        build_gold_agreement,
        ("report",),
    ),
    Section("retirement", "What early retirement would have saved", build_replay, ("replay",)),
    Section(
        "other_methods",
        "The default model beside other methods",
        build_methods,
        ("subjects", "labels"),
    ),
)
BY_NAME = {s.name: s for s in SECTIONS}


def title(name: str, params: Mapping[str, Any]) -> str:
    w = words(params)
    return BY_NAME[name].title.format(Objects=w["objects"].capitalize())


def build(
    name: str, inputs: Mapping[str, Any], stem: str | Path, params: Mapping[str, Any]
) -> dict:
    """Make section ``name``: ``<stem>.png``, ``.pdf``, ``.csv`` (its table) and ``.json``
    (title, caption, numbers, and the input files it read under ``inputs``).

    ``params``: ``dpi``, ``object_name``, ``gold`` (a gold standard was given),
    ``n_examples``, ``subject_images`` and ``subjects_export`` (example images), ``n``
    and ``n_base`` (the subsamples shown)."""
    if name not in BY_NAME:
        raise InputError(f"unknown report section {name!r}; known: {', '.join(BY_NAME)}")
    sec = BY_NAME[name]
    missing = [k for k in sec.inputs if not inputs.get(k)]
    if missing:
        raise InputError(f"report section {name}: missing input(s) {', '.join(missing)}")
    params = {"dpi": 150, **params}
    with timed(f"report section {name}", log):
        fig, table, caption, stats = sec.builder(inputs, params)
        save_figure(fig, stem)
    png = output_paths(stem)["png"]
    with atomic_path(png.with_suffix(".csv")) as tmp:
        table.to_csv(tmp, index=False)
    doc = {
        "section": name,
        "title": title(name, params),
        "caption": caption,
        "model": DEFAULT_MODEL if name != "other_methods" else "several",
        "n": params.get("n"),
        "inputs": {
            k: [str(p) for p in v] if isinstance(v, list | tuple) else str(v)
            for k, v in inputs.items()
            if v
        },
        **stats,
    }
    write_json(doc, png.with_suffix(".json"))
    return doc
