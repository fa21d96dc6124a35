"""Volunteer skills, subject difficulty, η, combined variance and the log-likelihood.

Known answers are computed by hand from the paper's formulas (eq. prob_fp,
prob_fn, volunteer_variance, difficulty_estimate, eta_def, combined_variance,
anno_model) with the decisions of decisions.md#distance-likelihood, #combined-variance, #variance-estimates, #skill-probabilities.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from clumpscout.model import skills as sk

P = SimpleNamespace(
    p0_fp=0.1,
    p0_fn=0.1,
    n_beta_fp=500.0,
    n_beta_fn=50.0,
    sigma2_0_S=0.1,
    n_chi_S=10.0,
    sigma2_0_V=0.1,
    n_chi_V=10.0,
    distance_likelihood="d",
)


def tiny_clustering():
    """Two subjects, four volunteers (j0..j3).

    Subject A (local 0): annotations j0, j1, j2. Clusters 0 = {j0, j1}, 1 = {j0, j2};
    j2 also drew a box on the dummy facility.
    Subject B (local 1): annotations j0 (empty), j1, j3. Cluster 2 = {j1, j3}.
    """
    cls_subject = np.array([0, 0, 0, 1, 1, 1])
    cls_vol = np.array([0, 1, 2, 0, 1, 3])
    # boxes: (annotation, cluster, distance to the label box)
    box_cls = np.array([0, 0, 1, 2, 2, 4, 5])
    box_cluster = np.array([0, 1, 0, 1, -1, 2, 2])
    box_d = np.array([0.2, 0.3, 0.1, 0.4, np.nan, 0.0, 0.5])
    box_vol = cls_vol[box_cls]
    cluster_subject = np.array([0, 0, 1])
    n_clusters_subject = np.array([2, 1])
    return dict(
        cls_subject=cls_subject,
        cls_vol=cls_vol,
        box_cls=box_cls,
        box_cluster=box_cluster,
        box_d=box_d,
        box_vol=box_vol,
        cluster_subject=cluster_subject,
        n_clusters_subject=n_clusters_subject,
    )


def tiny_counts(**kw):
    """``sk.batch_counts`` of :func:`tiny_clustering` (four volunteers)."""
    t = tiny_clustering()
    return sk.batch_counts(
        t["box_vol"],
        t["box_cls"],
        t["box_cluster"],
        t["box_d"],
        t["cls_vol"],
        t["cls_subject"],
        t["n_clusters_subject"],
        4,
        **kw,
    )


def test_trial_counts_follow_spec15():
    counts, per_cls = tiny_counts()
    # j0: 2 boxes (both TP) in A; empty in B misses B's one clump
    # j1: A box in cluster 0 (misses cluster 1); B box in cluster 2
    # j2: one TP (cluster 1), one FP; misses cluster 0
    # j3: one TP in B
    np.testing.assert_array_equal(counts.n_boxes, [2, 2, 2, 1])
    np.testing.assert_array_equal(counts.n_fp, [0, 0, 1, 0])
    np.testing.assert_array_equal(counts.n_tp, [2, 2, 1, 1])
    np.testing.assert_array_equal(counts.n_fn, [1, 1, 1, 0])
    np.testing.assert_allclose(counts.sum_d2, [0.04 + 0.09, 0.01 + 0.0, 0.16, 0.25])
    # the empty classification (annotation 3) is K_B = 1 miss and no box
    assert per_cls["n_fn"][3] == 1 and per_cls["n_tp"][3] == 0 and per_cls["n_fp"][3] == 0


def test_skill_estimates_by_hand():
    counts, _ = tiny_counts()
    s = sk.volunteer_skills(counts, P)
    # p_fp = (nβ p0 + n_fp) / (nβ + n_boxes)
    np.testing.assert_allclose(s.p_fp, [50 / 502, 50 / 502, 51 / 502, 50 / 501])
    # p_fn = (nβ p0 + n_fn) / (nβ + n_tp + n_fn)
    np.testing.assert_allclose(s.p_fn, [6 / 53, 6 / 53, 6 / 52, 5 / 51])
    # σ² = (nχ σ0² + ΣΔ²) / (n_tp + nχ + 2)
    np.testing.assert_allclose(s.sigma2, [1.13 / 14, 1.01 / 14, 1.16 / 13, 1.25 / 13])


def test_volunteer_without_evidence_keeps_the_initial_values():
    """§5.2: new volunteers start at p0_fp, p0_fn and σ²_V,0."""
    s = sk.volunteer_skills(sk.SkillCounts.zeros(1), P)
    assert s.p_fp[0] == pytest.approx(0.1)
    assert s.p_fn[0] == pytest.approx(0.1)
    assert s.sigma2[0] == pytest.approx(0.1)


def test_subject_difficulty_by_hand():
    t = tiny_clustering()
    d = sk.subject_difficulty(
        t["box_cluster"], t["box_d"], t["cluster_subject"], t["n_clusters_subject"], 0.1, 10.0
    )
    # subject A has 2 clumps: σ²_min = 0.05; subject B has 1: σ²_min = 0.1
    c0 = (1.0 + (0.05 + 0.04) + (0.05 + 0.01)) / (2 + 12)
    c1 = (1.0 + (0.05 + 0.09) + (0.05 + 0.16)) / (2 + 12)
    c2 = (1.0 + (0.1 + 0.0) + (0.1 + 0.25)) / (2 + 12)
    np.testing.assert_allclose(d, [c0, c1, c2])


def test_counts_restricted_to_some_classifications():
    w = np.array([0, 0, 0, 1, 1, 1])  # only subject B "retired"
    counts, _ = tiny_counts(cls_weight=w)
    np.testing.assert_array_equal(counts.n_boxes, [0, 1, 0, 1])
    np.testing.assert_array_equal(counts.n_fn, [1, 0, 0, 0])
    np.testing.assert_array_equal(counts.n_tp, [0, 1, 0, 1])


def _gauss(d, s2, kind):
    x = d * d if kind == "d" else d**4
    return math.exp(-x / (2 * s2)) / math.sqrt(2 * math.pi * s2)


@pytest.mark.parametrize("kind", ["d", "d_squared"])
def test_eta_and_combined_variance_by_hand(kind):
    d, s_j, s_i = 0.3, 0.05, 0.2
    pj, pi = _gauss(d, s_j, kind), _gauss(d, s_i, kind)
    eta = pj / (pi + pj)
    assert sk.eta(d, s_j, s_i, kind) == pytest.approx(eta, rel=1e-12)
    assert sk.combined_variance(d, s_j, s_i, kind) == pytest.approx(
        (1 - eta) * s_i + eta * s_j, rel=1e-12
    )


def test_combined_variance_without_difficulty_uses_the_volunteer():
    """decisions.md#combined-variance: before a subject has a difficulty estimate, use σ²_j."""
    assert sk.combined_variance(0.4, 0.07, np.nan, "d") == pytest.approx(0.07)


