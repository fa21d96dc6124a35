"""SDSS frames: reading them, grouping them into frame sets, and resampling a band onto a
cutout's grid through the band's own WCS (decisions.md#colour-composite; the pipeline that
uses them is :mod:`clumpscout.images.cutouts`).

Frames: ``frame-<band>-<id>.fits[.bz2|.gz]`` (SDSS corrected frames; ``<id>`` is e.g.
``002583-2-0136``), or ``<id>_<band>.fits[...]`` (e.g. the astropy-data
``reprojected_sdss_g.fits.bz2``).
"""

from __future__ import annotations

import logging
import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from astropy.io import fits
from astropy.wcs import WCS, FITSFixedWarning
from scipy import ndimage

from clumpscout.errors import InputError
from clumpscout.images.geometry import BANDS, NATIVE_SCALE

log = logging.getLogger(__name__)


_FRAME_RE = re.compile(
    r"^(?:frame-(?P<b1>[ugriz])-(?P<id1>.+?)|(?P<id2>.+?)[_-](?P<b2>[ugriz]))"
    r"\.fits?(?:\.bz2|\.gz)?$"
)
_SDSS_ID_RE = re.compile(r"(\d{6})-(\d)-(\d{4})")


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


def celestial_wcs(header: fits.Header, path: object) -> WCS:
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
    return Frame(band=band or "?", data=data, wcs=celestial_wcs(header, path), path=str(path))


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


def field_of(frame_id: str) -> int | None:
    """The SDSS field number in a frame id like ``002583-2-0136`` (else None)."""
    m = _SDSS_ID_RE.search(str(frame_id))
    return int(m.group(3)) if m else None
