"""Load on clumpscout serve: a simulated project sent through HTTP the way Caesar sends it.

    nice -n 5 .venv/bin/python benchmarks/serve_load.py --subjects 10000 --out results/serve_load \
        [--regime paper] [--clients 8] [--seed S] [--limit N] [--keep-work]

1. **The project**: the regime's universe (``resources/regimes/<regime>.yaml`` over
   config.yaml, as benchmarks/replay_regimes.py makes it) with ``--subjects`` subjects, every
   classification; its boxes (extract → subjects → boxes) with the volunteers Caesar knows
   (user id; a volunteer who is not logged in is their classification's own); its extracts
   made by panoptes-aggregation's ``point_extractor_by_frame`` (tests/caesar_feed.py) from the
   classifications extract kept; a subjects table (box side and image size per subject, as in
   the boxes).
2. **The replay** of those boxes with the service's policy (``serve:`` of the regime config:
   generative, eps 0.02 by default) and the regime's refit points: every subject's
   retirement point.
3. **Equality**: the service's engine (the writer of ``clumpscout serve``, in process, refits
   in line: ``serve.refit: sync``) fed every classification in arrival order, 64 requests
   per batch as the writer takes them: its retirement points against the replay's.
4. **Load**: ``clumpscout serve`` started as a server (127.0.0.1, background refits in their
   own process) and ``--clients`` concurrent clients POSTing to /reduce in arrival order,
   each request carrying its subject's extracts so far; a retired subject gets no more
   (Caesar's rule retires it). Throughput, latency p50 / p95 / p99 with and without a refit
   running, the server's peak memory (and the refit process's), the database's size, and
   how many retirement points equal the replay's (they need not: the refits see only the
   classifications sent, and a background refit lands after its point).

Writes ``serve_load.json`` and ``requests.parquet`` (every request: start, end, phase) in
``--out`` and its section of docs/benchmarks.md (benchmarks/docs_table.py).
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (REPO / "src", HERE, REPO / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import regimes as grid  # noqa: E402
import replay_regimes as replay_bench  # noqa: E402
from caesar_feed import boxes_as_caesar_sees_them, export_extracts, in_order  # noqa: E402
from docs_table import markdown_table, write_section  # noqa: E402

log = logging.getLogger("clumpscout.serve_load")
AUTH = ("caesar", "load-test-credential")
BATCH = 64


def build_project(args, work: Path, timer) -> tuple[dict, pd.DataFrame, list, Path]:
    cfg = grid.regime_config(args.regime)
    cfg["simulate"].update(n_subjects=int(args.subjects), n_expert_subjects=0)
    cfg["serve"] = {**cfg.get("serve", {}), "policy": args.policy, "setting": args.setting}
    if cfg["replay"].get("horizon") is None:  # a live service cannot know each subject's count
        cfg["replay"]["horizon"] = cfg["replay"].get("caesar_cap", 20)
    if args.refit_every:
        cfg["replay"]["refit_every"] = args.refit_every
    seed = int(args.seed if args.seed is not None else cfg.get("seed", 20231))
    universe = work / "universe"
    boxes = boxes_as_caesar_sees_them(replay_bench.full_boxes(cfg, seed, universe, timer))
    ex = cfg["extract"]
    with timer("extracts"):
        extracts = in_order(
            export_extracts(universe / "classifications.csv", ex["clump_task"], ex["tools"],
                            keep=boxes["classification_id"])
        )  # fmt: skip
    per = boxes.groupby("subject_id").first()
    subjects = work / "subjects.parquet"
    pd.DataFrame(
        {
            "subject_id": per.index.to_numpy(),
            "box_side": per["box_side"].to_numpy(float),
            "image_width": per["image_width"].to_numpy(float),
            "image_height": per["image_height"].to_numpy(float),
            "image_size_source": "boxes",
        }
    ).to_parquet(subjects, index=False)
    return cfg, boxes, extracts, subjects


def replay_points(cfg, boxes, subjects: Path, timer) -> pd.Series:
    from clumpscout.evaluation import replay as rp
    from clumpscout.service import settings as ss

    s = ss.from_config(ss.check(copy.deepcopy(cfg)), subjects)
    with timer("replay"):
        run = rp.run_replay(boxes, s.params, rp.Settings.from_dict(cfg["replay"]))
    return rp.retirement_points(run, s.policy, s.params).set_index("subject_id")


def engine_points(cfg, extracts, subjects: Path, work: Path, timer) -> pd.Series:
    """Every classification through the service's engine in arrival order, refits in line."""
    from clumpscout.service import settings as ss
    from clumpscout.service import store
    from clumpscout.service.engine import Engine
    from clumpscout.service.extracts import caesar_extracts

    c = copy.deepcopy(cfg)
    c["serve"]["refit"] = "sync"
    s = ss.from_config(ss.check(c), subjects)
    db = work / "engine.db"
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    engine = Engine(store.open_store(db, s.fingerprint()), s)
    so_far: dict = {}
    with timer("engine, every classification, refits in line"):
        for lo in range(0, len(extracts), BATCH):
            batch = []
            for e in extracts[lo : lo + BATCH]:
                so_far.setdefault(e["subject_id"], []).append(e)
                batch.append(caesar_extracts(json.dumps(so_far[e["subject_id"]]).encode(), s))
            engine.process(batch)
    rows = engine.con.execute("SELECT subject_id, COALESCE(retired_at, n) FROM subjects").fetchall()
    return pd.Series(dict(rows))


