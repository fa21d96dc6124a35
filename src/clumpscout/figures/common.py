"""What every figure shares: drawing helpers, settings, and reading the workflow's tables.

Every ``plot_*`` function of the section modules takes pandas DataFrames (never paths) and an
output path *stem*; it writes ``<stem>.png`` and ``<stem>.pdf`` (atomically, without dates or
software versions in the metadata, so the same data give the same bytes, :func:`save_figure`)
and returns a dict of the numbers the figure shows, which the workflow stores beside the
figure as ``<stem>.json`` and the tests check. Tables that cover several subsamples Z̃_n
(decisions.md#subsamples) are passed *stacked*: one DataFrame with an ``n`` column
(:func:`stack_by_n`). Figures use matplotlib's object API on the Agg canvas, never pyplot.

Each section module also holds its figures' builders, ``build_*(inputs, stem, params)``:
workflow files in (read with :func:`read_table` / :func:`read_stacked`), figure out.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import (
    MaxNLocator,
    NullFormatter,
)

from clumpscout import config as _config
from clumpscout.errors import InputError
from clumpscout.figures import registry
from clumpscout.io import atomic_path

#: output formats and the metadata that keeps them free of dates/versions
FORMATS: dict[str, dict[str, Any]] = {
    "png": {"Software": None},
    "pdf": {"CreationDate": None, "Creator": None, "Producer": None},
}


log = logging.getLogger(__name__)

#: subject status values of the aggregation contract (subjects.parquet)
STATUSES = ("retired", "retired_empty", "stale", "unretired")


#: the paper's colours of true and false positives (fig:volunteer_normal_set_fpp_dist)
TP_COLOUR, FP_COLOUR = "tab:orange", "tab:blue"
SYM = {
    "p_fp": r"$p^{\mathrm{fp}}_{l}$",
    "p_sigma": r"$p^{\sigma}_{l}$",
    "n_fp": r"$N^{\mathrm{fp}}_{i}$",
    "n_fn": r"$N^{\mathrm{fn}}_{i}$",
    "n_sigma": r"$N^{\sigma}_{i}$",
}


#: the ``figures`` settings' defaults (from the config schema, clumpscout.config)
DEFAULTS: dict[str, Any] = _config.defaults("figures")


#: the consensus model the paper's figures show (the reproduction)
PAPER_MODEL = "paper"


#: a white, half-transparent box behind text drawn over data
WHITE_BOX = {"fc": "white", "alpha": 0.7, "lw": 0}


def require(df: pd.DataFrame, columns: Sequence[str], what: str, path: object = None) -> None:
    """Raise :class:`InputError` naming the table if a contract column is missing."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"{what}: missing column(s) {', '.join(missing)}", path=path)


def stack_by_n(tables: Mapping[int, pd.DataFrame]) -> pd.DataFrame:
    """Concatenate per-n tables into one with an ``n`` column (n ascending)."""
    parts = [df.assign(n=int(n)) for n, df in sorted(tables.items())]
    if not parts:
        return pd.DataFrame({"n": pd.Series(dtype="int64")})
    return pd.concat(parts, ignore_index=True)


def output_paths(stem: str | Path) -> dict[str, Path]:
    """``{"png": <stem>.png, "pdf": <stem>.pdf}`` (a stem may contain dots)."""
    stem = Path(stem)
    return {ext: stem.with_name(f"{stem.name}.{ext}") for ext in FORMATS}


def new_figure(width: float, height: float, dpi: int) -> Figure:
    """A constrained-layout figure on the Agg canvas (no pyplot)."""
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, stem: str | Path) -> dict[str, Path]:
    """Write the PNG and the PDF of ``fig`` atomically; PNG size = figsize x dpi."""
    paths = output_paths(stem)
    for ext, path in paths.items():
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=fig.dpi, metadata=FORMATS[ext])
        # the layout is computed on the first draw; keep it for the other formats
        fig.set_layout_engine("none")
    return paths


