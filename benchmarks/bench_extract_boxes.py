"""Benchmark: wall time and peak memory of ``extract`` + ``boxes`` on a paper-scale export.

The paper's data set (§3.2): 1,739,259 classifications, 3,561,454 clicks, 85,286 subjects,
20,999 volunteers. Without ``--classifications`` this script writes a synthetic Clump Scout
classification export of that shape itself (same columns and JSON structure as a real export:
classic front-end point marks with ``tool``/``tool_label``, a bulge task T0, the clump task T1 with
tools 0 = normal and 1 = unusual, metadata with ``subject_dimensions``, ``subject_data``), so it
does not depend on the simulator. Then it runs :func:`clumpscout.data.zooniverse.extract_clicks`
and :func:`clumpscout.data.boxes.make_boxes` and prints the wall time and the peak resident memory of
the process (``resource.getrusage``; ``--tracemalloc`` adds Python-heap peaks, slower).

Usage::

    .venv/bin/python benchmarks/bench_extract_boxes.py --scale 0.1        # 174k classifications
    .venv/bin/python benchmarks/bench_extract_boxes.py                    # paper scale
    .venv/bin/python benchmarks/bench_extract_boxes.py --classifications EXPORT.csv \
        --subjects SUBJECTS.csv [--box-side 20]

Memory is the peak RSS of this process, which includes the export generation when the script
writes the export itself; use ``--generate-only`` / ``--classifications`` in two runs to measure
extract + boxes alone (``--classifications`` skips generation). Wall time depends on what else
runs on the machine; the CPU time (user + system) printed beside it does much less.

Measured (2-core machine shared with other jobs, load average ~8; paper-scale synthetic export,
1,739,259 classifications, 3,560,648 clump clicks + 1,739,259 bulge clicks, 2.76 GB):

=====================  =================  ==================  ============
JSON parser            extract + boxes    of which CPU        peak RSS
=====================  =================  ==================  ============
orjson 3.13.0          233 s wall         76 s (74 + 3)       2.45 GB
json (stdlib)          340 s wall         124 s (120 + 4)     2.42 GB
=====================  =================  ==================  ============

On an otherwise idle 2-core machine the wall time is close to the CPU time (the CSV reading is
multi-threaded), so about 80 s with orjson (the target is < 2 min and < 4 GB). At 1/10 scale
(174k classifications): 8 s CPU, 0.59 GB.
"""

# ruff: noqa: UP031  (%-formatting keeps the JSON braces readable)
from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks._measure import cpu_s, peak_rss_mb  # noqa: E402
from clumpscout.simulation.export import CLASSIFICATION_COLUMNS, SUBJECT_COLUMNS  # noqa: E402

PAPER = {
    "classifications": 1_739_259,
    "clicks": 3_561_454,
    "subjects": 85_286,
    "volunteers": 20_999,
}

HEADER = list(CLASSIFICATION_COLUMNS)

UA = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/87.0.4280.88 Safari/537.36"
)