# ------------------------------------------------------------------ the load run


def free_port() -> int:
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        return sk.getsockname()[1]


def _rss_kb(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (its own threads)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class Monitor(threading.Thread):
    """Polls /metrics: when a background refit runs, and the refit process's memory."""

    def __init__(self, url: str, pid: int):
        super().__init__(daemon=True)
        self.url, self.pid = url, pid
        self.stop = threading.Event()
        self.refit: list[tuple[float, int, int]] = []  # (time, running, skills version)
        self.refit_peak_kb = 0
        self.refit_cpu_s = 0.0

    def run(self):
        import httpx2

        with httpx2.Client(base_url=self.url, auth=AUTH, timeout=30) as c:
            while not self.stop.is_set():
                try:
                    text = c.get("/metrics").text
                except httpx2.HTTPError:
                    time.sleep(0.1)
                    continue
                val = {
                    line.split()[0]: float(line.split()[1])
                    for line in text.splitlines()
                    if line and not line.startswith("#") and "{" not in line
                }
                self.refit.append(
                    (
                        time.time(),
                        int(val["clumpscout_refit_running"]),
                        int(val["clumpscout_skills_version"]),
                    )
                )
                for child in _children(self.pid):
                    self.refit_peak_kb = max(self.refit_peak_kb, _rss_kb(child))
                    self.refit_cpu_s = max(self.refit_cpu_s, _cpu_s(child))
                time.sleep(0.2)


def load_run(args, cfg, extracts, subjects: Path, work: Path) -> tuple[pd.DataFrame, dict]:
    import httpx2

    c = copy.deepcopy(cfg)
    c["serve"]["refit"] = "background"
    config = work / "serve.yaml"
    config.write_text(yaml.safe_dump(c))
    auth = work / "auth.txt"
    auth.write_text(f"{AUTH[0]}:{AUTH[1]}\n")
    auth.chmod(0o600)
    db = work / "serve.db"
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "clumpscout", "serve", "--config", str(config), "--db", str(db),
           "--auth-file", str(auth), "--subjects", str(subjects), "--port", str(port),
           "--log", str(work / "serve.log")]  # fmt: skip
    server = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while True:
        try:
            if httpx2.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx2.TransportError:
            if server.poll() is not None or time.time() - t0 > 300:
                raise RuntimeError("the server did not start") from None
            time.sleep(0.1)
    monitor = Monitor(url, server.pid)
    monitor.start()
    cpu0, client0 = _cpu_s(server.pid), time.process_time()
    lock = threading.Lock()
    cursor = [0]
    so_far: dict = {}
    retired: set = set()
    rows: list = []
    errors: list = []

    def client():
        with httpx2.Client(base_url=url, auth=AUTH, timeout=120) as http:
            while True:
                with lock:
                    while (
                        cursor[0] < len(extracts) and extracts[cursor[0]]["subject_id"] in retired
                    ):
                        cursor[0] += 1  # Caesar retired it: no more classifications
                    if cursor[0] >= len(extracts):
                        return
                    e = extracts[cursor[0]]
                    cursor[0] += 1
                    body = so_far.setdefault(e["subject_id"], [])
                    body.append(e)
                    payload = json.dumps(body).encode()
                t1 = time.time()
                r = http.post(
                    "/reduce", content=payload, headers={"content-type": "application/json"}
                )
                t2 = time.time()
                if r.status_code != 200:
                    errors.append((r.status_code, r.text[:200]))
                    continue
                reply = r.json()
                with lock:
                    rows.append((t1, t2, reply["skills_version"], e["subject_id"]))
                    if reply["retire"]:
                        retired.add(e["subject_id"])

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    time.sleep(1.0)
    monitor.stop.set()
    monitor.join()
    peak_kb = _rss_kb(server.pid, "VmHWM")
    server_cpu, client_cpu = _cpu_s(server.pid) - cpu0, time.process_time() - client0
    server.send_signal(signal.SIGTERM)
    server.wait(300)
    req = pd.DataFrame(rows, columns=["start", "end", "skills_version", "subject_id"])
    req["seconds"] = req["end"] - req["start"]
    mon = pd.DataFrame(monitor.refit, columns=["t", "running", "version"])
    running = mon.loc[mon["running"] == 1, "t"].to_numpy()
    # a request is in the refit phase when a refit was seen running within 0.25 s of it
    near = np.searchsorted(running, req["start"].to_numpy() - 0.25)
    hit = np.zeros(len(req), bool)
    if len(running):
        last = running[np.minimum(near, len(running) - 1)]
        hit = (near < len(running)) & (last <= req["end"].to_numpy() + 0.25)
    req["phase"] = np.where(hit, "refit running", "no refit")
    import sqlite3

    con = sqlite3.connect(db)
    points = pd.Series(
        dict(con.execute("SELECT subject_id, COALESCE(retired_at, n) FROM subjects").fetchall())
    )
    refits = con.execute("SELECT version, after, seconds FROM skills ORDER BY version").fetchall()
    con.close()
    size = sum(Path(f).stat().st_size for f in (db, f"{db}-wal") if Path(f).exists())
    report = {
        "requests": int(len(req)),
        "errors": len(errors),
        "error_examples": errors[:5],
        "sent_share": round(len(req) / len(extracts), 4),
        "wall_s": round(wall, 1),
        "per_second": round(len(req) / wall, 1),
        "server_cpu_s": round(server_cpu, 1),
        "refit_process_cpu_s": round(monitor.refit_cpu_s, 1),
        "client_cpu_s": round(client_cpu, 1),
        "requests_per_server_cpu_s": round(len(req) / max(server_cpu, 1e-9), 1),
        "load_average": os.getloadavg()[0],
        "server_peak_mb": round(peak_kb / 1024, 1),
        "refit_process_peak_mb": round(monitor.refit_peak_kb / 1024, 1),
        "db_mb": round(size / 2**20, 1),
        "refits": [{"version": v, "after": a, "seconds": round(s, 1)} for v, a, s in refits],
        "points": points,
    }
    return req, report


