"""numba's kernels compiled once per workflow run, and the compile seconds of every job.

Every numba kernel of the package is ``cache=True``: the first process that calls a kernel
compiles it and writes the machine code to numba's on-disk cache (``__pycache__`` beside the
source file, or ``NUMBA_CACHE_DIR`` when set; a read-only source folder falls back to numba's
user-wide cache folder); every later process loads it from there in milliseconds. A cache
entry is valid while the source file keeps its modification time and size and the CPU is the
same, so an edited kernel is compiled again and a cache from another machine is ignored.
numba writes each entry under a temporary name and renames it into place, so processes that
start at once never read half a file.

What a cache does not give is order: the aggregation jobs of the workflow start together
(one per model and n), and with a cold cache every one of them compiled the same kernels at
once (10-25 s each). Rule ``numba_cache`` (workflow/rules/common.smk) runs :func:`warm_up`
at the start of the run, beside the data stages, so that the aggregations find the kernels
compiled (docs/decisions.md#numba-warm-up). :func:`warm_up` runs both consensus models
through :class:`clumpscout.model.aggregator.Aggregator` on a small synthetic boxes table read
back from Parquet, as the jobs read theirs, so the kernels are compiled for the argument
types the jobs pass.

:class:`CompileMeter` measures what a process compiled (numba's ``numba:compile`` events,
outermost only: a kernel that compiles the kernels it calls counts once); :func:`metered`
logs it at the end of the jobs that run the aggregation's kernels (rules aggregate,
replay_labels and replay: "numba: N kernel(s) compiled in X s"), ~0 once the cache is warm.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from clumpscout.io import write_parquet

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


class CompileMeter:
    """Count and time numba compilations (outermost ``numba:compile`` events) while active.

    >>> with CompileMeter() as meter:
    ...     pass
    >>> meter.kernels, meter.seconds
    (0, 0.0)
    """

    def __init__(self) -> None:
        self.kernels = 0
        self.seconds = 0.0
        self.names: list[str] = []
        self.per_kernel: dict[str, float] = {}  # seconds per outermost kernel compiled
        self._depth = 0
        self._t0 = 0.0
        self._listener = None

    def __enter__(self) -> CompileMeter:
        import numba.core.event as ev

        meter = self

        class _Listener(ev.Listener):
            def on_start(self, event) -> None:
                if meter._depth == 0:
                    meter._t0 = time.perf_counter()
                    meter.kernels += 1
                    data = event.data if isinstance(event.data, dict) else {}
                    name = getattr(data.get("dispatcher"), "__qualname__", None)
                    meter.names.append(str(name or "?"))
                meter._depth += 1

            def on_end(self, event) -> None:
                meter._depth -= 1
                if meter._depth == 0:
                    dt = time.perf_counter() - meter._t0
                    meter.seconds += dt
                    name = meter.names[-1]
                    meter.per_kernel[name] = meter.per_kernel.get(name, 0.0) + dt

        self._listener = _Listener()
        ev.register("numba:compile", self._listener)
        return self

    def __exit__(self, *exc: object) -> None:
        import numba.core.event as ev

        ev.unregister("numba:compile", self._listener)

    def summary(self) -> str:
        """One log line: how many kernels were compiled and in how many seconds."""
        return f"numba: {self.kernels} kernel(s) compiled in {self.seconds:.2f} s"


@contextlib.contextmanager
def metered():
    """Log what numba compiled inside the ``with`` block (:meth:`CompileMeter.summary`)."""
    with CompileMeter() as meter:
        yield meter
    log.info(meter.summary())


def cache_dir() -> str:
    """Where numba keeps its cache: NUMBA_CACHE_DIR, else ``__pycache__`` beside each source."""
    return os.environ.get("NUMBA_CACHE_DIR") or "__pycache__ beside each kernel's source file"


def warm_up_boxes(n_subjects: int = 60, n_volunteers: int = 15, seed: int = 0) -> pd.DataFrame:
    """A small boxes table (the columns the aggregation reads) that exercises every kernel:
    subjects with two clumps marked by most of their 6 volunteers, stray boxes, double
    clicks, empty classifications and subjects nobody marked."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    cid = 0
    for s in range(n_subjects):
        for j in range(6):
            cid += 1
            vol = f"v{(s + j) % n_volunteers}"
            k = int(rng.integers(0, 4)) if s % 10 else 0
            if k == 0:
                rows.append((cid, s, vol, np.nan, np.nan, np.nan, np.nan))
            for c in range(k):
                x, y = (20.0 + 40.0 * (c % 2) + rng.normal(0, 1.5), 30.0 + rng.normal(0, 1.5))
                if c == 2:  # a stray box somewhere else
                    x, y = rng.uniform(0, 85, 2)
                rows.append((cid, s, vol, x, y, x + 12.0, y + 12.0))
    df = pd.DataFrame(
        rows, columns=["classification_id", "subject_id", "volunteer", "x1", "y1", "x2", "y2"]
    )
    df["image_width"] = 100.0
    df["image_height"] = 100.0
    return df


def warm_up(models: tuple[str, ...] = ("generative", "paper")) -> dict:
    """Compile (or load) the aggregation's kernels by aggregating :func:`warm_up_boxes` with
    every model; the report says what was compiled and how long it took."""
    t0 = time.perf_counter()
    quiet = logging.getLogger("clumpscout.model")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # the warm-up's own cycles are noise in the log
    try:
        with CompileMeter() as meter, tempfile.TemporaryDirectory() as tmp:
            # imported here, not at the top: a kernel compiled while the model is imported is
            # counted too, and importing metered() (jobs do, before the model) imports no model
            from clumpscout.model.aggregator import Aggregator
            from clumpscout.model.source import read_boxes

            path = Path(tmp) / "boxes.parquet"
            write_parquet(warm_up_boxes(), path)
            boxes = read_boxes(path)
            for model in models:
                Aggregator({"model": model}, seed=0).fit(boxes, path=path)
    finally:
        quiet.setLevel(level)
    report = {
        "kernels_compiled": meter.kernels,
        "compile_seconds": round(meter.seconds, 3),
        "compiled": {k: round(v, 3) for k, v in sorted(meter.per_kernel.items())},
        "models": list(models),
        "cache": cache_dir(),
        "seconds": round(time.perf_counter() - t0, 3),
    }
    log.info(
        "%s (%s); warm-up done in %.1f s",
        meter.summary(),
        ", ".join(report["compiled"]) or "all loaded from the cache",
        report["seconds"],
    )
    return report
