"""The gold standard in the live service, checked before a label map learned from it is used
(docs/decisions.md#live-service, #gold-checks).

The service learns its label map from the gold subjects' prefixes as they arrive
(:class:`clumpscout.model.live_gold.MapTimeline`). Each time a map is fitted (the first once
enough gold subjects are complete, then at every refit of the map), :class:`GoldWatch`
checks the gold against the volunteers first, with the batch check's figures, bounds and
words (:func:`clumpscout.model.gold_check.gold_agreement`), on the gold subjects in their
latest assessed state: their labels as the replies give them (x1, y1, x2, y2, marks), their
classifications so far as viewers; those classified at least :data:`MIN_VIEWERS` times (the
fewest the batch bounds were chosen on; reading only the complete ones would leave the first
checks too few expert objects to judge: benchmarks/serve_gold.py). Then
:func:`~clumpscout.model.gold_check.live_policy`:

* ``gold.on_implausible: stop`` (the default): an implausible gold is not used: the states
  from then on are judged by the default map (and may retire early), until a later check
  passes; the warning names the file, what was found and the likely frame mistake;
* ``warn``: the map is used, with the warning;
* an incomplete gold warns and is used (as in a batch run); ``ok`` and ``not judged``: used,
  no warning.

The warnings of the latest check are logged once (``RUN HEALTH WARNING:``), carried by every
reply (``warnings``), shown by ``/health`` (``gold``) and ``/metrics``. Every check is stored
(table ``gold_checks``); a restart takes the latest up again, and with ``stop`` refuses to
start when it was implausible (:class:`~clumpscout.errors.InputError`: exit 2, one line), as
``clumpscout replay`` and ``aggregate`` stop on that gold.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import orjson
import pandas as pd

from clumpscout.data.gold import Gold
from clumpscout.errors import InputError
from clumpscout.logs import WARNING_PREFIX
from clumpscout.model.calibration import MIN_GOLD_SUBJECTS
from clumpscout.model.gold_check import gold_agreement, live_policy, stop_message

log = logging.getLogger(__name__)

#: the check reads the gold subjects classified at least this often so far (the batch check's
#: bounds hold from 3 classifications on: docs/decisions.md#gold-checks)
MIN_VIEWERS = 3
#: the verdicts /metrics reports (``waiting``: no map fitted, so no check, yet)
VERDICTS = ("waiting", "ok", "not judged", "incomplete", "implausible")


def label_rows(labels: np.ndarray) -> list[list]:
    """Labels (x1, y1, x2, y2, p_fp, marks) as a reply gives them: pixels to 0.01, p_fp to
    1e-4, marks an integer."""
    return [
        [round(x1, 2), round(y1, 2), round(x2, 2), round(y2, 2), round(p, 4), int(m)]
        for x1, y1, x2, y2, p, m in labels.tolist()
    ]


def box_rows(labels: np.ndarray) -> list[tuple]:
    """Labels (x1, y1, x2, y2, marks) as a reply gives them (:func:`label_rows` without
    p_fp): what the check reads, the same before and after a restart."""
    return [
        (round(x1, 2), round(y1, 2), round(x2, 2), round(y2, 2), int(m))
        for x1, y1, x2, y2, m in labels.tolist()
    ]


class GoldWatch:
    """The gold subjects' latest states, the checks of the gold and what they decided."""

    def __init__(self, gold: Gold, horizon: int, min_viewers: int = MIN_VIEWERS):
        self.gold = gold
        self.horizon = int(horizon)
        self.min_viewers = min(int(min_viewers), self.horizon)
        self.subjects = frozenset(int(x) for x in gold.subjects)
        #: gold subject -> (classifications, its labels' x1, y1, x2, y2, marks: box_rows)
        self.latest: dict[int, tuple[int, list]] = {}
        self.verdict = "waiting"
        self.used = False  # is the latest map used?
        self.warnings: tuple[str, ...] = ()
        self.maps_checked = 0
        self.n_complete = 0  # gold subjects complete (read by /health from another thread)
        self.pending: list[tuple] = []  # the checks of the batch, to commit

    # ---------------------------------------------------------------- what arrives

    def observe(self, subject_id: int, n: int, labels: list) -> None:
        """A gold subject's state after ``n`` classifications; ``labels``: :func:`box_rows`."""
        before = self.latest.get(int(subject_id), (0, None))[0]
        self.latest[int(subject_id)] = (int(n), labels)
        self.n_complete += before < self.horizon <= n

    @property
    def waiting(self) -> bool:
        """No map checked yet: a gold standard is coming, nothing retires early."""
        return self.verdict == "waiting"

    def seen(self) -> list[int]:
        """The gold subjects the check reads: classified at least ``min_viewers`` times."""
        return sorted(s for s, (n, _) in self.latest.items() if n >= self.min_viewers)

    def agreement(self):
        """The check (:func:`~clumpscout.model.gold_check.gold_agreement`) on the gold
        subjects' latest states (those of :meth:`seen`); None without any."""
        done = self.seen()
        if not done:
            return None
        sid, rows = [], []
        for s in done:
            labels = self.latest[s][1]
            sid += [s] * len(labels)
            rows += labels
        arr = np.asarray(rows, dtype=float).reshape(-1, 5)
        labels = pd.DataFrame(
            {
                "subject_id": np.asarray(sid, dtype=np.int64),
                "x1": arr[:, 0], "y1": arr[:, 1], "x2": arr[:, 2], "y2": arr[:, 3],
                "n_marks": arr[:, 4].astype(np.int64),
            }
        )  # fmt: skip
        viewers = pd.Series(
            [self.latest[s][0] for s in done], index=np.asarray(done, dtype=np.int64)
        )
        return gold_agreement(labels, self.gold.restrict(done), viewers)

    def check(self, map_version: int, g: int, stopping: bool = False) -> bool:
        """Map ``map_version`` was just fitted (on the gold prefixes before rank g + 1):
        check the gold; whether the map is used. The check is stored with the batch.
        ``stopping`` (at start): an implausible gold with ``stop`` raises instead."""
        a = self.agreement()
        if a is None:  # pragma: no cover - a map is fitted only once gold subjects are complete
            raise AssertionError("a label map fitted before any gold subject was complete")
        if stopping and a.verdict == "implausible" and self.gold.on_implausible == "stop":
            raise InputError(stop_message(a), self.gold.path)
        used, warnings = live_policy(a, self.gold.on_implausible)
        self._take(a.verdict, used, warnings)
        self.maps_checked = map_version
        log.info("%s; label map %d %s", a.summary(), map_version, "used" if used else "not used")
        for w in warnings:
            log.warning("%s %s", WARNING_PREFIX, w)
        report = a.to_dict() | {
            "on_implausible": self.gold.on_implausible,
            "warnings": warnings,
            "stop": stop_message(a) if a.verdict == "implausible" else None,
        }
        self.pending.append(
            (map_version, int(g), a.verdict, int(used), json.dumps(report, sort_keys=True))
        )
        return used

    def _take(self, verdict: str, used: bool, warnings) -> None:
        self.verdict, self.used, self.warnings = verdict, bool(used), tuple(warnings)

    # ---------------------------------------------------------------- storage

    def commit(self, con) -> None:
        """Store the batch's checks (inside the batch's transaction)."""
        for row in self.pending:
            con.execute("INSERT INTO gold_checks VALUES (?, ?, ?, ?, ?)", row)
        self.pending = []

    def resume(self, con, G: list[int]) -> None:
        """After a restart: the gold subjects' latest replies and the latest check (of the
        maps fitted again from the stored rows, first used from ranks ``G``). With
        ``on_implausible: stop``, a latest check that found the gold implausible stops the
        service (:class:`InputError`: the batch check's one line)."""
        if self.subjects:
            q = ",".join(str(s) for s in sorted(self.subjects))
            for sid, reply in con.execute(
                f"SELECT subject_id, reply FROM subjects WHERE subject_id IN ({q})"
            ):
                if reply is not None:
                    r = orjson.loads(reply)
                    boxes = [(x1, y1, x2, y2, m) for x1, y1, x2, y2, _, m in r["labels"]]
                    self.observe(sid, r["classifications"], boxes)
        row = con.execute(
            "SELECT map, verdict, report FROM gold_checks ORDER BY map DESC LIMIT 1"
        ).fetchone()
        if row is None and G:  # maps of a database older than the checks: check now
            self.check(len(G), G[-1] - 1, stopping=True)
            con.execute("BEGIN IMMEDIATE")
            self.commit(con)
            con.execute("COMMIT")
            return
        if row is None:
            return
        report = json.loads(row[2])
        if row[1] == "implausible" and self.gold.on_implausible == "stop":
            raise InputError(report["stop"], self.gold.path)
        # used: only an implausible check with stop is not, and that does not start
        self._take(row[1], True, report["messages"])
        self.maps_checked = int(row[0])
        if len(G) != self.maps_checked:  # pragma: no cover - a map and its check commit together
            raise AssertionError(f"{len(G)} label maps fitted again, {self.maps_checked} checked")
        for w in self.warnings:
            log.warning("%s %s", WARNING_PREFIX, w)

    # ---------------------------------------------------------------- what it says

    def status(self) -> str:
        """The gold's state in one line, for ``/health``."""
        if self.waiting:
            return (
                f"waiting: {self.n_complete} of {len(self.subjects)} gold subjects "
                f"complete ({self.horizon} classifications), {MIN_GOLD_SUBJECTS} needed before "
                "a label map is learned from them (until then nothing retires early)"
            )
        if self.warnings:
            return f"{self.verdict}: {self.warnings[0]}"
        return f"{self.verdict}: label map {self.maps_checked} learned from the gold in use"

    def metrics(self) -> list[str]:
        out = [
            "# HELP clumpscout_gold_check The latest check of the gold standard against the "
            "volunteers (1: its verdict; waiting: no label map fitted yet).",
            "# TYPE clumpscout_gold_check gauge",
        ]
        out += [
            f'clumpscout_gold_check{{verdict="{v}"}} {int(v == self.verdict)}' for v in VERDICTS
        ]
        return out
