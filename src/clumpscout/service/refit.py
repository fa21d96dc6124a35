"""A background refit in its own process (``serve.refit: background``).

The server starts ``python -m clumpscout.service.refit --db FILE --after P --params JSON``
when the count of classifications reaches a refit point: this process reads every
classification of rank g < P from the database (WAL: the server goes on writing), runs one
EM step from the newest stored skills (:func:`clumpscout.service.engine.refit_on`) and
writes the result as the next skills version, which the server takes up before its next
batch. Its own process, so that the refit's Python work does not compete with the requests
for one interpreter lock (docs/decisions.md#live-service). It dies with the server (Linux:
the parent-death signal).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import signal
import sys
import time

log = logging.getLogger(__name__)


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m clumpscout.service.refit")
    p.add_argument("--db", required=True)
    p.add_argument("--after", type=int, required=True)
    p.add_argument("--params", required=True, help="the aggregate: hyper-parameters (JSON)")
    args = p.parse_args(argv)
    _die_with_parent()
    from clumpscout.logs import setup_logging
    from clumpscout.model.live import LiveSkills
    from clumpscout.model.params import Params
    from clumpscout.service import store
    from clumpscout.service.engine import refit_on

    setup_logging()
    params = Params(**json.loads(args.params))
    con = store.connect(args.db)
    version, after, skills = store.latest_skills(con)
    if after >= args.after:
        log.info("skills after %d are there already (version %d)", after, version)
        return 0
    skills = skills if skills is not None else LiveSkills.prior(params)
    t0 = time.perf_counter()
    new = refit_on(con, args.after, skills, params)
    seconds = time.perf_counter() - t0
    v = store.write_skills(con, args.after, new, seconds)
    log.info("refit on the first %d classifications: version %s in %.1f s", args.after, v, seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
