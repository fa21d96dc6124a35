"""The worked examples in resources/examples/ are tests: each runs with the example's own
settings and checks the result against an independent answer.

- ``penguin_watch.yaml``: the real Penguin Watch export (../shared) through extract ->
  subjects -> boxes -> aggregate with the example's settings, against panoptes-aggregation's
  reference clustering of the same export (point_reducer_hdbscan, min_cluster_size 4).
- ``flat_clicks.yaml``: a flattened clicks table (no Zooniverse export, no subjects table)
  through boxes -> aggregate, against the objects the table was made from.

The CLI chain is run in-process (``clumpscout.cli.main``): the same code the workflow's
rules run, without snakemake's start-up.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from clumpscout.cli import main as cli_main

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "resources" / "examples"


def raw(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / name).read_text())


def load(name: str) -> dict:
    """An example as the workflow sees it: its settings over every default."""
    from clumpscout import config

    cfg = raw(name)
    assert not config.problems(cfg), config.problems(cfg)  # also fills in the defaults
    return cfg


def in_shared(shared: Path, path: str) -> Path:
    """An example's ``../shared/...`` path (relative to the repository) under ``shared``."""
    return shared / Path(path).relative_to("../shared")


def extract_args(cfg: dict) -> list[str]:
    """``clumpscout extract`` options for a config's export and extract sections."""
    exp, ex = cfg["export"], cfg["extract"]
    args = ["--clump-task", str(ex["clump_task"]), "--missing-subjects", ex["missing_subjects"]]
    if exp.get("workflow_id") is not None:
        args += ["--workflow-id", str(exp["workflow_id"])]
    if exp.get("workflow_version") is not None:
        args += ["--workflow-version", str(exp["workflow_version"])]
    args += ["--unusual-tools", *map(str, ex.get("unusual_tools") or [])]
    if ex.get("tools") is not None:
        args += ["--tools", *map(str, ex["tools"])]
    return args


@pytest.mark.parametrize("name", ["penguin_watch.yaml", "flat_clicks.yaml"])
def test_examples_are_override_files(name):
    """An example holds only the settings it changes (``--configfile`` lays it over
    config.yaml): every key is one the schema knows, no value repeats its default, and the
    whole passes the schema."""
    from clumpscout import config

    cfg = raw(name)
    defaults = config.defaults()
    assert cfg["source"] in ("export", "clicks") and cfg["results_dir"] != "results"
    for section, value in cfg.items():
        assert section in defaults, (name, section)
        if isinstance(value, dict):
            for key, v in value.items():
                assert key in defaults[section], (name, section, key)
                assert v != defaults[section][key], (name, f"{section}.{key} repeats its default")
        else:
            assert value != defaults[section], (name, section)
    assert not config.problems(cfg)


# --------------------------------------------------------------------------- Penguin Watch


def reference_clusters(shared: Path) -> pd.DataFrame:
    """panoptes-aggregation 3.4.5's HDBSCAN clusters of the adults tool, one row per cluster
    (subject_id, x, y); subjects without a cluster have none."""
    ref = pd.read_csv(
        in_shared(shared, "../shared/data/zooniverse_exports/penguin_watch")
        / "reference_panoptes_3.4.5/point_reducer_hdbscan_example.csv"
    )
    rows = []
    for sid, xs, ys in zip(
        ref["subject_id"],
        ref["data.frame0.T0_tool0_clusters_x"],
        ref["data.frame0.T0_tool0_clusters_y"],
        strict=True,
    ):
        if isinstance(xs, str):
            rows += [(sid, x, y) for x, y in zip(json.loads(xs), json.loads(ys), strict=True)]
    return pd.DataFrame(rows, columns=["subject_id", "x", "y"]), ref["subject_id"].to_numpy()


