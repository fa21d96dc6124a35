"""SDSS-like g, r, i frames of the simulated universe, so the image rules run without data.

One small frame per galaxy and band, ``frame-<band>-sim-<subject_id>.fits``, in
nanomaggies, written like an SDSS corrected frame (HDU 0, TAN WCS, FILTER and
BUNIT keywords), so that :mod:`clumpscout.images.cutouts` treats them exactly as real
frames:

- **WCS**: TAN at 0.396"/px with SDSS parity (east left when north is up),
  rotated by a multiple of 90° plus a jitter of up to ``rotation_jitter_deg``
  (SDSS frames are rotated ~90° to north), and each band's reference pixel
  offset by up to ``band_offset_px`` in x and y (SDSS bands of one field are
  offset by several pixels), so a cutout must resample every band through its
  own WCS.
  A fraction ``edge_fraction`` of the galaxies sits near a frame edge (their
  cutouts get NaN and the ``edge`` flag).
- **Galaxy**: exponential disc + de Vaucouleurs bulge. With the simulator's
  galaxies.csv columns (flux_g/r/i, axis_ratio, position_angle, bulge_fraction,
  x_centre, y_centre) those set the galaxy (:func:`galaxy_parameters`), so that
  the clumps' contrasts are the simulator's; otherwise they are drawn per subject
  from a generator seeded with ``(seed, subject_id)`` (so the output depends
  neither on the order nor on the number of workers): total
  ``r = 17.7 − 5 log10(R90 / 3") + N(0, 0.3)`` mag (clipped to 11-17.77, the GZ2
  range), bulge-to-total ``U(0.05, 0.4)``, disc axis ratio ``U(0.25, 1)``,
  position angle ``U(0°, 180°)``, disc colours g−r ≈ 0.45, r−i ≈ 0.25 and bulge
  colours g−r ≈ 0.8, r−i ≈ 0.4. Always: disc scale length ``h = R90 / 3.89`` (a
  pure exponential has R90 = 3.89 h), bulge ``R_e = 0.15 R90 · U(0.7, 1.3)``.
  The model is convolved with the PSF in Fourier space (one transform per
  galaxy; the bands differ by their offset, applied as a phase ramp).
- **Clumps** (``truth_clumps.csv``: x, y in subject px, flux_g/r/i in
  nanomaggies) are point sources; **distractors** (``truth_distractors.csv``)
  are point sources when their ``kind`` contains "star", are not drawn when it
  contains "bulge" (the simulator's marker of the visible bulge, which the
  galaxy model already has), and otherwise are Gaussian blobs of intrinsic sigma
  ``feature_sigma_arcsec`` (faint blue features).
  Subject px are converted to the sky with the subject's ``side_native``
  (:func:`clumpscout.images.geometry.subject_to_sky`), the inverse of what the cutout does.
- **PSF**: double Gaussian (90 % core, 10 % wing of twice the core sigma),
  r-band FWHM from the catalogue (``psffwhm_r``), other bands scaled by
  ``psf_scale`` (g is broader at SDSS).
- **Noise**: Gaussian sky noise ``sky_sigma`` (nanomaggies per pixel; defaults
  measured on frame 2583/2/136) plus photon noise of the sources
  (variance ``NMGY / gain`` per nanomaggy, typical SDSS values).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
from astropy.io import fits
from astropy.wcs import WCS
from scipy.optimize import brentq

from clumpscout import config as _config
from clumpscout.errors import InputError
from clumpscout.images.geometry import BANDS, NATIVE_SCALE, subject_to_sky
from clumpscout.io import atomic_path, write_csv, write_json
from clumpscout.logs import progress, timed

log = logging.getLogger(__name__)

DEFAULTS: dict = _config.defaults("images")["render"]  # from the config schema

#: photon-noise variance per nanomaggy: NMGY (frame 2583/2/136) / typical SDSS gain
PHOTON_VAR = {"g": 0.00447 / 3.3, "r": 0.00547 / 4.7, "i": 0.00656 / 5.1}
#: double-Gaussian PSF: core weight, wing sigma / core sigma
PSF_CORE_WEIGHT, PSF_WING_RATIO = 0.9, 2.0
#: de Vaucouleurs b_n for n = 4
B4 = 7.669


def _psf_fwhm_over_core() -> float:
    """FWHM of the double Gaussian in units of its core sigma (solved once)."""
    w, k = PSF_CORE_WEIGHT, PSF_WING_RATIO

    def prof(r):
        return w * math.exp(-0.5 * r * r) + (1 - w) / k**2 * math.exp(-0.5 * (r / k) ** 2)

    peak = prof(0.0)
    return 2.0 * brentq(lambda r: prof(r) - 0.5 * peak, 0.1, 10.0)


FWHM_OVER_CORE = _psf_fwhm_over_core()


def psf_sigmas(fwhm_px: float, extra_sigma_px: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(weights, sigmas in px) of the double-Gaussian PSF of this FWHM, widened by ``extra``."""
    s1 = fwhm_px / FWHM_OVER_CORE
    sig = np.array([s1, PSF_WING_RATIO * s1])
    sig = np.sqrt(sig**2 + extra_sigma_px**2)
    return np.array([PSF_CORE_WEIGHT, 1.0 - PSF_CORE_WEIGHT]), sig


