"""``ftbench scale`` across two real Slurm nodes on one machine (tools/slurm/localslurm.py),
submitted as a user would: ``sbatch --nodes=2 --ntasks-per-node=1 tools/slurm/ftbench.sbatch
scale ...``. The coordinators run in the batch shell on n0, listening on n0's address; each
node's agent (srun) holds that node's participants. Afterwards nothing of the cluster or
the run may be left."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integ.slurm import LocalSlurm
from tests.integ.test_slurm_two_nodes import SCRIPT, assert_nothing_left, job_env, two_nodes  # noqa: F401

pytestmark = [pytest.mark.integ, pytest.mark.root, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_scale_across_two_slurm_nodes(two_nodes: LocalSlurm, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "results"
    job = two_nodes.sbatch(
        SCRIPT,
        "scale",
        "--out",
        str(out),
        "--set",
        "coordinators=['tcpstore-libuv', 'membership']",
        "--set",
        "sizes=[8, 32]",
        options=("--nodes=2", "--ntasks-per-node=1"),
        env=job_env(),
        cwd=tmp_path,
    )
    state = two_nodes.wait(job, timeout_s=480)
    log = two_nodes.job_output(job)
    assert state == "COMPLETED", f"job {job} {state}:\n{log}"

    (info_path,) = out.glob("scale/*/scale.json")
    info = json.loads(info_path.read_text())
    assert info["finished"] and info["stops"] == [], log
    hosts = {h: (d["hostname"], d["address"]) for h, d in info["hosts"].items()}
    assert hosts == {"h0": ("n0", "10.251.0.1"), "h1": ("n1", "10.251.0.2")}, "one agent per node"
    points = pd.read_csv(info_path.parent / "points.csv")
    assert len(points) == 2 * (3 + 4), points.to_string()
    assert (points["hosts"] == 2).all() and (points["done"] == points["expected"]).all(), points.to_string()
    assert ((points["p50_s"] > 0) & (points["all_s"] < 60)).all(), points.to_string()
    # The nodes share this machine's CLOCK_MONOTONIC: every offset's truth is 0.
    for line in (info_path.parent / "logs" / "clocks.jsonl").read_text().splitlines():
        e = json.loads(line)
        for phase in ("start", "end"):
            assert abs(e[phase]["offset_ns"]) <= e[phase]["err_ns"], e
    assert log.count("the run is over after 1 trial(s)") == 2, log
    assert "Clocks across hosts" in log

    daemons = two_nodes.daemon_pids
    assert two_nodes.close() == []
    assert_nothing_left(two_nodes, daemons)
