"""Write a simulated universe as Zooniverse export CSVs (galaxies or a counting project:
:func:`write_exports`, with the subject table, ids and identities of both; the report:
:func:`write_report`).

The classification export has the columns of a real Zooniverse export
(classification_id, user_name, user_id, user_ip, workflow_id, workflow_name,
workflow_version, created_at, gold_standard, expert, metadata, annotations,
subject_data, subject_ids) and the JSON shapes of a real one (cf. the Penguin
Watch export in ../shared): ``annotations`` is a list of
``{"task", "task_label", "value": [{"x", "y", "tool", "frame", "details",
"tool_label"}, ...]}``, one entry per task (T0 bulge, T1 clumps; a task with no
mark has ``"value": []``); ``metadata`` holds session, viewport, started_at,
user_agent, utc_offset, finished_at, live_project, user_language and
``subject_dimensions`` (naturalWidth = naturalHeight = 400); ``subject_data`` is
``{"<subject_id>": {"retired": {...} | null, <subject metadata>}}``.
Timestamps: created_at ``YYYY-MM-DD HH:MM:SS UTC``, JSON times ISO 8601 with
milliseconds and ``Z``. user_id is empty for volunteers who are not logged in.

The workflow, its tasks and tools and the image size come from an
:class:`ExportLayout` (default :data:`CLUMP_SCOUT`; the counting universe of
:mod:`clumpscout.simulation.counting` has one task T0 and 800 x 600 images).
Click coordinates are written with two decimals. The JSON strings are built
with templates (every value is a number, a fixed label or a hex string, so no
escaping is needed) and the CSV is written in chunks, so memory stays bounded
at paper scale. Project, subject-set and user ids and image URLs are made up.
"""

from __future__ import annotations

import csv
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from clumpscout.io import atomic_path, compression_of, open_text_out, write_json
from clumpscout.logs import progress
from clumpscout.simulation.config import EXPERT_USER_ID0

log = logging.getLogger(__name__)

WORKFLOW_ID = 11803
WORKFLOW_NAME = "Clump Scout"
WORKFLOW_VERSION = "64.136"
PROJECT_ID = 11753  # made up
SUBJECT_SET_IDS = (81001, 81002, 81003)  # one per sample; made up
T0_LABEL = "Mark the centre of the galaxy's bulge, if you can see one."
T1_LABEL = "Mark each clump you can see; use the unusual tool for odd ones."
TOOL_LABELS = {("T0", 0): "Bulge", ("T1", 0): "Normal clump", ("T1", 1): "Unusual clump"}


@dataclass(frozen=True)
class ExportLayout:
    """What an export says about its project: workflow, drawing tasks, tools and images.

    ``tasks``: (task key, label) in annotation order; a click's ``task`` column is
    the index into it. ``tools``: (task index, tool index, tool label) of every
    point tool. ``location``: the subject image URL, ``{sid}`` = subject id.
    """

    workflow_id: int = WORKFLOW_ID
    workflow_name: str = WORKFLOW_NAME
    workflow_version: str = WORKFLOW_VERSION
    project_id: int = PROJECT_ID
    tasks: tuple[tuple[str, str], ...] = (("T0", T0_LABEL), ("T1", T1_LABEL))
    tools: tuple[tuple[int, int, str], ...] = (
        (0, 0, "Bulge"),
        (1, 0, "Normal clump"),
        (1, 1, "Unusual clump"),
    )
    image_width: int = 400
    image_height: int = 400
    subject_set_ids: tuple[int, ...] = SUBJECT_SET_IDS
    location: str = "https://example.org/clumpscout-sim/{sid}.png"


#: the simulated Clump Scout workflow (T0 bulge, T1 clumps)
CLUMP_SCOUT = ExportLayout()

CLASSIFICATION_COLUMNS = (
    "classification_id",
    "user_name",
    "user_id",
    "user_ip",
    "workflow_id",
    "workflow_name",
    "workflow_version",
    "created_at",
    "gold_standard",
    "expert",
    "metadata",
    "annotations",
    "subject_data",
    "subject_ids",
)
SUBJECT_COLUMNS = (
    "subject_id",
    "project_id",
    "workflow_id",
    "subject_set_id",
    "metadata",
    "locations",
    "classifications_count",
    "retired_at",
    "retirement_reason",
    "created_at",
    "updated_at",
)

