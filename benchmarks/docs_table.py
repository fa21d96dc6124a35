"""Write a benchmark's measured tables into docs/benchmarks.md (one section per benchmark).

Every table in docs/benchmarks.md is written by the script that measured it, never by hand:
the script calls :func:`write_section` with its tables in Markdown, and the section records
the command that was run, the date and the machine. A section is delimited by two HTML
comments (``<!-- begin NAME -->`` ... ``<!-- end NAME -->``); writing it again replaces it in
place and leaves every other section as it was, so each benchmark refreshes only its own.
Each section starts with an anchor of its name (``docs/benchmarks.md#<name>``), which the README
and the other docs link to.

    from benchmarks.docs_table import markdown_table, write_section
    write_section("regimes", "The regime grid", markdown_table(df), command=sys.argv)
    publish("regimes", "The regime grid", markdown_table(df), __file__, argv)  # from main(argv)

A benchmark too long to run yet gets a section that says so, with the command to run:

    .venv/bin/python benchmarks/docs_table.py pending NAME "TITLE" "COMMAND"

``CLUMPSCOUT_BENCHMARKS_MD`` names another file to write instead of docs/benchmarks.md (the
test suite sets it, so that a test running a benchmark's main never rewrites the docs).

It imports nothing of its own folder, so a script run as a file may also write
``from docs_table import ...`` (the script's folder is on ``sys.path``); a script that tests
import (``from benchmarks import regimes``) uses the package form.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: the file every benchmark writes its section into
DOCS = REPO / "docs" / "benchmarks.md"
#: environment variable naming another file to write instead of :data:`DOCS`
DOCS_ENV = "CLUMPSCOUT_BENCHMARKS_MD"

HEADER = """# Measured results

Every table below is written by the benchmark script that measured it (the command, the date
and the machine are given with each); none is typed by hand. Run the command again to refresh a
section; the other sections stay as they are. Decisions these numbers led to are in
`docs/decisions.md`; the history of earlier measurements is in git.
"""


def machine() -> str:
    """One line about this machine: cores, memory, CPU model, Python."""
    mem = ""
    try:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        mem = f", {pages / 2**30:.0f} GB"
    except (ValueError, OSError, AttributeError):
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores{mem}, {cpu}, Python {platform.python_version()}"


def load_average() -> str:
    """The machine's load average over the last minute (timings on a loaded machine are long)."""
    try:
        return f"load average {os.getloadavg()[0]:.1f}"
    except OSError:
        return "load average unknown"


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as a user would type it from the repository root."""
    argv = list(sys.argv if argv is None else argv)
    if argv and argv[0].endswith(".py"):
        try:
            argv[0] = str(Path(argv[0]).resolve().relative_to(REPO))
        except ValueError:
            pass
        argv.insert(0, ".venv/bin/python")
    return shlex.join(argv)


def markdown_table(df, floatfmt: str = "{:.3f}", index: bool = False) -> str:
    """A pandas DataFrame as a Markdown table (floats with ``floatfmt``; NaN left empty)."""
    frame = df.reset_index() if index else df

    def cell(v) -> str:
        if v is None or (isinstance(v, float) and v != v):
            return ""
        if isinstance(v, float):
            return floatfmt.format(v)
        return str(v).replace("|", "\\|").replace("\n", " ")

    head = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def render_section(name: str, title: str, body: str, command: str, date: str, where: str) -> str:
    """The text of one section, markers included."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ValueError(f"section name {name!r}: letters, digits, '_', '.', '-' only")
    return (
        f'<!-- begin {name} -->\n<a id="{name}"></a>\n\n## {title}\n\n'
        f"Written by `{command}` on {date} ({where}).\n\n{body.strip()}\n<!-- end {name} -->\n"
    )


def replace_section(text: str, name: str, section: str) -> str:
    """``text`` with section ``name`` replaced by ``section`` (appended when absent)."""
    pat = re.compile(
        rf"^<!-- begin {re.escape(name)} -->\n.*?^<!-- end {re.escape(name)} -->\n?",
        flags=re.S | re.M,
    )
    if pat.search(text):
        return pat.sub(lambda _m: section, text, count=1)
    if text and not text.endswith("\n"):
        text += "\n"
    return text + ("\n" if text else "") + section


def write_section(
    name: str,
    title: str,
    body: str,
    command: Sequence[str] | str | None = None,
    path: Path | str | None = None,
    date: str | None = None,
) -> Path:
    """Write (or replace) section ``name`` of docs/benchmarks.md (or of ``path``, or of the
    file named by ``CLUMPSCOUT_BENCHMARKS_MD``); returns the file's path."""
    path = Path(path or os.environ.get(DOCS_ENV) or DOCS)
    cmd = command if isinstance(command, str) else command_line(command)
    day = date or _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d")
    section = render_section(name, title, body, cmd, day, f"{machine()}; {load_average()}")
    text = path.read_text(encoding="utf-8") if path.exists() else HEADER
    new = replace_section(text, name, section)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(new, encoding="utf-8")
    os.replace(tmp, path)
    return path


def publish(name: str, title: str, body: str, script: str, argv: Sequence[str] | None) -> Path:
    """:func:`write_section` for a benchmark's ``main(argv)``: the command is ``script`` with
    ``argv`` (the command line's arguments when None, as when run as a script); prints where
    the section went."""
    path = write_section(
        name, title, body, command=[script, *(sys.argv[1:] if argv is None else argv)]
    )
    print(f"docs: section {name} of {path}")
    return path


def pending_body(command: str) -> str:
    """The body of a section whose benchmark has not been run yet."""
    return f"Not measured yet by this script: run `{command}`."


def main(argv: Sequence[str] | None = None) -> int:
    """``pending NAME TITLE COMMAND``: a section saying that COMMAND has not been run yet."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    pend = sub.add_parser("pending", help="a section whose benchmark is not measured yet")
    pend.add_argument("name")
    pend.add_argument("title")
    pend.add_argument("command", help="the command that would measure it")
    args = ap.parse_args(argv)
    print(write_section(args.name, args.title, pending_body(args.command), command=sys.argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
