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
  the ``aggregate:`` hyper-parameters (:class:`clumpscout.model.aggregate.Params`).
* output: a :class:`Decision`: ``retire`` (bool), the subject's current labels (p_fp,
  p_weak per label), and the numbers the policies read: classifications, empty ones,
  N_fp, N_fn, N_σ, the risk R and the expected number of objects that the
  classifications still to come could add or remove (:func:`open_objects`).

:func:`assess` is the same model step on any number of subjects at once (one row per
subject in ``subjects``, one row per label in ``labels``).

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

from clumpscout import config as _config
from clumpscout.errors import InputError
from clumpscout.model import generative as gen
from clumpscout.model.em import Batch, GenSkills, _GenerativeEngine
from clumpscout.model.params import Params
from clumpscout.model.prepare import prepare
from clumpscout.model.retirement import retire_mask
from clumpscout.model.risk import clump_location_variance, clump_sigma_prob, subject_risk

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


def at_least(k: int, prob, m) -> np.ndarray:
    """P(at least k (1 or 2) of m independent viewers mark an object each marks with ``prob``)."""
    prob = np.clip(np.asarray(prob, dtype=np.float64), 0.0, 1.0)
    m = np.maximum(np.asarray(m, dtype=np.float64), 0.0)
    none = (1.0 - prob) ** m
    if k == 1:
        return 1.0 - none
    one = m * prob * (1.0 - prob) ** np.maximum(m - 1.0, 0.0)
    return np.maximum(1.0 - none - one, 0.0)


def open_objects(state: pd.DataFrame, horizon: int) -> np.ndarray:
    """Per row of ``state``: the expected number of objects that the classifications still
    to come (up to ``horizon`` per subject) would add to or remove from the labels
    (docs/decisions.md#live-retirement; equations in docs/model.md).

    ``flips`` (``Σ_l min(p_fp, 1 − p_fp)``: a kept label that is false, a dropped one that
    is real) plus the objects a label would be added for: strong objects nobody marked
    (``strong0``) once two more viewers mark them, lone boxes of real strong objects
    (``lone``) and weak objects marked once (``weak1``) once one more does, weak objects
    nobody marked (``weak0``) once two more do; a viewer to come marks a strong object with
    the population's ``t_bar`` = 1 − mean p_fn and a weak one with ``a_weak`` = q_w t_bar.
    """
    m = np.maximum(horizon - state["n"].to_numpy(dtype=np.float64), 0.0)
    t, a = state["t_bar"].to_numpy(), state["a_weak"].to_numpy()
    return (
        state["flips"].to_numpy()
        + state["strong0"].to_numpy() * at_least(2, t, m)
        + state["lone"].to_numpy() * at_least(1, t, m)
        + state["weak0"].to_numpy() * at_least(2, a, m)
        + state["weak1"].to_numpy() * at_least(1, a, m)
    )


def label_flips(p_fp, label_subject, n_subjects: int, weight=1.0) -> np.ndarray:
    """Per subject ``Σ_l c_l min(p_l, 1 − p_l)``: ``p`` the model's probability that nothing
    is there (p_empty), ``c_l`` (``weight``) the probability that a real label is an object
    the project counts (:func:`counted_weight`; 1: every real label counts)."""
    p = np.asarray(p_fp, dtype=np.float64)
    w = np.minimum(p, 1.0 - p) * np.broadcast_to(np.asarray(weight, dtype=np.float64), p.shape)
    return np.bincount(np.asarray(label_subject, np.int64), weights=w, minlength=n_subjects)


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
        out = ready & (open_objects(state, policy.horizon) < s)
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
    weak_real: float = WEAK_REAL,
) -> Assessment:
    """The generative model on the subjects of ``boxes`` with fixed volunteer skills.

    Every subject of the table is assessed with all its rows (one partition, the posterior,
    the risk); see the module docstring. ``path`` names the table in errors. The labels'
    ``p_fp`` is the calibrated probability that a label is not what the project counts
    (:func:`clumpscout.model.calibration.default_calibration`'s map with ``weak_real``; the
    model's own posterior is ``p_empty``), and weak objects no label holds count
    ``weak_real`` each in the open objects.
    """
    if params.model != "generative":
        raise InputError("live retirement needs aggregate.model: generative", path=path)
    prep = prepare(boxes, path=path)
    engine = _GenerativeEngine(prep, params, seed=0)
    sk = GenSkills(skills.lookup(prep.volunteer_names), skills.pop)
    b = Batch.build(prep, np.arange(len(prep.subject_ids)))
    return _assess_batch(engine, prep, b, sk, params, weak_real)


