"""The user's guide and the docs hold together: every link from README.md and docs/*.md
resolves (file and anchor), every pointer to README.md, docs/tables.md or docs/benchmarks.md
from the code resolves, and the column reference of docs/tables.md parses (the columns
themselves are checked against a real run in tests/test_e2e.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import REPO
from doc_tables import documented_columns, sections, tables

DOCS = sorted((REPO / "docs").glob("*.md"))
#: [text](target) links, images included; targets without spaces
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: a file of the repository named with an anchor in running text: docs/x.md#anchor
MENTION = re.compile(r"((?:docs/[\w.-]+\.md|README\.md))#([\w-]*\w)")
#: the folders whose code may point into the user's guide and its tables
CODE = ["src", "scripts", "tests", "benchmarks", "workflow", "resources"]


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Explicit ``<a id>`` anchors and GitHub's heading anchors of a Markdown file."""
    text = path.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"></a>', text))
    seen: dict[str, int] = {}
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not (m := re.match(r"#{1,6} (.+)", line)):
            continue
        slug = github_slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_github_slug_by_hand():
    assert github_slug("Tables: what goes in and what comes out") == (
        "tables-what-goes-in-and-what-comes-out"
    )
    assert github_slug("The paper's model (`aggregate.model: paper`)") == (
        "the-papers-model-aggregatemodel-paper"
    )
    assert github_slug("Scaling out on SLURM") == "scaling-out-on-slurm"


def _targets(path: Path) -> list[tuple[str, str]]:
    """(file, anchor) of every relative link and every file#anchor mention in ``path``."""
    text = path.read_text(encoding="utf-8")
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        out.append((file, anchor))
    out += [(f, a) for f, a in MENTION.findall(text)]
    return out


def _resolve(source: Path, file: str, anchor: str) -> str | None:
    """None when ``file#anchor`` (relative to ``source``'s folder, or to the repository for a
    mention that names docs/ or README.md) exists; else what is wrong."""
    if not file:
        target = source
    else:
        target = (source.parent / file).resolve()
        if not target.exists() and (file.startswith("docs/") or file == "README.md"):
            target = REPO / file
    if not target.exists():
        return f"{file}: no such file"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{file or source.name}#{anchor}: no such anchor"
    return None


@pytest.mark.parametrize("doc", [REPO / "README.md", *DOCS], ids=lambda p: p.name)
def test_links_and_anchors_resolve(doc):
    broken = [err for f, a in _targets(doc) if (err := _resolve(doc, f, a))]
    assert not broken, broken


def test_code_points_only_at_anchors_that_exist():
    """Docstrings, comments and configs that point into the user's guide, the column
    reference or the measured results name an anchor that is there."""
    broken = []
    files = [p for d in CODE for p in (REPO / d).rglob("*") if p.is_file()]
    files += [REPO / "config.yaml", REPO / "Snakefile"]
    for path in files:
        if path.suffix not in {".py", ".smk", ".yaml", ".yml", ".md", ".sh", ""}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for file, anchor in MENTION.findall(text):
            if file in ("README.md", "docs/tables.md", "docs/benchmarks.md"):
                err = _resolve(REPO / "README.md", file, anchor)
                if err:
                    broken.append(f"{path.relative_to(REPO)}: {err}")
    assert not broken, broken


def test_column_reference_parses_by_hand():
    text = """intro
<a id="one"></a>
## one.parquet

| column | type | meaning |
|---|---|---|
| a | int64 | |
| x, y | float64 | two columns in one row |

| column | type |
|---|---|
| second | str |
<a id="two"></a>
| column |
|---|
| z |
"""
    assert list(sections(text)) == ["one", "two"]
    assert tables(sections(text)["one"]) == [["a", "x", "y"], ["second"]]
    assert documented_columns("one", 1, text) == ["second"]
    assert documented_columns("two", text=text) == ["z"]
    with pytest.raises(KeyError):
        documented_columns("three", text=text)


@pytest.mark.parametrize(
    "anchor",
    ["clicks", "subject-geometry", "boxes", "labels", "subjects", "assignments",
     "gold-standard", "catalogue", "volunteers"],
)  # fmt: skip
def test_every_table_of_the_reference_has_its_columns(anchor):
    for columns in tables(sections()[anchor]):
        assert columns and all(re.fullmatch(r"[A-Za-z_][\w]*", c) for c in columns), columns
        assert len(columns) == len(set(columns)), columns
