"""A simulated point-marking project without galaxies (penguins, craters, ...).

``simulate.kind: counting`` makes :func:`clumpscout.simulation.universe.simulate_universe`
draw this universe instead of Clump Scout. It is written as the same files, so
the rest of the pipeline (extract -> subjects -> boxes -> aggregate) and any
scorer read it unchanged:

* ``classifications.csv``, ``subjects_export.csv``, ``expert_classifications.csv``:
  a Zooniverse export of one workflow (id 20001) with a single drawing task
  ``T0`` and one point tool 0 ("Object"); the subject metadata holds the image
  size (``image_width``, ``image_height``) and no sky position;
* ``truth_clumps.csv``: the objects, with the columns of the galaxy universe
  (subject_id, clump, x, y, flux_g, flux_r, flux_i, unusual; fluxes empty,
  unusual False); ``truth_objects.csv``: the same objects, kind = object;
  ``truth_distractors.csv``: empty (header only);
* ``galaxies.csv``: no galaxies, just subject_id, image_width, image_height,
  n_objects (the pipeline must not read it as a catalogue: run with
  ``source: export`` pointing at the universe, so that the box side is
  ``export.box_side``; see resources/regimes/counting.yaml);
* ``volunteers_truth.csv``, ``truth_clicks.parquet`` (source object |
  spurious), ``simulate_report.json`` (with ``classifications_empty_fraction``
  and ``object_mark_rate_median``).

Model (keys of the ``simulate.counting`` section, default in brackets; positions
in image pixels, x right, y down)
--------------------------------------------------------------------------------

**Images and objects.** ``n_subjects`` images of ``image_width`` x
``image_height`` [800 x 600] px, each with K objects, K uniform on
``objects_min`` .. ``objects_max`` [0 .. 15]. Objects are uniform over the
image, at least ``edge_margin_px`` [10] from its edges, except that each object
after the first joins a group with probability ``group_fraction`` [0.25]: it
lies U(0.6, 1.4) x ``group_distance_px`` [14] from a random earlier object of
the image, in a random direction (tight groups). An object closer than
``min_separation_px`` [6] to an earlier one, or outside the margin, is redrawn
(20 rounds, then dropped and counted). Each object has a detectability d ~
N(0, ``object_visibility_sd``) [0.8] on the logit scale.

**Volunteers.** Each image needs U{``volunteers_min`` .. ``volunteers_max``}
[10 .. 20] classifications. The cohort (subjects per volunteer, login state,
spammers) and the subject queue are the galaxy universe's, driven by the
top-level ``simulate`` keys (``activity_*``, ``heavy_*``,
``not_logged_in_fraction``, ``spammer_*``, the time line and
``active_subjects``); the galaxy, clump, distractor and galaxy-skill keys are
not used. Skills per volunteer: marking probability p ~ Beta with mean
``p_mark_mean`` [0.8], empty-classification probability e ~ Beta with mean
``p_empty_mean`` [0.33] (both a + b = ``skill_concentration`` [6]), spurious
clicks Poisson(lambda) per classification with lambda lognormal (median
``spurious_median`` [0.1], log-width ``spurious_sigma`` [1.0], at most 5),
positional scatter per axis lognormal (median ``scatter_px_median`` [3 px],
log-width ``scatter_px_sigma`` [0.35]).

**Clicks.** A volunteer marks object k with probability expit(logit p + d_k)
(times a spammer's hit scale), one click at the object plus Gaussian scatter;
spurious clicks are uniform over the image. With probability e the whole
classification is empty. Clicks of a classification are in random order. With
the defaults about 40% of classifications are empty and an object is marked by
a median ~55% of the volunteers who see it.

**Experts.** ``n_experts`` experts classify the same ``n_expert_subjects``
images (as in the galaxy universe); they mark each object with probability
``expert_p_mark`` [0.97] with scatter ``expert_scatter_px`` [1 px], never
click spuriously and never leave a classification empty.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import expit, logit

from clumpscout.logs import timed
from clumpscout.simulation.config import beta_draws, csr_offsets, local_index, random_streams
from clumpscout.simulation.export import (
    ExportLayout,
    classifications_name,
    subject_ids,
    subjects_frame,
    write_exports,
    write_report,
    write_table_csv,
)
from clumpscout.simulation.sky import pairs_within
from clumpscout.simulation.truth import objects_report, write_common_truth
from clumpscout.simulation.volunteers import (
    assign_spammers,
    fill_spammer_columns,
    make_cohort,
    plan_experts,
    queue_report,
    run_queue,
)

log = logging.getLogger(__name__)

#: the export of the counting project
WORKFLOW = {
    "workflow_id": 20001,
    "workflow_name": "Count the objects",
    "workflow_version": "3.14",
    "project_id": 20002,
    "tasks": (("T0", "Mark every object you can see."),),
    "tools": ((0, 0, "Object"),),
    "subject_set_ids": (82001,),
    "location": "https://example.org/counting-sim/{sid}.jpg",
}


# --------------------------------------------------------------------------- objects


def _uniform_xy(n: int, c: dict, rng) -> tuple[np.ndarray, np.ndarray]:
    m = c["edge_margin_px"]
    x = rng.uniform(m, c["image_width"] - m, n)
    y = rng.uniform(m, c["image_height"] - m, n)
    return x, y


def _offsets(n: int, c: dict, rng) -> tuple[np.ndarray, np.ndarray]:
    d = rng.uniform(0.6, 1.4, n) * c["group_distance_px"]
    a = rng.uniform(0.0, 2 * np.pi, n)
    return d * np.cos(a), d * np.sin(a)


def _misplaced(x, y, pairs, c) -> np.ndarray:
    m = c["edge_margin_px"]
    bad = (x < m) | (x > c["image_width"] - m) | (y < m) | (y > c["image_height"] - m)
    a, b = pairs
    if len(a):
        close = np.hypot(x[a] - x[b], y[a] - y[b]) < c["min_separation_px"]
        bad[b[close]] = True
    return bad


def make_objects(n_img: int, c: dict, rng) -> tuple[pd.DataFrame, int]:
    """The objects of every image (see the module docstring). Returns (df, n_dropped);
    df columns: _gal (image index), object, x, y, grouped, _detect."""
    k = rng.integers(c["objects_min"], c["objects_max"] + 1, n_img)
    img = np.repeat(np.arange(n_img), k)
    local = local_index(k)
    first = csr_offsets(k)[:-1][img]
    x, y = _uniform_xy(len(img), c, rng)
    grouped = (local > 0) & (rng.random(len(img)) < c["group_fraction"])
    parent = first + np.floor(rng.random(len(img)) * local).astype(np.int64)
    dx, dy = _offsets(len(img), c, rng)
    for j in range(1, int(k.max(initial=0))):  # parents first
        s = grouped & (local == j)
        x[s], y[s] = x[parent[s]] + dx[s], y[parent[s]] + dy[s]
    pairs = pairs_within(csr_offsets(k))
    for _ in range(20):
        bad = _misplaced(x, y, pairs, c)
        if not bad.any():
            break
        i = np.flatnonzero(bad)
        ux, uy = _uniform_xy(len(i), c, rng)
        ox, oy = _offsets(len(i), c, rng)
        g = grouped[i]
        x[i] = np.where(g, x[parent[i]] + ox, ux)
        y[i] = np.where(g, y[parent[i]] + oy, uy)
    ok = ~_misplaced(x, y, pairs, c)
    detect = c["object_visibility_sd"] * rng.standard_normal(len(img))
    img, x, y, grouped, detect = img[ok], x[ok], y[ok], grouped[ok], detect[ok]
    df = pd.DataFrame({"_gal": img, "x": x, "y": y, "grouped": grouped, "_detect": detect})
    df.insert(1, "object", local_index(np.bincount(img, minlength=n_img)))
    return df, int((~ok).sum())


# --------------------------------------------------------------------------- volunteers


def draw_counting_skills(n: int, p: dict, rng) -> pd.DataFrame:
    """Per-volunteer skills of the counting project (module docstring)."""
    c = p["counting"]
    conc = c["skill_concentration"]
    return pd.DataFrame(
        {
            "p_mark": beta_draws(rng, c["p_mark_mean"], conc, n),
            "p_empty": beta_draws(rng, c["p_empty_mean"], conc, n),
            "spurious_rate": np.minimum(
                rng.lognormal(np.log(max(c["spurious_median"], 1e-12)), c["spurious_sigma"], n),
                5.0,
            ),
            "scatter_px": rng.lognormal(
                np.log(max(c["scatter_px_median"], 1e-12)), c["scatter_px_sigma"], n
            ),
        }
    )


def make_counting_experts(n: int, p: dict, rng) -> pd.DataFrame:
    """The experts' fixed skills: they mark nearly every object, precisely."""
    c = p["counting"]
    return pd.DataFrame(
        {
            "n_planned": np.zeros(n, np.int64),
            "committed": np.ones(n, bool),
            "late": np.zeros(n, bool),
            "logged_in": np.ones(n, bool),
            "p_mark": np.full(n, c["expert_p_mark"]),
            "p_empty": np.zeros(n),
            "spurious_rate": np.zeros(n),
            "scatter_px": np.full(n, c["expert_scatter_px"]),
        }
    )


