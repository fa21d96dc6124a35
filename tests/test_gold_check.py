"""The gold standard checked against the volunteers (clumpscout.model.gold_check,
docs/decisions.md#gold-checks): figures by hand on toys, frames by hand, and the acceptance
cases on a small simulated universe (none, correct, y flipped, random positions, half of
the expert objects dropped, x and y swapped, ×0.5)."""

from __future__ import annotations

import copy
import logging
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from clumpscout.data.gold import GoldFrame, gold_from_table, read_gold
from clumpscout.errors import InputError
from clumpscout.model import gold_check as gc


def _box(x, y, half=5.0):
    return {"x1": x - half, "y1": y - half, "x2": x + half, "y2": y + half}


# ------------------------------------------------------------------ figures by hand
def test_figures_by_hand_on_a_toy():
    """Subject 1 (10 viewers): A marked by 10, B by 9, C by 2; experts at A, at C and at
    (80, 80) where nobody marked. Subject 2 (10 viewers): D marked by 10, experts found it
    empty. Subject 3 (4 viewers): E marked by all 4 (too few marks to be strong); expert at
    E. Strong labels (too few for 90 % or 80 %: the 70 % cut): A, B, D; matched: A only.
    Expert objects: 4; unmarked: (80, 80) only."""
    labels = pd.DataFrame(
        [
            {"subject_id": 1, "n_marks": 10, **_box(5, 5)},  # A
            {"subject_id": 1, "n_marks": 9, **_box(25, 25)},  # B
            {"subject_id": 1, "n_marks": 2, **_box(45, 45)},  # C
            {"subject_id": 2, "n_marks": 10, **_box(5, 5)},  # D
            {"subject_id": 3, "n_marks": 4, **_box(5, 5)},  # E
        ]
    )
    viewers = pd.Series({1: 10, 2: 10, 3: 4})
    gold = gold_from_table(
        pd.DataFrame(
            {
                "subject_id": [1, 1, 1, 2, 3],
                "x": [5, 45, 80, np.nan, 5],
                "y": [5, 45, 80, np.nan, 5],
            }
        )
    )
    a = gc.gold_agreement(labels, gold, viewers)
    g = a.given
    assert (g.strong, g.strong_matched, g.experts, g.experts_unmarked) == (3, 1, 4, 1)
    assert a.strong_share == 0.7  # no cut reaches MIN_STRONG labels: the last
    assert a.verdict == "not judged" and a.ok
    assert (a.gold_subjects, a.subjects_checked, a.subjects_absent) == (3, 3, 0)


def test_two_strong_labels_on_one_expert_object_match_once():
    labels = pd.DataFrame(
        [
            {"subject_id": 1, "n_marks": 10, **_box(10, 10)},
            {"subject_id": 1, "n_marks": 10, **_box(12, 12)},
        ]
    )
    gold = gold_from_table(pd.DataFrame({"subject_id": [1], "x": [11.0], "y": [11.0]}))
    g = gc.gold_agreement(labels, gold, pd.Series({1: 10})).given
    assert (g.strong, g.strong_matched, g.experts_unmarked) == (2, 1, 0)


def test_counts_figures_are_their_bounds_by_hand():
    """Subject 1: 3 strong labels, count 1 -> at most 1 matched; subject 2: 1 weak label,
    count 3 -> at least 2 unmarked; subject 3: absent from the classifications."""
    labels = pd.DataFrame(
        [
            *({"subject_id": 1, "n_marks": 10, **_box(10 * k, 10)} for k in range(1, 4)),
            {"subject_id": 2, "n_marks": 1, **_box(10, 10)},
        ]
    )
    gold = gold_from_table(pd.DataFrame({"subject_id": [1, 2, 3], "count": [1, 3, 0]}))
    a = gc.gold_agreement(labels, gold, pd.Series({1: 10, 2: 10}))
    g = a.given
    assert (g.strong, g.strong_matched, g.experts, g.experts_unmarked) == (3, 1, 4, 2)
    assert a.frames == () and (a.subjects_checked, a.subjects_absent) == (2, 1)


def _grid(n_subjects=40, flip=None, keep=1.0, seed=0):
    """n subjects of 10 viewers, each with two labels all 10 marked at (30, 40), (70, 20)
    on a 100 px image; the gold at the same places (``flip``: y -> flip - y; ``keep``:
    the share of subjects whose experts marked the second object)."""
    rng = np.random.default_rng(seed)
    labels, gold = [], []
    for s in range(1, n_subjects + 1):
        for k, (x, y) in enumerate(((30.0, 40.0), (70.0, 20.0))):
            labels.append({"subject_id": s, "n_marks": 10, **_box(x, y)})
            if k == 0 or rng.random() < keep:
                gold.append({"subject_id": s, "x": x, "y": y if flip is None else flip - y})
    return (
        pd.DataFrame(labels),
        gold_from_table(pd.DataFrame(gold)),
        pd.Series(10, range(1, n_subjects + 1)),
    )


