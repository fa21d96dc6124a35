"""Fuzz the export readers: many hostile variants of a Zooniverse export, none may crash.

Runs the property of tests/test_fuzz_export.py (``clumpscout extract`` / ``clumpscout subjects``
end with exit 0, every classification counted and the click ledger balanced, or with exit 2 and
one line naming the file; nothing half-written) on ``--cases`` hypothesis-generated variants of
the bad-input suite's valid export (``--penguin``: of the real Penguin Watch rows in ../shared).
Unlike the test it does not stop at the first failure: every failure is printed with the steps
that made its input, and the first case of each kind of failure is saved as a regression case
(``--save``, default tests/data/fuzz_regressions/) that tests/test_fuzz_export.py replays.

Usage::

    .venv/bin/python benchmarks/fuzz_export.py --cases 10000 --seed 1
    .venv/bin/python benchmarks/fuzz_export.py --cases 2000 --seed 2 --penguin

Exit code 0 when no case failed, 1 otherwise.

Measured (2-core machine shared with other jobs): ``--cases 10000 --seed 15`` ran in 215 s
(22 ms a case; 5,570 runs ended with exit 0, 6,404 with exit 2; peak RSS 345 MB) and
``--penguin --cases 3000 --seed 16`` in 59 s, with no failure. Earlier runs found the cases now
in tests/data/fuzz_regressions/ (a subject export whose ``subject_id`` header has blanks around
it broke the ledger; an error line listing 60 workflows was 1,900 characters long; a catalogue
``subject_id`` of 2,000 characters was quoted whole), each fixed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import resource
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from test_fuzz_export import (  # noqa: E402
    REGRESSIONS,
    FuzzCase,
    FuzzFailure,
    base_inputs,
    check_in_tmp,
    fuzz_cases,
)


def signature(exc: BaseException) -> str:
    """The kind of a failure: exception type and message without numbers or paths."""
    text = str(exc).splitlines()[0] if str(exc) else ""
    text = re.sub(r"/\S+", "<path>", text)
    return f"{type(exc).__name__}: {re.sub(r'[0-9]+', 'N', text)[:160]}"


def describe(exc: BaseException) -> str:
    if isinstance(exc, FuzzFailure):
        return str(exc)
    return "".join(traceback.format_exception(exc)[-6:])


def error_kind(line: str) -> str:
    """An error line without its file, numbers and quoted values."""
    line = re.sub(r"^error: [^:]*(:row \d+)?: ", lambda m: "row N: " if m.group(1) else "", line)
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'...'", line)
    return re.sub(r"[0-9][0-9,.]*", "N", line)[:110]


def run(
    n_cases: int, seed_value: int, base: str, save: Path | None, max_save: int, errors: bool
) -> int:
    outcomes: Counter = Counter()
    kinds: Counter = Counter()
    first_of: dict[str, list[str]] = {}
    drops: Counter = Counter()
    failures: dict[str, list] = {}
    t0 = time.perf_counter()

    @seed(seed_value)
    @settings(
        max_examples=n_cases,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=fuzz_cases(base))
    def one(case: FuzzCase) -> None:
        outcomes["cases"] += 1
        try:
            codes = check_in_tmp(case)
        except Exception as exc:  # noqa: BLE001 - every failure is recorded, none stops the run
            outcomes["failed"] += 1
            failures.setdefault(signature(exc), []).append((case, describe(exc)))
            return
        for command, rc, line in codes:
            outcomes[f"exit {rc}"] += 1
            if line.startswith("drops: "):
                drops.update(r for r in line[7:].split(",") if r)
            elif line:
                kind = f"{command}: {error_kind(line)}"
                kinds[kind] += 1
                first_of.setdefault(kind, [case.target, *case.steps, line[:300]])
        if outcomes["cases"] % 500 == 0:
            print(f"{outcomes['cases']:,} cases, {time.perf_counter() - t0:.0f} s", flush=True)

    one()
    wall = time.perf_counter() - t0
    print(
        f"\n{outcomes['cases']:,} cases in {wall:.0f} s ({1000 * wall / max(outcomes['cases'], 1):.0f}"
        f" ms each); runs by exit code: "
        + ", ".join(f"{k}: {v:,}" for k, v in sorted(outcomes.items()) if k.startswith("exit"))
        + f"; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB"
    )
    print("runs of extract with exit 0 that dropped or flagged something, by reason: "
          + ", ".join(f"{k} {n:,}" for k, n in drops.most_common()))  # fmt: skip
    if errors:
        rowless = sum(n for k, n in kinds.items() if "row N:" not in k)
        print(f"error lines naming no row: {rowless:,}; kinds of error lines:")
        for k, n in kinds.most_common():
            print(f"{n:7,}  {k}\n         e.g. {first_of[k]}")
    print(f"failures: {outcomes['failed']} of {len(failures)} kind(s)")
    saved = 0
    for sig, cases in failures.items():
        case, detail = cases[0]
        print(f"\n--- {sig} ({len(cases)} case(s))\nsteps ({case.target}): {case.steps}")
        print(f"args: {case.args}\n{detail[-2000:]}")
        if save is not None and saved < max_save:
            d = case.to_json()
            d["failure"] = sig
            name = hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
            save.mkdir(parents=True, exist_ok=True)
            path = save / f"{case.target}-{name}.json"
            path.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
            saved += 1
            print(f"saved as {path}")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--penguin", action="store_true", help="mutate real Penguin Watch rows")
    p.add_argument(
        "--save",
        type=Path,
        default=None,
        help="regression case folder (default: tests/data/fuzz_regressions; with --penguin "
        "none: those cases hold rows of the real export, which stays out of the repository)",
    )
    p.add_argument("--no-save", action="store_true")
    p.add_argument("--max-save", type=int, default=20)
    p.add_argument("--errors", action="store_true", help="list the kinds of error lines")
    args = p.parse_args(argv)
    base = "penguin" if args.penguin else "valid"
    if base_inputs(base) is None:
        p.error("--penguin needs ../shared/data/zooniverse_exports/penguin_watch")
    save = args.save or (None if args.penguin else REGRESSIONS)
    if args.no_save:
        save = None
    return run(args.cases, args.seed, base, save, args.max_save, args.errors)


if __name__ == "__main__":
    sys.exit(main())
