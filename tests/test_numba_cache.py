"""numba's kernels compiled once per run: the compile meter and the cache across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pandas as pd
import pytest

from clumpscout.numba_cache import CompileMeter, warm_up_boxes


def test_meter_counts_a_compilation_once_and_nothing_afterwards():
    @numba.njit
    def inner(x):
        return x + 1.0

    @numba.njit
    def outer(x):
        return inner(x) * 2.0  # compiling outer compiles inner inside it: counted once

    with CompileMeter() as first:
        assert outer(1.0) == 4.0
    with CompileMeter() as again:
        assert outer(2.0) == 6.0
    assert first.kernels == 1 and first.seconds > 0
    assert (again.kernels, again.seconds) == (0, 0.0)
    assert again.summary() == "numba: 0 kernel(s) compiled in 0.00 s"


@pytest.mark.slow
def test_a_second_process_loads_the_kernel_from_the_cache(tmp_path):
    """A cache=True kernel compiled in one process is loaded, not compiled, by the next,
    through the same cache folder (NUMBA_CACHE_DIR here, __pycache__ in a project)."""
    (tmp_path / "kern.py").write_text(
        textwrap.dedent(
            """
            import numba

            @numba.njit(cache=True)
            def total(x):
                s = 0.0
                for v in x:
                    s += v
                return s
            """
        )
    )
    script = textwrap.dedent(
        """
        import numpy as np
        from clumpscout.numba_cache import CompileMeter
        with CompileMeter() as m:
            import kern
            assert kern.total(np.arange(4.0)) == 6.0
        print(m.kernels)
        """
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
        for _ in range(2)
    ]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert [r.stdout.split()[-1] for r in runs] == ["1", "0"]


def test_warm_up_boxes_hold_clumps_strays_and_empty_classifications():
    df = warm_up_boxes()
    assert df["subject_id"].nunique() == 60
    per_cls = df.groupby("classification_id")["x1"].count()
    assert (per_cls == 0).any() and (per_cls >= 2).any()  # empty ones and several boxes
    # subjects 0, 10, ...: nobody marked anything
    assert df.loc[df["subject_id"] % 10 == 0, "x1"].isna().all()
    assert np.isfinite(df["x2"] - df["x1"]).sum() > 300
    assert isinstance(df, pd.DataFrame)
