"""Volunteer skills and subject difficulty (paper §4.2-4.5, §5.4-5.5, Appendix A).

Everything here is a vectorised function of per-box / per-classification arrays
(``np.bincount`` over sorted integer codes); nothing loops over subjects or boxes.

Notation (paper, Appendix "Table of symbols"):

* a *box* is one click of one classification (volunteer ``j`` on subject ``i``);
  its cluster ``l`` is its label clump, or ``-1`` for the dummy facility (a
  false positive);
* a *classification* is one volunteer's annotation of one subject, empty ones
  included (an empty classification is never a box, decisions.md#skill-probabilities);
* ``K_i = |ŷ_i|`` is the number of label clumps of subject ``i``.

Skill estimators (decisions.md#variance-estimates, #skill-probabilities, eq. skill_prob_estimate, eq. variance_param_estimate):

* ``p_fp_j = (nβ_fp p0_fp + n_fp,j) / (nβ_fp + n_boxes,j)``        (eq. prob_fp)
* ``p_fn_j = (nβ_fn p0_fn + n_fn,j) / (nβ_fn + n_tp,j + n_fn,j)``   (eq. prob_fn)
* ``σ²_j = (nχ_V σ²0_V + Σ Δ²) / (n_tp,j + nχ_V + 2)``, Δ the Jaccard distance of
  each true-positive box to its label box (eq. volunteer_variance with the true
  mode of the scaled-inverse-χ² posterior, decisions.md#variance-estimates).
* ``σ²_il = (nχ_S σ²0_S + Σ_{b∈Z_il} (σ²_min,i + d_b²)) / (|Z_il| + nχ_S + 2)``,
  ``σ²_min,i = σ²0_S / K_i`` (eq. difficulty_estimate, decisions.md#variance-estimates).

Volunteer evidence is carried as :class:`SkillCounts` (sufficient statistics),
so that skills cached at the start of a cycle can be restored and updated with
the counts of the subjects that retired (§5.8, decisions.md#retirement): the Beta and
scaled-inverse-χ² posteriors factor into prior and per-batch terms (Appendix A).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from clumpscout.model.distance import neg_log_distance_likelihood


@dataclass
class SkillCounts:
    """Per-volunteer sufficient statistics of the skill posteriors (Appendix A).

    ``n_boxes``: p_fp trials (boxes drawn); ``n_fp``: boxes on the dummy facility;
    ``n_tp``: boxes in label clumps; ``n_fn``: label clumps missed (decisions.md#skill-probabilities);
    ``sum_d2``: Σ Δ² over the true-positive boxes (decisions.md#variance-estimates; n = n_tp).
    """

    n_boxes: np.ndarray
    n_fp: np.ndarray
    n_tp: np.ndarray
    n_fn: np.ndarray
    sum_d2: np.ndarray

    @classmethod
    def zeros(cls, n_volunteers: int) -> SkillCounts:
        z = np.zeros(n_volunteers, dtype=np.float64)
        return cls(z.copy(), z.copy(), z.copy(), z.copy(), z.copy())

    def __add__(self, other: SkillCounts) -> SkillCounts:
        return SkillCounts(
            self.n_boxes + other.n_boxes,
            self.n_fp + other.n_fp,
            self.n_tp + other.n_tp,
            self.n_fn + other.n_fn,
            self.sum_d2 + other.sum_d2,
        )

    def copy(self) -> SkillCounts:
        return SkillCounts(
            self.n_boxes.copy(),
            self.n_fp.copy(),
            self.n_tp.copy(),
            self.n_fn.copy(),
            self.sum_d2.copy(),
        )


@dataclass
class Skills:
    """Volunteer skills ``S_j = {p_fp_j, p_fn_j, σ²_j}`` (§4.2)."""

    p_fp: np.ndarray
    p_fn: np.ndarray
    sigma2: np.ndarray


# ----------------------------------------------------------------- estimators


def beta_posterior_mean(n_beta: float, p0: float, successes, trials) -> np.ndarray:
    """Posterior mean of a Bernoulli rate under a Beta(nβ p0, nβ(1−p0)) prior.

    eq. skill_prob_estimate: ``(nβ p0 + n_success) / (nβ + n_trials)``.
    With no trials and nβ = 0 the rate is undefined; p0 is returned then.
    """
    successes = np.asarray(successes, dtype=np.float64)
    trials = np.asarray(trials, dtype=np.float64)
    den = n_beta + trials
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (n_beta * p0 + successes) / den
    return np.where(den > 0, out, p0)


def scaled_inv_chi2_mode(n_chi: float, sigma2_0: float, sum_sq, n) -> np.ndarray:
    """Mode of the scaled-inverse-χ² posterior of a variance (decisions.md#variance-estimates).

    Prior Scale-inv-χ²(nχ, σ²0) times ``n`` zero-mean Gaussian draws with
    ``Σ Δ² = sum_sq`` gives Scale-inv-χ²(n + nχ, (nχσ²0 + ΣΔ²)/(n + nχ)), whose
    mode is ``(nχ σ²0 + Σ Δ²) / (n + nχ + 2)``. The appendix's printed
    eq. variance_param_estimate (a product instead of a sum) is a typo.
    """
    sum_sq = np.asarray(sum_sq, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    return (n_chi * sigma2_0 + sum_sq) / (n + n_chi + 2.0)


def volunteer_skills(counts: SkillCounts, p) -> Skills:
    """Skills from accumulated counts: eq. prob_fp, prob_fn (decisions.md#skill-probabilities), volunteer_variance (decisions.md#variance-estimates).

    With no trials the estimates are the initial values of §5.2: p0_fp, p0_fn, σ²_V,0.

    ``p`` carries the hyper-parameters (``p0_fp, n_beta_fp, p0_fn, n_beta_fn,
    sigma2_0_V, n_chi_V``; :class:`clumpscout.model.params.Params`).
    """
    p_fp = beta_posterior_mean(p.n_beta_fp, p.p0_fp, counts.n_fp, counts.n_boxes)
    p_fn = beta_posterior_mean(p.n_beta_fn, p.p0_fn, counts.n_fn, counts.n_tp + counts.n_fn)
    sigma2 = scaled_inv_chi2_mode(p.n_chi_V, p.sigma2_0_V, counts.sum_d2, counts.n_tp)
    # a volunteer without any true positive yet keeps the initial value σ²_V,0 (§5.2)
    sigma2 = np.where(np.asarray(counts.n_tp) > 0, sigma2, p.sigma2_0_V)
    return Skills(p_fp=p_fp, p_fn=p_fn, sigma2=sigma2)


def batch_counts(
    box_vol: np.ndarray,
    box_cls: np.ndarray,
    box_cluster: np.ndarray,
    box_d: np.ndarray,
    cls_vol: np.ndarray,
    cls_subject: np.ndarray,
    n_clusters_subject: np.ndarray,
    n_volunteers: int,
    cls_weight: np.ndarray | None = None,
) -> tuple[SkillCounts, dict[str, np.ndarray]]:
    """Per-volunteer trial counts of one clustering (eq. num_fp, num_fn, num_tp; decisions.md#skill-probabilities).

    * a box on the dummy facility (``box_cluster < 0``) is a false positive, a
      box in a label clump a true positive; each box is one p_fp trial;
    * each label clump of a subject the volunteer classified is one p_fn trial:
      a true positive if the classification has a box in it, else a miss; an
      empty classification therefore counts ``K_i`` misses and no box.

    ``cls_weight`` (0/1 per classification) restricts the counts to some
    classifications (those of retired subjects, §5.8). Also returns the
    per-classification ``n_tp, n_fp, n_fn`` (used by the likelihood).
    """
    n_cls = len(cls_vol)
    tp = box_cluster >= 0
    n_tp_c = np.bincount(box_cls, weights=tp, minlength=n_cls)
    n_fp_c = np.bincount(box_cls, weights=~tp, minlength=n_cls)
    n_fn_c = n_clusters_subject[cls_subject] - n_tp_c
    d2 = np.where(tp, np.nan_to_num(box_d) ** 2, 0.0)
    d2_c = np.bincount(box_cls, weights=d2, minlength=n_cls)
    w = np.ones(n_cls) if cls_weight is None else np.asarray(cls_weight, dtype=np.float64)

    def per_vol(x):
        return np.bincount(cls_vol, weights=x * w, minlength=n_volunteers)

    counts = SkillCounts(
        n_boxes=per_vol(n_tp_c + n_fp_c),
        n_fp=per_vol(n_fp_c),
        n_tp=per_vol(n_tp_c),
        n_fn=per_vol(n_fn_c),
        sum_d2=per_vol(d2_c),
    )
    return counts, {"n_tp": n_tp_c, "n_fp": n_fp_c, "n_fn": n_fn_c}


def subject_difficulty(
    box_cluster: np.ndarray,
    box_d: np.ndarray,
    cluster_subject: np.ndarray,
    n_clusters_subject: np.ndarray,
    sigma2_0_S: float,
    n_chi_S: float,
) -> np.ndarray:
    """Difficulty ``σ²_il`` of each label clump (eq. difficulty_estimate, decisions.md#variance-estimates).

    ``Δ² = σ²_min,i + d²`` over the clump's boxes ``Z_il`` (d: Jaccard distance
    of the box to the label box), ``σ²_min,i = σ²0_S / |ŷ_i|``, n = |Z_il|,
    with the true scaled-inverse-χ² mode.
    """
    n_clusters = len(cluster_subject)
    tp = box_cluster >= 0
    cl = box_cluster[tp]
    sigma2_min = sigma2_0_S / np.maximum(n_clusters_subject, 1)
    n = np.bincount(cl, minlength=n_clusters).astype(np.float64)
    sum_d2 = np.bincount(cl, weights=box_d[tp] ** 2, minlength=n_clusters)
    sum_sq = n * sigma2_min[cluster_subject] + sum_d2
    return scaled_inv_chi2_mode(n_chi_S, sigma2_0_S, sum_sq, n)


# ---------------------------------------------------- annotation model (§4.4)


def log_distance_likelihood(d, sigma2, kind: str) -> np.ndarray:
    """``ln Gaussian(|d|²; σ²)`` of eq. anno_model in the reading chosen by decisions.md#distance-likelihood."""
    return -neg_log_distance_likelihood(np.asarray(d, float), np.asarray(sigma2, float), kind)


def eta(d, sigma2_volunteer, sigma2_subject, kind: str) -> np.ndarray:
    """Weight of volunteer skill vs subject difficulty, eq. eta_def (decisions.md#combined-variance).

    ``η = p_j / (p_i + p_j)`` with ``p_j = Gaussian(d; σ²_j)`` and
    ``p_i = Gaussian(d; σ²_il)``, computed in log space (``expit(ln p_j − ln p_i)``).
    Where the subject has no difficulty estimate yet (NaN), η = 1 (decisions.md#combined-variance).
    """
    sigma2_subject = np.asarray(sigma2_subject, dtype=np.float64)
    missing = ~np.isfinite(sigma2_subject)
    s_i = np.where(missing, sigma2_volunteer, sigma2_subject)
    lp_j = log_distance_likelihood(d, sigma2_volunteer, kind)
    lp_i = log_distance_likelihood(d, s_i, kind)
    return np.where(missing, 1.0, special.expit(lp_j - lp_i))


def combined_variance(d, sigma2_volunteer, sigma2_subject, kind: str) -> np.ndarray:
    """``σ²_ijk = (1 − η) σ²_il + η σ²_j`` (eq. combined_variance, decisions.md#combined-variance).

    Before a subject has a difficulty estimate (NaN) the volunteer's σ²_j is used.
    """
    sigma2_volunteer = np.asarray(sigma2_volunteer, dtype=np.float64)
    sigma2_subject = np.asarray(sigma2_subject, dtype=np.float64)
    e = eta(d, sigma2_volunteer, sigma2_subject, kind)
    s_i = np.where(np.isfinite(sigma2_subject), sigma2_subject, sigma2_volunteer)
    return (1.0 - e) * s_i + e * sigma2_volunteer


# --------------------------------------------------------------- priors (§4.5)


def log_beta_prior(p, n_beta: float, p0: float, prev_success=0.0, prev_trials=0.0) -> np.ndarray:
    """``ln Beta(p; nβ p0 + s, nβ(1 − p0) + t − s)``: the prior of a skill probability.

    ``s, t`` are the successes and trials of earlier (retired) batches, which
    make the effective prior of a returning volunteer (Appendix A).
    Returns 0 where the Beta is improper (a or b = 0).
    """
    a = n_beta * p0 + np.asarray(prev_success, float)
    b = n_beta * (1.0 - p0) + np.asarray(prev_trials, float) - np.asarray(prev_success, float)
    ok = (a > 0) & (b > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        lp = (
            (a - 1) * np.log(p)
            + (b - 1) * np.log1p(-np.asarray(p, float))
            - special.betaln(np.where(ok, a, 1.0), np.where(ok, b, 1.0))
        )
    return np.where(ok, lp, 0.0)


def log_scaled_inv_chi2(sigma2, n_chi: float, sigma2_0: float, prev_sum_sq=0.0, prev_n=0.0):
    """``ln Scale-inv-χ²(σ²; ν, τ²)`` with ν = nχ + n_prev, ντ² = nχσ²0 + ΣΔ²_prev (Appendix A).

    Density: (ντ²/2)^{ν/2}/Γ(ν/2) · σ²^{−(1+ν/2)} · exp(−ντ²/(2σ²)). 0 where ν = 0.
    """
    nu = n_chi + np.asarray(prev_n, float)
    nu_tau2 = n_chi * sigma2_0 + np.asarray(prev_sum_sq, float)
    ok = (nu > 0) & (nu_tau2 > 0)
    nu_s = np.where(ok, nu, 1.0)
    nt_s = np.where(ok, nu_tau2, 1.0)
    s2 = np.asarray(sigma2, float)
    lp = (
        0.5 * nu_s * np.log(nt_s / 2.0)
        - special.gammaln(nu_s / 2.0)
        - (1.0 + nu_s / 2.0) * np.log(s2)
        - nt_s / (2.0 * s2)
    )
    return np.where(ok, lp, 0.0)


def log_likelihood(
    *,
    box_vol: np.ndarray,
    box_cluster: np.ndarray,
    box_d: np.ndarray,
    box_sigma2_subject: np.ndarray,
    cls_vol: np.ndarray,
    cls_n_fn: np.ndarray,
    skills: Skills,
    difficulty: np.ndarray,
    prev: SkillCounts,
    batch_volunteers: np.ndarray,
    p,
) -> dict[str, float]:
    """Total log-likelihood of a batch: eq. joint_model with eq. anno_model (decisions.md#em-stopping).

    Data terms, summed over the classifications of the batch:

    * ``n_fn ln p_fn + n_tp ln(1 − p_fn)`` (a miss per unmarked label clump),
    * ``n_fp ln p_fp + n_tp ln(1 − p_fp)``,
    * ``Σ_TP ln Gaussian(d_kl; σ²_ijk)`` with the combined variance (eq. combined_variance).

    Prior terms: Beta priors of the batch volunteers' p_fp and p_fn and the
    scaled-inverse-χ² priors of their σ²_j (with the evidence of earlier
    retired subjects folded in, Appendix A), and of every clump difficulty σ²_il.
    The label prior π(y_i) is flat.
    """
    tp = box_cluster >= 0
    pfp = skills.p_fp[box_vol]
    pfn = skills.p_fn[box_vol]
    ll_fp = np.sum(np.log(pfp[~tp]))
    ll_tp = np.sum(np.log1p(-pfn[tp]) + np.log1p(-pfp[tp]))
    s2 = combined_variance(
        box_d[tp], skills.sigma2[box_vol[tp]], box_sigma2_subject[tp], p.distance_likelihood
    )
    ll_dist = np.sum(log_distance_likelihood(box_d[tp], s2, p.distance_likelihood))
    ll_fn = np.sum(cls_n_fn * np.log(skills.p_fn[cls_vol]))
    v = batch_volunteers
    lp_vol = (
        np.sum(log_beta_prior(skills.p_fp[v], p.n_beta_fp, p.p0_fp, prev.n_fp[v], prev.n_boxes[v]))
        + np.sum(
            log_beta_prior(
                skills.p_fn[v], p.n_beta_fn, p.p0_fn, prev.n_fn[v], prev.n_tp[v] + prev.n_fn[v]
            )
        )
        + np.sum(
            log_scaled_inv_chi2(
                skills.sigma2[v], p.n_chi_V, p.sigma2_0_V, prev.sum_d2[v], prev.n_tp[v]
            )
        )
    )
    lp_subj = np.sum(log_scaled_inv_chi2(difficulty, p.n_chi_S, p.sigma2_0_S))
    data = float(ll_fp + ll_tp + ll_dist + ll_fn)
    prior = float(lp_vol + lp_subj)
    return {"total": data + prior, "data": data, "prior": prior}
