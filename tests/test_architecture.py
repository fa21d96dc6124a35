"""The package's layers (docs/architecture.md): no module imports another module's underscore
name, none imports against the declared layer order, no files import each other round a
circle, and package imports sit at the top of their modules. Imports anywhere in a file
count, as ../shared/tools/house_facts.py counts them.

The checker itself is tested first on a small package written here, whose violations are
known by construction."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "src" / "clumpscout"
ARCHITECTURE = REPO / "docs" / "architecture.md"

#: package imports inside a function by design (docs/architecture.md#imports-at-the-top-of-a-module)
LAZY_BY_DESIGN = {
    # the compile meter counts what importing the model compiles
    ("src/clumpscout/numba_cache.py", "clumpscout.model.aggregator"),
    ("src/clumpscout/numba_cache.py", "clumpscout.model.source"),
    # astropy (through clumpscout.ecsv) only when clumps.ecsv is written
    ("src/clumpscout/model/aggregator.py", "clumpscout.ecsv"),
    # the gold standard is read and checked before the aggregation's numba kernels load
    ("src/clumpscout/model/command.py", "clumpscout.model.aggregator"),
    # `clumpscout serve --help` answers before the service and its model are imported
    ("src/clumpscout/service/main.py", "clumpscout.service.app"),
    ("src/clumpscout/service/main.py", "clumpscout.service.settings"),
}
#: parts that take no place in the line: the package's own __init__ (its version) and
#: __main__ (the cli under another name)
UNRANKED = {"__init__", "__main__"}


# ------------------------------------------------------------------ the checker
@dataclass
class Graph:
    """What the package's files import from each other."""

    root: Path  # src/<package>
    modules: dict[str, Path] = field(default_factory=dict)  # dotted name -> file
    edges: dict[str, set[str]] = field(default_factory=dict)
    private: list[tuple[str, str, str]] = field(default_factory=list)  # (file, name, module)
    lazy: list[tuple[str, str]] = field(default_factory=list)  # (file, imported module)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _target(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    if node.level == 0:
        return node.module
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _inside_functions(tree: ast.AST) -> set[ast.AST]:
    inner: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inner.update(n for n in ast.walk(node) if n is not node)
    return inner


def read_graph(root: Path) -> Graph:
    pkg = root.name
    g = Graph(root)
    files = sorted(root.rglob("*.py"))
    g.modules = {_module_name(f, root): f for f in files}
    for mod, f in g.modules.items():
        g.edges[mod] = set()
        tree = ast.parse(f.read_text(encoding="utf-8"))
        inner = _inside_functions(tree)
        rel = str(f.relative_to(root.parent.parent))
        for node in ast.walk(tree):
            dests: list[tuple[str, str | None]] = []  # (module, imported name)
            if isinstance(node, ast.ImportFrom):
                target = _target(node, mod, f.name == "__init__.py")
                if not target or not (target == pkg or target.startswith(pkg + ".")):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    dests.append((sub if sub in g.modules else target, alias.name))
            elif isinstance(node, ast.Import):
                dests = [(a.name, None) for a in node.names if a.name in g.modules]
            for dest, name in dests:
                if dest == mod or dest not in g.modules:
                    continue
                g.edges[mod].add(dest)
                if name and name.startswith("_") and not name.startswith("__"):
                    g.private.append((rel, name, dest))
                if node in inner:
                    g.lazy.append((rel, dest))
    return g


def part(module: str) -> str:
    """The layer of a module: its first component under the package (``__init__`` for the
    package itself)."""
    bits = module.split(".")
    return bits[1] if len(bits) > 1 else "__init__"


def layers(text: str) -> list[str]:
    hit = re.search(r"^layers:\s*(.+)$", text, flags=re.M)
    assert hit, "no line `layers: a < b < ...` in docs/architecture.md"
    return [x.strip() for x in hit.group(1).split("<")]


def against_layers(g: Graph, order: list[str]) -> list[tuple[str, str]]:
    rank = {name: i for i, name in enumerate(order)}
    return sorted(
        (a, b)
        for a, bs in g.edges.items()
        for b in bs
        if part(a) in rank and part(b) in rank and rank[part(b)] > rank[part(a)]
    )


def circles(g: Graph) -> list[frozenset[str]]:
    """The strongly connected components of more than one file (naive: a file is in a
    circle with every file it reaches that reaches it back)."""

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in g.edges[todo.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    reached = {m: reach(m) for m in g.edges}
    comps = {frozenset({m} | {o for o in reached[m] if m in reached[o]}) for m in g.edges}
    return sorted((c for c in comps if len(c) > 1), key=sorted)


# ------------------------------------------------------------------ the checker, on a toy
#: a toy package, file by file (``=== path`` starts a file): one private import, one
#: circle closed by an import inside a function, and two layers to put in either order
TOY = """
=== __init__.py
__version__ = '1'
=== low.py
def helper():
    pass


def _secret():
    pass
=== high.py
from toy import low
from toy.low import _secret
=== sub/__init__.py
=== sub/a.py
from . import b
=== sub/b.py
def f():
    from toy.sub.a import x
=== sub/c.py
import toy.high
from toy import __version__
"""


def _toy(tmp_path: Path) -> Path:
    root = tmp_path / "src" / "toy"
    for chunk in TOY.split("=== ")[1:]:
        name, _, text = chunk.partition("\n")
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_checker_finds_each_kind_of_violation_in_a_toy_package(tmp_path):
    g = read_graph(_toy(tmp_path))
    assert g.private == [("src/toy/high.py", "_secret", "toy.low")]
    assert circles(g) == [frozenset({"toy.sub.a", "toy.sub.b"})]  # one edge inside a function
    assert g.lazy == [("src/toy/sub/b.py", "toy.sub.a")]
    assert g.edges["toy.sub.c"] == {"toy.high", "toy"}  # the package itself: __version__
    # `sub` above `high`, above `low`: fine; declared the other way round, sub/c.py -> high
    # and high.py -> low point up
    assert against_layers(g, ["low", "high", "sub"]) == []
    assert against_layers(g, ["sub", "high", "low"]) == [
        ("toy.high", "toy.low"),
        ("toy.sub.c", "toy.high"),
    ]


# ------------------------------------------------------------------ the package
GRAPH = read_graph(PACKAGE)


def test_no_module_imports_another_modules_underscore_name():
    found = {(f, name) for f, name, _ in GRAPH.private}
    assert found == set()


def test_every_layer_is_declared_once_and_no_import_points_up():
    order = layers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert len(order) == len(set(order)), order
    present = {part(m) for m in GRAPH.modules} - UNRANKED
    assert present - set(order) == set(), "give these a place in docs/architecture.md"
    assert order[-1] == "cli"
    assert against_layers(GRAPH, order) == []


def test_every_layer_has_its_paragraph():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    for name in layers(text):
        assert re.search(rf"^\*\*`{re.escape(name)}`\*\*", text, flags=re.M), name


def test_no_import_circles():
    assert set(circles(GRAPH)) == set()


def test_package_imports_sit_at_the_top_of_their_modules():
    lazy = set(GRAPH.lazy) - LAZY_BY_DESIGN
    assert lazy == set(), "move these to the top, or say in docs/architecture.md why not"


def test_the_allow_list_holds_only_what_still_occurs():
    """An import by design that no longer occurs fails here, so the list shrinks with the code."""
    assert LAZY_BY_DESIGN - set(GRAPH.lazy) == set()