def add_gaussians(img: np.ndarray, x: float, y: float, flux: float, weights, sigmas) -> bool:
    """Add a normalised Gaussian mixture of total ``flux`` centred at 0-based (x, y).

    Evaluated at pixel centres on a stamp of ±5 wing sigmas; returns False if the
    stamp misses the image entirely.
    """
    ny, nx = img.shape
    half = int(math.ceil(5.0 * float(np.max(sigmas))))
    x0, x1 = max(int(math.floor(x)) - half, 0), min(int(math.floor(x)) + half + 2, nx)
    y0, y1 = max(int(math.floor(y)) - half, 0), min(int(math.floor(y)) + half + 2, ny)
    if x0 >= x1 or y0 >= y1:
        return False
    dx2 = (np.arange(x0, x1) - x) ** 2
    dy2 = (np.arange(y0, y1) - y) ** 2
    stamp = np.zeros((y1 - y0, x1 - x0))
    for w, s in zip(weights, sigmas, strict=True):
        gx = np.exp(-0.5 * dx2 / s**2)
        gy = np.exp(-0.5 * dy2 / s**2)
        stamp += (w / (2.0 * math.pi * s * s)) * np.outer(gy, gx)
    img[y0:y1, x0:x1] += flux * stamp
    return True


def frame_wcs(ra, dec, crpix, theta_deg, scale=NATIVE_SCALE) -> WCS:
    """TAN WCS with SDSS parity rotated by ``theta_deg`` (CD = s · R(θ) · diag(−1, 1))."""
    t = math.radians(theta_deg)
    rot = np.array([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]])
    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.cunit = ["deg", "deg"]
    w.wcs.crval = [float(ra), float(dec)]
    w.wcs.crpix = [float(crpix[0]), float(crpix[1])]
    w.wcs.cd = scale / 3600.0 * rot @ np.diag([-1.0, 1.0])
    w.wcs.set()
    return w


#: bulge flux / total flux per band relative to r (the bulge is redder than its disc)
BULGE_COLOUR = {"g": 0.8, "r": 1.0, "i": 1.1}
#: galaxies.csv columns that, when all present, set the galaxy instead of random draws
GIVEN_COLUMNS = ("flux_g", "flux_r", "flux_i", "axis_ratio", "position_angle", "bulge_fraction")