def write_synthetic_export(
    out_dir: Path, n_classifications: int, seed: int = 1, image_size: int = 400
) -> tuple[Path, Path]:
    """Write ``classifications.csv`` and ``subjects_export.csv`` of a Clump-Scout-like project.

    Mean clump clicks per classification = 3,561,454 / 1,739,259 (the paper's ratio), about 15%
    of classifications mark no clump; every classification marks the bulge (task T0).
    """
    rng = np.random.default_rng(seed)
    n_subjects = max(1, round(n_classifications * PAPER["subjects"] / PAPER["classifications"]))
    n_vol = max(1, round(n_classifications * PAPER["volunteers"] / PAPER["classifications"]))
    mean_clicks = PAPER["clicks"] / PAPER["classifications"]
    subject_ids = 40_000_000 + np.arange(n_subjects)
    # heavy-tailed volunteer activity (Zipf-like weights)
    weights = 1.0 / np.arange(1, n_vol + 1) ** 1.1
    weights /= weights.sum()
    vol = rng.choice(n_vol, size=n_classifications, p=weights)
    logged_in = rng.random(n_vol) > 0.3
    names = np.array(
        [f"volunteer_{i}" if logged_in[i] else f"not-logged-in-{i:020x}" for i in range(n_vol)],
        dtype=object,
    )
    subj = subject_ids[np.sort(rng.integers(0, n_subjects, n_classifications))]
    # a volunteer sees a subject once (paper §3.2): re-draw repeated (subject, volunteer) pairs
    for _ in range(20):
        pair = subj.astype(np.int64) * n_vol + vol
        _, first = np.unique(pair, return_index=True)
        again = np.ones(n_classifications, dtype=bool)
        again[first] = False
        if not again.any():
            break
        vol[again] = rng.integers(0, n_vol, int(again.sum()))
    n_clicks = np.where(
        rng.random(n_classifications) < 0.15,
        0,
        1 + rng.poisson((mean_clicks - 0.85) / 0.85, n_classifications),
    )
    t0 = np.datetime64("2019-06-01T00:00:00") + np.sort(
        rng.integers(0, 3 * 365 * 86400, n_classifications)
    ).astype("timedelta64[s]")
    created = np.datetime_as_string(t0, unit="s")
    xy = rng.uniform(100, 300, size=(int(n_clicks.sum()) + n_classifications, 2))
    unusual = rng.random(len(xy)) < 0.28
    out_dir.mkdir(parents=True, exist_ok=True)
    cpath = out_dir / "classifications.csv"
    k = 0
    with open(cpath, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(HEADER)
        for i in range(n_classifications):
            v = int(vol[i])
            sid = int(subj[i])
            ts = created[i].replace("T", " ")
            md = (
                '{"source":"api","session":"%064x","viewport":{"width":1920,"height":969},'
                '"started_at":"%sZ","user_agent":"%s","utc_offset":"0","finished_at":"%sZ",'
                '"live_project":true,"interventions":{"opt_in":true,"messageShown":false},'
                '"user_language":"en","subject_dimensions":[{"clientWidth":560,'
                '"clientHeight":560,"naturalWidth":%d,"naturalHeight":%d}],'
                '"subject_selection_state":{"retired":false,"selected_at":"%sZ",'
                '"already_seen":false,"selection_state":"normal","finished_workflow":false,'
                '"user_has_finished_workflow":false},"workflow_version":"64.136"}'
            ) % (i * 7919 + v, ts, UA, ts, image_size, image_size, ts)
            bx, by = xy[k]
            k += 1
            marks = []
            for _ in range(int(n_clicks[i])):
                x, y = xy[k]
                tool = 1 if unusual[k] else 0
                label = "Unusual clump" if tool else "Normal clump"
                marks.append(
                    '{"x":%r,"y":%r,"tool":%d,"frame":0,"details":[],"tool_label":"%s"}'
                    % (float(x), float(y), tool, label)
                )
                k += 1
            ann = (
                '[{"task":"T0","task_label":"Mark the central bulge","value":[{"x":%r,"y":%r,'
                '"tool":0,"frame":0,"details":[],"tool_label":"Bulge"}]},'
                '{"task":"T1","task_label":"Mark the clumps","value":[%s]}]'
            ) % (float(bx), float(by), ",".join(marks))
            sd = (
                '{"%d":{"retired":null,"ra":%.6f,"dec":%.6f,"#image_size":%d,"Filename":"J%d.png"}}'
            ) % (sid, 150.0 + (sid % 997) / 10.0, 2.0 + (sid % 313) / 100.0, image_size, sid)
            w.writerow(
                [
                    300_000_000 + i,
                    names[v],
                    1_000_000 + v if logged_in[v] else "",
                    f"{v:020x}",
                    11803,
                    "Clump Scout",
                    "64.136",
                    f"{ts} UTC",
                    "",
                    "",
                    md,
                    ann,
                    sd,
                    sid,
                ]
            )
    spath = out_dir / "subjects_export.csv"
    with open(spath, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(SUBJECT_COLUMNS)
        for sid in subject_ids:
            w.writerow(
                [
                    int(sid),
                    11996,
                    11803,
                    80000,
                    json.dumps({"ra": 150.0, "dec": 2.0, "#image_width": image_size}),
                    json.dumps({"0": f"https://example.org/{sid}.png"}),
                    20,
                    "",
                    "",
                    "2019-05-01 00:00:00 UTC",
                    "2019-05-01 00:00:00 UTC",
                ]
            )
    return cpath, spath


def _orjson_available() -> bool:
    from clumpscout.data import zooniverse_csv

    return zooniverse_csv._orjson is not None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--classifications", type=Path, help="an existing classification export")
    p.add_argument("--subjects", type=Path, help="its subjects export")
    p.add_argument("--scale", type=float, default=1.0, help="fraction of the paper's size")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", type=Path, help="where to write the synthetic export")
    p.add_argument("--box-side", type=float, default=20.0, help="box side (subject px)")
    p.add_argument("--generate-only", action="store_true")
    p.add_argument("--tracemalloc", action="store_true", help="also trace Python heap peak")
    p.add_argument("--workers", type=int, default=1, help="extract's parsing processes")
    args = p.parse_args(argv)

    if args.classifications is None:
        n = max(1, round(PAPER["classifications"] * args.scale))
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench_extract_"))
        t0 = time.perf_counter()
        cpath, spath = write_synthetic_export(workdir, n, seed=args.seed)
        print(
            f"generated {n:,} classifications in {time.perf_counter() - t0:.1f} s: {cpath} "
            f"({cpath.stat().st_size / 1e9:.2f} GB)",
            flush=True,
        )
        if args.generate_only:
            return 0
    else:
        cpath, spath = args.classifications, args.subjects
    from clumpscout.data.boxes import make_boxes
    from clumpscout.data.subjects import build_subjects
    from clumpscout.data.zooniverse import extract_clicks
    from clumpscout.logs import setup_logging

    setup_logging()
    rss0 = peak_rss_mb()
    if args.tracemalloc:
        tracemalloc.start()

    t0, c0 = time.perf_counter(), cpu_s()
    clicks, report = extract_clicks(cpath, spath, workers=args.workers)
    t1, c1 = time.perf_counter(), cpu_s()
    subjects = build_subjects(None, spath, {}, box_side=args.box_side)
    boxes = make_boxes(clicks, subjects)
    t2, c2 = time.perf_counter(), cpu_s()
    heap = tracemalloc.get_traced_memory()[1] / 2**20 if args.tracemalloc else None
    n_clicks = int(clicks["x"].notna().sum())
    print(f"classifications kept : {report['classifications_kept']:,}")
    print(f"clicks kept          : {n_clicks:,}  (rows {len(clicks):,}, boxes {len(boxes):,})")
    print(f"extract              : {t1 - t0:.1f} s wall, {c1 - c0:.1f} s CPU")
    print(f"subjects+boxes       : {t2 - t1:.1f} s wall, {c2 - c1:.1f} s CPU")
    print(f"extract+boxes total  : {t2 - t0:.1f} s wall, {c2 - c0:.1f} s CPU")
    print(f"JSON parser          : {'orjson' if _orjson_available() else 'json (stdlib)'}")
    print(f"peak RSS before      : {rss0:.0f} MB")
    print(f"peak RSS (process)   : {peak_rss_mb():.0f} MB")
    if heap is not None:
        print(f"peak Python heap     : {heap:.0f} MB (tracemalloc)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
