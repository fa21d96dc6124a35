"""clumpscout.ecsv.write_ecsv writes the bytes astropy's ECSV writer writes."""

from __future__ import annotations

import numpy as np
from astropy.table import MaskedColumn, Table

from clumpscout.ecsv import write_ecsv


def test_same_bytes_as_astropy_for_every_kind_of_column(tmp_path):
    rng = np.random.default_rng(3)
    n = 200
    t = Table()
    t["i"] = rng.integers(-(2**62), 2**62, n)
    # floats over the whole range, with the values whose text is special
    f = rng.normal(size=n) * 10.0 ** rng.integers(-320, 308, n)
    f[:9] = [0.0, -0.0, np.nan, np.inf, -np.inf, 1e16, 1e-5, 5e-324, 1 / 3]
    t["f"] = f
    t["f32"] = np.clip(f, -1e30, 1e30).astype(np.float32)  # astropy's own per-cell path
    t["b"] = rng.random(n) < 0.5
    t["m"] = MaskedColumn(rng.random(n), mask=rng.random(n) < 0.3)
    t["s"] = np.where(rng.random(n) < 0.5, "a b", "")
    t["v"] = rng.random((n, 2))
    t["f"].unit = "pix"
    t.meta["note"] = {"seed": 3}
    t.write(tmp_path / "astropy.ecsv", format="ascii.ecsv")
    write_ecsv(t, tmp_path / "ours.ecsv")
    assert (tmp_path / "ours.ecsv").read_bytes() == (tmp_path / "astropy.ecsv").read_bytes()
    back = Table.read(tmp_path / "ours.ecsv", format="ascii.ecsv")
    assert np.array_equal(back["f"], f, equal_nan=True)
