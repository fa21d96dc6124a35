"""Subject images from frames (paper §2.2, decisions.md#cutout-side, #psf-fwhm, #box-geometry, #colour-composite): geometry, asinh, registration, edges.

Frames are synthesised in code: TAN WCS at 0.396"/px with SDSS parity, rotated, each band
offset by several pixels, Gaussian point sources placed at known sky positions.
"""

from __future__ import annotations

import bz2
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from astropy.io import fits
from astropy.wcs import WCS
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from clumpscout import cli
from clumpscout.errors import InputError
from clumpscout.images import cutouts as C
from clumpscout.images import frames as F
from clumpscout.images import geometry as G
from clumpscout.images import real_demo as D

S = 0.396 / 3600.0  # deg per native pixel


def frame_wcs(ra, dec, crpix, theta_deg):
    """SDSS-parity TAN WCS rotated by theta (written independently of clumpscout.images.render)."""
    t = math.radians(theta_deg)
    w = WCS(naxis=2)
    w.wcs.ctype = ["RA---TAN", "DEC--TAN"]
    w.wcs.crval = [ra, dec]
    w.wcs.crpix = list(crpix)
    w.wcs.cd = S * np.array([[-math.cos(t), -math.sin(t)], [-math.sin(t), math.cos(t)]])
    w.wcs.set()
    return w


def write_frame(path, band, wcs, shape, sources, sigma_px=1.3, sky_noise=0.0, seed=0, nan_box=None):
    """A frame with Gaussian sources [(ra, dec, flux)] (nanomaggies) at their WCS positions."""
    ny, nx = shape
    yy, xx = np.mgrid[0:ny, 0:nx]
    img = np.zeros(shape)
    for ra, dec, flux in sources:
        c, r = wcs.wcs_world2pix(ra, dec, 0)
        img += (
            flux
            / (2 * math.pi * sigma_px**2)
            * np.exp(-((xx - c) ** 2 + (yy - r) ** 2) / (2 * sigma_px**2))
        )
    if sky_noise:
        img += np.random.default_rng(seed).normal(0, sky_noise, shape)
    if nan_box is not None:
        img[nan_box] = np.nan
    hdr = wcs.to_header()
    hdr["FILTER"] = band
    data = img.astype(np.float32)
    path = Path(path)
    if path.suffix == ".bz2":
        hdul = fits.HDUList([fits.PrimaryHDU(data, hdr)])
        raw = path.with_suffix("")
        hdul.writeto(raw, overwrite=True)
        path.write_bytes(bz2.compress(raw.read_bytes()))
        raw.unlink()
    else:
        fits.PrimaryHDU(data, hdr).writeto(path, overwrite=True)


RA0, DEC0 = 150.0, 2.0
OFFSETS = {"g": (11.3, -4.6), "r": (0.0, 0.0), "i": (-3.2, 7.7)}  # band crpix offsets (px)
THETA = {"g": 97.0, "r": 97.02, "i": 96.98}


def field(
    tmp_path, sources, shape=(160, 160), fid="001000-1-0100", bands="gri", suffix=".fits", **kw
):
    d = tmp_path / "frames"
    d.mkdir(exist_ok=True)
    for b in bands:
        crpix = (shape[1] / 2 + OFFSETS[b][0], shape[0] / 2 + OFFSETS[b][1])
        write_frame(
            d / f"frame-{b}-{fid}{suffix}",
            b,
            frame_wcs(RA0, DEC0, crpix, THETA[b]),
            shape,
            sources,
            **kw,
        )
    return d


def catalogue(tmp_path, rows, name="cat.csv"):
    p = tmp_path / name
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


# ------------------------------------------------------------------ known answers


def test_asinh_known_answers():
    """§2.2 / decisions.md#colour-composite: with Q = 7, α = 0.2, m = 0, I/β = 1 gives asinh(35)/7."""
    beta = {"g": 0.7, "r": 1.17, "i": 1.818}
    for b, bt in beta.items():
        got = C.asinh_scale(np.array([bt]), bt)[0]
        assert got == pytest.approx(math.asinh(35.0) / 7.0, rel=1e-6), b
    assert C.asinh_scale(np.array([0.0]), 1.17)[0] == 0.0
    assert C.asinh_scale(np.array([-0.5]), 1.17)[0] == 0.0  # clipped below
    assert C.asinh_scale(np.array([1e4]), 1.17)[0] == 1.0  # clipped above
    # unclipped: asinh(7 * (2/0.7) / 0.2) / 7 = asinh(100) / 7 > 0.7
    assert C.asinh_scale(np.array([2.0]), 0.7, clip=False)[0] == pytest.approx(
        math.asinh(100) / 7, rel=1e-6
    )
    assert C.asinh_scale(np.array([1e4]), 1.17, clip=False)[0] > 1.0
    # m shifts the zero point: I/β = m gives 0
    assert C.asinh_scale(np.array([0.5 * 1.17]), 1.17, m=0.5)[0] == 0.0
    # inverse of the unclipped stretch
    x = np.array([-0.3, 0.0, 0.02, 1.0, 50.0])
    back = C.inverse_asinh_scale(C.asinh_scale(x, 1.818, clip=False), 1.818)
    np.testing.assert_allclose(back, x, rtol=1e-5, atol=1e-7)
    assert np.isnan(C.asinh_scale(np.array([np.nan]), 0.7)[0])