def test_a_flipped_toy_is_implausible_and_the_flip_is_named():
    """All 80 strong labels are matched as given; flipped about 100, none is (their mirror
    images lie in no label: y 60 and 80), so every expert object is unmarked, and y -> 100 − y
    puts them all back."""
    labels, gold, viewers = _grid()
    ok = gc.gold_agreement(labels, gold, viewers)
    assert ok.verdict == "ok" and ok.given.matched_share == 1.0 and ok.messages == ()
    labels, flipped, viewers = _grid(flip=100.0)
    a = gc.gold_agreement(labels, flipped, viewers)
    assert (a.given.strong, a.given.strong_matched, a.given.experts_unmarked) == (80, 0, 80)
    assert a.verdict == "implausible"
    assert a.likely is not None and a.likely.frame == GoldFrame(flip_y=100.0)
    assert (a.likely.strong_matched, a.likely.experts_unmarked) == (80, 0)
    assert "y axis looks flipped" in a.messages[0] and "y → 100 − y" in a.messages[0]
    assert "gold.frame: {flip_y: 100}" in a.messages[0]
    with pytest.raises(InputError) as e:
        gc.apply_policy(a, "stop")
    assert "gold.on_implausible: warn" in e.value.message and "\n" not in str(e.value)
    assert gc.apply_policy(a, "warn") == list(a.messages)


def test_experts_who_skip_half_the_strong_objects_give_an_incomplete_warning():
    """The second object marked on none of the subjects: 40 of 80 strong labels matched
    (50 % < 65 %), no expert object unmarked: a warning, never a stop."""
    labels, gold, viewers = _grid(keep=0.0)
    a = gc.gold_agreement(labels, gold, viewers)
    assert (a.given.strong_matched, a.given.experts_unmarked) == (40, 0)
    assert a.verdict == "incomplete" and a.likely is None
    assert "left many strongly marked objects unmarked" in a.messages[0]
    assert gc.apply_policy(a, "stop") == list(a.messages)  # warns, even with stop


def test_wrong_subject_ids_are_named():
    labels, gold, _ = _grid(n_subjects=10)
    a = gc.gold_agreement(labels, gold, pd.Series(10, range(1, 4)))  # 7 of 10 never classified
    assert a.subjects_absent == 7
    assert any("7 of its 10 subjects have no classifications" in m for m in a.messages)


def test_labels_may_carry_their_viewers():
    labels, gold, viewers = _grid(n_subjects=5)
    a = gc.gold_agreement(labels.assign(n_viewers=10), gold)
    b = gc.gold_agreement(labels, gold, viewers)
    assert a.given == b.given


# ------------------------------------------------------------------ frames by hand
def test_frame_moves_points_and_boxes_by_hand():
    f = GoldFrame(swap_xy=True, flip_y=100.0, scale=2.0, offset_x=1.0, offset_y=-1.0)
    pts = f.apply(pd.DataFrame({"subject_id": [1], "x": [10.0], "y": [20.0]}))
    # swap (20, 10), flip (20, 90), scale (40, 180), shift (41, 179)
    assert pts[["x", "y"]].to_numpy().tolist() == [[41.0, 179.0]]
    box = pd.DataFrame({"subject_id": [1], "x1": [10.0], "y1": [20.0], "x2": [14.0], "y2": [30.0]})
    b = GoldFrame(flip_y=100.0).apply(box.assign(x=12.0, y=25.0), "box")
    assert b[["x1", "y1", "x2", "y2", "x", "y"]].to_numpy().tolist() == [[10, 70, 14, 80, 12, 75]]
    assert GoldFrame().describe() == "as given"
    assert GoldFrame(scale=2.0).describe() == "x, y → 2x, 2y"


def test_read_gold_applies_the_declared_frame(tmp_path):
    p = tmp_path / "gold.csv"
    p.write_text("subject_id,x,y\n1,10,20\n2,,\n")
    g = read_gold(p, frame={"flip_y": 400}, on_implausible="warn")
    assert g.marks[["x", "y"]].to_numpy().tolist() == [[10.0, 380.0]]
    assert g.frame == GoldFrame(flip_y=400.0) and g.on_implausible == "warn"
    assert list(g.counts) == [1, 0]
    q = tmp_path / "counts.csv"
    q.write_text("subject_id,count\n1,2\n")
    with pytest.raises(InputError, match="counts, not positions"):
        read_gold(q, frame={"swap_xy": True})
    with pytest.raises(InputError, match="on_implausible"):
        read_gold(p, on_implausible="ignore")