def galaxy_parameters(r90: float, rng: np.random.Generator, given: Mapping | None = None) -> dict:
    """Disc + bulge parameters of one galaxy (module doc); fluxes in nanomaggies.

    ``given`` (a galaxies.csv row with :data:`GIVEN_COLUMNS`, as the simulator
    writes) fixes the total g, r, i fluxes, the axis ratio, the position angle
    and B/T, so that clump contrasts are the simulator's. Its ``position_angle``
    is measured in subject px from +x towards +y (clumpscout.simulation.universe); on the
    sky (east of north, x = west, y = south) that is ``90° − position_angle``.
    The bulge takes B/T of the r flux and ``BULGE_COLOUR`` × B/T of g and i
    (redder); the disc the rest.
    """
    r90 = float(r90) if np.isfinite(r90) and r90 > 0 else 3.0
    bulge_re = 0.15 * r90 * float(rng.uniform(0.7, 1.3))
    bulge_q = float(rng.uniform(0.7, 1.0))
    if given is not None and all(np.isfinite(float(given[k])) for k in GIVEN_COLUMNS):
        total = {b: float(given[f"flux_{b}"]) for b in BANDS}
        bt = float(np.clip(given["bulge_fraction"], 0.0, 1.0))
        bulge = {b: min(bt * BULGE_COLOUR[b], 1.0) * total[b] for b in BANDS}
        return {
            "mag_r": 22.5 - 2.5 * math.log10(max(total["r"], 1e-9)),
            "bulge_fraction": bt,
            "disc_h": r90 / 3.89,
            "disc_q": float(np.clip(given["axis_ratio"], 0.05, 1.0)),
            "bulge_re": bulge_re,
            "bulge_q": bulge_q,
            "pa_deg": (90.0 - float(given["position_angle"])) % 180.0,
            "disc_flux": {b: total[b] - bulge[b] for b in BANDS},
            "bulge_flux": bulge,
        }
    mag_r = float(np.clip(17.7 - 5.0 * math.log10(r90 / 3.0) + rng.normal(0, 0.3), 11.0, 17.77))
    bt = float(rng.uniform(0.05, 0.4))
    disc_col = (rng.normal(0.45, 0.08), rng.normal(0.25, 0.05))  # g-r, r-i
    bulge_col = (rng.normal(0.8, 0.05), rng.normal(0.4, 0.03))
    f_r = 10 ** ((22.5 - mag_r) / 2.5)

    def fluxes(total_r, col):
        return {
            "g": total_r * 10 ** (0.4 * -col[0]),
            "r": total_r,
            "i": total_r * 10 ** (0.4 * col[1]),
        }

    return {
        "mag_r": mag_r,
        "bulge_fraction": bt,
        "disc_h": r90 / 3.89,
        "disc_q": float(rng.uniform(0.25, 1.0)),
        "bulge_re": bulge_re,
        "bulge_q": bulge_q,
        "pa_deg": float(rng.uniform(0.0, 180.0)),
        "disc_flux": fluxes((1 - bt) * f_r, disc_col),
        "bulge_flux": fluxes(bt * f_r, bulge_col),
    }


def galaxy_profiles(
    shape, centre, cd_arcsec: np.ndarray, gal: Mapping
) -> tuple[np.ndarray, np.ndarray]:
    """Unconvolved disc and bulge of ``gal`` on a pixel grid, each normalised to sum 1.

    ``centre`` is the galaxy's 0-based (col, row); ``cd_arcsec`` the frame's CD
    matrix in arcsec per pixel (pixel offsets → east, north offsets).
    """
    ny, nx = shape
    xx = (np.arange(nx) - centre[0]).astype(np.float32)
    yy = (np.arange(ny) - centre[1]).astype(np.float32)
    cd = cd_arcsec.astype(np.float32)
    east = cd[0, 0] * xx[None, :] + cd[0, 1] * yy[:, None]
    north = cd[1, 0] * xx[None, :] + cd[1, 1] * yy[:, None]
    pa = math.radians(gal["pa_deg"])
    along = east * np.float32(math.sin(pa)) + north * np.float32(math.cos(pa))
    across = east * np.float32(math.cos(pa)) - north * np.float32(math.sin(pa))
    disc = np.exp(-np.hypot(along, across / np.float32(gal["disc_q"])) / np.float32(gal["disc_h"]))
    rb = np.hypot(along, across / np.float32(gal["bulge_q"])) / np.float32(gal["bulge_re"])
    bulge = np.exp(-np.float32(B4) * (np.sqrt(np.sqrt(rb)) - np.float32(1.0)))
    return disc / disc.sum(dtype=np.float64), bulge / bulge.sum(dtype=np.float64)


