"""The service retires every subject where ``clumpscout replay`` does: fed the same
classifications in the same order (created_at), with refits at the same points (in line,
``serve.refit: sync``), the same policy and setting.

* Penguin Watch (the real export, 497 classifications of 50 subjects): the replay on the
  boxes of ``clumpscout extract`` / ``subjects`` / ``boxes``; the service fed
  panoptes-aggregation's own extracts (its reference outputs, point_extractor_by_frame
  3.4.5) the way Caesar sends them.
* A simulated point-marking project (40 subjects, 416 classifications): the replay on the
  boxes of its export; the service fed the extracts panoptes-aggregation's
  point_extractor_by_frame makes of the same export (tests/caesar_feed.py).

The volunteers are those Caesar knows (the user id; a volunteer who is not logged in is
their classification's own), for the replay too.
"""

from __future__ import annotations

import copy

import pandas as pd
import pytest
from caesar_feed import (
    PENGUIN,
    boxes_as_caesar_sees_them,
    export_extracts,
    feed,
    penguin_extracts,
)
from starlette.testclient import TestClient

from clumpscout.cli import main as cli_main
from clumpscout.evaluation import replay as rp
from clumpscout.service import settings as ss
from clumpscout.service.app import Credential, Service, build_app

AUTH = ("caesar", "pw")


def compare(cfg: dict, boxes: pd.DataFrame, extracts: list[dict], db) -> pd.DataFrame:
    """(subject, service's retirement point, replay's, classifications) for one policy."""
    cfg = ss.check(copy.deepcopy(cfg))
    s = ss.from_config(cfg)
    run = rp.run_replay(boxes, s.params, rp.Settings.from_dict(cfg["replay"]))
    want = rp.retirement_points(run, s.policy, s.params).set_index("subject_id")
    with TestClient(build_app(Service(s, db, Credential(*AUTH)))) as c:

        def post(ex):
            r = c.post("/reduce", json=ex, auth=AUTH)
            assert r.status_code == 200, r.text
            return r.json()

        last = feed(post, extracts)
    got = pd.Series({k: v["retired_at"] or v["classifications"] for k, v in last.items()})
    return pd.DataFrame({"service": got, "replay": want["n_used"], "n": want["n_total"]})


PENGUIN_CONFIG = {
    "export": {"box_side": 25, "image_size": [1000, 750], "workflow_id": 6465},
    "extract": {"clump_task": "T0", "tools": [0], "unusual_tools": []},
    "replay": {"refit_every": 100, "horizon": 10, "caesar_cap": 10},
    "serve": {"refit": "sync"},
}


@pytest.mark.slow
@pytest.mark.shared
@pytest.mark.parametrize(
    "policy, setting, early", [("generative", 0.5, 41)]
)  # risk 5: 40 early, equal too
def test_penguin_watch_retires_where_the_replay_does(shared, tmp_path, policy, setting, early):
    exp = shared / PENGUIN
    clicks, subjects, boxes = (tmp_path / n for n in ("c.parquet", "s.parquet", "b.parquet"))
    ok = cli_main(
        ["extract", "--classifications", str(exp / "penguin-watch-classifications-trim.csv"),
         "--subjects", str(exp / "penguin-watch-subjects-trim.csv"), "--out", str(clicks),
         "--workflow-id", "6465", "--workflow-version", "52.76", "--clump-task", "T0",
         "--unusual-tools", "--tools", "0"]
    )  # fmt: skip
    ok |= cli_main(["subjects", "--subjects-export", str(exp / "penguin-watch-subjects-trim.csv"),
                    "--box-side", "25", "--out", str(subjects)])  # fmt: skip
    ok |= cli_main(
        ["boxes", "--clicks", str(clicks), "--subjects", str(subjects), "--out", str(boxes)]
    )
    assert ok == 0
    b = boxes_as_caesar_sees_them(pd.read_parquet(boxes))
    assert set(b["image_width"]) == {1000} and set(b["image_height"]) == {750}
    extracts = penguin_extracts(shared)
    assert len(extracts) == b["classification_id"].nunique() == 497
    cfg = copy.deepcopy(PENGUIN_CONFIG)
    cfg["serve"].update(policy=policy, setting=setting)
    d = compare(cfg, b, extracts, tmp_path / "s.db")
    assert int((d["replay"] < d["n"]).sum()) == early  # retired early, across the refits
    assert d["service"].tolist() == d["replay"].tolist(), d[d["service"] != d["replay"]]


