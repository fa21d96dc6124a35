"""Geometry of the subject images (decisions.md#cutout-side, #psf-fwhm, #box-geometry).

Native SDSS pixels (0.396"), the north-up TAN grid of a cutout (:func:`cutout_wcs`) and the
400 × 400 subject image. Subject pixel coordinates (x right, y down, origin at the top-left
*corner* of the image) map to native grid pixel indices as ``col = x · side / 400 − 0.5`` and
``row = y · side / 400 − 0.5`` (:func:`subject_to_native`, :func:`subject_to_sky`,
:func:`sky_to_subject`), the same corner-to-corner convention Pillow's resize uses.
"""

from __future__ import annotations

import numpy as np
from astropy.wcs import WCS

from clumpscout.data.subjects import psf_in_pixels

BANDS: tuple[str, ...] = ("g", "r", "i")
NATIVE_SCALE = 0.396  # arcsec per native SDSS pixel
IMAGE_SIZE = 400  # subject image side (px)


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
