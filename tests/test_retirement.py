"""Working batch, pre-retirement, retirement, stale subjects and the skill cache (§5.1, §5.8)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from clumpscout.model import retirement as rt
from clumpscout.model.aggregator import Aggregator
from clumpscout.model.params import Params

RP = SimpleNamespace(tau=5.0, n_fp_max=1.0, n_fn_max=0.3, n_sigma_max=3.0)


def test_pre_batch_status():
    """decisions.md#retirement: ≥5 volunteers and no click -> retired empty; ≥3 and ≥1 click -> batch."""
    n_vol = np.array([5, 4, 3, 2, 6, 3])
    n_box = np.array([0, 0, 1, 5, 3, 0])
    empty, eligible = rt.pre_batch_status(n_vol, n_box, 5, 3)
    np.testing.assert_array_equal(empty, [True, False, False, False, False, False])
    np.testing.assert_array_equal(eligible, [False, False, True, False, True, False])


def test_pre_batch_status_final_classifications():
    """Complete input: a subject whose ≥3 volunteers all marked nothing retires empty at
    once (4 and 3 volunteers here), one seen by 2 still waits; eligibility is unchanged."""
    n_vol = np.array([5, 4, 3, 2, 6, 3])
    n_box = np.array([0, 0, 1, 0, 3, 0])
    empty, eligible = rt.pre_batch_status(n_vol, n_box, 5, 3, final=True)
    np.testing.assert_array_equal(empty, [True, True, False, False, False, True])
    np.testing.assert_array_equal(eligible, [False, False, True, False, True, False])


def test_retire_mask_needs_every_condition():
    n_fp = np.array([0.1, 1.0, 0.1, 0.1, 0.1, 0.1])
    n_fn = np.array([0.1, 0.1, 0.3, 0.1, 0.1, 0.29])
    n_sg = np.array([0.1, 0.1, 0.1, 3.0, 0.1, 2.99])
    risk = np.array([1.0, 1.0, 1.0, 1.0, 5.0, 4.99])
    np.testing.assert_array_equal(
        rt.retire_mask(n_fp, n_fn, n_sg, risk, RP), [True, False, False, False, False, True]
    )


def test_fill_batch_blocks_and_leftovers():
    n_cls = np.array([10, 10, 10, 10, 10, 10])
    queue = np.array([5, 3, 1, 0])
    # no leftovers, target 25: add subjects until ≥ 25 classifications (3 subjects)
    b, pos = rt.fill_batch(np.zeros(0, np.int64), queue, 0, n_cls, 25)
    np.testing.assert_array_equal(b, [1, 3, 5])
    assert pos == 3
    # leftovers (2 subjects = 20) + 1 new reaches 25
    b, pos = rt.fill_batch(np.array([2, 4]), queue, 3, n_cls, 25)
    np.testing.assert_array_equal(b, [0, 2, 4])
    assert pos == 4
    # leftovers alone exceed the target: no new subject
    b, pos = rt.fill_batch(np.array([2, 4, 5]), queue, 1, n_cls, 25)
    np.testing.assert_array_equal(b, [2, 4, 5])
    assert pos == 1
    # 0 = everything in one batch
    b, pos = rt.fill_batch(np.array([2]), queue, 0, n_cls, 0)
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 5])
    assert pos == 4


def test_fill_batch_long_queue():
    # a batch whose prefix spans several of the search's windows (1024, 2048, ... subjects)
    n_cls = np.full(10_000, 2)
    queue = np.arange(10_000)[::-1].copy()
    # 2 classifications each: 2950 subjects (queue[100:3050]) reach 5900
    b, pos = rt.fill_batch(np.zeros(0, np.int64), queue, 100, n_cls, 5900)
    assert pos == 100 + 2950
    np.testing.assert_array_equal(b, np.sort(queue[100:3050]))
    # the 1000 subjects left hold 2000 < 2001 classifications: all of them join
    b, pos = rt.fill_batch(np.zeros(0, np.int64), queue, 9000, n_cls, 2001)
    assert pos == 10_000


def test_skill_cache_commit():
    c = rt.SkillCache(2)
    from clumpscout.model.skills import SkillCounts

    s = SkillCounts.zeros(2)
    s.n_boxes[:] = [3, 1]
    c.commit(s, np.array([1, 0]))
    c.commit(s, np.array([1, 1]))
    np.testing.assert_array_equal(c.counts.n_boxes, [6, 2])
    np.testing.assert_array_equal(c.n_subjects, [2, 1])
    assert c.version == 2


