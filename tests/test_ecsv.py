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
    # every kind of column (astropy's csv writer for the lines), and numbers only (joined)
    for name, table in (("all", t), ("numbers", t["i", "f", "b", "m"])):
        table.write(tmp_path / f"astropy_{name}.ecsv", format="ascii.ecsv")
        write_ecsv(table, tmp_path / f"ours_{name}.ecsv")
        ours = (tmp_path / f"ours_{name}.ecsv").read_bytes()
        assert ours == (tmp_path / f"astropy_{name}.ecsv").read_bytes(), name
    assert b' ""\n' in ours  # the masked cells (of the last column)
    back = Table.read(tmp_path / "ours_numbers.ecsv", format="ascii.ecsv")
    assert np.array_equal(back["f"], f, equal_nan=True)
    assert np.array_equal(back["m"].mask, t["m"].mask)
