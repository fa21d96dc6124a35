"""Subject images from SDSS frames: cutout, registration, asinh scaling, colour (paper §2.2).

For every galaxy of a catalogue (subject_id, ra, dec, petroR90_r and a PSF FWHM):

1. **Cutout side** (decisions.md#cutout-side): ``side = max(ceil(6 · R90_r / 0.396"), 40)`` native
   pixels (:func:`clumpscout.data.subjects.cutout_side`; this module reuses the
   geometry and psField reader of :mod:`clumpscout.data.subjects`).
2. **Common grid** (decisions.md#colour-composite): a north-up, east-left gnomonic (TAN) grid of
   ``side × side`` pixels at 0.396"/px centred on the galaxy
   (:func:`cutout_wcs`). Array row 0 is the *north* edge, so the array is the
   image as displayed (the WCS has ``CDELT2 < 0``).
3. **Registration**: each band is resampled onto that grid through *its own*
   WCS with :func:`scipy.ndimage.map_coordinates` (cubic spline by default).
   SDSS bands of one field are offset by several pixels (g is ~11 px from r in
   frame 2583/2/136), so a plain pixel stack would fringe. Grid points that fall
   outside a frame (a galaxy near the frame edge) are NaN and the subject is
   flagged ``edge``. Values are nanomaggies per output pixel (input values are
   multiplied by the ratio of pixel areas when ``conserve_flux``; 1.000 for SDSS
   frames).
4. **asinh scaling** (§2.2 equation, Lupton et al. 2004; decisions.md#colour-composite), per band:
   ``I' = asinh(Q · (I/β − m) / α) / Q`` with Q = 7, α = 0.2, m = 0 and
   β = (0.7, 1.17, 1.818) for (g, r, i), clipped to [0, 1] (:func:`asinh_scale`).
   astropy's ``make_lupton_rgb`` is a different (colour-preserving) stretch and
   is *not* used.
5. **Colour composite**: channel order configurable; default i → R, r → G,
   g → B (decisions.md#colour-composite: the paper's "g, r, i to red, blue, green" is read as a typo).
6. **Resize** to 400 × 400 with Pillow (each scaled band as a 32-bit float image,
   then clipped and quantised to 8 bits) and written as ``png/<subject_id>.png``.

Beside the PNGs, ``bands.npy`` holds the *unclipped* asinh-scaled g, r, i bands
of every subject on its native grid (one flat float16 array; subject k's cube of
shape (3, side, side) starts at its ``bands_offset``; float16 keeps 3 significant
digits, ten times finer than the 8-bit PNG), which :mod:`clumpscout.images.photometry`
resizes exactly as here to measure what the volunteers saw (and inverts with
:func:`inverse_asinh_scale` for nanomaggies). One file instead of one per
subject keeps the default run fast. With ``band_fits`` each subject also gets
``bands/<subject_id>.fits`` (float32 cube with the grid's WCS and the scaling in
the header) for a FITS viewer. ``cutouts.parquet`` / ``cutouts.csv`` hold one row
per subject (geometry, PSF and its source, per-band frame positions, edge flag)
and ``cutouts_report.json`` the counts and the scaling used.

Subject pixel coordinates (x right, y down, origin at the top-left *corner* of
the 400 × 400 image) map to native grid pixel indices as
``col = x · side / 400 − 0.5`` and ``row = y · side / 400 − 0.5``
(:func:`subject_to_sky`, :func:`sky_to_subject`), the same corner-to-corner
convention Pillow's resize uses.

Frames: ``frame-<band>-<id>.fits[.bz2|.gz]`` (SDSS corrected frames; ``<id>`` is
e.g. ``002583-2-0136``), or ``<id>_<band>.fits[...]`` (e.g. the astropy-data
``reprojected_sdss_g.fits.bz2``). The frame set of a galaxy is chosen by the
catalogue's ``frame`` column, else its ``run``/``camcol``/``field`` columns,
else the frame set in which the galaxy lies farthest from the edges. A frame
set lacking a band is an :class:`~clumpscout.errors.InputError`.

PSF FWHM (decisions.md#psf-fwhm): the catalogue's ``psffwhm_r`` (CAS) / ``PSF_FWHM`` (flat file)
by default, or ``psf_width[r]`` from a psField (HDU 6) / photoField file;
``psf_source`` records which, per subject.
"""

from __future__ import annotations

import argparse
import logging
import math
import re
import warnings
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from astropy.io import fits
from astropy.wcs import WCS, FITSFixedWarning
from scipy import ndimage

from clumpscout.data.subjects import (
    cutout_side,
    per_band_value,
    psf_in_pixels,
    read_psfield_fwhm,
    subject_scale,
)
from clumpscout.errors import InputError
from clumpscout.io import atomic_path, write_csv, write_json, write_parquet
from clumpscout.logs import progress, timed

log = logging.getLogger(__name__)

BANDS: tuple[str, ...] = ("g", "r", "i")
NATIVE_SCALE = 0.396  # arcsec per native SDSS pixel
IMAGE_SIZE = 400  # subject image side (px)

#: decisions.md#colour-composite / §2.2: the paper's asinh parameters
DEFAULTS: dict = {
    "asinh_Q": 7.0,
    "asinh_alpha": 0.2,
    "asinh_m": 0.0,
    "beta": {"g": 0.7, "r": 1.17, "i": 1.818},
    "channels": ["i", "r", "g"],  # bands shown as (R, G, B)
    "resample_order": 3,
    "resize_filter": "bicubic",
    "png_compress_level": 1,
    "conserve_flux": True,
    # geometry (the `subjects` config section; decisions.md#cutout-side, #psf-fwhm)
    "native_scale": NATIVE_SCALE,
    "image_size": IMAGE_SIZE,
    "min_side": 40,
    "r90_factor": 6.0,
    "psf_source": "catalogue",
    "band_fits": False,
}

RESIZE_FILTERS = ("nearest", "bilinear", "bicubic", "lanczos")

_FRAME_RE = re.compile(
    r"^(?:frame-(?P<b1>[ugriz])-(?P<id1>.+?)|(?P<id2>.+?)[_-](?P<b2>[ugriz]))"
    r"\.fits?(?:\.bz2|\.gz)?$"
)
_SDSS_ID_RE = re.compile(r"(\d{6})-(\d)-(\d{4})")


# ------------------------------------------------------------------ geometry (decisions.md#cutout-side, #psf-fwhm)


def fwhm_native(fwhm_arcsec, native_scale=NATIVE_SCALE):
    """PSF FWHM in native SDSS pixels: ``FWHM" / 0.396`` (decisions.md#psf-fwhm; :func:`clumpscout.data.subjects.psf_in_pixels`)."""
    return psf_in_pixels(fwhm_arcsec, 1.0, native_scale, 1.0)[0]


def fwhm_subject(fwhm_arcsec, side, native_scale=NATIVE_SCALE, image_size=IMAGE_SIZE):
    """decisions.md#psf-fwhm: PSF FWHM in subject pixels, ``FWHM" / 0.396 · 400 / side`` (via clumpscout.data.subjects)."""
    return psf_in_pixels(fwhm_arcsec, side, native_scale, image_size)[1]


def cutout_wcs(ra: float, dec: float, side: int, native_scale: float = NATIVE_SCALE) -> WCS:
    """North-up, east-left TAN grid of ``side × side`` px centred on (ra, dec) (decisions.md#colour-composite).

    Array row 0 is the north edge (``CDELT2 < 0``), so the array is the image as
    displayed; the centre of the grid is at 0-based pixel ``((side−1)/2, (side−1)/2)``.
    """
    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.cunit = ["deg", "deg"]
    w.wcs.crval = [float(ra), float(dec)]
    w.wcs.crpix = [(side + 1) / 2.0, (side + 1) / 2.0]
    s = native_scale / 3600.0
    w.wcs.cdelt = [-s, -s]
    w.wcs.set()
    return w


def subject_to_native(x, y, side, image_size=IMAGE_SIZE):
    """Subject px (corner origin) → 0-based native grid pixel (col, row)."""
    f = np.asarray(side, dtype=float) / image_size
    return np.asarray(x, dtype=float) * f - 0.5, np.asarray(y, dtype=float) * f - 0.5