USER_AGENTS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/78.0.3904.97 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:70.0) Gecko/20100101 Firefox/70.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_1) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/13.0.3 Safari/605.1.15",
    "Mozilla/5.0 (X11; Linux x86_64; rv:70.0) Gecko/20100101 Firefox/70.0",
    "Mozilla/5.0 (iPad; CPU OS 13_2 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    "Version/13.0.3 Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:70.0) Gecko/20100101 Firefox/70.0",
)
VIEWPORTS = ((1920, 969), (1440, 789), (1366, 657), (2560, 1329), (1280, 689), (1024, 1292))
UTC_OFFSETS = ("0", "-3600", "-7200", "18000", "21600", "25200", "28800", "-19800", "-36000")
CHUNK = 25_000  # classifications formatted at once (memory: ~40 MB of text)


def format_times(seconds: np.ndarray, start: pd.Timestamp) -> tuple[list[str], list[str]]:
    """(created_at strings, ISO-with-ms strings) for times in seconds since ``start``."""
    t0 = np.datetime64(start.tz_convert("UTC").tz_localize(None) if start.tzinfo else start, "ms")
    ms = t0 + np.round(np.asarray(seconds, dtype=float) * 1000.0).astype("timedelta64[ms]")
    iso = np.datetime_as_string(ms, unit="ms").tolist()
    created = [f"{s[:10]} {s[11:19]} UTC" for s in iso]
    return created, [s + "Z" for s in iso]


def _esc(s: str) -> str:
    """``s`` with CSV quoting applied to its double quotes (RFC 4180: doubled)."""
    return s.replace('"', '""')


_COORD_LO, _COORD_HI = -200.0, 600.0  # coordinates formatted through a lookup table
_COORD_TABLE: list[str] = []


def format_coords(v: np.ndarray) -> list[str]:
    """Coordinates with two decimals (as ``f"{v:.2f}"``), via a lookup table (fast)."""
    global _COORD_TABLE
    if not _COORD_TABLE:
        k = np.arange(int(_COORD_LO * 100), int(_COORD_HI * 100) + 1)
        _COORD_TABLE = [f"{q / 100:.2f}" for q in k.tolist()]
    v = np.asarray(v, dtype=float)
    q = np.round(v * 100.0)
    inside = (q >= _COORD_LO * 100) & (q <= _COORD_HI * 100)
    idx = (np.where(inside, q, 0) - _COORD_LO * 100).astype(np.int64).tolist()
    table = _COORD_TABLE
    out = [table[i] for i in idx]
    for i in np.flatnonzero(~inside).tolist():
        out[i] = f"{v[i]:.2f}"
    return out


def click_items(
    task: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    tool: np.ndarray,
    layout: ExportLayout = CLUMP_SCOUT,
) -> list[str]:
    """One ``{"x", "y", "tool", "frame", "details", "tool_label"}`` object per click,
    already CSV-escaped (built from an escaped template: no per-row escaping)."""
    tails = [
        _esc(f',"tool":{t},"frame":0,"details":[],"tool_label":"{label}"}}')
        for _, t, label in layout.tools
    ]
    width = 1 + max(t for _, t, _ in layout.tools)
    lut = np.zeros(len(layout.tasks) * width, np.int64)
    for k, (ti, t, _) in enumerate(layout.tools):
        lut[ti * width + t] = k
    kind = lut[np.asarray(task, np.int64) * width + np.asarray(tool, np.int64)].tolist()
    return [
        f'{{""x"":{xx},""y"":{yy}{tails[k]}'
        for xx, yy, k in zip(format_coords(x), format_coords(y), kind, strict=True)
    ]


def annotations_fields(
    n_cls: int,
    cls: np.ndarray,
    task: np.ndarray,
    items: list[str],
    layout: ExportLayout = CLUMP_SCOUT,
) -> list[str]:
    """The ``annotations`` CSV field of each classification: every task of ``layout``
    in order, each with its clicks (possibly none). ``cls``/``task`` are sorted by
    classification, then task, then click order; ``items`` come from :func:`click_items`."""
    n_t = len(layout.tasks)
    key = cls.astype(np.int64) * n_t + task.astype(np.int64)
    b = np.searchsorted(key, np.arange(n_t * n_cls + 1)).tolist()
    heads = [
        _esc(f']}},{{"task":"{name}","task_label":"{label}","value":[')
        for name, label in layout.tasks
    ]
    heads[0] = '"[' + heads[0][3:]  # the first task opens the list
    tail = ']}]"'
    if n_t == 2:
        head0, head1 = heads
        return [
            head0
            + ",".join(items[b[2 * c] : b[2 * c + 1]])
            + head1
            + ",".join(items[b[2 * c + 1] : b[2 * c + 2]])
            + tail
            for c in range(n_cls)
        ]
    return [
        "".join(
            h + ",".join(items[b[n_t * c + k] : b[n_t * c + k + 1]]) for k, h in enumerate(heads)
        )
        + tail
        for c in range(n_cls)
    ]


