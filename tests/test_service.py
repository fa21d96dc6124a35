"""clumpscout serve in process (the ASGI app through starlette's test client): what it reads,
what it answers, what it stores, who may call it, and that it retires where the replay does.
Real server processes (kill -9, SIGTERM, TLS): tests/test_service_process.py."""

from __future__ import annotations

import base64
import copy
import hmac
import json
import sqlite3
import statistics
import time

import numpy as np
import pandas as pd
import pytest
from caesar_feed import TOY_CONFIG, caesar_extract, feed, toy_boxes, toy_extracts
from starlette.testclient import TestClient

from clumpscout.evaluation import replay as rp
from clumpscout.model.live import refit_points
from clumpscout.service import settings as ss
from clumpscout.service import store
from clumpscout.service.app import Credential, Service, build_app
from clumpscout.service.extracts import BadRequest, caesar_extracts

AUTH = ("caesar", "s3cret-pw")


def cfg(**serve):
    c = copy.deepcopy(TOY_CONFIG)
    c["serve"].update(serve)
    return ss.check(c)


def settings(**serve):
    return ss.from_config(cfg(**serve))


def client(s, db):
    return TestClient(build_app(Service(s, db, Credential(*AUTH))))


def post_with(c):
    def post(extracts):
        r = c.post("/reduce", json=extracts, auth=AUTH)
        assert r.status_code == 200, r.text
        return r.json()

    return post


def extract(data, cid=1, sid=7, uid=3, **kw):
    return caesar_extract(cid, sid, uid, "2020-01-01T00:00:00Z", data, **kw)


def boxes_of(data, s=None, **kw):
    s = s or settings()
    _, items = caesar_extracts(json.dumps([extract(data, **kw)]).encode(), s)
    return items[0].boxes, items[0].dropped


# ------------------------------------------------------------------ settings


def test_policy_is_built_as_the_replay_builds_it():
    c = cfg()
    replay = rp.Settings.from_dict(c["replay"])
    for pol in replay.policies():
        assert ss.policy_of(pol.kind, pol.setting, c["replay"]) == pol


def test_live_refit_points_are_the_replays():
    for every, growth in ((100, 0.0), (100, 0.2), (250, 1.5)):
        live, p = [], 0
        while True:
            p = ss.refit_point_after(p, every, growth)
            if p >= 5000:
                break
            live.append(p)
        assert live == refit_points(5000, every, growth).tolist()


# ------------------------------------------------------------------ extracts -> boxes


