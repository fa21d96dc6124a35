"""Per-clump p_fp and p_σ, N_fn terms, the coincidence scan and the risk (§5.7, decisions.md#clump-false-positive-probability, #location-variance, #expected-misses)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clumpscout.model import risk
from clumpscout.model.distance import jaccard_distance


def _one_clump(p_fp_mark, p_fn_miss, p_fn_mark=None):
    """One subject, one clump marked by the first volunteers and missed by the rest."""
    n_mark, n_miss = len(p_fp_mark), len(p_fn_miss)
    n = n_mark + n_miss
    p_fp = np.concatenate([p_fp_mark, np.full(n_miss, 0.5)])
    p_fn = np.concatenate(
        [np.full(n_mark, 0.3) if p_fn_mark is None else p_fn_mark, np.asarray(p_fn_miss)]
    )
    return risk.clump_false_positive_prob(
        box_cluster=np.zeros(n_mark, np.int64),
        box_vol=np.arange(n_mark),
        cluster_subject=np.array([0]),
        cls_subject=np.zeros(n, np.int64),
        cls_vol=np.arange(n),
        p_fp=p_fp,
        p_fn=p_fn,
    )[0]


def test_p_fp_three_markers_two_missers_by_hand():
    """decisions.md#clump-false-positive-probability: P_fp = Π_miss(1−p_fn)·Π_mark p_fp, P_tp = Π_miss p_fn·Π_mark(1−p_fp)."""
    p_fp_mark = np.array([0.1, 0.2, 0.05])
    p_fn_miss = np.array([0.3, 0.4])
    P_fp = 0.7 * 0.6 * 0.1 * 0.2 * 0.05
    P_tp = 0.3 * 0.4 * 0.9 * 0.8 * 0.95
    assert _one_clump(p_fp_mark, p_fn_miss) == pytest.approx(P_fp / (P_fp + P_tp), rel=1e-12)
    assert P_fp / (P_fp + P_tp) == pytest.approx(0.00509, abs=1e-5)


def test_p_fp_markers_own_p_fn_does_not_matter():
    a = _one_clump(np.array([0.1, 0.2]), np.array([0.3]), p_fn_mark=np.array([0.01, 0.9]))
    b = _one_clump(np.array([0.1, 0.2]), np.array([0.3]), p_fn_mark=np.array([0.5, 0.5]))
    assert a == pytest.approx(b, rel=1e-12)


def test_p_fp_is_stable_in_log_space_with_40_volunteers():
    """Both products underflow (1e-400) in linear space; their ratio is 2."""
    p_fp_mark = np.full(20, 1e-20)
    p_fp_mark[0] = 2e-20
    p_fn_miss = np.full(20, 1e-20)
    with np.errstate(under="ignore"):
        assert np.prod(p_fp_mark) == 0.0  # what a naive product would give
    # P_fp / P_tp = Π(1−1e-20)·2e-400 / (1e-400·Π(1−ε)) = 2  ->  p_fp = 2/3
    assert _one_clump(p_fp_mark, p_fn_miss) == pytest.approx(2.0 / 3.0, rel=1e-9)


def test_p_fp_two_clumps_two_subjects():
    # subject 0: volunteers 0,1,2; clump 0 marked by 0 and 1; clump 1 marked by 2
    # subject 1: volunteers 0, 3; clump 2 marked by 3
    p_fp = np.array([0.1, 0.2, 0.3, 0.4])
    p_fn = np.array([0.5, 0.6, 0.7, 0.8])
    out = risk.clump_false_positive_prob(
        box_cluster=np.array([0, 0, 1, 2]),
        box_vol=np.array([0, 1, 2, 3]),
        cluster_subject=np.array([0, 0, 1]),
        cls_subject=np.array([0, 0, 0, 1, 1]),
        cls_vol=np.array([0, 1, 2, 0, 3]),
        p_fp=p_fp,
        p_fn=p_fn,
    )

    def norm(pf, pt):
        return pf / (pf + pt)

    expected = [
        norm(0.3 * 0.1 * 0.2, 0.7 * 0.9 * 0.8),
        norm(0.5 * 0.4 * 0.3, 0.5 * 0.6 * 0.7),
        norm(0.5 * 0.4, 0.5 * 0.6),
    ]
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_p_sigma_inverse_variance_sum_by_hand():
    """decisions.md#location-variance: σ²_l = 1/Σ 1/σ²_ijk, p_σ = 1 − erf(δ/sqrt(2σ²_l))."""
    s2 = risk.clump_location_variance(
        np.array([0, 0, 0, -1, 1]), np.array([0.1, 0.2, 0.4, 9.0, 0.3]), 2
    )
    np.testing.assert_allclose(s2, [1 / 17.5, 0.3])
    p = risk.clump_sigma_prob(s2, 0.5)
    np.testing.assert_allclose(
        p, [1 - math.erf(0.5 / math.sqrt(2 / 17.5)), 1 - math.erf(0.5 / math.sqrt(0.6))], rtol=1e-12
    )


def test_p_sigma_falls_as_volunteers_agree():
    """More boxes -> smaller σ²_l -> smaller p_σ (the paper's §6 trend)."""
    ps = [
        risk.clump_sigma_prob(
            risk.clump_location_variance(np.zeros(n, np.int64), np.full(n, 0.1), 1), 0.5
        )[0]
        for n in (3, 10, 20)
    ]
    assert ps[0] > ps[1] > ps[2]


def test_risk_expression():
    assert risk.subject_risk(0.5, 0.2, 1.0, 1.0, 1.0, 2.0) == pytest.approx(2.7)
    np.testing.assert_allclose(
        risk.subject_risk(
            np.array([1.0, 0.0]), np.array([0.0, 3.0]), np.array([0.5, 0.5]), 2, 3, 4
        ),
        [4.0, 11.0],
    )