def agreement(labels: pd.DataFrame, ref: pd.DataFrame, subjects: np.ndarray, radius: float):
    """Counts per subject (correlation, share equal, share within one) and the share of
    reference clusters with a label centre within ``radius`` px."""
    from scipy.spatial import cKDTree

    mine = labels.groupby("subject_id").size().reindex(subjects, fill_value=0).to_numpy()
    theirs = ref.groupby("subject_id").size().reindex(subjects, fill_value=0).to_numpy()
    found = 0
    for sid, r in ref.groupby("subject_id"):
        lab = labels[labels["subject_id"] == sid]
        if len(lab):
            d, _ = cKDTree(lab[["x", "y"]].to_numpy()).query(r[["x", "y"]].to_numpy())
            found += int((d <= radius).sum())
    return {
        "correlation": float(np.corrcoef(mine, theirs)[0, 1]),
        "equal": float(np.mean(mine == theirs)),
        "within_one": float(np.mean(np.abs(mine - theirs) <= 1)),
        "labels": int(mine.sum()),
        "reference": int(theirs.sum()),
        "reference_found": found / len(ref),
    }


@pytest.mark.slow
@pytest.mark.shared
def test_penguin_watch_example_agrees_with_panoptes(shared, tmp_path):
    """Measured (generative model, box side auto = 25.0 px, seed 20231):

    - every label: correlation of counts per subject 0.87; no subject has equal counts (the
      model keeps objects two or three volunteers marked, HDBSCAN needs 4 points): 1,605
      labels against 1,059 reference clusters; 90 % of the reference clusters have a label
      within one FWHM (12.5 px);
    - labels marked by >= 4 volunteers (the reference's min_cluster_size): correlation 0.95,
      equal counts on 18 % of the subjects, within one on 46 %.

    The thresholds sit somewhat below these numbers."""
    cfg = load("penguin_watch.yaml")
    exp = cfg["export"]
    cls = in_shared(shared, exp["classifications"])
    subj = in_shared(shared, exp["subjects"])
    clicks, subjects, boxes, agg = (
        tmp_path / n for n in ("c.parquet", "s.parquet", "b.parquet", "agg")
    )
    rc = cli_main(
        ["extract", "--classifications", str(cls), "--subjects", str(subj), "--out", str(clicks)]
        + extract_args(cfg)
    )
    assert rc == 0
    box_side = str(exp["box_side"])
    assert box_side == "auto"
    assert (
        cli_main(
            [
                "subjects",
                "--subjects-export",
                str(subj),
                "--box-side",
                box_side,
                "--out",
                str(subjects),
            ]
        )
        == 0
    )
    assert cli_main(
        ["boxes", "--clicks", str(clicks), "--subjects", str(subjects), "--out", str(boxes),
         "--shape-extent", exp["shape_extent"]]
    ) == 0  # fmt: skip
    report = json.loads((tmp_path / "b_report.json").read_text())
    side = report["box_side"]["auto"]
    assert side["box_side_px"] == pytest.approx(25.03, abs=0.05)  # measured 25.026
    assert report["image_size_source"]["clicks"] == 50  # 1000 x 750 from subject_dimensions
    assert cli_main(
        ["aggregate", "--boxes", str(boxes), "--out", str(agg),
         "--config", str(EXAMPLES / "penguin_watch.yaml")]
    ) == 0  # fmt: skip
    labels = pd.read_parquet(agg / "labels.parquet")
    ref, subject_ids = reference_clusters(shared)
    assert len(subject_ids) == 50 and len(ref) == 1059
    every = agreement(labels, ref, subject_ids, radius=side["fwhm_px"])
    four = agreement(labels[labels["n_marks"] >= 4], ref, subject_ids, radius=side["fwhm_px"])
    print("every label:", every, "\nn_marks >= 4:", four)
    assert every["correlation"] >= 0.80
    assert every["reference_found"] >= 0.85
    assert four["correlation"] >= 0.90
    assert four["equal"] >= 0.10
    assert four["within_one"] >= 0.35


# --------------------------------------------------------------------------- flattened clicks

#: the objects of resources/examples/flat_clicks.csv: subject -> object centres (px)
FLAT_OBJECTS = {
    101: [],
    102: [(150.0, 100.0)],
    103: [(100.0, 300.0), (450.0, 120.0)],
    104: [(60.0, 60.0), (300.0, 200.0), (520.0, 340.0)],
}
FLAT_SIZE = (600, 400)