def volunteer_strings(
    n: int, rng: np.random.Generator, width: int = 400, height: int = 400
) -> dict[str, list[str]]:
    """Per-volunteer browser details: the fixed parts of the metadata JSON (CSV-escaped);
    ``width`` x ``height`` is the subject image size the browser reports."""
    ua = rng.integers(0, len(USER_AGENTS), n)
    vp = rng.integers(0, len(VIEWPORTS), n)
    off = rng.integers(0, len(UTC_OFFSETS), n)
    out_vp, out_mid, out_dims = [], [], []
    for a, v, o in zip(ua.tolist(), vp.tolist(), off.tolist(), strict=True):
        w, h = VIEWPORTS[v]
        cw = min(int(0.45 * w), 700)
        ch = int(round(cw * height / width))
        out_vp.append(_esc(f'{{"width":{w},"height":{h}}}'))
        out_mid.append(_esc(f'"user_agent":"{USER_AGENTS[a]}","utc_offset":"{UTC_OFFSETS[o]}"'))
        out_dims.append(
            _esc(
                f'[{{"clientWidth":{cw},"clientHeight":{ch},"naturalWidth":{width},'
                f'"naturalHeight":{height}}}]'
            )
        )
    return {"viewport": out_vp, "mid": out_mid, "dims": out_dims}


def hex_strings(n: int, nbytes: int, rng: np.random.Generator) -> list[str]:
    """``n`` random hex strings of ``2 nbytes`` characters."""
    h = rng.bytes(n * nbytes).hex()
    w = 2 * nbytes
    return [h[i * w : (i + 1) * w] for i in range(n)]


def galaxy_metadata(subjects: pd.DataFrame) -> list[str]:
    """Subject metadata JSON of the simulated Clump Scout subjects (ra, dec, sample)."""
    rows = zip(
        subjects["subject_id"].tolist(),
        subjects["ra"].tolist(),
        subjects["dec"].tolist(),
        subjects["sample"].tolist(),
        strict=True,
    )
    return [
        f'{{"ra":{ra:.6f},"dec":{dec:.6f},"image_width":400,"image_height":400,'
        f'"#sample":"{sample}","#filename":"{sid}.png"}}'
        for sid, ra, dec, sample in rows
    ]


def subject_json(
    subjects: pd.DataFrame,
    start: pd.Timestamp,
    meta: Sequence[str] | None = None,
    layout: ExportLayout = CLUMP_SCOUT,
) -> tuple[list[str], list[str]]:
    """(subject metadata JSON, subject_data JSON) per subject.

    ``subjects`` needs subject_id, retired (bool), n_classified, retirement_id,
    created_s, updated_s, retired_s (seconds since ``start``); ``meta`` is each
    subject's metadata JSON object (default: :func:`galaxy_metadata`, which needs
    ra, dec and sample too).
    """
    _, created = format_times(subjects["created_s"].to_numpy(), start)
    _, updated = format_times(subjects["updated_s"].to_numpy(), start)
    _, retired = format_times(subjects["retired_s"].fillna(0.0).to_numpy(), start)
    meta = list(galaxy_metadata(subjects) if meta is None else meta)
    data = []
    rows = zip(
        subjects["subject_id"].tolist(),
        meta,
        subjects["retired"].tolist(),
        subjects["n_classified"].tolist(),
        subjects["retirement_id"].tolist(),
        created,
        updated,
        retired,
        strict=True,
    )
    for sid, m, is_ret, ncl, rid, cr, up, rt in rows:
        if is_ret:
            ret = (
                f'{{"id":{rid},"workflow_id":{layout.workflow_id},"classifications_count":{ncl},'
                f'"created_at":"{cr}","updated_at":"{up}","retired_at":"{rt}",'
                f'"subject_id":{sid},"retirement_reason":"classification_count"}}'
            )
        else:
            ret = "null"
        data.append(f'{{"{sid}":{{"retired":{ret},{m[1:]}}}')
    return meta, data