# --------------------------------------------------------------------------- clicks


def _object_pairs(cls_sub, objects, n_sub):
    """(classification, object row) for every object of every classified image."""
    ptr = csr_offsets(np.bincount(objects["_gal"].to_numpy(), minlength=n_sub))
    n_obj = np.diff(ptr)[cls_sub]
    pc = np.repeat(np.arange(len(cls_sub)), n_obj)
    po = np.repeat(ptr[cls_sub], n_obj) + local_index(n_obj)
    return pc, po


def draw_counting_clicks(cls_sub, cls_vol, skills, objects, n_sub, c, rng) -> pd.DataFrame:
    """Every click of every classification; columns as
    :func:`clumpscout.simulation.universe.draw_clicks` (task 0; source object | spurious;
    ``clump`` = the object's index in its image). Sorted by cls, click order."""
    sk = {k: skills[k].to_numpy() for k in skills.columns}
    pc, po = _object_pairs(cls_sub, objects, n_sub)
    pv = cls_vol[pc]
    p_mark = np.clip(sk["p_mark"][pv], 1e-9, 1 - 1e-9)
    prob = expit(logit(p_mark) + objects["_detect"].to_numpy()[po])
    if "hit_scale" in sk:
        prob = prob * sk["hit_scale"][pv]
    hit = rng.random(len(pc)) < prob
    pc, po = pc[hit], po[hit]
    sig = sk["scatter_px"][cls_vol[pc]]
    ox = objects["x"].to_numpy()[po] + sig * rng.standard_normal(len(pc))
    oy = objects["y"].to_numpy()[po] + sig * rng.standard_normal(len(pc))
    n_sp = rng.poisson(sk["spurious_rate"][cls_vol])
    sc = np.repeat(np.arange(len(cls_sub)), n_sp)
    sx = rng.uniform(0.0, c["image_width"], len(sc))
    sy = rng.uniform(0.0, c["image_height"], len(sc))
    cls = np.r_[pc, sc]
    obj = np.r_[objects["object"].to_numpy()[po], np.full(len(sc), -1)]
    x, y = np.r_[ox, sx], np.r_[oy, sy]
    empty = rng.random(len(cls_sub)) < sk["p_empty"][cls_vol]
    keep = ~empty[cls]
    order = np.lexsort((rng.random(len(cls))[keep], cls[keep]))
    cls, obj, x, y = (a[keep][order] for a in (cls, obj, x, y))
    n = len(cls)
    return pd.DataFrame(
        {
            "cls": cls,
            "task": np.zeros(n, np.int64),
            "x": x,
            "y": y,
            "tool": np.zeros(n, np.int64),
            "source": np.where(obj >= 0, "object", "spurious").astype(object),
            "double": np.zeros(n, bool),
            "clump": obj,
            "distractor": np.full(n, -1, np.int64),
        }
    )