def axes_note(ax, x: float, y: float, text: str, **kw) -> None:
    """Text at (x, y) in axes coordinates (0..1)."""
    ax.text(x, y, text, transform=ax.transAxes, **kw)


def corner_summary(ax, text: str) -> None:
    """A panel's key numbers in its top right corner."""
    axes_note(ax, 0.98, 0.95, text, ha="right", va="top", fontsize=8)


def nouns(wording: str | None) -> dict[str, str]:
    """What the data are called: clumps in galaxies (``clump_scout``) or objects in images
    (``generic``), see :func:`clumpscout.figures.registry.wording`."""
    return registry.words(wording)


def no_data(ax, text: str = "no data") -> None:
    axes_note(ax, 0.5, 0.5, text, ha="center", va="center", color="0.4")


def reference_n(ns: Sequence[int], n_ref: int | None) -> int | None:
    """The subsample used by single-n panels: ``n_ref`` if present, else the largest n."""
    ns = sorted({int(n) for n in ns})
    if not ns:
        return None
    return int(n_ref) if n_ref is not None and int(n_ref) in ns else ns[-1]


def integer_x_ticks(*axes) -> None:
    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def n_edges(ns: Sequence[int]) -> np.ndarray:
    """Histogram edges centred on the integers from min(n) to max(n)."""
    return np.arange(min(ns) - 0.5, max(ns) + 1.0, 1.0)


def count_mesh(ax, x, y, x_edges, y_edges, label: str, cmap: str = "viridis") -> np.ndarray:
    """2D histogram coloured by the count per bin, log colour scale from 1.

    The paper's 2D histograms (fig:clump_fpp_dist, fig:clump_variance_dist) show a
    number density because their bins cover different areas of the axes as drawn. Ours
    are equal on the axes as drawn (one n wide, equal steps of the logistic or
    log-linear y coordinate), so the count per bin *is* that density, in units a reader
    can check: the colour bar tops out at the fullest bin, never above the number of
    items of one n (docs/decisions.md#figure-colour-scales). Returns the counts per bin.
    """
    counts, _, _ = np.histogram2d(x, y, bins=[x_edges, y_edges])
    shown = np.ma.masked_equal(counts, 0.0)
    if shown.count():
        norm = LogNorm(vmin=1.0, vmax=max(float(shown.max()), 1.0001))
        mesh = ax.pcolormesh(x_edges, y_edges, shown.T, norm=norm, cmap=cmap, rasterized=True)
        quiet_colorbar(ax.figure.colorbar(mesh, ax=ax, label=label))
    return counts


def quiet_colorbar(cbar) -> None:
    """Label only the major ticks of a log colour bar spanning a decade or more
    (readable and much faster); a narrower one keeps its minor labels."""
    norm = cbar.mappable.norm
    if isinstance(norm, LogNorm) and norm.vmax >= 10 * norm.vmin:
        cbar.ax.yaxis.set_minor_formatter(NullFormatter())


def _decade_below(v: float, smallest: float) -> float:
    return 10.0 ** math.floor(math.log10(max(v, smallest)))


def logit_limits(p: np.ndarray, smallest: float = 1e-15) -> tuple[float, float]:
    """Limits of a logistic axis: the decades beyond the 0.5 % tails on each side,
    no closer to 0 or 1 than ``smallest`` and always including [0.01, 0.99]."""
    inside = p[(p > 0) & (p < 1)]
    if inside.size == 0:
        return 1e-3, 1.0 - 1e-3
    lo = min(_decade_below(float(np.quantile(inside, 0.005)), smallest), 1e-2)
    up = min(_decade_below(1.0 - float(np.quantile(inside, 0.995)), smallest), 1e-2)
    return float(lo), float(1.0 - up)


