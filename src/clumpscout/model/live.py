"""Live retirement: retire one subject or go on, given its classifications so far.

This is the piece a live project would call after every new classification of a subject
(a Caesar external reducer, or a project's own service): the generative model
(:mod:`clumpscout.model.generative`) applied to the subject's boxes **with the volunteers'
skills held fixed** (those known at that moment), then a retirement policy
(docs/decisions.md#live-retirement). The replay of a whole project
(:mod:`clumpscout.evaluation.replay`) calls the same functions, many subjects at a time.

:func:`retire` (one subject):

* input: ``boxes``, the boxes table of one subject's classifications so far (the columns
  of ``clumpscout boxes``: classification_id, subject_id, volunteer, x1, y1, x2, y2,
  image_width, image_height; one coordinate-less row for a classification that marked
  nothing); ``skills``, the volunteers' current skills (:class:`LiveSkills`; volunteers it
  does not know get the population's prior); ``policy`` (:class:`Policy`); ``params``,
  the ``aggregate:`` hyper-parameters (:class:`clumpscout.model.params.Params`).
* output: a :class:`Decision`: ``retire`` (bool), the subject's current labels (p_fp,
  p_weak per label), and the numbers the policies read: classifications, empty ones,
  N_fp, N_fn, N_σ, the risk R and the expected number of objects that the
  classifications still to come could add or remove (:func:`open_objects`).

:func:`assess` is the same model step on any number of subjects at once (one row per
subject in ``subjects``, one row per label in ``labels``); :func:`assess_model` the same
before a label map is applied. :func:`refit_skills` learns the skills again from every
classification so far (one EM step), at the arrival counts :func:`refit_points` gives: the
replay and a live service refit at the same points.

The steps are those of the aggregation (:mod:`clumpscout.model.em`): the facility-location
partition with the generative costs (strong objects, then weak ones among the lone boxes,
merge of overlapping clusters), label boxes, the posterior p_fp and N_fn
(:func:`clumpscout.model.generative.posterior`) and the risk of §5.7
(:func:`clumpscout.model.risk.subject_risk`). Only the M step (learning skills) is left
out: skills come from the classifications that arrived earlier.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import special

from clumpscout import config as _config
from clumpscout.errors import InputError
from clumpscout.model import generative as gen
from clumpscout.model.calibration import LiveMap
from clumpscout.model.em import Batch, Clustering, GenerativeEngine, GenSkills
from clumpscout.model.params import Params
from clumpscout.model.prepare import prepare
from clumpscout.model.retirement import retire_mask

#: the policies and what their setting means (docs/decisions.md#live-retirement)
POLICIES = {
    "fixed": "retire at this many classifications",
    "risk": "the paper's rule (§5.8) with this risk threshold tau",
    "generative": "retire when the expected objects more classifications could change < this",
    "caesar": "retire after this many classifications that marked nothing (or at the cap)",
}


@dataclass
class LiveSkills:
    """Volunteers' skills as known at one moment (generative model).

    ``volunteer`` (names) aligned with ``vp`` (p_fn, lam = false boxes per classification,
    sigma2); ``pop`` the population, whose prior a volunteer not in ``volunteer`` gets.
    """

    volunteer: np.ndarray
    vp: gen.VolunteerParams
    pop: gen.Population

    @classmethod
    def prior(cls, params: Params) -> LiveSkills:
        """Nobody known yet: the population before any evidence (the hyper-prior values)."""
        pop = gen.initial_population(
            params.p0_fn, params.p0_fp, params.sigma2_0_V, params.n_chi_V, weak=params.weak_objects
        )
        empty = np.array([], dtype=object)
        return cls(empty, gen.volunteer_params(gen.SoftCounts.zeros(0), pop), pop)

    @classmethod
    def from_tables(cls, volunteers: pd.DataFrame, population: dict) -> LiveSkills:
        """From an aggregation's volunteers.parquet (volunteer, p_fn, fp_rate, sigma2) and
        its report.json's ``model.population``."""
        pop = gen.Population(**{k: float(v) for k, v in population.items()})
        v = volunteers.sort_values("volunteer", kind="stable")
        vp = gen.VolunteerParams(
            p_fn=v["p_fn"].to_numpy(float),
            lam=v["fp_rate"].to_numpy(float),
            sigma2=v["sigma2"].to_numpy(float),
        )
        return cls(v["volunteer"].to_numpy(dtype=object), vp, pop)

    def lookup(self, names: np.ndarray) -> gen.VolunteerParams:
        """Parameters of ``names`` (unknown ones: the population's prior means)."""
        names = np.asarray(names, dtype=object)
        prior = gen.volunteer_params(gen.SoftCounts.zeros(1), self.pop)
        out = [np.full(len(names), a[0]) for a in (prior.p_fn, prior.lam, prior.sigma2)]
        if len(self.volunteer) and len(names):
            pos = np.searchsorted(self.volunteer, names)
            pos = np.minimum(pos, len(self.volunteer) - 1)
            known = self.volunteer[pos] == names
            for o, a in zip(out, (self.vp.p_fn, self.vp.lam, self.vp.sigma2), strict=True):
                o[known] = a[pos[known]]
        return gen.VolunteerParams(*out)


