"""The EM over working batches, shared by both consensus models (paper §5.1-5.7, Appendix A).

One working batch (:class:`Batch`) is partitioned by the facility-location kernel
(:mod:`clumpscout.model.facility_location`), the model's parameters are estimated from the
partition, and the two steps alternate (:meth:`Engine.em`, docs/decisions.md#em-stopping)
until the stopping rule of ``em_stop`` ends the loop:

* ``converge``: iterate until the log-likelihood changes by less than ``em_rtol``
  (relative), a nominal clustering comes back or ``em_max_iter`` nominal clusterings
  are done; keep the best state;
* ``paper_code`` (the authors' rule): stop at the first nominal iteration whose
  log-likelihood does not fall below the previous one, keep the last state.

:class:`Engine` is the seam between a model and everything that runs one: the aggregation
(:mod:`clumpscout.model.aggregator`: :meth:`~Engine.em`, :meth:`~Engine.risk` and the
evidence carried between cycles), the live retirement and the replay
(:mod:`clumpscout.model.live`: :meth:`~Engine.assess` with the skills of the moment,
:meth:`~Engine.step` to learn them again). Two engines implement it; :data:`ENGINES` maps
the ``aggregate.model`` setting to them:

* :class:`PaperEngine`, the paper's model (``model: paper``): the initialisation costs (eq.
  init_open_cost, init_conn_cost, init_city_dummy_cost) for the first clustering and the
  nominal costs (eq. fac_cost, city_fac_cost, city_dummy_cost) afterwards; skills from the
  Beta / scaled-inverse-χ² posteriors (:mod:`clumpscout.model.skills`); risk with the
  constrained re-clustering and the coincidence term (:mod:`clumpscout.model.risk`).
* :class:`GenerativeEngine`, the generative model (``model: generative``,
  docs/decisions.md#generative-model): the costs of
  :func:`clumpscout.model.generative.facility_costs` throughout, a soft empirical-Bayes M
  step and the posterior p_fp, N_fp and N_fn.

Label boxes are the mean of the member boxes' vertices or their inverse-variance weighted
mean (:func:`merge_labels`, docs/decisions.md#label-box). Clusters never hold two boxes of
one annotation ``z_ij`` (docs/decisions.md#one-box-per-classification). The cycle loop,
retirement and the output tables are :mod:`clumpscout.model.aggregator`'s.
"""

from __future__ import annotations

import hashlib
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from clumpscout.arrays import ranges
from clumpscout.model import facility_location as fl
from clumpscout.model import generative as gen
from clumpscout.model.distance import jaccard_distance
from clumpscout.model.prepare import Prepared
from clumpscout.model.risk import (
    clump_false_positive_prob,
    clump_location_variance,
    clump_sigma_prob,
    coincidence_scan,
    coincidence_term,
    constrained_masks,
    expected_missed_init,
    subject_risk,
)
from clumpscout.model.skills import (
    SkillCounts,
    Skills,
    batch_counts,
    combined_variance,
    log_likelihood,
    subject_difficulty,
    volunteer_skills,
)

if TYPE_CHECKING:
    from clumpscout.model.params import Params

log = logging.getLogger(__name__)


def _log_repeat(tag: str, it: int, first: int) -> None:
    """Log why the EM stops at a clustering it has already produced
    (docs/decisions.md#em-stopping)."""
    if first == it - 1:
        log.info("%s EM iteration %d: same clustering as the last one, converged", tag, it)
    else:
        log.info(
            "%s EM iteration %d: the clustering of iteration %d again, the EM cycles "
            "between %d clusterings; stopped",
            tag,
            it,
            first,
            it - first,
        )


@dataclass
class Batch:
    """The arrays of one working batch (local subject / annotation indices).

    Built from the subjects' slices of :class:`Prepared` only, so a cycle's work and memory
    depend on the batch, not on the project's size; indices are int64 whatever the compact
    type :class:`Prepared` stores them in."""

    subjects: np.ndarray  # global subject indices, sorted
    box_idx: np.ndarray  # global box indices
    box_off: np.ndarray  # (S_b+1)
    box_subject: np.ndarray  # local
    box_cls: np.ndarray  # local annotation index
    box_vol: np.ndarray  # global volunteer
    xyxy: np.ndarray  # normalised (docs/decisions.md#box-geometry)
    area: np.ndarray  # of the normalised boxes (generative.box_area)
    cls_idx: np.ndarray  # global annotation indices
    cls_subject: np.ndarray  # local
    cls_vol: np.ndarray  # global volunteer
    n_vol: np.ndarray  # |V_i| per local subject
    volunteers: np.ndarray  # global volunteers present

    @classmethod
    def build(cls, prep: Prepared, subjects: np.ndarray) -> Batch:
        subjects = np.asarray(subjects, np.int64)
        bs, be = prep.subj_box_off[subjects], prep.subj_box_off[subjects + 1]
        cs, ce = prep.subj_cls_off[subjects], prep.subj_cls_off[subjects + 1]
        box_idx = ranges(bs, be)
        cls_idx = ranges(cs, ce)
        nb = be - bs
        nc = ce - cs
        box_off = np.concatenate([[0], np.cumsum(nb)]).astype(np.int64)
        cls_off = np.concatenate([[0], np.cumsum(nc)]).astype(np.int64)
        box_subject = np.repeat(np.arange(len(subjects), dtype=np.int64), nb)
        cls_subject = np.repeat(np.arange(len(subjects), dtype=np.int64), nc)
        # local annotation index = global − first global of subject + first local of subject
        box_cls = prep.box_cls[box_idx].astype(np.int64) - cs[box_subject] + cls_off[box_subject]
        cls_vol = prep.cls_vol[cls_idx].astype(np.int64)
        xyxy = prep.normalised(box_idx, subjects[box_subject])
        return cls(
            subjects=subjects,
            box_idx=box_idx,
            box_off=box_off,
            box_subject=box_subject,
            box_cls=box_cls,
            box_vol=prep.box_vol[box_idx].astype(np.int64),
            xyxy=xyxy,
            area=gen.box_area(xyxy),
            cls_idx=cls_idx,
            cls_subject=cls_subject,
            cls_vol=cls_vol,
            n_vol=nc.astype(np.float64),
            volunteers=np.unique(cls_vol),
        )


