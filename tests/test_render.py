"""Simulated SDSS-like frames (clumpscout.images.render) and the image rules of the workflow."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml
from astropy.io import fits
from astropy.wcs import WCS
from conftest import REPO

from clumpscout.images import cutouts as C
from clumpscout.images import geometry as G
from clumpscout.images import real_demo as D
from clumpscout.images import render as R

SIDE = 80


def universe(n=3, r90=None, edge=False):
    """A tiny universe: galaxies, their subjects rows, one clump each and a star each."""
    sid = np.arange(101, 101 + n)
    r90 = np.full(n, 80 * 0.396 / 6) if r90 is None else np.asarray(r90, float)
    side = C.cutout_side(r90)
    gal = pd.DataFrame(
        {
            "subject_id": sid,
            "ra": 180.0 + 0.1 * np.arange(n),
            "dec": 30.0,
            "petroR90_r": r90,
            "psffwhm_r": 1.3,
        }
    )
    fwhm = G.fwhm_subject(1.3, side)
    subj = pd.DataFrame(
        {
            "subject_id": sid,
            "side_native": side,
            "image_width": 400,
            "fwhm_subject": fwhm,
            "box_side": 2 * fwhm,
        }
    )
    truth = pd.DataFrame(
        {
            "subject_id": sid,
            "clump": 0,
            "x": 240.0,
            "y": 180.0,
            "flux_g": 3.0,
            "flux_r": 2.5,
            "flux_i": 2.0,
            "unusual": False,
        }
    )
    dist = pd.DataFrame(
        {
            "subject_id": sid,
            "x": 60.0,
            "y": 340.0,
            "kind": "star",
            "flux_g": 40.0,
            "flux_r": 50.0,
            "flux_i": 55.0,
        }
    )
    return gal, subj, truth, dist


def test_psf_fwhm_is_the_requested_one():
    """The double Gaussian's half maximum lies at FWHM/2 (computed here from its formula)."""
    for fwhm in (2.0, 3.3, 5.0):
        w, s = R.psf_sigmas(fwhm)

        def prof(r, w=w, s=s):
            return sum(
                wk / sk**2 * math.exp(-0.5 * (r / sk) ** 2) for wk, sk in zip(w, s, strict=True)
            )

        assert prof(fwhm / 2) == pytest.approx(0.5 * prof(0.0), rel=1e-6)
        assert w.sum() == pytest.approx(1.0)


def test_add_gaussians_conserves_flux_and_position():
    img = np.zeros((60, 60))
    w, s = R.psf_sigmas(3.0)
    R.add_gaussians(img, 30.3, 22.7, 10.0, w, s)
    yy, xx = np.mgrid[0:60, 0:60]
    assert img.sum() == pytest.approx(10.0, rel=1e-3)
    assert (img * xx).sum() / img.sum() == pytest.approx(30.3, abs=1e-3)
    assert (img * yy).sum() / img.sum() == pytest.approx(22.7, abs=1e-3)
    assert not R.add_gaussians(img, -100.0, -100.0, 1.0, w, s)


def test_fourier_shift_and_psf_match_direct_rendering():
    """Shifting + PSF in Fourier space equals the PSF drawn directly at the shifted place."""
    n = 64
    point = np.zeros((n, n))
    point[32, 32] = 1.0
    w, s = R.psf_sigmas(3.0)
    img = np.fft.irfft2(np.fft.rfft2(point) * R.psf_transfer((n, n), w, s, (2.4, -1.7)), s=(n, n))
    ref = np.zeros((n, n))
    R.add_gaussians(ref, 34.4, 30.3, 1.0, w, s)
    assert np.abs(img - ref).max() < 2e-3 * ref.max()


