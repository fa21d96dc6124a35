"""The live assessment: store what arrives, judge each subject as the replay would, refit.

:class:`Engine` is driven by one thread (the service's writer, :mod:`clumpscout.service.app`)
with batches of requests, each one subject's classifications (:class:`Incoming`). For a
batch it

1. keeps what is new: an extract already stored (classification_id, extractor_key) changes
   nothing, so Caesar may send a subject's extracts again and retry as often as it likes;
   a logged-in volunteer's second classification of a subject is stored but not counted
   (``skipped``: Caesar's ``keep_first`` filter and ``clumpscout extract`` drop it too);
2. gives each new counted classification its arrival rank ``g`` (0, 1, ... over the
   project) and its rank ``n`` within its subject, in the order received (a request's own
   new classifications by classification_at, then id);
3. assesses every subject after each of its new classifications (its first n, as the
   replay's prefixes: :func:`clumpscout.model.live.assess_model` with the skills of that
   moment, :func:`~clumpscout.model.live.apply_map` with the label map,
   :func:`~clumpscout.model.live.decide` with the policy); a subject retires at the first n
   the policy says so and stays retired;
4. commits the classifications, their extracts and the subjects' replies in one
   transaction, and only then answers.

Refits (docs/decisions.md#live-service): the skills are refitted on every classification of
rank g < P at the replay's refit points P (``replay.refit_every``, ``refit_growth``:
:func:`clumpscout.service.settings.refit_point_after`), one EM step from the previous skills
(:func:`clumpscout.model.live.refit_skills`). ``serve.refit: sync`` refits in line before the
classification of rank P is assessed, so every classification is assessed with the skills
the replay uses for it; ``background`` hands the refit to another process
(:mod:`clumpscout.service.refit`) and goes on with the skills it has until the new version is
in the database. A reply names the skills version it used.
"""

from __future__ import annotations

import io
import json
import logging
import sqlite3
import time
from dataclasses import dataclass

import numpy as np
import orjson
import pandas as pd

from clumpscout.counts import KEEP
from clumpscout.model.calibration import LiveMap
from clumpscout.model.live import (
    Assessment,
    LiveSkills,
    apply_map,
    assess_model,
    decide,
    open_objects,
)
from clumpscout.model.live_gold import MapTimeline, gold_rows
from clumpscout.service import store
from clumpscout.service.extracts import BadRequest, Incoming
from clumpscout.service.frames import frame_of
from clumpscout.service.gold import GoldWatch, box_rows, label_rows
from clumpscout.service.refit import RefitWorker, refit_on
from clumpscout.service.settings import Settings, refit_point_after

log = logging.getLogger(__name__)

#: a reply's label columns; the check of the gold reads them without p_fp
REPLY_COLUMNS = ("x1", "y1", "x2", "y2", "p_fp", "n_marks")
BOX_COLUMNS = ("x1", "y1", "x2", "y2", "n_marks")


@dataclass
class _Counted:
    """A new counted classification of the batch."""

    inc: Incoming
    g: int
    n: int


