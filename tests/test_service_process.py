"""clumpscout serve as real processes on 127.0.0.1: kill -9 at random moments loses nothing,
SIGTERM finishes the requests in flight, TLS with uvicorn's own options, the credential in
no log and on no command line."""

from __future__ import annotations

import copy
import json
import os
import random
import signal
import socket
import sqlite3
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2
import pytest
import yaml
from caesar_feed import TOY_CONFIG, feed, in_order, toy_extracts
from conftest import REPO
from starlette.testclient import TestClient

from clumpscout.service import settings as ss
from clumpscout.service.app import Credential, Service, build_app

AUTH = ("caesar", "s3cret-pw-91x")
PY = sys.executable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_setup(tmp: Path, **serve) -> tuple[Path, Path]:
    cfg = copy.deepcopy(TOY_CONFIG)
    cfg["serve"].update(serve)
    (tmp / "config.yaml").write_text(yaml.safe_dump(cfg))
    auth = tmp / "auth.txt"
    auth.write_text(f"{AUTH[0]}:{AUTH[1]}\n")
    auth.chmod(0o600)
    return tmp / "config.yaml", auth


def wait_ready(url: str, proc_alive, timeout: float = 120.0, **kw) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if not proc_alive():
            raise AssertionError("the server died while starting")
        try:
            if httpx2.get(url + "/health", timeout=1.0, **kw).status_code == 200:
                return
        except httpx2.TransportError:
            time.sleep(0.02)
    raise AssertionError("the server did not start")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def snapshot(db: Path) -> dict:
    con = sqlite3.connect(db)
    q = {
        "extracts": "SELECT classification_id, extractor_key, subject_id, raw FROM extracts ORDER BY 1, 2",
        "classifications": "SELECT classification_id, subject_id, volunteer, g, n, skipped, boxes FROM classifications ORDER BY 1",
        "subjects": "SELECT subject_id, n, retired_at, reply FROM subjects ORDER BY 1",
        "skills": "SELECT version, after, volunteers, population FROM skills ORDER BY 1",
    }  # fmt: skip
    return {k: con.execute(v).fetchall() for k, v in q.items()}


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_nothing_and_changes_nothing(tmp_path):
    """A project of 150 classifications (a refit after 100, in line) fed one request at a
    time; the server is killed with SIGKILL at 20 random moments, started again on its
    database, and sent again what was not acknowledged. Every extract and classification is
    stored once, and the database (ranks, retirements, replies, skills) is the one an
    uninterrupted run makes."""
    extracts = in_order(toy_extracts(n_subjects=15, n_cls=10, seed=1))
    s = ss.from_config(ss.check(copy.deepcopy(TOY_CONFIG)))
    with TestClient(build_app(Service(s, tmp_path / "calm.db", Credential(*AUTH)))) as c:
        calm = feed(lambda ex: c.post("/reduce", json=ex, auth=AUTH).json(), extracts)
    config, auth = write_setup(tmp_path)
    db = tmp_path / "hit.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    args = ["--config", str(config), "--db", str(db), "--auth-file", str(auth), "--port", str(port)]
    zygote = subprocess.Popen(
        [PY, str(REPO / "tests" / "serve_zygote.py")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, cwd=tmp_path,
    )  # fmt: skip
    rng = random.Random(7)
    last: dict = {}
    so_far: dict = {}
    idx, kills, sent = 0, 0, 0
    try:
        assert zygote.stdout.readline().strip() == "ready"
        while idx < len(extracts):
            zygote.stdin.write(json.dumps(args) + "\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            wait_ready(url, lambda pid=pid: alive(pid))
            killer = None
            if kills < 20:
                killer = threading.Timer(rng.uniform(0.0, 0.5), os.kill, (pid, signal.SIGKILL))
                killer.start()
                kills += 1
            with httpx2.Client(base_url=url, auth=AUTH, timeout=60) as client:
                answered = 0
                # at most 6 answers per server that will be killed (then it waits for the
                # kill): all 20 kills happen however fast the machine is
                while idx < len(extracts) and (killer is None or answered < 6):
                    e = extracts[idx]
                    body = so_far.get(e["subject_id"], []) + [e]
                    try:
                        sent += 1
                        r = client.post("/reduce", json=body)
                    except httpx2.TransportError:
                        break  # killed: send it again to the next server
                    assert r.status_code == 200, r.text
                    so_far[e["subject_id"]] = body
                    last[e["subject_id"]] = r.json()
                    idx += 1
                    answered += 1
            if killer is not None:
                killer.join()
            else:
                os.kill(pid, signal.SIGTERM)
            while alive(pid):
                time.sleep(0.01)
    finally:
        zygote.stdin.close()
        zygote.wait(30)
    print(f"{kills} kills, {sent} requests for {len(extracts)} classifications")
    assert kills == 20 and sent > len(extracts)
    got, want = snapshot(db), snapshot(tmp_path / "calm.db")
    assert len(got["extracts"]) == len(got["classifications"]) == len(extracts)
    assert sorted(r[3] for r in got["classifications"]) == list(range(len(extracts)))
    for table in ("extracts", "classifications", "subjects", "skills"):
        assert got[table] == want[table], table
    assert last == calm


@pytest.mark.slow
def test_tls_sigterm_and_a_credential_that_shows_nowhere(tmp_path):
    """One server with uvicorn's TLS options and a self-signed certificate made here:
    https works (http does not); requests in flight when SIGTERM comes are answered and
    committed, then it exits 0; the password is in no log line and not on its command line."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
         str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        capture_output=True,
    )  # fmt: skip
    if made.returncode != 0:
        pytest.skip("openssl cannot make a certificate here")
    tls = ssl.create_default_context(cafile=str(cert))
    config, auth = write_setup(tmp_path)
    db = tmp_path / "s.db"
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    cmd = [PY, "-m", "clumpscout", "serve", "--config", str(config), "--db", str(db), "--auth-file",
           str(auth), "--port", str(port), "--ssl-certfile", str(cert), "--ssl-keyfile", str(key),
           "--access-log", "--log", str(log)]  # fmt: skip
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_ready(url, lambda: proc.poll() is None, verify=tls)
        assert AUTH[1] not in Path(f"/proc/{proc.pid}/cmdline").read_text()
        with pytest.raises(httpx2.TransportError):
            httpx2.get(f"http://127.0.0.1:{port}/health", timeout=5).raise_for_status()
        extracts = in_order(toy_extracts(n_subjects=8, n_cls=5, seed=2))
        with httpx2.Client(base_url=url, auth=AUTH, verify=tls, timeout=120) as c:
            assert c.get("/metrics").status_code == 200
            assert c.post("/reduce", json=[extracts[0]]).status_code == 200
            assert (
                httpx2.get(url + "/metrics", verify=tls, auth=(AUTH[0], "nope")).status_code == 401
            )
        results: dict = {}

        def post(e):
            with httpx2.Client(base_url=url, auth=AUTH, verify=tls, timeout=120) as c:
                try:
                    results[e["classification_id"]] = (
                        c.post("/reduce", json=[e]).status_code,
                        time.time(),
                    )
                except httpx2.TransportError:
                    results[e["classification_id"]] = (None, time.time())

        threads = [threading.Thread(target=post, args=(e,)) for e in extracts[1:]]
        for t in threads:
            t.start()
        while not results:  # the first answer: the others are on their way
            time.sleep(0.001)
        t_term = time.time()
        proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join()
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    answered = {cid for cid, (status, _) in results.items() if status == 200}
    assert all(status in (200, None) for status, _ in results.values())
    assert any(t > t_term for status, t in results.values() if status == 200), "none was in flight"
    con = sqlite3.connect(db)
    stored = {r[0] for r in con.execute("SELECT classification_id FROM classifications")}
    assert answered | {extracts[0]["classification_id"]} <= stored
    logged = log.read_text()
    assert "POST /reduce" in logged and "model loaded" in logged and "stopped:" in logged
    text = logged + (tmp_path / "stderr.txt").read_text()
    assert AUTH[1] not in text and "Authorization" not in text


@pytest.mark.slow
def test_background_refits_come_from_their_own_process_and_equal_the_inline_ones(tmp_path):
    """serve.refit: background: the first refit (after 100 classifications) is made by the
    refit process while requests go on and is taken up by later replies; its skills are
    those an in-line refit makes of the same classifications."""
    from clumpscout.service import store

    extracts = in_order(toy_extracts())
    runs = {}
    for mode in ("sync", "background"):
        s = ss.from_config(ss.check(copy.deepcopy(TOY_CONFIG) | {"serve": {"refit": mode}}))
        with TestClient(build_app(Service(s, tmp_path / f"{mode}.db", Credential(*AUTH)))) as c:
            post = lambda ex: c.post("/reduce", json=ex, auth=AUTH).json()  # noqa: E731
            last = feed(post, extracts[:150])
            if mode == "background":
                t0 = time.time()
                while "clumpscout_skills_version 0" in c.get("/metrics", auth=AUTH).text:
                    assert time.time() - t0 < 120, "no refit came"
                    time.sleep(0.1)
                last = feed(post, extracts[:160])  # 10 more: they use the new skills
        con = store.connect(tmp_path / f"{mode}.db")
        runs[mode] = (
            con.execute(
                "SELECT after, volunteers, population FROM skills WHERE version = 1"
            ).fetchone(),
            last,
        )
    assert runs["background"][0] == runs["sync"][0]
    assert runs["background"][1][extracts[159]["subject_id"]]["skills_version"] >= 1
