"""The consensus models against naive oracles (tests/oracles.py) on many small random cases:
the volunteer skills of both models, the paper's subject risk (§5.7) and one EM step of the
generative model (its partition against every partition of 2-4 boxes, the E step against an
enumeration of every joint state, the M-step counts and the volunteers' M step), each
called through the public engine (clumpscout.model.em.Engine) where it has one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from oracles import (
    generative_counts,
    generative_e_step,
    generative_partition_cost,
    generative_prior,
    generative_volunteer_params,
    paper_counts,
    paper_risk,
    paper_skills,
    subject_assignments,
)

from clumpscout.model import generative as gen
from clumpscout.model import skills as sk
from clumpscout.model.aggregator import GenerativeAggregator, PaperAggregator
from clumpscout.model.em import (
    ENGINES,
    Batch,
    Engine,
    GenerativeEngine,
    GenSkills,
    Held,
    PaperEngine,
)
from clumpscout.model.params import Params
from clumpscout.model.prepare import prepare

CASES = 12


def test_the_setting_names_one_engine_per_model():
    assert ENGINES == {"generative": GenerativeEngine, "paper": PaperEngine}
    assert all(issubclass(e, Engine) for e in ENGINES.values())
    assert GenerativeAggregator.engine is GenerativeEngine
    assert PaperAggregator.engine is PaperEngine


def random_batch(rng, n_subjects, max_boxes=4, side=20.0, image=100.0):
    """A small random batch: each subject seen by 2-4 of 5 volunteers, one or two objects,
    each viewer marking some of them (near the object) and sometimes a stray box; at most
    ``max_boxes`` boxes per subject. Returns the prepared input and its batch."""
    rows, cid = [], 0
    for s in range(n_subjects):
        objects = rng.uniform(side, image - side, size=(rng.integers(1, 3), 2))
        viewers = rng.choice(5, size=rng.integers(2, 5), replace=False)
        n_boxes = 0
        for v in viewers:
            cid += 1
            marks = [o + rng.normal(0, 2.0, 2) for o in objects if rng.random() < 0.7]
            if rng.random() < 0.3:
                marks.append(rng.uniform(side, image - side, 2))
            marks = marks[: max(max_boxes - n_boxes, 0)]
            n_boxes += len(marks)
            base = {"classification_id": cid, "subject_id": s, "volunteer": f"v{v}"}
            size = {"image_width": image, "image_height": image}
            if not marks:
                rows.append(
                    {**base, "x1": np.nan, "y1": np.nan, "x2": np.nan, "y2": np.nan, **size}
                )
            for x, y in marks:
                h = side / 2
                rows.append({**base, "x1": x - h, "y1": y - h, "x2": x + h, "y2": y + h, **size})
    prep = prepare(pd.DataFrame(rows))
    return prep, Batch.build(prep, np.arange(len(prep.subject_ids)))


# ------------------------------------------------------------------ volunteer skills


@pytest.mark.parametrize("seed", range(CASES))
def test_paper_skills_match_the_naive_oracle(seed):
    """eq. num_fp, num_tp, num_fn counted subject by subject, and eq. prob_fp, prob_fn
    (scipy's Beta means) and volunteer_variance (the numerical mode of the scaled-inverse-χ²
    posterior), against skills.batch_counts and skills.volunteer_skills on a random
    clustering (at most one box of a classification per cluster) plus earlier evidence."""
    rng = np.random.default_rng(seed)
    n_vol, n_sub = 4, 3
    cls_subject, cls_vol = [], []
    for i in range(n_sub):
        for j in rng.choice(n_vol, size=rng.integers(1, n_vol + 1), replace=False):
            cls_subject.append(i)
            cls_vol.append(int(j))
    n_clusters = rng.integers(0, 3, size=n_sub)
    box_cls, box_cluster = [], []
    first = np.concatenate([[0], np.cumsum(n_clusters)])
    for c, i in enumerate(cls_subject):
        for cl in range(n_clusters[i]):
            if rng.random() < 0.6:
                box_cls.append(c)
                box_cluster.append(int(first[i] + cl))
        for _ in range(rng.integers(0, 3)):
            box_cls.append(c)
            box_cluster.append(-1)
    box_cls = np.array(box_cls, np.int64)
    cls_subject, cls_vol = np.array(cls_subject), np.array(cls_vol)
    # the clusters that got a box, numbered 0.. in subject order
    used, box_cluster = np.unique(box_cluster, return_inverse=True)
    box_cluster = np.where(used[box_cluster] >= 0, box_cluster - (used[0] < 0), -1)
    kept = used[used >= 0]
    n_clusters = np.bincount(np.searchsorted(first, kept, side="right") - 1, minlength=n_sub)
    box_vol = cls_vol[box_cls]
    box_d = np.where(box_cluster >= 0, rng.uniform(0, 0.6, len(box_cls)), np.nan)
    p = Params(model="paper", n_beta_fp=float(rng.choice([0.0, 5.0, 500.0])))
    fast, _ = sk.batch_counts(
        box_vol, box_cls, box_cluster, box_d, cls_vol, cls_subject, n_clusters, n_vol
    )
    naive = paper_counts(
        cls_subject[box_cls], box_cls, box_vol, box_cluster, box_d, cls_subject, cls_vol, n_vol
    )
    for k in ("n_boxes", "n_fp", "n_tp", "n_fn", "sum_d2"):
        np.testing.assert_allclose(getattr(fast, k), naive[k], err_msg=k)
    prev = sk.SkillCounts(*(rng.integers(0, 4, n_vol).astype(float) for _ in range(5)))
    prev.n_fp = np.minimum(prev.n_fp, prev.n_boxes)
    prev.sum_d2 = prev.n_tp * rng.uniform(0, 0.2, n_vol)
    total = {k: naive[k] + getattr(prev, k) for k in naive}
    skills = sk.volunteer_skills(fast + prev, p)
    assert_same_skills((skills.p_fp, skills.p_fn, skills.sigma2), paper_skills(total, p))


def assert_same_skills(fast, naive):
    """Two posterior means (closed forms on both sides) and a posterior mode (found
    numerically by the oracle)."""
    np.testing.assert_allclose(fast[0], naive[0], rtol=1e-9)
    np.testing.assert_allclose(fast[1], naive[1], rtol=1e-9)
    np.testing.assert_allclose(fast[2], naive[2], rtol=1e-6)


@pytest.mark.parametrize("seed", range(CASES))
def test_generative_volunteer_m_step_matches_the_naive_oracle(seed):
    """The posterior means of p_fn (Beta) and lam (Gamma) and the mode of σ² (scaled
    inverse χ², fractional weights) from scipy's distributions and a numerical maximum,
    against generative.volunteer_params on random expected counts and populations."""
    rng = np.random.default_rng(100 + seed)
    n = 6
    counts = gen.SoftCounts(
        n_cls=rng.integers(1, 30, n).astype(float),
        n_boxes=np.zeros(n),
        n_fp=rng.uniform(0, 5, n),
        n_tp=rng.uniform(0, 20, n),
        n_fn=rng.uniform(0, 10, n),
        sum_d2=np.zeros(n),
        n_d2=rng.uniform(0, 15, n) * (rng.random(n) < 0.8),
    )
    counts.sum_d2 = counts.n_d2 * rng.uniform(0.001, 0.1, n)
    pop = random_population(rng)
    fast = gen.volunteer_params(counts, pop)
    assert_same_skills((fast.p_fn, fast.lam, fast.sigma2), generative_volunteer_params(counts, pop))


# ------------------------------------------------------------------ subject risk (§5.7)


@pytest.mark.parametrize("seed", range(CASES))
def test_paper_subject_risk_matches_the_naive_oracle(seed):
    """p_fp (eq. cluster_false_pos_prob, cluster_true_pos_prob), the clump difficulty, p_σ
    through the combined variances, N_fp, N_σ and R (eq. risk_expression) clump by clump,
    against PaperEngine.assess on a random batch with random skills."""
    rng = np.random.default_rng(200 + seed)
    prep, b = random_batch(rng, n_subjects=3, max_boxes=8)
    p = Params(model="paper", delta=float(rng.uniform(0.2, 0.6)), alpha_sigma=1.5)
    n_vol = len(prep.volunteer_names)
    skills = sk.Skills(
        p_fp=rng.uniform(0.02, 0.5, n_vol),
        p_fn=rng.uniform(0.02, 0.5, n_vol),
        sigma2=rng.uniform(0.005, 0.1, n_vol),
    )
    state, rk = PaperEngine(prep, p, seed=0).assess(b, skills)
    assert state.skills is skills and state.ll is None  # nothing was learned
    naive = paper_risk(state, b, skills, p, rk["n_fn"])
    np.testing.assert_allclose(state.difficulty, naive["difficulty"], rtol=1e-6)
    for k in ("p_fp", "p_sigma", "n_fp", "n_sigma", "risk"):
        np.testing.assert_allclose(rk[k], naive[k], rtol=1e-6, atol=1e-12, err_msg=k)


# ------------------------------------------------------- one EM step, generative model


def random_population(rng, weak=True):
    return gen.Population(
        m_fn=rng.uniform(0.05, 0.6),
        k_fn=rng.uniform(1, 100),
        m_lam=rng.uniform(0.01, 1.0),
        k_lam=rng.uniform(1, 100),
        m_s2=rng.uniform(0.005, 0.1),
        nu_s2=rng.uniform(2, 20),
        rho=rng.uniform(0.3, 3.0),
        rho_w=rng.uniform(0.1, 1.0) if weak else 0.0,
        q_w=rng.uniform(0.1, 0.6),
    )


def random_skills(rng, prep, weak=True):
    n_vol = len(prep.volunteer_names)
    vp = gen.VolunteerParams(
        p_fn=rng.uniform(0.05, 0.6, n_vol),
        lam=rng.uniform(0.05, 1.0, n_vol),
        sigma2=rng.uniform(0.003, 0.08, n_vol),
    )
    return GenSkills(vp, random_population(rng, weak))


@pytest.mark.parametrize("seed", range(CASES))
def test_generative_partition_is_the_best_of_every_partition(seed):
    """For subjects of 2-4 boxes, the partition step (greedy, then merges) reaches the
    lowest cost of the model's partition objective over every assignment of the boxes to
    the dummy and to clusters of at least two boxes of different classifications, each with
    any of its boxes as facility (no weak class, so one pass)."""
    rng = np.random.default_rng(300 + seed)
    prep, b = random_batch(rng, n_subjects=2, max_boxes=4)
    p = Params(weak_objects=False)
    skills = random_skills(rng, prep, weak=False)
    fac = GenerativeEngine(prep, p, seed=0).partition(b, skills)
    vp, pop = skills.vp, skills.pop
    for i in range(len(b.subjects)):  # subjects are independent
        rows = np.flatnonzero(b.box_subject == i)
        cost = generative_partition_cost(b, {k: fac[k] for k in rows}, vp, pop, p.d_max)
        options = subject_assignments(b, i)
        best = min(generative_partition_cost(b, f, vp, pop, p.d_max) for f in options)
        assert cost == pytest.approx(best, rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("seed", range(CASES))
def test_held_subjects_keep_their_partition_and_the_rest_match_the_whole_batch(seed):
    """Engine.partition_holding: a held subject keeps the facility_of it is given (here: a
    partition the kernel would not make, every box on the dummy); the others get what the
    partition of the whole batch gives them (subjects are independent)."""
    rng = np.random.default_rng(500 + seed)
    prep, b = random_batch(rng, n_subjects=6, max_boxes=4)
    skills = random_skills(rng, prep, weak=bool(seed % 2))
    engine = GenerativeEngine(prep, Params(), seed=0)
    whole = engine.partition(b, skills)
    held = rng.random(len(b.subjects)) < 0.5
    got = engine.partition_holding(b, skills, Held.build(prep, b, held, np.full(len(whole), -1)))
    on_held = held[b.box_subject]
    np.testing.assert_array_equal(got[on_held], -1)
    np.testing.assert_array_equal(got[~on_held], whole[~on_held])
    assert engine.partition_holding(b, skills, None).tolist() == whole.tolist()


@pytest.mark.parametrize("seed", range(CASES))
def test_generative_e_and_m_step_match_the_naive_oracle(seed):
    """One EM step of the generative model on the engine's partition with fixed skills:
    the E step (GenerativeEngine.assess: p_fp, p_weak per label, r per lone box, the
    undetected objects, N_fp, N_fn) and the data log-likelihood against an enumeration of
    every joint state of each subject's candidates; the prior against scipy's densities;
    the M-step counts (GenerativeEngine.counts_for) counted classification by
    classification; the volunteers' M step from those counts."""
    rng = np.random.default_rng(400 + seed)
    prep, b = random_batch(rng, n_subjects=3, max_boxes=4)
    p = Params()
    skills = random_skills(rng, prep, weak=bool(seed % 3))
    engine = GenerativeEngine(prep, p, seed=0)
    state, rk = engine.assess(b, skills)
    post, vp, pop = state.posterior, skills.vp, skills.pop
    e = generative_e_step(b, state.box_cluster, state.box_d, state.labels, vp, pop, p.d_max)
    for k in ("p_fp", "r_box", "undetected", "undetected_weak", "n_fp", "n_fn"):
        np.testing.assert_allclose(getattr(post, k), e[k], rtol=2e-3, atol=1e-9, err_msg=k)
    if pop.rho_w > 0:
        np.testing.assert_allclose(post.p_weak, e["p_weak"], rtol=2e-3, atol=1e-9)
    np.testing.assert_allclose(rk["p_fp"], post.p_fp)
    ll = gen.log_likelihood(
        post=post,
        box_vol=b.box_vol,
        box_cluster=state.box_cluster,
        log_u=np.zeros(len(b.box_vol)),
        cls_vol=b.cls_vol,
        vp=vp,
        pop=pop,
        batch_volunteers=b.volunteers,
    )
    assert ll["data"] == pytest.approx(e["log_lik"], rel=1e-4, abs=1e-3)
    assert ll["prior"] == pytest.approx(generative_prior(vp, pop, b.volunteers), rel=1e-9)
    n_vol = len(prep.volunteer_names)
    counts = engine.counts_for(b, state, np.ones(len(b.cls_vol)))
    naive = generative_counts(b, state.box_cluster, state.box_d, e, n_vol)
    for k, v in naive.items():
        np.testing.assert_allclose(getattr(counts, k), v, rtol=2e-3, atol=1e-9, err_msg=k)
    fitted = gen.volunteer_params(counts, pop)
    naive_m = generative_volunteer_params(counts, pop)
    assert_same_skills((fitted.p_fn, fitted.lam, fitted.sigma2), naive_m)