def native_to_subject(col, row, side, image_size=IMAGE_SIZE):
    """0-based native grid pixel (col, row) → subject px (corner origin)."""
    f = image_size / np.asarray(side, dtype=float)
    return (np.asarray(col, dtype=float) + 0.5) * f, (np.asarray(row, dtype=float) + 0.5) * f


def subject_to_sky(x, y, ra, dec, side, native_scale=NATIVE_SCALE, image_size=IMAGE_SIZE):
    """Subject pixel (x right, y down, corner origin) → (RA, Dec) in degrees."""
    col, row = subject_to_native(x, y, side, image_size)
    a, d = cutout_wcs(ra, dec, int(side), native_scale).wcs_pix2world(col, row, 0)
    return np.asarray(a, dtype=float), np.asarray(d, dtype=float)


def sky_to_subject(ra_pt, dec_pt, ra, dec, side, native_scale=NATIVE_SCALE, image_size=IMAGE_SIZE):
    """(RA, Dec) in degrees → subject pixel (x right, y down, corner origin)."""
    col, row = cutout_wcs(ra, dec, int(side), native_scale).wcs_world2pix(ra_pt, dec_pt, 0)
    return native_to_subject(col, row, side, image_size)


# --------------------------------------------------------------------- asinh (decisions.md#colour-composite)


def asinh_scale(image, beta: float, Q: float = 7.0, alpha: float = 0.2, m: float = 0.0, clip=True):
    """§2.2 / decisions.md#colour-composite: ``I' = asinh(Q · (I/β − m) / α) / Q``, clipped to [0, 1] if ``clip``.

    NaN stays NaN (also through the clip). Returns float32.
    """
    img = np.asarray(image, dtype=np.float64)
    out = np.arcsinh(Q * (img / beta - m) / alpha) / Q
    if clip:
        out = np.clip(out, 0.0, 1.0)
    return out.astype(np.float32)


def inverse_asinh_scale(scaled, beta: float, Q: float = 7.0, alpha: float = 0.2, m: float = 0.0):
    """Inverse of the unclipped :func:`asinh_scale`: back to nanomaggies per pixel."""
    s = np.asarray(scaled, dtype=np.float64)
    return (beta * (alpha * np.sinh(Q * s) / Q + m)).astype(np.float64)


def resize_band(band: np.ndarray, size: int = IMAGE_SIZE, resize_filter: str = "bicubic"):
    """Resize one float band to ``size × size`` with Pillow (mode "F", 32-bit float).

    NaN pixels are filled with 0 before resizing and every output pixel whose
    resampling footprint touches one is NaN again (bilinear weight of the NaN
    mask > 1e-3). Used for the PNG and by the photometry, so both see the same
    numbers.
    """
    from PIL import Image

    if resize_filter not in RESIZE_FILTERS:
        raise InputError(f"unknown resize filter {resize_filter!r} (one of {RESIZE_FILTERS})")
    resample = getattr(Image.Resampling, resize_filter.upper())
    arr = np.asarray(band, dtype=np.float32)
    bad = ~np.isfinite(arr)
    src = np.where(bad, np.float32(0.0), arr) if bad.any() else arr
    out = np.asarray(Image.fromarray(src).resize((size, size), resample), dtype=np.float32)
    if bad.any():
        mask = Image.fromarray(bad.astype(np.float32)).resize(
            (size, size), Image.Resampling.BILINEAR
        )
        out = out.copy()
        out[np.asarray(mask) > 1e-3] = np.nan
    return out


def compose_rgb(bands: Mapping[str, np.ndarray], channels: Sequence[str] = ("i", "r", "g")):
    """8-bit colour composite: ``channels`` name the bands shown as (R, G, B) (decisions.md#colour-composite).

    Each band is clipped to [0, 1] and quantised to ``round(255 · v)``; NaN is black.
    """
    if len(channels) != 3:
        raise InputError(f"channels must name 3 bands (R, G, B), got {list(channels)}")
    rgb = np.empty(next(iter(bands.values())).shape + (3,), dtype=np.uint8)
    for k, b in enumerate(channels):
        if b not in bands:
            raise InputError(f"channel band {b!r} not among the bands {sorted(bands)}")
        v = np.clip(bands[b], 0.0, 1.0).astype(np.float32, copy=False)
        v[np.isnan(v)] = 0.0
        rgb[..., k] = v * np.float32(255.0) + np.float32(0.5)  # floor of v·255 + ½ = rounding
    return rgb


# ------------------------------------------------------------------------------ frames


@dataclass
class Frame:
    """One band of one field: image (nanomaggies), its WCS and where it came from."""

    band: str
    data: np.ndarray
    wcs: WCS
    path: str

    @property
    def pixel_area(self) -> float:
        """Pixel area in square arcsec (from the WCS)."""
        return float(abs(np.linalg.det(self.wcs.pixel_scale_matrix)) * 3600.0**2)


def _celestial_wcs(header: fits.Header, path: object) -> WCS:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FITSFixedWarning)
        try:
            w = WCS(header, naxis=2, relax=True, fix=False)
        except Exception as exc:  # astropy raises several types for bad headers
            raise InputError(f"cannot read the WCS: {exc}", path=path) from exc
    if not w.has_celestial:
        raise InputError("the image has no celestial WCS", path=path)
    if w.wcs.lng == 0 and w.wcs.lat == 1:
        return w
    return w.celestial


def read_frame(path: str | Path, band: str | None = None) -> Frame:
    """Read an image (``.fits``, ``.fit``, ``.fits.bz2``, ``.fits.gz``) and its WCS.

    The first HDU holding a 2-D image is used (HDU 0 of an SDSS frame).
    """
    path = Path(path)
    if not path.exists():
        raise InputError("frame file not found", path=path)
    try:
        source = path
        if path.suffix in (
            ".bz2",
            ".gz",
        ):  # decompress in memory: twice as fast as astropy's reader
            import bz2
            import gzip
            import io

            source = io.BytesIO(
                (bz2 if path.suffix == ".bz2" else gzip).decompress(path.read_bytes())
            )
        with fits.open(source, memmap=False) as hdul:
            for hdu in hdul:
                if hdu.is_image and hdu.data is not None and hdu.data.ndim == 2:
                    data = np.asarray(hdu.data, dtype=np.float32)
                    header = hdu.header.copy()
                    break
            else:
                raise InputError("no 2-D image in the file", path=path)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read FITS: {exc}", path=path) from exc
    if band is None:
        band = str(header.get("FILTER", "")).strip() or None
    return Frame(band=band or "?", data=data, wcs=_celestial_wcs(header, path), path=str(path))


def find_frames(frames_dir: str | Path) -> dict[str, dict[str, Path]]:
    """``{frame id: {band: path}}`` for the frame files in ``frames_dir`` (see module doc)."""
    frames_dir = Path(frames_dir)
    if not frames_dir.is_dir():
        raise InputError("frames folder not found", path=frames_dir)
    sets: dict[str, dict[str, Path]] = {}
    for p in sorted(frames_dir.iterdir()):
        m = _FRAME_RE.match(p.name)
        if not m:
            continue
        fid = m.group("id1") or m.group("id2")
        band = m.group("b1") or m.group("b2")
        sets.setdefault(fid, {})
        if band in sets[fid]:
            raise InputError(f"two {band}-band files for frame {fid}", path=p)
        sets[fid][band] = p
    return sets


def require_bands(
    frame_set: Mapping[str, Path], fid: str, where: object, bands=BANDS
) -> dict[str, Path]:
    """The paths of ``bands`` in a frame set, or a clear error naming the missing band."""
    missing = [b for b in bands if b not in frame_set]
    if missing:
        have = ", ".join(sorted(frame_set)) or "none"
        raise InputError(
            f"frame {fid}: missing {', '.join(missing)}-band frame (have: {have})", path=where
        )
    return {b: Path(frame_set[b]) for b in bands}


# -------------------------------------------------------------------------- resampling