@dataclass(frozen=True)
class Policy:
    """A retirement policy (docs/decisions.md#live-retirement).

    ``kind`` one of :data:`POLICIES`, ``setting`` its number; ``min_classifications``
    applies to ``risk`` and ``generative`` (no decision before), ``cap`` to every kind but
    ``fixed`` (retire at this many classifications whatever else); ``horizon`` (generative)
    the classifications a subject gets without early retirement (:func:`open_objects`).
    """

    kind: str
    setting: float
    min_classifications: int = 3
    cap: int = 1_000_000
    horizon: int = 20

    def __post_init__(self):
        if self.kind not in POLICIES:
            raise ValueError(f"unknown policy {self.kind!r} (one of {', '.join(POLICIES)})")

    @property
    def name(self) -> str:
        return f"{self.kind}={self.setting:g}"


#: strength (pseudo-viewers) of the prior of a label's own marking rate in the look-ahead
RATE_PRIOR_STRENGTH = 2.0


def betabinom_pmf(k, n, a, b) -> np.ndarray:
    """``scipy.stats.betabinom.pmf(k, n, a, b)``, the same numbers (the same expression on
    the same values: C(n, k) B(k + a, n − k + b) / B(a, b) through ``betaln``, clipped to
    [0, 1]; 0 off the support, NaN for invalid parameters) without the generic
    distribution machinery, which costs more than the look-ahead itself on one subject (a
    live request). Checked against scipy in tests/test_retirement.py."""
    k, n, a, b = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (k, n, a, b)))
    ok = (n >= 0) & (n == np.round(n)) & (a > 0) & (b > 0)
    on = ok & (k >= 0) & (k <= n) & (np.floor(k) == k)
    out = np.zeros(k.shape)
    out[~ok | np.isnan(k)] = np.nan
    k, n, a, b = np.floor(k[on]), n[on], a[on], b[on]
    combiln = -np.log(n + 1) - special.betaln(n - k + 1, k + 1)
    log_pmf = combiln + special.betaln(k + a, n - k + b) - special.betaln(a, b)
    out[on] = np.clip(np.exp(log_pmf), 0, 1)
    return out