@dataclass
class Partition:
    """A batch's clusters, from the kernel's ``facility_of`` (:meth:`Engine.clusters`)."""

    facility_of: np.ndarray  # the kernel's: facility row of each box, −1 dummy, −2 unassigned
    box_cluster: np.ndarray  # compact cluster index, −1 dummy
    cluster_facility: np.ndarray  # the facility row of each cluster
    cluster_subject: np.ndarray  # local subject of each cluster (clusters sorted by subject)
    n_clusters_subject: np.ndarray
    labels: np.ndarray  # normalised (L, 4)
    box_d: np.ndarray  # distance to label box (NaN on the dummy)


@dataclass
class Clustering(Partition):
    """A partition and the model's parameters for it: estimated from it
    (:meth:`Engine.estimate`) or held fixed (:meth:`Engine.assess`)."""

    skills: Any  # Skills (paper) or GenSkills (generative)
    difficulty: np.ndarray  # σ²_il per cluster (paper; NaN for the generative model)
    ll: dict | None = None  # log-likelihood: total, data, prior (None: skills held fixed)
    posterior: gen.Posterior | None = None  # the generative model's posterior


@dataclass
class Held:
    """The subjects of a working batch whose partition is held fixed in this cycle
    (docs/decisions.md#hold-unchanged): ``subjects`` (bool per local subject) and
    ``facility_of`` (the kernel's, over the batch's boxes; only the held subjects' rows are
    read); :meth:`build` adds the batch of the other subjects (``free``) and their boxes'
    rows in the whole batch (``rows``), made once per cycle."""

    subjects: np.ndarray
    facility_of: np.ndarray
    free: Batch
    rows: np.ndarray

    @classmethod
    def build(cls, prep: Prepared, b: Batch, subjects, facility_of) -> Held:
        subjects = np.asarray(subjects, bool)
        free = ~subjects
        rows = ranges(b.box_off[:-1][free], b.box_off[1:][free])
        return cls(
            subjects, np.asarray(facility_of, np.int64), Batch.build(prep, b.subjects[free]), rows
        )


def _clusters_from_facilities(facility_of: np.ndarray):
    """Compact cluster indices from the kernel's facility_of (−1 dummy, −2 unassigned)."""
    n = len(facility_of)
    is_fac = facility_of == np.arange(n)
    fac_rows = np.flatnonzero(is_fac)
    assigned = facility_of >= 0
    cl = np.full(n, -1, np.int64)
    cl[assigned] = np.searchsorted(fac_rows, facility_of[assigned])
    return cl, fac_rows, is_fac


def merge_labels(xyxy, box_cluster, n_clusters, weights=None) -> np.ndarray:
    """Label boxes: (weighted) mean of the member boxes' vertex coordinates (decisions.md#label-box)."""
    tp = box_cluster >= 0
    cl = box_cluster[tp]
    w = np.ones(int(tp.sum())) if weights is None else np.asarray(weights, float)[tp]
    wsum = np.bincount(cl, weights=w, minlength=n_clusters)
    out = np.empty((n_clusters, 4))
    for k in range(4):
        out[:, k] = np.bincount(cl, weights=w * xyxy[tp, k], minlength=n_clusters) / wsum
    return out