def frame_pixels(target: WCS, shape: tuple[int, int], frame_wcs: WCS, step: int = 16):
    """0-based (row, col) in a frame of every pixel of the ``target`` grid.

    The exact transform (target pixel → sky → frame pixel, through astropy) is
    evaluated on a coarse sub-grid and fitted with an affine map; if the fit's
    largest residual exceeds 1e-3 px (e.g. a distorted WCS) the exact
    transform is evaluated at every pixel instead.
    """
    ny, nx = shape
    ys = np.unique(np.r_[np.arange(0, ny, step), ny - 1]).astype(float)
    xs = np.unique(np.r_[np.arange(0, nx, step), nx - 1]).astype(float)
    gy, gx = np.meshgrid(ys, xs, indexing="ij")
    a, d = target.wcs_pix2world(gx.ravel(), gy.ravel(), 0)
    fx, fy = frame_wcs.wcs_world2pix(a, d, 0)
    design = np.column_stack([np.ones(gx.size), gx.ravel(), gy.ravel()])
    coef, *_ = np.linalg.lstsq(design, np.column_stack([fx, fy]), rcond=None)
    resid = np.abs(design @ coef - np.column_stack([fx, fy])).max()
    if np.isfinite(resid) and resid <= 1e-3:
        yy, xx = np.mgrid[0:ny, 0:nx].astype(np.float64)
        col = coef[0, 0] + coef[1, 0] * xx + coef[2, 0] * yy
        row = coef[0, 1] + coef[1, 1] * xx + coef[2, 1] * yy
        return row, col
    yy, xx = np.mgrid[0:ny, 0:nx].astype(np.float64)
    a, d = target.wcs_pix2world(xx, yy, 0)
    col, row = frame_wcs.wcs_world2pix(a, d, 0)
    return np.asarray(row), np.asarray(col)


def resample(
    frame: Frame,
    target: WCS,
    shape: tuple[int, int],
    order: int = 3,
    conserve_flux: bool = True,
    target_scale: float = NATIVE_SCALE,
) -> np.ndarray:
    """Resample ``frame`` onto the ``target`` grid through the frame's own WCS (decisions.md#colour-composite).

    :func:`scipy.ndimage.map_coordinates` (spline of ``order``) on the part of the
    frame the grid needs; grid points outside the frame (or next to a NaN of the
    frame) are NaN. With ``conserve_flux`` values are multiplied by the ratio of
    output to input pixel area (nanomaggies per pixel stay nanomaggies per pixel).
    """
    row, col = frame_pixels(target, shape, frame.wcs)
    ny, nx = frame.data.shape
    inside = (row >= -0.5) & (row <= ny - 0.5) & (col >= -0.5) & (col <= nx - 0.5)
    out = np.full(shape, np.nan, dtype=np.float32)
    if not inside.any():
        return out
    pad = order + 2
    r0 = max(int(math.floor(row[inside].min())) - pad, 0)
    r1 = min(int(math.ceil(row[inside].max())) + pad + 1, ny)
    c0 = max(int(math.floor(col[inside].min())) - pad, 0)
    c1 = min(int(math.ceil(col[inside].max())) + pad + 1, nx)
    sub = frame.data[r0:r1, c0:c1]
    bad = ~np.isfinite(sub)
    coords = [row[inside] - r0, col[inside] - c0]
    if bad.any():
        sub = np.where(bad, np.float32(0.0), sub)
        touched = ndimage.map_coordinates(bad.astype(np.float32), coords, order=1, mode="nearest")
    vals = ndimage.map_coordinates(sub, coords, order=order, mode="nearest", output=np.float64)
    if bad.any():
        vals[touched > 1e-3] = np.nan
    if conserve_flux:
        vals *= (target_scale**2) / frame.pixel_area
    out[inside] = vals.astype(np.float32)
    return out


def galaxy_position(frame: Frame, ra: float, dec: float) -> tuple[float, float]:
    """0-based (col, row) of (ra, dec) in ``frame``."""
    c, r = frame.wcs.wcs_world2pix(ra, dec, 0)
    return float(c), float(r)


def edge_distance(frame_shape: tuple[int, int], col, row):
    """Distance in px from (col, row) to the nearest frame edge (negative outside)."""
    ny, nx = frame_shape
    col = np.asarray(col, dtype=float)
    row = np.asarray(row, dtype=float)
    return np.minimum.reduce([col + 0.5, nx - 0.5 - col, row + 0.5, ny - 0.5 - row])


# ----------------------------------------------------------------------------- catalogue

#: column name used here → accepted spellings (CAS names first, then SDSS flat-file names), case-insensitive
CATALOGUE_ALIASES: dict[str, tuple[str, ...]] = {
    "subject_id": ("subject_id", "subjectid", "objid", "dr7objid", "dr8objid"),
    "ra": ("ra", "ra_deg"),
    "dec": ("dec", "dec_deg"),
    "petroR90_r": ("petror90_r", "petroth90_r", "petroth90", "r90", "petror90"),
    "psffwhm_r": ("psffwhm_r", "psf_fwhm_r", "psf_fwhm", "psf_fwhm_arcsec"),
    "psf_source": ("psf_source",),
    "side_native": ("side_native",),
    "frame": ("frame",),
    "run": ("run",),
    "camcol": ("camcol",),
    "field": ("field",),
}


def _number_column(series: pd.Series, name: str, path: object) -> np.ndarray:
    """Floats from a catalogue column (numbers, or a flat file's per-band arrays → r band)."""
    num = pd.to_numeric(series, errors="coerce")
    if num.notna().all() or not series.astype(str).str.contains(r"[\[\s,{]", regex=True).any():
        return num.to_numpy(dtype=float)
    return per_band_value(series.to_numpy(), name, path)


def normalise_catalogue(df: pd.DataFrame, path: object = "catalogue") -> pd.DataFrame:
    """Rename a galaxy list's columns to the names used here and check them.

    Required: subject_id, ra, dec, petroR90_r (CAS names; SDSS flat-file
    PETROTH90 / PSF_FWHM — per-band arrays give the r band — and any case are
    accepted). Optional: psffwhm_r, psf_source, side_native (then used as the
    cutout side), frame, run/camcol/field.
    """
    lower = {c.lower(): c for c in df.columns}
    rename = {}
    for name, aliases in CATALOGUE_ALIASES.items():
        for a in aliases:
            if a in lower:
                rename[lower[a]] = name
                break
    df = df.rename(columns=rename).reset_index(drop=True)
    missing = [c for c in ("subject_id", "ra", "dec", "petroR90_r") if c not in df.columns]
    if missing:
        raise InputError(f"catalogue lacks column(s) {', '.join(missing)}", path=path)
    for col in ("ra", "dec", "petroR90_r", "psffwhm_r"):
        if col not in df.columns:
            continue
        vals = _number_column(df[col], col, path)
        bad = ~np.isfinite(vals)
        if col in ("ra", "dec") and bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"{col} is not a number: {df[col].iloc[row]!r}", path=path, row=row + 1
            )
        df[col] = vals
    ids = pd.to_numeric(df["subject_id"], errors="coerce")
    if ids.notna().all() and (ids == ids.round()).all():
        df["subject_id"] = ids.astype(np.int64)
    dup = df["subject_id"].duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        raise InputError(
            f"duplicate subject_id {df['subject_id'].iloc[row]}", path=path, row=row + 1
        )
    for col in ("side_native", "run", "camcol", "field"):
        if col in df.columns:
            df[col] = pd.to_numeric(df[col], errors="raise").astype(np.int64)
    return df


def read_catalogue(path: str | Path) -> pd.DataFrame:
    """Read a galaxy list (CSV, FITS, Parquet) and normalise its columns (:func:`normalise_catalogue`)."""
    from clumpscout.data.subjects import read_catalogue as read_any

    path = Path(path)
    if not path.exists():
        raise InputError("catalogue not found", path=path)
    if path.suffix == ".parquet":
        df = pd.read_parquet(path)
    else:
        df = read_any(path)
    return normalise_catalogue(df, path)


# --------------------------------------------------------------------------------- PSF (decisions.md#psf-fwhm)