def test_cutout_side_and_fwhm_conversions():
    """decisions.md#cutout-side, #psf-fwhm by hand: side = max(ceil(6 R90 / 0.396), 40); FWHM_subject = F/0.396 · 400/side."""
    assert C.cutout_side(10.0) == 152  # 60 / 0.396 = 151.52
    assert C.cutout_side(2.0) == 40  # 30.3 -> minimum
    assert C.cutout_side(4.356) == 66  # exactly 66.0 up to rounding noise
    assert C.subject_scale(152, 0.396, 400) == pytest.approx(152 * 0.396 / 400)
    assert G.fwhm_native(1.188) == pytest.approx(3.0)
    assert G.fwhm_subject(1.2, 152) == pytest.approx(1.2 / 0.396 * 400 / 152)
    assert G.fwhm_subject(1.188, 40) == pytest.approx(30.0)


def test_cutout_grid_is_north_up_east_left():
    w = G.cutout_wcs(RA0, DEC0, 101)
    c, r = w.wcs_world2pix(RA0, DEC0, 0)
    assert (float(c), float(r)) == pytest.approx((50.0, 50.0))
    # north is up (smaller row), east is left (smaller column)
    _, r_n = w.wcs_world2pix(RA0, DEC0 + 10 * S, 0)
    c_e, _ = w.wcs_world2pix(RA0 + 10 * S / math.cos(math.radians(DEC0)), DEC0, 0)
    assert float(r_n) == pytest.approx(40.0, abs=1e-3)
    assert float(c_e) == pytest.approx(40.0, abs=1e-3)


@settings(max_examples=60, deadline=None)
@given(
    ra=st.floats(0.0, 359.9),
    dec=st.floats(-85.0, 85.0),
    side=st.integers(40, 1500),
    x=st.floats(-50.0, 450.0),
    y=st.floats(-50.0, 450.0),
)
def test_sky_subject_sky_round_trip(ra, dec, side, x, y):
    """subject px -> sky -> subject px within 0.5 px (in fact ~1e-6), any position and size."""
    a, d = G.subject_to_sky(x, y, ra, dec, side)
    x2, y2 = G.sky_to_subject(a, d, ra, dec, side)
    assert abs(float(x2) - x) < 0.5 and abs(float(y2) - y) < 0.5
    assert abs(float(x2) - x) < 1e-5 and abs(float(y2) - y) < 1e-5


def test_subject_centre_is_the_galaxy():
    x, y = G.sky_to_subject(RA0, DEC0, RA0, DEC0, 77)
    assert (float(x), float(y)) == pytest.approx((200.0, 200.0))
    # one native pixel north of centre is 400/77 subject px up
    _, y = G.sky_to_subject(RA0, DEC0 + S, RA0, DEC0, 77)
    assert float(y) == pytest.approx(200.0 - 400 / 77, abs=1e-4)


# ------------------------------------------------------------------- registration