def calibrated_p_fp(p_empty, p_weak, weak_real: float = WEAK_REAL) -> np.ndarray:
    """``1 − (1 − p_empty)(1 − (1 − w) p_weak)``: the label is not what the project counts,
    a weakly marked label counting as real with probability w (docs/decisions.md#no-gold-default)."""
    p_weak = np.nan_to_num(np.asarray(p_weak, dtype=np.float64))
    return 1.0 - (1.0 - np.asarray(p_empty, dtype=np.float64)) * (1.0 - (1.0 - weak_real) * p_weak)


def counted_weight(p_weak, weak_real: float = WEAK_REAL) -> np.ndarray:
    """P(a real label is an object the project counts) = 1 − (1 − w) p_weak."""
    return 1.0 - (1.0 - weak_real) * np.nan_to_num(np.asarray(p_weak, dtype=np.float64))


def _assess_batch(
    engine, prep, b: Batch, sk: GenSkills, params: Params, weak_real: float = WEAK_REAL
) -> Assessment:
    n_s = len(b.subjects)
    fac = engine._solve(b, sk, init=False, min_cluster_size=params.min_cluster_size)
    box_cluster, _, cl_subj, n_cl_subj, labels, box_d = engine._partition(b, fac, sk.sigma2)
    post = engine._posterior(b, box_cluster, box_d, cl_subj, labels, sk)
    p_fp = calibrated_p_fp(post.p_fp, post.p_weak, weak_real)
    n_cl = len(cl_subj)
    tp = box_cluster >= 0
    box_s2 = np.where(tp, sk.sigma2[b.box_vol], np.nan)
    p_sigma = clump_sigma_prob(clump_location_variance(box_cluster, box_s2, n_cl), params.delta)
    n_sigma = np.bincount(cl_subj, weights=p_sigma, minlength=n_s)
    n_fn = post.n_fn - post.undetected_weak
    risk = subject_risk(
        post.n_fp, n_fn, n_sigma, params.alpha_fp, params.alpha_fn, params.alpha_sigma
    )
    n_boxes = np.bincount(b.box_subject, minlength=n_s)
    marked = np.zeros(len(b.cls_idx), bool)
    marked[b.box_cls] = True
    n_cls = np.bincount(b.cls_subject, minlength=n_s)
    n_empty = np.bincount(b.cls_subject, weights=~marked, minlength=n_s).astype(np.int64)
    sid = prep.subject_ids[b.subjects]
    pop = sk.pop
    g_strong = gen.subject_all_miss(b.cls_vol, b.cls_subject, n_s, sk.vp.p_fn)
    g_weak = gen.subject_all_miss(b.cls_vol, b.cls_subject, n_s, sk.vp.p_fn, pop.q_w)
    lone_real = np.bincount(b.box_subject, weights=post.r_box, minlength=n_s)
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
            "n_fp": post.n_fp,
            "n_fn": n_fn,
            "n_sigma": n_sigma,
            "risk": risk,
            # labels whose evidence could still flip (p_empty), each weighted by the chance
            # that it is an object the project counts: the map's own uncertainty (a weak
            # label's weight) does not shrink with more classifications
            "flips": label_flips(
                post.p_fp, cl_subj, n_s, weight=counted_weight(post.p_weak, weak_real)
            ),
            "strong0": pop.rho * np.exp(g_strong),
            "lone": lone_real,
            "weak0": weak_real * pop.rho_w * np.exp(g_weak),
            "weak1": weak_real * weak1,
            "t_bar": np.full(n_s, t_bar),
            "a_weak": np.full(n_s, pop.q_w * t_bar),
        }
    )
    gs = b.subjects[cl_subj]
    lab = pd.DataFrame(
        {
            "subject_id": sid[cl_subj],
            **prep.boxes_px(gs, labels),
            "p_fp": p_fp,
            "p_weak": post.p_weak,
            "p_empty": post.p_fp,
            "n_marks": np.bincount(box_cluster[tp], minlength=n_cl).astype(np.int64),
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
    weak_real: float = WEAK_REAL,
) -> Decision:
    """Retire one subject now or ask for more classifications (see the module docstring).

        >>> import numpy as np, pandas as pd
        >>> from clumpscout.model.live import LiveSkills, Policy, retire
        >>> from clumpscout import config as _config
    from clumpscout.model.params import Params
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
    a = assess(boxes, skills, params, weak_real=weak_real)
    go = bool(decide(policy, a.subjects, params)[0])
    numbers = {k: a.subjects[k].iloc[0].item() for k in a.subjects.columns if k != "subject_id"}
    numbers["open_objects"] = float(open_objects(a.subjects, policy.horizon)[0])
    return Decision(go, policy.name, numbers, a.labels)
