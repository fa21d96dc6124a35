"""Cutout side and PSF FWHM per subject (paper §2.2 and §3.3; decisions.md#cutout-side, #psf-fwhm, #box-geometry; columns: docs/tables.md#subject-geometry).

For each galaxy of a catalogue (paper §2.2, decisions.md#cutout-side, #psf-fwhm):

- cutout side in native SDSS pixels ``side_native = max(ceil(r90_factor * R90 / native_scale),
  min_side)`` (6 R90, 0.396"/px, at least 40 px; decisions.md#cutout-side). R90 is the r-band 90% Petrosian
  radius in arcsec. SDSS writes -9999 for a radius it could not measure: such a galaxy gets the
  minimum side (the paper's footnote: the minimum "handles galaxies that have very small,
  incorrectly measured Petrosian radii"); they are counted in the log. ``ceil`` is taken after
  rounding to 1e-9 px so that a side that is an integer up to floating-point noise (e.g.
  6 x 4.356 / 0.396 = 66.00000000000001) is not bumped up by one.
- subject pixel scale ``subject_scale = side_native * native_scale / image_size`` (arcsec per
  subject px; the cutout is resized to image_size = 400 px);
- ``fwhm_native = FWHM" / native_scale`` and ``fwhm_subject = fwhm_native * image_size /
  side_native`` (decisions.md#psf-fwhm);
- the box side ``box_side = 2 * fwhm_subject`` in subject pixels (paper §3.3, decisions.md#box-geometry).

Catalogue columns are matched case-insensitively. R90: ``petroR90_r`` (CAS) or ``PETROTH90``
(SDSS flat files). PSF FWHM: ``psffwhm_r`` (CAS) or ``PSF_FWHM`` (flat files). Flat-file columns
are per band (u, g, r, i, z): a 5-element array (FITS) or its text form ("[1.2, 1.1, 1.0, ...]"
or "1.2 1.1 1.0 ...") in a CSV; the r band (index 2) is used. Also read when present:
``subject_id`` (required), ``ra``, ``dec``, ``sample``, ``psfield`` (a psField/photoField path per
galaxy, relative to the catalogue's folder) and ``field`` (to pick a field from a photoField
file). A catalogue can be CSV or FITS (e.g. a photoObj file with a ``subject_id`` column added).

PSF source (``psf_source``, decisions.md#psf-fwhm): ``catalogue`` (default) or ``psfield``: ``psf_width`` of
psField HDU 6 (or of a photoField file's row for the field), r band, in arcsec; it runs 10-15%
larger than the catalogue value on the paper's data. The source used is recorded per subject in
``psf_source``. A subject whose PSF FWHM is missing, not finite or not positive is an
:class:`InputError` naming the row (a subject without a PSF cannot get boxes; dropping it would
silently lose its clicks downstream).

Without a catalogue (a plain Zooniverse project such as Penguin Watch) there is one row per
subject of the subject export with the configured ``box_side`` (config ``export.box_side``,
subject px), ``psf_source = "config"``, ``fwhm_subject = box_side / 2`` and NaN for the SDSS
quantities.

Image size: from the subject export's metadata when it says (keys such as ``#image_width``,
``image_height``, ``image_size``; ``image_size_source = "metadata"``), else ``image_size`` from
the config (``"config"``). The geometry above uses the image width (subject images are square).
Subjects of the subject export that are not in the catalogue are left out and counted; catalogue
galaxies that are not in the subject export are kept and counted.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from clumpscout.config import add_setting, add_settings, choices, defaults
from clumpscout.data.clicks_table import clicks_sizes, load_flat_clicks
from clumpscout.data.zooniverse import subject_sizes
from clumpscout.data.zooniverse_csv import locate_csv_problem, read_header
from clumpscout.data.zooniverse_subjects import read_subjects_export
from clumpscout.errors import InputError
from clumpscout.io import report_path, write_json, write_parquet
from clumpscout.logs import timed

log = logging.getLogger(__name__)

#: defaults of the ``subjects`` config section (from the config schema: clumpscout.config)
DEFAULTS: dict[str, Any] = defaults("subjects")
PSF_SOURCES = tuple(choices("subjects")["psf_source"])  # ("catalogue", "psfield")
BANDS = "ugriz"

#: accepted catalogue column names (lower case), in order of preference
SUBJECT_ID_NAMES = ("subject_id",)
R90_NAMES = ("petror90_r", "petroth90")
PSF_NAMES = ("psffwhm_r", "psf_fwhm")

SUBJECT_COLUMNS = (
    "subject_id",
    "ra",
    "dec",
    "petroR90_r",
    "psf_fwhm_arcsec",
    "psf_source",
    "side_native",
    "subject_scale",
    "fwhm_native",
    "fwhm_subject",
    "box_side",
    "image_width",
    "image_height",
    "sample",
    "image_size_source",
)


# --------------------------------------------------------------------------- formulas


def cutout_side(
    r90_arcsec: np.ndarray | float,
    r90_factor: float = DEFAULTS["r90_factor"],
    native_scale: float = DEFAULTS["native_scale"],
    min_side: int = DEFAULTS["min_side"],
) -> np.ndarray:
    """Cutout side in native pixels, ``max(ceil(r90_factor R90 / native_scale), min_side)``.

    Paper §2.2, decisions.md#cutout-side. Negative radii (SDSS's -9999 "not measured") give ``min_side``.
    """
    r90 = np.asarray(r90_arcsec, dtype=float)
    raw = np.ceil(np.round(r90_factor * r90 / native_scale, 9))
    return np.maximum(raw, min_side).astype(np.int64)


def subject_scale(side_native: np.ndarray, native_scale: float, image_size: Any) -> np.ndarray:
    """Arcsec per subject pixel after resizing the cutout to ``image_size`` px (decisions.md#cutout-side)."""
    return np.asarray(side_native, dtype=float) * native_scale / np.asarray(image_size, float)


def psf_in_pixels(
    fwhm_arcsec: np.ndarray, side_native: np.ndarray, native_scale: float, image_size: Any
) -> tuple[np.ndarray, np.ndarray]:
    """PSF FWHM in native and in subject pixels: ``F/0.396`` and ``F/0.396 * 400/side`` (decisions.md#psf-fwhm)."""
    fwhm_native = np.asarray(fwhm_arcsec, dtype=float) / native_scale
    fwhm_subject = fwhm_native * np.asarray(image_size, float) / np.asarray(side_native, float)
    return fwhm_native, fwhm_subject


def box_side_from_fwhm(fwhm_subject: np.ndarray) -> np.ndarray:
    """Box side = 2 FWHM in subject pixels (paper §3.3, decisions.md#box-geometry)."""
    return 2.0 * np.asarray(fwhm_subject, dtype=float)


# --------------------------------------------------------------------------- psField


def _band_index(band: str) -> int:
    if band not in BANDS:
        raise InputError(f"unknown band {band!r}; one of {', '.join(BANDS)}")
    return BANDS.index(band)


def read_psfield_fwhm(path: str | Path, band: str = "r", field: int | None = None) -> float:
    """PSF FWHM (arcsec) of one SDSS field from a psField or photoField file (decisions.md#psf-fwhm).

    psField: HDU 6 has one row per field with ``psf_width`` (arcsec, one value per band
    u, g, r, i, z). photoField: HDU 1 has one row per field of a camera column with
    ``PSF_WIDTH`` and ``FIELD``; ``field`` picks the row (needed if there are several).
    """
    from astropy.io import fits

    path = Path(path)
    b = _band_index(band)
    if not path.is_file():
        raise InputError("no such psField/photoField file", path=path)
    try:
        with fits.open(path, memmap=False) as hdul:
            candidates = [6, 1] if len(hdul) > 6 else [1]
            for h in candidates:
                if h >= len(hdul) or not hasattr(hdul[h], "columns"):
                    continue
                names = {n.lower(): n for n in hdul[h].columns.names}
                if "psf_width" not in names:
                    continue
                data = hdul[h].data
                width = np.asarray(data[names["psf_width"]], dtype=float)
                fields = np.asarray(data[names["field"]], dtype=int) if "field" in names else None
                if width.ndim == 1:
                    width = width[None, :]
                if field is not None and fields is not None:
                    hit = np.flatnonzero(fields == int(field))
                    if len(hit) == 0:
                        raise InputError(
                            f"field {field} not in this file (fields {fields.min()}-"
                            f"{fields.max()})",
                            path=path,
                        )
                    row = int(hit[0])
                elif len(width) == 1:
                    row = 0
                else:
                    raise InputError(
                        f"{len(width)} fields in this file; give the field (catalogue column "
                        "'field')",
                        path=path,
                    )
                value = float(width[row, b])
                if not (math.isfinite(value) and value > 0):
                    raise InputError(f"psf_width[{band}] = {value} is not usable", path=path)
                return value
    except OSError as exc:
        raise InputError(f"not a readable FITS file: {exc}", path=path) from None
    raise InputError("no psf_width column (not a psField or photoField file)", path=path)


# --------------------------------------------------------------------------- catalogue


def _find(columns: list[str], names: tuple[str, ...]) -> str | None:
    lower = {c.lower(): c for c in columns}
    for n in names:
        if n in lower:
            return lower[n]
    return None


_SPLIT = re.compile(r"[,\s]+")


def per_band_value(values: Any, column: str, path: object, band: str = "r") -> np.ndarray:
    """The ``band`` value of a column that is scalar or a 5-element per-band array.

    Accepts numbers, 2-D arrays (FITS) and text ("[a, b, c, d, e]", "a b c d e", "{a,b,...}").
    Anything else raises :class:`InputError` naming the 1-based row.
    """
    b = _band_index(band)
    arr = np.asarray(values)
    if arr.ndim == 2:
        if arr.shape[1] != len(BANDS):
            raise InputError(f"column {column} has {arr.shape[1]} values per row, expected 5")
        return arr[:, b].astype(float)
    out = np.empty(len(arr), dtype=float)
    for i, v in enumerate(arr):
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            out[i] = float(v)
            continue
        if isinstance(v, (list, tuple, np.ndarray)):
            parts = [str(p) for p in v]
        else:
            text = str(v).strip().strip("[](){}").strip()
            parts = [p for p in _SPLIT.split(text) if p]
        try:
            nums = [float(p) for p in parts]
        except ValueError:
            nums = []
        if len(nums) == 1:
            out[i] = nums[0]
        elif len(nums) == len(BANDS):
            out[i] = nums[b]
        else:
            raise InputError(
                f"{column} value {str(v)[:60]!r} is neither a number nor 5 per-band numbers",
                path=path,
                row=i + 1,
            )
    return out


def read_catalogue(path: str | Path) -> pd.DataFrame:
    """Read a galaxy catalogue (CSV, or FITS/ECSV through astropy) as a DataFrame.

    Multi-dimensional FITS columns (per-band arrays) are kept as one column of arrays.
    """
    path = Path(path)
    suffix = "".join(path.suffixes).lower()
    if any(s in suffix for s in (".fits", ".fit", ".ecsv", ".fits.gz", ".fit.gz")):
        from astropy.table import Table

        try:
            t = Table.read(path)
        except Exception as exc:  # astropy raises many kinds
            raise InputError(f"cannot read the catalogue: {exc}", path=path) from None
        data = {}
        for name in t.colnames:
            col = np.asarray(t[name])
            if col.dtype.kind == "S":
                col = np.char.decode(col, "utf-8", errors="replace")
            elif col.dtype.byteorder not in ("=", "|"):  # FITS is big-endian
                col = col.astype(col.dtype.newbyteorder("="))
            data[name] = list(col) if col.ndim > 1 else col
        df = pd.DataFrame(data)
    else:
        header = read_header(path)
        try:
            df = pd.read_csv(path, dtype=str, keep_default_na=False, encoding="utf-8")
        except (UnicodeDecodeError, pd.errors.ParserError, ValueError) as exc:
            row, problem = locate_csv_problem(path, len(header))
            if row >= 0:
                raise InputError(f"bad CSV row: {problem}", path=path, row=row) from None
            raise InputError(f"cannot read the catalogue: {exc}", path=path) from None
    if len(df) == 0:
        raise InputError("the catalogue has no rows", path=path)
    return df


def _numeric(series: pd.Series, column: str, path: object) -> np.ndarray:
    """A catalogue column as float r-band values (blank -> NaN; per-band arrays -> r)."""
    if pd.api.types.is_numeric_dtype(series.dtype):
        return np.array(series, dtype=float)
    vals = series.to_numpy(dtype=object)
    if len(vals) and isinstance(vals[0], (np.ndarray, list, tuple)):
        return per_band_value(np.stack([np.asarray(v, dtype=float) for v in vals]), column, path)
    s = series.astype(str).str.strip()
    num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float)
    if (np.isnan(num) & (s != "").to_numpy()).any():
        return per_band_value(vals, column, path)
    return num


