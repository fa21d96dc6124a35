"""Feeding the service the way Caesar feeds it (tests and benchmarks/serve_load.py).

* :func:`penguin_extracts`: the Penguin Watch export's extracts as panoptes-aggregation made
  them (its reference outputs, ``point_extractor_by_frame`` of version 3.4.5), as Caesar
  sends them;
* :func:`point_extractor_by_frame`: panoptes-aggregation's own extractor of that name
  (zooniverse/aggregation-for-caesar, ``panoptes_aggregation/extractors/
  point_extractor_by_frame.py`` with its ``tool_wrapper``; Apache License 2.0, copyright the
  Zooniverse), copied here because the package pins numpy < 2.3 and pandas < 3 and cannot
  be installed beside ours: it turns a simulated export's annotations into extracts;
* :func:`feed`: every extract in ``classification_at`` order, each POST carrying its
  subject's extracts so far (Caesar's default reduction); a retired subject can be left out.
"""

from __future__ import annotations

import csv
import json
from collections import OrderedDict
from pathlib import Path

import pandas as pd

PENGUIN = Path("data/zooniverse_exports/penguin_watch")


def point_extractor_by_frame(classification: dict, task: str = "all", tools=None) -> dict:
    """panoptes-aggregation's ``point_extractor_by_frame`` (with ``tool_wrapper`` and the
    wrapper's task selection; the version key as its extractor_wrapper appends it)."""
    annotations = [a for a in classification["annotations"] if task == "all" or a["task"] == task]
    if tools is not None:
        for a in annotations:
            a["value"] = [v for v in a["value"] if v.get("tool") in tools]
    extract = OrderedDict()
    for annotation in annotations:
        task_key = annotation["task"]
        for _, value in enumerate(annotation["value"]):
            frame = f"frame{value['frame']}"
            extract.setdefault(frame, {})
            key = f"{task_key}_tool{value['tool']}"
            if ("x" in value) and ("y" in value):
                extract[frame].setdefault(f"{key}_x", []).append(value["x"])
                extract[frame].setdefault(f"{key}_y", []).append(value["y"])
    extract["aggregation_version"] = "5.3.1"
    return extract


def caesar_extract(
    cid, subject_id, user_id, at, data, key="point_extractor_by_frame", workflow_id=None
):
    """An extract as Caesar's ``Extract#as_json`` serialises it."""
    at = pd.Timestamp(at, tz="UTC") if pd.Timestamp(at).tzinfo is None else pd.Timestamp(at)
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return {
        "id": int(cid), "classification_id": int(cid), "classification_at": stamp,
        "extractor_key": key, "workflow_id": workflow_id, "user_id": user_id,
        "subject_id": int(subject_id), "data": data, "created_at": stamp, "updated_at": stamp,
        "project_id": None, "workflow_version": None, "machine_data": False,
        "relevant_reduction": None,
    }  # fmt: skip


def penguin_extracts(shared: Path) -> list[dict]:
    """The reference extracts of the Penguin Watch export as Caesar would send them."""
    path = shared / PENGUIN / "reference_panoptes_3.4.5" / "point_extractor_by_frame_example.csv"
    out = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            frame = {}
            for k, v in r.items():
                if k.startswith("data.frame0.") and v:
                    frame[k.removeprefix("data.frame0.")] = json.loads(v)
            data = {"frame0": frame} if frame else {}
            data["aggregation_version"] = r["data.aggregation_version"]
            uid = int(float(r["user_id"])) if r["user_id"] else None
            at = pd.Timestamp(r["created_at"].replace(" UTC", ""), tz="UTC")
            out.append(
                caesar_extract(
                    r["classification_id"],
                    r["subject_id"],
                    uid,
                    at,
                    data,
                    workflow_id=int(r["workflow_id"]),
                )
            )
    return out


def export_extracts(classifications_csv: Path, task: str, tools=None, keep=None) -> list[dict]:
    """Extracts of a (simulated) classification export by :func:`point_extractor_by_frame`;
    ``keep``: the classification ids to keep (those ``clumpscout extract`` kept)."""
    df = pd.read_csv(classifications_csv, dtype={"user_id": "Int64"})
    if keep is not None:
        df = df[df["classification_id"].isin(set(keep))]
    out = []
    for r in df.itertuples(index=False):
        data = point_extractor_by_frame({"annotations": json.loads(r.annotations)}, task, tools)
        uid = None if pd.isna(r.user_id) else int(r.user_id)
        at = pd.Timestamp(r.created_at.replace(" UTC", ""), tz="UTC")
        out.append(
            caesar_extract(
                r.classification_id, r.subject_ids, uid, at, data, workflow_id=int(r.workflow_id)
            )
        )
    return out


def in_order(extracts: list[dict]) -> list[dict]:
    """Arrival order: classification_at, then classification_id (the replay's)."""
    return sorted(
        extracts, key=lambda e: (pd.Timestamp(e["classification_at"]), e["classification_id"])
    )


