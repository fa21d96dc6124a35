"""The simulator at k times the paper's size: CPU and wall seconds, peak memory, size on disk.

    .venv/bin/python benchmarks/bench_simulate.py --scales 1 3 10 --out /tmp/simulate_scale

For every scale k, ``clumpscout simulate`` runs in a process of its own (under
``/usr/bin/time -v``, bench_scale.run_measured) on resources/paper_scale.yaml over
config.yaml with ``simulate.n_subjects`` = k × the paper's and, for a large universe,
``compress_classifications: true`` and ``write_click_truth: false`` (``--plain`` keeps the
workflow's defaults). Per scale: subjects and classifications (from simulate_report.json),
CPU and wall seconds, peak RSS and the universe's size on disk. Time and memory should grow
linearly with the project (docs/decisions.md#simulated-exports). The universes are deleted
after each run unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

REPO = Path(__file__).resolve().parents[1]
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks.bench_scale import run_measured  # noqa: E402
from benchmarks.docs_table import markdown_table, publish  # noqa: E402


def config(scale: float, plain: bool) -> dict:
    """config.yaml with resources/paper_scale.yaml over it, the subjects scaled."""
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    over = yaml.safe_load((REPO / "resources" / "paper_scale.yaml").read_text())
    for key, value in over.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    sim = cfg["simulate"]
    sim["n_subjects"] = int(round(scale * sim["n_subjects"]))
    if not plain:
        sim.update(compress_classifications=True, write_click_truth=False)
    return cfg


def disk_gb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e9


def run_scale(scale: float, out: Path, plain: bool, keep: bool) -> dict:
    """One ``clumpscout simulate`` at ``scale`` times the paper: the row of the table."""
    work = out / f"x{scale:g}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cfg_path = work / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config(scale, plain), sort_keys=False))
    universe = work / "universe"
    cmd = [sys.executable, "-m", "clumpscout", "simulate", "--config", str(cfg_path)]
    r = run_measured([*cmd, "--out", str(universe)])
    if r["returncode"] != 0:
        raise SystemExit(f"simulate at {scale:g}x failed:\n{r['stderr_tail']}")
    rep = json.loads((universe / "simulate_report.json").read_text())
    row = {
        "project": f"{scale:g}x",
        "subjects": rep.get("subjects"),
        "classifications": rep.get("classifications"),
        "CPU (s)": r.get("cpu_s"),
        "wall (s)": r["wall_s"],
        "peak RSS (GB)": r.get("max_rss_mb", float("nan")) / 1024,
        "on disk (GB)": disk_gb(universe),
    }
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scales", type=float, nargs="+", default=[1, 3, 10])
    ap.add_argument("--out", type=Path, required=True, help="working folder")
    ap.add_argument("--plain", action="store_true", help="the workflow's output settings")
    ap.add_argument("--keep", action="store_true", help="keep the universes")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    rows = []
    for k in args.scales:
        rows.append(run_scale(k, args.out, args.plain, args.keep))
        print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    for c in ("subjects", "classifications"):
        table[c] = table[c].map(lambda v: "" if v is None else f"{v:,}")
    for c in ("peak RSS (GB)", "on disk (GB)"):
        table[c] = table[c].map("{:.2f}".format)
    print(table.to_string(index=False))
    settings = (
        "the workflow's output settings"
        if args.plain
        else "`compress_classifications: true` and `write_click_truth: false`"
    )
    body = "\n\n".join(
        [
            "`clumpscout simulate` on resources/paper_scale.yaml with `simulate.n_subjects` "
            f"scaled, {settings}, one process per scale; peak RSS of the process, the "
            "universe's files on disk.",
            markdown_table(table, floatfmt="{:.0f}"),
            f"The whole run took {time.perf_counter() - t0:,.0f} s (wall).",
        ]
    )
    publish("simulate-scale", "The simulator at k times the paper's size", body, __file__, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