def test_rendered_sources_land_where_the_truth_says(tmp_path):
    """A star placed in subject px by the truth is found there after render + cutout, in g, r, i,
    with its flux; the frames' bands are offset from each other."""
    gal, subj, truth, dist = universe(1)
    cfg = {"sky_sigma": {"g": 1e-4, "r": 1e-4, "i": 1e-4}, "edge_fraction": 0.0}
    index, rep = R.render_frames(gal, subj, truth, dist, tmp_path / "frames", cfg, seed=3)
    assert rep["n_frames"] == 3 and rep["n_sources"] == 2 and rep["n_source_renders_off_frame"] == 0
    cp = index[[f"crpix1_{b}" for b in "gri"]].to_numpy()
    assert np.ptp(cp) > 0.5  # bands are offset
    with fits.open(tmp_path / "frames" / "frame-r-sim-101.fits") as h:
        assert h[0].header["FILTER"] == "r" and h[0].header["BUNIT"] == "nanomaggy"
        w = WCS(h[0].header)
        assert math.sqrt(abs(np.linalg.det(w.pixel_scale_matrix))) * 3600 == pytest.approx(0.396)
    meta, _ = C.make_cutouts(
        tmp_path / "frames", tmp_path / "frames" / "frames.csv", tmp_path / "cut"
    )
    side = int(meta["side_native"].iloc[0])
    assert side == SIDE
    col, row = G.subject_to_native(60.0, 340.0, side)
    flat, _ = C.load_bands(tmp_path / "cut", meta)
    bands = C.subject_bands(flat, 0, side)
    beta = {"g": 0.7, "r": 1.17, "i": 1.818}
    nmgy = {b: C.inverse_asinh_scale(bands[b], beta[b]) for b in "gri"}
    cen = D.band_centroids(nmgy, float(col), float(row), radius=6.0)
    for b in "gri":
        assert cen[b] == pytest.approx((float(col), float(row)), abs=0.15), b
    yy, xx = np.mgrid[0:side, 0:side]
    near = np.hypot(xx - float(col), yy - float(row)) < 10
    for b, f in zip("gri", (40.0, 50.0, 55.0), strict=True):
        assert nmgy[b][near].sum() == pytest.approx(f, rel=0.05), b


def test_sky_noise_matches_the_config(tmp_path):
    gal, subj, truth, dist = universe(1, r90=[3.0])
    cfg = {"sky_sigma": {"g": 0.02, "r": 0.05, "i": 0.08}, "edge_fraction": 0.0}
    R.render_frames(gal, subj, truth.iloc[:0], None, tmp_path, cfg, seed=1)
    for b, sig in (("g", 0.02), ("r", 0.05), ("i", 0.08)):
        img = fits.getdata(tmp_path / f"frame-{b}-sim-101.fits")
        corner = img[:12, :12]  # far from the (small) galaxy
        assert np.std(corner) == pytest.approx(sig, rel=0.3)


def test_same_seed_same_bytes_any_workers(tmp_path):
    gal, subj, truth, dist = universe(4)
    R.render_frames(gal, subj, truth, dist, tmp_path / "a", {}, seed=7, workers=1)
    R.render_frames(gal, subj, truth, dist, tmp_path / "b", {}, seed=7, workers=2)
    R.render_frames(gal, subj, truth, dist, tmp_path / "c", {}, seed=8, workers=1)
    for b in "gri":
        f = f"frame-{b}-sim-102.fits"
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
        assert (tmp_path / "a" / f).read_bytes() != (tmp_path / "c" / f).read_bytes()
    assert (tmp_path / "a" / "frames.csv").read_bytes() == (
        tmp_path / "b" / "frames.csv"
    ).read_bytes()


def test_edge_galaxies_are_flagged_by_the_cutouts(tmp_path):
    gal, subj, truth, dist = universe(3)
    index, rep = R.render_frames(
        gal, subj, truth, dist, tmp_path / "f", {"edge_fraction": 1.0}, seed=2
    )
    assert rep["n_near_edge"] == 3
    meta, crep = C.make_cutouts(tmp_path / "f", tmp_path / "f" / "frames.csv", tmp_path / "c")
    assert crep["n_edge"] == 3 and (meta["nan_fraction"] > 0.1).all()


def test_missing_columns_are_clear_errors(tmp_path):
    from clumpscout.errors import InputError

    gal, subj, truth, dist = universe(1)
    with pytest.raises(InputError, match="psffwhm_r"):
        R.render_frames(gal.drop(columns="psffwhm_r"), subj, truth, dist, tmp_path, {})


def _dry_run(tmp_path, overrides):
    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    for k, v in overrides.items():
        cfg.setdefault(k, {}).update(v)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "-s", str(REPO / "Snakefile"),
           "-d", str(tmp_path), "--configfile", str(path)]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)


@pytest.mark.slow  # a Snakemake dry run (~7 s)
def test_workflow_plans_the_image_rules(tmp_path):
    """The default DAG has the image rules; images.real_demo adds real_demo (needs ../shared)."""
    demo = {"real_demo": True, "demo": {"shared_dir": str(REPO.parent / "shared/data/sdss")}}
    has_shared = (REPO.parent / "shared").is_dir()
    r = _dry_run(tmp_path, {"images": demo} if has_shared else {})
    assert r.returncode == 0, r.stdout + r.stderr
    for rule in (
        "render_frames",
        "cutouts",
        "photometry_truth",
        "photometry_labels",
        "flux_figures",
    ):
        assert rule in r.stdout, rule
    assert ("real_demo" in r.stdout) == has_shared


