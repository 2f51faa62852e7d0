"""``ftbench scale``, end to end: a run directory, the run's processes (marker, guard,
forkserver), every coordinator of the spec swept until its limit, and the page.

Ctrl-C and SIGTERM end the current point: every process the sweep started is ended
(the driver's own, then the run's marker swept), the points measured so far stay in
``points.csv``, and ``scale.json`` says the run was interrupted.

Across hosts (``cluster``: agents the cluster started, ``ftbench scale --agents-at``) the
participants are the hosts' (:mod:`bench.scale.remote`); ``scale.json`` then also has
``hosts``: each host's name, address, logs, what it could hold, and its clock's offset to
this one over the run with its uncertainty.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.procs import machine
from bench.procs.launcher import LaunchError, ProcessHost
from bench.results.writer import RunDir
from bench.scale import rundir, system
from bench.scale.coordinators import COORDINATORS
from bench.scale.driver import Driver
from bench.scale.records import Record, Stop
from bench.scale.spec import ScaleSpec

if TYPE_CHECKING:
    from bench.hosts.cluster import Cluster
    from bench.scale.remote import Fleet

ACROSS_HOSTS = (
    "each host's processes stamp on that host's CLOCK_MONOTONIC; at the start and the end of "
    "every point each host's offset to this one is estimated from 32 round trips through the run "
    "store (the shortest kept: within half its round trip plus both clocks' resolutions); the "
    "release goes to each host on its own clock by the start estimate and the results come back "
    "on this one's. A latency is a difference of one host's stamps; the offset's error moves "
    "when each host released, so every figure of a point is uncertain by clock_err_s, the "
    "largest over its hosts of how far the start estimate may be from the offset during the point"
)


def _load() -> dict[str, Any]:
    one, five, fifteen = os.getloadavg()
    return {"loadavg": [round(one, 2), round(five, 2), round(fifteen, 2)], "cpus": os.cpu_count()}


def skipped(name: str) -> str:
    """Why a coordinator cannot run here ("" when it can)."""
    module = COORDINATORS[name].module
    if not module:
        return ""
    try:
        importlib.import_module(module)
    except ImportError as err:
        return f"{module} does not import: {err}"
    return ""


def idle_s(spec: ScaleSpec) -> float:
    """How long a host may hear nothing from the harness before it ends its session: past
    the longest silence of a point (a coordinator's start, setup, an operation)."""
    return max(600.0, 10 * spec.deadline_s)


def isolate() -> str:
    """What ``ftbench scale`` on one machine gives its run, in its own process (never in a
    process that goes on to other work: the move into a network namespace is for good):
    a loopback of its own, every port on it for the run's connections (16,384 members of
    two connections need 32,768 to one address and port; the host has 28,232), and as
    many descriptors as root may give. Says what it got."""
    why = system.own_network()
    if why:
        return f"the host's loopback ({why})"
    return (
        f"a network namespace of its own: loopback only, ephemeral ports {system.PORT_RANGE[0]}-{system.PORT_RANGE[1]}"
    )


def run(
    spec: ScaleSpec,
    out: Path,
    progress: Callable[[str], None] = print,
    *,
    cluster: Cluster | None = None,
    hosts: int = 0,
    network: str = "the host's loopback",
) -> Path:
    """Measure ``spec``; returns the run directory. With ``cluster``, the participants are
    spread over its ``hosts`` agents' hosts. ``network`` says what the caller gave the run
    (``ftbench scale`` a loopback of its own: :func:`isolate`)."""
    path = RunDir.create(out, rundir.SCENARIO, machine.commit()).path
    network = "the hosts' (across hosts)" if cluster is not None else network
    descriptors = system.raise_fd_hard_limit()
    pid_max, threads = system.thread_ids()
    info: dict[str, Any] = {
        "created": datetime.now(UTC).isoformat(),
        "commit": machine.commit(),
        "versions": machine.versions(),
        "machine": machine.host(),
        "clock": {
            **machine.clock(),
            "cpu_time": "utime + stime of /proc/PID/stat",
            "cpu_resolution_s": system.CPU_RESOLUTION_S,
        },
        "spec": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(spec).items()},
        "network": network,
        "limits": {
            "raised": descriptors,
            "descriptors": system.fd_limit(),
            "ephemeral_ports": system.ephemeral_ports(),
            "pid_max": pid_max,
            "threads_in_use_at_start": threads,
            "memory_available_bytes": system.memory_available(),
        },
        "load_before": _load(),
        "stops": [],
        "skipped": {},
        "finished": False,
    }
    rundir.write_info(path, info)
    started = time.monotonic()
    progress(f"ftbench scale: {', '.join(spec.coordinators)} at {', '.join(f'{n:,}' for n in spec.sizes)} participants")
    progress(f"results: {path}")
    host = ProcessHost()
    info["run_id"] = host.run_id  # the marker its processes carry (FTBENCH_RUN), for ftbench cleanup
    rundir.write_info(path, info)
    driver: Driver | None = None
    fleet: Fleet | None = None
    try:
        if cluster is not None:
            from bench.scale.remote import Fleet

            fleet = Fleet(
                cluster, hosts, path, resolver=spec.resolver == "isolated", idle_s=idle_s(spec), progress=progress
            )
            info["clock"]["across_hosts"] = ACROSS_HOSTS
            info["limits"]["where"] = "the head's, where the coordinator runs; each host's are under hosts"
            fleet.open()
            info["hosts"] = fleet.describe()
            rundir.write_info(path, info)
        driver = Driver(spec, path, host, progress=progress, fleet=fleet)
        info["resolver"] = driver.resolver_note
        # What the model of the protocols needs beside the operations (bench/scale/probes.py).
        info["probes"] = {"interpreter_lock": driver.probe("interpreter_lock")}
        if "rendezvous" in spec.coordinators and not skipped("rendezvous"):
            info["probes"]["rendezvous_state"] = driver.probe("rendezvous_state")
        rundir.write_info(path, info)
        for name in spec.coordinators:
            why = skipped(name)
            if why:
                info["skipped"][name] = why
                progress(f"{name}: skipped: {why}")
                continue
            progress(f"{name}:")
            t0 = time.monotonic()
            for item in driver.sweep(COORDINATORS[name]):
                if isinstance(item, Record):
                    rundir.append(path, item)
                elif isinstance(item, Stop):
                    info["stops"].append(asdict(item))
                    what = f"{item.op} " if item.op else ""
                    progress(f"  {name}: {what}stopped at N={item.n:,}: {item.limit}: {item.reason}")
                    rundir.write_info(path, info)
            info.setdefault("seconds", {})[name] = round(time.monotonic() - t0, 1)
            info["resolver"] = driver.resolver_note
            if fleet is not None:
                info["hosts"] = fleet.describe()
            rundir.write_info(path, info)
        info["finished"] = True
    except KeyboardInterrupt:
        info["interrupted"] = True
        raise
    except LaunchError as err:  # a host lost, or agents that did not come: said, and kept
        info["error"] = str(err)
        raise
    finally:
        try:
            if driver is not None:
                driver.close()
        finally:
            if fleet is not None:
                fleet.close()
                info["hosts"] = fleet.describe()
            host.close()
        info["duration_s"] = round(time.monotonic() - started, 1)
        info["load_after"] = _load()
        rundir.write_info(path, info)
    return path
