"""k independent copies of a project against one copy (docs/decisions.md#scale-invariance).

A copy has its own subjects, classifications and volunteers, so it shares no evidence with
the others: whatever the model, each copy's labels must be those of the project alone when
the copies are processed alike. The benchmark at paper size is benchmarks/scale_invariance.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchmarks import scale_invariance
from clumpscout.model.aggregator import aggregate
from clumpscout.model.params import Params

replicate, copy_of = scale_invariance.replicate, scale_invariance.copy_of

N_VOL = 10  # classifications per subject, so a batch target of m * N_VOL holds m subjects


def project(seed=0, n_subjects=100, n_pool=20, detect=0.6, spurious=1.0):
    """1-3 clumps per subject; each of N_VOL volunteers (out of a pool of ``n_pool``, so that
    skills carry from batch to batch) marks a clump with probability ``detect`` (1.5 px
    scatter) and adds Poisson(``spurious``) random boxes; one classification a minute."""
    rng = np.random.default_rng(seed)
    rows = []
    cid = 0
    t0 = pd.Timestamp("2020-01-01", tz="UTC")
    for s in range(n_subjects):
        objs = rng.uniform(40, 360, (rng.integers(1, 4), 2))
        for v in rng.choice(n_pool, N_VOL, replace=False):
            cid += 1
            t = t0 + pd.Timedelta(minutes=cid)
            pts = [o + rng.normal(0, 1.5, 2) for o in objs if rng.random() < detect]
            pts += list(rng.uniform(0, 400, (rng.poisson(spurious), 2)))
            rows += [(cid, s + 1, f"v{v}", x, y, t) for x, y in pts] or [
                (cid, s + 1, f"v{v}", np.nan, np.nan, t)
            ]
    df = pd.DataFrame(
        rows, columns=["classification_id", "subject_id", "volunteer", "x", "y", "created_at"]
    )
    df["x1"], df["x2"] = df.x - 10.0, df.x + 10.0
    df["y1"], df["y2"] = df.y - 10.0, df.y + 10.0
    df["image_width"] = 400.0
    df["image_height"] = 400.0
    return df


@pytest.fixture(scope="module")
def one():
    return project()


def _copies_match(one_copy, k_copies, boxes, k):
    """Every copy's labels equal the single project's (same subjects, same boxes)."""
    labels = k_copies.labels
    assert len(labels) == k * len(one_copy.labels)
    step = int(boxes["subject_id"].max()) + 1
    cols = ["subject_id", "clump", "x1", "y1", "x2", "y2", "n_marks"]
    want = one_copy.labels[cols].reset_index(drop=True)
    which = copy_of(labels["subject_id"], boxes)
    for c in range(k):
        got = labels.loc[which == c, cols].reset_index(drop=True)
        got["subject_id"] -= c * step
        pd.testing.assert_frame_equal(got, want, check_exact=False, rtol=1e-9)


def test_replicate_makes_independent_copies(one):
    three = replicate(one, 3, "appended")
    assert len(three) == 3 * len(one)
    for col in ("subject_id", "classification_id", "volunteer"):
        sets = [set(three[col].iloc[c * len(one) : (c + 1) * len(one)]) for c in range(3)]
        assert not (sets[0] & sets[1]) and not (sets[1] & sets[2]) and not (sets[0] & sets[2])
    span = one["created_at"].max() - one["created_at"].min()
    assert three["created_at"].iloc[len(one)] - one["created_at"].iloc[0] == span + pd.Timedelta(
        seconds=1
    )
    inter = replicate(one, 3, "interleaved")
    assert inter["created_at"].tolist() == one["created_at"].tolist() * 3
    assert copy_of(inter["subject_id"], one).tolist() == np.repeat([0, 1, 2], len(one)).tolist()


@pytest.mark.parametrize("model", ["generative", "paper"])
def test_copies_in_one_batch_give_k_times_the_labels(one, model):
    """One working batch (the whole input): every copy's labels are the project's."""
    p = Params(model=model, min_batch_classifications=0)
    single = aggregate(one, p, seed=0)
    assert len(single.labels) > 100
    _copies_match(single, aggregate(replicate(one, 3), p, seed=0), one, 3)


def _batched(df, model, per_batch):
    return aggregate(df, Params(model=model, min_batch_classifications=per_batch * N_VOL), seed=0)


def test_paper_model_copies_with_the_batch_scaled_give_k_times_the_labels(one):
    """Interleaved copies in batches k times larger: every batch holds the k copies of the
    project's batch, and every copy's labels are the project's, cycle after cycle."""
    single = _batched(one, "paper", 3)
    assert len(single.report["cycles"]) > 30  # the evidence passes through many cycles
    _copies_match(single, _batched(replicate(one, 3), "paper", 9), one, 3)


def test_paper_model_copies_at_a_fixed_batch_are_smaller_batches_per_copy(one):
    """At a fixed batch target, k interleaved copies give, copy by copy, what the project
    alone gives at 1/k of the target (docs/decisions.md#scale-invariance): the copies do not
    interact; what k changes is how many of a volunteer's classifications a batch holds."""
    _copies_match(_batched(one, "paper", 1), _batched(replicate(one, 3), "paper", 3), one, 3)


def test_generative_model_copies_at_a_fixed_batch_give_k_times_the_labels(one):
    """The generative model in small batches at a fixed target (each batch holds a third of
    what it held for the project alone): within 2 % of k times the labels. Not exact: its
    population hyper-priors (one pseudo-subject in the object rate, the Beta(2, 2) prior of
    q_w, ``eb_weight``) weigh as much in a batch of the copies as in the project's batch."""
    single = _batched(one, "generative", 3)
    three = _batched(replicate(one, 3), "generative", 3)
    assert abs(len(three.labels) / (3 * len(single.labels)) - 1) < 0.02
