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
