"""The gold standard checked in the live service before a label map learned from it is used
(clumpscout.service.gold, docs/decisions.md#live-service): a broken gold is not used with
``on_implausible: stop`` (the default map, and the service says so in every reply, on
/health, in /metrics and the log; a restart refuses it), is used with ``warn`` exactly as
the replay uses it, and a sound gold changes nothing.

The toy project of tests/caesar_feed.py in blocks of 5 subjects (subjects 100-129, objects
at (30, 30) and (70, 60) of 100 x 100 px images, 10 classifications each); the gold is on
subjects 100-114, which are classified first: the first label map is fitted (and the gold
checked) at rank 99, once 10 gold subjects are complete, the second at rank 130; the
other subjects' classifications all come from rank 150 on."""

from __future__ import annotations

import copy
import json
import logging
import sqlite3

import pandas as pd
import pytest
import yaml
from caesar_feed import TOY_CONFIG, in_order, toy_boxes, toy_extracts
from starlette.testclient import TestClient

from clumpscout.data.gold import gold_from_table
from clumpscout.errors import InputError
from clumpscout.evaluation import replay as rp
from clumpscout.model import gold_check as gc
from clumpscout.service import settings as ss
from clumpscout.service import store
from clumpscout.service.app import Credential, Service, build_app
from clumpscout.service.engine import Engine
from clumpscout.service.extracts import caesar_extracts
from clumpscout.service.gold import GoldWatch

AUTH = ("caesar", "Zq9-s3cret-xk")
GOLD = list(range(100, 115))
#: the gold's object of each case: (30, 30) as given, y flipped about 100, and the object at
#: (70, 60) with x and y swapped
OBJECT = {"sound": (30.0, 30.0), "y flipped": (30.0, 70.0), "x/y swapped": (60.0, 70.0)}


@pytest.fixture(scope="module")
def extracts():
    return in_order(toy_extracts(block=5))


def write_gold(tmp_path, case: str):
    x, y = OBJECT[case]
    path = tmp_path / f"{case.replace('/', '')}.csv".replace(" ", "_")
    pd.DataFrame({"subject_id": GOLD, "x": x, "y": y}).to_csv(path, index=False)
    return path


def settings(gold_path, on_implausible="stop"):
    cfg = copy.deepcopy(TOY_CONFIG) | {
        "gold": {"table": str(gold_path), "on_implausible": on_implausible}
    }
    cfg["serve"]["setting"] = 0.2
    return ss.from_config(ss.check(cfg))


def engine_feed(s, db, extracts, cuts=(100, 131)):
    """The engine fed ``extracts`` in arrival order, each request with its subject's
    extracts so far, in batches cut at ``cuts`` (the writer's batches: each request of a
    batch gets its subject's reply after the batch); every reply, in order."""
    engine = Engine(store.open_store(db, s.fingerprint()), s)
    so_far: dict = {}
    replies = []
    edges = [0, *[c for c in cuts if c < len(extracts)], len(extracts)]
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        reqs = []
        for e in extracts[lo:hi]:
            so_far.setdefault(e["subject_id"], []).append(e)
            reqs.append(caesar_extracts(json.dumps(so_far[e["subject_id"]]).encode(), s))
        replies += engine.process(reqs)
    engine.con.close()
    return replies


def points(replies) -> pd.Series:
    last = {r["subject_id"]: r for r in replies}
    return pd.Series({k: v["retired_at"] or v["classifications"] for k, v in last.items()})


def replay_points(s, extracts, gold=None) -> pd.Series:
    cfg = ss.check(copy.deepcopy(TOY_CONFIG))
    run = rp.run_replay(toy_boxes(extracts), s.params, rp.Settings.from_dict(cfg["replay"]),
                        gold=gold, calibration=s.calibration)  # fmt: skip
    return rp.retirement_points(run, s.policy, s.params).set_index("subject_id")["n_used"]


# ------------------------------------------------------------------ by hand
def _box(x, y, half=5.0):
    return (x - half, y - half, x + half, y + half)


