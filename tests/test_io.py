"""Output writers: atomic, and readable like any file the user creates (umask respected)."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from clumpscout.io import atomic_path, write_json, write_parquet


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_outputs_respect_the_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        write_parquet(pd.DataFrame({"a": [1]}), tmp_path / "t.parquet")
        write_json({"a": 1}, tmp_path / "r.json")
    finally:
        os.umask(old)
    for name in ("t.parquet", "r.json"):
        mode = stat.S_IMODE((tmp_path / name).stat().st_mode)
        assert mode == 0o666 & ~mask, (name, oct(mode))


def test_a_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "x.json"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_ecsv_in_blocks_has_the_whole_tables_bytes(tmp_path):
    """Blocks of 3 rows (header once) give the bytes astropy writes for the whole table."""
    import astropy.units as u
    import numpy as np
    from astropy.table import Table

    from clumpscout.ecsv import write_ecsv

    t = Table({"subject_id": np.arange(10) * 7, "x": np.linspace(0.1, 99.9, 10) / 3})
    t["x"].unit = u.pix
    t.meta["note"] = "ten rows"
    t.write(tmp_path / "whole.ecsv", format="ascii.ecsv")
    write_ecsv(t, tmp_path / "blocks.ecsv", rows=3)
    assert (tmp_path / "blocks.ecsv").read_bytes() == (tmp_path / "whole.ecsv").read_bytes()
    write_ecsv(t[:0], tmp_path / "empty.ecsv", rows=3)
    assert Table.read(tmp_path / "empty.ecsv").colnames == ["subject_id", "x"]


def test_sigterm_removes_a_half_written_output(tmp_path):
    """A cancelled job (SIGTERM) leaves neither the output nor its temporary file."""
    import signal
    import subprocess
    import sys
    import textwrap

    out = tmp_path / "out.parquet"
    code = textwrap.dedent(
        f"""
        import os, signal, time
        from clumpscout.errors import exit_cleanly_on_sigterm
        from clumpscout.io import atomic_path
        exit_cleanly_on_sigterm()
        with atomic_path({str(out)!r}) as tmp:
            tmp.write_text("half")
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []
