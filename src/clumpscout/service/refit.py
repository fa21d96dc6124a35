"""Background refits in a process of their own (``serve.refit: background``).

:class:`RefitWorker` starts one process when the service needs its first background refit;
it stays up for the service's life (its imports and the model's kernels are loaded once).
When the count of classifications reaches a refit point P the writer sends it P; the worker
reads every classification of rank g < P from the database (WAL: the writer goes on
writing meanwhile), runs one EM step from the newest stored skills
(:func:`refit_on`), stores the result as the next skills version
and says so; the writer takes the new version up before its next batch. A process of its
own, so that the refit's Python work does not compete with the requests for one
interpreter lock, and at a lower priority (:data:`REFIT_NICE`), so that on a machine it
shares with the server the requests get the cores first (docs/decisions.md#live-service). It ends with the service: on its pipe
closing, or (Linux) with the parent-death signal when the service is killed.
"""

from __future__ import annotations

import ctypes
import json
import logging
import multiprocessing as mp
import os
import signal
import time

from clumpscout.logs import setup_logging
from clumpscout.model.live import LiveSkills, refit_skills
from clumpscout.model.params import Params
from clumpscout.service import store
from clumpscout.service.frames import frame_of

log = logging.getLogger(__name__)


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def refit_once(db: str, after: int, params) -> tuple[int | None, float]:
    """One refit on the classifications of rank g < ``after``: (its version, seconds);
    version None when the database has skills at that point or later already."""
    con = store.connect(db)
    try:
        _, last, skills = store.latest_skills(con)
        if last >= after:
            return None, 0.0
        t0 = time.perf_counter()
        skills = skills if skills is not None else LiveSkills.prior(params)
        new = refit_on(con, after, skills, params)
        seconds = time.perf_counter() - t0
        return store.write_skills(con, after, new, seconds), seconds
    finally:
        con.close()


#: the refit process's niceness: on a machine the server shares with it, requests come first
REFIT_NICE = 10


def _loop(conn, db: str, params_json: str) -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the service stops it
    try:
        os.nice(REFIT_NICE)
    except OSError:  # pragma: no cover - not allowed here: the same priority as the server
        pass
    setup_logging()
    params = Params(**json.loads(params_json))
    while True:
        try:
            after = conn.recv()
        except (EOFError, OSError):
            return
        try:
            version, seconds = refit_once(db, after, params)
            log.info(
                "refit on the first %d classifications: version %s in %.1f s",
                after,
                version,
                seconds,
            )
            conn.send(("done", after))
        except Exception as exc:  # logged here; the service goes on with the skills it has
            log.exception("the refit on the first %d classifications failed", after)
            conn.send(("failed", f"{type(exc).__name__}: {exc}"))


class RefitWorker:
    """The service's refit process and its pipe (see the module docstring)."""

    def __init__(self, db, params):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(
            target=_loop, args=(child, str(db), json.dumps(vars(params))),
            name="clumpscout-refit", daemon=True,
        )  # fmt: skip
        self.proc.start()
        child.close()
        self.after = 0  # the refit it is working on (0: none)

    @property
    def busy(self) -> bool:
        return self.after > 0

    def submit(self, after: int) -> None:
        self.conn.send(int(after))
        self.after = int(after)

    def finished(self) -> tuple[str, object] | None:
        """The answer of the refit it was given, once there is one."""
        if not self.busy or not self.conn.poll():
            if self.busy and not self.proc.is_alive():
                self.after = 0
                return ("failed", f"the refit process died (exit {self.proc.exitcode})")
            return None
        self.after = 0
        return self.conn.recv()

    def close(self) -> None:
        self.conn.close()
        self.proc.join(10)
        if self.proc.is_alive():  # pragma: no cover - a refit longer than 10 s
            self.proc.terminate()
            self.proc.join(10)


def refit_on(con, after: int, skills: LiveSkills, params) -> LiveSkills:
    """One EM step from ``skills`` on every counted classification of rank g < ``after``,
    each subject with its classifications so far (the replay's refit frame)."""
    rows = store.counted_before(con, after)
    if len(rows) < after:
        raise RuntimeError(
            f"a refit after {after} needs {after} classifications, {len(rows)} stored"
        )
    rows = rows.sort_values(["subject_id", "n"], kind="stable")
    pairs, sizes = [], []
    for p, (_, g) in enumerate(rows.groupby("subject_id", sort=True)):
        cls = [
            (int(n), v, store.boxes_from_blob(b))
            for n, v, b in zip(g["n"], g["volunteer"], g["boxes"], strict=True)
        ]
        pairs.append((p, cls))
        sizes.append((float(g["width"].iloc[0]), float(g["height"].iloc[0])))
    return refit_skills(frame_of(pairs, sizes), skills, params)