def horizon_posterior(p_empty, p_weak, n_marks, n, m, t_bar, a_weak, k_max: int):
    """A label's future after m more viewers: (P(K), p_empty, p_weak) after K = 0..k_max
    more marks, each (labels × k_max + 1).

    A real label's own marking rate is uncertain around its marks so far (``n_marks`` of
    ``n``): objects differ in how visible they are, so its future marks are beta-binomial
    with the label's rate posterior (prior: the class mixture's mean rate, t_bar for a
    strong object and ``a_weak`` for a weak one, with :data:`RATE_PRIOR_STRENGTH`
    pseudo-viewers); a coincidence of false boxes is never marked again. The class
    posterior after K marks is the model's own update (docs/model.md, live retirement):
    each new mark multiplies the odds weak : strong by a_weak / t_bar, each viewer who does
    not mark by (1 − a_weak) / (1 − t_bar)."""
    pe = np.clip(np.asarray(p_empty, dtype=np.float64), 0.0, 1.0)[:, None]
    pw = np.clip(np.nan_to_num(np.asarray(p_weak, dtype=np.float64)), 0.0, 1.0)[:, None]
    k_now = np.asarray(n_marks, dtype=np.float64)[:, None]
    n_now = np.asarray(n, dtype=np.float64)[:, None]
    m = np.asarray(m, dtype=np.float64)[:, None]
    t = np.clip(np.asarray(t_bar, dtype=np.float64), 1e-9, 1 - 1e-9)[:, None]
    a = np.clip(np.asarray(a_weak, dtype=np.float64), 1e-9, 1 - 1e-9)[:, None]
    kk = np.arange(k_max + 1, dtype=np.float64)[None, :]
    rate0 = (1.0 - pw) * t + pw * a
    alpha = RATE_PRIOR_STRENGTH * rate0 + k_now
    beta = RATE_PRIOR_STRENGTH * (1.0 - rate0) + np.maximum(n_now - k_now, 0.0)
    bb = np.where(kk <= m, betabinom_pmf(kk, m, alpha, beta), 0.0)
    l0 = np.zeros_like(bb)
    l0[:, 0] = 1.0
    total = pe * l0 + (1.0 - pe) * bb
    with np.errstate(invalid="ignore", divide="ignore"):
        p_empty_h = np.where(total > 0, pe * l0 / total, 0.0)
        log_odds = (
            special.logit(np.clip(pw, 1e-300, 1 - 1e-16))
            + kk * (np.log(a) - np.log(t))
            + (m - kk) * (np.log1p(-a) - np.log1p(-t))
        )
    return total, p_empty_h, special.expit(log_odds)


def label_flips(
    labels: pd.DataFrame, m, t_bar, a_weak, label_map: LiveMap, chunk: int = 200_000
) -> np.ndarray:
    """Per label: the probability that it is kept (p_fp < 0.5) at the horizon but not now,
    or now but not at the horizon, as a map fitted on more gold would judge both
    (:meth:`clumpscout.model.calibration.LiveMap.kept_probability`; docs/model.md, live
    retirement).

    ``labels`` (a table, or a mapping of arrays): p_empty, p_weak, n_marks, n (its
    subject's classifications so far), frac_unusual; ``m`` (per label) the
    classifications still to come. The
    label's marks and class posterior after K more marks (:func:`horizon_posterior`) go
    through ``label_map`` as the label would be seen then."""
    cols = {
        c: np.asarray(labels[c], dtype=np.float64) for c in ("p_empty", "p_weak", "n_marks", "n")
    }
    unusual = np.asarray(labels["frac_unusual"], dtype=np.float64)
    n_lab = len(unusual)
    out = np.zeros(n_lab)
    m = np.broadcast_to(np.asarray(m, dtype=np.float64), (n_lab,))
    t_bar = np.broadcast_to(np.asarray(t_bar, dtype=np.float64), (n_lab,))
    a_weak = np.broadcast_to(np.asarray(a_weak, dtype=np.float64), (n_lab,))
    kept_now = label_map.kept_probability(
        cols["p_empty"], cols["p_weak"], cols["n_marks"], cols["n"], unusual
    )
    for lo in range(0, n_lab, chunk):
        sl = slice(lo, min(lo + chunk, n_lab))
        mm = m[sl]
        k_max = int(mm.max()) if len(mm) else 0
        if k_max == 0:
            continue
        pk, pe_h, pw_h = horizon_posterior(
            cols["p_empty"][sl],
            cols["p_weak"][sl],
            cols["n_marks"][sl],
            cols["n"][sl],
            mm,
            t_bar[sl],
            a_weak[sl],
            k_max,
        )
        kk = np.arange(k_max + 1)[None, :]
        marks = cols["n_marks"][sl][:, None] + kk
        views = np.broadcast_to((cols["n"][sl] + mm)[:, None], marks.shape)
        fu = np.broadcast_to(unusual[sl][:, None], marks.shape)
        kept_h = label_map.kept_probability(
            pe_h.ravel(), pw_h.ravel(), marks.ravel(), views.ravel(), fu.ravel()
        ).reshape(marks.shape)
        change = np.abs(kept_h - kept_now[sl][:, None])
        out[sl] = np.sum(np.where(kk <= mm[:, None], pk, 0.0) * change, axis=1)
    return out


