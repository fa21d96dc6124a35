"""Which package source files a workflow script runs, so rules re-run when that code changes.

Each rule passes ``code=code_digest("<script>")`` as a param (workflow/rules/common.smk).
The digest hashes the script and every file it would execute: its ``clumpscout`` imports,
followed transitively through the package, lazy imports inside functions included, plus
the ``__init__`` of every package on the way and the script folder's own helper modules
(``scripts/_common.py``). Found statically with :mod:`ast`, so nothing is imported and no
list is kept by hand (docs/decisions.md#code-digest).
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

PACKAGE = "clumpscout"


def _imported_names(path: Path) -> frozenset[str]:
    """Dotted names ``path`` imports anywhere in its body (``from a import b`` gives both
    ``a`` and ``a.b``, since ``b`` may be a module); relative imports are resolved
    against the package the file belongs to. Parsed once per file version: every rule's
    digest walks the same package files, and parsing them for each rule was two thirds of
    the time Snakemake took to read the workflow."""
    st = path.stat()
    return _parsed_imports(path, st.st_mtime_ns, st.st_size)


@functools.cache
def _parsed_imports(path: Path, mtime_ns: int, size: int) -> frozenset[str]:
    """:func:`_imported_names` of one version (time stamp, size) of ``path``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = _module_parts(path)
                anchor = parts[: len(parts) - node.level] if parts else [PACKAGE]
                base = ".".join(anchor + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{a.name}" for a in node.names)
    return frozenset(names)


def _module_parts(path: Path) -> list[str]:
    """['clumpscout', 'model', 'em'] for .../src/clumpscout/model/em.py."""
    parts = list(path.with_suffix("").parts)
    if PACKAGE not in parts:
        return []
    parts = parts[len(parts) - 1 - parts[::-1].index(PACKAGE) :]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _files_for(name: str, src: Path) -> list[Path]:
    """Source files executed by importing the dotted ``name`` (its packages' __init__
    files, then the module itself); empty for names outside ``src``."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return []
    files = []
    for i in range(1, len(parts) + 1):
        base = src.joinpath(*parts[:i])
        if (base / "__init__.py").is_file():
            files.append(base / "__init__.py")
        elif base.with_suffix(".py").is_file():
            files.append(base.with_suffix(".py"))
            break
        else:
            break  # an attribute imported from a module, not a module
    return files


def import_closure(script: Path, src: Path) -> list[Path]:
    """Every file ``script`` runs: itself, its sibling helpers imported by plain name, and
    the files of package ``src/clumpscout`` it imports directly or transitively. Sorted."""
    script = Path(script)
    seen: set[Path] = set()
    todo = [script]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imported_names(path):
            todo += _files_for(name, src)
            if "." not in name and path.parent == script.parent:
                helper = script.parent / f"{name}.py"
                if helper.is_file():
                    todo.append(helper)
    return sorted(seen)


def code_digest(script: Path, src: Path, root: Path) -> str:
    """sha256 (16 hex digits) of the files :func:`import_closure` lists, each keyed by its
    path relative to ``root`` so a move changes the digest too."""
    h = hashlib.sha256()
    for path in import_closure(script, src):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]
