"""The local Slurm cluster's names, addresses, timers and the one exception its parts
raise (tools/slurm/localslurm.py says why each is as it is). Standard library only."""

from __future__ import annotations

from pathlib import Path

CONTROLLER = "ctl"
"""Host name of the controller's namespace (slurmctld, munged; where clients run)."""

PARTITION = "ftbench"

SUBNET = "10.251.0"
"""The /24 of every cluster; it lives only inside the cluster's own namespaces."""
CONTROLLER_ADDRESS = f"{SUBNET}.254"

NETNS_PREFIX = "ftslurm-"
"""Every namespace of a cluster is named ``ftslurm-TAG-ROLE``; ``down --all`` finds them so."""
NETNS_DIR = Path("/run/netns")

FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
)
"""Job states after which a job never runs again (``wait`` would otherwise wait in vain)."""

START_DEADLINE_S = 60.0
"""How long :meth:`LocalSlurm.start` may take in all, from the first daemon to idle nodes."""

STOP_DEADLINE_S = 10.0
"""How long each stage of teardown waits for processes before it escalates."""

TEST_TIMERS: dict[str, str] = {
    "SlurmdTimeout": "30",
    "KillWait": "5",
    "MessageTimeout": "10",
    "InactiveLimit": "0",
    "MinJobAge": "600",
}
"""The timing knobs of a test cluster: a dead node or step is noticed within a test's time.
``MinJobAge`` keeps a finished job in ``scontrol show job`` (there is no accounting
database, so no ``sacct``) for 10 minutes."""

SLURM_DEFAULT_TIMERS: dict[str, str] = {
    "SlurmdTimeout": "300",
    "KillWait": "30",
    "MessageTimeout": "10",
    "TCPTimeout": "2",
    "InactiveLimit": "0",
    "MinJobAge": "600",  # Slurm's default is 300; kept long so the final state can be read
}
"""Slurm 22.05's own defaults of the knobs that decide how a lost node is handled
(slurm.conf(5)), for measurements "as shipped"."""

REQUIRED_BINARIES = (
    "munged",
    "munge",
    "slurmctld",
    "slurmd",
    "slurmstepd",
    "sbatch",
    "srun",
    "scontrol",
    "scancel",
    "squeue",
    "sinfo",
    "ip",
    "nsenter",
    "unshare",
    "sleep",
)

STATE_FILE = "cluster.json"
"""What ``up`` leaves in WORKDIR for ``down``, ``run`` and ``lose-node``."""


class SlurmUnavailable(Exception):
    """The local cluster cannot run here; the message is a one-line reason (a test skips with it)."""