def _config(cfg: dict | None) -> dict:
    out = dict(DEFAULTS)
    out.update({k: v for k, v in (cfg or {}).items() if v is not None or k == "psfield"})
    if out["psf_source"] not in PSF_SOURCES:
        raise InputError(f"subjects.psf_source must be one of {PSF_SOURCES}")
    for k in ("native_scale", "image_size", "min_side", "r90_factor"):
        if not (isinstance(out[k], (int, float)) and out[k] > 0):
            raise InputError(f"subjects.{k} must be a positive number, got {out[k]!r}")
    return out


def _image_sizes(
    sid: np.ndarray, export: pd.DataFrame | None, image_size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w, h = subject_sizes(export, sid)
    from_md = ~np.isnan(w)
    h = np.where(np.isnan(h), w, h)
    w = np.where(np.isnan(w), image_size, w)
    h = np.where(np.isnan(h), image_size, h)
    source = np.where(from_md, "metadata", "config").astype(object)
    return np.round(w).astype(np.int64), np.round(h).astype(np.int64), source


def build_subjects(
    catalogue: str | Path | None,
    subjects_export: str | Path | None,
    cfg: dict | None,
    box_side: float | str | None,
    psfield: str | Path | None = None,
    clicks: str | Path | None = None,
) -> pd.DataFrame:
    """The subjects table (docs/tables.md#subject-geometry): cutout geometry, PSF and box side per subject.

    ``catalogue`` None: one row per subject of ``subjects_export`` with the given ``box_side``
    (pixels, or "auto": NaN and ``psf_source`` auto, measured by ``clumpscout boxes``).
    ``clicks`` (a flattened clicks table, docs/tables.md#clicks) instead of a subject
    export: one row per subject of the table, with the image size the table gives
    (``image_size_source`` clicks) or ``image_size``.
    ``psfield`` (or ``cfg["psfield"]``): the psField/photoField file used for every galaxy
    without a ``psfield`` column value when ``psf_source`` is ``psfield``.
    See the module docstring for the formulas (decisions.md#cutout-side, #psf-fwhm, #box-geometry) and decisions.
    """
    c = _config(cfg)
    psfield = psfield or c.get("psfield")
    export = None
    if subjects_export is not None:
        with timed(f"reading subject export {Path(subjects_export).name}", log):
            export = read_subjects_export(subjects_export)
    report: dict[str, Any] = {}
    from_clicks = None
    if export is None and clicks is not None:
        export, from_clicks = _export_from_clicks(clicks)
    if catalogue is None:
        if export is None:
            raise InputError("need a galaxy catalogue, a subject export or a clicks table")
        side = _box_side(box_side, subjects_export or clicks)
        table = _from_export(export, side, c["image_size"])
        if from_clicks is not None:
            table.loc[from_clicks, "image_size_source"] = "clicks"
        if math.isnan(side):
            table["psf_source"] = pd.array(["auto"] * len(table), dtype="str")
        report["subjects"] = len(table)
    else:
        table = _from_catalogue(Path(catalogue), export, c, psfield, report)
    n_md = int((table["image_size_source"] == "metadata").sum())
    n_cl = int((table["image_size_source"] == "clicks").sum())
    log.info(
        "%d subjects; PSF from %s; image size from subject metadata for %d, the clicks table "
        "for %d, config (%d px) for %d",
        len(table),
        ", ".join(f"{k} ({v})" for k, v in table["psf_source"].value_counts().items()),
        n_md,
        n_cl,
        c["image_size"],
        len(table) - n_md - n_cl,
    )
    report["psf_source"] = {str(k): int(v) for k, v in table["psf_source"].value_counts().items()}
    report["image_size_from_metadata"] = n_md
    report["image_size_from_clicks"] = n_cl
    table.attrs["report"] = report
    return table


def _export_from_clicks(path: str | Path) -> tuple[pd.DataFrame, np.ndarray]:
    """A subject list like :func:`read_subjects_export`'s from a flattened clicks table, and
    which subjects got their image size from it."""
    clicks, _ = load_flat_clicks(path)
    sid = np.unique(clicks["subject_id"].to_numpy(dtype=np.int64))
    sizes = clicks_sizes(clicks)
    pos = pd.Index(sizes["subject_id"]).get_indexer(sid)
    known = pos >= 0
    w = np.where(known, sizes["w"].to_numpy()[np.maximum(pos, 0)] if len(sizes) else 0, np.nan)
    h = np.where(known, sizes["h"].to_numpy()[np.maximum(pos, 0)] if len(sizes) else 0, np.nan)
    nan = np.full(len(sid), np.nan)
    export = pd.DataFrame(
        {"subject_id": sid, "image_width": w, "image_height": h, "ra": nan, "dec": nan}
    )
    return export, known


def _box_side(box_side: Any, path: object) -> float:
    """The configured box side in subject px, or NaN for "auto" (``clumpscout boxes`` measures
    it from the click scatter, docs/decisions.md#box-side-auto)."""
    if isinstance(box_side, str) and box_side.strip().lower() == "auto":
        return math.nan
    try:
        side = float(box_side)
    except (TypeError, ValueError):
        side = math.nan
    if box_side is None or isinstance(box_side, bool) or not (0 < side < math.inf):
        raise InputError(
            "no galaxy catalogue: the box side must come from config export.box_side "
            f"(or --box-side): subject pixels or 'auto', got {box_side!r}",
            path=path,
        )
    return side


def _from_export(export: pd.DataFrame, box_side: float, image_size: int) -> pd.DataFrame:
    sid = export["subject_id"].to_numpy(dtype=np.int64)
    w, h, source = _image_sizes(sid, export, image_size)
    n = len(sid)
    nan = np.full(n, np.nan)
    return pd.DataFrame(
        {
            "subject_id": sid,
            "ra": export["ra"].to_numpy(dtype=float),
            "dec": export["dec"].to_numpy(dtype=float),
            "petroR90_r": nan,
            "psf_fwhm_arcsec": nan,
            "psf_source": pd.array(["config"] * n, dtype="str"),
            "side_native": pd.array([pd.NA] * n, dtype="Int64"),
            "subject_scale": nan,
            "fwhm_native": nan,
            "fwhm_subject": np.full(n, box_side / 2.0),
            "box_side": np.full(n, box_side),
            "image_width": w,
            "image_height": h,
            "sample": pd.array([pd.NA] * n, dtype="str"),
            "image_size_source": pd.array(source, dtype="str"),
        }
    )[list(SUBJECT_COLUMNS)]


def _expected() -> str:
    return (
        "subject_id; R90 as petroR90_r (CAS) or PETROTH90 (SDSS flat file); PSF FWHM as "
        "psffwhm_r (CAS) or PSF_FWHM (flat file) unless psf_source is psfield"
    )


def _from_catalogue(
    path: Path, export: pd.DataFrame | None, c: dict, psfield: Any, report: dict
) -> pd.DataFrame:
    with timed(f"reading catalogue {path.name}", log):
        cat = read_catalogue(path)
    cols = list(cat.columns)
    sid_col, r90_col, psf_col = _catalogue_columns(cols, c["psf_source"] == "catalogue", path)
    n = len(cat)
    sid = _catalogue_ids(cat, sid_col, path)
    r90 = _catalogue_r90(cat, r90_col, sid, c["min_side"], path, report)
    fwhm, source = _catalogue_psf(cat, psf_col, sid, c["psf_source"], psfield, path)

    w, h, size_source = _image_sizes(sid, export, c["image_size"])
    side = cutout_side(r90, c["r90_factor"], c["native_scale"], c["min_side"])
    scale = subject_scale(side, c["native_scale"], w)
    fwhm_native, fwhm_subject = psf_in_pixels(fwhm, side, c["native_scale"], w)
    ra = _optional_float(cat, "ra", path)
    dec = _optional_float(cat, "dec", path)
    if export is not None:
        _fill_from_export(export, sid, ra, dec, report)
    sample_col = _find(cols, ("sample",))
    sample = (
        pd.array(cat[sample_col].astype(str).replace("", pd.NA), dtype="str")
        if sample_col
        else pd.array([pd.NA] * n, dtype="str")
    )
    table = pd.DataFrame(
        {
            "subject_id": sid,
            "ra": ra,
            "dec": dec,
            "petroR90_r": r90,
            "psf_fwhm_arcsec": fwhm,
            "psf_source": pd.array(source, dtype="str"),
            "side_native": pd.array(side, dtype="Int64"),
            "subject_scale": scale,
            "fwhm_native": fwhm_native,
            "fwhm_subject": fwhm_subject,
            "box_side": box_side_from_fwhm(fwhm_subject),
            "image_width": w,
            "image_height": h,
            "sample": sample,
            "image_size_source": pd.array(size_source, dtype="str"),
        }
    )
    report["subjects"] = n
    return table.sort_values("subject_id", kind="stable").reset_index(drop=True)[
        list(SUBJECT_COLUMNS)
    ]


def _catalogue_columns(
    cols: list[str], need_psf_col: bool, path: Path
) -> tuple[str, str, str | None]:
    """The catalogue's subject id, R90 and PSF FWHM columns (:class:`InputError` when one that
    is needed is missing; the PSF column only with ``psf_source: catalogue``)."""
    sid_col = _find(cols, SUBJECT_ID_NAMES)
    r90_col = _find(cols, R90_NAMES)
    psf_col = _find(cols, PSF_NAMES)
    if sid_col is None or r90_col is None or (need_psf_col and psf_col is None):
        missing = [
            n
            for n, col in (("subject_id", sid_col), ("R90", r90_col), ("PSF FWHM", psf_col))
            if col is None and (n != "PSF FWHM" or need_psf_col)
        ]
        raise InputError(
            f"catalogue lacks {', '.join(missing)}: expected {_expected()} (case-insensitive); "
            f"found: {', '.join(map(str, cols))[:300]}",
            path=path,
            row=0,
        )
    return sid_col, r90_col, psf_col


def _catalogue_ids(cat: pd.DataFrame, sid_col: str, path: Path) -> np.ndarray:
    """Subject ids: integers, each once (:class:`InputError` naming the row otherwise)."""
    sid_num = pd.to_numeric(cat[sid_col].astype(str).str.strip(), errors="coerce").to_numpy()
    bad = ~(np.abs(sid_num) < 2**62) | (sid_num != np.round(sid_num))  # NaN, inf, huge: bad
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"subject_id {str(cat[sid_col].iloc[i])[:60]!r} is not an integer", path=path, row=i + 1
        )
    sid = sid_num.astype(np.int64)
    dup = pd.Series(sid).duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputError(f"subject {sid[i]} appears twice in the catalogue", path=path, row=i + 1)
    return sid


