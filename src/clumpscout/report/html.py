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

from clumpscout.io import atomic_path
from clumpscout.report.project import plural, probability_sentence


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


#: how a run's warnings stand out at the top of a report
_WARNING_CSS = (
    ".warnings{border:2px solid #c00;background:#fff0f0;padding:0.5em 1em;margin:1em 0}"
    ".warnings li{margin:0.3em 0}"
)


def warnings_html(warnings: Iterable[str]) -> str:
    """The run's warnings (the lines its log prefixes with RUN HEALTH WARNING) as a box at
    the top of a report; '' without any."""
    warnings = list(warnings)
    if not warnings:
        return ""
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    return f'<div class="warnings"><strong>Run health warnings</strong><ul>{items}</ul></div>'


def read_warnings(path: str | Path) -> list[str]:
    """The ``warnings`` list of a JSON document (e.g. results/gold/agreement.json)."""
    import json

    return list(json.loads(Path(path).read_text()).get("warnings") or [])


def render(
    items: Iterable[Mapping], intro: str = "", title: str = "clumpscout", warnings=()
) -> str:
    """The HTML text. ``items``: mappings with ``path`` (the output), ``caption`` (a
    caption file or None) and ``category``; grouped by category in sorted order;
    ``warnings`` (the run's, e.g. of its gold check) in a box under the title."""
    by_cat: dict[str, list[Mapping]] = {}
    for item in items:
        by_cat.setdefault(str(item.get("category") or "Other"), []).append(item)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:70em;margin:auto;padding:1em}"
        "img{max-width:100%}section{margin-bottom:3em}h3{margin-top:2em}"
        + (_WARNING_CSS if warnings else "")
        + "</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        warnings_html(warnings),
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
    items: Iterable[Mapping],
    out: str | Path,
    intro: str | Path | None = None,
    title: str = "",
    warnings: Iterable[str] = (),
) -> Path:
    """Write :func:`render`'s page to ``out``; ``intro`` is a reStructuredText file."""
    text = Path(intro).read_text() if intro else ""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    page = render(items, text, title or "clumpscout report", list(warnings))
    out.write_text(page, encoding="utf-8")
    return out


# ------------------------------------------------------------------------ project report

_PROJECT_CSS = (
    "body{font-family:sans-serif;max-width:70em;margin:auto;padding:1em;line-height:1.4}"
    "img{max-width:100%}section{margin-bottom:3em}"
    "table{border-collapse:collapse;margin:0.8em 0;font-size:0.9em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}"
    "th{background:#f0f0f0}.caption{max-width:60em}"
)


def _tools(clicks: str | Path | None) -> str:
    """The tools of the kept marks, ``0 (Adults)``, from clicks.parquet ('' if unknown)."""
    if not clicks or not Path(clicks).exists():
        return ""
    import pandas as pd
    import pyarrow.parquet as pq

    cols = [c for c in ("tool", "tool_label") if c in pq.read_schema(clicks).names]
    if "tool" not in cols:
        return ""
    t = pd.read_parquet(clicks, columns=cols).dropna(subset=["tool"]).drop_duplicates()
    parts = []
    for row in t.sort_values("tool").itertuples(index=False):
        label = getattr(row, "tool_label", None)
        parts.append(
            f"{int(row.tool)}" + (f" ({label})" if isinstance(label, str) and label else "")
        )
    return ", ".join(dict.fromkeys(parts))


def project_intro(about: Mapping, report: Mapping, tools: str = "") -> tuple[str, list[str]]:
    """The project report's title and introduction (paragraphs of plain text), from the
    config (``about``: project.smk's ``project_about``) and the clicks report."""
    obj = str(about.get("object_name") or "object")
    objs = plural(obj)
    name = str(about.get("project_name") or "Project")
    title = f"{name}: {objs} counted from the volunteers' marks"
    if about.get("source") == "clicks":
        where = "a flattened table of the volunteers' marks"
    elif about.get("source") == "simulate":
        where = "a simulated project"
    else:
        where = "a Zooniverse classification export"
        if about.get("workflow_id") is not None:
            where += f", workflow {about['workflow_id']}"
            if about.get("workflow_version") is not None:
                where += f" (version {about['workflow_version']})"
        if about.get("task"):
            where += f", task {about['task']}"
    if tools:
        where += f", tool{'s' if ',' in tools else ''} {tools}"
    n_cls = int(report.get("classifications_kept", 0) or 0)
    n_img = int(report.get("subjects", 0) or 0)
    n_vol = int(report.get("volunteers", 0) or 0)
    n_marks = int(report.get("clicks_kept", 0) or 0)
    paras = [
        f"What the volunteers of {name} marked, combined into one catalogue of {objs}. "
        f"Input: {where}: {n_cls:,} classifications of {n_img:,} images by {n_vol:,} "
        f"volunteers, {n_marks:,} marks.",
        f"Every image's marks are combined by the default consensus model "
        f"({about.get('model', 'generative')}), with up to {about.get('n')} classifications "
        f"per image: marks that several volunteers put at one place become one label. "
        + probability_sentence({"object": obj, "objects": objs}, bool(about.get("gold"))),
        "To take away, beside this report: catalogue.csv and catalogue.ecsv (one row per "
        "label: image, position, size, probability, marks) and images.csv (one row per image: "
        "expected count and its range, classifications used, retired or not).",
    ]
    return title, paras


def render_project(
    sections: Iterable[Mapping], title: str, intro: Iterable[str], tables: Mapping[str, str]
) -> str:
    """The project report's HTML: ``sections`` are the section JSON documents (title,
    caption) with ``png`` (path) added; ``tables`` maps a section name to its table's
    HTML. A section's ``warnings`` (the gold check's) stand under the title."""
    sections = list(sections)
    warnings = [w for s in sections for w in s.get("warnings") or []]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_PROJECT_CSS}{_WARNING_CSS if warnings else ''}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        warnings_html(warnings),
        *(f"<p>{html.escape(p)}</p>" for p in intro),
        "<nav><ol>",
        *(
            f'<li><a href="#{html.escape(s["section"])}">{html.escape(s["title"])}</a></li>'
            for s in sections
        ),
        "</ol></nav>",
    ]
    for i, s in enumerate(sections, 1):
        parts.append(f'<section id="{html.escape(s["section"])}">')
        parts.append(f"<h2>{i}. {html.escape(s['title'])}</h2>")
        parts.append(_embed(Path(s["png"])))
        parts.append(f'<p class="caption">{html.escape(s["caption"])}</p>')
        parts.append(tables.get(s["section"], ""))
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p) + "\n"


def write_project_report(
    stems: Iterable[str | Path],
    out: str | Path,
    *,
    about: Mapping,
    clicks: str | Path | None = None,
    clicks_report: str | Path | None = None,
) -> Path:
    """Write the project report: one section per ``<stem>.{png,csv,json}`` written by
    :func:`clumpscout.report.project.build`, in the order given."""
    import json

    import pandas as pd

    report = json.loads(Path(clicks_report).read_text()) if clicks_report else {}
    title, intro = project_intro(about, report, _tools(clicks))
    sections, tables = [], {}
    for stem in map(Path, stems):
        doc = json.loads(stem.with_name(stem.name + ".json").read_text())
        doc["png"] = str(stem.with_name(stem.name + ".png"))
        sections.append(doc)
        table = pd.read_csv(stem.with_name(stem.name + ".csv"), dtype=str, keep_default_na=False)
        if len(table.columns) and len(table):
            tables[doc["section"]] = table.to_html(index=False, border=0, escape=True)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(render_project(sections, title, intro, tables), encoding="utf-8")
    return out