class Engine(ABC):
    """A consensus model's side of the EM over working batches: what the aggregation, the
    live retirement and the replay call (see the module docstring).

    Constructed on the prepared input (volunteers, subjects), the hyper-parameters and the
    master seed. The steps, for one :class:`Batch`:

    * :meth:`partition`: the facility-location partition with given skills (the E step's
      hard assignment); :meth:`clusters` its clusters and label boxes;
    * :meth:`estimate`: the model's parameters from a partition (the M step);
      :meth:`step` one partition and estimate; :meth:`em` the whole EM;
    * :meth:`assess`: a partition and the model's posterior with the skills held fixed
      (no M step) and its :meth:`risk` (p_fp per label; N_fp, N_fn, N_σ and the risk R per
      subject);
    * the evidence carried between cycles: :meth:`empty_counts`, :meth:`counts_for`,
      :meth:`initial_skills`, :meth:`volunteer_table`.
    """

    #: the ``aggregate.model`` setting of this engine
    name: ClassVar[str]
    #: the EM stopping rule of ``em_stop: auto`` (docs/decisions.md#em-stopping)
    default_em_stop: ClassVar[str]
    #: p_fp is mapped to what the project counts also without a gold standard
    #: (docs/decisions.md#no-gold-default); otherwise the model's own p_fp is kept
    default_calibration: ClassVar[bool]
    #: a leftover subject whose partition came back unchanged may be held fixed
    #: (docs/decisions.md#hold-unchanged; setting ``hold_unchanged``)
    can_hold: ClassVar[bool] = False

    def __init__(self, prep: Prepared, params: Params, seed: int):
        self.prep = prep
        self.p = params
        self.seed = int(seed)
        self.n_vol = len(prep.volunteer_names)

    @property
    def em_stop_rule(self) -> str:
        """The effective EM stopping rule (``em_stop: auto`` resolved by the model)."""
        return self.default_em_stop if self.p.em_stop == "auto" else self.p.em_stop

    # ------------------------------------------------------------ the partition
    @abstractmethod
    def partition(self, b: Batch, skills, *, init: bool = False) -> np.ndarray:
        """The kernel's ``facility_of`` for the batch with ``skills`` (``init``: the first
        clustering of a cycle)."""

    @property
    def holds_unchanged(self) -> bool:
        """Whether :meth:`em` is given held subjects (the model allows it and
        ``hold_unchanged`` is set; docs/decisions.md#hold-unchanged)."""
        return self.can_hold and self.p.hold_unchanged

    def partition_holding(
        self, b: Batch, skills, held: Held | None, *, init: bool = False
    ) -> np.ndarray:
        """:meth:`partition` of the batch's subjects that are not ``held``; the held ones keep
        ``held.facility_of``. A subject's partition depends on its own boxes and the skills
        only, so the others get the partition of the whole batch."""
        if held is None or not held.subjects.any():
            return self.partition(b, skills, init=init)
        fac = held.facility_of.copy()
        if len(held.free.subjects):
            f = self.partition(held.free, skills, init=init)
            fac[held.rows] = np.where(f >= 0, held.rows[np.maximum(f, 0)], f)
        return fac

    def clusters(self, b: Batch, facility_of: np.ndarray, sigma2_in: np.ndarray) -> Partition:
        """Clusters, label boxes (docs/decisions.md#label-box) and each box's distance to its
        label, from the kernel's ``facility_of``."""
        box_cluster, fac_rows, _ = _clusters_from_facilities(facility_of)
        cluster_subject = b.box_subject[fac_rows]
        n_clusters_subject = np.bincount(cluster_subject, minlength=len(b.subjects))
        weights = 1.0 / sigma2_in[b.box_vol] if self.p.merge == "inverse_variance" else None
        labels = merge_labels(b.xyxy, box_cluster, len(fac_rows), weights)
        tp = box_cluster >= 0
        box_d = np.full(len(box_cluster), np.nan)
        box_d[tp] = jaccard_distance(b.xyxy[tp], labels[box_cluster[tp]])
        return Partition(
            facility_of, box_cluster, fac_rows, cluster_subject, n_clusters_subject, labels, box_d
        )

    def _solve_costs(self, b: Batch, costs: tuple, *, init: bool, **kw) -> np.ndarray:
        """:func:`clumpscout.model.facility_location.solve_batch` on the batch with the cost arrays
        ``costs = (open_cost, conn_const, sigma2, dummy_cost)``."""
        fac = fl.solve_batch(
            b.box_off, b.xyxy, b.box_cls, *costs, init_phase=init, **self._distance_kw, **kw
        )
        return np.asarray(fac, dtype=np.int64)

    @property
    def _distance_kw(self) -> dict:
        """The distance settings every facility-location call shares (decisions.md#distance-likelihood)."""
        return {"d_max": self.p.d_max, "likelihood": self.p.distance_likelihood}

    # ------------------------------------------------------------ the parameters
    @abstractmethod
    def empty_counts(self):
        """The skill evidence of nothing (the cache's start)."""

    @abstractmethod
    def initial_skills(self, prev):
        """Skills before the first clustering of a cycle (from the cached evidence ``prev``)."""

    @abstractmethod
    def estimate(self, b: Batch, facility_of: np.ndarray, prev, skills_in) -> Clustering:
        """The M step: the model's parameters from the partition ``facility_of`` and the
        cached evidence ``prev`` (``skills_in``: the skills the partition was made with)."""

    def step(self, b: Batch, prev, skills) -> Clustering:
        """One EM step from ``skills``: the nominal partition, then :meth:`estimate`."""
        return self.estimate(b, self.partition(b, skills), prev, skills)

    def em(
        self, b: Batch, prev, tag: str, held: Held | None = None
    ) -> tuple[Clustering, list[dict]]:
        """EM over clusterings (docs/decisions.md#em-stopping); the ``held`` subjects keep
        their partition and enter the parameter steps (docs/decisions.md#hold-unchanged).

        ``converge``: iterate until the log-likelihood changes by less than ``em_rtol``
        (relative), a nominal clustering of this cycle comes back (the loop would only
        revisit it) or ``em_max_iter`` nominal clusterings are done; keep the best state.
        ``paper_code`` (what the authors' code does): stop at the first nominal iteration
        whose log-likelihood does not fall below the previous one, keep the last state. The
        first nominal iteration is compared with the initial clustering, which the authors'
        loop skips (docs/decisions.md#em-stopping, #scale-invariance).
        """
        p = self.p
        rule = self.em_stop_rule
        skills0 = self.initial_skills(prev)
        history = []
        t0 = time.perf_counter()
        fac = self.partition_holding(b, skills0, held, init=True)
        state = self.estimate(b, fac, prev, skills0)
        history.append(self._log_iter(tag, 0, state, t0))
        best = state
        seen: dict[bytes, int] = {}  # nominal clusterings of this cycle -> first iteration
        for it in range(1, p.em_max_iter + 1):
            t0 = time.perf_counter()
            fac = self.partition_holding(b, state.skills, held)
            if rule == "converge":
                key = hashlib.blake2b(fac.tobytes(), digest_size=16).digest()
                if key in seen:
                    _log_repeat(tag, it, seen[key])
                    break
                seen[key] = it
            new = self.estimate(b, fac, prev, state.skills)
            history.append(self._log_iter(tag, it, new, t0))
            if new.ll["total"] > best.ll["total"]:
                best = new
            old_ll = state.ll["total"]
            state = new
            if rule == "paper_code":
                if new.ll["total"] >= old_ll:
                    break
            elif abs(new.ll["total"] - old_ll) <= p.em_rtol * abs(old_ll):
                break
        if rule == "paper_code":
            best = state
        log.info("%s: kept log-likelihood %.6g (%s)", tag, best.ll["total"], rule)
        return best, history

    def _log_iter(self, tag, it, s: Clustering, t0) -> dict:
        rec = {
            "iteration": it,
            "log_likelihood": s.ll["total"],
            "ll_data": s.ll["data"],
            "ll_prior": s.ll["prior"],
            "clusters": int(len(s.cluster_subject)),
            "dummy_boxes": int((s.box_cluster < 0).sum()),
            "seconds": round(time.perf_counter() - t0, 3),
        }
        log.info(
            "%s EM iteration %d (%s): log L = %.8g (data %.6g, prior %.6g), %d clusters, "
            "%d boxes on the dummy, %.2f s",
            tag,
            it,
            "init costs" if it == 0 else "nominal costs",
            rec["log_likelihood"],
            rec["ll_data"],
            rec["ll_prior"],
            rec["clusters"],
            rec["dummy_boxes"],
            rec["seconds"],
        )
        return rec

    # ------------------------------------------------------------ risk (§5.7)
    @abstractmethod
    def assess(self, b: Batch, skills, cycle: int = 0) -> tuple[Clustering, dict]:
        """The batch with ``skills`` held fixed: the nominal partition and the model's
        parameters of its clusters (no M step), and its :meth:`risk`."""

    @abstractmethod
    def risk(self, b: Batch, s: Clustering, cycle: int) -> dict[str, np.ndarray]:
        """p_fp, p_sigma, sigma2_l per label; n_fp, n_fn (and its parts n_fn_init,
        n_fn_coincidence), n_sigma and risk per subject; n_retained (§5.7). ``cycle`` seeds
        the random steps."""

    # ------------------------------------------- evidence carried between cycles
    @abstractmethod
    def counts_for(self, b: Batch, s: Clustering, cls_weight: np.ndarray):
        """The skill evidence of the classifications with ``cls_weight`` 1 (retired subjects)."""

    @abstractmethod
    def volunteer_table(self, counts) -> dict[str, np.ndarray]:
        """Columns of volunteers.parquet that come from the model."""

    def empty_subject_misses(self, subjects: np.ndarray, counts):
        """The expected misses (strong, weak) of subjects that never entered a batch because
        nobody marked them, or None when the model has none to add."""
        return None

    def summary(self) -> dict:
        """Model-specific numbers for report.json."""
        return {}


