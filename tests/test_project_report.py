"""The project report (docs/decisions.md#project-report) and the catalogue.

Unit tests check each section's numbers and the catalogue against hand-made tables; the
slow tests run the workflow once per example (module-scoped fixtures: Penguin Watch, the
flattened clicks table, the pedestrian boxes of ../shared as a flattened table of
rectangles) and read the report they leave.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from clumpscout import catalogue
from clumpscout.counts import count_table
from clumpscout.report import project
from clumpscout.report.html import project_intro

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "resources" / "examples"

# ------------------------------------------------------------------------ hand-made tables


def _labels() -> pd.DataFrame:
    """Image 1: three labels (p_fp 0.1, 0.4, 0.9), the 0.4 one weak; image 2: one label
    (p_fp 0.0); image 3: none."""
    return pd.DataFrame(
        {
            "subject_id": [1, 1, 1, 2],
            "clump": [0, 1, 2, 0],
            "x1": [0.0, 10.0, 20.0, 5.0],
            "y1": [0.0, 10.0, 20.0, 5.0],
            "x2": [4.0, 16.0, 22.0, 7.0],
            "y2": [2.0, 13.0, 30.0, 9.0],
            "x": [2.0, 13.0, 21.0, 6.0],
            "y": [1.0, 11.5, 25.0, 7.0],
            "p_fp": [0.1, 0.4, 0.9, 0.0],
            "p_weak": [0.2, 0.7, 0.1, 0.0],
            "n_marks": [5, 3, 1, 7],
        }
    )


def _subjects(**extra) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "subject_id": [1, 2, 3],
            "n_volunteers": [10, 9, 8],
            "status": ["retired", "stale", "retired_empty"],
            **extra,
        }
    )


def test_count_range_from_the_labels_without_a_gold_standard():
    """count_high = labels with p_fp < 0.5; count_low = those with p_weak < 0.5 too;
    expected = Σ (1 − p_fp) when the subjects carry none (image 1: 0.9 + 0.6 + 0.1)."""
    c = count_table(_subjects(), _labels())
    assert c["subject_id"].tolist() == [1, 2, 3]
    assert c["labels"].tolist() == [3, 1, 0]
    assert c["kept"].tolist() == [2, 1, 0]
    assert c["count_high"].tolist() == [2, 1, 0]
    assert c["count_low"].tolist() == [1, 1, 0]
    assert c["expected_count"].tolist() == pytest.approx([1.6, 1.0, 0.0])


def test_count_range_and_expected_count_of_the_model_win_when_present():
    subj = _subjects(expected_count=[2.5, 1.2, 0.1], count_low=[1, 1, 0], count_high=[3, 2, 1])
    c = count_table(subj, _labels())
    assert c["expected_count"].tolist() == [2.5, 1.2, 0.1]
    assert c["count_low"].tolist() == [1, 1, 0] and c["count_high"].tolist() == [3, 2, 1]


def test_catalogue_files(tmp_path):
    from astropy.table import Table

    paths = catalogue.write_catalogue(_labels(), _subjects(), tmp_path, model="generative", n=10)
    cat = pd.read_csv(paths["csv"])
    assert len(cat) == 4 and cat["label"].tolist() == [0, 1, 2, 0]
    assert cat["width"].tolist() == [4.0, 6.0, 2.0, 2.0]
    assert cat["height"].tolist() == [2.0, 3.0, 10.0, 4.0]
    for col in ("subject_id", "x", "y", "p_fp", "p_weak", "n_marks"):
        assert col in cat
    ecsv = Table.read(paths["ecsv"], format="ascii.ecsv")
    assert str(ecsv["x"].unit) == "pix" and ecsv["p_fp"].unit is None
    assert ecsv.meta["model"] == "generative" and ecsv.meta["n"] == 10
    img = pd.read_csv(paths["images"])
    assert img.columns.tolist() == catalogue.IMAGE_COLUMNS
    assert img["objects"].tolist() == [2, 1, 0]
    assert img["classifications"].tolist() == [10, 9, 8]
    assert img["retired"].tolist() == [True, False, True]


def test_catalogue_missing_column_is_an_input_error(tmp_path):
    from clumpscout.errors import InputError

    with pytest.raises(InputError, match="p_fp"):
        catalogue.write_catalogue(_labels().drop(columns="p_fp"), _subjects(), tmp_path)


def test_plural():
    assert [project.plural(w) for w in ("penguin", "galaxy", "box", "day", "crater")] == [
        "penguins",
        "galaxies",
        "boxes",
        "days",
        "craters",
    ]


def test_dropped_table_by_hand():
    report = {
        "dropped_classifications": {"other_workflow_version": 102, "json_too_deep": 0},
        "dropped_clicks": {"other_tool": 799, "other_task": 0},
        "unsupported_shapes": {"polygon": 3},
    }
    t = project.dropped_table(report)
    assert t.values.tolist() == [
        ["classifications", "classification of another workflow version", 102],
        ["marks", "mark of another tool", 799],
        ["marks", "unsupported shape: polygon", 3],
    ]


def test_subject_images_found_by_export_file_name_or_id(tmp_path):
    """A metadata file name (another suffix, other case), a location URL's file name, or
    the subject id; a subject with none of them has no image."""
    folder = tmp_path / "img"
    folder.mkdir()
    for name in ("godha_000001.png", "abc-uuid.jpeg", "30.png", "unrelated.png"):
        (folder / name).write_bytes(b"x")
    export = tmp_path / "subjects.csv"
    pd.DataFrame(
        {
            "subject_id": [10, 20, 30, 40],
            "metadata": [
                json.dumps({"imageid": "GODHa_000001.JPG"}),
                json.dumps({"note": "x"}),
                "{}",
                json.dumps({"file": "missing.png"}),
            ],
            "locations": [
                "{}",
                json.dumps({"0": "https://example.org/a/abc-uuid.jpeg"}),
                "{}",
                "{}",
            ],
        }
    ).to_csv(export, index=False)
    names = project.subject_file_names(export)
    found = project.find_subject_images(folder, [10, 20, 30, 40], names)
    assert {k: v.name for k, v in found.items()} == {
        10: "godha_000001.png",
        20: "abc-uuid.jpeg",
        30: "30.png",
    }
    assert project.find_subject_images(None, [10], names) == {}


def test_pick_by_count_spreads_over_the_counts():
    counts = pd.DataFrame({"subject_id": range(100, 111), "kept": range(11)})
    assert project.pick_by_count(counts, 3) == [100, 105, 110]
    assert project.pick_by_count(counts.head(2), 4) == [100, 101]


def test_probability_sentence_with_and_without_gold():
    w = {"object": "penguin", "objects": "penguins"}
    without = project.probability_sentence(w, False)
    with_gold = project.probability_sentence(w, True)
    assert "No gold standard" in without and "experts" in without
    assert "calibrated against the gold standard" in with_gold
    assert "No gold standard" not in with_gold


def _write_aggregation(d: Path) -> dict:
    d.mkdir(parents=True, exist_ok=True)
    labels, subjects = _labels(), _subjects()
    labels.to_parquet(d / "labels.parquet")
    subjects.to_parquet(d / "subjects.parquet")
    a = pd.DataFrame(
        {
            "subject_id": [1, 1, 1, 2, 3],
            "classification_id": [1, 2, 3, 4, 5],
            "x": [2.0, 13.0, np.nan, 6.0, np.nan],
            "y": [1.0, 11.0, np.nan, 7.0, np.nan],
            "x1": [0.0, 10.0, np.nan, 5.0, np.nan],
            "y1": [0.0, 10.0, np.nan, 5.0, np.nan],
            "x2": [4.0, 16.0, np.nan, 7.0, np.nan],
            "y2": [2.0, 13.0, np.nan, 9.0, np.nan],
            "image_width": [40.0] * 5,
            "image_height": [30.0] * 5,
        }
    )
    a.to_parquet(d / "assignments.parquet")
    pd.DataFrame(
        {
            "volunteer": ["a", "b", "not-logged-in-1"],
            "p_fp": [0.1, 0.2, 0.3],
            "p_fn": [0.1, 0.5, 0.2],
            "n_classifications": [3, 1, 1],
            "fp_rate": [0.2, 1.0, 0.5],
        }
    ).to_parquet(d / "volunteers.parquet")
    return {k: str(d / f"{k}.parquet") for k in ("labels", "subjects", "assignments", "volunteers")}


@pytest.mark.parametrize("gold", [False, True])
def test_sections_record_their_numbers_and_sources(tmp_path, gold):
    inp = _write_aggregation(tmp_path / "aggregate" / "generative" / "n10")
    report = tmp_path / "clicks_report.json"
    report.write_text(json.dumps({"dropped_clicks": {"other_tool": 4}, "clicks_kept": 9}))
    inp["clicks_report"] = str(report)
    params = {"object_name": "crater", "gold": gold, "dpi": 40, "n_examples": 2, "n": 10}
    out = tmp_path / "out"
    counts = project.build("objects_per_image", inp, out / "c", params)
    assert counts["title"] == "Craters per image"
    assert counts["kept_total"] == 3 and counts["images_with_objects"] == 2
    assert counts["low_total"] == 2 and counts["high_total"] == 3
    assert counts["inputs"]["labels"].endswith("aggregate/generative/n10/labels.parquet")
    assert json.loads((out / "c.json").read_text())["model"] == "generative"
    prob = project.build("label_probability", inp, out / "p", params)
    assert prob["below_keep"] == 3 and prob["gold"] is gold
    table = pd.read_csv(out / "p.csv")
    # bins [0, 0.05) [0.05, 0.2) [0.2, 0.5) [0.5, 0.8) [0.8, 0.95) [0.95, 1]
    assert table["labels"].tolist() == [1, 1, 1, 0, 1, 0]
    ex = project.build("example_images", inp, out / "e", params)
    # images sorted by count (3: 0, 2: 1, 1: 2), two picked at the ends
    assert [s["image"] for s in ex["subjects"]] == [1, 3]
    vol = project.build("volunteers", inp, out / "v", params)
    assert vol["volunteers"] == 3 and vol["not_logged_in"] == 1 and vol["classifications"] == 5
    drop = project.build("dropped", inp, out / "d", params)
    assert drop["dropped"] == {"marks: mark of another tool": 4}
    for stem in "cpevd":
        assert (out / f"{stem}.png").stat().st_size > 1000
        doc = json.loads((out / f"{stem}.json").read_text())
        assert not re.search(r"clump|galax|§|paper", doc["caption"], re.I), doc["caption"]


def test_replay_section_from_a_replay_table(tmp_path):
    """The workflow's replay.csv (no regime column, a ``full`` row, count_mae NaN without a
    truth): the cheapest setting that loses at most 1 % of the full-data objects."""
    replay = tmp_path / "replay.csv"
    pd.DataFrame(
        {
            "policy": ["full", "fixed", "fixed", "generative", "caesar"],
            "setting": [float("nan"), 5, 10, 0.1, 3],
            "effort": [1.0, 0.5, 1.0, 0.6, 0.4],
            "lost": [0.0, 0.03, 0.0, 0.008, 0.2],
            "purity": [0.9, 0.9, 0.95, 0.94, 0.9],
            "completeness": [1.0, 0.8, 1.0, 0.97, 0.7],
            "count_mae": [float("nan")] * 5,
        }
    ).to_csv(replay, index=False)
    doc = project.build("retirement", {"replay": str(replay)}, tmp_path / "r", {"dpi": 40})
    t = pd.read_csv(tmp_path / "r.csv")
    assert t["saved"].tolist() == [0.0, 0.5, 0.0, 0.4, 0.6]
    # within 1 % lost: fixed 10 (effort 1.0) and generative 0.1 (0.6); the cheaper wins
    assert doc["cheapest_within_loss"]["policy"] == "generative"
    assert "40% of the classifications saved" in doc["caption"]


def test_method_counts_by_hand():
    paper = pd.DataFrame({"subject_id": [1, 1, 2], "p_fp": [0.1, 0.7, 0.2]})
    dbscan = pd.DataFrame({"subject_id": [1, 3, 3]})
    c = project.method_counts(
        [1, 2, 3], {"labels": _labels(), "paper_labels": paper, "dbscan": dbscan}
    )
    assert c.columns.tolist() == ["default model", "the paper's model", "DBSCAN"]
    assert c.loc[[1, 2, 3]].values.tolist() == [[2, 1, 1], [1, 1, 0], [0, 0, 2]]


def test_intro_speaks_of_the_project():
    about = {
        "project_name": "Penguin Watch",
        "object_name": "penguin",
        "source": "export",
        "workflow_id": 6465,
        "workflow_version": "52.76",
        "task": "T0",
        "model": "generative",
        "n": 10,
        "gold": False,
    }
    report = {"classifications_kept": 497, "subjects": 50, "volunteers": 348, "clicks_kept": 8833}
    title, paras = project_intro(about, report, "0 (Adults)")
    text = " ".join([title, *paras])
    assert title.startswith("Penguin Watch")
    assert "workflow 6465 (version 52.76), task T0, tool 0 (Adults)" in text
    assert "497 classifications of 50 images by 348 volunteers" in text
    assert not re.search(r"clump|galax|§|paper", text, re.I)


# ------------------------------------------------------------------------ end to end


def run_workflow(workdir: Path, cfg: dict, *args: str, timeout: int = 1200):
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    argv = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir)]
    argv += ["--configfile", str(workdir / "config.yaml"), "--cores", "2", *args]
    r = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return workdir / cfg["results_dir"]


def report_text(results: Path) -> str:
    """The report's text as a reader sees it (tags and embedded images stripped)."""
    s = (results / "report.html").read_text()
    s = re.sub(r"<img[^>]*>", " ", s)
    s = re.sub(r"<(style|title)>.*?</\1>", " ", s, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", s))


def example(name: str, **over) -> dict:
    cfg = yaml.safe_load((EXAMPLES / name).read_text())
    for section, values in over.items():
        if isinstance(values, dict):
            cfg.setdefault(section, {}).update(values)
        else:
            cfg[section] = values
    return cfg


@pytest.fixture(scope="module")
def penguin(shared, tmp_path_factory):
    """The Penguin Watch example at its largest n only (one aggregation per model)."""
    d = tmp_path_factory.mktemp("penguin")
    cfg = example("penguin_watch.yaml", subsample={"n": [10]})
    for key in ("classifications", "subjects"):
        cfg["export"][key] = str(shared / Path(cfg["export"][key]).relative_to("../shared"))
    return run_workflow(d, cfg)


@pytest.mark.slow
@pytest.mark.shared
def test_penguin_watch_report_is_about_penguins(penguin):
    text = report_text(penguin)
    low = text.lower()
    for word in ("clump", "galax", "§"):
        assert word not in low, (word, low[max(0, low.find(word) - 80) : low.find(word) + 40])
    assert "penguin watch" in low and "penguins per image" in low
    # "paper" only in the comparison section (the last)
    last = low.rfind("the default model beside other methods")
    assert last > 0 and low.find("paper") > last
    assert "no gold standard" in low


@pytest.mark.slow
@pytest.mark.shared
def test_penguin_watch_figures_read_the_default_model(penguin):
    sections = sorted((penguin / "project_report").glob("*.json"))
    names = {p.stem for p in sections}
    assert {"objects_per_image", "label_probability", "example_images", "volunteers"} <= names
    # the workflow replays the export in arrival order: the report says what retiring saves
    assert "retirement" in names
    ret = json.loads((penguin / "project_report" / "retirement.json").read_text())
    assert ret["inputs"]["replay"].endswith("replay/replay.csv")
    for p in sections:
        doc = json.loads(p.read_text())
        for key, path in doc["inputs"].items():
            if key in ("labels", "subjects", "assignments", "volunteers"):
                assert "/aggregate/generative/n10/" in path, (p.name, key, path)
            elif "aggregate/" in str(path):
                assert doc["section"] == "other_methods", (p.name, key, path)
    assert not (penguin / "figures").exists() or not list((penguin / "figures").glob("*.png"))


@pytest.mark.slow
@pytest.mark.shared
def test_penguin_watch_catalogue_beside_the_report(penguin):
    cat = pd.read_csv(penguin / "catalogue.csv")
    images = pd.read_csv(penguin / "images.csv")
    labels = pd.read_parquet(penguin / "aggregate/generative/n10/labels.parquet")
    assert len(cat) == len(labels) and len(images) == 50
    assert (penguin / "catalogue.ecsv").is_file()
    kept = labels[labels["p_fp"] < 0.5].groupby("subject_id").size()
    merged = images.set_index("subject_id")["objects"]
    assert merged.sum() == kept.sum()
    assert (images["count_low"] <= images["count_high"]).all()
    counts = json.loads((penguin / "project_report/objects_per_image.json").read_text())
    assert counts["kept_total"] == int(kept.sum())


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    d = tmp_path_factory.mktemp("flat")
    cfg = example("flat_clicks.yaml", subsample={"n": [8]})
    cfg["export"]["clicks"] = str(EXAMPLES / "flat_clicks.csv")
    return run_workflow(d, cfg)


@pytest.mark.slow
def test_flat_clicks_report(flat):
    """4 images holding 0, 1, 2 and 3 objects: 6 objects counted, each image's count right."""
    low = report_text(flat).lower()
    assert "objects per image" in low and "clump" not in low
    images = pd.read_csv(flat / "images.csv").set_index("subject_id")
    assert images.loc[[101, 102, 103, 104], "objects"].tolist() == [0, 1, 2, 3]
    assert images["classifications"].tolist() == [8, 8, 8, 8]


def pedestrian_clicks(shared: Path, out: Path, n_images: int = 24) -> Path:
    """The first ``n_images`` images (by id) of the pedestrian boxes as a flattened clicks
    table of rectangles: one classification per (worker task, image), centre (x, y) and
    size (scaleX, scaleY) as the README of the data says, clipped to the image; boxes
    with no area after clipping and null entries are left out; a worker who drew nothing
    is one empty row."""
    d = json.loads((shared / "data/crowd_boxes/lean_pedestrians/workers_179_wh.json").read_text())
    keep = sorted(d["images"], key=int)[:n_images]
    rows, cid = [], 0
    for ann in d["annotations"]:
        for img, boxes in sorted(ann["answer"]["images"].items(), key=lambda kv: int(kv[0])):
            if img not in keep:
                continue
            cid += 1
            meta = d["images"][img]
            w, h = meta["width"], meta["height"]
            marks = []
            for entry in boxes or []:
                if not entry or not isinstance(entry[1], dict):
                    continue
                b = entry[1]
                x1, x2 = max(b["x"] - b["scaleX"] / 2, 0), min(b["x"] + b["scaleX"] / 2, w)
                y1, y2 = max(b["y"] - b["scaleY"] / 2, 0), min(b["y"] + b["scaleY"] / 2, h)
                if x2 > x1 and y2 > y1:
                    marks.append(((x1 + x2) / 2, (y1 + y2) / 2, x1, y1, x2, y2, "rectangle"))
            for m in marks or [(np.nan,) * 6 + (None,)]:
                rows.append((cid, int(img), ann["worker"], *m, w, h))
    cols = ["classification_id", "subject_id", "volunteer", "x", "y", "x1", "y1", "x2", "y2"]
    pd.DataFrame(rows, columns=[*cols, "shape", "image_width", "image_height"]).to_csv(
        out, index=False
    )
    return out


@pytest.fixture(scope="module")
def pedestrians(shared, tmp_path_factory):
    d = tmp_path_factory.mktemp("pedestrians")
    table = pedestrian_clicks(shared, d / "pedestrians.csv")
    cfg = {
        "source": "clicks",
        "results_dir": "results/pedestrians",
        "export": {"clicks": str(table), "box_side": 60.0},
        "subsample": {"n": [7]},
        "baseline": {"n": 7},
        "figures": {"n_ref": 7, "object_name": "pedestrian", "project_name": "Pedestrians"},
        "images": {"enabled": False},
    }
    return run_workflow(d, cfg), table


@pytest.mark.slow
@pytest.mark.shared
def test_pedestrian_boxes_report(pedestrians):
    results, table = pedestrians
    low = report_text(results).lower()
    assert low.count("pedestrians per image") >= 1 and "clump" not in low
    clicks = pd.read_csv(table)
    images = pd.read_csv(results / "images.csv")
    assert len(images) == clicks["subject_id"].nunique() == 24
    assert (images["classifications"] == 7).all()  # 7 workers per image
    cat = pd.read_csv(results / "catalogue.csv")
    # drawn rectangles keep their extent: people are taller than wide
    assert (cat["height"] > cat["width"]).mean() > 0.8