def test_a_plain_gold_value_is_short_for_its_table():
    from clumpscout import config

    for value, table in (("experts", "experts"), ("my.csv", "my.csv"), (None, None)):
        cfg = {"gold": value}
        config.problems(cfg)
        assert cfg["gold"]["table"] == table
        assert cfg["gold"]["on_implausible"] == "stop" and cfg["gold"]["frame"]["flip_y"] is None


# ------------------------------------------------------------------ a simulated universe
def _regimes():
    from benchmarks import regimes

    return regimes


@pytest.fixture(scope="module")
def universe(tmp_path_factory):
    """300 subjects of the paper regime, ~20 volunteers each, experts on every subject;
    the gold standard is a seeded 200 of them, as in the regime grid."""
    from clumpscout.model.aggregator import Aggregator
    from clumpscout.model.params import Params

    r = _regimes()
    cfg = copy.deepcopy(r.regime_config("paper"))
    cfg["simulate"].update(n_subjects=300, n_expert_subjects=300)
    work = tmp_path_factory.mktemp("gold_check")
    boxes, _ = r.build_subsample(cfg, 7, 20, work / "u", r.Timer("gold_check"), "")
    experts = r.expert_gold(cfg, work / "u", boxes)
    gold = experts.restrict(np.random.default_rng(0).permutation(experts.subjects)[:200])
    params = Params.from_dict(cfg["aggregate"])
    fit = Aggregator(params, seed=1).fit(boxes)
    return {"boxes": boxes, "gold": gold, "params": params, "fit": fit, "work": work}