def write_classifications(
    path: str | os.PathLike,
    table: pd.DataFrame,
    clicks: pd.DataFrame,
    vol_names: Sequence[str],
    vol_ids: Sequence[str],
    vol_ips: Sequence[str],
    vol_meta: dict[str, list[str]],
    vol_logged_in: np.ndarray,
    session_hex: Sequence[str],
    subject_data: Sequence[str],
    subject_ids: np.ndarray,
    start: pd.Timestamp,
    expert: bool = False,
    layout: ExportLayout = CLUMP_SCOUT,
) -> None:
    """Write a classification export (compressed when ``path`` ends in a suffix of
    :data:`clumpscout.io.COMPRESSION_SUFFIXES`, e.g. ``.zst``).

    ``table``: one row per classification in output order with classification_id,
    vol (volunteer index), gal (subject index), t_end, t_start (seconds since
    ``start``), session (index into ``session_hex``). ``clicks``: cls (row of
    ``table``), task (index into ``layout.tasks``), x, y, tool; sorted by cls,
    task, click order.
    """
    n = len(table)
    cls = clicks["cls"].to_numpy()
    task = clicks["task"].to_numpy()
    cptr = np.searchsorted(cls, np.arange(n + 1))
    exp = "expert" if expert else ""
    # the fixed leading fields of each volunteer, and each subject's data, CSV-quoted once
    vprefix = [
        f"{nm},{uid},{ip},{layout.workflow_id},{layout.workflow_name},{layout.workflow_version},"
        for nm, uid, ip in zip(vol_names, vol_ids, vol_ips, strict=True)
    ]
    vgroups = ['""user_group_ids"":[],' if li else "" for li in np.asarray(vol_logged_in).tolist()]
    sdata = [_csv_quote(d) for d in subject_data]
    sids = subject_ids.tolist()
    vp, mid, dims = vol_meta["viewport"], vol_meta["mid"], vol_meta["dims"]
    with atomic_path(path) as tmp, open_text_out(tmp, compression_of(path)) as fh:
        fh.write(",".join(CLASSIFICATION_COLUMNS) + "\n")
        for c0 in progress(range(0, n, CHUNK), "writing classifications", -(-n // CHUNK)):
            c1 = min(n, c0 + CHUNK)
            part = table.iloc[c0:c1]
            a, b = int(cptr[c0]), int(cptr[c1])
            items = click_items(
                task[a:b], clicks["x"].to_numpy()[a:b], clicks["y"].to_numpy()[a:b],
                clicks["tool"].to_numpy()[a:b], layout,
            )  # fmt: skip
            ann = annotations_fields(c1 - c0, cls[a:b] - c0, task[a:b], items, layout)
            created, fin = format_times(part["t_end"].to_numpy(), start)
            _, started = format_times(part["t_start"].to_numpy(), start)
            rows = zip(
                part["classification_id"].to_numpy().tolist(),
                part["vol"].to_numpy().tolist(),
                part["gal"].to_numpy().tolist(),
                part["session"].to_numpy().tolist(),
                created,
                started,
                fin,
                ann,
                strict=True,
            )
            fh.write(
                "".join(
                    [
                        f'{cid},{vprefix[v]}{cr},,{exp},"{{""session"":""{session_hex[s]}"",'
                        f'""viewport"":{vp[v]},""started_at"":""{st}"",{mid[v]},'
                        f'""finished_at"":""{fi}"",""live_project"":true,""user_language"":""en"",'
                        f'{vgroups[v]}""subject_dimensions"":{dims[v]}}}",{an},{sdata[g]},{sids[g]}\n'
                        for cid, v, g, s, cr, st, fi, an in rows
                    ]
                )
            )


def _csv_quote(s: str) -> str:
    """A CSV field holding ``s`` (always quoted, inner quotes doubled: RFC 4180)."""
    return '"' + s.replace('"', '""') + '"'


def write_subjects_export(
    path: str | os.PathLike,
    subjects: pd.DataFrame,
    meta: Sequence[str],
    start: pd.Timestamp,
    layout: ExportLayout = CLUMP_SCOUT,
) -> None:
    """Write the subject export (one row per subject of the workflow); ``subjects``
    needs ``_sample`` (index into ``layout.subject_set_ids``)."""
    created, _ = format_times(subjects["created_s"].to_numpy(), start)
    updated, _ = format_times(subjects["updated_s"].to_numpy(), start)
    retired, _ = format_times(subjects["retired_s"].fillna(0.0).to_numpy(), start)
    is_ret = subjects["retired"].to_numpy(bool)
    df = pd.DataFrame(
        {
            "subject_id": subjects["subject_id"].to_numpy(),
            "project_id": layout.project_id,
            "workflow_id": layout.workflow_id,
            "subject_set_id": np.asarray(layout.subject_set_ids)[subjects["_sample"].to_numpy()],
            "metadata": list(meta),
            "locations": [
                f'{{"0":"{layout.location.format(sid=sid)}"}}'
                for sid in subjects["subject_id"].tolist()
            ],
            "classifications_count": subjects["n_classified"].to_numpy(),
            "retired_at": np.where(is_ret, np.asarray(retired, dtype=object), ""),
            "retirement_reason": np.where(is_ret, "classification_count", ""),
            "created_at": created,
            "updated_at": updated,
        },
        columns=list(SUBJECT_COLUMNS),
    )
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(SUBJECT_COLUMNS)
        writer.writerows(zip(*(df[c].tolist() for c in SUBJECT_COLUMNS), strict=True))


def write_table_csv(df: pd.DataFrame, path: str | os.PathLike, formats: dict[str, str]) -> None:
    """Write a plain table (no quoting needed) as CSV, fast and reproducibly.

    Floats use the format spec in ``formats`` (default ``.6g``); booleans are
    written True/False, integers and strings as they are. Strings must not
    contain commas, quotes or newlines (true of every truth table we write).
    Rows are formatted :data:`CHUNK` at a time (memory: a chunk's text).
    """
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        fh.write(",".join(df.columns) + "\n")
        for r0 in range(0, len(df), CHUNK):
            part = df.iloc[r0 : r0 + CHUNK]
            cols = [_format_column(part[c].to_numpy(), formats.get(c, ".6g")) for c in df.columns]
            fh.write("".join([",".join(r) + "\n" for r in zip(*cols, strict=True)]))


def _format_column(v: np.ndarray, fmt: str) -> list[str]:
    """The CSV text of a column of :func:`write_table_csv`."""
    if v.dtype.kind == "f":
        return ["" if x != x else format(x, fmt) for x in v.tolist()]
    if v.dtype.kind == "b":
        return np.where(v, "True", "False").tolist()
    return [str(x) for x in v.tolist()]


# --------------------------------------------------------------------------- the export files of either universe


_NAME_A = (
    "star", "galaxy", "nova", "comet", "cosmic", "astro", "nebula", "quasar",
    "lunar", "solar", "orbit", "photon", "pulsar", "zenith", "aurora", "meteor",
)  # fmt: skip


_NAME_B = (
    "gazer", "hunter", "fan", "watcher", "seeker", "scout", "walker", "dreamer",
    "rider", "explorer", "spotter", "keeper",
)  # fmt: skip


def volunteer_identities(logged_in: np.ndarray, rng) -> tuple[list[str], list[str], list[str]]:
    """(user_name, user_id, user_ip) strings; not-logged-in names embed the IP hash."""
    n = len(logged_in)
    ips = hex_strings(n, 10, rng)
    ids = 100_000 + rng.choice(max(2_500_000, 4 * n), size=n, replace=False)
    a = rng.integers(0, len(_NAME_A), n)
    b = rng.integers(0, len(_NAME_B), n)
    cap = rng.random(n) < 0.5
    names, uids = [], []
    for i, li in enumerate(logged_in.tolist()):
        if li:
            w = _NAME_A[a[i]] + _NAME_B[b[i]]
            names.append((w.capitalize() if cap[i] else w) + str(ids[i]))
            uids.append(str(ids[i]))
        else:
            names.append(f"not-logged-in-{ips[i]}")
            uids.append("")
    return names, uids, ips


def subject_ids(n: int, rng) -> np.ndarray:
    """Made-up, increasing Zooniverse subject ids."""
    return 90_000_000 + np.cumsum(1 + rng.poisson(0.5, n))


def subjects_frame(sid: np.ndarray, q: dict, rng, extra: dict | None = None) -> pd.DataFrame:
    """The subject table of the exports: retirement state and times (+ ``extra`` columns)."""
    n = len(sid)
    cls_gal, cls_t, retired, retire_cls = q["sub"], q["t"], q["retired"], q["retire_cls"]
    last_t = np.full(n, np.nan)
    if len(cls_t):
        np.fmax.at(last_t, cls_gal, cls_t)
    created_s = -86400.0 * rng.uniform(1.0, 14.0, n)
    cols = {"subject_id": sid, **(extra or {})}
    cols.update(
        {
            "retired": retired,
            "n_classified": q["n_classified"],
            "retirement_id": 30_000_000 + np.arange(n),
            "created_s": created_s,
            "updated_s": np.where(np.isnan(last_t), created_s, last_t),
            "retired_s": np.where(
                retired, cls_t[np.maximum(retire_cls, 0)] if len(cls_t) else 0.0, np.nan
            ),
        }
    )
    return pd.DataFrame(cols)


def classifications_name(p: dict) -> str:
    """The file name of the simulated classification export: classifications.csv, or
    classifications.csv.zst with ``compress_classifications``."""
    return "classifications.csv.zst" if p["compress_classifications"] else "classifications.csv"


def write_exports(
    out, rng, start, subjects, q, clicks, ex, layout=None, meta=None, name="classifications.csv"
) -> dict:
    """Write the classification export ``name`` (:func:`classifications_name`; the other
    spelling is removed, so no stale export remains), subjects_export.csv and
    expert_classifications.csv.

    ``layout``: the project's :class:`~clumpscout.simulation.export.ExportLayout`
    (default Clump Scout); ``meta``: subject metadata JSON (default: galaxies').
    Returns the identities: names, uids (volunteers), e_names, e_uids (experts).
    """
    layout = layout or CLUMP_SCOUT
    w, h = layout.image_width, layout.image_height
    sub_meta, sub_data = subject_json(subjects, start, meta, layout)
    sid = subjects["subject_id"].to_numpy()
    vols = q["volunteers"]
    logged_in = vols["logged_in"].to_numpy()
    names, uids, ips = volunteer_identities(logged_in, rng)
    vmeta = volunteer_strings(len(vols), rng, w, h)
    sess_hex = hex_strings(q["n_sessions"], 32, rng)
    table = pd.DataFrame(
        {"classification_id": q["cls_id"], "vol": q["vol"], "gal": q["sub"],
         "t_end": q["t"], "t_start": q["t_start"], "session": q["session"]},
        copy=False,
    )  # fmt: skip
    for other in ("classifications.csv", "classifications.csv.zst"):
        if other != name:
            (out / other).unlink(missing_ok=True)
    write_classifications(
        out / name, table, clicks, names, uids, ips, vmeta, logged_in,
        sess_hex, sub_data, sid, start, layout=layout,
    )  # fmt: skip
    write_subjects_export(out / "subjects_export.csv", subjects, sub_meta, start, layout)
    n_exp = ex["n"]
    e_names = [f"expert_{i + 1}" for i in range(n_exp)]
    e_uids = [str(EXPERT_USER_ID0 + i) for i in range(n_exp)]
    e_ips = hex_strings(n_exp, 10, rng)
    e_meta = volunteer_strings(n_exp, rng, w, h)
    e_hex = hex_strings(ex["n_sessions"], 32, rng)
    e_table = pd.DataFrame(
        {"classification_id": ex["cls_id"], "vol": ex["vol"], "gal": ex["sub"],
         "t_end": ex["t"], "t_start": ex["t"] - 30.0, "session": ex["session"]}
    )  # fmt: skip
    write_classifications(
        out / "expert_classifications.csv", e_table, ex["clicks"], e_names, e_uids, e_ips,
        e_meta, np.ones(n_exp, bool), e_hex, sub_data, sid, start, expert=True, layout=layout,
    )  # fmt: skip
    return {"names": names, "uids": uids, "e_names": e_names, "e_uids": e_uids}


def write_report(report: dict, out: Path) -> None:
    """Write simulate_report.json into ``out`` and log the totals."""
    write_json(report, out / "simulate_report.json")
    log.info(
        "simulate: %d subjects, %d classifications, %d clicks, %d volunteers -> %s",
        report["subjects"], report["classifications"], report["clicks_total"],
        report["volunteers"], out,
    )  # fmt: skip
