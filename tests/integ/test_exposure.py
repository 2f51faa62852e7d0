"""Nothing a trial starts listens beyond loopback: checked with ``ss -ltnp`` while it runs.

Servers ftbench starts (the store, gloo's listeners, the lighthouse) bind loopback;
stacks whose servers cannot be told where to bind (torchft's Manager and healing
server, torchrun's stores) run in a private network namespace, where root's ``ss``
does not even see them. Needs root (``ss -p`` names other users' processes, and the
private namespace needs CAP_NET_ADMIN).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from bench.procs.hygiene import MARKER, marked_pids

pytestmark = [
    pytest.mark.integ,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ss") is None, reason="needs root and ss (iproute2)"),
]

SCENARIO = """
name = "exposure"
[workload]
kind = "ddp"
world_size = 2
steps = {steps}
pg_timeout_s = 10
[[faults]]
kind = "kill"
target = {{ ranks = [1] }}
trigger = {{ at_step = 40 }}
[recovery]
strategy = "{strategy}"
[measure]
trials = 1
deadline_s = 90
"""

_USERS = re.compile(r"pid=(\d+)")


def listeners() -> list[tuple[str, set[int]]]:
    """(local address, pids) of every listening TCP socket in this namespace.

    ``ss`` runs without the run's marker, which this process carries while a run is in
    flight: the check for leftovers after the run must not find the watcher's own ``ss``."""
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=10, env=env).stdout
    found = []
    for line in out.splitlines():
        cols = line.split()
        if len(cols) >= 4:
            found.append((cols[3], {int(p) for p in _USERS.findall(line)}))
    return found


def is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]").split("%")[0]
    if host in ("*", "0.0.0.0", "::"):
        return False
    ip = ipaddress.ip_address(host)
    return ip.is_loopback or (
        isinstance(ip, ipaddress.IPv6Address) and bool(ip.ipv4_mapped and ip.ipv4_mapped.is_loopback)
    )


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("strategy", "steps", "confined"), [("reinit", 400, False), ("torchft", 900, True), ("restart", 300, True)]
)
def test_a_trial_listens_on_loopback_only(run_scenario, host, strategy, steps, confined) -> None:
    if strategy == "torchft":
        pytest.importorskip("torchft")
    seen: dict[int, set[str]] = {}
    netns: dict[int, str] = {}
    """pid -> the namespace it was last seen in (a new process enters its own at start)."""
    done = threading.Event()

    def watch() -> None:
        mine = os.readlink("/proc/self/ns/net")
        while not done.is_set():
            pids = set(marked_pids(host.run_id)) - host.infrastructure()
            for address, owners in listeners():
                for pid in owners & pids:
                    seen.setdefault(pid, set()).add(address)
            for pid in pids:
                try:
                    netns[pid] = "own" if os.readlink(f"/proc/{pid}/ns/net") == mine else "private"
                except OSError:
                    pass
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        run_scenario(SCENARIO.format(strategy=strategy, steps=steps))
    finally:
        done.set()
        thread.join(10)
    exposed = {pid: sorted(a for a in addresses if not is_loopback(a)) for pid, addresses in seen.items()}
    assert not any(exposed.values()), f"listening beyond loopback: {exposed}"
    if confined:
        assert set(netns.values()) == {"private"}, f"every process of the trial ran in its private namespace: {netns}"
    else:
        assert set(netns.values()) == {"own"} and seen, "the trial's servers listen in this namespace, on loopback"