def test_constrained_masks():
    """§5.7 constraints: TP boxes are not cities; original facilities cannot be facilities."""
    cluster = np.array([0, 0, -1, 1, 1, -1])
    is_fac = np.array([True, False, False, True, False, False])
    can_fac, can_city = risk.constrained_masks(cluster, is_fac)
    np.testing.assert_array_equal(can_city, [False, False, True, False, False, True])
    np.testing.assert_array_equal(can_fac, [False, True, True, False, True, True])


def test_expected_missed_init_by_hand():
    """eq. est_num_fn: p_fn = e^{−C}, p_tn = e^{−C^∅}, N = Σ p_fn/(p_fn + p_tn)."""
    c = np.array([3.0, 1.0, 2.0])
    c0 = np.array([2.0, 1.0, 900.0])
    out = risk.expected_missed_init(c, c0, np.array([0, 0, 1]), 3)
    a = math.exp(-3) / (math.exp(-3) + math.exp(-2))
    np.testing.assert_allclose(out, [a + 0.5, 1.0, 0.0], rtol=1e-12)


def _box(cx, cy, s=0.05):
    return [cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2]


def test_coincidence_scan_groups_by_hand():
    """3 identical boxes at A, 2 at B, 1 isolated at C: whatever the order, B∩ = {A, B, C}
    with counts 2, 1, 0."""
    boxes = np.array([_box(0.2, 0.2)] * 3 + [_box(0.7, 0.7)] * 2 + [_box(0.5, 0.2)])
    for seed in range(5):
        kept, n_cap = risk.coincidence_scan(boxes, 0.9, seed)
        got = sorted((round(boxes[k, 0], 6), int(c)) for k, c in zip(kept, n_cap, strict=True))
        assert got == sorted([(0.175, 2), (0.675, 1), (0.475, 0)])


def _brute_scan(boxes, d_max, seed):
    order = np.random.default_rng(seed).permutation(len(boxes))
    kept, counts = [], []
    for b in order:
        hit = -1
        for r, k in enumerate(kept):
            if jaccard_distance(boxes[b], boxes[k]) < d_max:
                hit = r
                break
        if hit >= 0:
            counts[hit] += 1
        else:
            kept.append(b)
            counts.append(0)
    return np.array(kept, np.int64), np.array(counts, np.int64)


def _random_boxes(n, seed):
    """Boxes of very different sizes (1:80), some not square, clustered so that many coincide."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(0, 1, (n, 2))
    c[: n // 2] = c[0] + rng.normal(0, 0.03, (n // 2, 2))
    w = np.exp(rng.uniform(np.log(0.005), np.log(0.4), n))
    h = w * rng.choice([1.0, 1.0, 0.7, 1.3], n)
    return np.column_stack([c[:, 0] - w / 2, c[:, 1] - h / 2, c[:, 0] + w / 2, c[:, 1] + h / 2])


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 60),
    seed=st.integers(0, 2**31 - 1),
    d_max=st.sampled_from([0.5, 0.9, 0.99]),
)
def test_coincidence_scan_grid_equals_brute_force(n, seed, d_max):
    boxes = _random_boxes(n, seed)
    kept, n_cap = risk.coincidence_scan(boxes, d_max, seed)
    bk, bc = _brute_scan(boxes, d_max, seed)
    np.testing.assert_array_equal(kept, bk)
    np.testing.assert_array_equal(n_cap, bc)
    assert n_cap.sum() == n - len(kept)


def test_coincidence_term_by_hand():
    """eq. exp_num_fn: e^{−C_f,i} · Σ_{b∈B*_i} n∩_b / n_z."""
    boxes = np.array([_box(0.2, 0.2)] * 3 + [_box(0.7, 0.7)] * 2 + [_box(0.5, 0.2)])
    kept, n_cap = risk.coincidence_scan(boxes, 0.9, 0)
    # subject 0 has a label on A (so B* = {B, C}), subject 1 has no label (B* = B∩),
    # subject 2 has labels on A and B (B* = {C})
    labels = np.array([_box(0.2, 0.21), _box(0.2, 0.19), _box(0.71, 0.7)])
    label_off = np.array([0, 1, 1, 3])
    c_f = np.array([1.0, 2.0, 0.5])
    n_z = 10
    out = risk.coincidence_term(boxes[kept], n_cap, n_z, label_off, labels, c_f, 0.9)
    np.testing.assert_allclose(
        out, [math.exp(-1.0) * 1 / 10, math.exp(-2.0) * 3 / 10, 0.0], rtol=1e-12, atol=1e-15
    )


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 40), seed=st.integers(0, 2**31 - 1), d_max=st.sampled_from([0.5, 0.9]))
def test_coincidence_term_grid_equals_brute_force(n, seed, d_max):
    boxes = _random_boxes(n, seed)
    kept, n_cap = risk.coincidence_scan(boxes, d_max, seed)
    labels = _random_boxes(7, seed + 1)
    label_off = np.array([0, 3, 3, 7])
    c_f = np.array([0.1, 0.2, 0.3])
    got = risk.coincidence_term(boxes[kept], n_cap, 11, label_off, labels, c_f, d_max)
    p_cap = n_cap / 11
    expected = []
    for i in range(3):
        lab = labels[label_off[i] : label_off[i + 1]]
        keep = [all(jaccard_distance(boxes[k], lb) >= d_max for lb in lab) for k in kept]
        expected.append(math.exp(-c_f[i]) * float(np.sum(p_cap[np.array(keep, bool)])))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-15)