def test_marks_become_boxes_by_hand():
    s = settings()  # box side 10, tool 1 unusual
    b, _ = boxes_of({"frame0": {"T0_tool0_x": [50, 20.5], "T0_tool0_y": [40, 30]}}, s)
    np.testing.assert_array_equal(b, [[45, 35, 55, 45, 0], [15.5, 25, 25.5, 35, 0]])
    # point_extractor (no frame level), front-end monorepo's toolIndex, an unusual tool
    b, _ = boxes_of({"T0_toolIndex1_x": [10], "T0_toolIndex1_y": [10]}, s)
    np.testing.assert_array_equal(b, [[5, 5, 15, 15, 1]])
    # a rectangle as drawn (x, y its upper-left corner), a circle's bounding square
    rect = {"T0_tool0_x": [10], "T0_tool0_y": [20], "T0_tool0_width": [30], "T0_tool0_height": [40]}
    np.testing.assert_array_equal(boxes_of({"frame0": rect}, s)[0], [[10, 20, 40, 60, 0]])
    circle = {"T0_tool0_x": [50], "T0_tool0_y": [50], "T0_tool0_r": [5]}
    np.testing.assert_array_equal(boxes_of({"frame0": circle}, s)[0], [[45, 45, 55, 55, 0]])
    # an ellipse rx 4, ry 2 turned by 90 degrees: half sides 2 (x) and 4 (y)
    ell = {
        "T0_tool0_x": [50],
        "T0_tool0_y": [50],
        "T0_tool0_rx": [4],
        "T0_tool0_ry": [2],
        "T0_tool0_angle": [90],
    }
    np.testing.assert_allclose(boxes_of({"frame0": ell}, s)[0], [[48, 46, 52, 54, 0]], atol=1e-12)
    # nothing marked: no box; other tasks and tools dropped and counted; subtask answers ignored
    assert boxes_of({}, s)[0].shape == (0, 5)
    s2 = ss.from_config(
        ss.check(copy.deepcopy(TOY_CONFIG) | {"extract": {"clump_task": "T0", "tools": [0]}})
    )
    data = {"frame0": {"T0_tool0_x": [1], "T0_tool0_y": [2], "T0_tool2_x": [3, 4], "T0_tool2_y": [5, 6],
                       "T1_tool0_x": [7], "T1_tool0_y": [8], "T0_tool0_details": [[{"0": 1}]]}}  # fmt: skip
    b, dropped = boxes_of(data, s2)
    assert len(b) == 1 and dropped == {"other_tool": 2, "other_task": 1}


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"[{", 400, "malformed JSON"),
        (b'[{"a": NaN}]', 400, "malformed JSON"),
        (b"[]", 400, "no extracts"),
        (b'{"a": 1}', 400, "JSON array"),
        (b"[" * 100 + b"]" * 100, 400, "nested deeper"),
        (b"\xff\xfe", 400, "not UTF-8"),
    ],
)
def test_bad_bodies_are_refused_in_one_line(body, status, words):
    with pytest.raises(BadRequest) as e:
        caesar_extracts(body, settings())
    assert e.value.status == status and words in e.value.message and "\n" not in e.value.message


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda e: e.pop("classification_at"), "extracts[0]: no classification_at"),
        (lambda e: e.update(classification_id="12"), "extracts[0].classification_id"),
        (lambda e: e.update(classification_id=True), "not an id"),
        (lambda e: e.update(user_id=1.5), "extracts[0].user_id"),
        (lambda e: e.update(classification_at="yesterday"), "not a date-time"),
        (lambda e: e.update(data=[1, 2]), "data is an object"),
        (lambda e: e["data"]["frame0"].update(T0_tool0_x=[1, "2"]), "T0_tool0_x: item 1"),
        (lambda e: e["data"].update(frame0={"T0_tool0_x": [1.7e308], "T0_tool0_y": [1], "T0_tool0_width": [1.7e308], "T0_tool0_height": [1]}), "non-finite extent"),
        (lambda e: e["data"]["frame0"].update(T0_tool0_x=[1, 2, 3]), "differ in length"),
        (lambda e: e["data"]["frame0"].update(T0_tool0_z=[1]), "not a point, rectangle"),
        (lambda e: e["data"]["frame0"].update(nonsense=[1]), "unknown key"),
        (lambda e: e["data"].update(frameX={}), "unknown frame"),
        (lambda e: e["data"].update(frame1=[1]), "a frame is an object"),
        (lambda e: e["data"]["frame0"].update(T0_tool0_x=list(range(200_000)), T0_tool0_y=list(range(200_000))), "more than 1000 marks"),
        (lambda e: e["data"].update(frame0={"T0_tool0_x": [1], "T0_tool0_y": [2], "T0_tool0_r": [-1]}), "circle: negative r"),
    ],
)  # fmt: skip
def test_bad_extracts_are_named(change, words):
    e = extract({"frame0": {"T0_tool0_x": [1, 2], "T0_tool0_y": [3, 4]}})
    change(e)
    with pytest.raises(BadRequest) as err:
        caesar_extracts(json.dumps(e if isinstance(e, list) else [e]).encode(), settings())
    assert words in err.value.message, err.value.message


def test_two_subjects_or_another_workflow_in_one_request_are_refused():
    two = [extract({}, cid=1, sid=7), extract({}, cid=2, sid=8)]
    with pytest.raises(BadRequest, match="one subject per request"):
        caesar_extracts(json.dumps(two).encode(), settings())
    c = copy.deepcopy(TOY_CONFIG)
    c["export"]["workflow_id"] = 11
    with pytest.raises(BadRequest, match="reduces workflow 11"):
        caesar_extracts(
            json.dumps([extract({}, workflow_id=12)]).encode(), ss.from_config(ss.check(c))
        )


# ------------------------------------------------------------------ the service


