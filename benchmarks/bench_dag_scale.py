"""Whole-DAG benchmark: where a run's time and memory go, per rule and per aggregation job.

Runs the complete workflow on simulated universes of the given sizes in fresh copies of the
project (cold caches: no numba cache, no results), then reports, per run:

* **per rule**: jobs, wall seconds (sum and largest job), CPU seconds (sum) and the peak
  resident memory of the rule's largest process. Wall seconds come from each job's
  ``benchmark:`` file; CPU seconds and peak RSS from the ``job resources:`` line every
  workflow script logs last (exact, from the kernel: the benchmark files sample a job only
  every 30 s), else from the benchmark file;
* **per aggregation job** (rules ``aggregate``, one job per n that fits every model, and
  ``replay_labels``): its CPU seconds split into start-up (interpreter, Snakemake's
  preamble, imports: once per job), reading the boxes table, preparing it, the cycles, the
  calibration, writing (the assignments table and ``clumps.ecsv`` also on their own), each
  summed over the job's fits, and the rest, read from the lines the job logs
  (``... done in W s (CPU C s)``); and the share of start-up, reading and writing;
* what limits a run on many cores (``_measure.critical_path_rows``).

On a shared machine wall seconds vary with the load, CPU seconds much less: compare CPU.

    python benchmarks/bench_dag_scale.py --sizes 85286 --out /tmp/scale     # run, then report
    python benchmarks/bench_dag_scale.py --report /tmp/scale/s85286 --docs  # a finished run

Sizes are numbers of subjects; 85,286 with resources/paper_scale.yaml's other settings
(n = 3..20, 1,000 expert subjects, both models, the replay) is the paper-scale run. With
``--docs`` the tables go to docs/benchmarks.md (section ``dag_scale``, or
``dag-scale-<label>`` with ``--label``).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks._measure import critical_path_rows  # noqa: E402

COPY = ["Snakefile", "config.yaml", "workflow", "scripts", "src", "envs", "resources"]
#: the rules whose jobs are aggregations (scripts/aggregate.py)
AGGREGATION_RULES = ("aggregate", "replay_labels")


def make_project(dest: Path, n_subjects: int, cores: int) -> Path:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for name in COPY:
        src = REPO / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    paper = yaml.safe_load((REPO / "resources/paper_scale.yaml").read_text())
    for key, value in paper.items():
        if isinstance(value, dict):
            cfg.setdefault(key, {}).update(value)
        else:
            cfg[key] = value
    cfg["simulate"]["n_subjects"] = n_subjects
    (dest / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return dest


def _float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def _bench_file(tsv: Path) -> dict | None:
    """The last row of a benchmark file: wall seconds ``s``, ``max_rss_mb`` and ``cpu_s``
    (Snakemake's samples); None when absent or empty."""
    try:
        with tsv.open() as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
    except OSError:
        return None
    if not rows:
        return None
    row = rows[-1]
    return {
        "s": _float(row["s"]),
        "max_rss_mb": _float(row.get("max_rss")),
        "cpu_s": _float(row.get("cpu_time")),
    }


def read_benchmarks(project: Path) -> list[dict]:
    """Every benchmark file below ``results/benchmarks``: job (its name without ``.tsv``),
    wall seconds ``s``, ``max_rss_mb`` and ``cpu_s`` (Snakemake's samples)."""
    root = project / "results/benchmarks"
    rows = []
    for tsv in sorted(root.rglob("*.tsv")):
        b = _bench_file(tsv)
        if b is not None:
            rows.append({"job": str(tsv.relative_to(root))[:-4], **b})
    return rows


# ------------------------------------------------------------------ a job's own log lines

_RESOURCES = re.compile(
    r"job resources: wall \S+ s, CPU ([0-9.]+) s, peak RSS ([0-9.]+) MB; "
    r"children CPU ([0-9.]+) s, peak RSS ([0-9.]+) MB"
)
_DONE = re.compile(r"INFO \S+: (.+?),? done in ([0-9.?]+) s \(CPU ([0-9.]+) s\)")


def job_resources(log: Path) -> dict | None:
    """CPU seconds (the job's own and its children's) and peak RSS (MB, its largest
    process) from the ``job resources:`` line a workflow script logs last; None without."""
    try:
        found = _RESOURCES.findall(log.read_text(errors="replace"))
    except OSError:
        return None
    if not found:
        return None
    cpu, rss, kid_cpu, kid_rss = map(float, found[-1])
    return {"cpu_s": cpu + kid_cpu, "max_rss_mb": max(rss, kid_rss)}


def _phase(what: str) -> str | None:
    """The phase of the aggregation split a ``... done in`` line belongs to."""
    if what == "start-up":
        return "start-up"
    if what.startswith("reading ") and what.endswith(" rows"):
        return "reading"
    if what.startswith("preparing "):
        return "preparing"  # reading included: subtracted below
    if what == "cycles":
        return "cycles"
    if what.startswith("calibration"):
        return "calibration"
    if what.startswith("writing "):
        return "writing " + what.split(" ", 1)[1]
    return None


def aggregation_split(log: Path) -> dict[str, float]:
    """CPU seconds per phase of one aggregation job, from its log (see the module docstring):
    a job that fits several models logs each phase once per fit, summed here (the start-up
    once; a fit's own ``aggregation by the <model> model ... done`` line is no phase);
    ``writing`` sums every file, ``writing assignments.parquet`` and ``writing clumps.ecsv``
    are also given alone."""
    out: dict[str, float] = {}
    for what, _wall, cpu in _DONE.findall(log.read_text(errors="replace")):
        phase = _phase(what)
        if phase is not None:
            out[phase] = out.get(phase, 0.0) + float(cpu)
    if "preparing" in out:
        out["preparing"] -= out.get("reading", 0.0)
    out["writing"] = sum(v for k, v in out.items() if k.startswith("writing "))
    return out


# ------------------------------------------------------------------ the run's jobs


_FIT = re.compile(
    r"INFO \S+: aggregation by the (\S+) model \(\d+ of \d+\) done in ([0-9.]+) s "
    r"\(CPU ([0-9.]+) s\)"
)


def fit_table(jobs: list[dict]) -> pd.DataFrame:
    """Per aggregation job, each model's fit (its ``aggregation by the <model> model ... done``
    line: reading, preparing, cycles, calibration and writing of that model): wall and CPU
    seconds, one column pair per model, rows by n."""
    rows = []
    for j in jobs:
        wc = dict(kv.split("=", 1) for kv in j["wildcards"].split(", ") if "=" in kv)
        if j["rule"] != "aggregate" or "n" not in wc or j["log"] is None or not j["log"].exists():
            continue
        row = {"n": int(wc["n"])}
        for model, wall, cpu in _FIT.findall(Path(j["log"]).read_text(errors="replace")):
            row[f"{model} wall_s"], row[f"{model} cpu_s"] = float(wall), float(cpu)
        rows.append(row)
    return pd.DataFrame(rows).sort_values("n").reset_index(drop=True) if rows else pd.DataFrame()


def _log_jobs(project: Path) -> dict:
    """The jobs of the project's Snakemake logs (bench_scale.parse_log) by benchmark file (a
    job run again in a later log replaces the earlier)."""
    from benchmarks.bench_scale import parse_log  # bench_scale imports this module

    jobs = {}
    for log in sorted((project / ".snakemake" / "log").glob("*.snakemake.log")):
        for j in parse_log(log.read_text(errors="replace")):
            if j.benchmark:
                jobs[j.benchmark] = j
    return jobs


def run_jobs(project: Path) -> list[dict]:
    """Every job of the run that has a benchmark file: rule, wildcards, wall ``s``, ``cpu_s``
    and ``max_rss_mb`` (exact from the job's log when it says, else sampled), ``log``."""
    jobs = _log_jobs(project)
    rows = []
    for path, j in jobs.items():
        b = _bench_file(project / path)
        if b is None:
            continue
        log = project / j.log if j.log else None
        exact = job_resources(log) if log else None
        rows.append(
            {
                "rule": j.rule,
                "wildcards": j.wildcards,
                "s": b["s"],
                "cpu_s": exact["cpu_s"] if exact else b["cpu_s"],
                "max_rss_mb": exact["max_rss_mb"] if exact else b["max_rss_mb"],
                "exact": exact is not None,
                "log": log,
            }
        )
    return rows


def per_rule_table(jobs: list[dict]) -> pd.DataFrame:
    """Per rule: jobs, wall seconds (sum, largest job), CPU seconds (sum), peak RSS (MB);
    the figure rules (fig_*) in one row; sorted by CPU seconds, with a total row."""
    df = pd.DataFrame(jobs)
    df["rule"] = df["rule"].where(~df["rule"].str.startswith("fig_"), "fig_* (one per figure)")
    t = (
        df.groupby("rule")
        .agg(
            jobs=("s", "size"),
            wall_s=("s", "sum"),
            wall_max_s=("s", "max"),
            cpu_s=("cpu_s", "sum"),
            max_rss_mb=("max_rss_mb", "max"),
        )
        .sort_values("cpu_s", ascending=False)
        .reset_index()
    )
    total = {
        "rule": "total",
        "jobs": int(t["jobs"].sum()),
        "wall_s": t["wall_s"].sum(),
        "wall_max_s": t["wall_max_s"].max(),
        "cpu_s": t["cpu_s"].sum(),
        "max_rss_mb": t["max_rss_mb"].max(),
    }
    return pd.concat([t, pd.DataFrame([total])], ignore_index=True)


#: the split's columns, in order
SPLIT = [
    "start-up",
    "reading",
    "preparing",
    "cycles",
    "calibration",
    "writing",
    "writing assignments.parquet",
    "writing clumps.ecsv",
]


def split_table(jobs: list[dict]) -> pd.DataFrame:
    """Per aggregation job (``aggregate n=3`` ..., every model of that n; ``replay_labels``
    last): wall and CPU seconds, the CPU split (:func:`aggregation_split`), the rest, and the
    share of start-up + reading + writing in the job's CPU seconds."""
    rows = []
    for j in jobs:
        if j["rule"] not in AGGREGATION_RULES or j["log"] is None or not j["log"].exists():
            continue
        sp = aggregation_split(j["log"])
        wc = dict(kv.split("=", 1) for kv in j["wildcards"].split(", ") if "=" in kv)
        job = f"{j['rule']} n={wc['n']}" if "n" in wc else j["rule"]
        row = {"job": job, "wall_s": j["s"], "cpu_s": j["cpu_s"]}
        row.update({k: sp.get(k, 0.0) for k in SPLIT})
        row["other"] = j["cpu_s"] - sum(row[k] for k in SPLIT if not k.startswith("writing "))
        io = row["start-up"] + row["reading"] + row["writing"]
        row["start-up+IO %"] = 100.0 * io / j["cpu_s"] if j["cpu_s"] > 0 else math.nan
        rows.append(row)
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    key = df["job"].str.extract(r"^(\S+) n=(\d+)$")
    df["_m"], df["_n"] = key[0].fillna("~"), pd.to_numeric(key[1]).fillna(0)
    return df.sort_values(["_m", "_n"]).drop(columns=["_m", "_n"]).reset_index(drop=True)


def report(project: Path, wall: float | None = None) -> tuple[str, pd.DataFrame, pd.DataFrame]:
    """The Markdown tables of a finished run (and the two tables)."""
    from benchmarks.docs_table import markdown_table

    jobs = run_jobs(project)
    if not jobs:
        raise SystemExit(f"no finished jobs with benchmark files in {project}")
    rules = per_rule_table(jobs)
    split = split_table(jobs)
    exact = sum(j["exact"] for j in jobs)
    cfg = yaml.safe_load((project / "config.yaml").read_text())
    from benchmarks.bench_scale import dag_summary

    dag = dag_summary(list(_log_jobs(project).values()))  # from the log: 1 s resolution
    head = [
        f"{cfg['simulate']['n_subjects']:,} subjects, n = {cfg['subsample']['n']}; "
        f"{len(jobs)} jobs ({exact} with exact CPU and RSS from their logs, the others "
        f"sampled by Snakemake); rule-seconds (wall) {rules['wall_s'].iloc[-1]:,.0f}, "
        f"CPU seconds {rules['cpu_s'].iloc[-1]:,.0f}; the run from its first job's start to "
        f"its last job's end {dag['wall_s']:,.0f} s wall (critical path "
        f"{dag['critical_path_s']:,.0f} s, longest job {dag['longest_job']})"
        + (f"; the snakemake command {wall:,.0f} s wall" if wall is not None else "")
        + ".",
        "",
        "Per rule (sorted by CPU seconds):",
        "",
        markdown_table(rules, floatfmt="{:,.1f}"),
        "",
    ]
    if not split.empty:
        head += [
            "Per aggregation job (one per n fits every model; its phases summed over the "
            "fits): CPU seconds by phase (writing: every file; the assignments table and "
            "clumps.ecsv also alone; other: what no phase line covers):",
            "",
            markdown_table(split, floatfmt="{:,.1f}"),
            "",
        ]
    fits = fit_table(jobs)
    if not fits.empty:
        head += [
            "Per model fit in those jobs (wall and CPU seconds of each model's fit: reading, "
            "preparing, cycles, calibration, writing; not the job's start-up):",
            "",
            markdown_table(fits, floatfmt="{:,.1f}"),
            "",
        ]
    head += ["| what limits a run on many cores | |", "|---|---|"]
    head += [f"| {what} | {value} |" for what, value in critical_path_rows(project / "results")]
    return "\n".join(head) + "\n", rules, split


#: the snakemake command's wall seconds, kept in the project folder by :func:`run`
WALL_FILE = "bench_wall_seconds.txt"


def run(project: Path, cores: int) -> float:
    """``snakemake --cores`` in ``project`` (its log keeps every job); wall seconds."""
    cmd = [sys.executable, "-m", "snakemake", "--cores", str(cores)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=project, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-5000:], file=sys.stderr)
        raise SystemExit(f"the run in {project} failed")
    (project / WALL_FILE).write_text(f"{wall:.1f}\n")  # for --report of this run later
    return wall