def psf_transfer(shape, weights, sigmas, shift=(0.0, 0.0)) -> np.ndarray:
    """Fourier transform (``rfft2`` layout) of the double-Gaussian PSF times a shift.

    The transform of a Gaussian of sigma s (px) is ``exp(−2π² s² k²)`` (k in
    cycles per px); the factor ``exp(−2πi k·shift)`` moves the image by ``shift``
    = (dx, dy) px (exact for well-sampled images). Both factor into x and y parts,
    so the 2-D transfer function is a sum of outer products.
    """
    ny, nx = shape
    ky = np.fft.fftfreq(ny)
    kx = np.fft.rfftfreq(nx)
    py = np.exp(-2j * math.pi * ky * shift[1])
    px = np.exp(-2j * math.pi * kx * shift[0])
    h = np.zeros((ny, kx.size), dtype=np.complex128)
    for w, s in zip(weights, sigmas, strict=True):
        c = -2.0 * math.pi**2 * s * s
        h += np.outer(w * py * np.exp(c * ky**2), px * np.exp(c * kx**2))
    return h


def _frame_header(w: WCS, band: str, sid) -> fits.Header:
    """A minimal SDSS-frame-like header: TAN WCS, FILTER, BUNIT."""
    return fits.Header(
        [
            ("CTYPE1", "RA---TAN"),
            ("CTYPE2", "DEC--TAN"),
            ("CUNIT1", "deg"),
            ("CUNIT2", "deg"),
            ("CRPIX1", float(w.wcs.crpix[0])),
            ("CRPIX2", float(w.wcs.crpix[1])),
            ("CRVAL1", float(w.wcs.crval[0])),
            ("CRVAL2", float(w.wcs.crval[1])),
            ("CD1_1", float(w.wcs.cd[0, 0])),
            ("CD1_2", float(w.wcs.cd[0, 1])),
            ("CD2_1", float(w.wcs.cd[1, 0])),
            ("CD2_2", float(w.wcs.cd[1, 1])),
            ("FILTER", band, "filter used"),
            ("BUNIT", "nanomaggy", "1 nanomaggy = 3.631e-6 Jy"),
            ("ORIGIN", "clumpscout", "simulated frame (clumpscout.images.render)"),
            ("SUBJECT", str(sid), "subject_id"),
        ]
    )