def _broken(gold, how: str, seed: int = 0):
    """The gold's marks moved as a user's mistake would (400 x 400 subject images)."""
    m = gold.marks[["subject_id", "x", "y"]]
    rng = np.random.default_rng(seed)
    moved = {
        "correct": m,
        "y flipped": m.assign(y=400.0 - m["y"]),
        "random positions": m.assign(x=rng.uniform(0, 400, len(m)), y=rng.uniform(0, 400, len(m))),
        "half dropped": m.iloc[rng.permutation(len(m))[: len(m) // 2]],
        "x/y swapped": m.assign(x=m["y"], y=m["x"]),
        "x0.5": m.assign(x=0.5 * m["x"], y=0.5 * m["y"]),
    }[how]
    return gold.with_marks(moved)


@pytest.mark.parametrize(
    "how, verdict, named",
    [
        ("correct", "ok", None),
        ("y flipped", "implausible", "y flipped"),
        ("random positions", "implausible", None),
        ("half dropped", "incomplete", None),
        ("x/y swapped", "implausible", "x and y swapped"),
        ("x0.5", "implausible", "scaled ×2"),
    ],
)
def test_acceptance_cases_on_a_simulated_universe(universe, how, verdict, named):
    fit = universe["fit"]
    a = gc.gold_agreement(fit.labels_, _broken(universe["gold"], how), gc.viewers_of(fit.subjects_))
    assert a.verdict == verdict, a.to_dict()
    assert (a.likely.name if a.likely else None) == named
    if named == "y flipped":
        assert a.likely.frame.flip_y == pytest.approx(400, abs=3)
    if verdict == "ok":
        assert a.messages == ()
        assert a.given.judged_matched and a.given.judged_unmarked  # judged, not skipped
    elif verdict == "incomplete":
        assert "left many strongly marked objects unmarked" in a.messages[0]
    elif named is None:
        assert "no frame tried" in a.messages[0]


def test_the_aggregator_stops_on_a_broken_gold_before_the_map_is_fitted(universe, tmp_path):
    from clumpscout.model.aggregator import Aggregator

    path = tmp_path / "flipped.csv"
    _broken(universe["gold"], "y flipped").marks[["subject_id", "x", "y"]].to_csv(path, index=False)
    gold = read_gold(path)
    with pytest.raises(InputError) as e:
        Aggregator(universe["params"], seed=1).fit(universe["boxes"], gold=gold)
    assert e.value.path == str(path) and "y axis looks flipped" in e.value.message


def test_with_warn_the_run_goes_on_and_says_so(universe, caplog):
    from clumpscout.model.aggregator import Aggregator

    gold = _broken(universe["gold"], "y flipped")
    gold = gold_from_table(
        gold.marks[["subject_id", "x", "y"]], "flipped.csv", on_implausible="warn"
    )
    with caplog.at_level(logging.WARNING, logger="clumpscout"):
        agg = Aggregator(universe["params"], seed=1).fit(universe["boxes"], gold=gold)
    check = agg.report_["calibration"]["gold_check"]
    assert check["verdict"] == "implausible" and check["on_implausible"] == "warn"
    assert check["likely_frame"]["transform"].startswith("y → ")
    assert any("flipped.csv" in w and "y axis looks flipped" in w for w in agg.report_["warnings"])
    assert any(
        r.getMessage().startswith("RUN HEALTH WARNING: the gold standard") for r in caplog.records
    )


def test_a_sound_gold_passes_the_aggregator_without_a_warning(universe):
    from clumpscout.model.aggregator import Aggregator

    agg = Aggregator(universe["params"], seed=1).fit(universe["boxes"], gold=universe["gold"])
    check = agg.report_["calibration"]["gold_check"]
    assert check["verdict"] == "ok" and check["warnings"] == []
    assert not any("gold standard" in w for w in agg.report_["warnings"])
    none = universe["fit"].report_
    assert "gold_check" not in none["calibration"]


def test_the_replay_checks_a_gold_given_with_ready_labels(universe):
    from clumpscout.evaluation import replay as rp

    with pytest.raises(InputError, match="does not agree with the volunteers"):
        rp.replay(
            universe["boxes"],
            universe["params"],
            rp.Settings.from_dict({}),
            full_labels=universe["fit"].labels_,
            gold=_broken(universe["gold"], "x/y swapped"),
        )


@pytest.mark.slow  # a subprocess that imports and compiles the aggregation (~20 s)
def test_cli_exits_2_with_one_line_and_writes_nothing(universe):
    work = universe["work"]
    universe["boxes"].to_parquet(work / "boxes.parquet")
    broken = work / "broken.csv"
    _broken(universe["gold"], "random positions").marks[["subject_id", "x", "y"]].to_csv(
        broken, index=False
    )
    out = work / "out"
    r = subprocess.run(
        [sys.executable, "-m", "clumpscout", "aggregate", "--boxes", str(work / "boxes.parquet"),
         "--out", str(out), "--gold", str(broken)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 2
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and str(broken) in err[0] and "no frame tried" in err[0]
    assert not out.exists()


# ------------------------------------------------------------------ the reports
def _report_json(path, check):
    import json

    path.write_text(json.dumps({"calibration": {"gold_check": check}}))
    return path


def test_the_reports_show_the_agreement_table_and_the_warnings_on_top(tmp_path):
    from clumpscout.figures.gold import write_gold_agreement
    from clumpscout.report.html import read_warnings, render

    labels, flipped, viewers = _grid(flip=100.0)
    a = gc.gold_agreement(labels, flipped, viewers)
    warned = a.to_dict() | {"warnings": gc.apply_policy(a, "warn")}
    labels, gold, viewers = _grid()
    ok = gc.gold_agreement(labels, gold, viewers).to_dict() | {"warnings": []}
    reports = [_report_json(tmp_path / f"r{n}.json", c) for n, c in ((5, warned), (20, ok))]
    out = {k: tmp_path / f"agreement.{k}" for k in ("html", "csv", "json")}
    doc = write_gold_agreement(reports, [5, 20], 20, out["html"], out["csv"], out["json"])
    table = pd.read_csv(out["csv"])
    assert table["frame"].iloc[0] == "as given" and table["note"].iloc[0] == "as given: ok"
    assert table["strong labels matched"].iloc[0] == "80 of 80 (100%)"
    assert doc["warnings"] == ["The gold check also warned at n = 5."]
    assert read_warnings(out["json"]) == doc["warnings"]
    assert "80 of 80 (100%)" in out["html"].read_text()
    # at n = 5 the flip is named in the table
    doc5 = write_gold_agreement(reports, [5, 20], 5, out["html"], out["csv"], out["json"])
    t5 = pd.read_csv(out["csv"]).set_index("frame")
    assert t5.loc["y flipped: y → 100 − y", "note"] == "named as the likely cause"
    assert t5.loc["as given", "expert objects unmarked"] == "80 of 80 (100%)"
    assert len(doc5["warnings"]) == 1 and "y axis looks flipped" in doc5["warnings"][0]
    page = render([], "", "t", doc5["warnings"])
    assert page.index("</h1>") < page.index('class="warnings"') < page.index("<nav>")
    assert "Run health warnings" in page and "y axis looks flipped" in page
    assert 'class="warnings"' not in render([], "", "t")


def test_the_project_report_has_a_gold_section_and_its_warnings_on_top(tmp_path):
    from clumpscout.report import project
    from clumpscout.report.html import render_project

    labels, gold, viewers = _grid(keep=0.0)
    a = gc.gold_agreement(labels, gold, viewers)
    report = _report_json(tmp_path / "report.json", a.to_dict() | {"warnings": list(a.messages)})
    doc = project.build("gold_agreement", {"report": str(report)}, tmp_path / "gold", {"dpi": 50})
    assert doc["verdict"] == "incomplete" and doc["warnings"] == list(a.messages)
    table = pd.read_csv(tmp_path / "gold.csv")
    assert table["strong labels matched"].iloc[0] == "40 of 80 (50%)"
    page = render_project([doc | {"png": str(tmp_path / "gold.png")}], "t", [], {})
    assert "left many strongly marked objects unmarked" in page.split("<nav>")[0]