@pytest.mark.slow
def test_a_simulated_project_retires_where_the_replay_does(tmp_path):
    (tmp_path / "sim.yaml").write_text(
        "simulate:\n  n_subjects: 40\n  n_expert_subjects: 0\n  kind: counting\n"
        "  counting: {volunteers_min: 8, volunteers_max: 12}\n"
    )
    sim, clicks, boxes = tmp_path / "sim", tmp_path / "c.parquet", tmp_path / "b.parquet"
    ok = cli_main(
        ["simulate", "--config", str(tmp_path / "sim.yaml"), "--out", str(sim), "--seed", "3"]
    )
    ok |= cli_main(["extract", "--classifications", str(sim / "classifications.csv"), "--subjects",
                    str(sim / "subjects_export.csv"), "--out", str(clicks), "--clump-task", "T0",
                    "--unusual-tools"])  # fmt: skip
    ok |= cli_main(["boxes", "--clicks", str(clicks), "--box-side", "12", "--out", str(boxes)])
    assert ok == 0
    b = boxes_as_caesar_sees_them(pd.read_parquet(boxes))
    extracts = export_extracts(sim / "classifications.csv", "T0", keep=b["classification_id"])
    assert len(extracts) == b["classification_id"].nunique() == 416
    cfg = {
        "export": {"box_side": 12, "image_size": [800, 600]},
        "extract": {"clump_task": "T0", "unusual_tools": []},
        "replay": {"refit_every": 100, "horizon": 12, "caesar_cap": 12},
        "serve": {"refit": "sync", "policy": "generative", "setting": 0.1},
    }
    d = compare(cfg, b, extracts, tmp_path / "s.db")
    assert int((d["replay"] < d["n"]).sum()) == 24
    assert d["service"].tolist() == d["replay"].tolist(), d[d["service"] != d["replay"]]


@pytest.mark.slow
def test_with_a_gold_standard_the_label_map_is_learned_as_in_the_replay(tmp_path):
    """The toy project in blocks of 5 subjects with expert marks on its first 15 (the
    object at (30, 30) counts, the one at (70, 60) does not): the service learns the same
    label maps at the same ranks as the replay (the first once 10 gold subjects are
    complete, after 100 classifications; the second after 131), never retires a gold subject early, and retires the others where the replay
    does; after a restart it fits the same maps again from its database."""
    from caesar_feed import TOY_CONFIG, toy_boxes, toy_extracts

    from clumpscout.data.gold import gold_from_table

    gold_ids = list(range(100, 115))
    gold_path = tmp_path / "gold.csv"
    pd.DataFrame({"subject_id": gold_ids, "x": 30.0, "y": 30.0}).to_csv(gold_path, index=False)
    extracts = toy_extracts(block=5)
    cfg = copy.deepcopy(TOY_CONFIG) | {"gold": str(gold_path)}
    cfg["serve"]["setting"] = 0.2
    cfg = ss.check(cfg)
    s = ss.from_config(cfg)
    gold = gold_from_table(pd.read_csv(gold_path))
    run = rp.run_replay(toy_boxes(extracts), s.params, rp.Settings.from_dict(cfg["replay"]), gold=gold,
                        calibration=s.calibration)  # fmt: skip
    want = rp.retirement_points(run, s.policy, s.params).set_index("subject_id")
    assert len(run.maps) >= 1
    db = tmp_path / "s.db"
    with TestClient(build_app(Service(s, db, Credential(*AUTH)))) as c:
        last = feed(lambda ex: c.post("/reduce", json=ex, auth=AUTH).json(), extracts)
    got = pd.Series({k: v["retired_at"] or v["classifications"] for k, v in last.items()})
    assert got.sort_index().tolist() == want["n_used"].sort_index().tolist()
    assert (want.loc[gold_ids, "n_used"] == want.loc[gold_ids, "n_total"]).all()
    assert (want["n_used"] < want["n_total"]).sum() == 13  # after the first map, at g 100
    assert {r["label_map"] for r in last.values()} == {"default", "gold 2"}  # before, after
    assert not any("warnings" in r for r in last.values())  # the gold passed its checks
    service = Service(s, db, Credential(*AUTH))  # a restart: the maps again, from the file
    try:
        assert service.engine.timeline.G == run.map_after.tolist()
    finally:
        service.stop()