def _render_one(task: dict) -> dict:
    """Worker: the three frames of one galaxy, written to ``task['out']``; its index row.

    The bands of a frame share CRVAL, rotation and pixel scale and differ by
    their reference pixel (``band_offset_px``), as SDSS bands do to ~0.01°. The
    disc and bulge are therefore evaluated once on a model grid centred on the
    galaxy and Fourier-transformed once; each band is the inverse transform of
    (its disc and bulge fluxes × the band's PSF transfer function × the phase
    ramp of its offset), cropped to the frame. Clumps and distractors are added
    afterwards at their exact positions through each band's WCS.
    """
    cfg = task["cfg"]
    sid = task["subject_id"]
    rng = np.random.default_rng([int(task["seed"]), int(sid)])
    side = int(task["side"])
    ra, dec = task["ra"], task["dec"]
    gal = galaxy_parameters(task["r90"], rng, task.get("given"))
    jitter = float(rng.uniform(-1, 1) * cfg["rotation_jitter_deg"])
    theta = float(rng.choice([0.0, 90.0, 180.0, 270.0])) + jitter
    off = float(cfg["band_offset_px"])
    t = math.radians(jitter)
    n = int(math.ceil(side * (abs(math.cos(t)) + abs(math.sin(t))))) + 2 * (
        int(cfg["margin_px"]) + int(math.ceil(off))
    )
    near_edge = bool(rng.random() < float(cfg["edge_fraction"]))
    shift = np.zeros(2, dtype=int)  # integer px: frame centre relative to the galaxy
    if near_edge:
        direction = int(rng.integers(4))
        mag = int(round(n / 2.0 - 0.25 * side))
        shift = mag * np.array([(1, 0), (-1, 0), (0, 1), (0, -1)][direction], dtype=int)
    deltas = {b: rng.uniform(-off, off, 2) for b in BANDS}
    pad = int(np.abs(shift).max())
    m = n + 2 * pad
    c0 = (n + 1) / 2.0  # 1-based frame centre
    ref = frame_wcs(ra, dec, (c0, c0), theta)
    cd_arcsec = ref.wcs.cd * 3600.0
    centre = task.get("centre")  # the galaxy's centre in subject px, if the catalogue says
    if centre is not None and all(np.isfinite(centre)):
        g_ra, g_dec = subject_to_sky(
            centre[0], centre[1], ra, dec, side, NATIVE_SCALE, task["image_size"]
        )
        gc, gr = ref.wcs_world2pix(float(g_ra), float(g_dec), 0)
    else:
        gc, gr = c0 - 1, c0 - 1
    g_m = (float(gc) + pad, float(gr) + pad)  # galaxy on the model grid (0-based col, row)
    disc, bulge = galaxy_profiles((m, m), g_m, cd_arcsec, gal)
    disc_ft, bulge_ft = np.fft.rfft2(disc), np.fft.rfft2(bulge)
    sources = task["sources"]
    feat_sigma = float(cfg["feature_sigma_arcsec"]) / NATIVE_SCALE
    sx, sy = sources["x"], sources["y"]
    if len(sx):
        s_ra, s_dec = subject_to_sky(sx, sy, ra, dec, side, NATIVE_SCALE, task["image_size"])
    n_missed = 0
    out = Path(task["out"])
    row = {"subject_id": sid, "frame": f"sim-{sid}", "near_edge": near_edge, "theta_deg": theta}
    r0 = pad - shift[1]
    q0 = pad - shift[0]
    for b in BANDS:
        crpix = c0 + shift + deltas[b]
        w = frame_wcs(ra, dec, crpix, theta)
        fwhm_px = task["psf_fwhm"] * float(cfg["psf_scale"][b]) / NATIVE_SCALE
        weights, sigmas = psf_sigmas(fwhm_px)
        spec = (gal["disc_flux"][b] * disc_ft + gal["bulge_flux"][b] * bulge_ft) * psf_transfer(
            (m, m), weights, sigmas, deltas[b]
        )
        img = np.fft.irfft2(spec, s=(m, m))[r0 : r0 + n, q0 : q0 + n].copy()
        if len(sx):
            px, py = w.wcs_world2pix(s_ra, s_dec, 0)
            for k in range(len(sx)):
                extra = feat_sigma if sources["extended"][k] else 0.0
                ws, ss = psf_sigmas(fwhm_px, extra)
                if not add_gaussians(img, px[k], py[k], sources[f"flux_{b}"][k], ws, ss):
                    n_missed += 1
        var = float(cfg["sky_sigma"][b]) ** 2 + PHOTON_VAR[b] * np.clip(img, 0.0, None)
        img = (img + rng.standard_normal(img.shape) * np.sqrt(var)).astype(np.float32)
        with atomic_path(out / f"frame-{b}-sim-{sid}.fits") as tmp:
            fits.PrimaryHDU(img, header=_frame_header(w, b, sid)).writeto(
                tmp, overwrite=True, output_verify="ignore"
            )
        row[f"crpix1_{b}"], row[f"crpix2_{b}"] = float(crpix[0]), float(crpix[1])
    row.update(
        {
            "frame_side": n,
            "mag_r": gal["mag_r"],
            "bulge_fraction": gal["bulge_fraction"],
            "disc_q": gal["disc_q"],
            "pa_deg": gal["pa_deg"],
            "n_sources": len(sx),
            "n_sources_off_frame": n_missed,
        }
    )
    return row