def test_retires_where_the_replay_does_and_resumes_after_a_restart(tmp_path):
    """Toy project (30 subjects x 10 classifications, refits after 100 and 200) fed in
    arrival order, the service restarted half-way (a new process state from the database):
    every subject's retirement point equals the replay's on the same boxes (some retire at
    4, 6, 7 or 8 classifications, across the refits; some never), and the replies name the
    skills version they used."""
    extracts = toy_extracts()
    s = settings()
    boxes = toy_boxes(extracts)
    run = rp.run_replay(boxes, s.params, rp.Settings.from_dict(cfg()["replay"]))
    expected = rp.retirement_points(run, s.policy, s.params).set_index("subject_id")["n_used"]
    assert set(expected) == {4, 6, 7, 8, 10}
    db = tmp_path / "s.db"
    order = sorted(extracts, key=lambda e: e["classification_at"])
    first, second = order[:150], order[150:]
    with client(s, db) as c:
        last = feed(post_with(c), first)
        assert {r["skills_version"] for r in last.values()} == {1}  # all after 100
    with client(s, db) as c:  # restart: every subject's extracts so far, then the rest
        so_far: dict = {}
        for e in first:
            so_far.setdefault(e["subject_id"], []).append(e)
        post = post_with(c)
        for e in second:
            so_far.setdefault(e["subject_id"], []).append(e)
            last[e["subject_id"]] = post(so_far[e["subject_id"]])
        got = pd.Series({k: v["retired_at"] or v["classifications"] for k, v in last.items()})
        assert got.sort_index().tolist() == expected.sort_index().tolist()
        assert last[order[-1]["subject_id"]]["skills_version"] == 2
        r = c.get(f"/subjects/{order[-1]['subject_id']}", auth=AUTH)
        assert r.json() == last[order[-1]["subject_id"]]
        assert c.get("/subjects/99999", auth=AUTH).status_code == 404
        metrics = c.get("/metrics", auth=AUTH).text
        assert "clumpscout_classifications_stored 300" in metrics
        assert 'clumpscout_requests_total{endpoint="reduce",status="200"}' in metrics
    con = sqlite3.connect(db)
    assert con.execute(
        "SELECT COUNT(*), COUNT(DISTINCT g), MIN(g), MAX(g) FROM classifications"
    ).fetchone() == (300, 300, 0, 299)
    assert con.execute("SELECT version, after FROM skills").fetchall() == [(1, 100), (2, 200)]


def test_a_repeat_changes_nothing_and_a_reply_says_what_it_knows(tmp_path):
    s = settings()
    e1 = extract({"frame0": {"T0_tool0_x": [30, 70], "T0_tool0_y": [30, 60]}}, cid=1, uid=1)
    e2 = extract({"frame0": {"T0_tool0_x": [30.5], "T0_tool0_y": [29.5]}}, cid=2, uid=2)
    with client(s, tmp_path / "s.db") as c:
        post = post_with(c)
        r1 = post([e1])
        assert post([e1]) == r1  # Caesar retries
        running = c.post("/reduce", json={"extracts": [e1], "store": {}}, auth=AUTH)
        assert running.json() == r1  # running reduction: the new extracts and the store
        r2 = post([e1, e2])
        assert post([e2, e1]) == r2  # the same extracts again, in another order
        dup = extract({"frame0": {"T0_tool0_x": [5], "T0_tool0_y": [5]}}, cid=3, uid=2)
        assert post([e1, e2, dup])["classifications"] == 2  # a volunteer's second: not counted
        other = extract({"frame0": {"T1_tool0_x": [5, 6], "T1_tool0_y": [5, 6]}}, cid=4, uid=4)
        assert post([e1, e2, dup, other])["classifications"] == 3  # its marks: another task
        metrics = c.get("/metrics", auth=AUTH).text
        assert 'clumpscout_marks_dropped_total{reason="other_task"} 2' in metrics
    assert r1["classifications"] == 1 and r2["classifications"] == 2
    keys = {"retire", "classifications", "expected_count", "count_low", "count_high",
            "open_objects", "policy", "setting", "skills_version", "labels"}  # fmt: skip
    assert keys <= set(r2)
    # two volunteers marked (30, 30): one label there, held by both marks
    (x1, y1, x2, y2, p_fp, marks), *_ = sorted(r2["labels"], key=lambda lab: -lab[5])
    assert marks == 2 and x1 < 30 < x2 and y1 < 30 < y2 and 0 <= p_fp <= 1
    con = sqlite3.connect(tmp_path / "s.db")
    assert con.execute("SELECT COUNT(*) FROM extracts").fetchone()[0] == 4
    assert con.execute("SELECT skipped FROM classifications WHERE g IS NULL").fetchall() == [
        ("duplicate_volunteer_subject",)
    ]