def flat_table(seed: int = 7) -> pd.DataFrame:
    """The flattened clicks table of the example: 8 volunteers (v0..v7) see every subject;
    each marks each object with a Gaussian scatter of 3 px per axis except v7, who misses
    every object; v6 also clicks once at random on every subject; a classification with no
    click is one row with empty x, y."""
    rng = np.random.default_rng(seed)
    rows, cid = [], 1000
    for sid, objects in FLAT_OBJECTS.items():
        for v in range(8):
            cid += 1
            marks = [] if v == 7 else [(x, y) for x, y in objects]
            marks = [(x + rng.normal(0, 3.0), y + rng.normal(0, 3.0)) for x, y in marks]
            if v == 6:
                marks.append(tuple(rng.uniform((0, 0), FLAT_SIZE)))
            for x, y in marks or [(np.nan, np.nan)]:
                rows.append((cid, sid, f"v{v}", round(x, 2), round(y, 2), *FLAT_SIZE))
    return pd.DataFrame(
        rows,
        columns=["classification_id", "subject_id", "volunteer", "x", "y"]
        + ["image_width", "image_height"],
    )


def test_flat_clicks_csv_is_the_generated_table():
    """resources/examples/flat_clicks.csv is :func:`flat_table` (regenerate it with
    ``flat_table().to_csv(path, index=False)`` when that changes)."""
    on_disk = pd.read_csv(EXAMPLES / "flat_clicks.csv")
    pd.testing.assert_frame_equal(on_disk, flat_table(), check_dtype=False)


@pytest.mark.slow
def test_flat_clicks_example_finds_the_objects(tmp_path):
    """boxes (no subjects table, the example's box side, image size from the table) ->
    aggregate: one label with p_fp <= 0.5 per object and none else (v6's random clicks
    are not labels), each the mean of the 7 clicks on its object."""
    cfg = load("flat_clicks.yaml")
    table = REPO / cfg["export"]["clicks"]
    assert table == EXAMPLES / "flat_clicks.csv"
    boxes, agg = tmp_path / "b.parquet", tmp_path / "agg"
    assert cli_main(
        ["boxes", "--clicks", str(table), "--box-side", str(cfg["export"]["box_side"]),
         "--out", str(boxes)]
    ) == 0  # fmt: skip
    report = json.loads((tmp_path / "b_report.json").read_text())
    assert report["image_size_source"]["clicks"] == 4 and report["clicks_outside_image"] == 0
    # boxes: v0..v6 mark the 0 + 1 + 2 + 3 objects, plus v6's 4 random clicks; empty: v7 on
    # the 4 subjects and v0..v5 on subject 101 (no object)
    assert report["boxes"] == 7 * 6 + 4 and report["empty_classifications"] == 4 + 6
    assert cli_main(
        ["aggregate", "--boxes", str(boxes), "--out", str(agg),
         "--config", str(EXAMPLES / "flat_clicks.yaml")]
    ) == 0  # fmt: skip
    labels = pd.read_parquet(agg / "labels.parquet")
    kept = labels[labels["p_fp"] <= 0.5]
    clicks = pd.read_csv(table)
    for sid, objects in FLAT_OBJECTS.items():
        mine = kept[kept["subject_id"] == sid][["x", "y"]].to_numpy()
        assert len(mine) == len(objects), (sid, mine)
        mark = clicks[clicks["subject_id"] == sid]
        for ox, oy in objects:
            # the label is the mean box of the 7 clicks on the object (decisions.md#label-box),
            # whose centre is within 5 px of the object (3 px / sqrt(7) = 1.1 px per axis)
            near = mark[np.hypot(mark["x"] - ox, mark["y"] - oy) < 15]
            assert len(near) == 7
            d = np.hypot(mine[:, 0] - near["x"].mean(), mine[:, 1] - near["y"].mean())
            assert d.min() < 1e-6, (sid, ox, oy, d)
            assert np.hypot(near["x"].mean() - ox, near["y"].mean() - oy) <= 5.0