def new_label_kept(marks, views, prior_log_odds_weak, q_w, t_bar, label_map: LiveMap):
    """The probability that a new label of ``marks`` marks from ``views`` viewers would be
    kept (:meth:`clumpscout.model.calibration.LiveMap.kept_probability`): p_empty ≈ 0 (two
    or more coinciding marks), p_weak from the prior odds of the weak class and the marks
    (docs/model.md, live retirement); every argument but the map per row or one number."""
    marks = np.asarray(marks, dtype=np.float64)
    views = np.asarray(views, dtype=np.float64)
    q_w = np.clip(np.asarray(q_w, dtype=np.float64), 1e-12, 1.0)
    t_bar = np.clip(np.asarray(t_bar, dtype=np.float64), 1e-12, 1 - 1e-12)
    a = np.clip(q_w * t_bar, 0.0, 1 - 1e-12)
    log_odds = (
        prior_log_odds_weak
        + marks * np.log(q_w)
        + (views - marks) * (np.log1p(-a) - np.log1p(-t_bar))
    )
    p_weak = np.broadcast_to(special.expit(log_odds), marks.shape)
    kept = label_map.kept_probability(
        np.zeros(marks.size), p_weak.ravel(), marks.ravel(), views.ravel()
    )
    return kept.reshape(marks.shape)


def new_kept_labels(state: pd.DataFrame, m, label_map: LiveMap) -> np.ndarray:
    """Per row of ``state``: the expected number of labels kept at the horizon for objects
    no label holds now: strong objects nobody marked (``strong0``) or marked once
    (``lone``), weak objects nobody marked (``weak0``) or marked once (``weak1``), each
    once at least two viewers have marked it and if the map would keep such a label.

    Objects differ in how visible they are, so an object's own marking rate is uncertain
    around its class's mean (t_bar strong, a_weak weak) with :data:`RATE_PRIOR_STRENGTH`
    pseudo-viewers, updated by its marks so far (0 or 1 of the subject's n viewers): its
    future marks are beta-binomial. ``state`` also has n, t_bar, a_weak, q_w and
    prior_weak (ln rho_w / rho)."""
    n_s = len(state)
    m = np.broadcast_to(np.asarray(m, dtype=np.int64), (n_s,))
    n = state["n"].to_numpy(dtype=np.int64)
    keys = np.column_stack(
        [*(state[c].to_numpy(dtype=np.float64) for c in ("t_bar", "q_w", "prior_weak")), m, n]
    ).astype(np.float64)
    # distinct rows (each row's result depends on its own values only, not on their order)
    if n_s == 1:  # one subject (a live request): np.unique's answer, without its sorting
        g, group = keys, np.zeros(1, np.int64)
    else:
        g, group = np.unique(keys, axis=0, return_inverse=True)  # t_bar, q_w, prior, m, n
        group = group.reshape(-1)
    t_bar, q_w, prior, mm, nn = (g[:, j] for j in range(5))
    terms = [("strong0", 0, False), ("lone", 1, False), ("weak0", 0, True), ("weak1", 1, True)]
    # one row per (group, term, K), K = 0..m of the group: every look-ahead in one map call
    k_max = int(mm.max()) if len(mm) else 0
    kk = np.arange(k_max + 1, dtype=np.float64)[None, :]
    valid = kk <= mm[:, None]
    prob = np.zeros((len(g), len(terms)))
    for j, (_, k0, weak) in enumerate(terms):
        rate = (q_w * t_bar if weak else t_bar)[:, None]
        alpha = RATE_PRIOR_STRENGTH * rate + k0
        beta = RATE_PRIOR_STRENGTH * (1.0 - rate) + np.maximum(nn - k0, 0.0)[:, None]
        pmf = np.where(valid, betabinom_pmf(kk, mm[:, None], alpha, beta), 0.0)
        marks = k0 + kk + 0.0 * mm[:, None]
        views = np.broadcast_to((nn + mm)[:, None], marks.shape)
        kept = new_label_kept(
            marks.ravel(),
            views.ravel(),
            np.repeat(prior, marks.shape[1]),
            np.repeat(q_w, marks.shape[1]),
            np.repeat(t_bar, marks.shape[1]),
            label_map,
        ).reshape(marks.shape)
        prob[:, j] = np.sum(pmf * (marks >= 2) * kept * (mm[:, None] > 0), axis=1)
    counts = np.column_stack([state[c].to_numpy(dtype=np.float64) for c, _, _ in terms])
    return np.sum(counts * prob[group], axis=1)