# ------------------------------------------------------------ through the engine


def _subject_rows(sid, cid0, vols, clumps, rng, side=20.0, noise=0):
    rows = []
    for k, v in enumerate(vols):
        cid = cid0 + k
        pts = [np.asarray(c) + rng.normal(0, 1.5, 2) for c in clumps]
        pts += [rng.uniform(20, 380, 2) for _ in range(noise)]
        if not pts:
            rows.append((cid, sid, v, np.nan, np.nan))
        rows += [(cid, sid, v, x, y) for x, y in pts]
    return rows


def _frame(rows, side=20.0):
    df = pd.DataFrame(rows, columns=["classification_id", "subject_id", "volunteer", "x", "y"])
    df["x1"], df["x2"] = df.x - side / 2, df.x + side / 2
    df["y1"], df["y2"] = df.y - side / 2, df.y + side / 2
    df["image_width"] = 400.0
    df["image_height"] = 400.0
    df["unusual"] = False
    return df


@pytest.fixture(scope="module")
def mixed():
    """Subject 1: 5 empty classifications (pre-retired); 2: 4 empty ones (waiting);
    3: 2 volunteers with clicks (waiting); 4, 5, 6: eight volunteers, two clumps each."""
    rng = np.random.default_rng(3)
    vols = [f"v{i}" for i in range(8)]
    rows = _subject_rows(1, 100, vols[:5], [], rng)
    rows += _subject_rows(2, 200, vols[:4], [], rng)
    rows += _subject_rows(3, 300, vols[:2], [(100, 100)], rng)
    for s in (4, 5, 6):
        rows += _subject_rows(s, 100 * s + 1000, vols, [(100, 120), (260, 300)], rng)
    return _frame(rows)


def test_statuses_through_the_engine(mixed):
    final = Aggregator(Params(), seed=0).fit(mixed).subjects_.set_index("subject_id")["status"]
    assert final[1] == final[2] == "retired_empty" and final[3] == "unretired"
    r = Aggregator(Params(final_classifications=False), seed=0).fit(mixed)  # the live rule
    st = r.subjects_.set_index("subject_id")["status"]
    assert st[1] == "retired_empty"
    assert st[2] == "unretired" and st[3] == "unretired"
    assert set(st[[4, 5, 6]]) <= {"retired", "stale"}
    assert r.subjects_.set_index("subject_id").loc[[1, 2, 3], "cycles"].tolist() == [0, 0, 0]
    # the waiting subject's boxes are not aggregated; empty rows are "empty"
    a = r.assignments_
    assert (a.loc[a.subject_id == 3, "assignment"] == "not_aggregated").all()
    assert (a.loc[a.subject_id.isin([1, 2]), "assignment"] == "empty").all()
    assert a["cluster"][a.subject_id.isin([1, 2, 3])].isna().all()


def test_stale_after_max_cycles_and_no_skill_update(mixed):
    """τ = 0: nothing can retire; after max_cycles every batch subject is stale and, by
    default, their annotations do not update any skill."""
    p = Params(tau=0.0, max_cycles=3)
    r = Aggregator(p, seed=0).fit(mixed)
    s = r.subjects_.set_index("subject_id")
    assert (s.loc[[4, 5, 6], "status"] == "stale").all()
    assert (s.loc[[4, 5, 6], "cycles"] == 3).all()
    v = r.volunteers_
    assert (v["n_boxes"] == 0).all() and (v["n_fn"] == 0).all()
    np.testing.assert_allclose(v["p_fp"], 0.1)
    np.testing.assert_allclose(v["p_fn"], 0.1)
    # the labels of stale subjects are still reported
    assert set(r.labels_["subject_id"]) == {4, 5, 6}


def test_stale_skills_counted_once_when_enabled(mixed):
    """stale_updates_skills: the stale subjects' boxes count once, not once per cycle."""
    p = Params(tau=0.0, max_cycles=4, stale_updates_skills=True)
    r = Aggregator(p, seed=0).fit(mixed)
    in_batch = mixed[mixed.subject_id.isin([4, 5, 6])]
    per_vol = in_batch.groupby("volunteer").size()
    v = r.volunteers_.set_index("volunteer")
    assert (v.loc[per_vol.index, "n_boxes"] == per_vol).all()
    assert (v.loc[per_vol.index, "n_subjects_counted"] == 3).all()


def test_retired_subjects_update_skills_once_across_batches(mixed):
    """Several small batches: every retired box is counted exactly once in the skills."""
    for min_batch in (0, 1, 9):
        r = Aggregator(Params(min_batch_classifications=min_batch), seed=0).fit(mixed)
        retired = r.subjects_.loc[r.subjects_.status == "retired", "subject_id"]
        n_boxes = int(mixed[mixed.subject_id.isin(retired) & mixed.x.notna()].shape[0])
        assert int(r.volunteers_["n_boxes"].sum()) == n_boxes
        assert len(retired) == 3  # two clear clumps marked by all 8 retire


def test_unretired_subjects_return_with_reinitialised_state():
    """A subject that does not retire in cycle 1 is re-run in cycle 2 with skills updated
    from the subjects that did retire, and no annotation is counted twice."""
    rng = np.random.default_rng(5)
    vols = [f"v{i}" for i in range(10)]
    rows = []
    for s in range(6):
        rows += _subject_rows(s, 100 * s, vols, [(100, 100), (300, 280)], rng)
    # a messy subject: only 3 of 10 mark the clump, everyone adds noise
    rows += _subject_rows(99, 9900, vols[:3], [(200, 200)], rng, noise=1)
    rows += _subject_rows(99, 9903, vols[3:], [], rng, noise=1)
    df = _frame(rows)
    r = Aggregator(Params(max_cycles=3), seed=0).fit(df)
    s = r.subjects_.set_index("subject_id")
    assert (s.loc[range(6), "status"] == "retired").all()
    assert s.loc[99, "status"] in ("stale", "retired")
    if s.loc[99, "status"] == "stale":
        assert s.loc[99, "cycles"] == 3
    n_retired_boxes = int(
        df[df.subject_id.isin(s.index[s.status == "retired"]) & df.x.notna()].shape[0]
    )
    assert int(r.volunteers_["n_boxes"].sum()) == n_retired_boxes


def _few_and_many(seed):
    """40 subjects with two clumps each: even ones seen by 10 careful volunteers (they retire
    at once), odd ones by 3 who mark each clump half the time (they stay for cycles)."""
    rng = np.random.default_rng(seed)
    rows, cid = [], 0
    for s in range(40):
        few = s % 2 == 1
        vols = rng.choice(12, size=3 if few else 10, replace=False)
        clumps = rng.uniform(40, 360, size=(2, 2))
        for v in vols:
            cid += 1
            pts = [
                c + rng.normal(0, 1.5, 2) for c in clumps if rng.random() < (0.5 if few else 0.9)
            ]
            if not pts:
                rows.append((cid, s, f"v{v}", np.nan, np.nan))
            rows += [(cid, s, f"v{v}", x, y) for x, y in pts]
    return _frame(rows)


@pytest.mark.parametrize("seed", [1, 2])
def test_held_partitions_change_nothing_when_they_would_come_back(seed):
    """hold_unchanged (decisions.md#hold-unchanged): leftovers whose partition came back
    unchanged are held in later cycles, their boxes still in the parameter steps. Here every
    held partition is the one re-clustering gives again, so every output equals the run
    that re-clusters every subject in every cycle (the reference)."""
    df = _few_and_many(seed)
    runs = {
        hold: Aggregator(
            Params(max_cycles=6, min_batch_classifications=60, hold_unchanged=hold), seed=0
        ).fit(df)
        for hold in (True, False)
    }
    held = [c["held"] for c in runs[True].report_["cycles"]]
    assert held[:2] == [0, 0] and sum(held) > 0  # never before a subject's third cycle
    assert all(c["held"] == 0 for c in runs[False].report_["cycles"])
    for name in ("labels_", "subjects_", "volunteers_", "assignments_"):
        pd.testing.assert_frame_equal(getattr(runs[True], name), getattr(runs[False], name))


def test_the_paper_model_never_holds():
    """The paper's model re-clusters every leftover in every cycle, as published."""
    r = Aggregator(Params(model="paper", max_cycles=6, min_batch_classifications=60), seed=0)
    cycles = r.fit(_few_and_many(1)).report_["cycles"]
    assert sum(c["left_over"] for c in cycles) >= 4  # leftovers come back for cycles
    assert all(c["held"] == 0 for c in cycles)
