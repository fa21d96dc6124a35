"""The simulator's regime grid (resources/regimes/*.yaml).

Every regime file is a full workflow config that validates against the schema,
and a small universe of each (150 subjects, a second or two) shows the property
that defines the regime. Where a share is compared with a target, the tolerance
is three standard errors computed from the universe itself (clustered by
volunteer and by subject, whichever is larger) plus a stated allowance for the
target being approximate.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO

from clumpscout.simulation.universe import DEFAULTS, resolve_config, simulate_universe, stage_seed

REGIMES = ("clean", "paper", "noisy", "spammers", "counting")
SMALL = 150
SPURIOUS = ("spurious", "star", "bulge")  # clump-task clicks on no clump or faint feature


def _config(name: str) -> dict:
    return yaml.safe_load((REPO / "resources" / "regimes" / f"{name}.yaml").read_text())


@pytest.fixture(scope="module")
def schema() -> dict:
    return yaml.safe_load((REPO / "src" / "clumpscout" / "config.schema.yaml").read_text())


@pytest.fixture(scope="module")
def universes(tmp_path_factory) -> dict[str, Path]:
    """A small universe of every regime (built once, on first use)."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cfg = _config(name)
            sec = dict(cfg["simulate"], n_subjects=SMALL, n_expert_subjects=10)
            out = tmp_path_factory.mktemp(name)
            simulate_universe(sec, stage_seed(cfg["seed"]), out)
            cache[name] = out
        return cache[name]

    return get


def _clicks(universe: Path, task: str) -> pd.DataFrame:
    """Volunteers' clicks of ``task`` with their volunteer (from the export)."""
    tc = pd.read_parquet(universe / "truth_clicks.parquet")
    tc = tc[~tc["expert"] & (tc["task"].astype(str) == task)]
    who = pd.read_csv(universe / "classifications.csv", usecols=["classification_id", "user_name"])
    return tc.merge(who, on="classification_id", validate="m:1")


def _share(hit: np.ndarray, *clusters: np.ndarray) -> tuple[float, float]:
    """(share of ``hit``, its standard error), clustered by each of ``clusters`` in
    turn (ratio-estimator linearisation); the larger error is returned."""
    share = float(hit.mean())
    ses = []
    for g in clusters:
        d = pd.DataFrame({"g": g, "a": hit.astype(float), "b": 1.0}).groupby("g").sum()
        k = len(d)
        resid = d["a"] - share * d["b"]
        ses.append(math.sqrt(k / max(k - 1, 1) * float((resid**2).sum())) / float(d["b"].sum()))
    return share, max(ses)


# --------------------------------------------------------------------------- configs


@pytest.mark.parametrize("name", REGIMES)
def test_regime_file_is_a_valid_full_config(name, schema):
    import jsonschema

    cfg = _config(name)
    jsonschema.Draft202012Validator(schema).validate(cfg)
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    assert set(cfg) == set(base)  # a full config: every section of config.yaml
    assert set(cfg["simulate"]) == set(DEFAULTS)
    resolve_config(cfg["simulate"])


def test_paper_regime_is_the_default_calibration():
    base = yaml.safe_load((REPO / "config.yaml").read_text())["simulate"]
    assert _config("paper")["simulate"] == base


def test_counting_regime_is_simulated_with_a_fixed_box_side():
    cfg = _config("counting")
    assert cfg["simulate"]["kind"] == "counting"
    assert cfg["source"] == "simulate"  # the workflow then reads no catalogue
    assert cfg["export"]["box_side"] > 0
    assert cfg["extract"]["clump_task"] == "T0" and cfg["extract"]["unusual_tools"] == []
    assert cfg["images"]["enabled"] is False


@pytest.mark.slow  # a Snakemake dry run (~7 s)
def test_counting_regime_dag_has_no_catalogue_no_images_and_the_truth(tmp_path):
    """source: simulate with kind counting: the subjects rule reads no catalogue (the
    universe's galaxies.csv has no R90 or PSF FWHM), the image rules are off even when
    asked for, and the truth comparisons of both models are planned."""
    import subprocess
    import sys

    cfg = _config("counting")
    cfg["images"]["enabled"] = True  # ignored: there are no galaxies to render
    path = tmp_path / "counting.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-d", str(tmp_path / "run"),
         "-s", str(REPO / "Snakefile"), "--configfile", str(path)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    blocks = {}
    for block in r.stdout.split("\nrule ")[1:]:
        blocks.setdefault(block.split(":", 1)[0].strip(), []).append(block)
    subjects = blocks["subjects"][0].split("output:", 1)[0]
    assert "galaxies.csv" not in subjects and "subjects_export.csv" in subjects
    for rule in ("render_frames", "cutouts", "photometry_truth", "flux_figures"):
        assert rule not in blocks, rule
    for rule in ("simulate", "compare", "baseline_compare", "headline"):
        assert rule in blocks, rule
    truth = [b for b in blocks["compare"] if "reference=truth" in b]
    models = {b.split("model=", 1)[1].split(",")[0].split()[0] for b in truth}
    assert models == {"generative", "paper"}
    assert "images.enabled ignored" in r.stdout + r.stderr


# --------------------------------------------------------------------------- properties


def _spurious_share(universe: Path) -> tuple[float, float]:
    t1 = _clicks(universe, "T1")
    hit = t1["source"].astype(str).isin(SPURIOUS).to_numpy()
    return _share(hit, t1["user_name"].to_numpy(), t1["subject_id"].to_numpy())