def open_objects(state: pd.DataFrame) -> np.ndarray:
    """Per row of ``state``: the expected number of labels the classifications still to
    come (up to the horizon) would add to or remove from the kept ones (p_fp < 0.5):
    ``flips`` (Σ over the labels of the probability that a label changes sides) plus
    ``new_kept`` (labels kept then for objects no label holds now); both come from
    :func:`apply_map` (docs/decisions.md#live-retirement; equations in docs/model.md)."""
    return state["flips"].to_numpy() + state["new_kept"].to_numpy()


#: the columns :func:`apply_map` reads of an assessment's subjects and labels
MAP_STATE_COLUMNS = (
    "n",
    "t_bar",
    "a_weak",
    "q_w",
    "prior_weak",
    "strong0",
    "lone",
    "weak0",
    "weak1",
)
MAP_LABEL_COLUMNS = ("p_empty", "p_weak", "n_marks", "frac_unusual")


def apply_map(a: Assessment, label_map: LiveMap | None, horizon, label_subject=None) -> Assessment:
    """The assessment with its labels' ``p_fp`` from ``label_map`` (None: the default map)
    and the policy's numbers that depend on it: ``flips``, ``new_kept`` (the classifications
    still to come: ``horizon`` − n per subject; ``horizon`` one number or one per subject).
    ``label_subject``: each label's row of ``a.subjects`` (default: by subject_id)."""
    label_map = label_map or LiveMap.default(WEAK_REAL)
    st, lab = a.subjects, a.labels
    if label_subject is None:
        pos = pd.Series(np.arange(len(st)), index=st["subject_id"].to_numpy())
        label_subject = pos.reindex(lab["subject_id"].to_numpy()).to_numpy()
    label_subject = np.asarray(label_subject, dtype=np.int64)
    n = st["n"].to_numpy(dtype=np.float64)
    # the columns read as arrays once (a pandas column access costs more than the
    # arithmetic on one subject's labels: a live request)
    cols = {c: lab[c].to_numpy() for c in ("p_empty", "p_weak", "n_marks", "frac_unusual")}
    cols["n"] = n[label_subject]
    p_fp = 1.0 - label_map.p_real(
        cols["p_empty"], cols["p_weak"], cols["n_marks"], cols["n"], cols["frac_unusual"]
    )
    m = np.maximum(horizon - n, 0.0)
    flips = label_flips(
        cols,
        m[label_subject],
        st["t_bar"].to_numpy()[label_subject],
        st["a_weak"].to_numpy()[label_subject],
        label_map,
    )
    st = st.assign(
        flips=np.bincount(label_subject, weights=flips, minlength=len(st)),
        new_kept=new_kept_labels(st, m.astype(np.int64), label_map),
    )
    return Assessment(st, lab.assign(p_fp=p_fp), a.counts)


def decide(policy: Policy, state: pd.DataFrame, params: Params) -> np.ndarray:
    """Retire (True) or go on, per row of ``state`` (one subject after n classifications).

    ``state`` columns: n (classifications so far), n_empty (those that marked nothing),
    n_boxes, n_fp, n_fn, n_sigma, risk and the terms of :func:`open_objects`.
    """
    n = state["n"].to_numpy()
    s = policy.setting
    if policy.kind == "fixed":
        return n >= s
    ready = n >= policy.min_classifications
    if policy.kind == "caesar":
        out = state["n_empty"].to_numpy() >= s
    elif policy.kind == "risk":
        # §5.8 with tau = the setting; subjects nobody marked retire as empty after
        # min_volunteers_empty viewers (§5.1, the live rule of docs/decisions.md#retirement)
        p = _with_tau(params, s)
        marked = state["n_boxes"].to_numpy() > 0
        ok = retire_mask(state["n_fp"], state["n_fn"], state["n_sigma"], state["risk"], p)
        out = ready & ((marked & ok) | (~marked & (n >= params.min_volunteers_empty)))
    else:  # generative
        out = ready & (open_objects(state) < s)
    return out | (n >= policy.cap)


@dataclass(frozen=True)
class _Tau:
    tau: float
    n_fp_max: float
    n_fn_max: float
    n_sigma_max: float


def _with_tau(params: Params, tau: float) -> _Tau:
    return _Tau(float(tau), params.n_fp_max, params.n_fn_max, params.n_sigma_max)