def test_every_endpoint_but_health_needs_the_credential(tmp_path):
    with client(settings(), tmp_path / "s.db") as c:
        assert c.get("/health").status_code == 200
        good = "Basic " + base64.b64encode(b"caesar:s3cret-pw").decode()
        for header in (None, "Basic " + base64.b64encode(b"caesar:wrong").decode(),
                       "Basic " + base64.b64encode(b"nobody:s3cret-pw").decode(), "Basic ###",
                       "Bearer caesar:wrong", "Bearer s3cret-pw", "Digest x"):  # fmt: skip
            h = {} if header is None else {"Authorization": header}
            for method, path in (("POST", "/reduce"), ("POST", "/classifications"),
                                 ("GET", "/subjects/1"), ("GET", "/metrics"), ("GET", "/nowhere")):  # fmt: skip
                r = c.request(method, path, headers=h, content=b"[]")
                assert r.status_code == 401, (header, path)
                assert "s3cret" not in r.text
        assert c.get("/metrics", headers={"Authorization": good}).status_code == 200
        assert (
            c.get("/metrics", headers={"Authorization": "Bearer caesar:s3cret-pw"}).status_code
            == 200
        )


def test_the_credential_is_compared_whole_and_in_constant_time(monkeypatch):
    """Both the user and the password are compared on every attempt, as digests of one
    length (so neither a wrong user nor a wrong password returns early); and a wrong
    password takes as long as a wrong user (median over interleaved tries)."""
    cred = Credential("caesar", "s3cret-pw")
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    for pair in (b"nobody:s3cret-pw", b"caesar:wrong", b"x:" + b"y" * 500, b"caesar:s3cret-pw"):
        calls.clear()
        ok = cred.check("Basic " + base64.b64encode(pair).decode())
        assert ok == (pair == b"caesar:s3cret-pw")
        assert calls == [(32, 32), (32, 32)]
    monkeypatch.setattr(hmac, "compare_digest", real)
    wrong_user = "Basic " + base64.b64encode(b"caesaR:s3cret-pw").decode()
    wrong_pw = "Basic " + base64.b64encode(b"caesar:s3cret-pW").decode()
    t = {wrong_user: [], wrong_pw: []}
    for _ in range(3000):
        for h in (wrong_user, wrong_pw):
            t0 = time.perf_counter_ns()
            cred.check(h)
            t[h].append(time.perf_counter_ns() - t0)
    ratio = statistics.median(t[wrong_pw]) / statistics.median(t[wrong_user])
    assert 0.7 < ratio < 1.4, ratio


def test_bad_requests_store_nothing_and_say_what(tmp_path):
    s = settings(max_body_bytes=2000)
    with client(s, tmp_path / "s.db") as c:
        big = json.dumps(
            [extract({"frame0": {"T0_tool0_x": [1.0] * 400, "T0_tool0_y": [2.0] * 400}})]
        )
        r = c.post("/reduce", content=big, auth=AUTH)
        assert r.status_code == 413 and "max_body_bytes" in r.json()["error"]

        def chunks():
            for _ in range(10):
                yield b" " * 500

        r = c.post("/reduce", content=chunks(), auth=AUTH)  # no Content-Length
        assert r.status_code == 413
        r = c.post("/reduce", content=b'[{"classification_id": 1}]', auth=AUTH)
        assert r.status_code == 400 and r.json() == {"error": "extracts[0]: no subject_id"}
        assert c.get("/subjects/abc", auth=AUTH).status_code == 400
    con = sqlite3.connect(tmp_path / "s.db")
    assert con.execute("SELECT COUNT(*) FROM extracts").fetchone()[0] == 0


def test_export_rows_are_read_by_clumpscout_extracts_reader(tmp_path):
    """POST /classifications with rows of a classification export: one reply per subject,
    the boxes those of the same marks sent as extracts."""
    ann = json.dumps([{"task": "T0", "value": [{"tool": 0, "x": 30, "y": 30, "frame": 0}]}])
    rows = [
        {"classification_id": 10 + i, "user_name": f"v{i}", "user_id": i + 1, "workflow_id": 1,
         "workflow_version": "1.1", "created_at": f"2020-01-01 00:0{i}:00 UTC", "metadata": "{}",
         "annotations": ann, "subject_data": "{}", "subject_ids": 7 + (i == 2)}
        for i in range(3)
    ]  # fmt: skip
    with client(settings(), tmp_path / "s.db") as c:
        r = c.post("/classifications", json=rows, auth=AUTH)
        assert r.status_code == 200, r.text
        got = {x["subject_id"]: x["classifications"] for x in r.json()["subjects"]}
        assert got == {7: 2, 8: 1}
        bad = c.post("/classifications", json=[{"classification_id": 1}], auth=AUTH)
        assert bad.status_code == 400 and "\n" not in bad.json()["error"]
    con = sqlite3.connect(tmp_path / "s.db")
    b = store.boxes_from_blob(
        con.execute("SELECT boxes FROM classifications WHERE classification_id = 10").fetchone()[0]
    )
    np.testing.assert_array_equal(b, [[25, 25, 35, 35, 0]])


