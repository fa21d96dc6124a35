"""The run's report as one self-contained HTML file, built inside the DAG.

The workflow's last rule (``report``, workflow/rules/report.smk) calls :func:`write_report`
with every output the rules mark with ``report(...)``: PNG figures inline (base64), HTML
pages (the headline table) inline, each with its caption (reStructuredText in
workflow/report/) under its category. ``snakemake --cores 2`` therefore leaves an up-to-date
``results/report.html`` (docs/decisions.md#report-in-dag); ``snakemake --report`` still
builds Snakemake's own report (provenance, run times) on request.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable, Mapping
from pathlib import Path


def rst_to_html(text: str) -> str:
    """A caption as an HTML fragment (docutils if available, else preformatted text)."""
    try:
        from docutils.core import publish_parts
    except ImportError:  # pragma: no cover - docutils comes with snakemake
        return f"<pre>{html.escape(text)}</pre>"
    settings = {"report_level": 5, "halt_level": 5, "input_encoding": "unicode"}
    return publish_parts(text, writer="html", settings_overrides=settings)["fragment"]


def _embed(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix.lower() == ".png":
        b64 = base64.b64encode(data).decode("ascii")
        return f'<img alt="{html.escape(path.name)}" src="data:image/png;base64,{b64}">'
    if path.suffix.lower() in (".html", ".htm"):
        doc = html.escape(data.decode("utf-8"), quote=True)
        return f'<iframe srcdoc="{doc}" style="width:100%;height:40em;border:0"></iframe>'
    return f"<pre>{html.escape(data.decode('utf-8', errors='replace'))}</pre>"


def render(items: Iterable[Mapping], intro: str = "", title: str = "clumpscout") -> str:
    """The HTML text. ``items``: mappings with ``path`` (the output), ``caption`` (a
    caption file or None) and ``category``; grouped by category in sorted order."""
    by_cat: dict[str, list[Mapping]] = {}
    for item in items:
        by_cat.setdefault(str(item.get("category") or "Other"), []).append(item)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto;padding:1em}"
        "img{max-width:100%}section{margin-bottom:3em}h3{margin-top:2em}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        rst_to_html(intro) if intro else "",
        "<nav><ul>",
        *(
            f'<li><a href="#cat{i}">{html.escape(cat)}</a></li>'
            for i, cat in enumerate(sorted(by_cat))
        ),
        "</ul></nav>",
    ]
    for i, cat in enumerate(sorted(by_cat)):
        parts.append(f'<section id="cat{i}"><h2>{html.escape(cat)}</h2>')
        for item in sorted(by_cat[cat], key=lambda it: str(it["path"])):
            path = Path(item["path"])
            parts.append(f"<h3>{html.escape(path.name)}</h3>")
            parts.append(_embed(path))
            caption = item.get("caption")
            if caption:
                parts.append(rst_to_html(Path(caption).read_text()))
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def write_report(
    items: Iterable[Mapping], out: str | Path, intro: str | Path | None = None, title: str = ""
) -> Path:
    """Write :func:`render`'s page to ``out``; ``intro`` is a reStructuredText file."""
    text = Path(intro).read_text() if intro else ""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(items, text, title or "clumpscout report"), encoding="utf-8")
    return out