def test_point_source_registered_in_all_bands(tmp_path):
    """A source at a known RA/Dec lands at the expected subject pixel in g, r and i,
    although the bands' frames are offset by ~12 px and rotated by 97°."""
    dra, ddec = 9 * S / math.cos(math.radians(DEC0)), -14 * S  # 9 px east, 14 px south
    src = (RA0 + dra, DEC0 + ddec, 50.0)
    d = field(tmp_path, [src])
    cat = catalogue(
        tmp_path, [{"subject_id": 7, "ra": RA0, "dec": DEC0, "petroR90_r": 5.0, "psffwhm_r": 1.2}]
    )
    meta, rep = C.make_cutouts(d, cat, tmp_path / "out")
    side = int(meta["side_native"].iloc[0])
    assert side == math.ceil(6 * 5.0 / 0.396)
    # the raw frames put the source at different pixels per band ...
    raw = np.array(
        [[meta[f"frame_col_{b}"].iloc[0], meta[f"frame_row_{b}"].iloc[0]] for b in "gri"]
    )
    assert np.ptp(raw[:, 0]) > 5 or np.ptp(raw[:, 1]) > 5
    # ... after resampling it sits where the sky says, in every band
    x_exp, y_exp = G.sky_to_subject(src[0], src[1], RA0, DEC0, side)
    col_exp, row_exp = G.subject_to_native(x_exp, y_exp, side)
    # by hand: 9 px east -> left of centre, 14 px south -> below centre
    assert float(col_exp) == pytest.approx((side - 1) / 2 - 9, abs=0.01)
    assert float(row_exp) == pytest.approx((side - 1) / 2 + 14, abs=0.01)
    flat, _ = C.load_bands(tmp_path / "out", meta)
    bands = C.subject_bands(flat, 0, side)
    nmgy = {b: C.inverse_asinh_scale(bands[b], {"g": 0.7, "r": 1.17, "i": 1.818}[b]) for b in "gri"}
    cen = D.band_centroids(nmgy, float(col_exp), float(row_exp), radius=5.0)
    for b in "gri":
        assert cen[b][0] == pytest.approx(float(col_exp), abs=0.1), b
        assert cen[b][1] == pytest.approx(float(row_exp), abs=0.1), b
    assert D.registration_offset(cen) < 0.1
    # in the 400 x 400 PNG, the brightest pixel of each channel is at the expected subject px
    rgb = np.asarray(Image.open(tmp_path / "out" / meta["png"].iloc[0]))
    assert rgb.shape == (400, 400, 3) and rgb.dtype == np.uint8
    for k in range(3):
        yy, xx = np.unravel_index(np.argmax(rgb[..., k]), rgb.shape[:2])
        assert (
            abs(xx + 0.5 - float(x_exp)) < 400 / side and abs(yy + 0.5 - float(y_exp)) < 400 / side
        )


def test_flux_is_conserved_through_resampling(tmp_path):
    src = (RA0, DEC0, 40.0)
    d = field(tmp_path, [src])
    cat = catalogue(
        tmp_path, [{"subject_id": 1, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2}]
    )
    meta, _ = C.make_cutouts(d, cat, tmp_path / "out")
    side = int(meta["side_native"].iloc[0])
    flat, _ = C.load_bands(tmp_path / "out", meta)
    r = C.inverse_asinh_scale(C.subject_bands(flat, 0, side)["r"], 1.17)
    assert r.sum() == pytest.approx(40.0, rel=0.01)


def test_edge_galaxy_is_nan_filled_and_flagged(tmp_path):
    shape = (160, 160)
    d = field(tmp_path, [], shape=shape)
    w = frame_wcs(RA0, DEC0, (shape[1] / 2, shape[0] / 2), THETA["r"])
    ra_e, dec_e = w.wcs_pix2world(8.0, 80.0, 0)  # 8 px from the frame's left edge
    rows = [
        {"subject_id": 1, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2},
        {
            "subject_id": 2,
            "ra": float(ra_e),
            "dec": float(dec_e),
            "petroR90_r": 4.0,
            "psffwhm_r": 1.2,
        },
    ]
    meta, rep = C.make_cutouts(d, catalogue(tmp_path, rows), tmp_path / "out")
    m = meta.set_index("subject_id")
    assert not m.loc[1, "edge"] and m.loc[1, "nan_fraction"] == 0.0
    assert m.loc[2, "edge"] and 0.2 < m.loc[2, "nan_fraction"] < 0.6
    assert rep["n_edge"] == 1
    flat, _ = C.load_bands(tmp_path / "out", meta)
    b = C.subject_bands(flat, int(m.loc[2, "bands_offset"]), int(m.loc[2, "side_native"]))
    assert np.isnan(b["r"]).any() and np.isfinite(b["r"]).any()
    rgb = np.asarray(Image.open(tmp_path / "out" / m.loc[2, "png"]))
    assert (rgb.sum(axis=2) == 0).mean() > 0.15  # the off-frame part is black


def test_nan_pixels_inside_a_frame_are_flagged(tmp_path):
    nan_box = (slice(70, 90), slice(70, 90))
    d = field(tmp_path, [], nan_box=nan_box)
    cat = catalogue(
        tmp_path, [{"subject_id": 1, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2}]
    )
    meta, _ = C.make_cutouts(d, cat, tmp_path / "out")
    assert bool(meta["edge"].iloc[0]) and meta["nan_fraction"].iloc[0] > 0


