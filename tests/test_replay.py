"""Early retirement replayed in arrival order (clumpscout.evaluation.replay) and the
one-subject decision (clumpscout.model.live)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from clumpscout.errors import InputError
from clumpscout.evaluation import replay as rp
from clumpscout.model.calibration import LiveMap
from clumpscout.model.live import (
    LiveSkills,
    Policy,
    decide,
    horizon_posterior,
    label_flips,
    new_kept_labels,
    open_objects,
    retire,
)
from clumpscout.model.params import Params

T0 = pd.Timestamp("2020-01-01", tz="UTC")
LABEL_COLS = ["subject_id", "x1", "y1", "x2", "y2", "x", "y", "p_fp"]


def toy(n_subjects=8, n_cls=8, seed=0, empty_rate=0.3, block=None):
    """Subjects of 100 x 100 px with two objects each, classified in round-robin order
    (classification c of subject s arrives at minute c * n_subjects + s; with ``block``,
    round-robin within blocks of that many subjects, one block after the other); each volunteer
    marks each object with probability 0.7 (box side 10, scatter 1 px) or submits nothing
    with ``empty_rate``, plus an occasional false box."""
    rng = np.random.default_rng(seed)
    rows = []
    cid = 0
    for c in range(n_cls):
        for s in range(n_subjects):
            cid += 1
            vol = f"v{(s + 3 * c) % 11}"
            minute = c * n_subjects + s
            if block:
                minute = (s // block) * n_cls * block + c * block + s % block
            t = T0 + pd.Timedelta(minutes=minute)
            marks = []
            if rng.random() > empty_rate:
                for ox, oy in ((30.0, 30.0), (70.0, 60.0)):
                    if rng.random() < 0.7:
                        marks.append((ox + rng.normal(0, 1), oy + rng.normal(0, 1)))
                if rng.random() < 0.1:
                    marks.append(tuple(rng.uniform(10, 90, 2)))
            base = {"classification_id": cid, "subject_id": 100 + s, "volunteer": vol}
            base |= {"image_width": 100.0, "image_height": 100.0, "created_at": t}
            if not marks:
                rows.append(base | {"x1": np.nan, "y1": np.nan, "x2": np.nan, "y2": np.nan})
            for x, y in marks:
                rows.append(base | {"x1": x - 5, "y1": y - 5, "x2": x + 5, "y2": y + 5})
    return pd.DataFrame(rows)


def no_labels():
    return pd.DataFrame({c: pd.Series(dtype=float) for c in LABEL_COLS})


class _MarksMap:
    """A stand-in label map: a label counts when it holds at least ``k`` marks."""

    counted = (1.0, 1.0)

    def __init__(self, k):
        self.k = k

    def p_real(self, p_empty, p_weak, n_marks, n_viewers, frac_unusual=None):
        return (np.asarray(n_marks, dtype=float) >= self.k).astype(float)

    def kept_probability(self, *args):
        return self.p_real(*args)


def test_horizon_posterior_by_hand():
    # p_empty 0.2, p_weak 0.5; 1 mark of 2 viewers; 1 viewer to come; t = 0.8, a = 0.2.
    # Rate prior mean 0.5 x 0.8 + 0.5 x 0.2 = 0.5, strength 2: Beta(1 + 1, 1 + 1), so the
    # next viewer marks it with 1/2. P(K=0) = 0.2 + 0.8 / 2 = 0.6, P(K=1) = 0.4.
    pk, pe, pw = horizon_posterior([0.2], [0.5], [1], [2], [1], [0.8], [0.2], 1)
    np.testing.assert_allclose(pk[0], [0.6, 0.4])
    np.testing.assert_allclose(pe[0], [0.2 / 0.6, 0.0])
    # weak : strong odds 1 x (1 - 0.2) / (1 - 0.8) = 4 without a mark, 1 x 0.2 / 0.8 with one
    np.testing.assert_allclose(pw[0], [0.8, 0.2])


def test_betabinom_pmf_is_scipys_to_the_bit():
    """The look-ahead's beta-binomial (live.betabinom_pmf) against scipy's own, bit for bit:
    random shapes across the support, off it (k > n, k < 0, k not whole), a zero n, and
    invalid parameters (n not whole or negative, a or b not positive, k NaN)."""
    from scipy import stats

    from clumpscout.model.live import betabinom_pmf

    rng = np.random.default_rng(5)
    k = np.arange(-1.0, 23.0)[None, :]
    n = rng.integers(0, 21, (200, 1)).astype(float)
    a, b = rng.uniform(1e-3, 8.0, (2, 200, 1))
    assert np.array_equal(betabinom_pmf(k, n, a, b), stats.betabinom.pmf(k, n, a, b))
    odd = (
        np.array([0.0, 2.5, 3.0, 3.0, 3.0, 3.0, np.nan, 1.0]),
        np.array([0.0, 5.0, 2.5, -1.0, 4.0, 4.0, 4.0, 4.0]),
        np.array([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 2.0]),
        np.array([1.0, 1.0, 1.0, 1.0, 1.0, -1.0, 1.0, 1e-300]),
    )
    want = stats.betabinom.pmf(*odd)
    assert np.array_equal(betabinom_pmf(*odd), want, equal_nan=True)
    assert np.isnan(want[2:7]).all() and want[1] == 0.0  # the cases are what they say


def test_label_flips_by_hand():
    # the label above with the default map at w = 0.5: P(real) now = 0.8 (1 - 0.5 x 0.5)
    # = 0.6: kept. After no mark: (1 - 1/3)(1 - 0.5 x 0.8) = 0.4: dropped (P 0.6); after a
    # mark: 1 x (1 - 0.5 x 0.2) = 0.9: kept. So it changes sides with probability 0.6.
    lab = pd.DataFrame(
        {"p_empty": [0.2], "p_weak": [0.5], "n_marks": [1], "n": [2], "frac_unusual": [0.0]}
    )
    lab["p_fp"] = 0.4
    got = label_flips(lab, [1.0], [0.8], [0.2], LiveMap.default(0.5))
    assert got[0] == pytest.approx(0.6)
    assert label_flips(lab, [0.0], [0.8], [0.2], LiveMap.default(0.5))[0] == 0.0  # no future


def _betabinom(k, m, a, b):
    """The beta-binomial pmf from its formula: C(m, k) B(k + a, m - k + b) / B(a, b)."""

    def lbeta(x, y):
        return math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)

    return math.comb(m, k) * math.exp(lbeta(k + a, m - k + b) - lbeta(a, b))


def test_new_kept_labels_by_hand():
    # 5 classifications to come (n 3, horizon 8), t = 1/2, a = 0.2, rate prior strength 2:
    # an object's marking rate is Beta(2 rate + marks, 2 (1 - rate) + misses) given the
    # marks (0 or 1) of the 3 viewers so far. strong0: Beta(1, 4): P(K >= 2 of 5) = 5/18
    # (P(0) = B(1, 9) / B(1, 4) = 4/9, P(1) = 5 B(2, 8) / B(1, 4) = 5/18).
    assert sum(_betabinom(k, 5, 1.0, 4.0) for k in (2, 3, 4, 5)) == pytest.approx(5 / 18)
    st = pd.DataFrame(
        {"n": [3], "strong0": [0.4], "lone": [0.3], "weak0": [1.0], "weak1": [0.5]}
        | {"t_bar": [0.5], "a_weak": [0.2], "q_w": [0.4], "prior_weak": [0.0]}
    )

    def at_least(j, a, b):  # P(K >= j) of 5 viewers to come
        return sum(_betabinom(k, 5, a, b) for k in range(j, 6))

    # a map that keeps every label of >= 2 marks: strong0 needs 2 more marks, lone 1 more
    want = (
        0.4 * 5 / 18
        + 0.3 * at_least(1, 2.0, 3.0)  # lone: Beta(1 + 1, 1 + 2)
        + 1.0 * at_least(2, 0.4, 4.6)  # weak0: Beta(0.4, 1.6 + 3)
        + 0.5 * at_least(1, 1.4, 3.6)  # weak1: Beta(0.4 + 1, 1.6 + 2)
    )
    assert new_kept_labels(st, [5], _MarksMap(2))[0] == pytest.approx(want)
    # a map that wants 5 marks: strong0 needs all 5 viewers, lone 4 of them
    want5 = (
        0.4 * at_least(5, 1.0, 4.0)
        + 0.3 * at_least(4, 2.0, 3.0)
        + 1.0 * at_least(5, 0.4, 4.6)
        + 0.5 * at_least(4, 1.4, 3.6)
    )
    assert new_kept_labels(st, [5], _MarksMap(5))[0] == pytest.approx(want5)
    assert new_kept_labels(st, [0], _MarksMap(2))[0] == 0.0  # nothing more to come


def test_open_objects_adds_flips_and_new_labels():
    st = pd.DataFrame({"flips": [0.25, 0.0], "new_kept": [0.5, 0.0]})
    assert open_objects(st).tolist() == [0.75, 0.0]


def test_arrival_order_ranks_classifications_by_created_at():
    b = pd.DataFrame(
        {
            "classification_id": [5, 6, 7, 7],
            "subject_id": [1, 1, 2, 2],
            "created_at": pd.to_datetime(["2020-01-03", "2020-01-01", "2020-01-02", "2020-01-02"]),
        }
    )
    a = rp.arrival_table(b)
    assert a["classification_id"].tolist() == [6, 7, 5]
    assert a["n"].tolist() == [1, 1, 2]
    assert a["n_total"].tolist() == [2, 1, 2]


def test_missing_created_at_is_an_error_naming_file_and_row():
    b = toy(2, 2)
    b.loc[3, "created_at"] = pd.NaT
    with pytest.raises(InputError, match=r"boxes.parquet:row 3: created_at"):
        rp.arrival_table(b, path="boxes.parquet")
    with pytest.raises(InputError, match="created_at column"):
        rp.arrival_table(b.drop(columns="created_at"), path="boxes.parquet")


def test_fixed_n_effort_is_the_hand_count():
    # subjects with 5, 2 and 4 classifications; fixed n = 3 uses 3 + 2 + 3 = 8 of 11
    b = toy(3, 5)
    b = b[~((b["subject_id"] == 101) & (b["classification_id"] > 6))]  # 101 keeps c = 0, 1
    b = b[~((b["subject_id"] == 102) & (b["classification_id"] > 12))]  # 102 keeps c = 0..3
    settings = rp.Settings(fixed_n=(3,), risk_tau=(1.0,), generative_eps=(0.1,), caesar_k=(2,))
    r = rp.run_replay(b, Params(), settings)
    table, points = rp.evaluate(r, Params(), settings, no_labels())
    row = table.loc[table["policy"] == "fixed"].iloc[0]
    assert row["effort"] == pytest.approx(8 / 11)
    fixed = points.loc[points["policy"] == "fixed"].set_index("subject_id")
    assert fixed["n_used"].to_dict() == {100: 3, 101: 2, 102: 3}
    assert fixed["n_total"].to_dict() == {100: 5, 101: 2, 102: 4}
    assert table.loc[table["policy"] == "full", "effort"].item() == 1.0


def test_caesar_retires_after_k_empty_classifications_or_the_cap():
    st = pd.DataFrame({"n": [1, 2, 3, 4, 5], "n_empty": [1, 1, 2, 2, 2]})
    got = decide(Policy("caesar", 2, cap=5), st, Params())
    assert got.tolist() == [False, False, True, True, True]
    got = decide(Policy("caesar", 3, cap=5), st, Params())
    assert got.tolist() == [False, False, False, False, True]


def _labels_at(r, pts):
    """Replay labels of the retirement states ``pts`` (subject_id, state)."""
    lab = r.labels.loc[r.labels["state"].isin(pts["state"])]
    lab = lab.assign(subject_id=r.states["subject_id"].to_numpy()[lab["state"]])
    return lab.drop(columns="state").sort_values(["subject_id", "x1"]).reset_index(drop=True)


def test_no_peeking_later_classifications_do_not_change_earlier_retirements():
    b = toy(8, 8, seed=1)
    settings = rp.Settings(refit_every=10)
    params = Params()
    r1 = rp.run_replay(b, params, settings)
    cut = 30  # change every classification from the 31st on (shift boxes, empty some)
    late = r1.cls.loc[r1.cls["g"] >= cut, "classification_id"]
    b2 = b.copy()
    m = b2["classification_id"].isin(late).to_numpy()
    b2.loc[m, ["x1", "x2"]] += 25.0
    b2.loc[m & (b2["classification_id"] % 3 == 0).to_numpy(), ["x1", "y1", "x2", "y2"]] = np.nan
    r2 = rp.run_replay(b2, params, settings)
    g_of = r1.cls.set_index(["subject_id", "n"])["g"]
    checked = changed = 0
    for pol in settings.policies():
        p1 = rp.retirement_points(r1, pol, params)
        p2 = rp.retirement_points(r2, pol, params)
        g_ret = g_of.reindex(pd.MultiIndex.from_arrays([p1["subject_id"], p1["n_used"]]))
        early = (g_ret.to_numpy() < cut) & (p1["n_used"] < p1["n_total"]).to_numpy()
        assert (p1["n_used"][early] == p2["n_used"][early]).all(), pol.name
        l1 = _labels_at(r1, p1[early])
        l2 = _labels_at(r2, p2[early])
        pd.testing.assert_frame_equal(l1, l2)
        checked += int(early.sum())
        changed += int((p1["n_used"] != p2["n_used"]).sum())
    assert checked > 20
    # the change matters where it is allowed to: later states differ
    late_states = r1.states["epoch"] >= cut // 10
    assert not np.allclose(
        r1.states.loc[late_states, "n_fp"].to_numpy(), r2.states.loc[late_states, "n_fp"].to_numpy()
    )


def test_replay_and_the_one_subject_decision_agree():
    b = toy(6, 8, seed=2)
    settings = rp.Settings(refit_every=12)
    params = Params()
    r = rp.run_replay(b, params, settings)
    cls = r.cls.set_index(["subject_id", "n"])["classification_id"]
    pols = [Policy("generative", 0.3, horizon=20), Policy("risk", 0.5), Policy("caesar", 2, cap=20)]
    for i in range(0, len(r.states), 5):
        st = r.states.iloc[i]
        sid, n, e = int(st["subject_id"]), int(st["n"]), int(st["epoch"])
        ids = [cls[(sid, k)] for k in range(1, n + 1)]
        boxes = b.loc[b["classification_id"].isin(ids)]
        for pol in pols:
            d = retire(boxes, r.skills[e], pol, params)
            assert d.retire == bool(decide(pol, r.states.iloc[[i]], params)[0]), (sid, n, pol)
        assert d.numbers["n"] == n
        assert d.numbers["risk"] == pytest.approx(st["risk"], rel=1e-9, abs=1e-12)
        mine = r.labels.loc[r.labels["state"] == i].sort_values("x1")
        theirs = d.labels.sort_values("x1")
        np.testing.assert_allclose(theirs["p_fp"], mine["p_fp"], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(theirs["x1"], mine["x1"], rtol=1e-12)
    assert len(r.skills) == -(-len(r.cls) // 12) and len(r.refits) == len(r.skills) - 1


def test_unknown_volunteers_get_the_population_prior():
    sk = LiveSkills.prior(Params())
    vp = sk.lookup(np.array(["nobody"], dtype=object))
    # no evidence: the posterior mean is the population mean m_fn = p0_fn
    assert vp.p_fn[0] == pytest.approx(Params().p0_fn)


def test_full_outputs_and_best_setting(tmp_path):
    b = toy(6, 8, seed=3)
    settings = rp.Settings(refit_every=20, fixed_n=(3, 8), caesar_k=(2,), risk_tau=(0.5,))
    table, points, report = rp.replay(b, Params(), settings)
    rp.write_outputs(tmp_path, table, points, report)
    t = pd.read_csv(tmp_path / "replay.csv")
    assert list(t.columns) == rp.COLUMNS
    assert t["policy"].iloc[0] == "full" and t["lost"].iloc[0] == 0.0
    # fixed n = 8 uses every classification: nothing retired early
    f8 = t.loc[(t["policy"] == "fixed") & (t["setting"] == 8)].iloc[0]
    assert f8["effort"] == 1.0 and f8["retired_early"] == 0.0
    assert (tmp_path / "replay.png").stat().st_size > 0
    assert len(pd.read_parquet(tmp_path / "retirement.parquet")) == 6 * (len(t) - 1)
    best = report["best"]
    # no truth: purity against the full data, at most 0.01 below the full data's (1)
    ok = t.loc[(t["policy"] != "full") & (t["lost"] <= 0.01) & (t["purity_full"] >= 0.99)]
    if len(ok):
        assert best["effort"] == pytest.approx(ok["effort"].min())
    else:
        assert best is None


def test_score_counts_lost_objects_purity_and_count_error_by_hand():
    def labels(rows):
        df = pd.DataFrame(rows, columns=["subject_id", "x", "y", "p_fp", "p_weak"])
        return df.assign(x1=df["x"] - 5, x2=df["x"] + 5, y1=df["y"] - 5, y2=df["y"] + 5)

    # full data: 3 kept labels (one weak) on subject 1, one dropped (p_fp 0.9)
    full = labels(
        [(1, 20, 20, 0.1, 0.0), (1, 50, 50, 0.2, 0.0), (1, 80, 80, 0.3, 0.9), (1, 5, 90, 0.9, 0)]
    )
    # replay: finds (20, 20) and the weak one, plus a false label; (50, 50) only at p_fp 0.6
    mine = labels(
        [(1, 21, 19, 0.1, 0), (1, 79, 80, 0.4, 1), (1, 40, 90, 0.2, 0), (1, 50, 50, 0.6, 0)]
    )
    truth = pd.DataFrame({"subject_id": [1, 1, 2], "x": [20.0, 80.0, 30.0], "y": [20.0, 80, 30]})
    got = rp.score(mine, full, truth, subjects=[1, 2])
    assert got["lost"] == pytest.approx(1 / 3)  # (50, 50) of the 3 kept
    assert got["lost_strong"] == pytest.approx(1 / 2)  # of the 2 strong ones
    assert got["purity_full"] == pytest.approx(2 / 3)  # 3 kept, 2 hold a full-data centre
    assert got["purity"] == pytest.approx(2 / 3)  # 2 of 3 kept hold a true centre
    assert got["completeness"] == pytest.approx(2 / 3)  # (30, 30) on subject 2 missed
    assert got["count_mae"] == pytest.approx((abs(3 - 2) + abs(0 - 1)) / 2)
    assert got["labels"] == 3


@pytest.mark.slow
@pytest.mark.shared
def test_penguin_watch_replay_against_its_own_full_data_labels(shared, tmp_path):
    """The real Penguin Watch export (created_at order) through extract -> subjects ->
    boxes -> replay, scored against its own full-data labels (it has no experts).

    Measured (497 classifications, 50 subjects, 1,600 full-data labels, 4 refits): fixed
    n = 7 uses 70 % of the classifications and loses 15 % of the labels but 0.8 % of the
    strongly marked ones; the generative policy retires almost nothing early (effort
    >= 0.988 at every eps: ~32 penguins per image leave many objects open); the best
    setting within 1 % lost is generative eps = 0.05 at effort 0.998."""
    from test_examples import EXAMPLES, extract_args, in_shared, load

    from clumpscout.cli import main as cli_main

    cfg = load("penguin_watch.yaml")
    exp = cfg["export"]
    cls = in_shared(shared, exp["classifications"])
    subj = in_shared(shared, exp["subjects"])
    clicks, subjects, boxes, out = (
        tmp_path / n for n in ("c.parquet", "s.parquet", "b.parquet", "r")
    )
    ok = cli_main(
        ["extract", "--classifications", str(cls), "--subjects", str(subj), "--out", str(clicks)]
        + extract_args(cfg)
    )
    ok |= cli_main(
        ["subjects", "--subjects-export", str(subj), "--box-side", str(exp["box_side"])]
        + ["--out", str(subjects)]
    )
    ok |= cli_main(
        ["boxes", "--clicks", str(clicks), "--subjects", str(subjects), "--out", str(boxes)]
        + ["--shape-extent", exp["shape_extent"]]
    )
    assert ok == 0
    config = str(EXAMPLES / "penguin_watch.yaml")
    assert cli_main(["replay", "--boxes", str(boxes), "--out", str(out), "--config", config]) == 0
    t = pd.read_csv(out / "replay.csv")
    print(t.to_string())
    assert t["completeness"].isna().all()  # no truth
    fixed = t.loc[t["policy"] == "fixed"].set_index("setting")
    assert fixed["effort"].is_monotonic_increasing
    assert fixed.loc[3.0, "lost"] > fixed.loc[10.0, "lost"]
    # fixed n = 10 keeps nearly every classification (45 of 50 subjects hold 10)
    assert fixed.loc[10.0, "effort"] > 0.95
    points = pd.read_parquet(out / "retirement.parquet")
    assert points["subject_id"].nunique() == 50
    assert json.loads((out / "replay.json").read_text())["subjects"] == 50


def test_refit_points_by_hand():
    # every 100: 100, 200, ..., 900 (1000 is the end, no refit there)
    assert rp.refit_points(1000, 100).tolist() == list(range(100, 1000, 100))
    # growth 0.5: 100, 200 (= 100 + 100 > 150), 300 (= 200 * 1.5 = 300), 450, 675
    assert rp.refit_points(1000, 100, 0.5).tolist() == [100, 200, 300, 450, 675]
    assert rp.refit_points(50, 100).tolist() == []


def test_skills_from_an_aggregation_are_looked_up_by_name():
    from clumpscout.model.aggregator import Aggregator

    agg = Aggregator(seed=0).fit(toy(4, 6).drop(columns="created_at"))
    sk = LiveSkills.from_tables(agg.volunteers_, agg.report_["model"]["population"])
    v = agg.volunteers_.set_index("volunteer")
    got = sk.lookup(np.array(["v3", "v0", "stranger"], dtype=object))
    assert got.p_fn[:2].tolist() == [v.loc["v3", "p_fn"], v.loc["v0", "p_fn"]]
    assert got.lam[:2].tolist() == [v.loc["v3", "fp_rate"], v.loc["v0", "fp_rate"]]
    # the stranger gets the population mean shrunk by nothing: m_fn
    assert got.p_fn[2] == pytest.approx(sk.pop.m_fn)


def _gold_toy():
    """The toy on 24 subjects (in blocks of 4) with a gold standard on the first 12: the
    experts count the object at (30, 30) and not the one at (70, 60), which volunteers mark
    alike."""
    from clumpscout.data.gold import gold_from_table

    b = toy(24, 8, seed=4, block=4)
    gold_ids = np.arange(100, 112)
    gold = gold_from_table(pd.DataFrame({"subject_id": gold_ids, "x": 30.0, "y": 30.0}))
    return b, gold


def test_the_label_map_never_learns_from_later_classifications():
    b, gold = _gold_toy()
    settings = rp.Settings(refit_every=40, horizon=8)
    r = rp.run_replay(b, Params(), settings, gold=gold)
    assert len(r.maps) >= 1 and len(r.map_after) == len(r.maps)
    rows = rp.gold_rows(r.states, r.labels, gold, rp.CalibrationSettings())
    for k, m in enumerate(r.maps):
        # fitted on the gold prefixes completed before it took over, and only those
        assert m.info["labels"] == int((rows["g"] < r.map_after[k]).sum())
    # every state is judged by the last map that took over before its classification
    g = r.states["g"].to_numpy()
    want = np.searchsorted(r.map_after, g, side="right") - 1
    np.testing.assert_array_equal(r.states["map"].to_numpy(), want)
    # the first map waits for 10 complete gold subjects: before it nothing retires early
    # under the generative policy (its open objects are infinite)
    early = r.states["map"].to_numpy() < 0
    assert early.any() and np.isinf(r.states.loc[early, "new_kept"]).all()


def test_gold_subjects_run_to_the_end_and_are_not_scored():
    b, gold = _gold_toy()
    settings = rp.Settings(refit_every=40, fixed_n=(3,), risk_tau=(), caesar_k=(), horizon=8)
    settings = rp.Settings(**{**settings.__dict__, "generative_eps": (10.0,)})
    r = rp.run_replay(b, Params(), settings, gold=gold)
    pts = rp.retirement_points(r, Policy("fixed", 3.0), Params())
    is_gold = pts["subject_id"].isin(gold.subjects).to_numpy()
    assert (pts.loc[is_gold, "n_used"] == pts.loc[is_gold, "n_total"]).all()
    assert (pts.loc[~is_gold, "n_used"] == 3).all()
    # effort: 12 gold subjects x 8 + 12 others x 3 of 24 x 8 classifications
    table, _ = rp.evaluate(r, Params(), settings, _labels_at(r, pts), None)
    f3 = table.loc[table["policy"] == "fixed"].iloc[0]
    assert f3["effort"] == pytest.approx((12 * 8 + 12 * 3) / (24 * 8))


def test_replay_and_the_one_subject_decision_agree_with_a_gold_map():
    b, gold = _gold_toy()
    settings = rp.Settings(refit_every=40, horizon=8)
    params = Params()
    r = rp.run_replay(b, params, settings, gold=gold)
    cls = r.cls.set_index(["subject_id", "n"])["classification_id"]
    pol = Policy("generative", 0.3, horizon=8)
    judged = np.flatnonzero(r.states["map"].to_numpy() >= 0)
    assert len(judged) > 10
    for i in judged[::7]:
        st = r.states.iloc[i]
        sid, n, e = int(st["subject_id"]), int(st["n"]), int(st["epoch"])
        ids = [cls[(sid, k)] for k in range(1, n + 1)]
        boxes = b.loc[b["classification_id"].isin(ids)]
        d = retire(boxes, r.skills[e], pol, params, label_map=r.label_map(i))
        assert d.retire == bool(decide(pol, r.states.iloc[[i]], params)[0]), (sid, n)
        assert d.numbers["open_objects"] == pytest.approx(
            float(open_objects(r.states.iloc[[i]])[0]), rel=1e-9, abs=1e-12
        )
        mine = r.labels.loc[r.labels["state"] == i].sort_values("x1")
        np.testing.assert_allclose(d.labels.sort_values("x1")["p_fp"], mine["p_fp"], rtol=1e-9)


def test_full_labels_written_by_the_aggregation_give_the_replays_own_scores(tmp_path):
    """The workflow aggregates the full data in a job of its own (rule replay_labels, the
    aggregate script on every classification) and hands the replay its labels.parquet: the
    replay then scores exactly as when it aggregates the full data itself."""
    from clumpscout.model.aggregator import Aggregator

    b, gold = _gold_toy()
    boxes = tmp_path / "boxes.parquet"
    b.to_parquet(boxes)
    settings = rp.Settings(refit_every=60, fixed_n=(3, 8), caesar_k=(2,), risk_tau=(0.5,))
    agg = Aggregator(Params(), seed=7, calibration={})
    agg.fit(str(boxes), gold=gold)  # as scripts/aggregate.py: the file, block by block
    agg.write(tmp_path / "full")
    full = pd.read_parquet(tmp_path / "full" / "labels.parquet")
    own = rp.replay(b, Params(), settings, seed=7, path=boxes, gold=gold, calibration={})
    given = rp.replay(
        b, Params(), settings, full_labels=full, seed=7, path=boxes, gold=gold, calibration={}
    )
    pd.testing.assert_frame_equal(given[0], own[0])
    pd.testing.assert_frame_equal(given[1], own[1])
    assert given[2]["best"] == own[2]["best"]
    # and the scores do depend on the labels handed over: half of them lose objects
    half = rp.replay(
        b, Params(), settings, full_labels=full.iloc[::2], seed=7, path=boxes, gold=gold,
        calibration={},
    )  # fmt: skip
    assert not half[0].equals(own[0])


def test_epochs_assessed_in_threads_give_the_same_replay():
    """Three epochs at once in threads, while the next skills are refitted: the same states
    and labels as one after the other."""
    b = toy(10, 8, seed=5)
    settings = rp.Settings(refit_every=12)
    one = rp.run_replay(b, Params(), settings)
    three = rp.run_replay(b, Params(), settings, workers=3)
    two = rp.run_replay(b, Params(), settings, workers=2)  # one epoch at a time beside the refit
    assert len(one.refits) >= 4 and one.states["epoch"].nunique() == len(one.refits) + 1
    for many in (two, three):
        pd.testing.assert_frame_equal(many.states, one.states)
        pd.testing.assert_frame_equal(many.labels, one.labels)
    assert [r["population"] for r in three.refits] == [r["population"] for r in one.refits]
    with pytest.raises(InputError, match="workers must be at least 1"):
        rp.run_replay(b, Params(), settings, workers=0)


def test_the_replay_reads_only_its_columns_and_scores_the_same(tmp_path):
    """The replay job reads only READ_COLUMNS of the boxes table (the rest is never read):
    the same replay as on the whole table, and a column the file lacks (unusual) is left
    out, not an error."""
    from clumpscout.model.source import read_boxes

    b = toy(6, 8, seed=4)
    b["task"] = "T0"  # columns of boxes.parquet the replay does not read
    b["x"], b["y"] = (b["x1"] + b["x2"]) / 2, (b["y1"] + b["y2"]) / 2
    b.to_parquet(tmp_path / "boxes.parquet")
    read = read_boxes(tmp_path / "boxes.parquet", rp.READ_COLUMNS)
    assert list(read.columns) == [c for c in rp.READ_COLUMNS if c != "unusual"]
    settings = rp.Settings(refit_every=15, fixed_n=(3, 8), caesar_k=(2,), risk_tau=(0.5,))
    whole = rp.replay(b, Params(), settings)
    mine = rp.replay(read, Params(), settings)
    pd.testing.assert_frame_equal(mine[0], whole[0])
    pd.testing.assert_frame_equal(mine[1], whole[1])
    assert json.dumps(mine[2]["best"]) == json.dumps(whole[2]["best"])  # NaN purity: no truth
