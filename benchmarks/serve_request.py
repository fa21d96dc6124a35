"""CPU per /reduce request of clumpscout serve, in process (the ASGI app through starlette's
test client), one request at a time: what one request costs the server, without the
waiting and batching of a load run (benchmarks/serve_load.py).

    nice -n 5 .venv/bin/python benchmarks/serve_request.py --out results/serve_request \
        [--subjects 60] [--regime paper] [--measure 300] [--profile] [--no-docs]

A simulated project (the regime's universe as benchmarks/serve_load.py builds it,
``--subjects`` subjects, ~20 classifications each) is fed to the service's engine in
arrival order, all but its last ``--measure`` classifications (64 requests per batch,
refits in line); then the service is started on that database and the last ``--measure``
classifications are POSTed to /reduce one at a time, each with its subject's extracts so
far (Caesar's default reduction): per request the process CPU time (every thread: the
event loop, the threadpool that parses, the writer that assesses and commits) and the wall
time. ``--profile`` also writes ``reduce.prof`` (cProfile of the server's work in those
requests: parsing, the writer's batch, the reply's encoding) and prints its top functions. Replies are kept in ``replies.jsonl`` (to compare two versions' answers).

Writes ``serve_request.json`` in ``--out`` and its section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
for p in (REPO / "src", HERE, REPO / "tests"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import regimes as grid  # noqa: E402
import serve_load  # noqa: E402

log = logging.getLogger("clumpscout.serve_request")
AUTH = ("caesar", "request-cpu-credential")


def prefill(cfg, extracts, subjects: Path, db: Path) -> None:
    from clumpscout.service import settings as ss
    from clumpscout.service import store
    from clumpscout.service.engine import Engine
    from clumpscout.service.extracts import caesar_extracts

    s = ss.from_config(ss.check(copy.deepcopy(cfg)), subjects)
    engine = Engine(store.open_store(db, s.fingerprint()), s)
    so_far: dict = {}
    for lo in range(0, len(extracts), serve_load.BATCH):
        batch = []
        for e in extracts[lo : lo + serve_load.BATCH]:
            so_far.setdefault(e["subject_id"], []).append(e)
            batch.append(caesar_extracts(json.dumps(so_far[e["subject_id"]]).encode(), s))
        engine.process(batch)
    engine.con.close()


def measure(cfg, before, extracts, subjects: Path, db: Path, out: Path, profile: bool):
    """Each of ``extracts`` POSTed alone; per request: classifications, CPU s, wall s."""
    import pstats

    from starlette.testclient import TestClient

    from clumpscout.service import settings as ss
    from clumpscout.service.app import Credential, Service, build_app

    s = ss.from_config(ss.check(copy.deepcopy(cfg)), subjects)
    so_far: dict = {}
    for e in before:
        so_far.setdefault(e["subject_id"], []).append(e)
    rows = []
    profs = _profile_server() if profile else None
    with (
        TestClient(build_app(Service(s, db, Credential(*AUTH)))) as c,
        (out / "replies.jsonl").open("w") as f,
    ):
        for e in extracts:
            so_far.setdefault(e["subject_id"], []).append(e)
            body = json.dumps(so_far[e["subject_id"]]).encode()
            c0, w0 = time.process_time(), time.perf_counter()
            r = c.post(
                "/reduce", content=body, auth=AUTH, headers={"content-type": "application/json"}
            )
            rows.append(
                {
                    "classifications": len(so_far[e["subject_id"]]),
                    "cpu_ms": 1e3 * (time.process_time() - c0),
                    "wall_ms": 1e3 * (time.perf_counter() - w0),
                }
            )
            if r.status_code != 200:
                raise RuntimeError(r.text)
            f.write(r.text + "\n")
    if profs is not None:
        stats = pstats.Stats(profs[0])
        for p in profs[1:]:
            stats.add(p)
        stats.dump_stats(out / "reduce.prof")
        stats.sort_stats("cumulative").print_stats(60)
        stats.sort_stats("tottime").print_stats(40)
    return pd.DataFrame(rows)


def _profile_server() -> list:
    """cProfile the server's work in the threads that do it: the parsing (threadpool), the
    writer's batch (assessment, commit) and the reply's encoding (event loop); one profiler
    per part, enabled around each call (requests come one at a time)."""
    import cProfile
    import functools

    from clumpscout.service import app
    from clumpscout.service.engine import Engine

    profs = [cProfile.Profile() for _ in range(3)]

    def wrapped(fn, prof):
        @functools.wraps(fn)
        def call(*a, **kw):
            prof.enable()
            try:
                return fn(*a, **kw)
            finally:
                prof.disable()

        return call

    app.caesar_extracts = wrapped(app.caesar_extracts, profs[0])
    Engine.process = wrapped(Engine.process, profs[1])
    app._json = wrapped(app._json, profs[2])
    return profs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--subjects", type=int, default=60)
    p.add_argument("--regime", default="paper")
    p.add_argument("--measure", type=int, default=300, help="requests measured (the last ones)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--profile", action="store_true", help="cProfile the measured requests")
    p.add_argument("--out", required=True)
    p.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    args = p.parse_args(argv)
    from clumpscout.logs import setup_logging

    setup_logging()
    out = Path(args.out)
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    project = SimpleNamespace(
        regime=args.regime, subjects=args.subjects, policy="generative", setting=0.02,
        refit_every=None, seed=args.seed,
    )  # fmt: skip
    cfg, _, extracts, subjects = serve_load.build_project(project, work, grid.Timer(args.regime))
    cfg["serve"]["refit"] = "sync"
    db = work / "state.sqlite"
    for f in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        f.unlink(missing_ok=True)
    cut = len(extracts) - args.measure
    prefill(cfg, extracts[:cut], subjects, db)
    req = measure(cfg, extracts[:cut], extracts[cut:], subjects, db, out, args.profile)
    req.to_parquet(out / "requests.parquet", index=False)
    many = req.loc[req["classifications"] >= 15]
    report = {
        "regime": args.regime, "subjects": args.subjects, "requests": len(req),
        "median_classifications": float(req["classifications"].median()),
        "cpu_ms_median": round(float(req["cpu_ms"].median()), 2),
        "cpu_ms_median_15_plus": round(float(many["cpu_ms"].median()), 2),
        "wall_ms_median": round(float(req["wall_ms"].median()), 2),
        "wall_ms_p99": round(float(np.percentile(req["wall_ms"], 99)), 2),
    }  # fmt: skip
    (out / "serve_request.json").write_text(json.dumps(report, indent=2))
    log.info("%s", report)
    if not args.no_docs:
        from docs_table import markdown_table, write_section

        table = pd.DataFrame(
            [
                {
                    "requests": len(req),
                    "classifications per subject (median)": report["median_classifications"],
                    "CPU ms (median)": report["cpu_ms_median"],
                    "CPU ms, subjects with ≥ 15 (median)": report["cpu_ms_median_15_plus"],
                    "wall ms (median)": report["wall_ms_median"],
                    "wall ms (p99)": report["wall_ms_p99"],
                }
            ]
        )
        body = (
            f"One /reduce request at a time through the ASGI app in process (regime "
            f"`{args.regime}`, {args.subjects} subjects, the last {len(req)} classifications "
            "of the project, each POST carrying its subject's extracts so far): the CPU time "
            "of the whole process per request (parsing, assessment, commit, reply).\n\n"
            + markdown_table(table, floatfmt="{:.1f}")
        )
        write_section("serve-request", "Live service: CPU per request", body, sys.argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