# --------------------------------------------------------------------------- the universe


def _layout(c: dict):
    return ExportLayout(image_width=c["image_width"], image_height=c["image_height"], **WORKFLOW)


def _objects_table(sid: np.ndarray, objects: pd.DataFrame) -> pd.DataFrame:
    """truth_objects rows (without n_viewers / n_marked), plus ``_gal``."""
    n = len(objects)
    return pd.DataFrame(
        {
            "subject_id": sid[objects["_gal"].to_numpy()],
            "object": objects["object"].to_numpy(),
            "_gal": objects["_gal"].to_numpy(),
            "kind": np.full(n, "object", dtype=object),
            "x": objects["x"].to_numpy(),
            "y": objects["y"].to_numpy(),
            "unusual": np.zeros(n, bool),
            "clump": objects["object"].to_numpy(),
            "distractor": np.full(n, -1, np.int64),
            "flux_g": np.full(n, np.nan),
            "flux_r": np.full(n, np.nan),
            "flux_i": np.full(n, np.nan),
        }
    )


def _write_truth(out: Path, sid, objects, obj_table, c) -> None:
    counts = np.bincount(objects["_gal"].to_numpy(), minlength=len(sid))
    images = pd.DataFrame(
        {"subject_id": sid, "image_width": c["image_width"], "image_height": c["image_height"],
         "n_objects": counts}
    )  # fmt: skip
    write_table_csv(images, out / "galaxies.csv", {})
    cols = ["subject_id", "clump", "x", "y", "flux_g", "flux_r", "flux_i", "unusual"]
    write_table_csv(obj_table[cols], out / "truth_clumps.csv", {"x": ".3f", "y": ".3f"})
    (out / "truth_distractors.csv").write_text(
        "subject_id,x,y,kind,flux_g,flux_r,flux_i,distractor\n"
    )


