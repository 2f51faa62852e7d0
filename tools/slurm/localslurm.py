#!/usr/bin/env python3
"""A private, throw-away Slurm cluster on one machine: one controller and N nodes, each in
a host namespace of its own, for ftbench's multi-node runs and tests.

    python3 tools/slurm/localslurm.py up WORKDIR --nodes 2 [--set SlurmdTimeout=300 ...]
    python3 tools/slurm/localslurm.py run WORKDIR -- sbatch --nodes=2 ... tools/slurm/ftbench.sbatch ...
    python3 tools/slurm/localslurm.py run --host n1 WORKDIR -- hostname   # options before WORKDIR
    python3 tools/slurm/localslurm.py lose-node WORKDIR n1 [--how kill|cut]
    python3 tools/slurm/localslurm.py down WORKDIR          # or: down --all (every ftslurm-* namespace)

As root, from Debian's packages (``apt-get install -y slurmd slurmctld slurm-client munge``:
Slurm 22.05), with every file (config, state, logs, munge key and socket, pid files) under
WORKDIR and nothing in /etc. ``up`` leaves the daemons running and records them in
``WORKDIR/cluster.json``; ``down`` (also what ``up`` does when it fails half-way) stops
them and removes everything: daemons, slurmstepd, job processes, namespaces. The tests use
the same code as a context manager (``tests/integ/slurm.py``). Standard library only, so
that Debian's ``python3`` runs it without ftbench's environment.

Topology for ``--nodes 2`` (tag ``t``; ``n0`` .. ``nN-1``, ``ctl``, ``hub``)::

    netns ftslurm-t-hub : bridge ftsbr, ports ftsp-ctl, ftsp-n0, ftsp-n1 (veth ends)
    netns ftslurm-t-ctl : eth0 10.251.0.254/24, host name ctl: munged, slurmctld, clients
    netns ftslurm-t-n0  : eth0 10.251.0.1/24,   host name n0:  slurmd -N n0, its jobs
    netns ftslurm-t-n1  : eth0 10.251.0.2/24,   host name n1:  slurmd -N n1, its jobs

The subnet is the same in every cluster: it exists only inside the cluster's namespaces,
which nothing else reaches (the root namespace has no port on the bridge).

Why it is built the way it is (each point was a failure without it):

* slurmctld and slurmd listen on every interface, so every daemon runs in a network
  namespace of the cluster's own; they cannot collide with a system Slurm or another test.
  A namespace needs a non-loopback IPv4 address, or Slurm's ``getaddrinfo(AI_ADDRCONFIG)``
  fails ("Name or service not known"); the veth into the bridge provides it.
* Each host is also a UTS namespace (its host name: slurmctld starts only where the host
  name is ``SlurmctldHost``'s, ranks and torchrun advertise theirs) and a mount namespace
  in which WORKDIR/etc/hosts is bind-mounted on /etc/hosts: every host resolves every
  other by name, as on a site with DNS, and the machine's /etc/hosts is untouched. A
  ``holder`` process (``sleep``) keeps these namespaces alive while daemons come and go;
  everything else enters them with ``nsenter -t HOLDER --net --uts --mount``.
* Daemons enter the namespaces with ``nsenter``, not ``ip netns exec``: the latter
  remounts /sys, slurmd then finds no /sys/fs/cgroup and stops with "Unable to
  initialize cgroup plugin".
* One munged, in the controller's namespaces, serves every host: its socket is a path in
  WORKDIR, and a path socket is reached from any network namespace. (A site runs one per
  node with one shared key; Slurm cannot tell the difference.)
* Each slurmd is told its node name (``-N``) and its spool, pid and log files carry it
  (``%n``), so the nodes share one slurm.conf, as a site's do.
* ``proctrack/linuxproc`` and ``task/none``: no cgroup hierarchy is created or needed.
* Each node declares ``cpus`` CPUs (8 by default) and ``SlurmdParameters=config_overrides``
  makes slurmd report the declared figures instead of the 2 real cores, so a job of
  ``--ntasks=3`` is accepted on a 2-core machine instead of the node being drained.
* Clients (sbatch, srun, scontrol ...) reach the controller only from inside the cluster,
  so every client command here runs in the controller's namespaces (the cluster's login
  node); job processes inherit their slurmd's namespaces, so ``srun`` inside a job needs
  nothing extra.
* Teardown cannot rely on process trees alone: slurmstepd daemonizes away from slurmd.
  Every process that still lives in one of the cluster's network namespaces is therefore
  killed before the namespaces are deleted; nothing survives, also when start-up failed
  half-way or the ``up`` process itself was killed (``down`` reads cluster.json, and
  ``down --all`` finds the namespaces by name).

One Slurm rule matters to job scripts (since 20.11, true of any cluster): a step started
without ``--exact`` gets every CPU of the job, so a second concurrent ``srun`` waits ("Job N
step creation temporarily disabled, retrying (Requested nodes are busy)") until the first
ends, unless the first used ``--exact`` or the second uses ``--overlap``. Plain commands of
the batch shell are no step and run alongside any step.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

# Sibling modules, not a package: run as a script (or with tools/slurm on sys.path).
from slurmcluster import LocalSlurm, down_all
from slurmconf import (
    CONTROLLER,
    CONTROLLER_ADDRESS,
    FINAL_STATES,
    SLURM_DEFAULT_TIMERS,
    TEST_TIMERS,
    SlurmUnavailable,
)
from slurmprocs import leftover_namespaces

__all__ = [
    "FINAL_STATES",
    "SLURM_DEFAULT_TIMERS",
    "TEST_TIMERS",
    "LocalSlurm",
    "SlurmUnavailable",
    "down_all",
    "leftover_namespaces",
    "main",
]


def parse_settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not k:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE (a slurm.conf key)")
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    """The command line: up, down, run, lose-node, status (see the module's docstring)."""
    p = argparse.ArgumentParser(prog="localslurm", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="start a cluster in WORKDIR and leave it running")
    up.add_argument("workdir", type=Path)
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--cpus", type=int, default=8, help="CPUs each node declares")
    up.add_argument("--timers", choices=("test", "slurm-defaults"), default="test")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a slurm.conf setting")
    down = sub.add_parser("down", help="stop the cluster of WORKDIR and remove everything of it")
    down.add_argument("workdir", type=Path, nargs="?")
    down.add_argument("--all", action="store_true", help="every ftslurm-* cluster on the machine")
    run = sub.add_parser("run", help="run a command on a host of the cluster (default: the controller)")
    run.add_argument("workdir", type=Path)
    run.add_argument("--host", default=CONTROLLER)
    run.add_argument("command", nargs=argparse.REMAINDER)
    lose = sub.add_parser("lose-node", help="take a node away under its jobs")
    lose.add_argument("workdir", type=Path)
    lose.add_argument("node")
    lose.add_argument("--how", choices=("kill", "cut"), default="kill")
    status = sub.add_parser("status", help="the nodes' and jobs' states")
    status.add_argument("workdir", type=Path)
    args = p.parse_args(argv)

    try:
        if args.cmd == "up":
            timers = TEST_TIMERS if args.timers == "test" else SLURM_DEFAULT_TIMERS
            slurm = LocalSlurm(
                args.workdir, nodes=args.nodes, cpus=args.cpus, timers=timers, settings=parse_settings(args.set)
            )
            slurm.start()
            print(
                f"cluster {slurm.tag} up in {slurm.workdir}: controller {CONTROLLER} ({CONTROLLER_ADDRESS}), "
                f"nodes {', '.join(f'{n} ({slurm.address(n)})' for n in slurm.nodes)}"
            )
            print(f"clients: {sys.argv[0]} run {slurm.workdir} -- sinfo")
            return 0
        if args.cmd == "down":
            if args.all:
                problems = down_all()
            elif args.workdir is None:
                p.error("down: name WORKDIR or give --all")
            else:
                problems = LocalSlurm.attach(args.workdir).close()
            for line in problems:
                print(f"localslurm: left behind: {line}", file=sys.stderr)
            return 1 if problems else 0
        slurm = LocalSlurm.attach(args.workdir)
        if args.cmd == "run":
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                p.error("run: give a command after --")
            env = slurm.client_env()
            return subprocess.run(slurm.in_namespace(*command, host=args.host), env=env, check=False).returncode
        if args.cmd == "lose-node":
            t = slurm.lose_node(args.node, args.how)
            print(f"{args.node} lost ({args.how}) at CLOCK_MONOTONIC {t:.6f}")
            return 0
        if args.cmd == "status":
            print(slurm.run("sinfo", "-N", "-o", "%N %T %E", check=False).stdout, end="")
            print(slurm.run("squeue", "-o", "%i %T %R %N", check=False).stdout, end="")
            return 0
    except SlurmUnavailable as e:
        print(f"localslurm: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