def test_missing_band_is_a_clear_error(tmp_path):
    d = field(tmp_path, [], bands="gr")
    cat = catalogue(
        tmp_path, [{"subject_id": 1, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2}]
    )
    with pytest.raises(InputError, match="missing i-band frame"):
        C.make_cutouts(d, cat, tmp_path / "out")
    rc = cli.main(
        ["cutouts", "--frames", str(d), "--catalogue", str(cat), "--out", str(tmp_path / "o2")]
    )
    assert rc == 2


def test_galaxy_outside_every_frame_is_an_error(tmp_path):
    d = field(tmp_path, [])
    cat = catalogue(
        tmp_path,
        [{"subject_id": 1, "ra": RA0 + 1.0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2}],
    )
    with pytest.raises(InputError, match="lies in no frame"):
        C.make_cutouts(d, cat, tmp_path / "out")


def test_channel_order_is_configurable(tmp_path):
    """Default i -> R, r -> G, g -> B (decisions.md#colour-composite); a g-only source is blue, or red with 'gri'."""
    d = tmp_path / "frames"
    d.mkdir()
    src = [(RA0, DEC0, 300.0)]
    for b in "gri":
        crpix = (80 + OFFSETS[b][0], 80 + OFFSETS[b][1])
        write_frame(
            d / f"frame-{b}-x.fits",
            b,
            frame_wcs(RA0, DEC0, crpix, THETA[b]),
            (160, 160),
            src if b == "g" else [],
        )
    cat = catalogue(
        tmp_path, [{"subject_id": 1, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2}]
    )
    C.make_cutouts(d, cat, tmp_path / "a")
    C.make_cutouts(d, cat, tmp_path / "b", {"channels": ["g", "r", "i"]})
    a = np.asarray(Image.open(tmp_path / "a" / "png" / "1.png")).astype(int)
    b = np.asarray(Image.open(tmp_path / "b" / "png" / "1.png")).astype(int)
    assert a[200, 200, 2] == 255 and a[200, 200, 0] == 0
    assert b[200, 200, 0] == 255 and b[200, 200, 2] == 0