def _counting_report(objects, n_dropped, clicks, q, truth_objects) -> dict:
    n_cls = len(q["vol"])
    per = np.bincount(clicks["cls"].to_numpy(), minlength=n_cls)
    rate = truth_objects["n_marked"] / truth_objects["n_viewers"].clip(lower=1)
    return {
        "objects": int(len(objects)),
        "objects_grouped": int(objects["grouped"].sum()),
        "objects_dropped_no_room": n_dropped,
        "objects_per_subject_mean": float(len(objects) / max(len(q["n_classified"]), 1)),
        "clicks_total": int(len(clicks)),
        "clicks_by_source": {
            str(k): int(v) for k, v in clicks["source"].value_counts().sort_index().items()
        },
        "classifications_empty_fraction": float((per == 0).mean()) if n_cls else 0.0,
        "object_mark_rate_median": float(rate.median()) if len(rate) else 0.0,
    }


def simulate_counting(p: dict, seed: int, out_dir: str | Path) -> dict:
    """Simulate the counting project described by the resolved ``simulate`` section
    ``p`` (``kind: counting``) and write it to ``out_dir``; returns the report."""
    c = p["counting"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random_streams(seed)
    start = pd.Timestamp(p["start_date"])
    n = p["n_subjects"]
    with timed(f"simulate: {n} images and their objects", log):
        sid = subject_ids(n, rng["galaxies"])
        objects, n_dropped = make_objects(n, c, rng["clumps"])
    with timed("simulate: volunteers and the subject queue", log):
        r = rng["schedule"]
        need = r.integers(c["volunteers_min"], c["volunteers_max"] + 1, n)
        rv = rng["volunteers"]
        vols = make_cohort(int(need.sum()), n, p, rv)
        vols = pd.concat([vols, draw_counting_skills(len(vols), p, rv)], axis=1)
        if p["spammer_fraction"] > 0:
            vols = assign_spammers(vols, p, rng["spammers"])
        q = run_queue(vols, need, p, r, draw_counting_skills)
        q["volunteers"] = fill_spammer_columns(q["volunteers"], vols)
    with timed(f"simulate: clicks of {len(q['vol'])} classifications", log):
        clicks = draw_counting_clicks(
            q["sub"], q["vol"], q["volunteers"], objects, n, c, rng["clicks"]
        )
        ex = plan_experts(p, n, rng["experts"], make_counting_experts)
        ex["skills"] = fill_spammer_columns(ex["skills"], vols)
        ex["clicks"] = draw_counting_clicks(
            ex["sub"], ex["vol"], ex["skills"], objects, n, c, rng["expert_clicks"]
        )
        ex["clump_task"] = 0
    layout = _layout(c)
    meta = [
        f'{{"image_width":{c["image_width"]},"image_height":{c["image_height"]},'
        f'"#filename":"{s}.jpg"}}'
        for s in sid.tolist()
    ]
    subjects = subjects_frame(sid, q, rng["export"], {"_sample": np.zeros(n, np.int64)})
    with timed("simulate: writing the Zooniverse exports", log):
        ids = write_exports(
            out, rng["export"], start, subjects, q, clicks, ex, layout, meta,
            classifications_name(p),
        )  # fmt: skip
    with timed("simulate: writing the truth", log):
        table = _objects_table(sid, objects)
        _write_truth(out, sid, objects, table, c)
        truth = write_common_truth(out, p, table, q, clicks, ex, ids, sid, start)
    report: dict[str, Any] = {"seed": int(seed), "config": p}
    report.update(queue_report(q, sid, ex))
    report.update(_counting_report(objects, n_dropped, clicks, q, truth))
    report.update(objects_report(table, q["volunteers"], q["vol"], clicks, task=0))
    write_report(report, out)
    return report