@dataclass
class Assessment:
    """The model's view of some subjects: one row per subject and one per label."""

    subjects: (
        pd.DataFrame
    )  # subject_id, n, n_empty, n_boxes, n_fp, n_fn, n_sigma, risk, terms of open_objects
    labels: pd.DataFrame  # subject_id, x1, y1, x2, y2, x, y, p_fp, p_weak, n_marks
    counts: gen.SoftCounts | None = field(default=None, repr=False)


#: P(a weakly marked label is what the project counts) without a gold standard (the
#: calibration's default map, docs/decisions.md#no-gold-default)
WEAK_REAL = float(_config.defaults("calibration")["weak_real"])


def assess(
    boxes: pd.DataFrame,
    skills: LiveSkills,
    params: Params,
    path=None,
    label_map: LiveMap | None = None,
    horizon: int = 20,
) -> Assessment:
    """The generative model on the subjects of ``boxes`` with fixed volunteer skills.

    Every subject of the table is assessed with all its rows (one partition, the posterior,
    the risk); see the module docstring. ``path`` names the table in errors. The labels'
    ``p_fp`` is the probability that a label is not what the project counts, from
    ``label_map`` (:class:`clumpscout.model.calibration.LiveMap`: fitted on a gold
    standard, or None: the default map with ``calibration.weak_real``; the model's own
    posterior is ``p_empty``); the open objects look ahead to ``horizon`` classifications
    (:func:`apply_map`).
    """
    return apply_map(assess_model(boxes, skills, params, path), label_map, horizon)


def assess_model(boxes: pd.DataFrame, skills: LiveSkills, params: Params, path=None) -> Assessment:
    """The model's own numbers of every subject of ``boxes`` with fixed volunteer skills
    (:func:`assess` before a label map is applied: labels carry ``p_empty`` and ``p_weak``,
    not yet ``p_fp``; :func:`apply_map` adds them)."""
    if params.model != GenerativeEngine.name:
        raise InputError("live retirement needs aggregate.model: generative", path=path)
    prep = prepare(boxes, path=path)
    engine = GenerativeEngine(prep, params, seed=0)
    sk = GenSkills(skills.lookup(prep.volunteer_names), skills.pop)
    b = Batch.build(prep, np.arange(len(prep.subject_ids)))
    return _assessment(prep, b, *engine.assess(b, sk))


def refit_skills(frame: pd.DataFrame, skills: LiveSkills, params: Params) -> LiveSkills:
    """One EM step of the generative model on ``frame`` (every subject's classifications so
    far) starting from ``skills``: the partition with those skills, then the M step
    (posterior-weighted counts, empirical-Bayes population and volunteers)."""
    prep = prepare(frame)
    engine = GenerativeEngine(prep, params, seed=0)
    sk = GenSkills(skills.lookup(prep.volunteer_names), skills.pop)
    b = Batch.build(prep, np.arange(len(prep.subject_ids)))
    state = engine.step(b, engine.empty_counts(), sk)
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


