"""Cutout side, PSF FWHM and box side per subject (clumpscout.data.subjects; decisions.md#cutout-side, #psf-fwhm, #box-geometry; columns: docs/tables.md#subject-geometry).

Known answers are computed by hand from decisions.md#cutout-side, #psf-fwhm:
side = max(ceil(6 R90 / 0.396"), 40); FWHM_subject = FWHM" / 0.396 * 400 / side; box = 2 FWHM.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from clumpscout.cli import main as cli_main
from clumpscout.data.subjects import (
    SUBJECT_COLUMNS,
    build_subjects,
    cutout_side,
    per_band_value,
    psf_in_pixels,
    read_psfield_fwhm,
)
from clumpscout.errors import InputError

SDSS = "data/sdss"


def test_cutout_side_by_hand():
    # 6 x 5" / 0.396 = 75.76 -> 76; 6 x 1" / 0.396 = 15.2 -> 16 < 40 -> 40
    assert cutout_side(5.0).tolist() == 76
    assert cutout_side(1.0).tolist() == 40
    assert cutout_side(10.0).tolist() == 152  # 151.5 -> 152
    # 6 x 4.356 / 0.396 = 66 exactly (66.00000000000001 in floating point): not 67
    assert cutout_side(4.356).tolist() == 66
    # SDSS -9999 "not measured": the minimum side (paper's footnote)
    assert cutout_side(-9999.0).tolist() == 40
    assert cutout_side([5.0, 1.0], min_side=10).tolist() == [76, 16]


def test_psf_in_pixels_by_hand():
    fwhm_native, fwhm_subject = psf_in_pixels(1.2, 76, 0.396, 400)
    assert fwhm_native == pytest.approx(1.2 / 0.396)  # 3.0303 native px
    assert fwhm_subject == pytest.approx(1.2 / 0.396 * 400 / 76)  # 15.949 subject px


def test_per_band_value_text_and_arrays():
    assert per_band_value(["[1, 2, 3, 4, 5]", "1.5", "9 8 7.5 6 5"], "PSF_FWHM", "x").tolist() == [
        3.0,
        1.5,
        7.5,
    ]
    assert per_band_value(np.arange(10.0).reshape(2, 5), "c", "x").tolist() == [2.0, 7.0]
    with pytest.raises(InputError) as e:
        per_band_value(["1.0", "[1, 2]"], "PSF_FWHM", "cat.csv")
    assert e.value.row == 2 and "PSF_FWHM" in e.value.message


def _subjects_export(path, ids, metadata=None):
    rows = []
    for sid in ids:
        md = (metadata or {}).get(sid, {"ra": 10.0, "dec": -1.0})
        rows.append({"subject_id": sid, "project_id": 1, "metadata": json.dumps(md)})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_build_subjects_cas_names_by_hand(tmp_path):
    cat = tmp_path / "galaxies.csv"
    pd.DataFrame(
        {
            "subject_id": [2, 1],
            "ra": [150.1, 150.2],
            "dec": [2.1, 2.2],
            "petroR90_r": [1.0, 5.0],
            "psffwhm_r": [1.4, 1.2],
            "sample": ["secondary", "primary"],
        }
    ).to_csv(cat, index=False)
    t = build_subjects(cat, None, {}, box_side=None)
    assert list(t.columns) == list(SUBJECT_COLUMNS)
    assert t["subject_id"].tolist() == [1, 2]
    a, b = t.iloc[0], t.iloc[1]
    assert a["side_native"] == 76 and b["side_native"] == 40
    assert a["subject_scale"] == pytest.approx(76 * 0.396 / 400)
    assert a["fwhm_native"] == pytest.approx(1.2 / 0.396)
    assert a["fwhm_subject"] == pytest.approx(1.2 / 0.396 * 400 / 76)
    assert a["box_side"] == pytest.approx(2 * 1.2 / 0.396 * 400 / 76)  # 31.90 px
    assert b["box_side"] == pytest.approx(2 * 1.4 / 0.396 * 400 / 40)  # 70.71 px
    assert a["psf_fwhm_arcsec"] == 1.2 and a["petroR90_r"] == 5.0
    assert a["psf_source"] == "catalogue" and a["sample"] == "primary"
    assert a["image_width"] == 400 and a["image_height"] == 400
    assert a["image_size_source"] == "config"
    assert a["ra"] == 150.2


def test_build_subjects_flat_file_names_case_insensitive_and_config(tmp_path):
    cat = tmp_path / "flat.csv"
    pd.DataFrame(
        {
            "SUBJECT_ID": [7],
            "PETROTH90": ["[9.0, 8.0, 5.0, 4.0, 3.0]"],
            "psf_fwhm": ["[1.5 1.4 1.2 1.1 1.0]"],
        }
    ).to_csv(cat, index=False)
    sub = _subjects_export(tmp_path / "s.csv", [7, 8], {7: {"#image_size": 424, "ra": 3.5}})
    cfg = {"native_scale": 0.4, "image_size": 400, "min_side": 10, "r90_factor": 4.0}
    t = build_subjects(cat, sub, cfg, box_side=None)
    r = t.iloc[0]
    side = math.ceil(4.0 * 5.0 / 0.4)  # 50
    assert r["side_native"] == side
    assert r["image_width"] == 424 and r["image_size_source"] == "metadata"
    assert r["fwhm_subject"] == pytest.approx(1.2 / 0.4 * 424 / side)
    assert r["subject_scale"] == pytest.approx(side * 0.4 / 424)
    assert r["ra"] == 3.5  # from the subject export when the catalogue has none
    assert len(t) == 1  # subject 8 has no catalogue row: left out (logged)
    assert t.attrs["report"]["export_subjects_not_in_catalogue"] == 1


def test_unknown_columns_list_what_is_expected(tmp_path):
    cat = tmp_path / "c.csv"
    pd.DataFrame({"subject_id": [1], "r90": [2.0], "fwhm": [1.0]}).to_csv(cat, index=False)
    with pytest.raises(InputError) as e:
        build_subjects(cat, None, {}, None)
    msg = e.value.one_line()
    assert str(cat) in msg and "petroR90_r" in msg and "PETROTH90" in msg
    assert "psffwhm_r" in msg and "PSF_FWHM" in msg and "found: subject_id, r90, fwhm" in msg


@pytest.mark.parametrize("bad", ["", "nan", "0", "-1"])
def test_missing_psf_names_the_row(tmp_path, bad):
    cat = tmp_path / "c.csv"
    cat.write_text(f"subject_id,petroR90_r,psffwhm_r\n1,5.0,1.2\n2,5.0,{bad}\n")
    with pytest.raises(InputError) as e:
        build_subjects(cat, None, {}, None)
    assert e.value.row == 2 and "PSF" in e.value.message and str(cat) in e.value.one_line()


def test_bad_catalogue_rows(tmp_path):
    cat = tmp_path / "c.csv"
    cat.write_text("subject_id,petroR90_r,psffwhm_r\n1,5.0,1.2\n1,4.0,1.1\n")
    with pytest.raises(InputError, match="twice"):
        build_subjects(cat, None, {}, None)
    cat.write_text("subject_id,petroR90_r,psffwhm_r\n1,5.0,1.2\nx,4.0,1.1\n")
    with pytest.raises(InputError) as e:
        build_subjects(cat, None, {}, None)
    assert e.value.row == 2
    cat.write_text("subject_id,petroR90_r,psffwhm_r\n1,,1.2\n")
    with pytest.raises(InputError, match="no R90"):
        build_subjects(cat, None, {}, None)


def test_without_catalogue_box_side_from_config(tmp_path):
    sub = _subjects_export(tmp_path / "s.csv", [3, 4], {3: {"#width": 1000, "#height": 750}})
    t = build_subjects(None, sub, {}, box_side=20.0)
    assert t["subject_id"].tolist() == [3, 4]
    assert t["box_side"].tolist() == [20.0, 20.0] and t["fwhm_subject"].tolist() == [10.0, 10.0]
    assert (t["psf_source"] == "config").all()
    assert t["image_width"].tolist() == [1000, 400] and t["image_height"].tolist() == [750, 400]
    assert t["image_size_source"].tolist() == ["metadata", "config"]
    assert t["side_native"].isna().all()
    with pytest.raises(InputError, match="box side"):
        build_subjects(None, sub, {}, box_side=None)


def test_bad_config_value():
    with pytest.raises(InputError, match="psf_source"):
        build_subjects(None, None, {"psf_source": "psf"}, 20.0)


def test_cli_subjects(tmp_path):
    cat = tmp_path / "c.csv"
    cat.write_text("subject_id,petroR90_r,psffwhm_r\n1,5.0,1.2\n")
    out = tmp_path / "subjects.parquet"
    assert cli_main(["subjects", "--catalogue", str(cat), "--out", str(out)]) == 0
    t = pd.read_parquet(out)
    assert t["box_side"].iloc[0] == pytest.approx(2 * 1.2 / 0.396 * 400 / 76)
    assert (tmp_path / "subjects_report.json").exists()
    cat.write_text("subject_id,petroR90_r\n1,5.0\n")
    assert cli_main(["subjects", "--catalogue", str(cat), "--out", str(out)]) == 2


# --------------------------------------------------------------------------- real SDSS files


@pytest.mark.shared
def test_read_psfield_real_files(shared):
    d = shared / SDSS
    # psField HDU 6 psf_width, r band (index 2), arcsec
    assert read_psfield_fwhm(d / "frames_2583_2_136/psField-002583-2-0136.fits") == pytest.approx(
        1.0475932, abs=1e-6
    )
    assert read_psfield_fwhm(d / "celeste_3900_6_269/psField-003900-6-0269.fit") == pytest.approx(
        1.5964592, abs=1e-6
    )
    # the photoField file of the same camera column has the same value in its field-136 row
    pf = d / "frames_2583_2_136/photoField-002583-2.fits"
    assert read_psfield_fwhm(pf, field=136) == read_psfield_fwhm(
        d / "frames_2583_2_136/psField-002583-2-0136.fits"
    )
    with pytest.raises(InputError, match="give the field"):
        read_psfield_fwhm(pf)
    with pytest.raises(InputError, match="not in this file"):
        read_psfield_fwhm(pf, field=99999)
    g = read_psfield_fwhm(d / "pydl_3366_3_110/psField-003366-3-0110.fit", band="g")
    assert g == pytest.approx(1.3491293, abs=1e-6)
    with pytest.raises(InputError):
        read_psfield_fwhm(d / "celeste_3900_6_269/cat-164.4311-39.0359.fits")


def _photoobj_catalogue(path, tmp_path, name, with_psf_only=False):
    """A real photoObj file as a catalogue: PETROTH90 / PSF_FWHM per band, + subject_id."""
    from astropy.table import Table

    t = Table.read(path)
    if with_psf_only:  # some real rows have PSF_FWHM = 0 (no PSF measured)
        t = t[np.asarray(t["PSF_FWHM"])[:, 2] > 0]
    t["subject_id"] = np.arange(1, len(t) + 1)
    keep = [c for c in ("subject_id", "RA", "DEC", "PETROTH90", "PSF_FWHM", "FIELD")]
    out = tmp_path / name
    t[keep].write(out, overwrite=True)
    return t, out


@pytest.mark.shared
def test_real_photoobj_catalogue_rows(shared, tmp_path):
    path = shared / SDSS / "tractor_1000_1_100/photoObj-001000-1-0100.fits"
    t, fits_cat = _photoobj_catalogue(path, tmp_path, "cat.fits", with_psf_only=True)
    r90 = np.asarray(t["PETROTH90"])[:, 2]
    fwhm = np.asarray(t["PSF_FWHM"])[:, 2]
    assert (fwhm > 0).all()
    table = build_subjects(fits_cat, None, {}, None)
    for i in range(len(t)):
        side = max(math.ceil(6 * float(r90[i]) / 0.396), 40)
        row = table.iloc[i]
        assert row["side_native"] == side
        assert row["box_side"] == pytest.approx(2 * float(fwhm[i]) / 0.396 * 400 / side)
    # the same rows as CSV text (per-band arrays as "[...]" strings)
    csv_cat = tmp_path / "cat.csv"
    df = pd.DataFrame(
        {
            "subject_id": np.asarray(t["subject_id"]),
            "PETROTH90": [json.dumps(v.tolist()) for v in np.asarray(t["PETROTH90"], float)],
            "PSF_FWHM": [json.dumps(v.tolist()) for v in np.asarray(t["PSF_FWHM"], float)],
        }
    )
    df.to_csv(csv_cat, index=False)
    from_csv = build_subjects(csv_cat, None, {}, None)
    np.testing.assert_allclose(from_csv["box_side"], table["box_side"], rtol=1e-6)


@pytest.mark.shared
def test_psfield_source_and_comparison_with_catalogue(shared, tmp_path):
    """decisions.md#psf-fwhm: psField psf_width runs 10-15% larger than the catalogue's PSF_FWHM.

    Measured here (r band, psField psf_width vs the median photoObj PSF_FWHM > 0 of the same
    field): run 1000 field 100: 3.055" vs 2.774" (+10.1%, 16 of 19 rows have a PSF_FWHM);
    run 3900 field 269: 1.596" vs 1.376" (+16.0%, 949 of 981 rows).
    """
    ratios = []
    for folder, obj, psf in [
        ("tractor_1000_1_100", "photoObj-001000-1-0100.fits", "psField-001000-1-0100.fit"),
        ("celeste_3900_6_269", "photoObj-003900-6-0269.fits", "psField-003900-6-0269.fit"),
    ]:
        d = shared / SDSS / folder
        t, fits_cat = _photoobj_catalogue(d / obj, tmp_path, f"{folder}.fits")
        fwhm = np.asarray(t["PSF_FWHM"])[:, 2]
        good = fwhm > 0
        if not good.all():
            # real catalogue rows without a PSF FWHM (0): an error naming the first such row
            with pytest.raises(InputError) as e:
                build_subjects(fits_cat, None, {}, None)
            assert e.value.row == int(np.flatnonzero(~good)[0]) + 1
        cat = build_subjects(fits_cat, None, {"psf_source": "psfield"}, None, psfield=d / psf)
        assert (cat["psf_source"] == "psfield").all()
        width = read_psfield_fwhm(d / psf)
        assert cat["psf_fwhm_arcsec"].unique().tolist() == [width]
        ratios.append(width / float(np.median(fwhm[good])))
    assert ratios[0] == pytest.approx(1.101, abs=0.002)
    assert ratios[1] == pytest.approx(1.160, abs=0.002)
    assert all(1.05 < r < 1.2 for r in ratios)


@pytest.mark.shared
def test_psfield_column_per_galaxy(shared, tmp_path):
    d = shared / SDSS
    cat = tmp_path / "c.csv"
    pd.DataFrame(
        {
            "subject_id": [1, 2, 3],
            "petroR90_r": [5.0, 5.0, 5.0],
            "psfield": [
                str(d / "frames_2583_2_136/psField-002583-2-0136.fits"),
                str(d / "pydl_3366_3_110/psField-003366-3-0110.fit"),
                str(d / "frames_2583_2_136/photoField-002583-2.fits"),
            ],
            "field": [136, 110, 137],
        }
    ).to_csv(cat, index=False)
    t = build_subjects(cat, None, {"psf_source": "psfield"}, None)
    w = t["psf_fwhm_arcsec"].tolist()
    assert w[0] == pytest.approx(1.0475932, abs=1e-6)
    assert w[1] == pytest.approx(1.1699985, abs=1e-6)
    assert 0.5 < w[2] < 3.0 and w[2] != w[0]  # field 137 of the photoField file
    assert t["box_side"].iloc[0] == pytest.approx(2 * w[0] / 0.396 * 400 / 76)


def test_subjects_from_a_flattened_clicks_table(tmp_path):
    """No subject export: the subject list and image sizes come from the clicks table (the
    most common size per subject; none given: subjects.image_size), box side as configured
    or auto."""
    p = tmp_path / "flat.csv"
    p.write_text(
        "classification_id,subject_id,volunteer,x,y,image_width,image_height\n"
        "1,7,ann,10,10,640,480\n"
        "2,7,bob,12,11,640,480\n"
        "3,7,cy,,,800,600\n"
        "4,9,ann,5,5,,\n"
    )
    t = build_subjects(None, None, {"image_size": 300}, 12.0, clicks=p)
    assert t["subject_id"].tolist() == [7, 9]
    assert t["image_width"].tolist() == [640, 300] and t["image_height"].tolist() == [480, 300]
    assert t["image_size_source"].tolist() == ["clicks", "config"]
    assert t["box_side"].tolist() == [12.0, 12.0] and t["psf_source"].tolist() == ["config"] * 2
    assert t.attrs["report"]["image_size_from_clicks"] == 1
    auto = build_subjects(None, None, {}, "auto", clicks=p)
    assert auto["box_side"].isna().all() and (auto["psf_source"] == "auto").all()
    with pytest.raises(InputError, match="subject pixels or 'auto'"):
        build_subjects(None, None, {}, "wide", clicks=p)
