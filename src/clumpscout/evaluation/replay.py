"""``clumpscout replay``: early retirement, replayed on the classifications as they arrived.

The question the paper left open (§7): how many classifications would a live project have
saved, and how much would it have lost, had it retired subjects as soon as the answer was
known? The replay answers it for every retirement policy of :mod:`clumpscout.model.live`
(docs/decisions.md#live-retirement):

1. **Arrival order.** Classifications are sorted by ``created_at`` (the export's, or the
   simulator's arrival times; classification_id breaks ties). A classification's rank
   within its subject is n = 1, 2, ...
2. **Skills known at the time.** The volunteers' skills are refitted after every
   ``refit_every`` classifications (global arrival order; with ``refit_growth`` g > 0, once
   the project is large, only when the count has grown by the factor 1 + g:
   :func:`clumpscout.model.live.refit_points`) from the classifications that arrived before, and only those: one EM step of the generative model (partition with
   the skills of the moment, then the M step) on each subject's classifications so far.
   Before the first refit every volunteer has the population's prior.
3. **Every prefix assessed.** After its n-th classification, each subject is assessed by
   :func:`clumpscout.model.live.assess` with the skills of that moment: its labels, N_fp,
   N_fn, N_σ and the risk; the labels' p_fp and the expected kept labels still open come
   from the label map known at that moment (:class:`clumpscout.model.calibration.LiveMap`:
   the default map, or with a gold standard of expert marks the map learned from the gold
   subjects' prefixes that arrived before, :func:`fit_map_timeline`).
4. **Policies.** For every policy setting of the ``replay:`` section, a subject retires at
   the first n the policy says so (else it uses all its classifications); the
   classifications after that are not used, and its labels are those of that moment.
5. **Scores** per setting (one row of replay.csv): ``effort`` (classifications used / all),
   ``lost`` (share of the full-data labels with p_fp < 0.5 whose centre lies in no label
   of the replay with p_fp < 0.5), ``lost_strong`` (the same among the full-data labels
   of strongly marked objects, p_weak < 0.5), ``purity_full`` (the replay's kept labels that contain
   a full-data label's centre), ``purity``, ``completeness`` and ``count_mae`` against the
   truth when there is one (what the project counts; a label is true when it contains an
   object's centre, docs/decisions.md#true-label), ``mean_n``, ``labels``. The ``full``
   row is the full-data aggregation itself (:class:`clumpscout.model.aggregator.Aggregator`
   on every classification, calibrated on the gold standard when there is one). Every
   scored label is judged by the last label map (:func:`evaluate`); gold subjects are
   never retired early and not scored, but their classifications count in ``effort``.

Inputs: the boxes table (with ``created_at``), optionally the project's gold standard
(``--gold``, as for ``clumpscout aggregate``), the full-data labels (else the full
aggregation is run) and a truth table (subject_id, x, y). Outputs (``--out``):
replay.csv, retirement.parquet (subject_id, policy, setting, n_used, n_total),
replay.png (effort against objects lost and count error, every policy), replay.json
(the best setting: least effort with ``lost <= max_lost`` and purity within
``max_purity_drop`` of the full data; timings, refits).

Skills are shared by all policies: a refit uses every classification that arrived
before it, including those a policy would not have asked for (the classifications a
retired subject did not get would have gone to other subjects; docs/decisions.md#live-retirement).

Command line::

    clumpscout replay --boxes boxes.parquet --out DIR [--config FILE] [--gold G]
        [--full-labels L] [--truth T] [--seed N] [--workers W]
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from clumpscout import config as _config
from clumpscout.arrays import ranges
from clumpscout.config import add_setting
from clumpscout.data.gold import Gold, add_gold_options, read_gold_option
from clumpscout.errors import InputError
from clumpscout.io import atomic_path, write_json, write_parquet
from clumpscout.logs import release_free_memory
from clumpscout.metrics.containment import containment
from clumpscout.model.aggregator import Aggregator
from clumpscout.model.calibration import (
    LIVE_FEATURES,
    CalibrationSettings,
    LiveMap,
)
from clumpscout.model.gold_check import check_gold
from clumpscout.model.live import (
    MAP_LABEL_COLUMNS,
    MAP_STATE_COLUMNS,
    Assessment,
    LiveSkills,
    Policy,
    apply_map,
    assess_model,
    decide,
    refit_points,
    refit_skills,
)
from clumpscout.model.live_gold import (  # noqa: F401  (MAP_GROWTH, MAP_STEP: the replay's too)
    MAP_GROWTH,
    MAP_STEP,
    fit_map_timeline,
    gold_completions,
    gold_rows,
)
from clumpscout.model.params import Params
from clumpscout.model.prepare import REQUIRED_COLUMNS
from clumpscout.model.source import read_boxes

log = logging.getLogger(__name__)

#: the columns of replay.csv, in order
COLUMNS = [
    "policy",
    "setting",
    "effort",
    "lost",
    "lost_strong",
    "purity_full",
    "purity",
    "completeness",
    "count_mae",
    "mean_n",
    "retired_early",
    "labels",
]
#: the columns of the boxes table the replay reads (read_boxes(path, READ_COLUMNS): the
#: rest of the table is not read, docs/decisions.md#replay-memory)
READ_COLUMNS = (*REQUIRED_COLUMNS, "unusual", "created_at")


#: defaults of the ``replay:`` section, read from the config schema (clumpscout.config)
_DEFAULTS = _config.defaults("replay")


@dataclass(frozen=True)
class Settings:
    """The ``replay:`` section of the config (defaults and bounds: config.schema.yaml)."""

    refit_every: int = _DEFAULTS["refit_every"]
    refit_growth: float = _DEFAULTS["refit_growth"]
    min_classifications: int = _DEFAULTS["min_classifications"]
    fixed_n: tuple = tuple(_DEFAULTS["fixed_n"])
    risk_tau: tuple = tuple(_DEFAULTS["risk_tau"])
    generative_eps: tuple = tuple(_DEFAULTS["generative_eps"])
    caesar_k: tuple = tuple(_DEFAULTS["caesar_k"])
    caesar_cap: int = _DEFAULTS["caesar_cap"]
    horizon: int | None = _DEFAULTS["horizon"]
    max_lost: float = _DEFAULTS["max_lost"]
    max_purity_drop: float = _DEFAULTS["max_purity_drop"]

    @classmethod
    def from_dict(cls, d: dict | None) -> Settings:
        d = dict(d or {})
        out = {}
        for k, v in d.items():
            if k not in cls.__dataclass_fields__:
                raise InputError(f"unknown replay setting {k!r}")
            out[k] = tuple(v) if isinstance(v, list) else v
        return cls(**out)

    def policies(self) -> list[Policy]:
        m = int(self.min_classifications)
        out = [Policy("fixed", float(n)) for n in self.fixed_n]
        out += [Policy("risk", float(t), m) for t in self.risk_tau]
        h = 20 if self.horizon is None else int(self.horizon)  # the replay: per subject
        out += [Policy("generative", float(e), m, horizon=h) for e in self.generative_eps]
        out += [Policy("caesar", float(k), m, int(self.caesar_cap)) for k in self.caesar_k]
        return out


# ------------------------------------------------------------------ arrival order


def arrival_table(boxes: pd.DataFrame, path=None) -> pd.DataFrame:
    """One row per classification in arrival order: classification_id, subject_id, t (ns),
    g (0-based global rank), n (1-based rank within its subject), n_total (its subject's)."""
    for col in ("classification_id", "subject_id", "created_at"):
        if col not in boxes.columns:
            raise InputError(f"the replay needs a {col} column", path=path)
    t = pd.to_datetime(boxes["created_at"], utc=True, errors="coerce")
    bad = t.isna().to_numpy()
    if bad.any():
        raise InputError(
            "created_at is missing or not a date-time", path=path, row=int(bad.argmax())
        )
    cls = pd.DataFrame(
        {
            "classification_id": boxes["classification_id"].to_numpy(),
            "subject_id": boxes["subject_id"].to_numpy(),
            "t": t.to_numpy(dtype="datetime64[ns]").astype(np.int64),
        }
    )
    cls = cls.groupby("classification_id", sort=True).agg(
        subject_id=("subject_id", "first"), n_subj=("subject_id", "nunique"), t=("t", "min")
    )
    if (cls["n_subj"] > 1).any():
        cid = cls.index[(cls["n_subj"] > 1).to_numpy()][0]
        raise InputError(f"classification {cid} has rows of several subjects", path=path)
    cls = cls.drop(columns="n_subj").reset_index()
    cls = cls.sort_values(["t", "classification_id"], kind="stable").reset_index(drop=True)
    cls["g"] = np.arange(len(cls), dtype=np.int64)
    cls["n"] = cls.groupby("subject_id", sort=False).cumcount().to_numpy() + 1
    cls["n_total"] = cls.groupby("subject_id", sort=False)["n"].transform("max").to_numpy()
    return cls


class _Prefixes:
    """Builds the boxes table of "subject s after its first n classifications" fast."""

    def __init__(self, boxes: pd.DataFrame, cls: pd.DataFrame):
        # (frame() numbers the prefixes' subjects and classifications itself)
        self._COLS = [c for c in REQUIRED_COLUMNS if c not in ("subject_id", "classification_id")]
        if "unusual" in boxes.columns:
            self._COLS.append("unusual")
        rank = cls.set_index("classification_id")["n"]
        subj_codes, self.subject_ids = pd.factorize(cls["subject_id"], sort=True)
        code_of = pd.Series(subj_codes, index=cls["classification_id"].to_numpy())
        cid = boxes["classification_id"].to_numpy()
        r = rank.reindex(cid).to_numpy().astype(np.int64)
        s = code_of.reindex(cid).to_numpy().astype(np.int64)
        self.big = int(r.max()) + 1 if len(r) else 1
        key = s * self.big + r
        order = np.argsort(key, kind="stable")
        self.key = key[order]
        self.rows = boxes[self._COLS].iloc[order].reset_index(drop=True)
        # the names as codes: a prefix copies a small integer a row, not a string (the model
        # codes the names itself, the same for either; docs/decisions.md#replay-memory)
        self.rows["volunteer"] = self.rows["volunteer"].astype("category")
        self.code_of_subject = pd.Series(
            np.arange(len(self.subject_ids)), index=np.asarray(self.subject_ids)
        )

    def frame(self, subject_codes: np.ndarray, n: np.ndarray) -> pd.DataFrame:
        """Rows of every (subject, first n classifications) pair; subject_id = pair index."""
        start = np.searchsorted(self.key, subject_codes * self.big, side="left")
        end = np.searchsorted(self.key, subject_codes * self.big + n, side="right")
        idx = ranges(start, end)
        out = self.rows.iloc[idx].reset_index(drop=True)
        pair = np.repeat(np.arange(len(n), dtype=np.int64), end - start)
        out["subject_id"] = pair
        # a classification is in many prefixes: ids unique per (prefix, rank)
        out["classification_id"] = pair * self.big + self.key[idx] % self.big
        return out


# ------------------------------------------------------------------ skills over time


@dataclass
class Replay:
    """Every subject's state after each of its classifications, with its labels."""

    cls: pd.DataFrame  # arrival table (arrival_table)
    states: pd.DataFrame  # subject_id, n, g, epoch, map, model numbers; sorted by subject_id, n
    labels: pd.DataFrame  # labels of every state: state (row of states), x1..y2, x, y, p_fp, ...
    refits: list[dict]
    skills: list[LiveSkills]  # the skills of every epoch (states' ``epoch`` column)
    maps: list[LiveMap] = field(
        default_factory=list
    )  # the label maps (states' ``map``; −1: default)
    map_after: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # fitted before g
    gold_subjects: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    default_map: LiveMap = field(default_factory=LiveMap)
    final_map: LiveMap = field(default_factory=LiveMap)  # on every gold prefix: the scoring

    def label_map(self, state: int) -> LiveMap:
        """The label map a state was judged with."""
        k = int(self.states["map"].iloc[state])
        return self.default_map if k < 0 else self.maps[k]


def run_replay(
    boxes: pd.DataFrame,
    params: Params,
    settings: Settings,
    path=None,
    gold: Gold | None = None,
    calibration: CalibrationSettings | None = None,
    workers: int = 1,
) -> Replay:
    """Steps 1-3 of the module docstring: every prefix of every subject assessed with the
    skills known when its last classification arrived, and judged with the label map known
    then (:class:`clumpscout.model.calibration.LiveMap`): without ``gold`` the default map
    (``calibration.weak_real``); with expert marks, once MIN_GOLD_SUBJECTS gold subjects have
    labels, the map fitted on the gold subjects' prefixes that arrived before
    (:func:`fit_map_timeline`).

    An epoch's prefixes depend only on the skills it starts with, so with ``workers`` > 1
    threads in all, up to ``workers`` − 1 epochs are assessed at once in threads (the
    kernels and numpy release the GIL) while the main thread refits the next skills; the
    result does not depend on ``workers`` (docs/decisions.md#replay-threads)."""
    if workers < 1:
        raise InputError(f"replay: workers must be at least 1, got {workers}")
    cal = calibration or CalibrationSettings()
    cls = arrival_table(boxes, path)
    pre = _Prefixes(boxes, cls)
    bounds = refit_points(len(cls), settings.refit_every, settings.refit_growth)
    edges = np.concatenate([[0], bounds, [len(cls)]]).astype(np.int64)
    n_epochs = len(edges) - 1
    skills = LiveSkills.prior(params)
    codes = pre.code_of_subject.reindex(cls["subject_id"].to_numpy()).to_numpy()
    n_all = cls["n"].to_numpy()
    states, labels, refits, epoch_skills = [], [], [], []
    offset = 0
    pending: deque = deque()  # (epoch, its rows, the assessment or its future), in order

    def collect() -> None:  # the oldest epoch's states and labels, numbered in order
        nonlocal offset
        e, sel, a = pending.popleft()
        a = a.result() if isinstance(a, Future) else a
        st = a.subjects.assign(subject_id=pre.subject_ids[codes[sel]], g=sel, epoch=e)
        lab = a.labels.rename(columns={"subject_id": "state"})
        lab["state"] += offset
        st.index = np.arange(offset, offset + len(st))
        offset += len(st)
        states.append(st)
        labels.append(lab)
        release_free_memory()  # the epoch's work, freed in its thread's arena

    # `workers` threads in all: the main thread refits while workers − 1 threads assess, so
    # at most workers − 1 epochs' prefixes are held beside the refit's
    # (docs/decisions.md#replay-memory)
    pool = ThreadPoolExecutor(max_workers=workers - 1) if workers > 1 else None
    try:
        for e in tqdm(range(n_epochs), desc="replay epochs", unit="epoch"):
            lo, hi = int(edges[e]), int(edges[e + 1])
            sel = np.arange(lo, hi)
            epoch_skills.append(skills)
            while pool is not None and len(pending) >= workers - 1:  # before its prefixes
                collect()  # at most workers − 1 epochs at once
            frame = pre.frame(codes[sel], n_all[sel])
            if pool is None:
                pending.append((e, sel, _assess(frame, skills, params)))
                collect()
            else:
                # its own copy: the refit below must not touch the skills it is assessed with
                job = pool.submit(_assess, frame, copy.deepcopy(skills), params)
                pending.append((e, sel, job))
            del frame
            if hi >= len(cls):
                continue
            # skills for the next epoch, from what arrived before hi
            t0 = time.perf_counter()
            last = pd.DataFrame({"s": codes[:hi], "n": n_all[:hi]}).groupby("s")["n"].max()
            frame = pre.frame(last.index.to_numpy(), last.to_numpy())
            skills = refit_skills(frame, skills, params)
            del frame
            release_free_memory()
            refits.append(
                {
                    "after": int(hi),
                    "volunteers": int(len(skills.volunteer)),
                    "seconds": round(time.perf_counter() - t0, 3),
                    "population": skills.pop.to_dict(),
                }
            )
        while pending:
            collect()
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    states = pd.concat(states)
    labels = pd.concat(labels, ignore_index=True)
    order = np.lexsort((states["n"].to_numpy(), states["subject_id"].to_numpy()))
    remap = np.empty(len(states), np.int64)
    remap[order] = np.arange(len(states))
    states = states.iloc[order].reset_index(drop=True)
    labels["state"] = remap[labels["state"].to_numpy()]
    labels = labels.sort_values("state", kind="stable").reset_index(drop=True)
    gold_subjects = np.zeros(0, np.int64) if gold is None else np.asarray(gold.subjects)
    gold_subjects = np.intersect1d(gold_subjects, cls["subject_id"].to_numpy())
    G, maps = np.zeros(0, np.int64), []
    default = LiveMap.default(cal.weak_real)
    final = default
    if gold is not None and gold.kind == "marks":
        rows = gold_rows(states, labels, gold, cal)
        done = gold_completions(states, gold.subjects, settings.horizon)
        G, maps = fit_map_timeline(rows, cal, done)
        if maps:
            X = rows[list(LIVE_FEATURES)].to_numpy()
            final = LiveMap.fit(
                X, rows["real"].to_numpy(bool), cal.C, cal.weak_real, rows["subject_id"]
            )
    elif gold is not None:
        log.warning(
            "the replay's label map is learned from expert marks; with expert counts only "
            "it uses the default map (docs/decisions.md#live-retirement)"
        )
    states["map"] = np.searchsorted(G, states["g"].to_numpy(), side="right") - 1
    if settings.horizon is None:  # each subject's own number of classifications
        horizon = cls.groupby("subject_id")["n"].max().reindex(states["subject_id"]).to_numpy()
    else:
        horizon = np.full(len(states), int(settings.horizon))
    wait = gold is not None and gold.kind == "marks"
    states, labels = _judge(states, labels, maps, default, horizon, wait)
    return Replay(cls, states, labels, refits, epoch_skills, maps, G, gold_subjects, default, final)


def _judge(states, labels, maps, default, horizon, wait: bool = False):
    """The states and labels with p_fp and the policy's numbers from each state's map.
    ``wait``: a gold standard is coming, so before its first map the generative policy
    retires nothing early (the default map does not say what this project counts)."""
    # the labels are sorted by state (an assessment's labels by subject, the epochs in
    # order): state s has the label rows first[s]:first[s + 1]
    lab_state = labels["state"].to_numpy()
    if (np.diff(lab_state) < 0).any():
        raise RuntimeError("replay: the labels are not sorted by state")
    first = np.searchsorted(lab_state, np.arange(len(states) + 1))
    # each map's numbers written in place: no second copy of the states and labels
    # (docs/decisions.md#replay-memory)
    flips, new_kept = np.empty(len(states)), np.empty(len(states))
    p_fp = np.empty(len(labels))
    st_cols = [states.columns.get_loc(c) for c in MAP_STATE_COLUMNS]  # what apply_map reads
    lab_cols = [labels.columns.get_loc(c) for c in MAP_LABEL_COLUMNS]
    for k, idx in states.groupby("map", sort=True).indices.items():
        rows = ranges(first[idx], first[idx + 1])
        pos = np.repeat(np.arange(len(idx)), first[idx + 1] - first[idx])
        a = apply_map(
            Assessment(states.iloc[idx, st_cols], labels.iloc[rows, lab_cols]),
            default if k < 0 else maps[k],
            horizon[idx],
            label_subject=pos,
        )
        flips[idx] = a.subjects["flips"].to_numpy()
        new_kept[idx] = np.inf if k < 0 and wait else a.subjects["new_kept"].to_numpy()
        p_fp[rows] = a.labels["p_fp"].to_numpy()
    states["flips"], states["new_kept"] = flips, new_kept
    labels["p_fp"] = p_fp
    return states, labels


def _assess(frame: pd.DataFrame, skills: LiveSkills, params: Params) -> Assessment:
    """:func:`clumpscout.model.live.assess_model` on the prefixes (subject_id = prefix index)."""
    a = assess_model(frame, skills, params)
    if not np.array_equal(a.subjects["subject_id"].to_numpy(), np.arange(len(a.subjects))):
        raise AssertionError("every prefix holds at least one classification")
    return a


# ------------------------------------------------------------------ policies


def retirement_points(rp: Replay, policy: Policy, params: Params) -> pd.DataFrame:
    """Per subject: n_used (the first n at which ``policy`` retires it, else all its
    classifications), n_total and the row of its state then (``state``). Gold subjects are
    never retired early: the project keeps them as the label map's training set."""
    st = rp.states
    go = decide(policy, st, params)
    sid = st["subject_id"].to_numpy()
    go &= ~np.isin(sid, rp.gold_subjects)
    first = np.concatenate([[True], sid[1:] != sid[:-1]])
    starts = np.flatnonzero(first)
    ends = np.concatenate([starts[1:], [len(st)]])
    # first retiring row of each subject, else its last row
    cand = np.where(go, np.arange(len(st)), len(st))
    hit = np.minimum.reduceat(cand, starts)
    state = np.where(hit < ends, hit, ends - 1)
    return pd.DataFrame(
        {
            "subject_id": sid[starts],
            "n_used": st["n"].to_numpy()[state],
            "n_total": st["n"].to_numpy()[ends - 1],
            "state": state,
        }
    )


def _kept(labels: pd.DataFrame) -> pd.DataFrame:
    return labels.loc[labels["p_fp"].to_numpy() < 0.5]


def score(labels: pd.DataFrame, full: pd.DataFrame, truth: pd.DataFrame | None, subjects) -> dict:
    """lost, lost_strong, purity_full and (with a truth) purity, completeness, count_mae of ``labels``
    (p_fp < 0.5 kept) over ``subjects``; see the module docstring."""
    subjects = np.asarray(subjects)
    lab = _kept(labels)
    lab = lab.loc[np.isin(lab["subject_id"].to_numpy(), subjects)]
    ref = _kept(full)
    ref = ref.loc[np.isin(ref["subject_id"].to_numpy(), subjects)]
    hit_full, ref_best = containment(lab, ref[["subject_id", "x", "y"]])
    found = np.isfinite(ref_best)
    strong = (
        ref["p_weak"].fillna(0.0).to_numpy() < 0.5
        if "p_weak" in ref.columns
        else np.ones(len(ref), bool)
    )
    out = {
        "lost": float(np.mean(~found)) if len(ref) else 0.0,
        "lost_strong": float(np.mean(~found[strong])) if strong.any() else 0.0,
        "purity_full": float(np.mean(hit_full)) if len(lab) else float("nan"),
        "labels": int(len(lab)),
    }
    if truth is None:
        out.update(purity=np.nan, completeness=np.nan, count_mae=np.nan)
        return out
    tr = truth.loc[np.isin(truth["subject_id"].to_numpy(), subjects)]
    hit, best = containment(lab, tr[["subject_id", "x", "y"]])
    n_lab = pd.Series(lab["subject_id"].to_numpy()).value_counts()
    n_tr = pd.Series(tr["subject_id"].to_numpy()).value_counts()
    diff = n_lab.reindex(subjects, fill_value=0) - n_tr.reindex(subjects, fill_value=0)
    out.update(
        purity=float(np.mean(hit)) if len(lab) else float("nan"),
        completeness=float(np.mean(np.isfinite(best))) if len(tr) else float("nan"),
        count_mae=float(np.mean(np.abs(diff.to_numpy()))),
    )
    return out


def evaluate(
    rp: Replay,
    params: Params,
    settings: Settings,
    full_labels: pd.DataFrame,
    truth: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Steps 4-5: (replay table, per-subject retirement points) for every policy setting,
    plus the ``full`` row (the full-data labels). Effort counts every subject (the gold
    subjects at all their classifications); the scores are over the other subjects.

    Every label scored, the replay's (as they were at retirement) and the full data's, is
    judged by one map, the last one (:attr:`Replay.final_map`: fitted on every gold
    prefix), as a live project judges its catalogue once the project ends; the decisions
    were taken with the maps known at the time. So ``lost`` measures what retiring lost,
    not the difference between two fits of the map."""
    subjects = np.setdiff1d(np.unique(rp.states["subject_id"].to_numpy()), rp.gold_subjects)
    n_total = rp.cls.groupby("subject_id")["n"].max()
    total = int(n_total.sum())
    full_labels = rejudge(full_labels, rp.final_map, n_total)
    judged = rejudge(
        rp.labels.assign(subject_id=rp.states["subject_id"].to_numpy()[rp.labels["state"]]),
        rp.final_map,
        rp.states["n"].to_numpy()[rp.labels["state"]],
    )
    rows, points = [], []
    n_subjects = int(rp.cls["subject_id"].nunique())
    full = {"policy": "full", "setting": np.nan, "effort": 1.0, "mean_n": total / n_subjects}
    full.update(score(full_labels, full_labels, truth, subjects), retired_early=0.0)
    rows.append(full)
    lab_state = judged["state"].to_numpy()
    for pol in tqdm(settings.policies(), desc="policies", unit="setting"):
        pts = retirement_points(rp, pol, params)
        labels = judged.loc[np.isin(lab_state, pts["state"].to_numpy())]
        row = {
            "policy": pol.kind,
            "setting": pol.setting,
            "effort": float(pts["n_used"].sum() / total),
            "mean_n": float(pts["n_used"].mean()),
            "retired_early": float(np.mean(pts["n_used"] < pts["n_total"])),
        }
        row.update(score(labels, full_labels, truth, subjects))
        rows.append(row)
        points.append(pts.drop(columns="state").assign(policy=pol.kind, setting=pol.setting))
    table = pd.DataFrame(rows)[COLUMNS]
    pts = pd.concat(points, ignore_index=True)[
        ["subject_id", "policy", "setting", "n_used", "n_total"]
    ]
    return table, pts


def rejudge(labels: pd.DataFrame, label_map: LiveMap, n_viewers) -> pd.DataFrame:
    """``labels`` with p_fp from ``label_map`` (needs p_empty, p_weak, n_marks; frac_unusual
    if any); ``n_viewers``: per label, or a Series by subject_id. Labels without p_empty
    (another method's) keep their p_fp."""
    if "p_empty" not in labels.columns or not len(labels):
        return labels
    if isinstance(n_viewers, pd.Series):
        n_viewers = n_viewers.reindex(labels["subject_id"].to_numpy()).to_numpy(dtype=float)
    unusual = labels["frac_unusual"] if "frac_unusual" in labels.columns else None
    p_weak = labels["p_weak"] if "p_weak" in labels.columns else np.zeros(len(labels))
    p_real = label_map.p_real(labels["p_empty"], p_weak, labels["n_marks"], n_viewers, unusual)
    return labels.assign(p_fp=1.0 - p_real)


def best_setting(table: pd.DataFrame, settings: Settings) -> dict | None:
    """The policy setting with the least effort among those losing at most ``max_lost`` of
    the full-data objects with purity within ``max_purity_drop`` of the full data's
    (purity against the full data when there is no truth)."""
    full = table.loc[table["policy"] == "full"].iloc[0]
    col = "purity" if np.isfinite(full["purity"]) else "purity_full"
    t = table.loc[table["policy"] != "full"]
    ok = (t["lost"] <= settings.max_lost) & (t[col] >= full[col] - settings.max_purity_drop)
    if not ok.any():
        return None
    r = t.loc[ok].sort_values(["effort", "lost"], kind="stable").iloc[0]
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}


# ------------------------------------------------------------------ figure


def plot(table: pd.DataFrame, path, title: str = "") -> None:
    """Effort against objects lost (all, strongly marked) and against the count error,
    a line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_truth = table["count_mae"].notna().any()
    panels = [
        ("lost", "full-data objects lost"),
        ("lost_strong", "full-data objects lost (strongly marked)"),
    ]
    if has_truth:
        panels.append(("count_mae", "count MAE vs truth"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.0), squeeze=False)
    for ax, (col, ylabel) in zip(axes[0], panels, strict=True):
        for pol, g in table.loc[table["policy"] != "full"].groupby("policy", sort=False):
            g = g.sort_values("effort")
            ax.plot(g["effort"], g[col], "o-", ms=3, label=pol)
        f = table.loc[table["policy"] == "full"]
        ax.plot(f["effort"], f[col], "k*", ms=10, label="full data")
        ax.set_xlabel("classifications used (share of all)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, dpi=120, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)


# ------------------------------------------------------------------ the whole thing


def replay(
    boxes: pd.DataFrame,
    params: Params,
    settings: Settings,
    *,
    full_labels: pd.DataFrame | None = None,
    truth: pd.DataFrame | None = None,
    seed: int = 0,
    path=None,
    gold: Gold | None = None,
    calibration: CalibrationSettings | dict | None = None,
    workers: int = 1,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The replay and its scores: (replay table, retirement points, report). The replay's
    labels and the full-data labels both say what the project counts: with ``gold``, the
    full-data labels are calibrated on it (cross-fitted) and the replay learns its live map
    from the gold subjects as they arrive; without, both carry the default map
    (``calibration.weak_real``)."""
    t0 = time.perf_counter()
    if isinstance(calibration, dict) or calibration is None:
        calibration = CalibrationSettings(**{"seed": int(seed), **(calibration or {})})
    gold_report = None
    if full_labels is None:  # the gold standard is checked by the full-data aggregation
        log.info("full-data labels: aggregating all %d rows", len(boxes))
        agg = Aggregator(params, seed=seed, calibration=calibration)
        full_labels = agg.fit(boxes, path=path, gold=gold).labels_
        gold_report = agg.report_["calibration"].get("gold_check")
    elif gold is not None:  # checked against the full-data labels before any map is fitted
        viewers = boxes.groupby("subject_id")["classification_id"].nunique()
        subjects = pd.DataFrame({"subject_id": viewers.index, "n_volunteers": viewers.to_numpy()})
        gold_report = check_gold(full_labels, subjects, gold)
    t1 = time.perf_counter()
    rp = run_replay(
        boxes, params, settings, path=path, gold=gold, calibration=calibration, workers=workers
    )
    t2 = time.perf_counter()
    table, points = evaluate(rp, params, settings, full_labels, truth)
    t3 = time.perf_counter()
    report = {
        "classifications": int(len(rp.cls)),
        "subjects": int(rp.cls["subject_id"].nunique()),
        "states": int(len(rp.states)),
        "gold_subjects": int(len(rp.gold_subjects)),
        "label_maps": len(rp.maps),
        "label_map_last": rp.maps[-1].info | {"counted": list(rp.maps[-1].counted)}
        if rp.maps
        else "default",
        "refits": rp.refits,
        **({"gold_check": gold_report} if gold_report is not None else {}),
        "best": best_setting(table, settings),
        "max_lost": settings.max_lost,
        "max_purity_drop": settings.max_purity_drop,
        "seconds": {
            "full": round(t1 - t0, 3),
            "replay": round(t2 - t1, 3),
            "scoring": round(t3 - t2, 3),
            "refits": round(sum(f["seconds"] for f in rp.refits), 3),
        },
    }
    log.info(
        "replayed %d classifications of %d subjects (%d states, %d refits) in %.1f s; best: %s",
        report["classifications"],
        report["subjects"],
        report["states"],
        len(rp.refits),
        t3 - t1,
        report["best"],
    )
    return table, points, report


def write_outputs(out, table, points, report, title="") -> None:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "replay.csv") as tmp:
        table.to_csv(tmp, index=False, float_format="%.6g")
    write_parquet(points, out / "retirement.parquet")
    write_json(report, out / "replay.json")
    plot(table, out / "replay.png", title)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--boxes", required=True, help="boxes table (Parquet) with created_at")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument(
        "--config",
        default=None,
        help="config YAML (aggregate:, replay:, calibration:, gold:, seed)",
    )
    p.add_argument("--full-labels", default=None, help="full-data labels.parquet (else fitted)")
    p.add_argument("--truth", default=None, help="truth table (CSV: subject_id, x, y)")
    add_setting(p, "seed", from_config=True, note="here the full-data aggregation's")
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="threads: the main one refits the skills while the others assess epochs "
        "(the same result for any number)",
    )
    add_gold_options(
        p,
        "the full-data labels are calibrated on it and the replay learns its label map from "
        "the gold subjects as they arrive",
    )


def run(args: argparse.Namespace) -> int:
    cfg = _config.load(args.config) if args.config else {}
    _config.resolve(args, cfg)
    params = Params.from_dict(dict(cfg.get("aggregate") or {}))
    settings = Settings.from_dict(cfg.get("replay"))
    gold = read_gold_option(args, cfg)
    boxes = read_boxes(args.boxes, READ_COLUMNS)
    full = pd.read_parquet(args.full_labels) if args.full_labels else None
    truth = pd.read_csv(args.truth) if args.truth else None
    table, points, report = replay(
        boxes, params, settings, full_labels=full, truth=truth, seed=args.seed, path=args.boxes,
        gold=gold, calibration=dict(cfg.get("calibration") or {}), workers=args.workers,
    )  # fmt: skip
    write_outputs(args.out, table, points, report)
    log.info("wrote %s", Path(args.out) / "replay.csv")
    print(json.dumps(report["best"]))
    return 0