def feed(post, extracts: list[dict], skip_retired: bool = False) -> dict:
    """POST each extract in arrival order with its subject's earlier extracts (Caesar's
    default reduction) through ``post(list_of_extracts) -> reply dict``; the last reply per
    subject. ``skip_retired``: a retired subject gets no more (Caesar stops sending)."""
    so_far: dict[int, list] = {}
    last: dict[int, dict] = {}
    for e in in_order(extracts):
        sid = e["subject_id"]
        if skip_retired and last.get(sid, {}).get("retire"):
            continue
        so_far.setdefault(sid, []).append(e)
        last[sid] = post(so_far[sid])
    return last


def boxes_as_caesar_sees_them(boxes: pd.DataFrame) -> pd.DataFrame:
    """A boxes table with the volunteers Caesar knows: the user id, or the classification's
    own anonymous volunteer (clumpscout.service.extracts.volunteer_name)."""
    from clumpscout.service.extracts import volunteer_name

    uid = boxes["user_id"].astype("Int64")
    names = [
        volunteer_name(None if pd.isna(u) else int(u), int(c))
        for u, c in zip(uid, boxes["classification_id"], strict=True)
    ]
    return boxes.assign(volunteer=pd.array(names, dtype="str"))


#: the config of :func:`toy_extracts` (service and replay alike)
TOY_CONFIG = {
    "export": {"box_side": 10, "image_size": [100, 100]},
    "extract": {"clump_task": "T0", "tools": [0, 1], "unusual_tools": [1]},
    "replay": {"refit_every": 100, "horizon": 10, "caesar_cap": 10},
    "serve": {"refit": "sync", "policy": "generative", "setting": 0.02},
}


def toy_extracts(n_subjects=30, n_cls=10, seed=0, block=None) -> list[dict]:
    """Subjects of 100 x 100 px with two objects, classified in round-robin order; each
    volunteer marks each object with probability 0.7 (scatter 1 px; tool 1, unusual, now and
    then), submits nothing with probability 0.3, or adds a false mark; a fifth of the
    classifications by volunteers who are not logged in."""
    import numpy as np

    rng = np.random.default_rng(seed)
    t0 = pd.Timestamp("2020-01-01", tz="UTC")
    out, cid = [], 1000
    for c in range(n_cls):
        for s in range(n_subjects):
            cid += 1
            marks = {}
            if rng.random() > 0.3:
                for ox, oy in ((30.0, 30.0), (70.0, 60.0)):
                    if rng.random() < 0.7:
                        tool = int(rng.random() < 0.2)
                        marks.setdefault(tool, []).append(
                            (ox + rng.normal(0, 1), oy + rng.normal(0, 1))
                        )
                if rng.random() < 0.15:
                    marks.setdefault(0, []).append(tuple(rng.uniform(10, 90, 2)))
            frame = {}
            for tool, pts in sorted(marks.items()):
                frame[f"T0_tool{tool}_x"] = [round(float(x), 3) for x, _ in pts]
                frame[f"T0_tool{tool}_y"] = [round(float(y), 3) for _, y in pts]
            data = {"frame0": frame, "aggregation_version": "5.3.1"} if frame else {}
            uid = None if rng.random() < 0.2 else 500 + (s + 3 * c) % 13
            minute = c * n_subjects + s
            if block:
                minute = (s // block) * n_cls * block + c * block + s % block
            at = t0 + pd.Timedelta(minutes=minute)
            out.append(caesar_extract(cid, 100 + s, uid, at, data))
    return out


def toy_boxes(extracts: list[dict], side: float = 10.0) -> pd.DataFrame:
    """The boxes table of the toy extracts, by hand: a square of ``side`` centred on each
    point; one coordinate-less row for a classification without a mark."""
    import numpy as np

    from clumpscout.service.extracts import volunteer_name

    rows = []
    for e in extracts:
        base = {
            "classification_id": e["classification_id"], "subject_id": e["subject_id"],
            "volunteer": volunteer_name(e["user_id"], e["classification_id"]),
            "image_width": 100.0, "image_height": 100.0,
            "created_at": pd.Timestamp(e["classification_at"]),
        }  # fmt: skip
        pts = []
        for key, xs in e["data"].get("frame0", {}).items():
            if key.endswith("_x"):
                ys = e["data"]["frame0"][key[:-2] + "_y"]
                pts += [(x, y, key.startswith("T0_tool1")) for x, y in zip(xs, ys, strict=True)]
        if not pts:
            rows.append(
                base | {"x1": np.nan, "y1": np.nan, "x2": np.nan, "y2": np.nan, "unusual": False}
            )
        for x, y, unusual in pts:
            h = 0.5 * side
            rows.append(
                base | {"x1": x - h, "y1": y - h, "x2": x + h, "y2": y + h, "unusual": unusual}
            )
    return pd.DataFrame(rows)