def test_galaxy_from_the_simulator_columns(tmp_path):
    """galaxies.csv's flux, axis ratio, position angle (subject px, from +x towards +y) and
    centre set the rendered galaxy: an edge-on disc at position_angle 0 lies along x."""
    gal, subj, truth, dist = universe(1)
    gal = gal.assign(flux_g=60.0, flux_r=100.0, flux_i=130.0, axis_ratio=0.25, position_angle=0.0,
                     bulge_fraction=0.1, x_centre=200.0, y_centre=200.0)  # fmt: skip
    cfg = {"sky_sigma": {"g": 1e-4, "r": 1e-4, "i": 1e-4}, "edge_fraction": 0.0}
    _, rep = R.render_frames(gal, subj, truth.iloc[:0], None, tmp_path / "f", cfg, seed=1)
    assert rep["galaxy_parameters"] == "from galaxies.csv"
    for b, f in (("g", 60.0), ("r", 100.0), ("i", 130.0)):
        assert fits.getdata(tmp_path / "f" / f"frame-{b}-sim-101.fits").sum() == pytest.approx(
            f, rel=0.02
        )
    meta, _ = C.make_cutouts(tmp_path / "f", tmp_path / "f" / "frames.csv", tmp_path / "c")
    flat, _ = C.load_bands(tmp_path / "c", meta)
    img = C.inverse_asinh_scale(C.subject_bands(flat, 0, SIDE)["r"], 1.17)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    w = np.clip(img, 0, None)
    cx, cy = (w * xx).sum() / w.sum(), (w * yy).sum() / w.sum()
    assert (cx, cy) == pytest.approx(((SIDE - 1) / 2, (SIDE - 1) / 2), abs=0.2)
    vx, vy = (w * (xx - cx) ** 2).sum() / w.sum(), (w * (yy - cy) ** 2).sum() / w.sum()
    assert vx > 4 * vy  # elongated along the subject x axis


def test_clumps_are_point_sources_and_features_are_extended(tmp_path):
    """With a dark galaxy (fluxes 0 in galaxies.csv) a clump keeps ~all its flux within
    3 FWHM and is as sharp as the PSF; a faint feature is wider; a bulge marker is not drawn."""
    gal, subj, truth, _ = universe(1)
    gal = gal.assign(flux_g=0.0, flux_r=0.0, flux_i=0.0, axis_ratio=1.0, position_angle=0.0,
                     bulge_fraction=0.0, x_centre=200.0, y_centre=200.0)  # fmt: skip
    truth = truth.assign(x=100.0, y=100.0, flux_r=20.0)
    dist = pd.DataFrame({"subject_id": [101, 101], "x": [300.0, 200.0], "y": [300.0, 200.0],
                         "kind": ["faint_feature", "bulge"], "flux_g": 20.0, "flux_r": 20.0,
                         "flux_i": 20.0})  # fmt: skip
    cfg = {"sky_sigma": {"g": 1e-4, "r": 1e-4, "i": 1e-4}, "edge_fraction": 0.0}
    _, rep = R.render_frames(gal, subj, truth, dist, tmp_path / "f", cfg, seed=1)
    assert rep["n_bulge_markers_drawn_as_galaxy_bulge"] == 1
    meta, _ = C.make_cutouts(tmp_path / "f", tmp_path / "f" / "frames.csv", tmp_path / "c")
    flat, _ = C.load_bands(tmp_path / "c", meta)
    img = C.inverse_asinh_scale(C.subject_bands(flat, 0, SIDE)["r"], 1.17)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    fwhm_px = 1.3 / 0.396
    widths = {}
    for name, (x, y) in {"clump": (100.0, 100.0), "feature": (300.0, 300.0)}.items():
        c, r = G.subject_to_native(x, y, SIDE)
        near = np.hypot(xx - float(c), yy - float(r)) < 3 * fwhm_px
        assert img[near].sum() == pytest.approx(20.0, rel=0.05), name
        w = np.clip(img * near, 0, None)
        widths[name] = math.sqrt(
            (w * ((xx - float(c)) ** 2 + (yy - float(r)) ** 2)).sum() / w.sum()
        )
    assert widths["feature"] > 1.2 * widths["clump"]
    c, r = G.subject_to_native(200.0, 200.0, SIDE)
    assert abs(img[int(r), int(c)]) < 0.01  # no bulge drawn from the marker