class Engine:
    """The service's state and its one writer (see the module docstring)."""

    def __init__(self, con: sqlite3.Connection, settings: Settings, db_path=None):
        self.con = con
        self.s = settings
        self.db_path = db_path
        self.count = con.execute(
            "SELECT COUNT(*) FROM classifications WHERE g IS NOT NULL"
        ).fetchone()[0]
        self.version, self.after, skills = store.latest_skills(con)
        self.skills = skills if skills is not None else LiveSkills.prior(settings.params)
        # the label map: the default, or learned from the gold subjects as they arrive
        self.default_map = LiveMap.default(settings.weak_real)
        gold = settings.gold
        self.gold_subjects = (
            frozenset() if gold is None else frozenset(int(x) for x in gold.subjects)
        )
        self.timeline = None
        self.watch = None  # the checks of the gold (docs/decisions.md#live-service)
        self.map_in_use = 0  # the label map of the next classification (0: the default)
        if gold is not None and gold.kind == "marks":
            self.timeline = MapTimeline(settings.calibration)
            self.watch = GoldWatch(gold, settings.policy.horizon)
            self._replay_timeline()
            self.watch.resume(con, self.timeline.G)
            self.map_in_use = self.map_version if self.watch.used else 0
        elif gold is not None:
            log.warning("the live label map is learned from expert marks; with expert counts "
                        "only the service uses the default map")  # fmt: skip
        self.gold_pending: list[tuple[int, bytes]] = []  # the batch's gold rows, to commit
        self.refit_worker = None  # the background refit process, once needed
        self.refits = 0
        self.refit_seconds = 0.0
        self.retired = con.execute(
            "SELECT COUNT(*) FROM subjects WHERE retired_at IS NOT NULL"
        ).fetchone()[0]
        #: marks the model does not read, by reason (other_task, other_tool)
        self.dropped = dict(
            con.execute(
                "SELECT j.key, SUM(j.value) FROM extracts, json_each(extracts.dropped) AS j "
                "GROUP BY j.key"
            ).fetchall()
        )
        log.info(
            "%d classifications stored, skills version %d (fitted on the first %d), next refit "
            "after %d",
            self.count, self.version, self.after, self.next_point,
        )  # fmt: skip

    # ---------------------------------------------------------------- the label map

    @property
    def label_map(self) -> LiveMap:
        """The label map of the next classification."""
        return self.timeline.maps[self.map_in_use - 1] if self.map_in_use else self.default_map

    @property
    def map_version(self) -> int:
        """The label maps learned from the gold so far (used or not)."""
        return len(self.timeline.maps) if self.timeline is not None else 0

    @property
    def warnings(self) -> tuple[str, ...]:
        """The run health warnings the replies carry now (the gold's latest check)."""
        return self.watch.warnings if self.watch is not None else ()

    def gold_status(self) -> str:
        """The gold standard's state in one line (``/health``)."""
        if self.watch is not None:
            return self.watch.status()
        if self.s.gold is not None:
            return "expert counts: not used (the live label map is learned from expert marks)"
        return "none"

    def _replay_timeline(self) -> None:
        """After a restart: the gold rows and completions stored, through the timeline again
        (the same maps at the same ranks)."""
        h = self.s.policy.horizon
        done = {}
        if self.gold_subjects:
            q = ",".join(str(x) for x in sorted(self.gold_subjects))
            done = dict(self.con.execute(
                f"SELECT g, subject_id FROM classifications WHERE n = ? AND subject_id IN ({q})", (h,)
            ).fetchall())  # fmt: skip
        rows = dict(self.con.execute("SELECT g, rows FROM gold_rows").fetchall())
        for g in sorted(set(done) | set(rows)):
            if g in done:
                self.timeline.complete(g)
            if g in rows:
                self.timeline.add(g, pd.read_parquet(io.BytesIO(rows[g])))

    def _judge(self, seg: list[_Counted], a) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray, list]:
        """The assessment's states and labels judged by the label map of each one's moment,
        the map (0: the default) and the warnings of that moment; with a gold standard, the
        gold subjects' prefixes feed the map's timeline first, and each new map is used
        once the gold passes its check (:mod:`clumpscout.service.gold`)."""
        g = np.array([c.g for c in seg], dtype=np.int64)
        lab_state = a.labels["subject_id"].to_numpy()  # the state p of each label
        if self.timeline is None:
            b = apply_map(a, self.default_map, self.s.policy.horizon, label_subject=lab_state)
            return b.subjects, b.labels, np.zeros(len(seg), np.int64), [()] * len(seg)
        st = a.subjects.assign(subject_id=[c.inc.subject_id for c in seg], g=g)
        lab = a.labels.rename(columns={"subject_id": "state"})
        is_gold = np.isin(st["subject_id"].to_numpy(), list(self.gold_subjects))
        rows = gold_rows(st, lab, self.s.gold, self.s.calibration) if is_gold.any() else None
        version = np.zeros(len(seg), np.int64)  # the map of each state (0: the default)
        hold = np.zeros(len(seg), bool)  # no map checked yet: nothing retires early
        warnings = []
        # the labels' boxes, read once for the batch (the gold states below take their rows)
        all_boxes = np.column_stack([a.labels[k].to_numpy(float) for k in BOX_COLUMNS])
        for p, c in enumerate(seg):
            version[p], hold[p] = self.map_in_use, self.watch.waiting
            warnings.append(self.watch.warnings)
            if not is_gold[p]:
                continue
            self.watch.observe(c.inc.subject_id, c.n, box_rows(all_boxes[lab_state == p]))
            if c.n == self.s.policy.horizon:
                self.timeline.complete(c.g)
            prefix = rows.loc[rows["g"].to_numpy() == c.g]
            if len(prefix):
                buf = io.BytesIO()
                prefix.to_parquet(buf, index=False)
                self.gold_pending.append((c.g, buf.getvalue()))
                if self.timeline.add(c.g, prefix) is not None:
                    log.info(
                        "label map %d fitted on the gold prefixes before rank %d",
                        self.map_version,
                        c.g + 1,
                    )
                    used = self.watch.check(self.map_version, c.g)
                    self.map_in_use = self.map_version if used else 0
        parts_st, parts_lab = [], []
        key = version * 2 + hold
        for k in np.unique(key):
            idx = np.flatnonzero(key == k)
            rows_v = np.isin(lab_state, idx)
            sub = Assessment(a.subjects.iloc[idx], a.labels.loc[rows_v])
            v = int(version[idx[0]])
            m = self.default_map if v == 0 else self.timeline.maps[v - 1]
            b = apply_map(
                sub, m, self.s.policy.horizon, label_subject=np.searchsorted(idx, lab_state[rows_v])
            )
            if hold[idx[0]]:  # a gold standard is coming: nothing retires early before its map
                b.subjects["new_kept"] = np.inf
            parts_st.append(b.subjects)
            parts_lab.append(b.labels)
        st, lab = pd.concat(parts_st).sort_index(), pd.concat(parts_lab).sort_index()
        return st, lab, version, warnings

    # ---------------------------------------------------------------- refits

    @property
    def next_point(self) -> int:
        """The next refit point: the classification of this rank is assessed with it."""
        return refit_point_after(self.after, self.s.refit_every, self.s.refit_growth)

    def _refit_sync(self, after: int) -> None:
        t0 = time.perf_counter()
        skills = refit_on(self.con, after, self.skills, self.s.params)
        seconds = time.perf_counter() - t0
        version = store.write_skills(self.con, after, skills, seconds)
        if version is None:  # pragma: no cover - only the writer refits in sync mode
            raise RuntimeError(f"a refit after {after} is already stored")
        self._use(version, after, skills, seconds)

    def _use(self, version: int, after: int, skills: LiveSkills, seconds: float) -> None:
        self.version, self.after, self.skills = version, after, skills
        self.refits += 1
        self.refit_seconds += seconds
        log.info(
            "skills version %d: refitted on the first %d classifications (%d volunteers) in %.2f s",
            version, after, len(skills.volunteer), seconds,
        )  # fmt: skip

    def poll_refit(self) -> None:
        """Background mode: take up a finished refit's skills, start the next one when due."""
        w = self.refit_worker
        answer = w.finished() if w is not None else None
        if answer is not None:
            if answer[0] != "done":
                log.error("a background refit failed: %s", answer[1])
            row = self.con.execute(
                "SELECT version, after, volunteers, population, seconds FROM skills "
                "ORDER BY version DESC LIMIT 1"
            ).fetchone()
            if row is not None and row[0] > self.version:
                self._use(
                    int(row[0]), int(row[1]), store.skills_from_blob(row[2], row[3]), float(row[4])
                )
        if self.s.refit != "background" or self.db_path is None or (w is not None and w.busy):
            return
        due = 0
        p = self.next_point
        while p <= self.count:  # the latest point reached (a late refit catches up)
            due, p = p, refit_point_after(p, self.s.refit_every, self.s.refit_growth)
        if due:
            if self.refit_worker is None:
                self.refit_worker = RefitWorker(self.db_path, self.s.params)
            self.refit_worker.submit(due)
            log.info("background refit on the first %d classifications started", due)

    @property
    def refit_running(self) -> bool:
        return self.refit_worker is not None and self.refit_worker.busy

    def close(self) -> None:
        """Stop the refit process (a refit it had not finished is started again after a
        restart)."""
        if self.refit_worker is not None:
            self.refit_worker.close()

    # ---------------------------------------------------------------- a batch

    def process(self, requests: list[tuple[int, list[Incoming]]]) -> list[dict | BadRequest]:
        """Store and assess a batch of requests (subject, its classifications); one reply
        (or the request's :class:`BadRequest`) per request, in order. Every reply's
        classifications are committed when this returns."""
        self.poll_refit()
        seen_ext = self._stored_extracts([i for _, req in requests for i in req])
        known = self._stored_classifications(
            [i.classification_id for _, req in requests for i in req]
        )
        history: dict[int, list] = {}  # subject -> [(n, volunteer, boxes)] counted so far
        counted: list[_Counted] = []
        extra: list[Incoming] = []  # new extracts of known classifications, or not counted
        skipped: list[tuple[Incoming, str]] = []
        results: list = []
        n_of: dict[int, int] = {}
        for sid, req in requests:
            try:
                new = self._new_of(sid, req, seen_ext, known)
            except BadRequest as exc:
                results.append(exc)
                continue
            results.append(None)
            for inc in new:
                seen_ext.add((inc.classification_id, inc.extractor_key))
                if inc.classification_id in known:
                    extra.append(inc)
                    continue
                if sid not in history:
                    history[sid] = self._history(sid)
                    n_of[sid] = len(history[sid])
                dup = not inc.volunteer.startswith("anonymous-") and any(
                    v == inc.volunteer for _, v, _ in history[sid]
                )
                known[inc.classification_id] = sid
                if dup:
                    skipped.append((inc, "duplicate_volunteer_subject"))
                    continue
                n_of[sid] += 1
                c = _Counted(inc, self.count + len(counted), n_of[sid])
                history[sid].append((c.n, inc.volunteer, inc.boxes))
                counted.append(c)
        replies = self._assess_and_commit(counted, extra, skipped, history)
        out = []
        for (sid, _), r in zip(requests, results, strict=True):
            out.append(r if r is not None else replies.get(sid) or self.reply_of(sid))
        return out

    def _new_of(self, sid, req, seen_ext, known) -> list[Incoming]:
        new = [i for i in req if (i.classification_id, i.extractor_key) not in seen_ext]
        for i in new:
            if known.get(i.classification_id, sid) != sid:
                raise BadRequest(
                    f"classification {i.classification_id} is stored under subject "
                    f"{known[i.classification_id]}, not {sid}",
                    409,
                )
        return sorted(new, key=lambda i: (i.t, i.classification_id))

    def _stored_extracts(self, items: list[Incoming]) -> set:
        out = set()
        cids = sorted({i.classification_id for i in items})
        for lo in range(0, len(cids), 500):
            part = cids[lo : lo + 500]
            q = f"SELECT classification_id, extractor_key FROM extracts WHERE classification_id IN ({','.join('?' * len(part))})"
            out.update((int(a), b) for a, b in self.con.execute(q, part))
        return out

    def _stored_classifications(self, cids: list[int]) -> dict[int, int]:
        out = {}
        cids = sorted(set(cids))
        for lo in range(0, len(cids), 500):
            part = cids[lo : lo + 500]
            q = f"SELECT classification_id, subject_id FROM classifications WHERE classification_id IN ({','.join('?' * len(part))})"
            out.update((int(a), int(b)) for a, b in self.con.execute(q, part))
        return out

    def _history(self, sid: int) -> list:
        rows = self.con.execute(
            "SELECT n, volunteer, boxes FROM classifications WHERE subject_id = ? AND g IS NOT NULL ORDER BY n",
            (sid,),
        ).fetchall()
        return [(int(n), v, store.boxes_from_blob(b)) for n, v, b in rows]

    def _assess_and_commit(self, counted, extra, skipped, history) -> dict[int, dict]:
        """Segments of the counted classifications, each assessed with one skills version
        (sync: cut at every refit point, refitted in between), then committed."""
        replies: dict[int, dict] = {}
        rest = counted
        first = True
        while rest or first:
            cut = len(rest)
            if self.s.refit == "sync" and rest:
                while self.next_point <= rest[0].g:
                    self._refit_sync(self.next_point)
                cut = next((k for k, c in enumerate(rest) if c.g >= self.next_point), len(rest))
            seg, rest = rest[:cut], rest[cut:]
            states = self._assess(seg, history)
            self._commit(seg, states, extra if first else [], skipped if first else [], replies)
            self.count += len(seg)
            first = False
        return replies

    def _assess(self, seg: list[_Counted], history) -> list[dict]:
        """The state of each classification's subject after it (its first n)."""
        if not seg:
            return []
        pairs, sizes = [], []
        for p, c in enumerate(seg):
            sid = c.inc.subject_id
            pairs.append((p, [h for h in history[sid] if h[0] <= c.n]))
            sizes.append(self.s.geometry.of(sid)[1:])
        frame = frame_of(pairs, sizes)
        a = assess_model(frame, self.skills, self.s.params)
        if not np.array_equal(a.subjects["subject_id"].to_numpy(), np.arange(len(seg))):
            raise AssertionError("every prefix holds at least one classification")
        st, lab, maps, warnings = self._judge(seg, a)
        go = decide(self.s.policy, st, self.s.params)
        opened = open_objects(st)
        n = st["n"].to_numpy()
        p_fp = lab["p_fp"].to_numpy(float)
        kept = p_fp < KEEP
        strong = kept & (np.nan_to_num(lab["p_weak"].to_numpy(float)) < KEEP)
        at = lab["subject_id"].to_numpy(np.int64)
        order = np.argsort(at, kind="stable")
        at, p_fp, kept, strong = at[order], p_fp[order], kept[order], strong[order]
        # the counts of clumpscout.counts.count_table: Σ (1 − p_fp), strong kept, kept
        expected = np.bincount(at, weights=1.0 - p_fp, minlength=len(seg))
        low = np.bincount(at, weights=strong, minlength=len(seg))
        high = np.bincount(at, weights=kept, minlength=len(seg))
        cols = np.column_stack([lab[k].to_numpy(float)[order] for k in REPLY_COLUMNS])
        starts = np.searchsorted(at, np.arange(len(seg) + 1))
        return [
            {
                "n": int(n[p]),
                "go": bool(go[p]),
                "open_objects": float(opened[p]),
                "labels": cols[starts[p] : starts[p + 1]],
                "expected_count": float(expected[p]),
                "count_low": int(round(low[p])),
                "count_high": int(round(high[p])),
                "map": int(maps[p]),
                "warnings": warnings[p],
            }
            for p in range(len(seg))
        ]

    def _subject_row(self, sid: int):
        return self.con.execute(
            "SELECT n, retired_at FROM subjects WHERE subject_id = ?", (sid,)
        ).fetchone()

    def _commit(self, seg, states, extra, skipped, replies) -> None:
        now = time.time()
        retired_at: dict[int, int | None] = {}
        con = self.con
        con.execute("BEGIN IMMEDIATE")
        try:
            for inc in [c.inc for c in seg] + extra + [i for i, _ in skipped]:
                con.execute(
                    "INSERT INTO extracts VALUES (?, ?, ?, ?, ?, ?)",
                    (inc.classification_id, inc.extractor_key, inc.subject_id, now, inc.raw,
                     json.dumps(inc.dropped, sort_keys=True)),
                )  # fmt: skip
            for c in seg:
                i = c.inc
                _, w, h = self.s.geometry.of(i.subject_id)
                con.execute(
                    "INSERT INTO classifications VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?)",
                    (i.classification_id, i.subject_id, i.volunteer, i.user_id, i.t, c.g, c.n, w, h, store.boxes_blob(i.boxes)),
                )  # fmt: skip
            for i, why in skipped:
                _, w, h = self.s.geometry.of(i.subject_id)
                con.execute(
                    "INSERT INTO classifications VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, ?, ?, ?)",
                    (i.classification_id, i.subject_id, i.volunteer, i.user_id, i.t, why, w, h, store.boxes_blob(i.boxes)),
                )  # fmt: skip
            for g, blob in self.gold_pending:
                con.execute("INSERT INTO gold_rows VALUES (?, ?)", (g, blob))
            self.gold_pending = []
            if self.watch is not None:
                self.watch.commit(con)
            for i in extra:  # another extractor's marks of a stored classification
                old = con.execute(
                    "SELECT boxes FROM classifications WHERE classification_id = ?",
                    (i.classification_id,),
                ).fetchone()
                both = np.concatenate([store.boxes_from_blob(old[0]), i.boxes])
                con.execute(
                    "UPDATE classifications SET boxes = ? WHERE classification_id = ?",
                    (store.boxes_blob(both), i.classification_id),
                )
            for c, state in zip(seg, states, strict=True):
                sid = c.inc.subject_id
                if sid not in retired_at:
                    row = self._subject_row(sid)
                    retired_at[sid] = None if row is None else row[1]
                if retired_at[sid] is None and state["go"] and sid not in self.gold_subjects:
                    retired_at[sid] = c.n
                    self.retired += 1
                replies[sid] = self._reply(sid, state, retired_at[sid])
            for sid, reply in replies.items():
                if sid in retired_at:
                    con.execute(
                        "INSERT OR REPLACE INTO subjects VALUES (?, ?, ?, ?, ?)",
                        (sid, reply["classifications"], retired_at[sid], orjson.dumps(reply), now),
                    )
            con.execute("COMMIT")
            for inc in [c.inc for c in seg] + extra + [i for i, _ in skipped]:
                for reason, k in inc.dropped.items():
                    self.dropped[reason] = self.dropped.get(reason, 0) + k
        except BaseException:
            con.execute("ROLLBACK")
            self.gold_pending = []
            if self.watch is not None:
                self.watch.pending = []
            if retired_at:  # recount: the rolled-back retirements did not happen
                self.retired = con.execute(
                    "SELECT COUNT(*) FROM subjects WHERE retired_at IS NOT NULL"
                ).fetchone()[0]
            raise

    def _reply(self, sid: int, state: dict, retired_at: int | None) -> dict:
        reply = {
            "subject_id": sid,
            "retire": int(retired_at is not None),
            "retired_at": retired_at,
            "classifications": state["n"],
            "expected_count": round(state["expected_count"], 4),
            "count_low": state["count_low"],
            "count_high": state["count_high"],
            "open_objects": round(state["open_objects"], 6),
            "policy": self.s.policy.kind,
            "setting": self.s.policy.setting,
            "skills_version": self.version,
            "label_map": "default" if state["map"] == 0 else f"gold {state['map']}",
            "labels": label_rows(state["labels"]),
        }
        if state["warnings"]:  # the gold's latest check (docs/decisions.md#live-service)
            reply["warnings"] = list(state["warnings"])
        return reply

    def reply_of(self, sid: int) -> dict:
        """The subject's latest reply; a subject with no counted classification yet gets
        one saying so."""
        row = self.con.execute("SELECT reply FROM subjects WHERE subject_id = ?", (sid,)).fetchone()
        if row is not None and row[0] is not None:
            return orjson.loads(row[0])
        reply = {
            "subject_id": sid, "retire": 0, "retired_at": None, "classifications": 0,
            "expected_count": 0.0, "count_low": 0, "count_high": 0, "open_objects": 0.0,
            "policy": self.s.policy.kind, "setting": self.s.policy.setting,
            "skills_version": self.version, "label_map": "default", "labels": [],
        }  # fmt: skip
        if self.warnings:
            reply["warnings"] = list(self.warnings)
        return reply
