"""The real-SDSS demo: cutouts of galaxies found in real SDSS frames (decisions.md#cutout-side,
#psf-fwhm, #colour-composite).

Galaxies are picked from a field's own content (:func:`find_sources`, :func:`pick_galaxies`,
a Petrosian R90 measured on the frame), cut out by :func:`clumpscout.images.cutouts.make_subject`
exactly as the simulated subjects are, with a registration check on a bright star
(:func:`demo_field`) and the compact group HCG 88 (:func:`demo_group`); :func:`real_demo` is
the workflow's ``real_demo`` rule (a PSF FWHM table; its montage:
:func:`clumpscout.figures.flux.plot_demo_montage`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import ndimage

from clumpscout.config import default
from clumpscout.data.subjects import read_psfield_fwhm
from clumpscout.errors import InputError
from clumpscout.images.cutouts import DEFAULTS, make_cutouts, make_subject
from clumpscout.images.frames import (
    field_of,
    find_frames,
    galaxy_position,
    read_frame,
    require_bands,
)
from clumpscout.images.geometry import BANDS, IMAGE_SIZE, NATIVE_SCALE, fwhm_subject
from clumpscout.io import write_csv, write_json
from clumpscout.logs import timed

log = logging.getLogger(__name__)
#: galaxies cut out of the demo field (config images.demo.n_galaxies)
N_GALAXIES = default("images.demo.n_galaxies")


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


def _one_frame_set(frames_dir) -> tuple[str, dict]:
    """The frame id and the g, r, i frame files of the one frame set in ``frames_dir``."""
    sets = find_frames(frames_dir)
    if len(sets) != 1:
        raise InputError(f"expected one frame set, found {len(sets)}", path=frames_dir)
    fid, fset = next(iter(sets.items()))
    return fid, require_bands(fset, fid, frames_dir)


def demo_field(
    frames_dir: str | Path,
    psfield: str | Path,
    photofield: str | Path | None,
    out_dir: str | Path,
    cfg: Mapping,
    n_galaxies: int = N_GALAXIES,
) -> tuple[pd.DataFrame, dict]:
    """Real-data demo on one SDSS field (frame 2583/2/136): find galaxies, cut, check registration.

    The field has no photoObj rows, so galaxies are found in the r frame
    (:func:`find_sources`, :func:`pick_galaxies`) and sized with
    :func:`petrosian_r90`; the PSF comes from the psField (decisions.md#psf-fwhm), the
    photoField value is recorded beside it. A bright star is cut out as well and
    the distance between its g, r, i centroids after resampling is reported.
    """
    out = Path(out_dir)
    fid, paths = _one_frame_set(frames_dir)
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
    frames_dir: str | Path, out_dir: str | Path, cfg: Mapping, n_galaxies: int = N_GALAXIES
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
    fid, paths = _one_frame_set(frames_dir)
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
    cfg: Mapping,
    n_galaxies: int = N_GALAXIES,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The workflow's real-data demo: :func:`demo_field` + :func:`demo_group` and the PSF
    FWHM of every subject in subject px (printed, and written to ``fwhm_csv``). Returns
    (that table, the field's cutouts table, the group's), from which
    :func:`clumpscout.figures.flux.plot_demo_montage` draws the montage."""
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
    return table, field, group
