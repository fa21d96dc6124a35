"""Whole-DAG scale benchmark: wall time and peak memory of the whole workflow per size.

Runs the complete workflow on simulated universes of increasing size in fresh copies of
the project and prints, per size, the wall time of the run and, per rule, the wall time
and peak memory (max RSS) from Snakemake's ``benchmark:`` files, plus the peak RSS of the
whole process tree (``/usr/bin/time -v`` when available).

    python benchmarks/bench_dag_scale.py --sizes 10000 40000 85286 --out /tmp/scale

Per size it also prints what limits a run on many cores: the serial prefix, the numba
compile seconds per job (~0 after rule numba_cache) and the longest job
(``_measure.critical_path_rows``). Sizes are numbers of subjects; the largest (85,286 with resources/paper_scale.yaml's other
settings: n = 3..20, 1,000 expert subjects) is the paper-scale run. Cost should grow close to
linearly with the number of subjects.
"""

from __future__ import annotations

import argparse
import csv
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks._measure import critical_path_rows  # noqa: E402

COPY = ["Snakefile", "config.yaml", "workflow", "scripts", "src", "envs", "resources"]


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


def read_benchmarks(project: Path) -> list[dict]:
    rows = []
    for tsv in sorted((project / "results/benchmarks").rglob("*.tsv")):
        with tsv.open() as fh:
            for row in csv.DictReader(fh, delimiter="\t"):
                rows.append(
                    {
                        "job": str(tsv.relative_to(project / "results/benchmarks"))[:-4],
                        "s": float(row["s"]),
                        "max_rss_mb": float(row.get("max_rss") or "nan"),
                    }
                )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 40000, 85286])
    ap.add_argument("--out", type=Path, default=Path("/tmp/clumpscout_scale"))
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args()
    summary = []
    for n in args.sizes:
        project = make_project(args.out / f"s{n}", n, args.cores)
        cmd = [sys.executable, "-m", "snakemake", "--cores", str(args.cores), "--quiet", "progress"]
        timev = shutil.which("time") or (
            "/usr/bin/time" if Path("/usr/bin/time").exists() else None
        )
        if timev:
            cmd = [timev, "-v", *cmd]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=project, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            print(r.stdout[-3000:], r.stderr[-5000:], file=sys.stderr)
            raise SystemExit(f"run with {n} subjects failed")
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
        peak_tree = int(m.group(1)) / 1024 if m else float("nan")
        rows = read_benchmarks(project)
        print(
            f"\n== {n:,} subjects: whole DAG {wall:,.0f} s wall "
            f"(largest single process peak RSS {peak_tree:,.0f} MB)"
        )
        print(f"{'job':<40} {'s':>8} {'max_rss_MB':>11}")
        for row in sorted(rows, key=lambda r: -r["s"]):
            print(f"{row['job']:<40} {row['s']:>8.1f} {row['max_rss_mb']:>11.0f}")
        for what, value in critical_path_rows(project / "results"):
            print(f"{what:<58} {value}")
        peak = max((r["max_rss_mb"] for r in rows), default=float("nan"))
        summary.append((n, wall, peak))
    print("\nsubjects  wall_s  s_per_1k_subjects  peak_rule_rss_MB")
    for n, wall, peak in summary:
        print(f"{n:>8,} {wall:>7,.0f} {1000 * wall / n:>18.2f} {peak:>17,.0f}")
    from benchmarks.docs_table import publish

    body = "\n".join(
        [
            f"The whole workflow in a fresh copy per size, `--cores {args.cores}`; peak RSS: "
            "the largest of the rules' benchmark files.",
            "",
            "| subjects | wall (s) | s per 1,000 subjects | largest rule's peak RSS (MB) |",
            "|---:|---:|---:|---:|",
            *(f"| {n:,} | {w:,.0f} | {1000 * w / n:.2f} | {pk:,.0f} |" for n, w, pk in summary),
        ]
    )
    publish("dag-scale", "The whole DAG at several sizes", body, __file__, None)


if __name__ == "__main__":
    main()