def _catalogue_r90(
    cat: pd.DataFrame, r90_col: str, sid: np.ndarray, min_side: int, path: Path, report: dict
) -> np.ndarray:
    """Petrosian R90 (arcsec) per galaxy; R90 <= 0 (not measured) is counted in ``report``."""
    r90 = _numeric(cat[r90_col], r90_col, path)
    unusable = ~(np.abs(r90) < 1e6)  # NaN, inf or absurd (arcsec): no cutout side
    if unusable.any():
        i = int(np.flatnonzero(unusable)[0])
        raise InputError(
            f"no R90 ({r90_col} = {r90[i]}) for subject {sid[i]}", path=path, row=i + 1
        )
    n_unmeasured = int((r90 <= 0).sum())
    if n_unmeasured:
        log.warning(
            "%d galaxies have R90 <= 0 (SDSS: not measured): minimum side %d px",
            n_unmeasured,
            min_side,
        )
    report["r90_not_measured_min_side"] = n_unmeasured
    return r90


def _catalogue_psf(
    cat: pd.DataFrame,
    psf_col: str | None,
    sid: np.ndarray,
    psf_source: str,
    psfield: Any,
    path: Path,
) -> tuple[np.ndarray, np.ndarray]:
    """PSF FWHM (arcsec) and its source per galaxy; every one must be positive and finite."""
    n = len(cat)
    if psf_source == "catalogue":
        fwhm = _numeric(cat[psf_col], psf_col, path)
        source = np.full(n, "catalogue", dtype=object)
        what = psf_col
    else:
        fwhm, source = _psf_from_psfield(cat, path, psfield), np.full(n, "psfield", dtype=object)
        what = "psField psf_width"
    bad = ~(np.isfinite(fwhm) & (fwhm > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(
            f"no usable PSF FWHM ({what} = {fwhm[i]}) for subject {sid[i]}; every subject "
            "needs one (decisions.md#psf-fwhm)",
            path=path,
            row=i + 1,
        )
    return fwhm, source


def _fill_from_export(
    export: pd.DataFrame, sid: np.ndarray, ra: np.ndarray, dec: np.ndarray, report: dict
) -> None:
    """ra, dec the catalogue lacks from the subject export (in place); the subjects in only one
    of the two are counted in ``report`` and logged."""
    pos = pd.Index(export["subject_id"]).get_indexer(sid)
    ok = pos >= 0
    fill = ok & np.isnan(ra)
    ra[fill] = export["ra"].to_numpy()[pos[fill]]
    fill = ok & np.isnan(dec)
    dec[fill] = export["dec"].to_numpy()[pos[fill]]
    n_not_in_export = int((~ok).sum())
    extra = np.setdiff1d(export["subject_id"].to_numpy(), sid)
    report["catalogue_subjects_not_in_subject_export"] = n_not_in_export
    report["export_subjects_not_in_catalogue"] = int(len(extra))
    if n_not_in_export:
        log.warning("%d catalogue galaxies are not in the subject export (kept)", n_not_in_export)
    if len(extra):
        log.warning(
            "%d subjects of the subject export are not in the catalogue (no PSF: left out; "
            "e.g. %s)",
            len(extra),
            ", ".join(map(str, extra[:5])),
        )


def _optional_float(cat: pd.DataFrame, name: str, path: object) -> np.ndarray:
    col = _find(list(cat.columns), (name,))
    if col is None:
        return np.full(len(cat), np.nan)
    return np.array(pd.to_numeric(cat[col].astype(str).str.strip(), errors="coerce"), float)


def _psf_from_psfield(cat: pd.DataFrame, path: Path, default: Any) -> np.ndarray:
    cols = list(cat.columns)
    pcol = _find(cols, ("psfield",))
    fcol = _find(cols, ("field",))
    out = np.empty(len(cat), dtype=float)
    cache: dict[tuple[str, int | None], float] = {}
    for i in range(len(cat)):
        p = str(cat[pcol].iloc[i]).strip() if pcol else ""
        if p in ("", "nan", "None"):
            if default is None:
                raise InputError(
                    "psf_source is psfield but this galaxy has no psfield file (catalogue "
                    "column 'psfield', config subjects.psfield or --psfield)",
                    path=path,
                    row=i + 1,
                )
            file = Path(default)
        else:
            file = Path(p) if Path(p).is_absolute() else path.parent / p
        field = None
        if fcol is not None:
            fv = pd.to_numeric(str(cat[fcol].iloc[i]).strip(), errors="coerce")
            field = None if pd.isna(fv) else int(fv)
        key = (str(file), field)
        if key not in cache:
            try:
                cache[key] = read_psfield_fwhm(file, "r", field)
            except InputError as exc:
                raise InputError(
                    f"{exc.one_line()} (for catalogue row {i + 1})", path=path, row=i + 1
                ) from None
        out[i] = cache[key]
    return out


# --------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Cutout side, PSF FWHM and box side (2 FWHM) per subject from a galaxy catalogue, or "
        "one box side for every subject of a subject export (a project without a catalogue)."
    )
    p.add_argument("--catalogue", default=None, help="galaxy catalogue (CSV or FITS)")
    p.add_argument("--subjects-export", default=None, help="Zooniverse subject export CSV")
    p.add_argument(
        "--clicks",
        default=None,
        help="a flattened clicks table (CSV or Parquet) as the subject list, instead of a "
        "subject export",
    )
    p.add_argument("--psfield", default=None, help="psField/photoField file (implies psfield)")
    add_setting(p, "subjects.psf_source", unset="psfield with --psfield, else catalogue")
    add_setting(p, "export.box_side")
    add_settings(p, "subjects", ["native_scale", "image_size", "min_side", "r90_factor"])
    p.add_argument("--out", required=True, help="subjects.parquet (report: <stem>_report.json)")


def run(args: argparse.Namespace) -> int:
    psf_source = args.psf_source or ("psfield" if args.psfield else "catalogue")
    cfg = {
        "psf_source": psf_source,
        "native_scale": args.native_scale,
        "image_size": args.image_size,
        "min_side": args.min_side,
        "r90_factor": args.r90_factor,
    }
    table = build_subjects(
        args.catalogue,
        args.subjects_export,
        cfg,
        args.box_side,
        psfield=args.psfield,
        clicks=args.clicks,
    )
    report = table.attrs.pop("report", {})
    write_parquet(table, args.out)
    write_json(report, report_path(args.out))
    log.info("wrote %s (%d subjects)", args.out, len(table))
    return 0