def test_eta_is_stable_for_extreme_distances():
    e = sk.eta(np.array([0.0, 1.0]), np.array([1e-6, 1e-6]), np.array([1.0, 1.0]), "d")
    assert np.all(np.isfinite(e))
    assert e[1] == pytest.approx(0.0, abs=1e-300)  # d = 1 is impossible under σ² = 1e-6


def test_variance_mode_and_beta_mean():
    assert sk.scaled_inv_chi2_mode(10, 0.1, 0.5, 3) == pytest.approx(1.5 / 15)
    assert sk.beta_posterior_mean(50, 0.1, 3, 10) == pytest.approx(8 / 60)
    assert sk.beta_posterior_mean(0, 0.3, 0, 0) == pytest.approx(0.3)  # no evidence, no prior


def test_log_priors_match_scipy():
    p = np.array([0.05, 0.1, 0.3])
    expected = stats.beta(50 * 0.1 + 2, 50 * 0.9 + 7 - 2).logpdf(p)
    np.testing.assert_allclose(sk.log_beta_prior(p, 50, 0.1, 2, 7), expected)
    s2 = np.array([0.01, 0.1, 0.5])
    nu, nu_tau2 = 10 + 4, 10 * 0.1 + 0.3
    expected = stats.invgamma(nu / 2, scale=nu_tau2 / 2).logpdf(s2)
    np.testing.assert_allclose(sk.log_scaled_inv_chi2(s2, 10, 0.1, 0.3, 4), expected)


def test_log_likelihood_by_hand():
    """eq. anno_model + eq. joint_model on one subject with three annotations.

    Volunteers j0, j1 each put one box in the single clump (d = 0.1, 0.2); j1 also
    drew a false positive; j2's classification is empty (one miss).
    """
    p_fp = np.array([0.1, 0.2, 0.3])
    p_fn = np.array([0.2, 0.1, 0.4])
    s2v = np.array([0.05, 0.08, 0.1])
    skills = sk.Skills(p_fp, p_fn, s2v)
    diff = np.array([0.06])
    out = sk.log_likelihood(
        box_vol=np.array([0, 1, 1]),
        box_cluster=np.array([0, 0, -1]),
        box_d=np.array([0.1, 0.2, np.nan]),
        box_sigma2_subject=np.array([0.06, 0.06, np.nan]),
        cls_vol=np.array([0, 1, 2]),
        cls_n_fn=np.array([0, 0, 1]),
        skills=skills,
        difficulty=diff,
        prev=sk.SkillCounts.zeros(3),
        batch_volunteers=np.array([0, 1, 2]),
        p=P,
    )
    data = 0.0
    for j, d in ((0, 0.1), (1, 0.2)):
        pj, pi = _gauss(d, s2v[j], "d"), _gauss(d, 0.06, "d")
        eta = pj / (pi + pj)
        s2 = (1 - eta) * 0.06 + eta * s2v[j]
        data += math.log(1 - p_fn[j]) + math.log(1 - p_fp[j]) + math.log(_gauss(d, s2, "d"))
    data += math.log(p_fp[1])  # the false positive
    data += math.log(p_fn[2])  # the empty classification's miss
    prior = (
        stats.beta(50, 450).logpdf(p_fp).sum()
        + stats.beta(5, 45).logpdf(p_fn).sum()
        + stats.invgamma(5, scale=0.5).logpdf(s2v).sum()
        + stats.invgamma(5, scale=0.5).logpdf(diff).sum()
    )
    assert out["data"] == pytest.approx(data, rel=1e-12)
    assert out["prior"] == pytest.approx(prior, rel=1e-12)
    assert out["total"] == pytest.approx(data + prior, rel=1e-12)


def test_skill_counts_add_and_copy():
    a = sk.SkillCounts.zeros(2)
    a.n_fp[:] = [1, 2]
    b = a.copy()
    b.n_fp[0] = 5
    c = a + b
    np.testing.assert_array_equal(c.n_fp, [6, 4])
    np.testing.assert_array_equal(a.n_fp, [1, 2])