def field_of(frame_id: str) -> int | None:
    """The SDSS field number in a frame id like ``002583-2-0136`` (else None)."""
    m = _SDSS_ID_RE.search(str(frame_id))
    return int(m.group(3)) if m else None


def psf_per_subject(
    cat: pd.DataFrame,
    frame_ids: Sequence[str],
    psf_source: str,
    psfield: str | Path | None,
    where: object = None,
) -> tuple[np.ndarray, list[str]]:
    """PSF FWHM (arcsec) and its source for every catalogue row (decisions.md#psf-fwhm).

    ``psf_source="catalogue"`` uses the catalogue's column and falls back to the
    psField file when the column is absent; ``"psfield"`` uses the file. A
    catalogue ``psf_source`` column, if any, names where its PSF values came from.
    """
    has_col = "psffwhm_r" in cat.columns
    if psf_source not in ("catalogue", "psfield"):
        raise InputError(f"psf_source must be catalogue or psfield, got {psf_source!r}")
    use_file = psf_source == "psfield" or not has_col
    if not use_file:
        fw = pd.to_numeric(cat["psffwhm_r"], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(fw) | (fw <= 0)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InputError(
                f"psffwhm_r must be > 0, got {cat['psffwhm_r'].iloc[row]!r}", where, row
            )
        if "psf_source" in cat.columns:
            return fw, cat["psf_source"].astype(str).tolist()
        return fw, ["catalogue"] * len(cat)
    if psfield is None:
        raise InputError(
            "no PSF: the catalogue has no psffwhm_r / PSF_FWHM column and no --psfield was given",
            path=where,
        )
    cache: dict[int | None, float] = {}
    out = np.empty(len(cat))
    for i, fid in enumerate(frame_ids):
        field = int(cat["field"].iloc[i]) if "field" in cat.columns else field_of(fid)
        if field not in cache:
            cache[field] = read_psfield_fwhm(psfield, "r", field)
        out[i] = cache[field]
    kind = "photofield" if "photofield" in Path(psfield).name.lower() else "psfield"
    return out, [kind] * len(cat)


# -------------------------------------------------------------------------- one subject


def make_subject(
    frames: Mapping[str, Frame],
    ra: float,
    dec: float,
    side: int,
    cfg: Mapping,
) -> dict:
    """Cutout, registration and scaling of one galaxy (steps 2-6 of the module doc).

    Returns ``nmgy`` (band → side×side float32, NaN off-frame), ``asinh`` (band →
    unclipped scaled), ``image`` (band → 400×400 clipped float), ``rgb`` (uint8),
    ``positions`` (band → galaxy (col, row) in that frame), ``nan_fraction``.
    """
    c = {**DEFAULTS, **dict(cfg)}
    target = cutout_wcs(ra, dec, side, c["native_scale"])
    q, alpha, m = float(c["asinh_Q"]), float(c["asinh_alpha"]), float(c["asinh_m"])
    out: dict = {"nmgy": {}, "asinh": {}, "image": {}, "positions": {}}
    nan = np.zeros((side, side), dtype=bool)
    for b in BANDS:
        fr = frames[b]
        band = resample(
            fr,
            target,
            (side, side),
            int(c["resample_order"]),
            bool(c["conserve_flux"]),
            float(c["native_scale"]),
        )
        nan |= ~np.isfinite(band)
        out["nmgy"][b] = band
        out["asinh"][b] = asinh_scale(band, float(c["beta"][b]), q, alpha, m, clip=False)
        out["positions"][b] = galaxy_position(fr, ra, dec)
    for b in BANDS:
        clipped = np.clip(out["asinh"][b], 0.0, 1.0)
        out["image"][b] = resize_band(clipped, int(c["image_size"]), c["resize_filter"])
    out["rgb"] = compose_rgb(out["image"], c["channels"])
    out["nan_fraction"] = float(nan.mean())
    return out


def bands_hdu(result: Mapping, ra: float, dec: float, side: int, cfg: Mapping) -> fits.PrimaryHDU:
    """The unclipped asinh-scaled g, r, i cube with the grid's WCS and the scaling."""
    c = {**DEFAULTS, **dict(cfg)}
    cube = np.stack([result["asinh"][b] for b in BANDS]).astype(np.float32)
    hdu = fits.PrimaryHDU(cube)
    h = hdu.header
    h.update(cutout_wcs(ra, dec, side, c["native_scale"]).to_header())
    h["BANDS"] = (",".join(BANDS), "cube planes")
    h["BUNIT"] = ("asinh", "I'=asinh(Q(I/beta-m)/alpha)/Q, unclipped")
    h["ASINH_Q"] = float(c["asinh_Q"])
    h["ASINH_A"] = float(c["asinh_alpha"])
    h["ASINH_M"] = float(c["asinh_m"])
    for b in BANDS:
        h[f"BETA_{b.upper()}"] = float(c["beta"][b])
    h["SIDE"] = (int(side), "cutout side (native px)")
    h["IMSIZE"] = (int(c["image_size"]), "subject image side (px)")
    h["RESIZE"] = (str(c["resize_filter"]), "Pillow filter for the subject image")
    return hdu


def load_bands(out_dir: str | Path, meta: pd.DataFrame) -> tuple[np.ndarray, dict]:
    """Memory-map ``bands.npy`` of a cutouts folder and read the scaling it was made with.

    Returns ``(flat, scaling)``; :func:`subject_bands` cuts one subject's cube out.
    """
    out_dir = Path(out_dir)
    path = out_dir / "bands.npy"
    rep = out_dir / "cutouts_report.json"
    for f in (path, rep):
        if not f.exists():
            raise InputError("not a cutouts folder (file missing)", path=f)
    import json

    scaling = json.loads(rep.read_text())["bands"]
    flat = np.load(path, mmap_mode="r")
    need = int((meta["bands_offset"] + 3 * meta["side_native"] ** 2).max()) if len(meta) else 0
    if flat.size < need:
        raise InputError(f"bands.npy holds {flat.size} values, the table needs {need}", path=path)
    return flat, scaling


def subject_bands(flat: np.ndarray, offset: int, side: int) -> dict[str, np.ndarray]:
    """One subject's unclipped asinh-scaled bands (band → side×side float32)."""
    cube = np.asarray(flat[int(offset) : int(offset) + 3 * side * side], dtype=np.float32)
    cube = cube.reshape(3, side, side)
    return {b: cube[k] for k, b in enumerate(BANDS)}


def write_png(rgb: np.ndarray, path: str | Path, compress_level: int = 1) -> None:
    """Write an 8-bit RGB array as PNG atomically (no timestamps: same array, same bytes).

    zlib's Huffman-only strategy (``compress_type=2``): on noisy sky it is both
    faster and ~20 % smaller than the default strategy.
    """
    from PIL import Image

    with atomic_path(path) as tmp:
        Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8)).save(
            tmp, format="PNG", compress_level=int(compress_level), compress_type=2
        )


# ------------------------------------------------------------------------- many subjects


class _FrameCache:
    """The last few frame sets read (real frames are shared by many galaxies)."""

    def __init__(self, size: int = 2):
        self.size = size
        self.items: OrderedDict[str, dict[str, Frame]] = OrderedDict()

    def get(self, paths: Mapping[str, Path]) -> dict[str, Frame]:
        key = "|".join(
            f"{b}={Path(p).resolve()}:{Path(p).stat().st_mtime_ns}"
            for b, p in sorted(paths.items())
        )
        if key in self.items:
            self.items.move_to_end(key)
            return self.items[key]
        frames = {b: read_frame(p, b) for b, p in paths.items()}
        self.items[key] = frames
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return frames


_CACHE = _FrameCache()


