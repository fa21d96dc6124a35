"""Jaccard distance (paper §3.4, decisions.md#jaccard-distance) and the distance likelihood (decisions.md#distance-likelihood).

Known answers are computed by hand from the areas of the boxes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clumpscout.model.distance import (
    jaccard_distance,
    jaccard_nb,
    neg_log_distance_likelihood,
    neg_log_likelihood_nb,
    pairwise_jaccard,
)


def d(a, b) -> float:
    return float(jaccard_distance(a, b))


def test_identical_boxes_are_at_distance_zero():
    assert d([0.1, 0.2, 0.4, 0.5], [0.1, 0.2, 0.4, 0.5]) == 0.0


def test_disjoint_and_touching_boxes_are_at_distance_one():
    assert d([0, 0, 1, 1], [2, 2, 3, 3]) == 1.0
    assert d([0, 0, 1, 1], [1, 0, 2, 1]) == 1.0  # shared edge: zero-area intersection
    assert d([0, 0, 1, 1], [1, 1, 2, 2]) == 1.0  # shared corner


def test_unit_squares_offset_by_half_a_side():
    # intersection 0.5, union 1 + 1 - 0.5 = 1.5  ->  d = 1 - 0.5/1.5 = 2/3
    assert d([0, 0, 1, 1], [0.5, 0, 1.5, 1]) == pytest.approx(2 / 3, abs=1e-15)
    # diagonal offset by half a side: intersection 0.25, union 1.75 -> 1 - 1/7 = 6/7
    assert d([0, 0, 1, 1], [0.5, 0.5, 1.5, 1.5]) == pytest.approx(6 / 7, abs=1e-15)


def test_box_inside_another_is_one_minus_the_area_ratio():
    # inner 1x1 inside outer 2x2: intersection 1, union 4 -> d = 1 - 1/4
    assert d([0, 0, 2, 2], [0.5, 0.5, 1.5, 1.5]) == pytest.approx(0.75, abs=1e-15)
    assert d([0.5, 0.5, 1.5, 1.5], [0, 0, 2, 2]) == pytest.approx(0.75, abs=1e-15)


def test_union_is_the_true_union_not_the_enclosing_box():
    """decisions.md#jaccard-distance: 2x2 squares overlapping in a 1x1 corner. True union 4 + 4 - 1 = 7 gives
    d = 6/7; the enclosing box (3x3 = 9) would give 1 - 1/9 = 8/9."""
    got = d([0, 0, 2, 2], [1, 1, 3, 3])
    assert got == pytest.approx(6 / 7, abs=1e-15)
    assert got != pytest.approx(8 / 9, abs=1e-3)


def test_degenerate_boxes():
    # a zero-area box: distance 0 to itself, 1 to anything else
    assert d([0.3, 0.3, 0.3, 0.3], [0.3, 0.3, 0.3, 0.3]) == 0.0
    assert d([0.3, 0.3, 0.3, 0.3], [0.4, 0.4, 0.4, 0.4]) == 1.0
    assert d([0.3, 0.3, 0.3, 0.3], [0, 0, 1, 1]) == 1.0  # inside a proper box, no area
    assert d([0, 0, 1, 0], [0, 0, 1, 1]) == 1.0  # zero-height box
    assert math.isnan(d([np.nan, 0, 1, 1], [0, 0, 1, 1]))


def test_scalar_kernel_matches_vector_and_pairwise():
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, 1, (7, 2))
    side = rng.uniform(0.05, 0.4, (7, 1))
    boxes = np.hstack([xy, xy + side])
    pw = pairwise_jaccard(boxes)
    assert pw.shape == (7, 7)
    for i in range(7):
        for j in range(7):
            want = jaccard_nb(*boxes[i], *boxes[j])
            assert pw[i, j] == want
    np.testing.assert_array_equal(jaccard_distance(boxes[:, None, :], boxes[None, :, :]), pw)


def test_broadcasting_shapes():
    a = np.zeros((3, 1, 4)) + [0, 0, 1, 1]
    b = np.zeros((1, 5, 4)) + [0.5, 0, 1.5, 1]
    out = jaccard_distance(a, b)
    assert out.shape == (3, 5)
    np.testing.assert_allclose(out, 2 / 3)
    with pytest.raises(ValueError):
        jaccard_distance([0, 0, 1], [0, 0, 1, 1])


box = st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0.01, 0.5), st.floats(0.01, 0.5)).map(
    lambda t: (t[0], t[1], t[0] + t[2], t[1] + t[3])
)


@settings(max_examples=200, deadline=None)
@given(box, box, st.floats(0.1, 10), st.floats(-5, 5), st.floats(-5, 5))
def test_metric_like_properties(a, b, scale, dx, dy):
    """Range [0, 1], symmetry, d(a, a) = 0, and scale/translation invariance (scale-free)."""
    dab = d(a, b)
    assert 0.0 <= dab <= 1.0
    assert dab == pytest.approx(d(b, a), abs=1e-12)
    assert d(a, a) == 0.0

    def move(x):
        return (x[0] * scale + dx, x[1] * scale + dy, x[2] * scale + dx, x[3] * scale + dy)

    assert d(move(a), move(b)) == pytest.approx(dab, abs=1e-9)


def test_neg_log_likelihood_hand_values():
    """decisions.md#distance-likelihood: "d": ½ ln(2πσ²) + d²/(2σ²); "d_squared": ½ ln(2πσ²) + d⁴/(2σ²)."""
    dd, s2 = 0.5, 0.1
    want_d = 0.5 * math.log(2 * math.pi * 0.1) + 0.25 / 0.2
    want_d2 = 0.5 * math.log(2 * math.pi * 0.1) + 0.0625 / 0.2
    assert float(neg_log_distance_likelihood(dd, s2, "d")) == pytest.approx(want_d, rel=1e-14)
    assert float(neg_log_distance_likelihood(dd, s2, "d_squared")) == pytest.approx(
        want_d2, rel=1e-14
    )
    assert neg_log_likelihood_nb(dd, s2, 0) == pytest.approx(want_d, rel=1e-14)
    assert neg_log_likelihood_nb(dd, s2, 1) == pytest.approx(want_d2, rel=1e-14)
    # "d" is the negative log of the zero-mean normal density of d with variance σ²
    pdf = math.exp(-(dd**2) / (2 * s2)) / math.sqrt(2 * math.pi * s2)
    assert float(neg_log_distance_likelihood(dd, s2)) == pytest.approx(-math.log(pdf), rel=1e-14)


def test_neg_log_likelihood_broadcasts_and_rejects_unknown_kind():
    out = neg_log_distance_likelihood(np.array([0.0, 1.0]), np.array([[0.1], [0.2]]), "d")
    assert out.shape == (2, 2)
    assert out[1, 1] == pytest.approx(0.5 * math.log(2 * math.pi * 0.2) + 1 / 0.4)
    with pytest.raises(ValueError, match="distance likelihood"):
        neg_log_distance_likelihood(0.1, 0.1, "gaussian")
