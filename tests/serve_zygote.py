"""A warm parent for the service's fault test: imports clumpscout serve and loads the model's
kernels once, then forks one ``clumpscout serve`` process per line of stdin (a JSON list of
its arguments) and prints the child's pid. A child is a real server process with nothing of
its parent's state but the loaded code (the parent never opens a database), so the test can
kill -9 it and start another in a fraction of a second instead of a fresh interpreter's
several seconds. Children are reaped as they die (SIGCHLD ignored)."""

from __future__ import annotations

import json
import os
import signal
import sys

import numpy as np

from clumpscout.cli import main
from clumpscout.model.live import LiveSkills, apply_map, assess_model
from clumpscout.model.params import Params
from clumpscout.service import app as _app  # noqa: F401  (imported before forking)
from clumpscout.service.frames import frame_of


def _warm() -> None:
    frame = frame_of([(0, [(1, "a", np.array([[1.0, 1.0, 5.0, 5.0, 0.0]]))])], [(100.0, 100.0)])
    apply_map(assess_model(frame, LiveSkills.prior(Params()), Params()), None, 10)


if __name__ == "__main__":
    _warm()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    print("ready", flush=True)
    for line in sys.stdin:
        argv = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            rc = 1
            try:
                rc = main(["serve", *argv])
            finally:
                os._exit(rc)
        print(pid, flush=True)