def _one(task: dict) -> tuple[dict, np.ndarray]:
    """Worker: cut, scale and write one subject's PNG; return its metadata row and
    its float16 band cube (the parent writes it into ``bands.npy``)."""
    cfg = task["cfg"]
    frames = _CACHE.get(task["paths"])
    sid, ra, dec, side = task["subject_id"], task["ra"], task["dec"], task["side"]
    res = make_subject(frames, ra, dec, side, cfg)
    out = Path(task["out"])
    write_png(res["rgb"], out / task["png"], cfg.get("png_compress_level", 1))
    if cfg.get("band_fits"):
        with atomic_path(out / "bands" / f"{sid}.fits") as tmp:
            bands_hdu(res, ra, dec, side, cfg).writeto(tmp, overwrite=True)
    row = {"subject_id": sid, "nan_fraction": res["nan_fraction"]}
    for b in BANDS:
        row[f"frame_col_{b}"], row[f"frame_row_{b}"] = res["positions"][b]
    cube = np.stack([res["asinh"][b] for b in BANDS]).astype(np.float16)
    return row, cube


def _assign_frames(cat: pd.DataFrame, sets: Mapping[str, Mapping[str, Path]], where) -> list[str]:
    """The frame set id for every catalogue row (``frame`` / run-camcol-field / search)."""
    if not sets:
        raise InputError("no frame-<band>-<id>.fits[.bz2] files", path=where)
    if "frame" in cat.columns:
        ids = cat["frame"].astype(str).tolist()
        for i, fid in enumerate(ids):
            if fid not in sets:
                raise InputError(f"frame {fid} not found in the frames folder", where, row=i)
        return ids
    if {"run", "camcol", "field"} <= set(cat.columns):
        ids = [
            f"{int(r):06d}-{int(c)}-{int(f):04d}"
            for r, c, f in zip(cat["run"], cat["camcol"], cat["field"], strict=True)
        ]
        if all(fid in sets for fid in ids):
            return ids
    # search: the frame set (its r band, else any band) where the galaxy is deepest inside
    best = np.full(len(cat), -np.inf)
    ids = [""] * len(cat)
    for fid, paths in sets.items():
        b = "r" if "r" in paths else sorted(paths)[0]
        with fits.open(paths[b], memmap=False) as hdul:
            hdu = next((h for h in hdul if h.is_image and h.header.get("NAXIS", 0) == 2), None)
            if hdu is None:
                raise InputError("no 2-D image in the file", path=paths[b])
            shape = (int(hdu.header["NAXIS2"]), int(hdu.header["NAXIS1"]))
            w = _celestial_wcs(hdu.header, paths[b])
        col, row = w.wcs_world2pix(cat["ra"].to_numpy(), cat["dec"].to_numpy(), 0)
        dist = edge_distance(shape, col, row)
        better = dist > best
        best = np.where(better, dist, best)
        for i in np.flatnonzero(better):
            ids[i] = fid
    outside = np.flatnonzero(best < 0)
    if outside.size:
        i = int(outside[0])
        raise InputError(
            f"subject {cat['subject_id'].iloc[i]} (ra {cat['ra'].iloc[i]:.5f}, dec "
            f"{cat['dec'].iloc[i]:.5f}) lies in no frame",
            path=where,
            row=i,
        )
    return ids


def make_cutouts(
    frames_dir: str | Path,
    catalogue: str | Path | pd.DataFrame,
    out_dir: str | Path,
    cfg: Mapping | None = None,
    psfield: str | Path | None = None,
    workers: int = 1,
) -> tuple[pd.DataFrame, dict]:
    """Subject PNGs, scaled bands and the metadata table for every catalogue galaxy.

    Writes ``out_dir/png/<id>.png``, ``out_dir/bands.npy`` (and ``bands/<id>.fits``
    with ``band_fits``), ``out_dir/cutouts.parquet`` and ``cutouts.csv`` (metadata)
    and ``cutouts_report.json``, and returns
    ``(metadata, report)``. ``workers`` > 1 uses that many processes; the output
    does not depend on it.
    """
    c = {**DEFAULTS, **dict(cfg or {})}
    out = Path(out_dir)
    where = catalogue if not isinstance(catalogue, pd.DataFrame) else "catalogue"
    cat = read_catalogue(catalogue) if not isinstance(catalogue, pd.DataFrame) else catalogue
    cat = cat.reset_index(drop=True)
    sets = find_frames(frames_dir)
    fids = _assign_frames(cat, sets, frames_dir)
    paths = {fid: require_bands(sets[fid], fid, frames_dir) for fid in sorted(set(fids))}

    r90 = cat["petroR90_r"].to_numpy(float)
    side_r90 = cutout_side(
        np.where(np.isfinite(r90), r90, -1.0), c["r90_factor"], c["native_scale"], c["min_side"]
    )
    side_r90 = np.atleast_1d(side_r90)
    if "side_native" in cat.columns:
        side = cat["side_native"].to_numpy(dtype=np.int64)
        n_side_differs = int((side != side_r90).sum())
    else:
        side, n_side_differs = side_r90, 0
    fwhm, psf_src = psf_per_subject(cat, fids, c["psf_source"], psfield, where)

    meta = pd.DataFrame(
        {
            "subject_id": cat["subject_id"].to_numpy(),
            "ra": cat["ra"].to_numpy(float),
            "dec": cat["dec"].to_numpy(float),
            "petroR90_r": cat["petroR90_r"].to_numpy(float),
            "side_native": side.astype(np.int64),
            "subject_scale": subject_scale(side, c["native_scale"], c["image_size"]),
            "psf_fwhm_arcsec": fwhm,
            "psf_source": psf_src,
            "fwhm_native": fwhm_native(fwhm, c["native_scale"]),
            "fwhm_subject": fwhm_subject(fwhm, side, c["native_scale"], c["image_size"]),
            "image_width": int(c["image_size"]),
            "image_height": int(c["image_size"]),
            "frame": fids,
        }
    )
    meta["box_side"] = 2.0 * meta["fwhm_subject"]
    meta["png"] = [f"png/{s}.png" for s in meta["subject_id"]]
    sizes = 3 * meta["side_native"].to_numpy(np.int64) ** 2
    meta["bands_offset"] = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    tasks = [
        {
            "subject_id": meta["subject_id"].iloc[i],
            "ra": float(meta["ra"].iloc[i]),
            "dec": float(meta["dec"].iloc[i]),
            "side": int(meta["side_native"].iloc[i]),
            "frame": fids[i],
            "paths": paths[fids[i]],
            "png": meta["png"].iloc[i],
            "out": str(out),
            "cfg": c,
        }
        for i in range(len(meta))
    ]
    order = sorted(range(len(tasks)), key=lambda i: (tasks[i]["frame"], i))
    (out / "png").mkdir(parents=True, exist_ok=True)
    if c.get("band_fits"):
        (out / "bands").mkdir(parents=True, exist_ok=True)
    rows: dict[int, dict] = {}
    offsets = meta["bands_offset"].to_numpy()
    with (
        timed(f"cutouts of {len(tasks)} subjects ({workers} worker(s))", log),
        atomic_path(out / "bands.npy") as tmp,
    ):
        if sizes.sum() == 0:
            np.save(tmp, np.zeros(0, dtype=np.float16), allow_pickle=False)
            flat = np.zeros(0, dtype=np.float16)
        else:
            flat = np.lib.format.open_memmap(
                tmp, mode="w+", dtype=np.float16, shape=(int(sizes.sum()),)
            )

        def keep(i, result, flat=flat):
            rows[i], cube = result
            flat[offsets[i] : offsets[i] + cube.size] = cube.ravel()

        if workers > 1 and len(tasks) > 1:
            with ProcessPoolExecutor(max_workers=int(workers)) as ex:
                chunk = max(1, min(16, len(tasks) // (4 * int(workers))))
                it = ex.map(_one, [tasks[i] for i in order], chunksize=chunk)
                for i, result in zip(order, progress(it, "cutouts", total=len(order)), strict=True):
                    keep(i, result)
        else:
            for i in progress(order, "cutouts"):
                keep(i, _one(tasks[i]))
        if isinstance(flat, np.memmap):
            flat.flush()
    extra = pd.DataFrame([rows[i] for i in range(len(tasks))])
    meta = meta.merge(extra, on="subject_id", how="left", validate="one_to_one")
    meta["edge"] = meta["nan_fraction"] > 0
    per_subject = log.info if len(meta) <= 50 else log.debug
    for r in meta.itertuples(index=False):
        per_subject(
            "subject %s: side %d native px (%.4f\"/subject px), PSF FWHM %.3f\" (%s) = %.2f native px "
            "= %.2f subject px%s",
            r.subject_id, r.side_native, r.subject_scale, r.psf_fwhm_arcsec, r.psf_source,
            r.fwhm_native, r.fwhm_subject, f", EDGE: {100 * r.nan_fraction:.1f}% NaN" if r.edge else "",
        )  # fmt: skip
    write_parquet(meta, out / "cutouts.parquet")
    write_csv(meta, out / "cutouts.csv")
    report = {
        "n_subjects": int(len(meta)),
        "n_edge": int(meta["edge"].sum()),
        "n_side_differs_from_r90": n_side_differs,
        "n_frame_sets": int(len(paths)),
        "psf_source": {k: int(v) for k, v in pd.Series(psf_src).value_counts().items()},
        "fwhm_subject_median": float(np.median(meta["fwhm_subject"])) if len(meta) else None,
        "bands": {
            "file": "bands.npy",
            "dtype": "float16",
            "order": list(BANDS),
            "scaling": "unclipped asinh (decisions.md#colour-composite)",
            "asinh_Q": float(c["asinh_Q"]),
            "asinh_alpha": float(c["asinh_alpha"]),
            "asinh_m": float(c["asinh_m"]),
            "beta": {b: float(c["beta"][b]) for b in BANDS},
            "image_size": int(c["image_size"]),
            "resize_filter": str(c["resize_filter"]),
            "native_scale": float(c["native_scale"]),
        },
        "config": {k: c[k] for k in sorted(c)},
    }
    if report["n_edge"]:
        log.warning(
            "%d subject(s) reach a frame edge (NaN-filled, flagged 'edge')", report["n_edge"]
        )
    if n_side_differs:
        log.warning(
            "%d subject(s): given side_native differs from decisions.md#cutout-side's side",
            n_side_differs,
        )
    write_json(report, out / "cutouts_report.json")
    return meta, report


# ------------------------------------------------------------- finding galaxies in a frame


def find_sources(
    data: np.ndarray,
    psf_fwhm_px: float,
    nsigma: float = 3.0,
    min_area: int = 12,
    saturation: float | None = None,
) -> pd.DataFrame:
    """Detect sources in an image (nanomaggies) and tell stars from galaxies.

    A simple detector for picking demo galaxies from a frame that has no
    catalogue (frame 2583/2/136): smooth with the PSF, threshold at ``nsigma``
    times the clipped noise of the smoothed image, label connected pixels
    (:func:`scipy.ndimage.label`), then per segment the flux, centroid, second
    moments (``fwhm_px = 2.3548·sqrt((λ1+λ2)/2)``), axis ratio and ``r90_px``,
    the radius that holds 90 % of the segment's flux. ``extended`` marks
    segments wider than 1.4 × the PSF; ``saturated`` those with a peak above
    ``saturation`` (default: 60 % of the image maximum).
    """
    from astropy.stats import sigma_clipped_stats

    img = np.nan_to_num(np.asarray(data, dtype=np.float64))
    _, med, _ = sigma_clipped_stats(img, sigma=3.0, maxiters=5)
    img = img - med
    sig = psf_fwhm_px / 2.3548
    smooth = ndimage.gaussian_filter(img, sig)
    _, smed, sstd = sigma_clipped_stats(smooth, sigma=3.0, maxiters=5)
    labels, n = ndimage.label(smooth > smed + nsigma * sstd)
    if n == 0:
        return pd.DataFrame()
    idx = np.arange(1, n + 1)
    area = ndimage.sum_labels(np.ones_like(img), labels, idx)
    objs = ndimage.find_objects(labels)
    sat = 0.6 * float(img.max()) if saturation is None else float(saturation)
    rows = []
    for k, sl in enumerate(objs, start=1):
        if area[k - 1] < min_area:
            continue
        mask = labels[sl] == k
        w = np.where(mask, np.clip(img[sl], 0.0, None), 0.0)
        flux = float(w.sum())
        if flux <= 0:
            continue
        yy, xx = np.mgrid[sl[0], sl[1]]
        cx, cy = float((w * xx).sum() / flux), float((w * yy).sum() / flux)
        dx, dy = xx - cx, yy - cy
        cov = (
            np.array(
                [
                    [(w * dx * dx).sum(), (w * dx * dy).sum()],
                    [(w * dx * dy).sum(), (w * dy * dy).sum()],
                ]
            )
            / flux
        )
        lam = np.sort(np.clip(np.linalg.eigvalsh(cov), 1e-6, None))
        r = np.hypot(dx, dy)[mask]
        order = np.argsort(r)
        cum = np.cumsum(w[mask][order])
        r90 = float(r[order][np.searchsorted(cum, 0.9 * cum[-1])])
        peak = float(img[sl][mask].max())
        fwhm = 2.3548 * math.sqrt(lam.mean())
        rows.append(
            {
                "x": cx,
                "y": cy,
                "flux": flux,
                "peak": peak,
                "area": int(area[k - 1]),
                "fwhm_px": fwhm,
                "axis_ratio": math.sqrt(lam[0] / lam[1]),
                "r90_px": max(r90, 0.5),
                "saturated": peak > sat,
                "extended": fwhm > 1.4 * psf_fwhm_px,
                "x0": sl[1].start,
                "x1": sl[1].stop,
                "y0": sl[0].start,
                "y1": sl[0].stop,
            }
        )
    table = pd.DataFrame(rows)
    if not table.empty:
        from scipy.spatial import cKDTree

        xy = table[["x", "y"]].to_numpy()
        near = cKDTree(xy).query_ball_point(xy, 100.0)
        table["crowding"] = [len(v) - 1 for v in near]
    return table


def pick_galaxies(
    sources: pd.DataFrame,
    shape: tuple[int, int],
    n: int,
    max_peak: float = 10.0,
    max_peak_fraction: float = 0.08,
    max_crowding: int = 15,
    min_axis_ratio: float = 0.2,
    edge_margin: float = 30.0,
) -> pd.DataFrame:
    """The ``n`` brightest likely galaxies among :func:`find_sources`' segments.

    Kept: extended, unsaturated, low peak surface brightness (``peak`` <
    ``max_peak`` nmgy/px and ``peak / flux`` < ``max_peak_fraction``; a star
    puts ~15 % of its flux in its peak pixel at SDSS seeing, and bright stars'
    flat saturated cores fail ``max_peak``), at most ``max_crowding`` other
    sources within 100 px (not in a globular cluster's crowded field),
    not too elongated, and away from the frame edges.
    """
    if sources.empty:
        return sources
    ny, nx = shape
    ok = (
        sources["extended"]
        & ~sources["saturated"]
        & (sources["peak"] < max_peak)
        & (sources["peak"] / sources["flux"] < max_peak_fraction)
        & (sources["crowding"] <= max_crowding)
        & (sources["axis_ratio"] >= min_axis_ratio)
        & (sources["x0"] > edge_margin)
        & (sources["y0"] > edge_margin)
        & (sources["x1"] < nx - edge_margin)
        & (sources["y1"] < ny - edge_margin)
    )
    return sources[ok].sort_values("flux", ascending=False).head(int(n)).reset_index(drop=True)


def petrosian_r90(
    image: np.ndarray,
    x: float,
    y: float,
    mask: np.ndarray | None = None,
    rmax: float = 150.0,
    eta: float = 0.2,
) -> float:
    """SDSS-style Petrosian R90 (in px) of the source at (x, y) (for galaxies without a catalogue).

    Petrosian ratio ``η(r)`` = mean surface brightness in the annulus
    [0.8 r, 1.25 r] over the mean within r; the Petrosian radius R_P is where it
    first drops below ``eta`` (0.2, as SDSS); R90 is the radius holding 90 % of
    the flux within 2 R_P. Pixels where ``mask`` is True (other sources) are
    ignored; the image must be background-subtracted.
    """
    img = np.asarray(image, dtype=np.float64)
    ny, nx = img.shape
    r0, r1 = max(int(y - rmax), 0), min(int(y + rmax) + 1, ny)
    c0, c1 = max(int(x - rmax), 0), min(int(x + rmax) + 1, nx)
    sub = img[r0:r1, c0:c1]
    yy, xx = np.mgrid[r0:r1, c0:c1]
    rr = np.hypot(xx - x, yy - y)
    good = np.isfinite(sub) & (rr <= rmax)
    if mask is not None:
        good &= ~mask[r0:r1, c0:c1]
    edges = np.arange(0.0, rmax + 0.5, 0.5)
    k = np.digitize(rr[good], edges) - 1
    flux = np.bincount(k, weights=sub[good], minlength=edges.size)[: edges.size - 1]
    npix = np.bincount(k, minlength=edges.size)[: edges.size - 1].astype(float)
    radii = edges[1:]
    cum_f, cum_n = np.cumsum(flux), np.cumsum(npix)
    rp = None
    for j, r in enumerate(radii):
        if r < 1.5 or cum_n[j] == 0:
            continue
        ann = (radii > 0.8 * r) & (radii <= 1.25 * r)
        if radii[-1] < 1.25 * r or npix[ann].sum() == 0:
            break
        local = flux[ann].sum() / npix[ann].sum()
        mean_in = cum_f[j] / cum_n[j]
        if mean_in > 0 and local / mean_in < eta:
            rp = r
            break
    if rp is None:
        rp = radii[-1] / 2.0
    inside = radii <= 2.0 * rp
    fp = cum_f[inside][-1]
    if fp <= 0:
        return float(rp)
    j90 = int(np.searchsorted(cum_f[inside], 0.9 * fp))
    return float(radii[min(j90, inside.sum() - 1)])


def band_centroids(
    bands: Mapping[str, np.ndarray], x: float, y: float, radius: float = 5.0
) -> dict[str, tuple[float, float]]:
    """Flux-weighted centroid (col, row) of each band within ``radius`` px of (x, y).

    The median of an annulus [2, 3] × radius is subtracted first; used to check
    that the bands are registered (no colour fringes).
    """
    out = {}
    for b, img in bands.items():
        ny, nx = img.shape
        yy, xx = np.mgrid[0:ny, 0:nx]
        rr = np.hypot(xx - x, yy - y)
        ann = (rr > 2 * radius) & (rr < 3 * radius) & np.isfinite(img)
        bg = float(np.median(img[ann])) if ann.any() else 0.0
        sel = (rr <= radius) & np.isfinite(img)
        w = np.clip(img[sel] - bg, 0.0, None)
        out[b] = (float((w * xx[sel]).sum() / w.sum()), float((w * yy[sel]).sum() / w.sum()))
    return out


def registration_offset(centroids: Mapping[str, tuple[float, float]]) -> float:
    """Largest distance (px) between the band centroids of one source."""
    pts = np.array(list(centroids.values()))
    d = np.hypot(pts[:, None, 0] - pts[None, :, 0], pts[:, None, 1] - pts[None, :, 1])
    return float(d.max())


def pick_star(sources: pd.DataFrame, shape, peak=(20.0, 150.0), edge_margin=40.0) -> pd.Series:
    """A bright, unsaturated, isolated point source (for the registration check)."""
    ny, nx = shape
    ok = (
        (sources["peak"] / sources["flux"] > 0.08)  # point-like: a PSF puts ~15 % in its peak
        & ~sources["saturated"]
        & sources["peak"].between(*peak)
        & (sources["crowding"] <= sources["crowding"].quantile(0.25))
        & sources["x"].between(edge_margin, nx - edge_margin)
        & sources["y"].between(edge_margin, ny - edge_margin)
    )
    if not ok.any():
        raise InputError("no bright isolated unsaturated star found for the registration check")
    return sources[ok].sort_values("peak", ascending=False).iloc[0]


def _background(data: np.ndarray) -> np.ndarray:
    from astropy.stats import sigma_clipped_stats

    _, med, _ = sigma_clipped_stats(data, sigma=3.0, maxiters=5)
    return np.asarray(data, dtype=np.float64) - med


def demo_field(
    frames_dir: str | Path,
    psfield: str | Path,
    photofield: str | Path | None,
    out_dir: str | Path,
    cfg: Mapping,
    n_galaxies: int = 4,
) -> tuple[pd.DataFrame, dict]:
    """Real-data demo on one SDSS field (frame 2583/2/136): find galaxies, cut, check registration.

    The field has no photoObj rows, so galaxies are found in the r frame
    (:func:`find_sources`, :func:`pick_galaxies`) and sized with
    :func:`petrosian_r90`; the PSF comes from the psField (decisions.md#psf-fwhm), the
    photoField value is recorded beside it. A bright star is cut out as well and
    the distance between its g, r, i centroids after resampling is reported.
    """
    out = Path(out_dir)
    sets = find_frames(frames_dir)
    if len(sets) != 1:
        raise InputError(f"expected one frame set, found {len(sets)}", path=frames_dir)
    fid, fset = next(iter(sets.items()))
    paths = require_bands(fset, fid, frames_dir)
    field = field_of(fid)
    r = read_frame(paths["r"], "r")
    scale = math.sqrt(r.pixel_area)
    psf_ps = read_psfield_fwhm(psfield, "r")
    psf_pf = read_psfield_fwhm(photofield, "r", field) if photofield else float("nan")
    with timed(f"finding galaxies in frame {fid}", log):
        sources = find_sources(r.data, psf_ps / scale)
        gals = pick_galaxies(sources, r.data.shape, n_galaxies)
    if gals.empty:
        raise InputError("no galaxy found in the frame", path=paths["r"])
    img = _background(r.data)
    ids = [int(f"{int(fid[:6])}{fid[7]}{field:04d}{k:02d}") for k in range(1, len(gals) + 1)]
    ra, dec = r.wcs.wcs_pix2world(gals["x"].to_numpy(), gals["y"].to_numpy(), 0)
    cat = pd.DataFrame(
        {
            "subject_id": ids,
            "ra": ra,
            "dec": dec,
            "petroR90_r": [
                petrosian_r90(img, gx, gy) * scale
                for gx, gy in zip(gals["x"], gals["y"], strict=True)
            ],
            "frame": fid,
            "field": field,
        }
    )
    c = {**dict(cfg), "psf_source": "psfield", "band_fits": True}
    meta, report = make_cutouts(frames_dir, cat, out, c, psfield=psfield)
    meta["photofield_fwhm_arcsec"] = psf_pf
    meta["fwhm_subject_photofield"] = fwhm_subject(
        psf_pf,
        meta["side_native"],
        c.get("native_scale", NATIVE_SCALE),
        c.get("image_size", IMAGE_SIZE),
    )
    # registration: a bright star, cut out on a 40 px grid
    star = pick_star(sources, r.data.shape)
    s_ra, s_dec = r.wcs.wcs_pix2world(star["x"], star["y"], 0)
    frames = {b: read_frame(paths[b], b) for b in BANDS}
    res = make_subject(frames, float(s_ra), float(s_dec), 40, {**DEFAULTS, **c})
    cen = band_centroids(res["nmgy"], 19.5, 19.5, 4.0)
    raw = {b: galaxy_position(frames[b], float(s_ra), float(s_dec)) for b in BANDS}
    report["registration"] = {
        "star_ra": float(s_ra),
        "star_dec": float(s_dec),
        "star_peak_r_nmgy": float(star["peak"]),
        "frame_positions": {b: [round(v, 3) for v in raw[b]] for b in BANDS},
        "raw_band_offset_px": registration_offset(raw),
        "centroids_after_resampling": {b: [round(v, 3) for v in cen[b]] for b in BANDS},
        "max_centroid_offset_px": registration_offset(cen),
    }
    log.info(
        "registration: star at (%.5f, %.5f) is %.2f px apart between bands in the frames, "
        "%.3f px after resampling",
        float(s_ra), float(s_dec), report["registration"]["raw_band_offset_px"],
        report["registration"]["max_centroid_offset_px"],
    )  # fmt: skip
    write_json(report, out / "cutouts_report.json")
    return meta, report


def demo_group(
    frames_dir: str | Path, out_dir: str | Path, cfg: Mapping, n_galaxies: int = 4
) -> tuple[pd.DataFrame, dict]:
    """Real-data demo on the HCG 88 images of astropy-data (a handsome group of spirals).

    The images are 3 × 3-binned (1.19"/px) SDSS g, r, i, co-registered, with values
    per native 0.396" pixel (their sky noise is a third of a native frame's), so
    no pixel-area rescaling is applied. No psField: the PSF FWHM is the median
    second-moment FWHM of bright unsaturated stars in the r image (recorded as
    ``psf_source = image_stars``). The members are the largest extended sources;
    one more cutout frames the whole group.
    """
    out = Path(out_dir)
    sets = find_frames(frames_dir)
    if len(sets) != 1:
        raise InputError(f"expected one frame set, found {len(sets)}", path=frames_dir)
    fid, fset = next(iter(sets.items()))
    paths = require_bands(fset, fid, frames_dir)
    r = read_frame(paths["r"], "r")
    scale = math.sqrt(r.pixel_area)
    sources = find_sources(r.data, 1.4 / scale)
    stars = sources[~sources["extended"] & ~sources["saturated"] & (sources["peak"] > 1.0)]
    psf = float(np.median(stars["fwhm_px"])) * scale if len(stars) else 1.4
    gals = pick_galaxies(
        sources, r.data.shape, n_galaxies, max_peak=np.inf, max_peak_fraction=0.05,
        max_crowding=10**6, edge_margin=5.0,
    )  # fmt: skip
    gals = gals[gals["area"] >= 0.25 * gals["area"].max()]
    img = _background(r.data)
    r90 = np.array(
        [petrosian_r90(img, gx, gy) for gx, gy in zip(gals["x"], gals["y"], strict=True)]
    )
    ra, dec = r.wcs.wcs_pix2world(gals["x"].to_numpy(), gals["y"].to_numpy(), 0)
    w = gals["flux"].to_numpy()
    cx, cy = float((w * gals["x"]).sum() / w.sum()), float((w * gals["y"]).sum() / w.sum())
    extent = float(np.max(np.hypot(gals["x"] - cx, gals["y"] - cy) + 1.2 * r90)) * scale
    g_ra, g_dec = r.wcs.wcs_pix2world(cx, cy, 0)
    cat = pd.DataFrame(
        {
            "subject_id": [88000] + [88000 + k for k in range(1, len(gals) + 1)],
            "ra": np.r_[float(g_ra), ra],
            "dec": np.r_[float(g_dec), dec],
            "petroR90_r": np.r_[extent / 3.0, r90 * scale],
            "psffwhm_r": psf,
            "psf_source": "image_stars",
            "frame": fid,
        }
    )
    c = {**dict(cfg), "psf_source": "catalogue", "band_fits": True, "conserve_flux": False}
    meta, report = make_cutouts(frames_dir, cat, out, c)
    report["psf_from_stars"] = {"n_stars": int(len(stars)), "fwhm_arcsec": psf}
    write_json(report, out / "cutouts_report.json")
    return meta, report


def real_demo(
    field_dir: str | Path,
    psfield: str | Path,
    photofield: str | Path | None,
    hcg_dir: str | Path,
    out_field: str | Path,
    out_hcg: str | Path,
    fwhm_csv: str | Path,
    montage: str | Path,
    cfg: Mapping,
    n_galaxies: int = 4,
    dpi: int = 150,
) -> pd.DataFrame:
    """The workflow's real-data demo: :func:`demo_field` + :func:`demo_group`, the PSF
    FWHM of every subject in subject px (printed, and written to ``fwhm_csv``) and a
    montage of the images (PNG and PDF, ``montage`` is the PNG path)."""
    from clumpscout.figures.flux import montage_items, plot_subject_montage

    field, field_rep = demo_field(field_dir, psfield, photofield, out_field, cfg, n_galaxies)
    group, _ = demo_group(hcg_dir, out_hcg, cfg, n_galaxies)
    cols = [
        "subject_id", "ra", "dec", "petroR90_r", "side_native", "subject_scale",
        "psf_source", "psf_fwhm_arcsec", "fwhm_native", "fwhm_subject", "edge",
    ]  # fmt: skip
    table = pd.concat(
        [
            field.assign(target="SDSS 2583/2/136")[
                ["target", *cols, "photofield_fwhm_arcsec", "fwhm_subject_photofield"]
            ],
            group.assign(target="HCG 88")[["target", *cols]],
        ],
        ignore_index=True,
    )
    write_csv(table, fwhm_csv)
    for r in table.itertuples(index=False):
        extra = ""
        if isinstance(r.fwhm_subject_photofield, float) and np.isfinite(r.fwhm_subject_photofield):
            extra = (
                f'; photoField {r.photofield_fwhm_arcsec:.3f}" = {r.fwhm_subject_photofield:.2f} px'
            )
        line = (
            f"{r.target:16s} subject {r.subject_id}: side {r.side_native} native px, PSF FWHM "
            f'{r.psf_fwhm_arcsec:.3f}" ({r.psf_source}) = {r.fwhm_native:.2f} native px = '
            f"{r.fwhm_subject:.2f} subject px{extra}{'  [EDGE]' if r.edge else ''}"
        )
        print(line)
        log.info(line)
    reg = field_rep["registration"]
    print(
        f"registration (2583/2/136, star r peak {reg['star_peak_r_nmgy']:.0f} nmgy): bands "
        f"{reg['raw_band_offset_px']:.2f} px apart in the frames, centroids "
        f"{reg['max_centroid_offset_px']:.3f} px apart after resampling"
    )
    items = montage_items(field, out_field, len(field)) + montage_items(group, out_hcg, len(group))
    for item, r in zip(items, table.itertuples(index=False), strict=True):
        item["title"] = (
            f"{r.target} {r.subject_id}\nside {r.side_native} px, FWHM {r.fwhm_subject:.1f} subject px"
        )
    plot_subject_montage(items, Path(montage).with_suffix(""), ncols=4, dpi=dpi)
    return table


# -------------------------------------------------------------------------------- CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--frames", required=True, help="folder of frame-{g,r,i}-*.fits[.bz2] files")
    p.add_argument(
        "--catalogue",
        required=True,
        help="CSV/Parquet: subject_id, ra, dec, petroR90_r (CAS or flat-file names) [, psffwhm_r]",
    )
    p.add_argument("--psfield", default=None, help="psField or photoField file for the PSF FWHM")
    p.add_argument(
        "--psf-source",
        choices=("catalogue", "psfield"),
        default=DEFAULTS["psf_source"],
        help="PSF FWHM from the catalogue column (default) or the psField (decisions.md#psf-fwhm)",
    )
    p.add_argument("--out", required=True, help="output folder (png/, bands.npy, cutouts.parquet)")
    p.add_argument("--channels", default="irg", help="bands shown as R, G, B (default irg)")
    p.add_argument("--resize-filter", choices=RESIZE_FILTERS, default=DEFAULTS["resize_filter"])
    p.add_argument("--order", type=int, default=DEFAULTS["resample_order"], help="spline order")
    p.add_argument(
        "--no-flux-rescale",
        action="store_true",
        help='do not scale by the pixel-area ratio (input already per 0.396" pixel)',
    )
    p.add_argument("--workers", type=int, default=1, help="processes")


def run(args: argparse.Namespace) -> int:
    channels = list(args.channels)
    if len(channels) != 3 or any(b not in BANDS for b in channels):
        raise InputError(f"--channels must be 3 letters from g, r, i, got {args.channels!r}")
    cfg = {
        "channels": channels,
        "resize_filter": args.resize_filter,
        "resample_order": args.order,
        "psf_source": args.psf_source,
        "conserve_flux": not args.no_flux_rescale,
    }
    meta, report = make_cutouts(
        args.frames, args.catalogue, args.out, cfg, psfield=args.psfield, workers=args.workers
    )
    for _, r in meta.iterrows():
        print(
            f'{r["subject_id"]}\tside {r["side_native"]} px\tFWHM {r["psf_fwhm_arcsec"]:.3f}" '
            f"({r['psf_source']}) = {r['fwhm_subject']:.2f} subject px"
            + ("\tEDGE" if r["edge"] else "")
        )
    return 0
