"""The column reference of docs/tables.md, read as the tests need it.

Each table of the reference sits under an anchor (``<a id="labels"></a>``); its first
Markdown table lists the columns in the order the file holds them, several columns of one
row separated by commas (``x1, y1, x2, y2``).
"""

from __future__ import annotations

import re
from pathlib import Path

TABLES_MD = Path(__file__).resolve().parents[1] / "docs" / "tables.md"


def sections(text: str | None = None) -> dict[str, str]:
    """The text below each anchor of docs/tables.md, up to the next anchor."""
    text = TABLES_MD.read_text(encoding="utf-8") if text is None else text
    parts = re.split(r'^<a id="([^"]+)"></a>\s*$', text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def tables(section: str) -> list[list[str]]:
    """The first-column cells of every Markdown table of a section, table by table, each
    cell split into its column names."""
    out, current = [], None
    for line in section.splitlines():
        if not line.startswith("|"):
            current = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if current is None:  # the header row starts a table
            current = []
            out.append(current)
            continue
        if set(cells[0]) <= set("-: "):  # the rule under the header
            continue
        current.extend(name.strip() for name in cells[0].split(","))
    return out


def documented_columns(anchor: str, which: int = 0, text: str | None = None) -> list[str]:
    """The columns of table ``which`` (0: the first) under ``anchor``, in the documented order."""
    found = sections(text)
    if anchor not in found:
        raise KeyError(f"docs/tables.md has no anchor {anchor!r}")
    return tables(found[anchor])[which]
