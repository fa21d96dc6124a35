"""How long the test suite takes: the fast lane and the full suite, as CI runs them.

    .venv/bin/python benchmarks/suite_times.py [--lanes fast full] [--clone]

Each lane is the README's test command (``.venv/bin/python -m pytest -n 2``; the fast lane
adds ``-m "not slow"``), run in this checkout, or with ``--clone`` in a fresh clone of its
committed HEAD after ``bash setup.sh --only`` (as CI does: numba's caches and the
interpreter's bytecode cold; the setup is timed too). Per lane: the wall time and pytest's
own summary line (passed, skipped, failed). Timings depend on what else the machine runs:
the section gives the load average.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
#: the shared data the tests read from ../shared (they skip without it)
SHARED = REPO.parent / "shared"
for _p in (REPO / "src", REPO):  # clumpscout of this checkout; this folder as package `benchmarks`
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from benchmarks.docs_table import markdown_table, publish  # noqa: E402

#: the README's test command, and the marker expression of each lane
COMMAND = [".venv/bin/python", "-m", "pytest", "-n", "2"]
LANES = {"fast": ["-m", "not slow"], "full": []}


def minutes(seconds: float) -> str:
    """m:ss.s, rounded to a tenth of a second first (59.96 s is 1:00.0)."""
    m, s = divmod(round(seconds, 1), 60)
    return f"{int(m)}:{s:04.1f}"


def summary_line(output: str) -> str:
    """pytest's last summary line (``== 3 passed, 1 skipped in 9.81s ==``), without the bars."""
    lines = [ln for ln in output.splitlines() if re.match(r"^=+ .* =+$", ln.strip())]
    return lines[-1].strip("= ").strip() if lines else "no summary (see the log)"


def run_lane(lane: str, where: Path, log: Path) -> dict:
    cmd = [*COMMAND, *LANES[lane]]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=where, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    log.write_text(r.stdout + r.stderr)
    return {
        "lane": lane,
        "command": shlex.join(cmd),
        "wall (m:ss)": minutes(wall),
        "exit code": r.returncode,
        "pytest's summary": summary_line(r.stdout),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--lanes", nargs="+", choices=sorted(LANES), default=["fast", "full"])
    ap.add_argument("--clone", action="store_true", help="in a fresh clone after setup.sh")
    ap.add_argument("--logs", type=Path, default=Path(tempfile.gettempdir()) / "suite_times")
    args = ap.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    where, setup = REPO, None
    if args.clone:
        top = Path(tempfile.mkdtemp(prefix="clumpscout_clone_"))
        where = top / "repo"
        subprocess.run(["git", "clone", "-q", str(REPO), str(where)], check=True)
        if SHARED.is_dir():  # ../shared beside the clone, as beside this checkout
            (top / "shared").symlink_to(SHARED)
        t0 = time.perf_counter()
        subprocess.run(["bash", "setup.sh", "--only"], cwd=where, check=True, capture_output=True)
        setup = time.perf_counter() - t0
    rows = []
    for lane in args.lanes:
        rows.append(run_lane(lane, where, args.logs / f"{lane}.log"))
        print(rows[-1], flush=True)
    if args.clone:
        shutil.rmtree(top, ignore_errors=True)
    place = "a fresh clone of HEAD" if args.clone else "this checkout (caches warm)"
    if args.clone:
        place += " (" + ("with" if SHARED.is_dir() else "without") + " ../shared beside it)"
    parts = [
        f"The README's test command in {place}, 2 pytest workers; one run per lane.",
        markdown_table(pd.DataFrame(rows)),
    ]
    if setup is not None:
        parts.append(f"`bash setup.sh --only` in the clone took {minutes(setup)}.")
    body = "\n\n".join(parts)
    publish("test-suite", "The test suite", body, __file__, argv)
    return 0 if all(r["exit code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