class PaperEngine(Engine):
    """The paper's model (eq. anno_model, joint_model; §5.3-5.7)."""

    name = "paper"
    default_em_stop = "paper_code"
    default_calibration = False

    # -------------------------------------------------------- costs (§5.3)
    def partition(self, b: Batch, skills: Skills, *, init: bool = False) -> np.ndarray:
        p = self.p
        n = len(b.box_idx)
        if init:
            # eq. init_open_cost, init_conn_cost, init_city_dummy_cost (decisions.md#init-costs)
            open_cost = p.f_V * b.n_vol[b.box_subject]
            conn_const = np.zeros(n)
            dummy_cost = np.ones(n)
        else:
            open_cost, conn_const, dummy_cost = self._nominal_costs(b, skills)
        costs = (open_cost, conn_const, skills.sigma2[b.box_vol], dummy_cost)
        return self._solve_costs(b, costs, init=init, min_cluster_size=p.min_cluster_size)

    def _nominal_costs(self, b: Batch, skills: Skills):
        """eq. fac_cost, city_fac_cost (city's own skills, decisions.md#nominal-costs), city_dummy_cost (decisions.md#nominal-costs)."""
        fac_subject = np.bincount(
            b.cls_subject, weights=-np.log(skills.p_fn[b.cls_vol]), minlength=len(b.subjects)
        )
        pfn = skills.p_fn[b.box_vol]
        pfp = skills.p_fp[b.box_vol]
        open_cost = fac_subject[b.box_subject]
        conn_const = np.log(pfn) - np.log1p(-pfn) - np.log1p(-pfp)
        dummy_cost = -np.log(pfp)
        return open_cost, conn_const, dummy_cost

    # ----------------------------------------------------- M step (§5.4-5.6)
    def empty_counts(self):
        return SkillCounts.zeros(self.n_vol)

    def initial_skills(self, prev):
        return volunteer_skills(prev, self.p)

    def estimate(self, b: Batch, facility_of: np.ndarray, prev: SkillCounts, skills_in: Skills):
        p = self.p
        part = self.clusters(b, facility_of, skills_in.sigma2)
        tp = part.box_cluster >= 0
        counts, cls_stats = batch_counts(
            b.box_vol,
            b.box_cls,
            part.box_cluster,
            part.box_d,
            b.cls_vol,
            b.cls_subject,
            part.n_clusters_subject,
            self.n_vol,
        )
        skills = volunteer_skills(prev + counts, p)
        difficulty = self._difficulty(part)
        box_s2_subject = np.full(len(part.box_cluster), np.nan)
        box_s2_subject[tp] = difficulty[part.box_cluster[tp]]
        ll = log_likelihood(
            box_vol=b.box_vol,
            box_cluster=part.box_cluster,
            box_d=part.box_d,
            box_sigma2_subject=box_s2_subject,
            cls_vol=b.cls_vol,
            cls_n_fn=cls_stats["n_fn"],
            skills=skills,
            difficulty=difficulty,
            prev=prev,
            batch_volunteers=b.volunteers,
            p=p,
        )
        return Clustering(**vars(part), skills=skills, difficulty=difficulty, ll=ll)

    def _difficulty(self, part: Partition) -> np.ndarray:
        """σ²_il of every cluster (eq. difficulty_estimate)."""
        return subject_difficulty(
            part.box_cluster,
            part.box_d,
            part.cluster_subject,
            part.n_clusters_subject,
            self.p.sigma2_0_S,
            self.p.n_chi_S,
        )

    # ------------------------------------------------------------ risk (§5.7)
    def assess(self, b: Batch, skills: Skills, cycle: int = 0) -> tuple[Clustering, dict]:
        part = self.clusters(b, self.partition(b, skills), skills.sigma2)
        state = Clustering(**vars(part), skills=skills, difficulty=self._difficulty(part))
        return state, self.risk(b, state, cycle)

    def risk(self, b: Batch, s: Clustering, cycle: int) -> dict[str, np.ndarray]:
        p = self.p
        n_s = len(b.subjects)
        n_cl = len(s.cluster_subject)
        skills = s.skills
        p_fp_l = clump_false_positive_prob(
            box_cluster=s.box_cluster,
            box_vol=b.box_vol,
            cluster_subject=s.cluster_subject,
            cls_subject=b.cls_subject,
            cls_vol=b.cls_vol,
            p_fp=skills.p_fp,
            p_fn=skills.p_fn,
        )
        tp = s.box_cluster >= 0
        box_s2 = np.full(len(s.box_cluster), np.nan)
        box_s2[tp] = combined_variance(
            s.box_d[tp],
            skills.sigma2[b.box_vol[tp]],
            s.difficulty[s.box_cluster[tp]],
            p.distance_likelihood,
        )
        sigma2_l = clump_location_variance(s.box_cluster, box_s2, n_cl)
        p_sigma_l = clump_sigma_prob(sigma2_l, p.delta)
        n_fp = np.bincount(s.cluster_subject, weights=p_fp_l, minlength=n_s)
        n_sigma = np.bincount(s.cluster_subject, weights=p_sigma_l, minlength=n_s)

        # N_fn: constrained re-clustering (decisions.md#expected-misses)
        _, _, is_fac = _clusters_from_facilities(s.facility_of)
        can_fac, can_city = constrained_masks(s.box_cluster, is_fac)
        open_cost, conn_const, dummy_cost = self._nominal_costs(b, skills)
        n_fn_init = np.zeros(n_s)
        if can_city.any():
            costs = (open_cost, conn_const, skills.sigma2[b.box_vol], dummy_cost)
            fac2 = self._solve_costs(
                b,
                costs,
                init=False,
                can_be_facility=can_fac,
                can_be_city=can_city,
                allow_dummy=False,
                min_cluster_size=1,
            )
            c_cluster, c_dummy, c_subject = self._cluster_costs(b, fac2, costs)
            n_fn_init = expected_missed_init(c_cluster, c_dummy, c_subject, n_s)
        # batch-wide coincidence term
        retained, n_cap = coincidence_scan(b.xyxy, p.d_max, [self.seed, cycle])
        label_off = np.concatenate([[0], np.cumsum(s.n_clusters_subject)]).astype(np.int64)
        fac_cost = open_cost_per_subject(b, skills)
        n_fn_coinc = coincidence_term(
            b.xyxy[retained], n_cap, len(b.cls_idx), label_off, s.labels, fac_cost, p.d_max
        )
        n_fn = n_fn_init + n_fn_coinc
        risk = subject_risk(n_fp, n_fn, n_sigma, p.alpha_fp, p.alpha_fn, p.alpha_sigma)
        return {
            "p_fp": p_fp_l,
            "p_sigma": p_sigma_l,
            "sigma2_l": sigma2_l,
            "n_fp": n_fp,
            "n_fn": n_fn,
            "n_fn_init": n_fn_init,
            "n_fn_coincidence": n_fn_coinc,
            "n_sigma": n_sigma,
            "risk": risk,
            "n_retained": len(retained),
        }

    def _cluster_costs(self, b, facility_of, costs):
        """Assembly cost C(Z'_l) (eq. cluster_cost) and all-to-dummy cost C^∅ of each cluster.

        From :func:`clumpscout.model.facility_location.cluster_costs` (the facility's own
        box pays its connection at d = 0, decisions.md#nominal-costs); ``costs`` as for :meth:`_solve_costs`.
        """
        cc = fl.cluster_costs(
            b.box_off, b.xyxy, facility_of, *costs, init_phase=False, **self._distance_kw
        )
        return cc.cluster_cost, cc.cluster_dummy_cost, cc.cluster_subject

    def counts_for(self, b: Batch, s: Clustering, cls_weight: np.ndarray):
        """The skill evidence of the classifications with ``cls_weight`` 1 (retired subjects)."""
        counts, _ = batch_counts(
            b.box_vol,
            b.box_cls,
            s.box_cluster,
            s.box_d,
            b.cls_vol,
            b.cls_subject,
            s.n_clusters_subject,
            self.n_vol,
            cls_weight=cls_weight,
        )
        return counts

    def volunteer_table(self, counts) -> dict[str, np.ndarray]:
        """Columns of volunteers.parquet that come from the model."""
        sk = volunteer_skills(counts, self.p)
        return {
            "p_fp": sk.p_fp,
            "p_fn": sk.p_fn,
            "sigma2": sk.sigma2,
            "n_boxes": counts.n_boxes.astype(np.int64),
            "n_tp": counts.n_tp.astype(np.int64),
            "n_fp": counts.n_fp.astype(np.int64),
            "n_fn": counts.n_fn.astype(np.int64),
        }