def test_the_check_reads_the_gold_subjects_classified_three_times_by_hand(tmp_path):
    """12 gold subjects with an expert object at (30, 30); the volunteers' one label is at
    (30, 70) (y flipped): subjects 1-10 classified 10 times (label marked by 9), 11 twice,
    12 not yet. The check reads subjects 1-10: 10 expert objects, all unmarked; the 10
    labels are strong (9 of 10 viewers, ≥ 5 marks) but fewer than 30, so the match is not
    judged: implausible, and y → 100 − y is named. With stop it is not used."""
    gold = gold_from_table(
        pd.DataFrame({"subject_id": range(1, 13), "x": 30.0, "y": 30.0}), "g.csv"
    )
    w = GoldWatch(gold, horizon=10)
    assert w.waiting and w.status().startswith("waiting: 0 of 12 gold subjects complete")
    for s in range(1, 11):
        w.observe(s, 10, [(*_box(30.0, 70.0), 9)])
    w.observe(11, 2, [(*_box(30.0, 70.0), 2)])
    assert w.seen() == list(range(1, 11))
    a = w.agreement()
    g = a.given
    assert (a.subjects_checked, g.experts, g.experts_unmarked, g.strong) == (10, 10, 10, 10)
    assert a.verdict == "implausible" and a.likely.name == "y flipped"
    assert not w.check(1, 99)
    assert not w.waiting and w.verdict == "implausible"
    (warning,) = w.warnings
    assert warning.startswith("the gold standard (g.csv) does not agree with the volunteers")
    assert "y axis looks flipped" in warning and "keeps the default label map" in warning
    assert w.status() == f"implausible: {warning}"
    assert 'clumpscout_gold_check{verdict="implausible"} 1' in w.metrics()
    assert 'clumpscout_gold_check{verdict="ok"} 0' in w.metrics()
    ((m, g_, verdict, used, report),) = w.pending
    assert (m, g_, verdict, used) == (1, 99, "implausible", 0)
    assert json.loads(report)["stop"] == gc.stop_message(a)


def test_live_policy_by_hand():
    """An implausible gold: stop -> not used, the batch check's words and that the service
    keeps the default map; warn -> used, the batch check's warning; an incomplete one warns
    and is used; a sound one neither."""
    x1, y1, x2, y2 = _box(30, 30)
    labels = pd.DataFrame(
        {"subject_id": range(1, 41), "n_marks": 10, "x1": x1, "y1": y1, "x2": x2, "y2": y2}
    )
    viewers = pd.Series(10, range(1, 41))

    def gold(y):
        return gold_from_table(pd.DataFrame({"subject_id": range(1, 41), "x": 30.0, "y": y}))

    sound = gc.gold_agreement(labels, gold(30.0), viewers)
    assert gc.live_policy(sound, "stop") == (True, [])
    flipped = gc.gold_agreement(labels, gold(70.0), viewers)
    used, (w,) = gc.live_policy(flipped, "stop")
    assert not used and w.startswith(flipped.messages[0]) and w != flipped.messages[0]
    assert w.endswith("not used: the service keeps the default label map (set "
                      "gold.on_implausible: warn to use it anyway)")  # fmt: skip
    assert gc.live_policy(flipped, "warn") == (True, list(flipped.messages))
    with pytest.raises(InputError) as e:
        gc.apply_policy(flipped, "stop")
    assert e.value.message == gc.stop_message(flipped)
    nan = float("nan")
    none = gold_from_table(pd.DataFrame({"subject_id": range(1, 41), "x": nan, "y": nan}))
    incomplete = gc.gold_agreement(labels, none, viewers)  # 40 strong labels, none matched
    assert incomplete.verdict == "incomplete"
    assert gc.live_policy(incomplete, "stop") == (True, list(incomplete.messages))


# ------------------------------------------------------------------ the engine
def test_a_flipped_gold_is_not_used_and_every_reply_says_so(tmp_path, extracts, caplog):
    """stop: the gold checked at rank 99 (and again at 130) is implausible: its maps are not
    used; before the check nothing retires early (a gold map was coming), after it the
    default map judges and the subjects retire as without a gold (every one of them is
    classified after the check: their points equal the replay's without a gold); the gold
    subjects never retire early; one RUN HEALTH WARNING per check."""
    s = settings(write_gold(tmp_path, "y flipped"))
    with caplog.at_level(logging.INFO, logger="clumpscout"):
        replies = engine_feed(s, tmp_path / "s.db", extracts)
    warned = [r.getMessage() for r in caplog.records if "RUN HEALTH WARNING" in r.getMessage()]
    assert len(warned) == 2 and all("y axis looks flipped" in m for m in warned)
    assert all("y_flipped.csv" in m and "keeps the default label map" in m for m in warned)
    assert {r["label_map"] for r in replies} == {"default"}
    before, after = replies[:100], replies[100:]
    assert not any("warnings" in r for r in before)
    first, second = (m.removeprefix("RUN HEALTH WARNING: ") for m in warned)
    assert all(r["warnings"] == [first] for r in after[:31])  # ranks 100-130
    assert all(r["warnings"] == [second] for r in after[31:])
    got = points(replies)
    want = replay_points(s, extracts)  # no gold: the default map throughout
    assert (got[GOLD] == 10).all()
    others = [k for k in got.index if k not in GOLD]
    assert got[others].tolist() == want[others].tolist()
    assert (got[others] < 10).sum() >= 5  # they retire early again