def _kept_wall(project: Path) -> float | None:
    """The wall seconds :func:`run` kept for a finished run, if it did."""
    f = project / WALL_FILE
    return float(f.read_text()) if f.exists() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[85286])
    ap.add_argument("--out", type=Path, default=Path("/tmp/clumpscout_scale"))
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--report", type=Path, nargs="+", default=None,
                    help="report finished runs (project folders) instead of running")  # fmt: skip
    ap.add_argument("--docs", action="store_true", help="write the tables to docs/benchmarks.md")
    ap.add_argument("--label", default=None, help="docs section dag-scale-<label>")
    ap.add_argument(
        "--note", default="", help="a sentence for the docs (the code, the machine's load)"
    )
    args = ap.parse_args(argv)
    runs = [(p, _kept_wall(p)) for p in args.report] if args.report else []
    for n in [] if args.report else args.sizes:
        project = make_project(args.out / f"s{n}", n, args.cores)
        print(f"{n:,} subjects: running the DAG in {project} ...", flush=True)
        runs.append((project, run(project, args.cores)))
    texts = []
    for project, wall in runs:
        text, _, _ = report(project, wall)
        print(f"\n== {project}\n{text}")
        texts.append(text)
    if args.docs:
        from benchmarks.docs_table import write_section

        name = "dag-scale" + (f"-{args.label}" if args.label else "")
        title = "The whole DAG, per rule and per aggregation job" + (
            f" ({args.label})" if args.label else ""
        )
        write_section(name, title, "\n\n".join([args.note, *texts]), command=sys.argv)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