def _merge_candidates(b: Batch, fac: np.ndarray, max_distance: float) -> np.ndarray | None:
    """``facility_of`` with, in every subject, its closest pair of overlapping clusters merged.

    The smaller cluster's boxes join the larger one's facility, except a box whose
    classification is already in the larger one, which goes to the dummy (−1). None when
    no subject has a pair of clusters with label Jaccard distance below ``max_distance``.
    """
    cl, fac_rows, _ = _clusters_from_facilities(fac)
    n_cl = len(fac_rows)
    if n_cl < 2:
        return None
    cs = b.box_subject[fac_rows]
    labels = merge_labels(b.xyxy, cl, n_cl)
    size = np.bincount(cl[cl >= 0], minlength=n_cl)
    end = np.searchsorted(cs, cs, side="right")  # clusters are sorted by subject
    first = np.arange(n_cl)
    second = ranges(first + 1, end)
    first = np.repeat(first, end - first - 1)
    if len(first) == 0:
        return None
    d = jaccard_distance(labels[first], labels[second])
    keep = d < max_distance
    if not keep.any():
        return None
    first, second, d = first[keep], second[keep], d[keep]
    order = np.lexsort((second, first, d, cs[first]))
    first, second, sub = first[order], second[order], cs[first[order]]
    one = np.r_[True, sub[1:] != sub[:-1]]  # the closest pair of each subject
    first, second = first[one], second[one]
    big = np.where(size[second] > size[first], second, first)
    small = np.where(big == first, second, first)
    target = np.full(n_cl, -1, np.int64)
    target[small] = big
    moving = (cl >= 0) & (target[np.maximum(cl, 0)] >= 0)
    out = fac.copy()
    dest = target[cl[moving]]
    n_cls = int(b.box_cls.max()) + 1
    # (cluster, classification) pairs of the clusters boxes move into: only those can clash
    # (the batch's every pair made this the merge step's largest cost)
    is_big = np.zeros(n_cl, bool)
    is_big[big] = True
    into = (cl >= 0) & is_big[np.maximum(cl, 0)]
    held = cl[into] * n_cls + b.box_cls[into]
    clash = np.isin(dest * n_cls + b.box_cls[moving], held)
    out[moving] = np.where(clash, -1, fac_rows[dest])
    return out


