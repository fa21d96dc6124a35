"""Clump photometry on the scaled subject bands (clumpscout.images.photometry) and the flux figures."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from clumpscout import cli
from clumpscout.errors import InputError
from clumpscout.figures.flux import build
from clumpscout.images import cutouts as C
from clumpscout.images import geometry as G
from clumpscout.images import photometry as P

BETA = {"g": 0.7, "r": 1.17, "i": 1.818}


def fake_cutouts(folder, cubes: dict[int, dict[str, np.ndarray]], edge=()):
    """A cutouts folder written by hand: bands.npy (unclipped asinh), cutouts.parquet, report."""
    folder.mkdir(parents=True, exist_ok=True)
    rows, flat, offset = [], [], 0
    for sid, bands in cubes.items():
        side = next(iter(bands.values())).shape[0]
        cube = np.stack([bands[b] for b in "gri"]).astype(np.float16)
        flat.append(cube.ravel())
        rows.append(
            {"subject_id": sid, "side_native": side, "bands_offset": offset, "edge": sid in edge}
        )
        offset += cube.size
    np.save(folder / "bands.npy", np.concatenate(flat))
    pd.DataFrame(rows).to_parquet(folder / "cutouts.parquet")
    scaling = {
        "asinh_Q": 7.0,
        "asinh_alpha": 0.2,
        "asinh_m": 0.0,
        "beta": BETA,
        "image_size": 400,
        "resize_filter": "bicubic",
    }
    (folder / "cutouts_report.json").write_text(json.dumps({"bands": scaling}))
    return folder


def test_overlap_weights_by_hand():
    np.testing.assert_allclose(P.overlap_weights(0.25, 2.5, 4), [0.75, 1.0, 0.5, 0.0])
    np.testing.assert_allclose(P.overlap_weights(-3.0, 1.5, 3), [1.0, 0.5, 0.0])
    np.testing.assert_allclose(P.overlap_weights(5.0, 7.0, 3), [0.0, 0.0, 0.0])


def test_box_sum_known_answers():
    img = np.full((10, 10), 2.0)
    assert P.box_sum(img, 2, 3, 6, 5) == (2.0 * 4 * 2, 0.0)
    s, _ = P.box_sum(img, 2.5, 3.25, 4.0, 5.0)  # 1.5 x 1.75 px
    assert s == pytest.approx(2.0 * 1.5 * 1.75)
    s, _ = P.box_sum(img, -2, -2, 2, 2)  # only the 2 x 2 inside counts
    assert s == pytest.approx(8.0)
    img[4, 4] = np.nan
    s, nan_area = P.box_sum(img, 3.5, 3.5, 5.0, 5.0)  # 1.5 x 1.5 box, 1 px of it NaN
    assert nan_area == pytest.approx(1.0) and s == pytest.approx(2.0 * (2.25 - 1.0))
    ramp = np.tile(np.arange(10.0), (10, 1))  # value = column index
    s, _ = P.box_sum(ramp, 2, 0, 4, 1)  # columns 2 and 3, one row
    assert s == pytest.approx(5.0)


def asinh(v, beta):
    return math.asinh(7.0 * v / (0.2 * beta)) / 7.0


def test_local_background_and_bgsub_sum_by_hand():
    img = np.full((20, 20), 3.0)
    img[8:12, 8:12] = 5.0  # a 4 x 4 source of +2 on a background of 3
    assert P.local_background(img, 8, 8, 12, 12) == 3.0  # ring: 8 x 8 box minus the 4 x 4 one
    total, bg, nan_area = P.bgsub_sum(img, 8, 8, 12, 12)
    assert (total, bg, nan_area) == (2.0 * 16, 3.0, 0.0)
    img[0:2, :] = np.nan  # NaN outside the ring changes nothing
    assert P.bgsub_sum(img, 8, 8, 12, 12)[0] == 32.0


def test_photometry_of_a_box_on_a_flat_background(tmp_path):
    """A 400-px native grid (no resizing): background b and, inside a 20 x 10 px box, b + s
    (nanomaggies). By hand: flux_nmgy = s x 200, flux = asinh(35 flux_nmgy / beta) / 7,
    display = (asinh-shown(b + s) - asinh-shown(b)) x 200, ratios of the scaled fluxes."""
    bg = {"g": 0.05, "r": 0.08, "i": 0.1}
    src = {"g": 0.3, "r": 0.2, "i": 0.15}
    bands = {}
    for b in "gri":
        img = np.full((400, 400), bg[b])
        img[100:110, 100:120] += src[b]
        bands[b] = C.asinh_scale(img, BETA[b], clip=False)
    folder = fake_cutouts(tmp_path / "cut", {11: bands})
    labels = pd.DataFrame(
        {"subject_id": [11, 11, 12], "clump": [0, 1, 0], "x1": [100.0, -10.0, 0.0], "y1": [100.0, -10.0, 0.0],
         "x2": [120.0, 10.0, 5.0], "y2": [110.0, 10.0, 5.0], "p_fp": [0.1, 0.9, 0.5]}
    )  # fmt: skip
    t, rep = P.measure(labels, folder)
    flux = {}
    for b in "gri":
        assert t.loc[0, f"flux_nmgy_{b}"] == pytest.approx(src[b] * 200, rel=5e-3), b
        assert t.loc[0, f"bg_nmgy_{b}"] == pytest.approx(bg[b], rel=5e-3), b
        flux[b] = asinh(src[b] * 200, BETA[b])
        assert t.loc[0, f"flux_{b}"] == pytest.approx(flux[b], rel=5e-3), b
        shown = asinh(bg[b] + src[b], BETA[b]) - asinh(bg[b], BETA[b])
        assert t.loc[0, f"display_{b}"] == pytest.approx(shown * 200, rel=5e-3), b
        assert t.loc[1, f"flux_nmgy_{b}"] == pytest.approx(0.0, abs=0.05)  # background only
    assert t.loc[0, "ratio_g_r"] == pytest.approx(flux["g"] / flux["r"], rel=1e-2)
    assert t.loc[0, "ratio_r_i"] == pytest.approx(flux["r"] / flux["i"], rel=1e-2)
    assert t.loc[0, "ratio_g_i"] == pytest.approx(flux["g"] / flux["i"], rel=1e-2)
    assert t.loc[1, "frac_inside"] == pytest.approx(0.25)  # a quarter of box 1 is inside
    assert t.loc[0, "p_fp"] == 0.1  # label columns are kept
    assert not t.loc[2, "has_image"] and np.isnan(t.loc[2, "flux_g"])
    assert rep["n_without_image"] == 1 and rep["n_partly_outside_image"] == 1


def test_display_is_clipped_as_the_volunteers_saw(tmp_path):
    img = np.zeros((400, 400))
    img[0:10, 0:10] = 1e4  # saturated in the image: shown as 1
    bands = {b: C.asinh_scale(img, BETA[b], clip=False) for b in "gri"}
    folder = fake_cutouts(tmp_path / "cut", {1: bands})
    box = pd.DataFrame({"subject_id": [1], "x1": [0.0], "y1": [0.0], "x2": [10.0], "y2": [10.0]})
    t, _ = P.measure(box, folder)
    assert t.loc[0, "display_g"] == pytest.approx(100.0)  # clipped at 1 per pixel
    assert t.loc[0, "flux_nmgy_g"] == pytest.approx(1e6, rel=1e-2)  # not clipped
    assert t.loc[0, "flux_g"] > 1.0  # the scaled box flux is not clipped either


def test_subject_resizing_scales_box_coordinates(tmp_path):
    """A 40-px native grid is shown at 400 px: a box of 100 x 100 subject px covers 10 x 10
    native px; a point source of known flux inside it is recovered in nanomaggies."""
    side = 40
    f = 25.0
    yy, xx = np.mgrid[0:side, 0:side]
    sig = 1.5
    point = (
        f / (2 * math.pi * sig**2) * np.exp(-((xx - 19.5) ** 2 + (yy - 9.5) ** 2) / (2 * sig**2))
    )
    bands = {b: C.asinh_scale(point, BETA[b], clip=False) for b in "gri"}
    folder = fake_cutouts(tmp_path / "cut", {5: bands})
    x, y = G.native_to_subject(19.5, 9.5, side)  # (200, 100)
    boxes = pd.DataFrame(
        {"subject_id": [5], "x1": [x - 50], "y1": [y - 50], "x2": [x + 50], "y2": [y + 50]}
    )
    t, _ = P.measure(boxes, folder)
    inside = math.erf(5 / (sig * math.sqrt(2))) ** 2  # ±5 native px of a Gaussian of sigma 1.5
    assert t.loc[0, "flux_nmgy_r"] == pytest.approx(f * inside, rel=0.01)
    assert t.loc[0, "flux_g"] > t.loc[0, "flux_r"] > t.loc[0, "flux_i"]  # beta_g < beta_r < beta_i
    assert t.loc[0, "display_g"] > t.loc[0, "display_r"] > t.loc[0, "display_i"]


def test_photometry_from_real_cutouts_pipeline(tmp_path):
    """End to end with synthetic frames: a star of known flux, measured in a 2-FWHM box."""
    from test_cutouts import DEC0, RA0, S, catalogue, field

    src = (RA0 + 8 * S / math.cos(math.radians(DEC0)), DEC0 + 5 * S, 30.0)
    d = field(tmp_path, [src], sigma_px=1.3)
    cat = catalogue(
        tmp_path, [{"subject_id": 9, "ra": RA0, "dec": DEC0, "petroR90_r": 4.0, "psffwhm_r": 1.2}]
    )
    meta, _ = C.make_cutouts(d, cat, tmp_path / "cut")
    side = int(meta["side_native"].iloc[0])
    x, y = G.sky_to_subject(src[0], src[1], RA0, DEC0, side)
    half = 6 * 400 / side  # ±6 native px
    boxes = pd.DataFrame(
        {"subject_id": [9], "x1": [x - half], "y1": [y - half], "x2": [x + half], "y2": [y + half]}
    )
    t, _ = P.measure(boxes, tmp_path / "cut")
    inside = math.erf(6 / (1.3 * math.sqrt(2))) ** 2
    for b in "gri":
        assert t.loc[0, f"flux_nmgy_{b}"] == pytest.approx(30.0 * inside, rel=0.02), b


def test_truth_boxes_and_expert_match():
    truth = pd.DataFrame({"subject_id": [1, 2], "clump": [0, 0], "x": [100.0, 50.0], "y": [100.0, 60.0],
                          "flux_g": 1.0, "flux_r": 1.0, "flux_i": 1.0, "unusual": [False, True]})  # fmt: skip
    dist = pd.DataFrame({"subject_id": [1], "x": [300.0], "y": [20.0], "kind": ["faint_feature"],
                         "flux_g": 0.5, "flux_r": 0.3, "flux_i": 0.2})  # fmt: skip
    subj = pd.DataFrame({"subject_id": [1, 2], "box_side": [20.0, 8.0]})
    b = P.truth_boxes(truth, subj, dist)
    assert list(b["source"]) == ["clump", "clump", "faint_feature"]
    assert b.loc[0, ["x1", "y1", "x2", "y2"]].tolist() == [90.0, 90.0, 110.0, 110.0]
    assert b.loc[1, ["x1", "x2"]].tolist() == [46.0, 54.0]
    assert b.loc[2, "true_flux_g"] == 0.5
    labels = pd.DataFrame({"subject_id": [1, 1, 3], "x1": [90.0, 0.0, 0.0], "y1": [90.0, 0.0, 0.0],
                           "x2": [110.0, 10.0, 10.0], "y2": [110.0, 10.0, 10.0], "p_fp": [0.1, 0.9, 0.2]})  # fmt: skip
    experts = pd.DataFrame(
        {"subject_id": [1, 1, 2], "x": [101.0, np.nan, 5.0], "y": [99.0, np.nan, 5.0]}
    )
    m = P.expert_match(labels, experts)
    assert m.iloc[0] == "tp" and m.iloc[1] == "fp" and pd.isna(m.iloc[2])


def test_cli_photometry_with_hand_made_labels(tmp_path, capsys):
    img = np.zeros((400, 400))
    img[0:20, 0:20] = 0.01
    folder = fake_cutouts(
        tmp_path / "cut", {1: {b: C.asinh_scale(img, BETA[b], clip=False) for b in "gri"}}
    )
    lab = tmp_path / "labels.parquet"
    pd.DataFrame({"subject_id": [1], "clump": [0], "x1": [0.0], "y1": [0.0], "x2": [20.0], "y2": [20.0],
                  "x": [10.0], "y": [10.0], "p_fp": [0.3], "p_sigma": [0.01], "n_marks": [5],
                  "frac_unusual": [0.0]}).to_parquet(lab)  # fmt: skip
    out = tmp_path / "phot.parquet"
    assert (
        cli.main(["photometry", "--cutouts", str(folder), "--labels", str(lab), "--out", str(out)])
        == 0
    )
    t = pd.read_parquet(out)
    assert t.loc[0, "flux_nmgy_g"] == pytest.approx(0.01 * 400, rel=5e-3)
    assert json.loads(out.with_suffix(".json").read_text())["n_measured"] == 1
    bad = tmp_path / "bad.parquet"
    pd.DataFrame({"subject_id": [1], "x": [1.0]}).to_parquet(bad)
    assert (
        cli.main(["photometry", "--cutouts", str(folder), "--labels", str(bad), "--out", str(out)])
        == 2
    )
    assert "x1" in capsys.readouterr().err
    with pytest.raises(InputError, match="not a cutouts folder"):
        P.measure(pd.read_parquet(lab), tmp_path)


def test_flux_figures_numbers(tmp_path):
    """Hand-made photometry: true positives twice as bright -> TP/FP ratio of the means 2."""
    n = 40
    phot = pd.DataFrame(
        {
            "expert_match": ["tp"] * n + ["fp"] * n + [None] * 3,
            "p_fp": np.r_[np.full(n, 0.05), np.full(n, 0.9), [0.5] * 3],
            **{f"flux_{b}": np.r_[np.full(n, 200.0), np.full(n, 100.0), [1.0] * 3] for b in "gri"},
            "ratio_g_r": np.r_[np.full(n, 1.2), np.full(n, 1.5), [1.0] * 3],
            "ratio_r_i": 1.1,
            "ratio_g_i": 1.3,
        }
    )
    truth = pd.DataFrame({"source": ["clump"] * 5 + ["star"] * 5, "flux_r": np.r_[np.full(5, 50.0), np.full(5, 20.0)],
                          "ratio_g_r": 1.0})  # fmt: skip
    stats = build({"labels": phot, "truth": truth}, tmp_path, dpi=40)
    tf = stats["flux_true_false"]
    assert tf["n_tp"] == n and tf["n_fp"] == n
    for b in "gri":
        assert tf["flux"][b]["tp_over_fp_mean"] == pytest.approx(2.0)
    assert tf["ratio"]["ratio_g_r"]["false positive"]["median"] == pytest.approx(1.5)
    vp = stats["flux_vs_pfp"]
    assert vp["flux"]["r"]["low_over_high"] == pytest.approx(200.0 / ((100.0 * n + 3) / (n + 3)))
    assert stats["flux_truth"]["flux_r"]["star"]["median"] == pytest.approx(20.0)
    for name in ("flux_true_false", "flux_vs_pfp", "flux_truth"):
        for ext in ("png", "pdf", "json"):
            assert (tmp_path / f"{name}.{ext}").stat().st_size > 0