def latency_table(req: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for phase, g in [("all", req), *req.groupby("phase")]:
        ms = g["seconds"].to_numpy() * 1e3
        span = g["end"].max() - g["start"].min()
        rows.append(
            {
                "phase": phase,
                "requests": len(g),
                "p50 ms": float(np.percentile(ms, 50)),
                "p95 ms": float(np.percentile(ms, 95)),
                "p99 ms": float(np.percentile(ms, 99)),
                "max ms": float(ms.max()),
                "per second (whole run)": len(g) / span if phase == "all" else float("nan"),
                "share": f"{len(g) / len(req):.1%}",
            }
        )
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--subjects", type=int, default=10_000)
    p.add_argument("--regime", default="paper")
    p.add_argument("--policy", default="generative")
    p.add_argument("--setting", type=float, default=0.02)
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (Caesar's workers)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--refit-every", type=int, default=None, help="replay.refit_every (default: the regime's)"
    )
    p.add_argument("--limit", type=int, default=None, help="send only the first N classifications")
    p.add_argument("--skip-equality", action="store_true", help="no in-process equality run")
    p.add_argument("--out", required=True)
    p.add_argument("--keep-work", action="store_true")
    p.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = p.parse_args(argv)
    from clumpscout.logs import setup_logging

    setup_logging()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    timer = grid.Timer(args.regime)
    cfg, boxes, extracts, subjects = build_project(args, work, timer)
    if args.limit:
        extracts = extracts[: args.limit]
        boxes = boxes[boxes["classification_id"].isin({e["classification_id"] for e in extracts})]
    want = replay_points(cfg, boxes, subjects, timer)
    report: dict = {
        "regime": args.regime, "subjects": int(boxes["subject_id"].nunique()),
        "classifications": len(extracts), "clients": args.clients,
        "policy": f"{args.policy} {args.setting:g}", "refit_every": cfg["replay"]["refit_every"],
        "refit_growth": cfg["replay"]["refit_growth"],
        "replay_effort": round(float(want["n_used"].sum() / want["n_total"].sum()), 4),
    }  # fmt: skip
    if not args.skip_equality:
        got = engine_points(cfg, extracts, subjects, work, timer)
        same = got.reindex(want.index) == want["n_used"]
        report["engine_equal"] = int(same.sum())
        log.info(
            "engine fed everything: %d of %d retirement points equal the replay's",
            same.sum(),
            len(want),
        )
    with timer("load through HTTP"):
        req, load = load_run(args, cfg, extracts, subjects, work)
    points = load.pop("points")
    agree = points.reindex(want.index) == want["n_used"]
    early_here = points.reindex(want.index) < want["n_total"]
    report.update(load)
    report["load_equal"] = int(agree.sum())
    report["load_retired_early"] = int(early_here.sum())
    report["replay_retired_early"] = int((want["n_used"] < want["n_total"]).sum())
    report["load_later"] = int((points.reindex(want.index) > want["n_used"]).sum())
    report["load_earlier"] = int((points.reindex(want.index) < want["n_used"]).sum())
    report["seconds"] = {k: round(v, 1) for k, v in timer.seconds.items()}
    req.to_parquet(out / "requests.parquet", index=False)
    per_subject = want[["n_used", "n_total"]].rename(columns={"n_used": "replay"})
    per_subject["load"] = points.reindex(want.index)
    if not args.skip_equality:
        per_subject["engine"] = got.reindex(want.index)
    per_subject.to_parquet(out / "points.parquet")
    d = (per_subject["load"] - per_subject["replay"]).to_numpy()
    bins = [("≤ −3", d <= -3), ("−2", d == -2), ("−1", d == -1), ("0", d == 0), ("+1", d == 1),
            ("+2", d == 2), ("≥ +3", d >= 3)]  # fmt: skip
    diff = pd.DataFrame({"load − replay (classifications)": [b for b, _ in bins],
                         "subjects": [int(m.sum()) for _, m in bins]})  # fmt: skip
    (out / "serve_load.json").write_text(json.dumps(report, indent=2, default=str))
    lat = latency_table(req)
    log.info("\n%s", lat.to_string())
    if not args.no_docs:
        summary = pd.DataFrame(
            [
                {
                    "subjects": report["subjects"], "classifications": report["classifications"],
                    "sent (retired get no more)": report["requests"], "clients": args.clients,
                    "per second": report["per_second"],
                    "per server CPU second": report["requests_per_server_cpu_s"],
                    "load average": round(report["load_average"], 1),
                    "server peak MB": report["server_peak_mb"],
                    "refit process peak MB": report["refit_process_peak_mb"],
                    "database MB": report["db_mb"], "refits": len(report["refits"]),
                }
            ]
        )  # fmt: skip
        agreement = pd.DataFrame(
            [
                {"run": "engine, every classification, refits in line (serve.refit: sync)",
                 "retirement points equal to the replay's": report.get("engine_equal", "not run"),
                 "of": report["subjects"]},
                {"run": "HTTP load, retired subjects get no more, background refits",
                 "retirement points equal to the replay's": report["load_equal"], "of": report["subjects"]},
            ]
        )  # fmt: skip
        body = "\n\n".join(
            [
                f"A simulated project (regime `{args.regime}`, policy {report['policy']}, skills "
                f"refitted every {report['refit_every']} classifications) sent to `clumpscout serve` "
                f"on 127.0.0.1 by {args.clients} concurrent clients in arrival order, each POST "
                "carrying its subject's extracts so far.",
                markdown_table(summary, floatfmt="{:.1f}"),
                "Latency of /reduce (client side), with and without a background refit running:",
                markdown_table(lat, floatfmt="{:.1f}"),
                "The load average counts the benchmark itself: the server, its refit process and "
                "the clients share the machine's cores. Per server CPU second is the rate a "
                "dedicated core would give.",
                "Retirement points against `clumpscout replay` on the same boxes:",
                markdown_table(agreement),
                "Where the load run's retirement points differ, by how much:",
                markdown_table(diff),
                f"In the load run {report['load_later']} subjects retired later and "
                f"{report['load_earlier']} earlier than in the replay. A retired subject gets no more "
                "classifications, so the refit points (counts of classifications received) come later "
                "in arrival order than the replay's, which counts every classification: at the same "
                "moment a classification is judged with older skills, fitted on fewer classifications "
                "(the retired subjects' later ones never arrive); a background refit is also taken "
                "up some classifications after its point, and the clients' concurrency reorders "
                "arrivals a little. The engine run (every classification, refits in line) shows that "
                "the service itself retires where the replay does.",
            ]
        )
        write_section(
            "serve_load", "Live service under load (clumpscout serve)", body, command=sys.argv
        )
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({k: v for k, v in report.items() if k != "refits"}, default=str))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.exit(main())
