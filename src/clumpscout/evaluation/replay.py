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
   :func:`refit_points`) from the classifications that arrived before, and only those: one EM step of the generative model (partition with
   the skills of the moment, then the M step) on each subject's classifications so far.
   Before the first refit every volunteer has the population's prior.
3. **Every prefix assessed.** After its n-th classification, each subject is assessed by
   :func:`clumpscout.model.live.assess` with the skills of that moment: its labels (p_fp),
   N_fp, N_fn, N_σ, the risk and the expected objects still open.
4. **Policies.** For every policy setting of the ``replay:`` section, a subject retires at
   the first n the policy says so (else it uses all its classifications); the
   classifications after that are not used, and its labels are those of that moment.
5. **Scores** per setting (one row of replay.csv): ``effort`` (classifications used / all),
   ``lost`` (share of the full-data labels with p_fp < 0.5 whose centre lies in no label
   of the replay with p_fp < 0.5), ``lost_strong`` (the same among the full-data labels
   of strongly marked objects, p_weak < 0.5), ``purity_full`` (the replay's kept labels that contain
   a full-data label's centre), ``purity``, ``completeness`` and ``count_mae`` against the
   truth when there is one (a label is true when it contains a real object's centre,
   docs/decisions.md#true-label), ``mean_n``, ``labels``. The ``full`` row is the
   full-data aggregation itself (:class:`clumpscout.model.aggregator.Aggregator` on every
   classification).

Inputs: the boxes table (with ``created_at``), optionally the full-data labels (else the
full aggregation is run) and a truth table (subject_id, x, y). Outputs (``--out``):
replay.csv, retirement.parquet (subject_id, policy, setting, n_used, n_total),
replay.png (effort against objects lost and count error, every policy), replay.json
(the best setting: least effort with ``lost <= max_lost`` and purity within
``max_purity_drop`` of the full data; timings, refits).

Skills are shared by all policies: a refit uses every classification that arrived
before it, including those a policy would not have asked for (the classifications a
retired subject did not get would have gone to other subjects; docs/decisions.md#live-retirement).

Command line::

    clumpscout replay --boxes boxes.parquet --out DIR [--config FILE] [--full-labels L]
        [--truth T] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from clumpscout import config as _config
from clumpscout.errors import InputError
from clumpscout.evaluation.compare import containment
from clumpscout.io import atomic_path, write_json, write_parquet
from clumpscout.model.em import Batch, GenSkills, _GenerativeEngine
from clumpscout.model.live import (
    WEAK_REAL,
    Assessment,
    LiveSkills,
    Policy,
    _assess_batch,
    decide,
)
from clumpscout.model.params import Params
from clumpscout.model.prepare import REQUIRED_COLUMNS, _ranges, prepare

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
#: the prefix columns :func:`clumpscout.model.live.assess` returns per subject


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
    horizon: int = _DEFAULTS["horizon"]
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
        h = int(self.horizon)
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

    _COLS = [c for c in REQUIRED_COLUMNS if c != "subject_id"]

    def __init__(self, boxes: pd.DataFrame, cls: pd.DataFrame):
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
        self.code_of_subject = pd.Series(
            np.arange(len(self.subject_ids)), index=np.asarray(self.subject_ids)
        )

    def frame(self, subject_codes: np.ndarray, n: np.ndarray) -> pd.DataFrame:
        """Rows of every (subject, first n classifications) pair; subject_id = pair index."""
        start = np.searchsorted(self.key, subject_codes * self.big, side="left")
        end = np.searchsorted(self.key, subject_codes * self.big + n, side="right")
        idx = _ranges(start, end)
        out = self.rows.iloc[idx].reset_index(drop=True)
        pair = np.repeat(np.arange(len(n), dtype=np.int64), end - start)
        out["subject_id"] = pair
        # a classification is in many prefixes: ids unique per (prefix, rank)
        out["classification_id"] = pair * self.big + self.key[idx] % self.big
        return out


# ------------------------------------------------------------------ skills over time


def refit_skills(frame: pd.DataFrame, skills: LiveSkills, params: Params) -> LiveSkills:
    """One EM step of the generative model on ``frame`` (every subject's classifications so
    far) starting from ``skills``: the partition with those skills, then the M step
    (posterior-weighted counts, empirical-Bayes population and volunteers)."""
    prep = prepare(frame)
    engine = _GenerativeEngine(prep, params, seed=0)
    sk = GenSkills(skills.lookup(prep.volunteer_names), skills.pop)
    b = Batch.build(prep, np.arange(len(prep.subject_ids)))
    fac = engine._solve(b, sk, init=False, min_cluster_size=params.min_cluster_size)
    state = engine._estimate(b, fac, engine.empty_counts(), sk)
    return LiveSkills(prep.volunteer_names.astype(object), state.skills.vp, state.skills.pop)


def refit_points(total: int, every: int, growth: float = 0.0) -> np.ndarray:
    """The arrival counts after which the skills are refitted: every ``every``
    classifications, and once the count exceeds ``every / growth`` every time it has grown
    by the factor ``1 + growth`` (so a large project needs O(log) refits; 0: no growth rule).
    """
    out, last = [], 0
    while True:
        nxt = max(last + int(every), int(np.ceil(last * (1.0 + growth))))
        if nxt >= total:
            return np.asarray(out, dtype=np.int64)
        out.append(nxt)
        last = nxt


@dataclass
class Replay:
    """Every subject's state after each of its classifications, with its labels."""

    cls: pd.DataFrame  # arrival table (arrival_table)
    states: pd.DataFrame  # subject_id, n, epoch, _STATE columns; sorted by subject_id, n
    labels: pd.DataFrame  # labels of every state: state (row of states), x1..y2, x, y, p_fp, ...
    refits: list[dict]
    skills: list[LiveSkills]  # the skills of every epoch (states' ``epoch`` column)


def run_replay(
    boxes: pd.DataFrame, params: Params, settings: Settings, path=None, weak_real: float = WEAK_REAL
) -> Replay:
    """Steps 1-3 of the module docstring: every prefix of every subject assessed with the
    skills known when its last classification arrived (p_fp: the default map with
    ``weak_real``, clumpscout.model.live.assess)."""
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
    for e in tqdm(range(n_epochs), desc="replay epochs", unit="epoch"):
        lo, hi = int(edges[e]), int(edges[e + 1])
        sel = np.arange(lo, hi)
        sc, nn = codes[sel], n_all[sel]
        epoch_skills.append(skills)
        a = _assess(pre.frame(sc, nn), skills, params, weak_real)
        st = a.subjects.assign(subject_id=pre.subject_ids[sc], epoch=e)
        lab = a.labels.rename(columns={"subject_id": "state"})
        lab["state"] += offset
        st.index = np.arange(offset, offset + len(st))
        offset += len(st)
        states.append(st)
        labels.append(lab)
        if hi < len(cls):  # skills for the next epoch, from what arrived before hi
            t0 = time.perf_counter()
            last = pd.DataFrame({"s": codes[:hi], "n": n_all[:hi]}).groupby("s")["n"].max()
            frame = pre.frame(last.index.to_numpy(), last.to_numpy())
            skills = refit_skills(frame, skills, params)
            refits.append(
                {
                    "after": int(hi),
                    "volunteers": int(len(skills.volunteer)),
                    "seconds": round(time.perf_counter() - t0, 3),
                    "population": skills.pop.to_dict(),
                }
            )
    states = pd.concat(states)
    labels = pd.concat(labels, ignore_index=True)
    order = np.lexsort((states["n"].to_numpy(), states["subject_id"].to_numpy()))
    remap = np.empty(len(states), np.int64)
    remap[order] = np.arange(len(states))
    states = states.iloc[order].reset_index(drop=True)
    labels["state"] = remap[labels["state"].to_numpy()]
    labels = labels.sort_values("state", kind="stable").reset_index(drop=True)
    return Replay(cls, states, labels, refits, epoch_skills)


def _assess(
    frame: pd.DataFrame, skills: LiveSkills, params: Params, weak_real: float = WEAK_REAL
) -> Assessment:
    """:func:`clumpscout.model.live.assess` on the prefixes (subject_id = prefix index)."""
    prep = prepare(frame)
    engine = _GenerativeEngine(prep, params, seed=0)
    sk = GenSkills(skills.lookup(prep.volunteer_names), skills.pop)
    b = Batch.build(prep, np.arange(len(prep.subject_ids)))
    a = _assess_batch(engine, prep, b, sk, params, weak_real)
    if not np.array_equal(a.subjects["subject_id"].to_numpy(), np.arange(len(a.subjects))):
        raise AssertionError("every prefix holds at least one classification")
    return a


# ------------------------------------------------------------------ policies


def retirement_points(rp: Replay, policy: Policy, params: Params) -> pd.DataFrame:
    """Per subject: n_used (the first n at which ``policy`` retires it, else all its
    classifications), n_total and the row of its state then (``state``)."""
    st = rp.states
    go = decide(policy, st, params)
    sid = st["subject_id"].to_numpy()
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
    plus the ``full`` row (the full-data labels)."""
    subjects = np.unique(rp.states["subject_id"].to_numpy())
    total = int(rp.cls.groupby("subject_id")["n"].max().sum())
    rows, points = [], []
    full = {"policy": "full", "setting": np.nan, "effort": 1.0, "mean_n": total / len(subjects)}
    full.update(score(full_labels, full_labels, truth, subjects), retired_early=0.0)
    rows.append(full)
    lab_state = rp.labels["state"].to_numpy()
    for pol in tqdm(settings.policies(), desc="policies", unit="setting"):
        pts = retirement_points(rp, pol, params)
        labels = rp.labels.loc[np.isin(lab_state, pts["state"].to_numpy())]
        labels = labels.assign(subject_id=rp.states["subject_id"].to_numpy()[labels["state"]])
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
    weak_real: float = WEAK_REAL,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The replay and its scores: (replay table, retirement points, report). The replay's
    labels and the full-data labels carry the same map from the model's posterior to p_fp
    (without a gold standard, the default map with ``weak_real``)."""
    t0 = time.perf_counter()
    if full_labels is None:
        from clumpscout.model.aggregator import Aggregator

        log.info("full-data labels: aggregating all %d rows", len(boxes))
        agg = Aggregator(params, seed=seed, calibration={"weak_real": weak_real})
        full_labels = agg.fit(boxes, path=path).labels_
    t1 = time.perf_counter()
    rp = run_replay(boxes, params, settings, path=path, weak_real=weak_real)
    t2 = time.perf_counter()
    table, points = evaluate(rp, params, settings, full_labels, truth)
    t3 = time.perf_counter()
    report = {
        "classifications": int(len(rp.cls)),
        "subjects": int(rp.cls["subject_id"].nunique()),
        "states": int(len(rp.states)),
        "refits": rp.refits,
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
    p.add_argument("--config", default=None, help="config YAML (aggregate: and replay:)")
    p.add_argument("--full-labels", default=None, help="full-data labels.parquet (else fitted)")
    p.add_argument("--truth", default=None, help="truth table (CSV: subject_id, x, y)")
    p.add_argument("--seed", type=int, default=0, help="seed of the full-data aggregation")


def run(args: argparse.Namespace) -> int:
    from clumpscout.config import load
    from clumpscout.model.prepare import read_boxes

    cfg = load(args.config) if args.config else {}
    params = Params.from_dict(dict(cfg.get("aggregate") or {}))
    settings = Settings.from_dict(cfg.get("replay"))
    weak_real = float((cfg.get("calibration") or {}).get("weak_real", WEAK_REAL))
    boxes = read_boxes(args.boxes)
    full = pd.read_parquet(args.full_labels) if args.full_labels else None
    truth = pd.read_csv(args.truth) if args.truth else None
    table, points, report = replay(
        boxes, params, settings, full_labels=full, truth=truth, seed=args.seed, path=args.boxes,
        weak_real=weak_real,
    )  # fmt: skip
    write_outputs(args.out, table, points, report)
    log.info("wrote %s", Path(args.out) / "replay.csv")
    print(json.dumps(report["best"]))
    return 0
