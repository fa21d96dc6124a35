"""Scale benchmark: the whole paper-scale DAG on 2 and on all cores, and extract and the
aggregation on 1, 3 and 10 replicated copies of the paper-scale project.

    python benchmarks/bench_scale.py --out /tmp/bench_scale
    python benchmarks/bench_scale.py --out DIR --cores 2 16 --copies 1 3 10 --max-rss-gb 20

**Whole DAG.** For each ``--cores`` value (default: 2 and every core of the machine) a
fresh copy of the project (bench_dag_scale.make_project: config.yaml with
resources/paper_scale.yaml, ``--subjects`` subjects) runs ``snakemake --cores C`` under
``/usr/bin/time -v``. From the run's Snakemake log come every job's start and end (1 s
resolution) and its inputs and outputs, hence:

* the *serial prefix*: from the first job's start to the end of the first subsample job
  (simulate -> extract -> boxes -> subsample: before it no aggregation can run), with the
  chain's own job seconds;
* the *longest job*, the *rule-seconds* (the sum of every job's seconds) against the wall
  time, and the *critical path* (the longest chain of job seconds through the DAG's
  dependencies): rule-seconds / critical path is the speed-up of unlimited cores, the ideal
  a machine with more cores can approach;
* per rule: jobs, seconds (sum, max) and the largest max RSS of its benchmark files;
* the numba compile seconds per job, when the jobs log them (``_measure.compile_seconds``
  reads "numba: N kernel(s) compiled in X s" lines; "not logged" otherwise).

**Copies.** The 2-core run's export and n = 20 boxes (or ``--project DIR``'s) replicated k
times with distinct subject, classification and volunteer ids per copy
(benchmarks/_replicate.py); ``clumpscout extract`` and ``clumpscout aggregate`` (both
models, the generative one with the gold standard, as in the DAG) on each under
``/usr/bin/time -v``: wall and CPU seconds, peak RSS and the ratios to k = 1. A run whose
process tree grows beyond ``--max-rss-gb`` is stopped and reported as such (a shared or
small machine). Timings on a loaded machine are noisy; CPU seconds and RSS much less.

Writes ``bench_scale.md`` (the tables) and ``bench_scale.json`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks import _replicate  # noqa: E402
from benchmarks.bench_dag_scale import make_project, read_benchmarks  # noqa: E402

try:  # the per-job numba compile seconds, where the workflow logs them
    from benchmarks._measure import compile_seconds
except ImportError:  # pragma: no cover - depends on the project's version
    compile_seconds = None

PAPER_SUBJECTS = 85286
#: the rules of the serial prefix, in order (a subsample job ends it)
PREFIX = ("simulate", "extract", "boxes", "subsample")
MODELS = ("generative", "paper")

# --------------------------------------------------------------------------- a Snakemake log

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?rule (\S+):$")
_FIELD = re.compile(r"^\s+(jobid|input|output|wildcards|log|benchmark): (.*)$")
_DONE = re.compile(r"^Finished jobid: (\d+) \(Rule: (\S+)\)$")


@dataclass
class Job:
    """One job of a Snakemake run, from its log."""

    rule: str
    start: float
    end: float = float("nan")
    wildcards: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    log: str = ""  # the job's log file (the first, if several)
    benchmark: str = ""  # its benchmark file

    @property
    def name(self) -> str:
        return f"{self.rule}[{self.wildcards}]" if self.wildcards else self.rule

    @property
    def seconds(self) -> float:
        return self.end - self.start


def parse_log(text: str) -> list[Job]:
    """Every finished job of a Snakemake log: rule, start, end (seconds since the epoch, 1 s
    resolution), wildcards, inputs and outputs."""
    jobs: dict[int, Job] = {}
    stamp = None
    current = None
    for line in text.splitlines():
        if m := _STAMP.match(line):
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
            current = None
        elif (m := _RULE.match(line)) and stamp is not None:
            current = Job(m.group(1), stamp)
        elif current is not None and (m := _FIELD.match(line)):
            key, value = m.groups()
            if key == "jobid":
                jobs[int(value)] = current
            elif key in ("wildcards", "benchmark"):
                setattr(current, key, value.strip())
            elif key == "log":
                current.log = value.split(",")[0].strip()
            else:
                paths = [v.strip() for v in value.split(",") if v.strip()]
                (current.inputs if key == "input" else current.outputs).extend(paths)
        elif (m := _DONE.match(line)) and stamp is not None:
            job = jobs.get(int(m.group(1)))
            if job is not None:
                job.end = stamp
            current = None
    return [j for j in jobs.values() if j.end == j.end]


def critical_path(jobs: list[Job]) -> tuple[float, list[Job]]:
    """The longest chain of job seconds through the jobs' dependencies (a job depends on the
    jobs that wrote one of its inputs): (seconds, the chain's jobs in order)."""
    order = sorted(jobs, key=lambda j: (j.start, j.end))  # a producer ends before its users start
    writer = {out: j for j in order for out in j.outputs}
    best: dict[int, tuple[float, Job | None]] = {}
    for j in order:
        deps = {id(writer[i]): writer[i] for i in j.inputs if i in writer and writer[i] is not j}
        prev = max(deps.values(), key=lambda d: best[id(d)][0], default=None)
        best[id(j)] = (j.seconds + (best[id(prev)][0] if prev is not None else 0.0), prev)
    if not best:
        return 0.0, []
    last = max(order, key=lambda j: best[id(j)][0])
    chain = [last]
    while (prev := best[id(chain[-1])][1]) is not None:
        chain.append(prev)
    return best[id(last)][0], chain[::-1]


def dag_summary(jobs: list[Job]) -> dict:
    """Serial prefix, longest job, rule-seconds, critical path and ideal speed-up of a run."""
    t0 = min(j.start for j in jobs)
    wall = max(j.end for j in jobs) - t0
    subsample = [j for j in jobs if j.rule == "subsample"]
    chain = {r: max((j.seconds for j in jobs if j.rule == r), default=float("nan")) for r in PREFIX}
    cp_s, cp = critical_path(jobs)
    rule_s = sum(j.seconds for j in jobs)
    longest = max(jobs, key=lambda j: j.seconds)
    return {
        "jobs": len(jobs),
        "wall_s": wall,
        "serial_prefix_s": min(j.end for j in subsample) - t0 if subsample else float("nan"),
        "prefix_job_s": chain,
        "longest_job": longest.name,
        "longest_job_s": longest.seconds,
        "rule_seconds": rule_s,
        "critical_path_s": cp_s,
        "critical_path": [j.name for j in cp],
        "ideal_speedup": rule_s / cp_s if cp_s > 0 else float("nan"),
        "achieved_parallelism": rule_s / wall if wall > 0 else float("nan"),
    }


def per_rule(jobs: list[Job], bench_rows: list[dict]) -> list[dict]:
    """Per rule: jobs, seconds (sum, max) and the largest max RSS of its benchmark files."""
    rows = {}
    for j in jobs:
        r = rows.setdefault(j.rule, {"rule": j.rule, "jobs": 0, "s_sum": 0.0, "s_max": 0.0})
        r["jobs"] += 1
        r["s_sum"] += j.seconds
        r["s_max"] = max(r["s_max"], j.seconds)
    for b in bench_rows:  # benchmark file names start with the rule (e.g. aggregate_n3)
        rule = max((r for r in rows if b["job"].startswith(r)), key=len, default=None)
        if rule is not None and b["max_rss_mb"] == b["max_rss_mb"]:
            rows[rule]["max_rss_mb"] = max(rows[rule].get("max_rss_mb", 0.0), b["max_rss_mb"])
    return sorted(rows.values(), key=lambda r: -r["s_sum"])


def compile_summary(results: Path) -> dict:
    """Numba compile seconds per job (max, mean, jobs) where the jobs log them."""
    if compile_seconds is None:
        return {"logged": False}
    comp = compile_seconds(results)
    warm = comp.pop("numba_cache", None)
    per_job = [s for _, s in comp.values()]
    return {
        "logged": bool(comp),
        "warm_up_s": warm[1] if warm else None,
        "jobs": len(per_job),
        "max_s": max(per_job, default=None),
        "mean_s": sum(per_job) / len(per_job) if per_job else None,
    }


# --------------------------------------------------------------------------- measured runs


def _tree_rss_mb(pid: int) -> float:
    """Resident memory of a process and all its descendants (MB), from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(stat[1]), []).append(int(d.name))
            rss[int(d.name)] = int(stat[21])
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


def run_measured(cmd: list[str], cwd: Path | None = None, max_rss_gb: float | None = None) -> dict:
    """Run ``cmd`` under ``/usr/bin/time -v`` (when present): wall and CPU seconds, peak RSS
    of its largest process (MB) and of the process tree (sampled); stopped when the tree
    grows beyond ``max_rss_gb``."""
    timev = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
    full = [timev, "-v", *cmd] if timev else cmd
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        full, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak = [0.0]
    killed = [False]

    def watch():
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_rss_mb(proc.pid))
            if max_rss_gb and peak[0] > max_rss_gb * 1024:
                killed[0] = True
                proc.kill()  # /usr/bin/time, and with it the job (its only child)
                for child in _children(proc.pid):
                    _kill(child)
                return
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    out, err = proc.communicate()
    watcher.join()
    wall = time.perf_counter() - t0
    res = {"wall_s": wall, "returncode": proc.returncode, "killed_over_rss": killed[0],
           "tree_peak_rss_mb": peak[0], "stdout_tail": out[-2000:], "stderr_tail": err[-3000:]}  # fmt: skip
    if m := re.search(r"Maximum resident set size \(kbytes\): (\d+)", err):
        res["max_rss_mb"] = int(m.group(1)) / 1024
    cpu = [float(x) for x in re.findall(r"(?:User|System) time \(seconds\): ([0-9.]+)", err)]
    if cpu:
        res["cpu_s"] = sum(cpu)
    return res


def _children(pid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except OSError:
        pass


# --------------------------------------------------------------------------- the two parts


def whole_dag(out: Path, cores: int, subjects: int, n: list[int] | None, max_rss_gb) -> dict:
    """Run the whole DAG in a fresh project copy on ``cores`` cores; its measurements."""
    project = make_project(out / f"dag_c{cores}", subjects, cores)
    if n is not None:  # fewer subsamples (a smoke run)
        cfg = yaml.safe_load((project / "config.yaml").read_text())
        cfg["subsample"]["n"] = n
        (project / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    # no --quiet: with it the log lacks the "Finished jobid" lines the job times come from
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores)]
    res = run_measured(cmd, cwd=project, max_rss_gb=max_rss_gb)
    if res["returncode"] != 0:
        raise SystemExit(f"the DAG on {cores} cores failed:\n{res['stderr_tail']}")
    logs = sorted((project / ".snakemake" / "log").glob("*.snakemake.log"))
    jobs = parse_log(logs[-1].read_text())
    if not jobs:
        raise SystemExit(f"no finished jobs in {logs[-1]}")
    return {
        "cores": cores,
        "project": str(project),
        "wall_s": res["wall_s"],
        "max_rss_mb": res.get("max_rss_mb"),
        "summary": dag_summary(jobs),
        "rules": per_rule(jobs, read_benchmarks(project)),
        "compile": compile_summary(project / "results"),
    }


def copies(out: Path, project: Path, ks: list[int], max_rss_gb, compress: bool) -> list[dict]:
    """extract and both aggregations on k replicated copies of ``project``'s results."""
    res = project / "results"
    universe = res / "universe"
    export = next(
        p
        for p in (universe / "classifications.csv", universe / "classifications.csv.zst")
        if p.exists()
    )
    boxes = res / "subsamples" / "n20" / "boxes.parquet"
    gold = res / "gold" / "gold.csv"
    rows = []
    for k in ks:
        d = out / f"copies_k{k}"
        if d.exists():
            shutil.rmtree(d)
        t0 = time.perf_counter()
        if k == 1 and not compress:
            cls, subj, bx, gd = export, universe / "subjects_export.csv", boxes, gold
        else:
            cls, subj = _replicate.replicate_export(
                export, universe / "subjects_export.csv", k, d, compress
            )
            bx = _replicate.replicate_boxes(boxes, k, d / "boxes.parquet")
            gd = _replicate.replicate_gold(gold, k, d / "gold.csv") if gold.exists() else gold
        rep_s = time.perf_counter() - t0
        clumpscout = [sys.executable, "-m", "clumpscout"]
        r = run_measured([*clumpscout, "extract", "--classifications", str(cls), "--subjects", str(subj), "--out", str(d / "clicks.parquet")], max_rss_gb=max_rss_gb)  # fmt: skip
        rows.append(_row("extract", k, r, rep_s))
        cfg = yaml.safe_load((project / "config.yaml").read_text())
        for model in MODELS:
            mcfg = d / f"config_{model}.yaml"
            mcfg.parent.mkdir(parents=True, exist_ok=True)
            c = {**cfg, "aggregate": {**cfg["aggregate"], "model": model}}
            mcfg.write_text(yaml.safe_dump(c, sort_keys=False))
            cmd = [*clumpscout, "aggregate", "--boxes", str(bx), "--out", str(d / f"agg_{model}"), "--config", str(mcfg)]  # fmt: skip
            if model == "generative" and gd.exists():
                cmd += ["--gold", str(gd)]
            r = run_measured(cmd, max_rss_gb=max_rss_gb)
            rows.append(_row(f"aggregate {model}", k, r, rep_s))
            labels = d / f"agg_{model}" / "labels.parquet"
            if labels.exists():
                import pyarrow.parquet as pq

                rows[-1]["labels"] = pq.ParquetFile(labels).metadata.num_rows
        if k > 1 or compress:  # the copies are big: keep only the measurements
            for p in d.iterdir():
                if p.is_file() and p.suffix in (".csv", ".zst", ".parquet"):
                    p.unlink()
    return rows


def _row(stage: str, k: int, r: dict, rep_s: float) -> dict:
    status = (
        "stopped over --max-rss-gb"
        if r["killed_over_rss"]
        else ("ok" if r["returncode"] == 0 else f"failed ({r['returncode']})")
    )
    if status.startswith("failed"):
        print(f"{stage} k={k} failed:\n{r['stderr_tail']}", file=sys.stderr)
    return {"stage": stage, "k": k, "status": status, "wall_s": r["wall_s"], "cpu_s": r.get("cpu_s"),
            "max_rss_mb": r.get("max_rss_mb"), "tree_peak_rss_mb": r["tree_peak_rss_mb"], "replicate_s": rep_s}  # fmt: skip


# --------------------------------------------------------------------------- tables


def _f(x, fmt=".0f") -> str:
    return "-" if x is None or x != x else format(x, fmt)


def markdown(dags: list[dict], rows: list[dict], meta: dict) -> str:
    """The benchmark's tables (docs/benchmarks.md#paper-scale)."""
    lines = [f"{meta['date']}, {meta['machine']}; {meta['note']}", ""]
    if dags:
        lines += ["| whole DAG | " + " | ".join(f"{d['cores']} cores" for d in dags) + " |",
                  "|---|" + "---:|" * len(dags)]  # fmt: skip
        s = [d["summary"] for d in dags]
        comp = [d["compile"] for d in dags]
        table = [
            ("wall (s)", [_f(d["wall_s"]) for d in dags]),
            ("jobs", [str(x["jobs"]) for x in s]),
            ("serial prefix: start to first subsample end (s)", [_f(x["serial_prefix_s"]) for x in s]),
            ("  simulate / extract / boxes / longest subsample (s)",
             ["/".join(_f(x["prefix_job_s"][r]) for r in PREFIX) for x in s]),
            ("longest job (s)", [f"{_f(x['longest_job_s'])} {x['longest_job']}" for x in s]),
            ("rule-seconds (sum of jobs, s)", [_f(x["rule_seconds"]) for x in s]),
            ("critical path (s)", [_f(x["critical_path_s"]) for x in s]),
            ("ideal speed-up (rule-seconds / critical path)", [_f(x["ideal_speedup"], ".1f") for x in s]),
            ("achieved parallelism (rule-seconds / wall)", [_f(x["achieved_parallelism"], ".1f") for x in s]),
            ("numba compile s per job (max / mean)",
             [f"{_f(c.get('max_s'), '.1f')} / {_f(c.get('mean_s'), '.1f')}" if c.get("logged") else "not logged" for c in comp]),
            ("peak RSS of one process (MB)", [_f(d["max_rss_mb"]) for d in dags]),
        ]  # fmt: skip
        lines += [f"| {name} | " + " | ".join(vals) + " |" for name, vals in table]
        lines += [
            "",
            f"critical path ({dags[0]['cores']} cores): " + " -> ".join(s[0]["critical_path"]),
            "",
        ]
        lines += [
            "| rule | jobs | seconds (sum) | seconds (max) | max RSS (MB) |",
            "|---|---:|---:|---:|---:|",
        ]
        for r in _figures_in_one_row(dags[0]["rules"]):
            lines.append(
                f"| {r['rule']} | {r['jobs']} | {_f(r['s_sum'])} | {_f(r['s_max'])} | {_f(r.get('max_rss_mb'))} |"
            )
        lines.append("")
    if rows:
        base = {(r["stage"]): r for r in rows if r["k"] == 1 and r["status"] == "ok"}
        lines += ["| stage | copies | status | wall (s) | CPU (s) | CPU / k x CPU(1) | peak RSS (MB) | labels |",
                  "|---|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in rows:
            b = base.get(r["stage"])
            ratio = (
                r["cpu_s"] / (r["k"] * b["cpu_s"])
                if b and r.get("cpu_s") and b.get("cpu_s")
                else None
            )
            lines.append(
                f"| {r['stage']} | {r['k']} | {r['status']} | {_f(r['wall_s'])} | {_f(r.get('cpu_s'))} | "
                f"{_f(ratio, '.2f')} | {_f(r.get('max_rss_mb'))} | {r.get('labels', '-')} |"
            )
    return "\n".join(lines) + "\n"


def _figures_in_one_row(rules: list[dict]) -> list[dict]:
    """The per-rule rows with the figure rules (fig_*) summed into one."""
    figs = [r for r in rules if r["rule"].startswith("fig_")]
    rows = [r for r in rules if not r["rule"].startswith("fig_")]
    if figs:
        rows.append({"rule": f"fig_* ({len(figs)} rules)", "jobs": sum(r["jobs"] for r in figs),
                     "s_sum": sum(r["s_sum"] for r in figs), "s_max": max(r["s_max"] for r in figs)})  # fmt: skip
    return sorted(rows, key=lambda r: -r["s_sum"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", type=Path, required=True, help="working folder (the tables are written here)"
    )
    ap.add_argument("--cores", type=int, nargs="*", default=sorted({2, os.cpu_count() or 2}),
                    help="whole-DAG runs (default: 2 and every core); none: skip the DAG")  # fmt: skip
    ap.add_argument(
        "--copies",
        type=int,
        nargs="*",
        default=[1, 3, 10],
        help="k for extract and aggregation; none: skip",
    )
    ap.add_argument(
        "--subjects", type=int, default=PAPER_SUBJECTS, help="subjects of the 1x project"
    )
    ap.add_argument("--subsample-n", type=int, nargs="*", default=None,
                    help="the DAG's subsample sizes (default: the paper scale's 3..20)")  # fmt: skip
    ap.add_argument("--project", type=Path, default=None,
                    help="a finished project to replicate (default: the first whole-DAG run)")  # fmt: skip
    ap.add_argument("--compress", action="store_true", help="replicated exports as .csv.zst")
    ap.add_argument(
        "--max-rss-gb", type=float, default=None, help="stop a run whose processes exceed this"
    )
    ap.add_argument("--note", default="timings provisional (a shared machine: load varies)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.now().strftime("%Y-%m-%d"),
        "machine": f"{platform.node()}: {os.cpu_count()} cores, {_mem_gb():.0f} GB, {platform.processor() or platform.machine()}",
        "load_before": os.getloadavg(),
        "note": args.note,
    }  # fmt: skip
    dags = []
    for c in args.cores:
        print(f"whole DAG, {c} cores ...", flush=True)
        dags.append(whole_dag(args.out, c, args.subjects, args.subsample_n, args.max_rss_gb))
    project = args.project or (Path(dags[0]["project"]) if dags else None)
    rows = []
    if args.copies:
        if project is None:
            raise SystemExit("--copies needs a whole-DAG run or --project")
        print(f"copies {args.copies} of {project} ...", flush=True)
        rows = copies(args.out, project, args.copies, args.max_rss_gb, args.compress)
    meta["load_after"] = os.getloadavg()
    text = markdown(dags, rows, meta)
    (args.out / "bench_scale.md").write_text(text)
    (args.out / "bench_scale.json").write_text(
        json.dumps({"meta": meta, "dags": dags, "copies": rows}, indent=2, default=str)
    )
    print(text)
    from benchmarks.docs_table import publish

    title = "The paper-scale DAG, and extract and aggregation on k copies"
    publish("paper-scale", title, text, __file__, argv)
    return 0


def _mem_gb() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return float("nan")


if __name__ == "__main__":
    raise SystemExit(main())
