"""The generative consensus model: a well-posed likelihood for marked points or boxes.

This is the default model of ``clumpscout aggregate`` (``model: generative``).
Derivation, symbols and the reasons for each choice: ``docs/model.md`` (section
"Generative model") and ``docs/decisions.md#generative-model``.

Why a second model. The paper's annotation model (eq. anno_model) gives a false box
a Bernoulli probability p_fp and *no location density*, while a true box enters
through the density of its Jaccard distance to the label, of order one. Boxes of
several independent volunteers that land on the same spot are therefore hardly
evidence of a real object, and once p_fp is learned from the assignment, "every
box is a false positive" fits the data almost perfectly: a correct EM walks into
that state (``docs/decisions.md#paper-model``). A generative model that says where
false boxes land cannot do that: a false box is thrown somewhere over the whole
image, a true box within a few pixels of its object, so k coinciding boxes are a
coincidence with probability ~ (box area / image area)^(k-1).

The model (per subject i, seen by the classifications c ∈ V_i of volunteers j(c)):

* **Objects** form a Poisson process over the image with ``rho`` objects per
  subject (uniform position; coordinates are normalised so the image has area 1).
* **Detection**: volunteer j marks each object with probability ``1 − p_fn_j``
  (independently), drawing one box whose position scatters around the object.
  The scatter is a 2-D density written with the Jaccard distance d between the
  drawn box and the object's box: ``f(box | object) = exp(−d²/2σ²_j) / (Z(σ²_j) A_b)``
  per unit (normalised) image area, A_b the box's area, truncated at ``d_max``
  (the Jaccard distance saturates at 1 for disjoint boxes, so an untruncated
  density would not be normalisable over the image). ``Z(σ²)`` is the integral of
  ``exp(−d²/2σ²)`` over the offsets of two equal squares with d ≤ d_max, in units
  of the box area (:func:`log_norm`; Z ≈ σ² for small σ, where
  d ≈ 2(|Δx| + |Δy|)/s). The scale is the box size: 12 px points and 300 px
  rectangles need no retuning.
* **False boxes**: each classification adds a Poisson number of false boxes with
  mean ``lam_j`` (the volunteer's false-positive rate, per classification), each
  placed with the background density ``u`` over the image (uniform: u = 1).

* **Weak objects** (``weak_objects: true``; docs/decisions.md#weak-objects): a second
  class of real objects, ``rho_w`` per subject, that volunteer j marks with probability
  ``q_w (1 − p_fn_j)`` (faint features, stars, partly hidden animals). One is recognised
  only when two or more volunteers mark it: a single mark is indistinguishable from a false
  box and is counted among them.

Given a partition of the boxes into candidate clusters (one box per classification per
cluster; the facility-location step of :mod:`clumpscout.model.em` finds it), each
candidate is either a real object of a class c or a coincidence of false boxes. With
``t_j = 1 − p_fn_j`` and ``G_i(q) = Σ_{c∈V_i} ln(1 − q t_j(c))`` (every viewer misses;
``G_i(1) = Σ ln p_fn``):

* real, class c (q = 1 strong, q_w weak):
  ``ln H1_c = ln rho_c + G_i(q) + Σ_{b∈l} [ln(q t_b) − ln(1 − q t_b) + ln f_b] + ln(Z(σ²_l) A_l)``
  (the object's position integrated out with the Laplace approximation:
  σ²_l = 1/Σ_b 1/σ²_b, A_l the label box's area);
* false: ``ln H0_l = Σ_{b∈l} [ln lam_b + ln u_b]``;
* ``p_fp,l = H0 / (H0 + H1_s + H1_w)``: the label's posterior probability of being spurious;
  ``p_weak,l = H1_w / (H1_s + H1_w)``.

A box left alone (on the "dummy") is the one-member case (strong class only). The expected
number of real objects the labels miss, ``N_fn,i``, is the strong objects nobody marked
(Poisson thinning: ``rho e^{G_i(1)}``) plus Σ over the lone boxes of their probability of
marking a real object; the weak objects nobody recognised, ``rho_w P_i(at most one mark)``,
are reported apart (``n_fn_weak``; they do not enter the risk). ``N_fp,i = Σ_l p_fp,l``; the
expected object count of a subject is ``Σ_l (1 − p_fp,l) + N_fn,i + n_fn_weak,i``.

Parameters (M step, all from the data): each volunteer's ``p_fn_j``, ``lam_j`` and
``σ²_j`` are posterior means / modes under population priors (Beta, Gamma,
scaled-inverse-χ²) whose means are the pooled rates of all volunteers and whose
strengths (for p_fn and lam) maximise the marginal likelihood of the volunteers'
counts (empirical Bayes); the paper's table values enter only as weak
hyper-priors of the population means (``eb_weight`` pseudo-trials). A volunteer
with one classification therefore gets the population's skill. Counts are
expected counts under the posteriors above (a label with p_fp = 0.9 is 0.1 of a
true positive and 0.9 of a false one); misses are counted on strong objects. The
rates ``rho`` and ``rho_w`` are detected objects over the detection exposure (the
Poisson-thinning maximum-likelihood estimate), q_w a 1-D maximisation.

Everything here is a vectorised function of per-box / per-classification arrays.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

#: smallest probability or rate used inside a logarithm
_TINY = 1e-12
#: bounds of the estimated prior strengths (pseudo-trials / pseudo-classifications)
STRENGTH_BOUNDS = (1.0, 1000.0)


@dataclass
class Population:
    """Population (hyper-)parameters: prior means and strengths, objects per subject."""

    m_fn: float  # mean miss probability
    k_fn: float  # Beta strength (pseudo-trials)
    m_lam: float  # mean false boxes per classification
    k_lam: float  # Gamma strength (pseudo-classifications)
    m_s2: float  # typical Jaccard-distance variance σ²
    nu_s2: float  # scaled-inverse-χ² strength
    rho: float  # strong objects per subject
    rho_w: float = 0.0  # weak objects per subject (0: no weak class)
    q_w: float = 0.2  # a weak object's detection probability, relative to 1 − p_fn_j

    def to_dict(self) -> dict:
        return {k: float(v) for k, v in self.__dict__.items()}


@dataclass
class VolunteerParams:
    """Per-volunteer parameters of the generative model."""

    p_fn: np.ndarray
    lam: np.ndarray
    sigma2: np.ndarray


@dataclass
class SoftCounts:
    """Expected per-volunteer counts (sufficient statistics of the M step)."""

    n_cls: np.ndarray  # classifications (empty ones included)
    n_boxes: np.ndarray
    n_fp: np.ndarray  # expected false boxes
    n_tp: np.ndarray  # expected true boxes
    n_fn: np.ndarray  # expected missed objects
    sum_d2: np.ndarray  # Σ w d² (bias-corrected) over true boxes
    n_d2: np.ndarray  # Σ w of those

    @classmethod
    def zeros(cls, n: int) -> SoftCounts:
        return cls(*(np.zeros(n) for _ in range(7)))

    def __add__(self, o: SoftCounts) -> SoftCounts:
        return SoftCounts(*(a + b for a, b in zip(self._arrays(), o._arrays(), strict=True)))

    def _arrays(self):
        return (self.n_cls, self.n_boxes, self.n_fp, self.n_tp, self.n_fn, self.sum_d2, self.n_d2)


# --------------------------------------------------------------------- densities


def box_area(xyxy: np.ndarray) -> np.ndarray:
    """Area of normalised boxes ``(x1, y1, x2, y2)``, floored at 1e-12."""
    xyxy = np.asarray(xyxy, dtype=np.float64)
    return np.maximum((xyxy[:, 2] - xyxy[:, 0]) * (xyxy[:, 3] - xyxy[:, 1]), _TINY)


@functools.lru_cache(maxsize=8)
def _distance_areas(d_max: float, n: int = 1500, bins: int = 3000):
    """Area (in box-side² units) of the offsets of two equal squares whose Jaccard distance
    falls in each of ``bins`` equal bins of [0, d_max] (midpoints, areas)."""
    g = (np.arange(n) + 0.5) * (1.0 / n)  # |Δx|, |Δy| in box sides, first quadrant, [0, 1)
    a, b = np.meshgrid(g, g)
    inter = (1 - a) * (1 - b)
    d = 1 - inter / (2 - inter)
    area, edges = np.histogram(d, bins=bins, range=(0.0, d_max))
    return 0.5 * (edges[1:] + edges[:-1]), area * 4.0 / n**2


def log_norm(sigma2, d_max: float) -> np.ndarray:
    """``ln Z(σ²)`` with ``Z(σ²) = ∫ exp(−d²/2σ²) 1[d ≤ d_max] dA`` over offsets (box-side units).

    For equal squares the Jaccard distance depends on the offset only, so Z is exact up to
    the quadrature (Z ≈ σ² for small σ, where d ≈ 2(|Δx| + |Δy|)/s).
    """
    sigma2 = np.asarray(sigma2, dtype=np.float64)
    grid, log_z = _log_norm_table(float(d_max))
    return np.interp(np.log(np.maximum(sigma2, 1e-12)), grid, log_z)


@functools.lru_cache(maxsize=8)
def _log_norm_table(d_max: float):
    """``ln Z`` on a grid of ``ln σ²`` (σ² from 1e-8 to 100; linear interpolation between
    the 1,000 points is exact to ~1e-4 in ln Z, and Z = σ² below the grid)."""
    mid, area = _distance_areas(d_max)
    grid = np.linspace(np.log(1e-8), np.log(100.0), 1000)
    z = np.exp(-(mid[None, :] ** 2) / (2.0 * np.exp(grid)[:, None])) @ area
    return grid, np.log(np.maximum(z, 1e-300))


def log_location_density(d, sigma2, area, d_max: float = 0.9) -> np.ndarray:
    """``ln f = −d²/(2σ²) − ln Z(σ²) − ln A``: a true box's position density, truncated at
    ``d_max`` (module docstring; :func:`log_norm`)."""
    d = np.asarray(d, dtype=np.float64)
    sigma2 = np.asarray(sigma2, dtype=np.float64)
    out = -(d * d) / (2.0 * sigma2) - log_norm(sigma2, d_max) - np.log(area)
    return np.where(d <= d_max, out, -np.inf)


def facility_costs(
    *,
    box_vol: np.ndarray,
    box_subject: np.ndarray,
    box_area_: np.ndarray,
    cls_vol: np.ndarray,
    cls_subject: np.ndarray,
    n_subjects: int,
    vp: VolunteerParams,
    rho: float,
    log_u: np.ndarray,
    d_max: float = 0.9,
    q: float = 1.0,
):
    """Facility-location costs that make the partition step climb the generative likelihood.

    The kernel (:func:`clumpscout.model.facility_location.solve_batch`, distance likelihood
    ``d``) charges a city box b joining a facility at Jaccard distance d
    ``conn_const_b + ½ ln(2πσ²_b) + d²/(2σ²_b)``, a facility its ``open_cost`` and a
    box on the dummy its ``dummy_cost``. With

    * ``conn_const = −swap_q + ln Z(σ²) + ln A_b − ½ ln(2π · 2σ²)`` with the
      kernel's variance ``2σ²`` (the box turns one of the subject's misses into a
      detection and pays ``−ln f_b``; its distance is measured to the facility box,
      which scatters around the object too, so the pair's variance is 2σ²: in
      expectation ``Σ d²/(2·2σ²)`` to the facility equals ``Σ d²/(2σ²)`` to the mean),
    * ``open_cost = −G_i(q) − ln rho − ln Z(σ²_f) − ln A_f`` (every viewer misses, times
      the object prior; the last two terms cancel the facility's own density, since
      the object's position is integrated out, see :func:`cluster_evidence`),
    * ``dummy_cost = −ln lam_b − ln u_b`` (a false box),

    for objects of the class with detection multiplier ``q`` (:func:`detection_swap`,
    :func:`subject_all_miss`) and ``rho`` of them per subject, a cluster's cost is
    ``−ln H1`` and a lone box's ``−ln H0`` up to terms that do not depend on the partition. Opening costs below zero (a huge rho) are raised to
    0, which the greedy requires.
    Returns ``(open_cost, conn_const, kernel_sigma2, dummy_cost)`` per box.
    """
    f_sub = subject_all_miss(cls_vol, cls_subject, n_subjects, vp.p_fn, q)
    s2 = vp.sigma2[box_vol]
    s2_pair = 2.0 * s2  # box vs facility box: both scatter around the object
    log_a = np.log(box_area_)
    log_z = log_norm(s2, d_max)
    swap = detection_swap(vp.p_fn[box_vol], q)
    conn_const = -swap + log_z + log_a - 0.5 * np.log(2 * np.pi * s2_pair)
    open_cost = np.maximum(-f_sub[box_subject] - np.log(rho) - log_z - log_a, 0.0)
    dummy_cost = -np.log(np.maximum(vp.lam[box_vol], _TINY)) - log_u
    return open_cost, conn_const, s2_pair, dummy_cost


# ------------------------------------------------------------------------ E step


def subject_all_miss(cls_vol, cls_subject, n_subjects: int, p_fn, q: float = 1.0) -> np.ndarray:
    """``G_i(q) = Σ_{c∈V_i} ln(1 − q (1 − p_fn_j(c)))`` per subject: every viewer misses an
    object that each of them would mark with probability ``q (1 − p_fn_j)`` (``q = 1``: a
    strong object, ``G_i = Σ ln p_fn``; ``q < 1``: a weak one)."""
    t = 1.0 - p_fn[cls_vol]
    return np.bincount(
        cls_subject, weights=np.log(np.maximum(1.0 - q * t, _TINY)), minlength=n_subjects
    )


def subject_unrecognised(cls_vol, cls_subject, n_subjects: int, p_fn, q: float) -> np.ndarray:
    """``e^{G_i(q)} (1 + Σ_c x_c)``, ``x_c = q t_c / (1 − q t_c)``: the probability that at
    most one viewer marks an object of detection multiplier ``q`` (a weak object is only
    recognised when two or more volunteers mark it; a single mark of one is
    indistinguishable from a false box and is counted among them)."""
    t = 1.0 - p_fn[cls_vol]
    qt = np.clip(q * t, 0.0, 1 - 1e-9)
    g = np.bincount(cls_subject, weights=np.log1p(-qt), minlength=n_subjects)
    x = np.bincount(cls_subject, weights=qt / (1.0 - qt), minlength=n_subjects)
    return np.exp(g) * (1.0 + x)


def detection_swap(p_fn, q: float = 1.0) -> np.ndarray:
    """``ln(q t) − ln(1 − q t)`` with ``t = 1 − p_fn``: a box turns one miss into a detection."""
    qt = np.clip(q * (1.0 - np.asarray(p_fn, dtype=np.float64)), _TINY, 1 - 1e-9)
    return np.log(qt) - np.log1p(-qt)


@dataclass
class Evidence:
    """``ln H1_c − ln H0`` per object class c (strong, weak), for clusters and lone boxes."""

    cl_strong: np.ndarray
    cl_weak: np.ndarray
    box_strong: np.ndarray  # per box (meaningful for lone boxes)
    box_weak: np.ndarray
    g_strong: np.ndarray | None = None  # per subject: G_i(1) (:func:`subject_all_miss`)


def cluster_evidence(
    *,
    box_cluster: np.ndarray,
    box_vol: np.ndarray,
    box_subject: np.ndarray,
    box_d: np.ndarray,
    box_area_: np.ndarray,
    log_u: np.ndarray,
    cls_vol: np.ndarray,
    cls_subject: np.ndarray,
    cluster_subject: np.ndarray,
    label_area: np.ndarray,
    n_subjects: int,
    vp: VolunteerParams,
    pop: Population,
    d_max: float = 0.9,
) -> Evidence:
    """Log-odds of "a real object of class c" against "a coincidence of false boxes".

    Cluster l in subject i (members b, module docstring), for class c with detection
    multiplier q_c (1 strong, ``pop.q_w`` weak) and ``pop.rho`` / ``pop.rho_w`` objects
    per subject: ``ln rho_c + G_i(q_c) + Σ_b [swap_c(b) + ln f_b − ln lam_b − ln u_b]
    + ln(Z(σ²_l) A_l)``; a lone box is the one-member case (its ``ln f_b`` and the
    Laplace term cancel at d = 0).
    """
    n_cl = len(cluster_subject)
    lam = np.maximum(vp.lam[box_vol], _TINY)
    s2 = vp.sigma2[box_vol]
    base = -np.log(lam) - log_u
    tp = box_cluster >= 0
    cl = box_cluster[tp]
    # the distance to the label (the members' mean) may exceed the partition step's
    # truncation (measured to the facility box); it is counted at the boundary
    d = np.minimum(box_d[tp], d_max)
    loc = log_location_density(d, s2[tp], box_area_[tp], d_max)
    prec = np.bincount(cl, weights=1.0 / s2[tp], minlength=n_cl)
    s2_l = np.where(prec > 0, 1.0 / np.maximum(prec, _TINY), 1.0)
    laplace = log_norm(s2_l, d_max) + np.log(np.maximum(label_area, _TINY))
    shared = np.bincount(cl, weights=base[tp] + loc, minlength=n_cl) + laplace
    out, gs = [], []
    for q, rho in ((1.0, pop.rho), (pop.q_w, pop.rho_w)):
        log_rho = np.log(rho) if rho > 0 else -np.inf
        g = subject_all_miss(cls_vol, cls_subject, n_subjects, vp.p_fn, q)
        gs.append(g)
        swap = detection_swap(vp.p_fn[box_vol], q)
        cl_odds = log_rho + g[cluster_subject] + shared
        cl_odds += np.bincount(cl, weights=swap[tp], minlength=n_cl)
        out += [cl_odds, log_rho + g[box_subject] + swap + base]
    # a lone box is never a (recognised) weak object: see subject_unrecognised
    return Evidence(out[0], out[2], out[1], np.full(len(box_cluster), -np.inf), gs[0])


@dataclass
class Posterior:
    """E-step output for one partition."""

    p_fp: np.ndarray  # per cluster: P(no real object)
    p_weak: np.ndarray  # per cluster: P(weak object | real)
    r_box: np.ndarray  # per box: P(a lone box marks a real object); 0 for boxes in clusters
    r_weak: np.ndarray  # per box: P(weak | a lone box marks a real object)
    undetected: np.ndarray  # per subject: expected objects nobody marked (both classes)
    undetected_weak: np.ndarray  # per subject: the weak ones among them
    n_fp: np.ndarray  # per subject: Σ p_fp
    n_fn: np.ndarray  # per subject: undetected + Σ r_box
    log_h: float  # Σ over clusters and lone boxes of ln((H0 + H1) / H0)
    # per subject, for the M step (the same numbers, not computed twice): G_i(1) and the
    # probability that at most one viewer marks a weak object (:func:`subject_unrecognised`)
    g_strong: np.ndarray | None = None
    unrecognised_w: np.ndarray | None = None


def posterior(
    *,
    box_cluster,
    box_vol,
    box_subject,
    box_d,
    box_area_,
    log_u,
    cls_vol,
    cls_subject,
    cluster_subject,
    label_area,
    n_subjects: int,
    vp: VolunteerParams,
    pop: Population,
    d_max: float = 0.9,
) -> Posterior:
    """E step: p_fp (and p_weak) of every cluster, P(real) of every lone box, N_fp and N_fn."""
    ev = cluster_evidence(
        box_cluster=box_cluster,
        box_vol=box_vol,
        box_subject=box_subject,
        box_d=box_d,
        box_area_=box_area_,
        log_u=log_u,
        cls_vol=cls_vol,
        cls_subject=cls_subject,
        cluster_subject=cluster_subject,
        label_area=label_area,
        n_subjects=n_subjects,
        vp=vp,
        pop=pop,
        d_max=d_max,
    )
    lone = box_cluster < 0
    cl_odds = np.logaddexp(ev.cl_strong, ev.cl_weak)
    box_odds = np.where(lone, np.logaddexp(ev.box_strong, ev.box_weak), 0.0)
    p_fp = special.expit(-cl_odds)
    p_weak = special.expit(ev.cl_weak - ev.cl_strong)
    r_box = np.where(lone, special.expit(box_odds), 0.0)
    r_weak = np.where(lone, special.expit(ev.box_weak - ev.box_strong), 0.0)
    und_s = pop.rho * np.exp(ev.g_strong)
    unrec_w = subject_unrecognised(cls_vol, cls_subject, n_subjects, vp.p_fn, pop.q_w)
    und_w = pop.rho_w * unrec_w
    n_fp = np.bincount(cluster_subject, weights=p_fp, minlength=n_subjects)
    n_fn = und_s + und_w + np.bincount(box_subject, weights=r_box, minlength=n_subjects)
    log_h = float(np.sum(np.logaddexp(0.0, cl_odds)) + np.sum(np.logaddexp(0.0, box_odds[lone])))
    return Posterior(
        p_fp, p_weak, r_box, r_weak, und_s + und_w, und_w, n_fp, n_fn, log_h, ev.g_strong, unrec_w
    )


def _box_weights(post: Posterior, box_cluster):
    """Per box: P(real) and P(real and strong)."""
    tp = box_cluster >= 0
    real = post.r_box.copy()
    strong = post.r_box * (1.0 - post.r_weak)
    real[tp] = 1.0 - post.p_fp[box_cluster[tp]]
    strong[tp] = real[tp] * (1.0 - post.p_weak[box_cluster[tp]])
    return real, strong


def soft_counts(
    *,
    post: Posterior,
    box_cluster,
    box_cls,
    box_subject,
    box_d,
    cluster_size,
    cls_vol,
    cls_subject,
    n_volunteers: int,
    cls_weight=None,
) -> SoftCounts:
    """Expected per-volunteer counts under the posterior (M-step statistics).

    False boxes: Σ over a classification's boxes of P(false). Misses (the p_fn trials) are
    counted on strong objects, whose detection probability is the volunteer's own
    ``1 − p_fn``: ``tp_c`` = Σ over its boxes of P(real and strong), ``fn_c = R_i − tp_c``
    with ``R_i`` the subject's expected number of strong objects (labels, lone boxes and
    the undetected ones). Distances: Σ P(real) d² · k/(k−1) over boxes in clusters of
    k ≥ 2 members (the label is the members' mean, which sits (k−1)/k closer to them than
    the object does). ``cls_weight`` (0/1 per classification) keeps only some of them.
    """
    n_cls = len(cls_vol)
    n_sub = len(post.n_fn)
    tp = box_cluster >= 0
    w_real, w_strong = _box_weights(post, box_cluster)
    real_c = np.bincount(box_cls, weights=w_real, minlength=n_cls)
    tp_c = np.bincount(box_cls, weights=w_strong, minlength=n_cls)
    nb_c = np.bincount(box_cls, minlength=n_cls).astype(np.float64)
    cl_sub = np.zeros(len(post.p_fp), np.int64)
    cl_sub[box_cluster[tp]] = box_subject[tp]
    strong_subject = (
        np.bincount(cl_sub, weights=(1.0 - post.p_fp) * (1.0 - post.p_weak), minlength=n_sub)
        + np.bincount(box_subject, weights=np.where(tp, 0.0, w_strong), minlength=n_sub)
        + post.undetected
        - post.undetected_weak
    )
    fn_c = np.maximum(strong_subject[cls_subject] - tp_c, 0.0)
    k = np.ones(len(box_cluster))
    k[tp] = cluster_size[box_cluster[tp]]
    use_d = tp & (k >= 2)
    corr = np.where(use_d, k / np.maximum(k - 1.0, 1.0), 0.0)
    d2 = np.where(use_d, w_real * np.nan_to_num(box_d) ** 2 * corr, 0.0)
    d2_c = np.bincount(box_cls, weights=d2, minlength=n_cls)
    nd_c = np.bincount(box_cls, weights=np.where(use_d, w_real, 0.0), minlength=n_cls)
    w = np.ones(n_cls) if cls_weight is None else np.asarray(cls_weight, dtype=np.float64)

    def per_vol(x):
        return np.bincount(cls_vol, weights=x * w, minlength=n_volunteers)

    return SoftCounts(
        n_cls=per_vol(np.ones(n_cls)),
        n_boxes=per_vol(nb_c),
        n_fp=per_vol(nb_c - real_c),
        n_tp=per_vol(tp_c),
        n_fn=per_vol(fn_c),
        sum_d2=per_vol(d2_c),
        n_d2=per_vol(nd_c),
    )


def detected_by_class(post: Posterior, box_cluster) -> tuple[float, float]:
    """Expected numbers of detected strong and weak real objects (labels and lone boxes)."""
    lone = box_cluster < 0
    real = 1.0 - post.p_fp
    weak = float(np.sum(real * post.p_weak))
    total = float(np.sum(real) + np.sum(post.r_box[lone]))
    return total - weak, weak


def detection_exposure(
    cls_vol, cls_subject, n_subjects: int, p_fn, q: float, per_subject=None
) -> float:
    """Σ over subjects of the probability that an object is detected: ``1 − e^{G_i}`` for a
    strong object (q = 1), ``1 − P(at most one mark)`` for a weak one.

    With objects Poisson(rho) per subject, the detected ones are Poisson(rho × that)
    (thinning), so the rate's maximum-likelihood estimate is detected / exposure.
    ``per_subject``: ``G_i`` (q = 1) or ``P(at most one mark)`` (q < 1) when already
    computed for these arguments (:class:`Posterior`'s ``g_strong``, ``unrecognised_w``).
    """
    if q >= 1.0:
        g = per_subject
        if g is None:
            g = subject_all_miss(cls_vol, cls_subject, n_subjects, p_fn, q)
        return float(np.sum(-np.expm1(g)))
    u = per_subject
    if u is None:
        u = subject_unrecognised(cls_vol, cls_subject, n_subjects, p_fn, q)
    return float(np.sum(1.0 - u))


def fit_weak_detection(
    *,
    post: Posterior,
    box_cluster,
    box_vol,
    box_subject,
    cls_vol,
    cls_subject,
    n_subjects: int,
    vp: VolunteerParams,
    rho_w: float,
) -> float:
    """The weak objects' detection multiplier q (M step, a 1-D maximisation).

    Maximises over q in [0.01, 0.99]
    ``Σ_clusters w_weak [Σ_markers swap_q(b) + G_i(q)] + rho_w Σ_i P_i(at most one mark; q)
    + ln q + ln(1−q)`` (the recognised weak objects' expected detection pattern, the
    unrecognised ones through the Poisson term, and a Beta(2, 2) hyper-prior that keeps q
    inside (0, 1)).
    """
    tp = box_cluster >= 0
    n_cl = len(post.p_fp)
    w_cl = (1.0 - post.p_fp) * post.p_weak
    cl_sub = np.zeros(n_cl, np.int64)
    cl_sub[box_cluster[tp]] = box_subject[tp]
    w_sub = np.bincount(cl_sub, weights=w_cl, minlength=n_subjects)
    w_marker = np.zeros(len(box_cluster))
    w_marker[tp] = w_cl[box_cluster[tp]]
    p_fn_box = vp.p_fn[box_vol]
    args = (cls_vol, cls_subject, n_subjects, vp.p_fn)

    def neg_q(q):
        g = subject_all_miss(*args, q)
        val = np.sum(w_marker * detection_swap(p_fn_box, q)) + np.sum(w_sub * g)
        val += rho_w * np.sum(subject_unrecognised(*args, q)) + np.log(q) + np.log1p(-q)
        return -val

    res = optimize.minimize_scalar(
        neg_q, bounds=(0.01, 0.99), method="bounded", options={"xatol": 1e-4}
    )
    return float(res.x)


# ------------------------------------------------------------------------ M step


def fit_beta_strength(successes, trials, mean: float) -> float:
    """Strength κ of a Beta(κm, κ(1−m)) prior maximising the beta-binomial marginal likelihood.

    ``Σ_j [ln B(κm + s_j, κ(1−m) + t_j − s_j) − ln B(κm, κ(1−m))]`` over volunteers with
    trials, κ in :data:`STRENGTH_BOUNDS` (fractional counts allowed).
    """
    s = np.asarray(successes, float)
    t = np.asarray(trials, float)
    keep = t > 0
    s, t = s[keep], t[keep]
    if len(t) < 2:
        return STRENGTH_BOUNDS[1]
    m = min(max(mean, 1e-6), 1 - 1e-6)
    f = np.clip(s, 0, t)

    def nll(log_k):
        k = np.exp(log_k)
        a, b = k * m, k * (1 - m)
        return -np.sum(special.betaln(a + f, b + t - f) - special.betaln(a, b))

    return _argmin_log(nll)


def fit_gamma_strength(counts, exposure, mean: float) -> float:
    """Strength κ of a Gamma(shape κm, rate κ) prior on Poisson rates (negative-binomial marginal).

    ``Σ_j [lnΓ(κm + n_j) − lnΓ(κm) + κm ln κ − (κm + n_j) ln(κ + T_j)]``.
    """
    n = np.asarray(counts, float)
    t = np.asarray(exposure, float)
    keep = t > 0
    n, t = np.maximum(n[keep], 0), t[keep]
    if len(t) < 2:
        return STRENGTH_BOUNDS[1]
    m = max(mean, 1e-6)

    def nll(log_k):
        k = np.exp(log_k)
        a = k * m
        return -np.sum(
            special.gammaln(a + n) - special.gammaln(a) + a * np.log(k) - (a + n) * np.log(k + t)
        )

    return _argmin_log(nll)


def _argmin_log(nll) -> float:
    lo, hi = np.log(STRENGTH_BOUNDS[0]), np.log(STRENGTH_BOUNDS[1])
    res = optimize.minimize_scalar(nll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-3})
    return float(np.exp(res.x))


def estimate_population(
    counts: SoftCounts,
    *,
    strong: tuple[float, float],
    weak: tuple[float, float] | None,
    q_w: float,
    p0_fn: float,
    lam0: float,
    sigma2_0: float,
    nu_s2: float,
    eb_weight: float,
    strengths: tuple[float, float] | None = None,
) -> Population:
    """Empirical-Bayes population parameters from the expected counts of all volunteers.

    Means are pooled rates with the paper's values as ``eb_weight`` pseudo-trials;
    strengths of the p_fn and lam priors maximise the marginal likelihood. ``strong`` and
    ``weak`` are (detected objects, exposure) of each class (:func:`detected_by_class`,
    :func:`detection_exposure`); ``rho`` = detected / exposure with one pseudo-subject
    holding one strong object, ``rho_w`` the same without pseudo-counts but at least 0.001
    (None: no weak class); ``q_w`` is passed through (:func:`fit_weak_detection`).
    """
    fn_trials = counts.n_tp + counts.n_fn
    m_fn = (eb_weight * p0_fn + counts.n_fn.sum()) / (eb_weight + fn_trials.sum())
    m_lam = (eb_weight * lam0 + counts.n_fp.sum()) / (eb_weight + counts.n_cls.sum())
    m_s2 = (eb_weight * sigma2_0 + counts.sum_d2.sum()) / (eb_weight + counts.n_d2.sum())
    if strengths is None:
        k_fn = fit_beta_strength(counts.n_fn, fn_trials, m_fn)
        k_lam = fit_gamma_strength(counts.n_fp, counts.n_cls, m_lam)
    else:  # kept from an earlier fit
        k_fn, k_lam = strengths
    rho = (1.0 + strong[0]) / (1.0 + strong[1])
    rho_w = 0.0 if weak is None else max(weak[0] / max(weak[1], _TINY), 1e-3)
    return Population(m_fn, k_fn, m_lam, k_lam, m_s2, nu_s2, max(rho, 1e-6), rho_w, q_w)


def volunteer_params(counts: SoftCounts, pop: Population) -> VolunteerParams:
    """Posterior means (p_fn, lam) and mode (σ²) of every volunteer under the population priors."""
    p_fn = (pop.k_fn * pop.m_fn + counts.n_fn) / (pop.k_fn + counts.n_tp + counts.n_fn)
    lam = (pop.k_lam * pop.m_lam + counts.n_fp) / (pop.k_lam + counts.n_cls)
    sigma2 = (pop.nu_s2 * pop.m_s2 + counts.sum_d2) / (pop.nu_s2 + counts.n_d2 + 2.0)
    return VolunteerParams(
        p_fn=np.clip(p_fn, 1e-6, 1 - 1e-6), lam=np.maximum(lam, 1e-9), sigma2=sigma2
    )


def initial_population(
    p0_fn: float, lam0: float, sigma2_0: float, nu_s2: float, weak: bool = True
) -> Population:
    """Population before any evidence: the weak hyper-prior values (one strong and, with the
    weak class, 0.5 weak objects per subject, marked by a fifth of the volunteers who would
    mark a strong one)."""
    return Population(p0_fn, 10.0, lam0, 10.0, sigma2_0, nu_s2, 1.0, 0.5 if weak else 0.0, 0.2)


def log_likelihood(
    *,
    post: Posterior,
    box_vol,
    box_cluster,
    log_u,
    cls_vol,
    vp: VolunteerParams,
    pop: Population,
    batch_volunteers,
) -> dict[str, float]:
    """Log-likelihood of the partition with the real/false status of each candidate summed out.

    Data: ``Σ_i (−rho + rho e^{F_i}) − Σ_c lam_c + Σ_boxes ln(lam_b u_b) + Σ_candidates
    ln(1 + e^{odds})`` (i.e. ``ln(H0 + H1)`` per cluster and lone box). Prior: the
    population priors of the batch volunteers' p_fn, lam and σ².
    """
    n_sub_term = float(np.sum(post.undetected)) - (pop.rho + pop.rho_w) * len(post.n_fn)
    lam_c = float(np.sum(vp.lam[cls_vol]))
    h0 = float(np.sum(np.log(np.maximum(vp.lam[box_vol], _TINY)) + log_u))
    data = n_sub_term - lam_c + h0 + post.log_h
    v = batch_volunteers
    a, b = pop.k_fn * pop.m_fn, pop.k_fn * (1 - pop.m_fn)
    pf = vp.p_fn[v]
    lp_fn = np.sum((a - 1) * np.log(pf) + (b - 1) * np.log1p(-pf) - special.betaln(a, b))
    shape, rate = pop.k_lam * pop.m_lam, pop.k_lam
    lam = vp.lam[v]
    lp_lam = np.sum(
        shape * np.log(rate) - special.gammaln(shape) + (shape - 1) * np.log(lam) - rate * lam
    )
    nu, tau2 = pop.nu_s2, pop.m_s2
    s2 = vp.sigma2[v]
    lp_s2 = np.sum(
        0.5 * nu * np.log(nu * tau2 / 2)
        - special.gammaln(nu / 2)
        - (1 + nu / 2) * np.log(s2)
        - nu * tau2 / (2 * s2)
    )
    prior = float(lp_fn + lp_lam + lp_s2)
    return {"total": data + prior, "data": float(data), "prior": prior}