# ------------------------------------------------------------------ the database


def test_a_database_it_cannot_use_stops_it_with_a_clear_message(tmp_path):
    s = settings()
    fp = s.fingerprint()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(store.StoreError, match="cannot open the database"):
        store.open_store(junk, fp)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (a)")
    with pytest.raises(store.StoreError, match="not a clumpscout service database"):
        store.open_store(other, fp)
    newer = tmp_path / "newer.db"
    store.open_store(newer, fp).close()
    sqlite3.connect(newer).execute(f"PRAGMA user_version = {store.SCHEMA_VERSION + 1}")
    with pytest.raises(store.StoreError, match=f"schema version {store.SCHEMA_VERSION + 1}, newer"):
        store.open_store(newer, fp)
    made = tmp_path / "made.db"
    store.open_store(made, fp).close()
    with pytest.raises(store.StoreError, match="policy: 'generative=0.02' there, 'risk=0.5' now"):
        store.open_store(made, settings(policy="risk", setting=0.5).fingerprint())
    assert store.open_store(made, settings(refit="background").fingerprint())  # not a decision
    lock = store.Lock(made)
    with pytest.raises(store.StoreError, match="another clumpscout serve"):
        Service(s, made, Credential(*AUTH))
    lock.release()


def test_an_older_schema_is_migrated_forward(tmp_path):
    """A database of schema 1 (before extracts counted their dropped marks, gold rows were
    kept and the gold was checked) opens as the current schema with its rows kept."""
    db = tmp_path / "v1.db"
    con = sqlite3.connect(db)
    for stmt in store._SCHEMA_V1.split(";"):
        if stmt.strip():
            con.execute(stmt)
    fp = settings().fingerprint()
    con.execute("INSERT INTO meta VALUES ('settings', ?)", (json.dumps(fp),))
    con.execute("INSERT INTO extracts VALUES (5, 'k', 7, 0.0, x'7b7d')")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    con = store.open_store(db, fp)
    assert con.execute("PRAGMA user_version").fetchone()[0] == store.SCHEMA_VERSION == 4
    assert con.execute("SELECT classification_id, dropped FROM extracts").fetchall() == [(5, "{}")]
    assert con.execute("SELECT COUNT(*) FROM gold_rows").fetchone()[0] == 0  # schema 3's table
    assert con.execute("SELECT COUNT(*) FROM gold_checks").fetchone()[0] == 0  # schema 4's


def test_serve_stops_at_start_with_one_line(tmp_path, capsys):
    from clumpscout.cli import main as cli_main

    auth = tmp_path / "auth.txt"
    auth.write_text("caesar:s3cret-pw\n")
    auth.chmod(0o600)
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    conf = tmp_path / "c.yaml"
    conf.write_text(json.dumps(TOY_CONFIG))
    base = ["serve", "--config", str(conf), "--port", "1"]
    assert cli_main(base + ["--db", str(junk), "--auth-file", str(auth)]) == 2
    err = capsys.readouterr().err
    assert "cannot open the database (file is not a database)" in err and err.count("\n") == 1
    (tmp_path / "empty.txt").write_text("no colon here\n")
    assert (
        cli_main(
            base + ["--db", str(tmp_path / "s.db"), "--auth-file", str(tmp_path / "empty.txt")]
        )
        == 2
    )
    assert "first line must be user:password" in capsys.readouterr().err
    auto = tmp_path / "auto.yaml"
    auto.write_text(json.dumps(TOY_CONFIG | {"export": {"box_side": "auto", "image_size": [9, 9]}}))
    assert (
        cli_main(
            [
                "serve",
                "--config",
                str(auto),
                "--db",
                str(tmp_path / "s.db"),
                "--auth-file",
                str(auth),
            ]
        )
        == 2
    )
    assert "box_side: auto" in capsys.readouterr().err