def test_with_warn_a_broken_gold_is_used_as_the_replay_uses_it(tmp_path, extracts):
    """warn: the maps of a gold with x and y swapped are used, every reply from the first
    check on carries the warning naming the swap, and every subject retires where the
    replay with that gold retires it."""
    path = write_gold(tmp_path, "x/y swapped")
    s = settings(path, "warn")
    replies = engine_feed(s, tmp_path / "s.db", extracts)
    assert {r["label_map"] for r in replies[100:]} == {"gold 1", "gold 2"}
    assert all(len(r["warnings"]) == 1 for r in replies[100:])
    assert "the gold's x and y look swapped" in replies[-1]["warnings"][0]
    gold = gold_from_table(pd.read_csv(path))
    want = replay_points(s, extracts, gold).sort_index()
    assert points(replies).sort_index().tolist() == want.tolist()


def test_a_sound_gold_gives_no_warning(tmp_path, extracts):
    s = settings(write_gold(tmp_path, "sound"))
    replies = engine_feed(s, tmp_path / "s.db", extracts)
    assert not any("warnings" in r for r in replies)
    assert {r["label_map"] for r in replies[100:]} == {"gold 1", "gold 2"}
    con = sqlite3.connect(tmp_path / "s.db")
    assert con.execute("SELECT map, g, verdict, used FROM gold_checks").fetchall() == [
        (1, 99, "ok", 1),
        (2, 130, "ok", 1),
    ]


# ------------------------------------------------------------------ HTTP, restart
def test_health_metrics_replies_and_a_restart_say_so(tmp_path, extracts, capsys):
    """stop, through HTTP from rank 90 on: /health says the service waits for the gold, then
    that it is implausible (and why); /metrics and the replies say so; a restart refuses
    the gold with the batch check's one line (exit 2 from the command line), also when the
    database holds no check yet (one is made at start)."""
    from clumpscout.cli import main as cli_main

    gold_path = write_gold(tmp_path, "y flipped")
    s = settings(gold_path)
    db = tmp_path / "s.db"
    engine_feed(s, db, extracts[:90], cuts=())
    so_far: dict = {}
    for e in extracts[:90]:
        so_far.setdefault(e["subject_id"], []).append(e)
    with TestClient(build_app(Service(s, db, Credential(*AUTH)))) as c:
        health = c.get("/health").json()
        assert health["gold"].startswith("waiting: 5 of 15 gold subjects complete")
        assert health["label_map"] == "default"
        for e in extracts[90:105]:
            so_far.setdefault(e["subject_id"], []).append(e)
            r = c.post("/reduce", json=so_far[e["subject_id"]], auth=AUTH)
            assert r.status_code == 200
        reply = r.json()
        health = c.get("/health").json()
        metrics = c.get("/metrics", auth=AUTH).text
        got = c.get(f"/subjects/{e['subject_id']}", auth=AUTH).json()
    (warning,) = reply["warnings"]
    assert health == {"status": "ok", "gold": f"implausible: {warning}", "label_map": "default"}
    assert str(gold_path) in warning and "y axis looks flipped" in warning
    assert AUTH[1] not in json.dumps(health)
    assert got == reply
    assert 'clumpscout_gold_check{verdict="implausible"} 1' in metrics
    assert "clumpscout_run_health_warnings 1" in metrics
    assert "clumpscout_label_map 0" in metrics
    with pytest.raises(InputError) as err:
        Service(s, db, Credential(*AUTH))
    assert err.value.path == str(gold_path)
    assert err.value.message.startswith("the gold standard does not agree with the volunteers")
    assert err.value.message.endswith("set gold.on_implausible: warn to use it anyway")
    sqlite3.connect(db, isolation_level=None).execute("DELETE FROM gold_checks")
    auth = tmp_path / "auth.txt"
    auth.write_text(":".join(AUTH) + "\n")
    auth.chmod(0o600)
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump(s.config))
    assert (
        cli_main(["serve", "--config", str(conf), "--db", str(db), "--auth-file", str(auth)]) == 2
    )
    out = capsys.readouterr().err
    assert out.count("\n") == 1 and "does not agree with the volunteers" in out
    assert out.startswith(f"error: {gold_path}: the gold standard")
    s_warn = settings(gold_path, "warn")  # with warn it starts, warns and uses the maps
    with TestClient(build_app(Service(s_warn, db, Credential(*AUTH)))) as c:
        health = c.get("/health").json()
    assert health["gold"].startswith("implausible: the gold standard (")
    assert health["label_map"] == "gold 1"