def test_cli_contract_flat_file_names_bz2_and_psfield(tmp_path, capsys):
    """`clumpscout cutouts --frames DIR --catalogue CSV --psfield FILE --out DIR` with SDSS
    flat-file column names, .fits.bz2 frames and the PSF from a psField (HDU 6)."""
    d = field(tmp_path, [(RA0, DEC0, 20.0)], suffix=".fits.bz2")
    cat = catalogue(
        tmp_path, [{"SUBJECT_ID": 5, "RA": RA0, "DEC": DEC0, "PETROTH90": "[9, 8, 5.0, 7, 6]"}]
    )
    psf = tmp_path / "psField-001000-1-0100.fit"
    hdus = [fits.PrimaryHDU()] + [
        fits.BinTableHDU.from_columns([fits.Column("x", "E", array=[0.0])])
    ] * 5
    width = fits.Column("psf_width", "5E", array=np.array([[1.5, 1.4, 1.188, 1.1, 1.2]]))
    hdus.append(fits.BinTableHDU.from_columns([fits.Column("field", "J", array=[100]), width]))
    fits.HDUList(hdus).writeto(psf)
    out = tmp_path / "out"
    rc = cli.main(
        [
            "cutouts",
            "--frames",
            str(d),
            "--catalogue",
            str(cat),
            "--psfield",
            str(psf),
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    meta = pd.read_parquet(out / "cutouts.parquet")
    assert meta["psf_source"].iloc[0] == "psfield"
    assert meta["psf_fwhm_arcsec"].iloc[0] == pytest.approx(1.188)
    assert meta["side_native"].iloc[0] == 76  # ceil(6 * 5 / 0.396) = ceil(75.76)
    assert meta["fwhm_subject"].iloc[0] == pytest.approx(3.0 * 400 / 76)
    with Image.open(out / "png" / "5.png") as im:
        assert im.size == (400, 400) and im.mode == "RGB"
    assert (out / "cutouts.csv").exists() and (out / "bands.npy").exists()
    assert "subject px" in capsys.readouterr().out


def test_no_psf_is_a_clear_error(tmp_path, capsys):
    d = field(tmp_path, [])
    cat = catalogue(tmp_path, [{"subject_id": 1, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0}])
    rc = cli.main(
        ["cutouts", "--frames", str(d), "--catalogue", str(cat), "--out", str(tmp_path / "o")]
    )
    assert rc == 2
    assert "no PSF" in capsys.readouterr().err


def test_same_input_same_bytes_whatever_the_workers(tmp_path):
    d = field(tmp_path, [(RA0, DEC0, 20.0)], sky_noise=0.03)
    rows = [
        {
            "subject_id": k,
            "ra": RA0 + 1e-4 * k,
            "dec": DEC0,
            "petroR90_r": 3.0 + k,
            "psffwhm_r": 1.2,
        }
        for k in range(4)
    ]
    cat = catalogue(tmp_path, rows)
    C.make_cutouts(d, cat, tmp_path / "a", workers=1)
    C.make_cutouts(d, cat, tmp_path / "b", workers=2)
    for f in ["bands.npy", "cutouts.parquet", *(f"png/{k}.png" for k in range(4))]:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_band_fits_holds_the_grid_wcs(tmp_path):
    d = field(tmp_path, [(RA0, DEC0, 20.0)])
    cat = catalogue(
        tmp_path, [{"subject_id": 3, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2}]
    )
    meta, _ = C.make_cutouts(d, cat, tmp_path / "out", {"band_fits": True})
    with fits.open(tmp_path / "out" / "bands" / "3.fits") as h:
        side = int(meta["side_native"].iloc[0])
        assert h[0].data.shape == (3, side, side)
        w = WCS(h[0].header, naxis=2)
        c, r = w.wcs_world2pix(RA0, DEC0, 0)
        assert (float(c), float(r)) == pytest.approx(((side - 1) / 2, (side - 1) / 2))


def test_resize_keeps_nan_footprint():
    band = np.ones((40, 40), dtype=np.float32)
    band[:, :10] = np.nan
    out = C.resize_band(band, 400)
    assert np.isnan(out[:, :95]).all() and np.isfinite(out[:, 110:]).all()


# ------------------------------------------------------------------ real frames


def test_real_frame_registration_no_colour_fringes(shared):
    """Frame 2583/2/136: the edge-on galaxy at r-frame pixel (1305, 97) and the bright star
    38 px from it are ~11 px apart between g and r in the frames; in the cutout of the
    galaxy the star's g, r, i centroids agree to < 0.5 px (no colour fringes)."""
    d = shared / "data/sdss/frames_2583_2_136"
    paths = F.require_bands(F.find_frames(d)["002583-2-0136"], "002583-2-0136", d)
    frames = {b: F.read_frame(paths[b], b) for b in "gri"}
    psf = C.read_psfield_fwhm(d / "psField-002583-2-0136.fits", "r")
    assert psf == pytest.approx(C.read_psfield_fwhm(d / "photoField-002583-2.fits", "r", field=136))
    r = frames["r"]
    r0, c0 = 0, 1150  # a 300 x 300 corner around the galaxy: detection there is quick
    sources = D.find_sources(r.data[r0 : r0 + 300, c0 : c0 + 300], psf / 0.396, saturation=200.0)
    sources["x"] += c0
    sources["y"] += r0
    gd = np.hypot(sources["x"] - 1305.3, sources["y"] - 97.4)
    gal = sources[gd == gd.min()].iloc[0]
    assert gd.min() < 2 and gal["extended"]
    point_like = sources["peak"] / sources["flux"] > 0.08  # a PSF puts ~15 % in its peak pixel
    stars = sources[point_like & ~sources["saturated"] & sources["peak"].between(10, 150)]
    dist = np.hypot(stars["x"] - gal["x"], stars["y"] - gal["y"])
    star = stars[dist == dist.min()].iloc[0]
    assert dist.min() < 60
    side = int(max(C.cutout_side(5.0), 2 * dist.min() + 20))
    ra, dec = r.wcs.wcs_pix2world(gal["x"], gal["y"], 0)
    res = C.make_subject(frames, float(ra), float(dec), side, {})
    s_ra, s_dec = r.wcs.wcs_pix2world(star["x"], star["y"], 0)
    x, y = G.subject_to_native(*G.sky_to_subject(s_ra, s_dec, float(ra), float(dec), side), side)
    raw = {b: F.galaxy_position(frames[b], float(s_ra), float(s_dec)) for b in "gri"}
    assert D.registration_offset(raw) > 5.0  # a plain stack of the frames would fringe
    cen = D.band_centroids(res["nmgy"], float(x), float(y), radius=4.0)
    assert D.registration_offset(cen) < 0.5
    for b in "gri":
        assert abs(cen[b][0] - float(x)) < 0.5 and abs(cen[b][1] - float(y)) < 0.5
