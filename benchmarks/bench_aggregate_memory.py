"""Peak memory and time of the aggregation at 1x, 3x and 10x the project (replicated copies).

    .venv/bin/python benchmarks/bench_aggregate_memory.py \\
        --boxes results/subsamples/n20/boxes.parquet --gold results/gold/gold.csv \\
        --work /tmp/aggmem --ks 1 3 10 --models generative paper

For every k, :mod:`_replicate` writes k independent copies of the boxes table (and of the
gold standard) under ``--work`` once; every (k, model) is then one ``clumpscout aggregate``
process (the command line, which reads the file block by block) run under
``/usr/bin/time -v``: peak RSS (its "Maximum resident set size"), wall time, and from
report.json the cycles and their seconds; ``rss.tsv`` beside the outputs samples the RSS
every second (to read beside the log's timestamps: which phase peaks). A run whose RSS
passes ``--kill-gb`` is killed and reported as such. Prints a Markdown table (docs/benchmarks.md#aggregate-memory): bytes
per input row are (peak − the k = 1 base) / rows, so a project's need is base + rows × that.

Timings depend on the machine's load (one run at a time, ``nice``); peak RSS does not.
``--python`` runs another checkout's interpreter (e.g. the code before a change, with
``PYTHONPATH`` set by the caller). ``--clean`` deletes the replicated tables at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks._replicate import replicate_boxes, replicate_gold  # noqa: E402

ROOT = REPO


def _config(model: str, work: Path) -> Path:
    cfg = yaml.safe_load((ROOT / "config.yaml").read_text())
    cfg["aggregate"]["model"] = model
    path = work / f"config_{model}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` and its children (kB), from /proc."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def _children(pid: int) -> list[int]:
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    out = [int(k) for k in kids]
    for k in list(out):
        out += _children(k)
    return out


def run_one(python: str, boxes: Path, gold: Path | None, config: Path, out: Path, kill_gb: float):
    """One aggregation under /usr/bin/time -v: dict of peak_gb, wall_s, killed, cycles."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = ["/usr/bin/time", "-v", python, "-m", "clumpscout", "aggregate"]
    cmd += ["--boxes", str(boxes), "--out", str(out), "--config", str(config)]
    if gold is not None:
        cmd += ["--gold", str(gold)]
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    t0 = time.perf_counter()
    with open(out / "run.log", "w") as log, open(out / "rss.tsv", "w") as trace:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        killed = False
        trace.write("time\trss_mb\n")
        while proc.poll() is None:
            rss = _rss_kb(proc.pid)
            # the RSS over time, to put beside the log's timestamps (which phase peaks)
            trace.write(f"{time.strftime('%H:%M:%S')}\t{rss / 1024:.0f}\n")
            trace.flush()
            if rss > kill_gb * 1024**2:
                for k in _children(proc.pid):
                    os.kill(k, signal.SIGKILL)
                killed = True
            time.sleep(1.0)
    wall = time.perf_counter() - t0
    text = (out / "run.log").read_text()
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    peak = int(m.group(1)) / 1024**2 if m else float("nan")
    res = {"peak_gb": peak, "wall_s": wall, "killed": killed, "rc": proc.returncode}
    rep = out / "report.json"
    if not killed and proc.returncode == 0 and rep.exists():
        r = json.loads(rep.read_text())
        cyc = r["cycles"]
        res.update(
            rows=r["rows"],
            boxes=r["boxes"],
            labels=r["labels"],
            cycles=len(cyc),
            s_per_cycle=sum(c["seconds"] for c in cyc) / max(len(cyc), 1),
            aggregate_s=r["seconds"],
        )
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--boxes", required=True, help="the 1x boxes table (Parquet)")
    ap.add_argument("--gold", default=None, help="the 1x gold standard (CSV), copied too")
    ap.add_argument("--work", required=True, help="scratch folder for the copies and outputs")
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 3, 10])
    ap.add_argument("--models", nargs="+", default=["generative", "paper"])
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--kill-gb", type=float, default=10.0, help="kill a run above this RSS")
    ap.add_argument("--tag", default="", help="label of this code version in the table")
    ap.add_argument("--clean", action="store_true", help="delete the copies at the end")
    a = ap.parse_args(argv)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in a.ks:
        kdir = work / f"x{k}"
        boxes = kdir / "boxes.parquet"
        gold = kdir / "gold.csv" if a.gold else None
        if not boxes.exists():
            replicate_boxes(a.boxes, k, boxes)
            print(f"replicated x{k}: {boxes}", flush=True)
            if a.gold:
                replicate_gold(a.gold, k, gold)
        for model in a.models:
            out = kdir / f"out_{model}{a.tag}"
            res = run_one(a.python, boxes, gold, _config(model, work), out, a.kill_gb)
            res.update(k=k, model=model)
            rows.append(res)
            print(json.dumps(res), flush=True)
    base = {r["model"]: r for r in rows if r["k"] == min(a.ks) and not r["killed"]}
    lines = [
        "| k | model | rows | peak RSS (GB) | wall (s) | time / 1x | s per cycle | bytes per row above 1x |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        b = base.get(r["model"])
        ratio = r["wall_s"] / b["wall_s"] if b else float("nan")
        per_row = (
            (r["peak_gb"] - b["peak_gb"]) * 1024**3 / (r["rows"] - b["rows"])
            if b and r.get("rows") and r["rows"] > b["rows"]
            else float("nan")
        )
        killed = " (killed)" if r["killed"] else ""
        lines.append(
            f"| {r['k']} | {r['model']} | {r.get('rows', float('nan')):,} | "
            f"{r['peak_gb']:.2f}{killed} | {r['wall_s']:.0f} | {ratio:.2f} | "
            f"{r.get('s_per_cycle', float('nan')):.3f} | {per_row:.0f} |"
        )
    print("\n" + "\n".join(lines))
    from benchmarks.docs_table import publish

    body = (
        f"k independent copies of `{a.boxes}` (`_replicate.py`: subjects, classifications and "
        "volunteers distinct per copy, arriving side by side), one `clumpscout aggregate` at a "
        "time under `/usr/bin/time -v`. Bytes per row above 1x: (peak − the 1x peak) / (rows − "
        "the 1x rows), so a project of R rows of the boxes table needs about the 1x peak plus R "
        "times that. Peak RSS does not depend on the machine's load; the wall times do.\n\n"
        + "\n".join(lines)
    )
    publish(
        "aggregate-memory",
        "Aggregation memory and time on k copies of a project",
        body,
        __file__,
        argv,
    )
    if a.clean:
        for k in a.ks:
            shutil.rmtree(work / f"x{k}", ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