def _sources_by_subject(truth: pd.DataFrame, distractors: pd.DataFrame | None) -> dict:
    """Per subject: x, y, fluxes and an ``extended`` flag (faint features) of its sources."""
    parts = [truth.assign(extended=False)]  # clumps are point sources
    if distractors is not None and len(distractors):
        kind = distractors["kind"].astype(str).str.lower()
        keep = ~kind.str.contains("bulge").to_numpy()  # drawn as the galaxy's own bulge
        parts.append(distractors[keep].assign(extended=~kind[keep].str.contains("star").to_numpy()))
    allsrc = pd.concat(
        [p[["subject_id", "x", "y", "flux_g", "flux_r", "flux_i", "extended"]] for p in parts],
        ignore_index=True,
    )
    out = {}
    for sid, grp in allsrc.groupby("subject_id", sort=False):
        out[sid] = {
            c: grp[c].to_numpy() for c in ("x", "y", "flux_g", "flux_r", "flux_i", "extended")
        }
    return out


def _require(df: pd.DataFrame, cols, what: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InputError(f"{what} lacks column(s) {', '.join(missing)}", path=what)


def _galaxy_table(galaxies, subjects, truth, distractors) -> pd.DataFrame:
    """The galaxies with a subjects row, with the subjects stage's side and PSF."""
    _require(galaxies, ["subject_id", "ra", "dec", "petroR90_r", "psffwhm_r"], "galaxies")
    _require(subjects, ["subject_id", "side_native"], "subjects")
    _require(truth, ["subject_id", "x", "y", "flux_g", "flux_r", "flux_i"], "truth clumps")
    if distractors is not None:
        _require(
            distractors,
            ["subject_id", "x", "y", "kind", "flux_g", "flux_r", "flux_i"],
            "distractors",
        )
    extra = [c for c in ("image_width", "psf_fwhm_arcsec", "psf_source") if c in subjects.columns]
    gal = galaxies.drop(columns=[c for c in ("side_native", *extra) if c in galaxies.columns])
    gal = gal.merge(
        subjects[["subject_id", "side_native", *extra]],
        on="subject_id",
        how="inner",
        validate="one_to_one",
    )
    if "psf_fwhm_arcsec" in gal.columns:  # the PSF the subjects stage used (decisions.md#psf-fwhm)
        gal["psffwhm_r"] = gal["psf_fwhm_arcsec"].fillna(gal["psffwhm_r"])
    return gal


def _render_tasks(gal, truth, distractors, out: Path, c: dict, seed: int):
    """One task per galaxy for :func:`_render_one`; also the sources by subject, whether the
    galaxies' parameters are given and how many bulge markers the distractors hold."""
    sources = _sources_by_subject(truth, distractors)
    has_given = all(c in gal.columns for c in GIVEN_COLUMNS)
    has_centre = {"x_centre", "y_centre"} <= set(gal.columns)
    n_bulge_markers = 0
    if distractors is not None and len(distractors):
        n_bulge_markers = int(
            distractors["kind"].astype(str).str.lower().str.contains("bulge").sum()
        )
    empty = {k: np.array([]) for k in ("x", "y", "flux_g", "flux_r", "flux_i", "extended")}
    out.mkdir(parents=True, exist_ok=True)
    tasks = [
        {
            "subject_id": r.subject_id,
            "ra": float(r.ra),
            "dec": float(r.dec),
            "r90": float(r.petroR90_r),
            "given": {k: getattr(r, k) for k in GIVEN_COLUMNS} if has_given else None,
            "centre": (float(r.x_centre), float(r.y_centre)) if has_centre else None,
            "psf_fwhm": float(r.psffwhm_r),
            "side": int(r.side_native),
            "image_size": int(getattr(r, "image_width", 400)),
            "sources": sources.get(r.subject_id, empty),
            "seed": int(seed),
            "out": str(out),
            "cfg": c,
        }
        for r in gal.itertuples(index=False)
    ]
    return tasks, sources, has_given, n_bulge_markers


def _run_tasks(tasks: list[dict], workers: int) -> list[dict]:
    """Render every task (``workers`` processes; the result does not depend on it)."""
    with timed(f"rendering g, r, i frames of {len(tasks)} galaxies ({workers} worker(s))", log):
        if workers > 1 and len(tasks) > 1:
            with ProcessPoolExecutor(max_workers=int(workers)) as ex:
                chunk = max(1, len(tasks) // (8 * int(workers)))
                rows = list(
                    progress(ex.map(_render_one, tasks, chunksize=chunk), "render", len(tasks))
                )
        else:
            rows = [_render_one(t) for t in progress(tasks, "render")]
    return rows


def render_frames(
    galaxies: pd.DataFrame,
    subjects: pd.DataFrame,
    truth: pd.DataFrame,
    distractors: pd.DataFrame | None,
    out_dir: str | Path,
    cfg: Mapping | None = None,
    seed: int = 0,
    workers: int = 1,
    report_path: str | Path | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Render the g, r, i frames of every subject; return (frames index, report).

    Writes the frames, ``frames.csv`` (the index) and ``render_report.json`` to
    ``out_dir``; with ``report_path`` the report goes there instead and the index
    beside it as ``frames.csv`` too (the workflow's frames folder is temporary).

    ``galaxies``: subject_id, ra, dec, petroR90_r, psffwhm_r (galaxies.csv);
    ``subjects``: subject_id, side_native, image_width (subjects.parquet);
    ``truth`` / ``distractors``: truth_clumps.csv / truth_distractors.csv.
    The index (one row per subject) is also a catalogue for
    :func:`clumpscout.images.cutouts.make_cutouts` (it has ``frame`` and ``side_native``).
    """
    c = {**DEFAULTS, **dict(cfg or {})}
    gal = _galaxy_table(galaxies, subjects, truth, distractors)
    n_no_subject = len(galaxies) - len(gal)
    out = Path(out_dir)
    tasks, sources, has_given, n_bulge_markers = _render_tasks(
        gal, truth, distractors, out, c, seed
    )
    rows = _run_tasks(tasks, workers)
    keep = ["subject_id", "ra", "dec", "petroR90_r", "psffwhm_r", "side_native"]
    keep += ["psf_source"] if "psf_source" in gal.columns else []
    index = gal[keep].merge(pd.DataFrame(rows), on="subject_id", how="left", validate="one_to_one")
    n_src = sum(len(s["x"]) for sid, s in sources.items() if sid in set(gal["subject_id"]))
    report = {
        "n_galaxies": int(len(index)),
        "n_galaxies_without_subject_row": int(n_no_subject),
        "n_frames": int(3 * len(index)),
        "n_near_edge": int(index["near_edge"].sum()) if len(index) else 0,
        "n_sources": int(n_src),
        "n_source_renders_off_frame": int(index["n_sources_off_frame"].sum()) if len(index) else 0,
        "n_sources_of_unknown_subjects": int(
            sum(len(s["x"]) for sid, s in sources.items() if sid not in set(gal["subject_id"]))
        ),
        "n_bulge_markers_drawn_as_galaxy_bulge": n_bulge_markers,
        "galaxy_parameters": "from galaxies.csv" if has_given else "drawn (module doc)",
        "seed": int(seed),
        "config": c,
    }
    if n_no_subject:
        log.warning("%d galaxies have no subjects row and were not rendered", n_no_subject)
    if report["n_sources_of_unknown_subjects"]:
        log.warning(
            "%d truth sources belong to no rendered subject",
            report["n_sources_of_unknown_subjects"],
        )
    write_csv(index, out / "frames.csv")
    if report_path is not None:
        write_json(report, report_path)
        write_csv(index, Path(report_path).with_name("frames.csv"))
    else:
        write_json(report, out / "render_report.json")
    return index, report
