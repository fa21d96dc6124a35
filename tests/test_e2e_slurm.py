"""The default DAG (tiny universe) up to the aggregations, through the official SLURM
executor on a one-node SLURM cluster on localhost, gives byte-identical tables to a local
run. Up to the aggregations (13 jobs: the data stages, the warm-up, the gold standard and
both models at two n) because each SLURM job starts its own Snakemake (~10 s on 2 cores):
the whole DAG's 108 jobs took 19 minutes there, and the executor does the same for every rule.

Needs root and Debian's slurm-wlm (``.ci/run`` installs it when it can); skipped with a
reason otherwise. The cluster is started by tests/slurm/local_cluster.sh and the run uses
profiles/slurm-local (squeue for job status: a one-node test cluster has no accounting
database).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import REPO
from test_e2e import make_project, snakemake, table_hashes, tiny_config

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SCRIPT = REPO / "tests/slurm/local_cluster.sh"
UNTIL = ("--until", "aggregate")


def _start_slurm(state: Path) -> dict | None:
    if os.geteuid() != 0 or shutil.which("slurmctld") is None or shutil.which("sbatch") is None:
        return None
    r = subprocess.run(
        ["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True, timeout=120
    )
    if r.returncode != 0:  # stop anyway: it removes a half-started cluster's /etc config
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], check=False)
        return None
    env = dict(os.environ)
    env["SLURM_CONF"] = str(state / "slurm.conf")
    return env


def test_slurm_executor_gives_the_local_results(tmp_path):
    pytest.importorskip("snakemake_executor_plugin_slurm")
    state = tmp_path / "slurm"
    env = _start_slurm(state)
    if env is None:
        pytest.skip("cannot start a local SLURM cluster (needs root and Debian's slurm-wlm)")
    try:
        local = make_project(tmp_path / "local", tiny_config())
        snakemake(local, "--cores", "2", *UNTIL)
        project = make_project(tmp_path / "run_s", tiny_config())
        snakemake(project, "--profile", "profiles/slurm-local", *UNTIL, env=env, timeout=900)
        a, b = table_hashes(local / "results"), table_hashes(project / "results")
        assert a.keys() == b.keys()
        # per model and n: labels, subjects, volunteers, assignments, report.json (the
        # workflow asks for no clumps.ecsv: the catalogue's ECSV is the one users read)
        assert sum(k.startswith("aggregate/") for k in a) == 4 * 5, sorted(a)
        differing = [k for k in a if a[k] != b[k]]
        assert not differing, differing
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], check=False)
