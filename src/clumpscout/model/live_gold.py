"""The live label map learned from a gold standard as its subjects' classifications arrive
(docs/decisions.md#live-retirement), for the replay (:mod:`clumpscout.evaluation.replay`)
and the live service (:mod:`clumpscout.service`) alike.

* :func:`gold_rows`: the map's training rows, every label of every gold subject's prefix
  with its verdict against the experts and the arrival rank ``g`` that completed the prefix;
* :func:`gold_completions`: the ranks at which gold subjects were complete;
* :class:`MapTimeline`: the maps, fitted as the rows arrive, one g at a time (the live
  service feeds it as it goes; :func:`fit_map_timeline` feeds it everything at once), so
  both fit the same maps at the same ranks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from clumpscout.data.gold import Gold
from clumpscout.metrics.matching import match_one_to_one
from clumpscout.model.calibration import (
    LIVE_FEATURES,
    MIN_GOLD_SUBJECTS,
    CalibrationSettings,
    LiveMap,
    live_features,
)

#: the live map is refitted once the gold prefixes seen have grown by this share ...
MAP_GROWTH = 0.1
#: ... and by at least this many prefixes
MAP_STEP = 20


def gold_rows(
    states: pd.DataFrame, labels: pd.DataFrame, gold: Gold, cal: CalibrationSettings
) -> pd.DataFrame:
    """The live map's training rows: every label of every gold subject's prefix with its
    verdict against the experts (matched one-to-one, docs/decisions.md#gold-match) and the
    arrival rank ``g`` of the classification that completed the prefix."""
    is_gold = np.isin(states["subject_id"].to_numpy(), gold.subjects)
    lab = labels.loc[is_gold[labels["state"].to_numpy()]]
    if not len(lab):
        return pd.DataFrame(columns=["g", "subject_id", "real", *LIVE_FEATURES])
    state = lab["state"].to_numpy()
    sid = states["subject_id"].to_numpy()[state]
    marks = gold.marks.merge(
        pd.DataFrame({"subject_id": sid, "prefix": state}).drop_duplicates(), on="subject_id"
    )
    marks = marks.drop(columns="subject_id").rename(columns={"prefix": "subject_id"})
    real, _ = match_one_to_one(lab.assign(subject_id=state), marks, gold.geometry, cal.match_iou)
    X = live_features(
        lab["p_empty"], lab["p_weak"], lab["n_marks"], states["n"].to_numpy()[state],
        lab["frac_unusual"],
    )  # fmt: skip
    out = pd.DataFrame(X, columns=list(LIVE_FEATURES))
    out.insert(0, "real", real)
    out.insert(0, "subject_id", sid)
    out.insert(0, "g", states["g"].to_numpy()[state])
    return out.sort_values("g", kind="stable").reset_index(drop=True)


def gold_completions(states: pd.DataFrame, gold_subjects, horizon: int | None) -> np.ndarray:
    """The arrival ranks g at which gold subjects were complete: classified ``horizon`` times
    (or as often as they ever were, if less; None: as often as they ever were), sorted."""
    st = states.loc[
        np.isin(states["subject_id"].to_numpy(), gold_subjects), ["subject_id", "n", "g"]
    ]
    if not len(st):
        return np.zeros(0, np.int64)
    last = st.groupby("subject_id")["n"].transform("max").to_numpy()
    done = st["n"].to_numpy() == (last if horizon is None else np.minimum(last, horizon))
    return np.sort(st["g"].to_numpy()[done])


class MapTimeline:
    """The live maps, fitted as the gold rows arrive (one arrival rank g at a time, in
    order): map k is fitted on the rows of g < G[k] and judges the states from G[k] on. The
    first map waits until :data:`~clumpscout.model.calibration.MIN_GOLD_SUBJECTS` gold
    subjects are complete (a map fitted on the first few classifications of each gold
    subject cannot judge a label seen by twenty volunteers); then a map is refitted once the
    gold prefixes seen have grown by :data:`MAP_GROWTH` (at least :data:`MAP_STEP`)."""

    def __init__(self, cal: CalibrationSettings):
        self.cal = cal
        self.X: list[np.ndarray] = []
        self.real: list[np.ndarray] = []
        self.subject: list[np.ndarray] = []
        self.completions: list[int] = []  # ranks at which gold subjects were complete
        self.seen = 0  # gold prefixes with labels seen
        self.last = 0  # prefixes seen when the last map was fitted
        self.G: list[int] = []
        self.maps: list[LiveMap] = []

    def complete(self, g: int) -> None:
        """A gold subject is complete with its classification of rank ``g``."""
        self.completions.append(int(g))

    def add(self, g: int, rows: pd.DataFrame) -> LiveMap | None:
        """The rows of one prefix (rank ``g``, later than every rank added before); the new
        map when one is due (it judges the states from g + 1 on), else None."""
        if not len(rows):
            return None
        self.X.append(rows[list(LIVE_FEATURES)].to_numpy())
        self.real.append(rows["real"].to_numpy(dtype=bool))
        self.subject.append(rows["subject_id"].to_numpy())
        self.seen += 1
        complete = sum(c <= g for c in self.completions)
        step = max(MAP_STEP, MAP_GROWTH * self.last)
        if complete < MIN_GOLD_SUBJECTS or self.seen < self.last + step:
            return None
        fitted = LiveMap.fit(
            np.concatenate(self.X), np.concatenate(self.real), self.cal.C, self.cal.weak_real,
            np.concatenate(self.subject),
        )  # fmt: skip
        self.G.append(int(g) + 1)
        self.maps.append(fitted)
        self.last = self.seen
        return fitted


def fit_map_timeline(
    rows: pd.DataFrame, cal: CalibrationSettings, completions: np.ndarray | None = None
) -> tuple[np.ndarray, list]:
    """(G, maps) of :class:`MapTimeline` fed every row (sorted by g) at once; without
    ``completions`` (:func:`gold_completions`) every gold subject counts from its first
    label."""
    if not len(rows):
        return np.zeros(0, np.int64), []
    if completions is None:  # every gold subject counts from its first label
        completions = np.sort(rows.groupby("subject_id")["g"].min().to_numpy())
    timeline = MapTimeline(cal)
    for c in completions:
        timeline.complete(c)
    for g, part in rows.groupby("g", sort=True):
        timeline.add(int(g), part)
    return np.asarray(timeline.G, dtype=np.int64), timeline.maps