def _mark_rates(universe: Path, kind: str) -> np.ndarray:
    obj = pd.read_csv(universe / "truth_objects.csv")
    obj = obj[obj["kind"] == kind]
    return (obj["n_marked"] / obj["n_viewers"]).to_numpy()


def test_clean_has_few_spurious_clicks_and_high_detection(universes):
    u = universes("clean")
    share, se = _spurious_share(u)
    assert share + 3 * se < 0.05, (share, se)
    rate = _mark_rates(u, "clump")
    assert np.median(rate) > 0.9  # high detection
    vt = pd.read_csv(u / "volunteers_truth.csv")
    assert vt.loc[~vt["expert"], "scatter_fwhm"].median() < 0.1  # small scatter


def test_noisy_has_40_percent_spurious_clicks_and_misses_faint_clumps(universes):
    u = universes("noisy")
    share, se = _spurious_share(u)
    assert abs(share - 0.4) < 3 * se + 0.02, (share, se)  # "about 40%"
    # faint real clumps are missed by most volunteers: many clumps marked by < half
    rate = _mark_rates(u, "clump")
    assert (rate < 0.5).mean() > 0.3
    paper = _mark_rates(universes("paper"), "clump")
    assert (rate < 0.5).mean() > 2 * (paper < 0.5).mean()
    # skills spread widely
    vt = pd.read_csv(u / "volunteers_truth.csv")
    v = vt[~vt["expert"]]
    assert v["threshold"].std() > 0.9
    assert np.log(v["scatter_fwhm"]).std() > 0.6


def test_spammers_are_ten_percent_at_every_activity_level(universes):
    u = universes("spammers")
    vt = pd.read_csv(u / "volunteers_truth.csv")
    v = vt[~vt["expert"] & ~vt["late"]]
    n = len(v)
    assert abs(v["spammer"].mean() - 0.1) <= 1.0 / math.sqrt(n) + 1.0 / n
    top = v.nlargest(10, "n_classifications")
    assert top["spammer"].sum() >= 1  # some of the most active volunteers are spammers
    # ~90% of a spammer's clicks are spurious, several per classification
    t1 = _clicks(u, "T1")
    names = set(v.loc[v["spammer"], "volunteer"])
    mine = t1[t1["user_name"].isin(names)]
    hit = (mine["source"].astype(str) == "spurious").to_numpy()
    share, se = _share(hit, mine["user_name"].to_numpy(), mine["subject_id"].to_numpy())
    assert abs(share - 0.9) < 3 * se + 0.03, (share, se)
    n_cls = v.loc[v["spammer"], "n_classifications"].sum()
    assert hit.sum() / n_cls > 3


def test_counting_universe(universes):
    u = universes("counting")
    rep = yaml.safe_load((u / "simulate_report.json").read_text())
    assert 0.3 <= rep["classifications_empty_fraction"] <= 0.5
    assert 0.4 <= rep["object_mark_rate_median"] <= 0.7
    obj = pd.read_csv(u / "truth_objects.csv")
    assert set(obj["kind"]) == {"object"}
    per_image = obj.groupby("subject_id").size()
    assert per_image.max() <= 15 and (per_image >= 10).any()
    assert len(per_image) < SMALL  # some images are empty
    rate = obj["n_marked"] / obj["n_viewers"]
    assert rate.median() == pytest.approx(rep["object_mark_rate_median"])
    assert obj["n_viewers"].between(10, 20).all()
    vt = pd.read_csv(u / "volunteers_truth.csv")
    v = vt[~vt["expert"]]
    assert (v["n_classifications"] <= 2).mean() > 0.5  # most classify one or two images
    # the truth has the galaxy universe's format
    tc = pd.read_csv(u / "truth_clumps.csv")
    assert list(tc.columns) == [
        "subject_id", "clump", "x", "y", "flux_g", "flux_r", "flux_i", "unusual",
    ]  # fmt: skip
    assert len(tc) == len(obj)


def test_counting_export_goes_through_the_box_side_path(universes):
    from clumpscout.data.boxes import make_boxes
    from clumpscout.data.subjects import build_subjects
    from clumpscout.data.zooniverse import extract_clicks

    u = universes("counting")
    cfg = _config("counting")
    clicks, _ = extract_clicks(
        u / "classifications.csv",
        u / "subjects_export.csv",
        clump_task=cfg["extract"]["clump_task"],
        unusual_tools=cfg["extract"]["unusual_tools"],
    )
    subjects = build_subjects(None, u / "subjects_export.csv", {}, cfg["export"]["box_side"])
    assert (subjects["box_side"] == cfg["export"]["box_side"]).all()
    c = cfg["simulate"]["counting"]
    assert (subjects["image_width"] == c["image_width"]).all()
    assert (subjects["image_height"] == c["image_height"]).all()
    boxes = make_boxes(clicks, subjects)
    tc = _clicks(u, "T0")
    assert int(boxes["x"].notna().sum()) == len(tc)
    assert boxes["classification_id"].nunique() == len(
        pd.read_csv(u / "classifications.csv", usecols=["classification_id"])
    )


def test_regime_benchmark_reads_a_catalogue_as_the_workflow_does():
    """benchmarks/regimes.py builds the subjects like common.smk: galaxies.csv is the
    catalogue of a simulated galaxy universe, never of a counting one."""
    from benchmarks import regimes as mod

    for name in REGIMES:
        cfg = mod.regime_config(name)
        assert mod.has_catalogue(cfg) == (name != "counting"), name
    assert not mod.has_catalogue({"source": "export", "simulate": {"kind": "galaxy"}})