def open_cost_per_subject(b: Batch, skills: Skills) -> np.ndarray:
    """``C_f,i = −Σ_{j∈V_i} ln p_fn_j`` (eq. fac_cost) per batch subject."""
    return np.bincount(
        b.cls_subject, weights=-np.log(skills.p_fn[b.cls_vol]), minlength=len(b.subjects)
    )


# ------------------------------------------------------ the generative model's engine


@dataclass
class GenSkills:
    """The generative model's parameters as the EM carries them (see clumpscout.model.generative)."""

    vp: gen.VolunteerParams
    pop: gen.Population

    @property
    def sigma2(self) -> np.ndarray:
        return self.vp.sigma2


class GenerativeEngine(Engine):
    """The same working batches, EM loop and retirement, with the generative likelihood.

    The partition step is the facility-location kernel with the costs of
    :func:`clumpscout.model.generative.facility_costs`; the M step is the soft
    (posterior-weighted) empirical-Bayes update of :mod:`clumpscout.model.generative`, iterated
    ``_INNER`` times for a fixed partition; the risk uses the posterior p_fp, N_fp and N_fn.
    """

    name = "generative"
    default_em_stop = "converge"
    default_calibration = True
    can_hold = True

    _INNER = 4
    #: the prior strengths are refitted once the pooled evidence (classifications of all
    #: volunteers) has grown by this share since their last fit
    #: (docs/decisions.md#strength-refits)
    STRENGTH_REFIT_GROWTH = 0.1

    def __init__(self, prep: Prepared, params: Params, seed: int):
        super().__init__(prep, params, seed)
        self.last_pop: gen.Population | None = None
        self._strength_fit: tuple[float, float, float] | None = None  # k_fn, k_lam, evidence

    @property
    def _distance_kw(self) -> dict:
        """Jaccard distance with the location density truncated at d_max."""
        return {"d_max": self.p.d_max, "likelihood": "d_truncated"}

    def _log_u(self, b: Batch) -> np.ndarray:
        """ln of the background density of false boxes (uniform over the image: 0)."""
        return np.zeros(len(b.box_idx))

    def _population0(self) -> gen.Population:
        p = self.p
        return gen.initial_population(
            p.p0_fn, p.p0_fp, p.sigma2_0_V, p.n_chi_V, weak=p.weak_objects
        )

    def empty_counts(self):
        return gen.SoftCounts.zeros(self.n_vol)

    def initial_skills(self, prev: gen.SoftCounts) -> GenSkills:
        pop = self._population0() if self.last_pop is None else self.last_pop
        return GenSkills(gen.volunteer_params(prev, pop), pop)

    def partition(self, b: Batch, skills: GenSkills, *, init: bool = False) -> np.ndarray:
        # the first clustering uses the same costs with the parameters before any evidence
        # (the weak hyper-prior values, or the cached skills of a later cycle)
        m = self.p.min_cluster_size
        costs = self._gen_costs(b, skills)
        fac = self._solve_costs(b, costs, init=False, min_cluster_size=m)
        fac = self._merge_overlapping(b, fac, costs)
        if skills.pop.rho_w <= 0:
            return fac
        # weak objects among the boxes left alone: the same step with the weak class's costs
        lone = fac < 0
        if not lone.any():
            return fac
        weak = self._gen_costs(b, skills, weak=True)
        fac2 = self._solve_costs(
            b, weak, init=False, can_be_facility=lone, can_be_city=lone, min_cluster_size=m
        )
        return np.where(lone, fac2, fac)

    _MERGE_DISTANCE = 0.5
    _MERGE_PASSES = 10

    def _merge_overlapping(self, b: Batch, fac: np.ndarray, costs: tuple) -> np.ndarray:
        """Local search on the same costs: merge clusters whose labels overlap.

        Two objects at one spot are improbable, but the greedy can split one object into
        two clusters (for example around a volunteer's double click, whose second box
        cannot join the first cluster). Per subject and pass, the pair of clusters with the
        closest labels (Jaccard distance < 0.5) is merged into the larger one (a box whose
        classification the larger one already holds goes to the dummy); the merge is kept
        when it lowers the subject's cost.
        """
        for _ in range(self._MERGE_PASSES):
            cand = _merge_candidates(b, fac, self._MERGE_DISTANCE)
            if cand is None:
                break
            before = self._subject_costs(b, fac, costs)
            after = self._subject_costs(b, cand, costs)
            better = after < before - 1e-9
            if not better.any():
                break
            take = better[b.box_subject]
            fac = np.where(take, cand, fac)
        return fac

    def _subject_costs(self, b: Batch, fac: np.ndarray, costs: tuple) -> np.ndarray:
        cc = fl.cluster_costs(b.box_off, b.xyxy, fac, *costs, init_phase=False, **self._distance_kw)
        return cc.subject_cost

    def _gen_costs(self, b: Batch, sk: GenSkills, weak: bool = False) -> tuple:
        return gen.facility_costs(
            box_vol=b.box_vol,
            box_subject=b.box_subject,
            box_area_=b.area,
            cls_vol=b.cls_vol,
            cls_subject=b.cls_subject,
            n_subjects=len(b.subjects),
            vp=sk.vp,
            rho=sk.pop.rho_w if weak else sk.pop.rho,
            log_u=self._log_u(b),
            d_max=self.p.d_max,
            q=sk.pop.q_w if weak else 1.0,
        )

    def _posterior(self, b: Batch, part: Partition, sk: GenSkills) -> gen.Posterior:
        labels = part.labels
        return gen.posterior(
            box_cluster=part.box_cluster,
            box_vol=b.box_vol,
            box_subject=b.box_subject,
            box_d=part.box_d,
            box_area_=b.area,
            log_u=self._log_u(b),
            cls_vol=b.cls_vol,
            cls_subject=b.cls_subject,
            cluster_subject=part.cluster_subject,
            label_area=gen.box_area(labels) if len(labels) else np.zeros(0),
            n_subjects=len(b.subjects),
            vp=sk.vp,
            pop=sk.pop,
            d_max=self.p.d_max,
        )

    def _soft(self, b, post, box_cluster, box_d, n_cl, cls_weight=None) -> gen.SoftCounts:
        tp = box_cluster >= 0
        size = np.bincount(box_cluster[tp], minlength=n_cl)
        return gen.soft_counts(
            post=post,
            box_cluster=box_cluster,
            box_cls=b.box_cls,
            box_subject=b.box_subject,
            box_d=box_d,
            cluster_size=size,
            cls_vol=b.cls_vol,
            cls_subject=b.cls_subject,
            n_volunteers=self.n_vol,
            cls_weight=cls_weight,
        )

    def estimate(self, b: Batch, facility_of: np.ndarray, prev, skills_in: GenSkills):
        part = self.clusters(b, facility_of, skills_in.sigma2)
        box_cluster, box_d = part.box_cluster, part.box_d
        n_cl = len(part.cluster_subject)
        sk = skills_in
        for i in range(self._INNER):
            post = self._posterior(b, part, sk)
            counts = self._soft(b, post, box_cluster, box_d, n_cl)
            sk = self._m_step(b, post, box_cluster, prev + counts, sk, fit_hyper=i == 0)
        post = self._posterior(b, part, sk)
        ll = gen.log_likelihood(
            post=post,
            box_vol=b.box_vol,
            box_cluster=box_cluster,
            log_u=self._log_u(b),
            cls_vol=b.cls_vol,
            vp=sk.vp,
            pop=sk.pop,
            batch_volunteers=b.volunteers,
        )
        self.last_pop = sk.pop
        nan = np.full(n_cl, np.nan)
        return Clustering(**vars(part), skills=sk, difficulty=nan, ll=ll, posterior=post)

    def assess(self, b: Batch, skills: GenSkills, cycle: int = 0) -> tuple[Clustering, dict]:
        part = self.clusters(b, self.partition(b, skills), skills.sigma2)
        post = self._posterior(b, part, skills)
        nan = np.full(len(part.cluster_subject), np.nan)
        state = Clustering(**vars(part), skills=skills, difficulty=nan, posterior=post)
        return state, self.risk(b, state, cycle)

    def _m_step(
        self, b, post, box_cluster, total: gen.SoftCounts, sk: GenSkills, fit_hyper: bool
    ) -> GenSkills:
        """Population and volunteer parameters from the expected counts (empirical Bayes).

        q_w (a 1-D maximisation over the batch) is refitted when ``fit_hyper`` (once per
        partition), the prior strengths (over every volunteer with evidence) then too, but
        only once the pooled evidence has grown by ``STRENGTH_REFIT_GROWTH`` since their last
        fit (docs/decisions.md#strength-refits); the means and the volunteers' parameters
        every time."""
        p = self.p
        det_s, det_w = gen.detected_by_class(post, box_cluster)
        cls = (b.cls_vol, b.cls_subject, len(b.subjects), sk.vp.p_fn)
        q_w = sk.pop.q_w
        if sk.pop.rho_w > 0 and fit_hyper:
            q_w = gen.fit_weak_detection(
                post=post,
                box_cluster=box_cluster,
                box_vol=b.box_vol,
                box_subject=b.box_subject,
                cls_vol=b.cls_vol,
                cls_subject=b.cls_subject,
                n_subjects=len(b.subjects),
                vp=sk.vp,
                rho_w=sk.pop.rho_w,
            )
        # post is the posterior under sk: its per-subject numbers are those of these arguments
        # (q_w unchanged unless refitted)
        same_q = q_w == sk.pop.q_w
        weak = None
        if sk.pop.rho_w > 0:
            unrec = post.unrecognised_w if same_q else None
            weak = (det_w, gen.detection_exposure(*cls, q_w, per_subject=unrec))
        evidence = float(total.n_cls.sum())
        strengths = self._kept_strengths(evidence, sk.pop, fit_hyper)
        pop = gen.estimate_population(
            total,
            strong=(det_s, gen.detection_exposure(*cls, 1.0, per_subject=post.g_strong)),
            weak=weak,
            q_w=q_w,
            p0_fn=p.p0_fn,
            lam0=p.p0_fp,
            sigma2_0=p.sigma2_0_V,
            nu_s2=p.n_chi_V,
            eb_weight=p.eb_weight,
            strengths=strengths,
        )
        if strengths is None:
            self._strength_fit = (pop.k_fn, pop.k_lam, evidence)
        return GenSkills(gen.volunteer_params(total, pop), pop)

    def _kept_strengths(self, evidence: float, pop: gen.Population, fit_hyper: bool):
        """The prior strengths to keep, or None to refit them
        (docs/decisions.md#strength-refits)."""
        if not fit_hyper:
            return pop.k_fn, pop.k_lam
        last = self._strength_fit
        if last is None or evidence > (1.0 + self.STRENGTH_REFIT_GROWTH) * last[2]:
            return None
        return last[0], last[1]

    def risk(self, b: Batch, s: Clustering, cycle: int) -> dict[str, np.ndarray]:
        p = self.p
        post = s.posterior
        n_cl = len(s.cluster_subject)
        tp = s.box_cluster >= 0
        box_s2 = np.where(tp, s.skills.sigma2[b.box_vol], np.nan)
        sigma2_l = clump_location_variance(s.box_cluster, box_s2, n_cl)
        p_sigma_l = clump_sigma_prob(sigma2_l, p.delta)
        n_sigma = np.bincount(s.cluster_subject, weights=p_sigma_l, minlength=len(b.subjects))
        lone = np.bincount(b.box_subject, weights=post.r_box, minlength=len(b.subjects))
        n_fn = post.n_fn - post.undetected_weak
        return {
            "p_fp": post.p_fp,
            "p_weak": post.p_weak,
            "p_sigma": p_sigma_l,
            "sigma2_l": sigma2_l,
            "n_fp": post.n_fp,
            # misses of strong objects (and lone boxes) drive the risk; the weak objects
            # nobody recognised are reported apart (docs/decisions.md#weak-objects)
            "n_fn": n_fn,
            "n_fn_weak": post.undetected_weak,
            "n_fn_init": post.undetected,
            "n_fn_coincidence": lone,
            "n_sigma": n_sigma,
            "risk": subject_risk(post.n_fp, n_fn, n_sigma, p.alpha_fp, p.alpha_fn, p.alpha_sigma),
            "n_retained": 0,
        }

    def counts_for(self, b: Batch, s: Clustering, cls_weight: np.ndarray):
        return self._soft(
            b, s.posterior, s.box_cluster, s.box_d, len(s.cluster_subject), cls_weight
        )

    def _committed_population(self, counts: gen.SoftCounts) -> gen.Population:
        """The population estimated from the committed (finalised) evidence only."""
        p = self.p
        last = self.last_pop or self._population0()
        pop = gen.estimate_population(
            counts,
            strong=(0.0, 0.0),
            weak=None,
            q_w=last.q_w,
            p0_fn=p.p0_fn,
            lam0=p.p0_fp,
            sigma2_0=p.sigma2_0_V,
            nu_s2=p.n_chi_V,
            eb_weight=p.eb_weight,
        )
        pop.rho, pop.rho_w = last.rho, last.rho_w
        return pop

    def volunteer_table(self, counts: gen.SoftCounts) -> dict[str, np.ndarray]:
        pop = self._committed_population(counts)
        vp = gen.volunteer_params(counts, pop)
        w = self.p.eb_weight
        share = (w * self.p.p0_fp + counts.n_fp.sum()) / (w + counts.n_boxes.sum())
        return {
            # the share of the volunteer's boxes expected to be false (shrunk to the pool's)
            "p_fp": (10.0 * share + counts.n_fp) / (10.0 + counts.n_boxes),
            "p_fn": vp.p_fn,
            "sigma2": vp.sigma2,
            "n_boxes": counts.n_boxes.astype(np.int64),
            "n_tp": counts.n_tp,
            "n_fp": counts.n_fp,
            "n_fn": counts.n_fn,
            "fp_rate": vp.lam,
        }

    def empty_subject_misses(self, subjects: np.ndarray, counts: gen.SoftCounts):
        """Expected strong objects nobody marked (``rho e^{G_i(1)}``) and weak objects nobody
        recognised (``rho_w P_i(≤ 1 mark)``) for subjects that never entered a batch."""
        pop = self._committed_population(counts)
        vp = gen.volunteer_params(counts, pop)
        prep = self.prep
        cs, ce = prep.subj_cls_off[subjects], prep.subj_cls_off[subjects + 1]
        idx = ranges(cs, ce)
        which = np.repeat(np.arange(len(subjects)), ce - cs)
        args = (prep.cls_vol[idx].astype(np.int64), which, len(subjects), vp.p_fn)
        strong = pop.rho * np.exp(gen.subject_all_miss(*args))
        return strong, pop.rho_w * gen.subject_unrecognised(*args, pop.q_w)

    def summary(self) -> dict:
        return {"population": (self.last_pop or self._population0()).to_dict()}


#: the engine of each ``aggregate.model`` setting
ENGINES: dict[str, type[Engine]] = {e.name: e for e in (GenerativeEngine, PaperEngine)}


def make_engine(prep: Prepared, params: Params, seed: int) -> Engine:
    """The engine of ``params.model`` (:data:`ENGINES`)."""
    return ENGINES[params.model](prep, params, seed)
