"""Process measurements shared by the benchmark scripts (CPU time, peak resident memory)."""

from __future__ import annotations

import csv
import math
import re
import resource
import statistics
from pathlib import Path


def cpu_s() -> float:
    """User + system CPU seconds of this process so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------- a finished workflow run
# What limits a run on many cores (docs/decisions.md#numba-warm-up): the serial prefix before
# the first aggregation can start, the numba compile seconds of every job (~0 after rule
# numba_cache), and the longest job. Read from a results folder after a run.

#: the chain every aggregation waits for (one subsample job ends it)
PREFIX_RULES = ("simulate", "extract", "boxes")
_COMPILED = re.compile(r"numba: (\d+) kernel\(s\) compiled in ([0-9.]+) s")


def job_seconds(results: Path) -> dict[str, float]:
    """Wall seconds of every job with a ``benchmark:`` file (job name: the file's path
    below ``benchmarks/`` without ``.tsv``, e.g. ``aggregate_n20``)."""
    out = {}
    root = Path(results) / "benchmarks"
    for tsv in sorted(root.rglob("*.tsv")):
        with tsv.open() as fh:
            rows = list(csv.DictReader(fh, delimiter="\t"))
        if rows:
            out[str(tsv.relative_to(root))[: -len(".tsv")]] = float(rows[-1]["s"])
    return out


def serial_prefix_seconds(results: Path) -> float:
    """simulate + extract + boxes + the slowest subsample job: the seconds before every
    aggregation can run (NaN when a stage has no benchmark file)."""
    jobs = job_seconds(results)
    sub = [s for j, s in jobs.items() if j.startswith("subsample_")]
    if not sub or any(r not in jobs for r in PREFIX_RULES):
        return math.nan
    return sum(jobs[r] for r in PREFIX_RULES) + max(sub)


def compile_seconds(results: Path) -> dict[str, tuple[int, float]]:
    """(kernels compiled, seconds) of every job whose log reports numba compilations
    (rules numba_cache, aggregate, replay_labels and replay), keyed by the log's path below ``logs/``."""
    out = {}
    root = Path(results) / "logs"
    for log in sorted(root.rglob("*.log")):
        m = _COMPILED.findall(log.read_text(errors="replace"))
        if m:
            out[str(log.relative_to(root))[: -len(".log")]] = (int(m[-1][0]), float(m[-1][1]))
    return out


def critical_path_rows(results: Path) -> list[tuple[str, str]]:
    """The benchmark table's rows on what limits a run on many cores."""
    jobs = job_seconds(results)
    comp = compile_seconds(results)
    warm = comp.pop("numba_cache", None)
    per_job = [s for _, s in comp.values()]
    longest = max(jobs.items(), key=lambda kv: kv[1]) if jobs else ("-", math.nan)
    return [
        ("serial prefix (simulate + extract + boxes + subsample)", f"{serial_prefix_seconds(results):.1f} s"),
        ("numba warm-up (rule numba_cache)", "-" if warm is None else f"{warm[1]:.1f} s, {warm[0]} kernels"),
        ("compile seconds per job (max / mean)", f"{max(per_job, default=math.nan):.2f} / {statistics.fmean(per_job) if per_job else math.nan:.2f} s over {len(per_job)} jobs"),
        ("longest job", f"{longest[0]} {longest[1]:.1f} s"),
    ]  # fmt: skip
