"""Benchmark: wall time and peak memory of the ``ledger`` stage on an existing results folder.

Runs :func:`clumpscout.data.ledger.run_ledger` exactly as the workflow's rule does
(workflow/rules/ledger.smk, scripts/ledger.py): the classification and subject exports of
``RESULTS/universe``, ``RESULTS/clicks/clicks_report.json``, ``RESULTS/boxes/boxes.parquet``
and, for every ``n`` found under ``RESULTS/subsamples/n*``, the Z~_n boxes and the assignments
and reports of one consensus model's aggregation, ``RESULTS/aggregate/<model>/n*``
(``--model``, default generative; the workflow runs one ledger job per model; a results folder
of the earlier layout, ``RESULTS/aggregate/n*`` with one model, is read as it is). It writes
``ledger.csv`` and ``ledger.json`` into ``--out`` (never into the results folder) and prints
the wall time, the CPU time and the peak resident memory of the process
(``resource.getrusage``). ``--profile FILE`` also writes a cProfile dump (slower).

The paths are passed as given, and they end up in ledger.json: run the script from the
workflow's working directory with a relative ``RESULTS`` (e.g. ``results``) to get the same
bytes as the workflow's ``ledger/<model>.json``.

Usage::

    cd /tmp/scale/s85286 && taskset -c 1 /work/main/.venv/bin/python \
        /work/main/benchmarks/bench_ledger.py results --model paper --out /tmp/ledger_bench/new

Measured (paper-scale simulated universe /tmp/scale/s85286: 85,286 subjects, 1,739,645
classifications, 3,721,182 clicks, 2.5 GB export, n = 3..20; pinned to one core with
``taskset -c 1`` on a 2-core machine shared with other jobs, so wall times vary by ~20 %):

==============================================  ============  ============  ============
ledger.py                                       wall          CPU           peak RSS
==============================================  ============  ============  ============
before (json.loads + _flat per row, np.unique)  108-127 s     100-103 s     1.08-1.11 GB
after, orjson 3.13.0                            22-26 s       21-25 s       0.93-0.95 GB
after, without orjson (json.loads fallback)     32 s          31 s          0.93 GB
==============================================  ============  ============  ============

Outputs are byte-identical in all three. Of the ~22 s: reading the CSV ~5 s, parsing and
counting ``annotations`` ~6 s, the export-level selection ~3 s, the 18 values of n ~7 s. The
peak memory is mostly Arrow's CSV read-ahead (proportional to the 16 MB block size).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks._measure import cpu_s, peak_rss_mb  # noqa: E402

MODELS = ("generative", "paper")  # the workflow's consensus models (common.smk)


def aggregate_dir(results: Path, model: str) -> Path:
    """The aggregation folder of ``model``: ``aggregate/<model>``, or ``aggregate`` itself
    for a results folder of the earlier one-model layout (``aggregate/n<N>``)."""
    per_model = results / "aggregate" / model
    if not per_model.is_dir() and any((results / "aggregate").glob("n*/assignments.parquet")):
        return results / "aggregate"
    return per_model


def find_ns(results: Path, aggregate: Path) -> list[int]:
    """The subsample sizes of a results folder: its ``subsamples/n<N>`` folders with an
    ``<aggregate>/n<N>/assignments.parquet``."""
    ns = []
    for d in (results / "subsamples").glob("n*"):
        m = re.fullmatch(r"n(\d+)", d.name)
        if m and (aggregate / d.name / "assignments.parquet").exists():
            ns.append(int(m.group(1)))
    return sorted(ns)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="the workflow's results folder")
    p.add_argument("--out", type=Path, required=True, help="folder for ledger.csv/.json")
    p.add_argument(
        "--model",
        choices=MODELS,
        default="generative",
        help="the consensus model whose aggregation is accounted for (default generative)",
    )
    p.add_argument("--n", type=int, nargs="+", help="subsample sizes (default: all found)")
    p.add_argument("--profile", type=Path, help="write a cProfile dump here")
    args = p.parse_args(argv)

    from clumpscout.data.ledger import per_n_paths, run_ledger
    from clumpscout.logs import setup_logging

    r = args.results
    agg = aggregate_dir(r, args.model)
    ns = args.n or find_ns(r, agg)
    if not ns:
        p.error(f"no subsamples/n*/ with {agg.relative_to(r)}/n*/assignments.parquet under {r}")
    args.out.mkdir(parents=True, exist_ok=True)
    setup_logging()
    call = (
        str(r / "universe/classifications.csv"),
        str(r / "clicks/clicks_report.json"),
        str(r / "boxes/boxes.parquet"),
        per_n_paths(r / "subsamples", agg, ns),
        str(args.out / "ledger.csv"),
        str(args.out / "ledger.json"),
    )
    subjects = str(r / "universe/subjects_export.csv")
    rss0 = peak_rss_mb()
    t0, c0 = time.perf_counter(), cpu_s()
    if args.profile:
        import cProfile

        prof = cProfile.Profile()
        ledger = prof.runcall(run_ledger, *call, subjects_csv=subjects)
        prof.dump_stats(str(args.profile))
    else:
        ledger = run_ledger(*call, subjects_csv=subjects)
    t1, c1 = time.perf_counter(), cpu_s()
    print(f"export rows          : {ledger.export['rows']:,}")
    print(f"export clicks        : {ledger.export['clicks']:,}")
    print(f"aggregation          : {agg}")
    print(f"n                    : {', '.join(map(str, ns))}")
    print(f"balanced             : {ledger.balanced()}")
    print(f"ledger               : {t1 - t0:.1f} s wall, {c1 - c0:.1f} s CPU")
    print(f"peak RSS before      : {rss0:.0f} MB")
    print(f"peak RSS (process)   : {peak_rss_mb():.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