def _assessment(prep, b: Batch, state: Clustering, rk: dict) -> Assessment:
    """The model's own numbers of the batch's subjects (no label map applied yet) from the
    engine's assessment ``state`` and its risk ``rk``."""
    n_s = len(b.subjects)
    sk, post = state.skills, state.posterior
    box_cluster, cl_subj, labels = state.box_cluster, state.cluster_subject, state.labels
    n_cl = len(cl_subj)
    tp = box_cluster >= 0
    n_marks = np.bincount(box_cluster[tp], minlength=n_cl).astype(np.int64)
    unusual = prep.box_unusual[b.box_idx][tp].astype(np.float64)
    frac_unusual = np.bincount(box_cluster[tp], weights=unusual, minlength=n_cl) / np.maximum(
        n_marks, 1
    )
    n_cls = np.bincount(b.cls_subject, minlength=n_s)
    n_boxes = np.bincount(b.box_subject, minlength=n_s)
    marked = np.zeros(len(b.cls_idx), bool)
    marked[b.box_cls] = True
    n_empty = np.bincount(b.cls_subject, weights=~marked, minlength=n_s).astype(np.int64)
    sid = prep.subject_ids[b.subjects]
    pop = sk.pop
    g_strong = gen.subject_all_miss(b.cls_vol, b.cls_subject, n_s, sk.vp.p_fn)
    g_weak = gen.subject_all_miss(b.cls_vol, b.cls_subject, n_s, sk.vp.p_fn, pop.q_w)
    lone = box_cluster < 0
    lone_other = np.bincount(b.box_subject, weights=lone * (1.0 - post.r_box), minlength=n_s)
    # weak objects marked exactly once, among the lone boxes the strong class does not
    # explain: their prior rate against the false boxes' (both land anywhere)
    w1 = np.maximum(post.undetected_weak - pop.rho_w * np.exp(g_weak), 0.0)
    false_rate = np.bincount(b.cls_subject, weights=sk.vp.lam[b.cls_vol], minlength=n_s)
    weak1 = lone_other * w1 / np.maximum(w1 + false_rate, 1e-12)
    t_bar = 1.0 - pop.m_fn
    subjects = pd.DataFrame(
        {
            "subject_id": sid,
            "n": n_cls.astype(np.int64),
            "n_empty": n_empty,
            "n_boxes": n_boxes.astype(np.int64),
            "n_fp": rk["n_fp"],
            "n_fn": rk["n_fn"],
            "n_sigma": rk["n_sigma"],
            "risk": rk["risk"],
            # objects no label holds: strong ones nobody / one viewer marked, weak ones
            "strong0": pop.rho * np.exp(g_strong),
            "lone": rk["n_fn_coincidence"],
            "weak0": pop.rho_w * np.exp(g_weak),
            "weak1": weak1,
            "t_bar": np.full(n_s, t_bar),
            "a_weak": np.full(n_s, pop.q_w * t_bar),
            "q_w": np.full(n_s, pop.q_w),
            "prior_weak": np.full(n_s, np.log(max(pop.rho_w, 1e-12) / max(pop.rho, 1e-12))),
        }
    )
    gs = b.subjects[cl_subj]
    lab = pd.DataFrame(
        {
            "subject_id": sid[cl_subj],
            **prep.boxes_px(gs, labels),
            "p_weak": post.p_weak,
            "p_empty": post.p_fp,
            "n_marks": n_marks,
            "frac_unusual": frac_unusual,
        }
    )
    return Assessment(subjects, lab)


@dataclass
class Decision:
    """What :func:`retire` returns for one subject."""

    retire: bool
    policy: str
    numbers: dict  # n, n_empty, n_boxes, n_fp, n_fn, n_sigma, risk, open_objects and its terms
    labels: pd.DataFrame


def retire(
    boxes: pd.DataFrame,
    skills: LiveSkills,
    policy: Policy,
    params: Params | None = None,
    label_map: LiveMap | None = None,
) -> Decision:
    """Retire one subject now or ask for more classifications (see the module docstring).

    ``label_map``: the project's map to "what it counts" (a
    :class:`clumpscout.model.calibration.LiveMap` fitted on its gold standard; None: the
    default map without gold).

        >>> import numpy as np, pandas as pd
        >>> from clumpscout.model.live import LiveSkills, Policy, retire
        >>> from clumpscout.model.params import Params
        >>> boxes = pd.DataFrame({
        ...     "classification_id": [1, 2, 3], "subject_id": 7, "volunteer": ["a", "b", "c"],
        ...     "x1": [np.nan] * 3, "y1": [np.nan] * 3, "x2": [np.nan] * 3, "y2": [np.nan] * 3,
        ...     "image_width": 100.0, "image_height": 100.0})
        >>> d = retire(boxes, LiveSkills.prior(Params()), Policy("caesar", 3))
        >>> d.retire, d.numbers["n_empty"], len(d.labels)
        (True, 3, 0)
    """
    params = Params() if params is None else params
    ids = pd.unique(boxes["subject_id"])
    if len(ids) != 1:
        raise InputError(f"retire() takes one subject's boxes, got {len(ids)} subjects")
    a = assess(boxes, skills, params, label_map=label_map, horizon=policy.horizon)
    go = bool(decide(policy, a.subjects, params)[0])
    numbers = {k: a.subjects[k].iloc[0].item() for k in a.subjects.columns if k != "subject_id"}
    numbers["open_objects"] = float(open_objects(a.subjects)[0])
    return Decision(go, policy.name, numbers, a.labels)