def quantiles(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {k: float("nan") for k in ("q05", "q25", "median", "q75", "q95", "mean")}
    q = np.quantile(values, [0.05, 0.25, 0.5, 0.75, 0.95])
    return {
        "q05": float(q[0]),
        "q25": float(q[1]),
        "median": float(q[2]),
        "q75": float(q[3]),
        "q95": float(q[4]),
        "mean": float(np.mean(values)),
    }


def read_table(
    path: str | Path,
    columns: Sequence[str],
    what: str,
    optional: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Read a Parquet or CSV table and check its contract ``columns`` (InputError if not).

    With ``optional`` given, only ``columns`` and the optional columns present are
    read (cheap on the large assignments / clicks tables); else every column."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{what}: file not found", path=path)
    try:
        if path.suffix == ".csv":
            head = pd.read_csv(path, nrows=0).columns
        else:
            import pyarrow.parquet as pq

            head = pq.read_schema(path).names
        require(pd.DataFrame(columns=list(head)), columns, what, path)
        use = None
        if optional is not None:
            use = list(dict.fromkeys([*columns, *(c for c in optional if c in head)]))
        if path.suffix == ".csv":
            return pd.read_csv(path, usecols=use)
        return pd.read_parquet(path, columns=use)
    except InputError:
        raise
    except Exception as exc:  # unreadable file: one line, no traceback
        raise InputError(f"{what}: cannot read ({type(exc).__name__}: {exc})", path=path) from exc


def read_stacked(
    paths: str | Path | Sequence[str | Path],
    ns: Sequence[int],
    columns: Sequence[str],
    what: str,
    optional: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One table per n (``paths`` aligned with ``ns``) read into one stacked table;
    a single path is a table that already has an ``n`` column (a collected table)."""
    if isinstance(paths, str | Path):
        df = read_table(paths, ["n", *columns], what, optional)
        return df[df["n"].isin([int(n) for n in ns])].reset_index(drop=True)
    if len(paths) != len(ns):
        raise InputError(f"{what}: {len(paths)} files for {len(ns)} values of n")
    return stack_by_n(
        {int(n): read_table(p, columns, what, optional) for n, p in zip(ns, paths, strict=True)}
    )


def image_paths(sources: Sequence[str | Path]) -> dict[int, Path]:
    """Subject PNGs: from image metadata tables (a ``cutouts.parquet`` with
    subject_id and ``png`` relative to the table's folder), from folders of
    ``<subject_id>.png``, or given directly as such files."""
    found: dict[int, Path] = {}
    for src in map(Path, sources):
        if src.suffix in (".parquet", ".csv") and src.exists():
            t = read_table(src, ["subject_id", "png"], "image table", [])
            for sid, png in zip(t["subject_id"], t["png"], strict=True):
                if isinstance(png, str) and png:
                    found[int(sid)] = src.parent / png
        elif src.is_dir():
            for f in sorted(src.rglob("*.png")):
                if f.stem.isdigit():
                    found.setdefault(int(f.stem), f)
        elif src.suffix == ".png" and src.stem.isdigit():
            found[int(src.stem)] = src
    return found


def load_images(sources: Sequence[str | Path], subject_ids: Sequence[int]) -> dict[int, np.ndarray]:
    """RGB arrays of the wanted subjects' PNGs (see :func:`image_paths`). A subject
    without an image is simply absent (the figure draws a blank frame)."""
    from PIL import Image

    paths = image_paths(sources)
    out = {}
    for sid in sorted({int(s) for s in subject_ids}):
        f = paths.get(sid)
        if f is not None and f.exists():
            with Image.open(f) as im:
                out[sid] = np.asarray(im.convert("RGB"))
    log.info("subject images: %d of %d example subjects have one", len(out), len(subject_ids))
    return out


BOX_COLS = ["subject_id", "x1", "y1", "x2", "y2"]


CURVE_COLS = ["subset", "threshold", "completeness", "purity"]


def figure_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    return DEFAULTS | {k: v for k, v in dict(params.get("figures") or {}).items() if v is not None}


def ns_and_ref(params: Mapping[str, Any]) -> tuple[list[int], int | None]:
    ns = [int(n) for n in params["ns"]]
    return ns, reference_n(ns, figure_settings(params)["n_ref"])
