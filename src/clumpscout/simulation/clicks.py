"""The clicks of the simulated universe: which real objects each classification marks,
spurious and doubled clicks, positional scatter, and the T0 bulge click.

The model and its knobs are documented in :mod:`clumpscout.simulation.universe`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy.special import expit

from clumpscout.simulation.config import IMAGE_SIZE, csr_offsets, local_index
from clumpscout.simulation.sky import disc_positions

# --------------------------------------------------------------------------- clicks


def _visibility(obj: pd.DataFrame, p: dict) -> np.ndarray:
    return (p["visibility_contrast_ref"] - obj["_delta"].to_numpy()) + p[
        "visibility_colour_weight"
    ] * (0.3 - obj["_g_r"].to_numpy())


#: object kinds a volunteer may mark in T1, in the code order of ``source``
KIND_CODES = {"clump": 0, "faint_feature": 1, "star": 2, "bulge": 3}
SOURCE_NAMES = np.array(["clump", "faint_feature", "star", "bulge", "spurious"], dtype=object)


def draw_clicks(
    cls_gal: np.ndarray,
    cls_vol: np.ndarray,
    skills: pd.DataFrame,
    gal: pd.DataFrame,
    clumps: pd.DataFrame,
    distractors: pd.DataFrame,
    p: dict,
    rng: np.random.Generator,
) -> pd.DataFrame:
    """Every click of every classification (rows: classification index ``cls``).

    Columns: cls, task (0 = T0 bulge, 1 = T1 clumps), x, y, tool, source
    (clump | faint_feature | star | bulge | spurious), double (bool), clump,
    distractor (truth indices, -1 if none). Sorted by cls, task, click order.
    The phases below draw from ``rng`` in this order: marks of real objects,
    spurious clicks, scatter and double clicks, skipped classifications, T0.
    """
    fwhm = gal["_fwhm"].to_numpy()
    sk = {c: skills[c].to_numpy() for c in skills.columns}
    obj = _markable_objects(clumps, distractors, p, len(gal))
    t1 = _object_marks(cls_gal, cls_vol, sk, obj, p, rng)
    spur = _spurious_clicks(cls_gal, cls_vol, sk, gal, rng)
    t1 = {k: np.r_[t1[k], spur[k]] for k in t1}
    t1 = _scatter_and_double(t1, cls_gal, cls_vol, sk, fwhm, p["scatter_floor_px"], rng)
    t1 = _skip_and_order(t1, cls_vol, sk, rng)
    t0 = _bulge_clicks(cls_gal, cls_vol, sk, gal, fwhm, p["scatter_floor_px"], rng)
    return _click_frame(t0, t1)


def _markable_objects(clumps, distractors, p, n_gal) -> dict:
    """Clumps and distractors as arrays sorted by galaxy, with a CSR pointer ``ptr``."""
    obj = {
        "gal": np.r_[clumps["_gal"].to_numpy(), distractors["_gal"].to_numpy()],
        "kind": np.r_[
            np.zeros(len(clumps), np.int64),
            distractors["kind"].map(KIND_CODES).to_numpy(np.int64),
        ],
        "x": np.r_[clumps["x"].to_numpy(), distractors["x"].to_numpy()],
        "y": np.r_[clumps["y"].to_numpy(), distractors["y"].to_numpy()],
        "vis": np.r_[_visibility(clumps, p), _visibility(distractors, p)],
        "unusual": np.r_[clumps["unusual"].to_numpy(bool), np.zeros(len(distractors), bool)],
        "truth": np.r_[clumps["clump"].to_numpy(), distractors["distractor"].to_numpy()],
    }
    order = np.argsort(obj["gal"], kind="stable")
    obj = {k: v[order] for k, v in obj.items()}
    obj["ptr"] = csr_offsets(np.bincount(obj["gal"], minlength=n_gal))
    return obj


#: (classification, object) pairs weighed at once by :func:`_object_marks` (bounds its memory)
PAIR_BLOCK = 4_000_000


def _object_marks(cls_gal, cls_vol, sk, obj, p, rng) -> dict:
    """The real objects each classification marks, and the tool used for each.

    The (classification, object) pairs are weighed in blocks of about
    :data:`PAIR_BLOCK` (memory bounded by the block, not the project); the uniform
    draws of consecutive blocks are the one stream a single draw would give, so the
    marks do not depend on the block size.
    """
    n_obj = np.diff(obj["ptr"])[cls_gal]
    bounds = _pair_blocks(n_obj, PAIR_BLOCK)
    hits = [
        _weigh_pairs(c0, c1, n_obj, cls_gal, cls_vol, sk, obj, p, rng)
        for c0, c1 in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    pc, po, pv, kind = (np.concatenate([h[i] for h in hits]) for i in range(4))
    p_unu = np.where(
        obj["unusual"][po],
        sk["p_unusual_given_unusual"][pv],
        np.where(kind == 2, 0.5, sk["p_unusual_given_normal"][pv]),
    )
    return {
        "cls": pc,
        "x": obj["x"][po],
        "y": obj["y"][po],
        "unusual": rng.random(len(pc)) < p_unu,
        "source": kind,
        "truth": obj["truth"][po],
    }


def _pair_blocks(n_obj: np.ndarray, block: int) -> np.ndarray:
    """Classification boundaries [0, ..., n] of blocks of about ``block`` pairs each."""
    csum = np.cumsum(n_obj)
    total = int(csum[-1]) if len(csum) else 0
    cuts = np.searchsorted(csum, np.arange(block, total, block), side="right")
    bounds = np.unique(np.r_[0, cuts, len(n_obj)])
    return bounds if len(bounds) > 1 else np.zeros(2, np.int64)


def _weigh_pairs(c0, c1, n_obj, cls_gal, cls_vol, sk, obj, p, rng):
    """(classification, object, volunteer, kind) of the pairs of classifications
    c0..c1-1 that the volunteer marks."""
    soft = max(p["visibility_softness"], 1e-6)
    n = n_obj[c0:c1]
    pc = np.repeat(np.arange(c0, c1), n)
    po = np.repeat(obj["ptr"][cls_gal[c0:c1]], n) + local_index(n)
    pv = cls_vol[pc]
    kind = obj["kind"][po]
    vis = obj["vis"]
    prob = np.zeros(len(pc))
    m = kind == 0
    prob[m] = expit((vis[po[m]] - sk["threshold"][pv[m]]) / soft)
    m = kind == 1
    prob[m] = expit((vis[po[m]] - sk["threshold"][pv[m]] + sk["faint_boost"][pv[m]]) / soft)
    m = kind == 2
    prob[m] = sk["p_star"][pv[m]]
    m = kind == 3
    prob[m] = sk["p_bulge_t1"][pv[m]]
    if "hit_scale" in sk:  # spammers mark real objects less often
        prob = prob * sk["hit_scale"][pv]
    hit = rng.random(len(pc)) < prob
    return pc[hit], po[hit], pv[hit], kind[hit]


def _spurious_clicks(cls_gal, cls_vol, sk, gal, rng) -> dict:
    """Spurious clicks: Poisson(rate) per classification, 70% on the galaxy, 30% anywhere."""
    n_sp = rng.poisson(sk["spurious_rate"][cls_vol])
    sc = np.repeat(np.arange(len(cls_gal)), n_sp)
    ms = len(sc)
    on_gal = rng.random(ms) < 0.7
    sx, sy = disc_positions(cls_gal[sc], rng.gamma(2.0, 0.6, ms), gal, rng)
    sx = np.where(on_gal, sx, rng.uniform(0, IMAGE_SIZE, ms))
    sy = np.where(on_gal, sy, rng.uniform(0, IMAGE_SIZE, ms))
    return {
        "cls": sc,
        "x": sx,
        "y": sy,
        "unusual": rng.random(ms) < sk["p_unusual_given_normal"][cls_vol[sc]],
        "source": np.full(ms, 4, np.int64),
        "truth": np.full(ms, -1, np.int64),
    }


def _scatter_and_double(t1, cls_gal, cls_vol, sk, fwhm, floor, rng) -> dict:
    """Positional scatter per axis relative to the subject's FWHM (not on spurious clicks),
    a random click order, and double clicks 0.1-1.5 FWHM from the first, same tool."""
    cv = cls_vol[t1["cls"]]
    sig = np.hypot(sk["scatter_fwhm"][cv] * fwhm[cls_gal[t1["cls"]]], floor)
    scat = t1["source"] != 4
    t1["x"] = t1["x"] + np.where(scat, sig * rng.standard_normal(len(sig)), 0.0)
    t1["y"] = t1["y"] + np.where(scat, sig * rng.standard_normal(len(sig)), 0.0)
    t1["double"] = np.zeros(len(sig), bool)
    t1["key"] = rng.random(len(sig))  # click order within the classification

    dbl = rng.random(len(sig)) < sk["p_double"][cv]
    di = np.flatnonzero(dbl)
    r = rng.uniform(0.1, 1.5, len(di)) * fwhm[cls_gal[t1["cls"][di]]]
    ang = rng.uniform(0, 2 * np.pi, len(di))
    dup = {k: v[di] for k, v in t1.items()}
    dup["x"] = dup["x"] + r * np.cos(ang)
    dup["y"] = dup["y"] + r * np.sin(ang)
    dup["double"] = np.ones(len(di), bool)
    dup["key"] = dup["key"] + 1e-12  # right after the click it doubles
    return {k: np.r_[t1[k], dup[k]] for k in t1}


def _skip_and_order(t1, cls_vol, sk, rng) -> dict:
    """Drop the T1 clicks of classifications that mark nothing; sort by classification and
    click order (a double click follows its original); task = 1."""
    skip = rng.random(len(cls_vol)) < sk["p_skip"][cls_vol]
    keep = ~skip[t1["cls"]]
    t1 = {k: v[keep] for k, v in t1.items()}
    order = np.lexsort((t1["double"], t1["key"], t1["cls"]))
    t1 = {k: v[order] for k, v in t1.items()}
    t1["task"] = np.ones(len(t1["cls"]), np.int64)
    del t1["key"]
    return t1


def _bulge_clicks(cls_gal, cls_vol, sk, gal, fwhm, floor, rng) -> dict:
    """T0: the bulge click (a guessed centre without a visible bulge: 0.3 x as likely, 3x
    less precise)."""
    vis = gal["bulge_visible"].to_numpy()[cls_gal]
    pb = sk["p_bulge_t0"][cls_vol] * np.where(vis, 1.0, 0.3)
    b = rng.random(len(cls_gal)) < pb
    bc = np.flatnonzero(b)
    g = cls_gal[bc]
    bsig = np.hypot(sk["scatter_fwhm"][cls_vol[bc]] * fwhm[g], floor)
    jitter = np.where(vis[bc], 1.0, 3.0)
    return {
        "cls": bc,
        "x": gal["x_centre"].to_numpy()[g] + jitter * bsig * rng.standard_normal(len(bc)),
        "y": gal["y_centre"].to_numpy()[g] + jitter * bsig * rng.standard_normal(len(bc)),
        "unusual": np.zeros(len(bc), bool),
        "source": np.full(len(bc), 3, np.int64),
        "truth": np.full(len(bc), -1, np.int64),
        "double": np.zeros(len(bc), bool),
        "task": np.zeros(len(bc), np.int64),
    }


def _click_frame(t0: dict, t1: dict) -> pd.DataFrame:
    """T0 and T1 clicks in one frame, sorted by classification then task (stable: the T1
    click order is kept). Empties ``t0`` and ``t1`` column by column as it goes (the
    frame holds the only copy of the clicks)."""
    cls = np.r_[t0.pop("cls"), t1.pop("cls")]
    task = np.r_[t0.pop("task"), t1.pop("task")]
    order = np.lexsort((task, cls))
    out = {"cls": cls[order], "task": task[order]}
    del cls, task
    for k in ("x", "y", "unusual", "source", "double", "truth"):
        out[k] = np.r_[t0.pop(k), t1.pop(k)][order]
    del order
    is_t1 = out["task"] == 1
    src = out.pop("source")
    is_clump = (src == 0) & is_t1
    is_dist = np.isin(src, (1, 2, 3)) & is_t1
    truth = out.pop("truth")
    out["tool"] = np.where(is_t1, out.pop("unusual").astype(np.int64), 0)
    out["source"] = _source_names(src)
    out["clump"] = np.where(is_clump, truth, -1)
    out["distractor"] = np.where(is_dist, truth, -1)
    cols = ("cls", "task", "x", "y", "tool", "source", "double", "clump", "distractor")
    return pd.DataFrame({c: out.pop(c) for c in cols}, copy=False)


def _source_names(codes: np.ndarray) -> pd.Series:
    """The :data:`SOURCE_NAMES` of source codes, as a string column (built by Arrow from
    the codes, without a Python string per click)."""
    import pyarrow as pa

    names = pa.array(SOURCE_NAMES.tolist())
    arr = pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int8)), names)
    return pd.Series(arr.cast(pa.large_string()).to_pandas(), copy=False)
