"""ray-train's harness side: a Ray cluster per trial, a driver on its head, torn down after.

:meth:`RayTrainJob.start` starts one Ray node per host of the trial's topology (the head
on h0 first, the others once its GCS answers, :mod:`.cluster`), records each node's
process as a command of its host (``command_start``: what a ``host-down`` fault takes
away, with every process below it), waits until every raylet answers, then starts the
driver inside h0's namespaces. The job is over when the driver has exited; :meth:`close`
kills every process of the trial (the run's marker is in every Ray process's
environment, inherited from ``ray start``), and each node's private ``/tmp`` goes with
its processes. With ``measure.resources`` it also samples each node's resident memory,
Ray's own processes apart from the training workers (``ray_memory``).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import IO, Any

from bench.jobs.job import Job, rank_spec
from bench.procs.events import EventWriter
from bench.procs.hygiene import set_pdeathsig
from bench.rank.entry import spec_to_json
from bench.scenario.model import Scenario
from bench.strategies.ray_train import RayTrainParams
from bench.strategies.ray_train.cluster import GCS_PORT, PORTS, Node, await_port, enter_node, kept
from bench.strategies.ray_train.memory import NodeMemory
from injectors.link.netns import Topology

UP_TIMEOUT_S = 120.0
"""How long the cluster may take to come up (a node imports Ray, starts its daemons)."""


class RayTrainJob(Job):
    @classmethod
    def unavailable(cls, scenario: Scenario) -> str | None:
        if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.train") is None:
            return "ray (with Ray Train) is not importable here: pip install 'ftbench[ray]'"
        return None

    @property
    def params(self) -> RayTrainParams:
        params: RayTrainParams = self.ctx.scenario.recovery.params
        return params

    def start(self) -> None:
        ctx = self.ctx
        s = ctx.scenario
        assert isinstance(ctx.network, Topology), "ray-train runs each Ray node in a host namespace of a topology"
        topo = ctx.network
        self.events = EventWriter(ctx.events_dir / "job.jsonl", src="job", pid=os.getpid())
        self.logs: list[IO[bytes]] = []
        count = s.workload.world_size // s.launch.ranks_per_host
        self.nodes = [
            Node(i, topo.hosts[i].namespace, topo.hosts[i].address, s.launch.ranks_per_host) for i in range(count)
        ]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.memory = NodeMemory() if s.measure.resources else None
        self._sampled = 0.0
        env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME=topo.ifname, **self.params.node_env())
        # What Ray's processes must see of the machine's /tmp (each node's /tmp is its own).
        self.keep = kept([str(ctx.trial_dir), str(ctx.events_dir), str(ctx.checkpoint_dir)])
        head = self.nodes[0]
        self._start_node(head, env)
        self._await_port(head.address, GCS_PORT, "the head's GCS")
        for node in self.nodes[1:]:
            self._start_node(node, env)
        for node in self.nodes:
            self._await_port(node.address, PORTS["node-manager-port"], f"the raylet of h{node.index}")
        self.events.emit("ray_cluster_up", nodes=len(self.nodes))
        self._start_driver(env)

    def _start_node(self, node: Node, env: dict[str, str]) -> None:
        log = open(self.ctx.events_dir / f"ray-h{node.index}.log", "wb")  # noqa: SIM115 (closed by close())
        self.logs.append(log)
        argv = node.command(self.nodes[0].address, self.keep)
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=set_pdeathsig)
        self.procs[node.index] = proc
        # A host's command: a whole-host fault takes it and everything below it.
        self.events.emit(
            "command_start", command=f"ray-node-h{node.index}", of_pid=proc.pid, host=node.index, argv=argv[3:]
        )

    def _await_port(self, address: str, port: int, what: str) -> None:
        try:
            await_port(address, port, what, self.procs.values(), UP_TIMEOUT_S)
        except RuntimeError as err:
            raise RuntimeError(f"{err} (their output: ray-h*.log in the trial's events)") from None

    def _start_driver(self, env: dict[str, str]) -> None:
        ctx = self.ctx
        # Absolute paths: Ray runs its controller and workers in directories of its own.
        spec = rank_spec(
            ctx,
            -1,
            "initial",
            members=(),
            pdeathsig=False,
            netns="",
            events_dir=str(ctx.events_dir.resolve()),
            checkpoint_dir=str(ctx.checkpoint_dir.resolve()),
            hooks=(),
        )
        head = self.nodes[0]
        config = {
            "spec": spec_to_json(spec),
            "address": f"{head.address}:{GCS_PORT}",
            "hosts": {n.address: f"h{n.index}" for n in self.nodes},
            "name": f"ftbench-{ctx.events_dir.name}",
            "storage": str(ctx.checkpoint_dir.resolve() / "ray"),
        }
        path = (ctx.trial_dir / f"ray-{ctx.events_dir.name}.json").resolve()
        path.write_text(json.dumps(config))
        log = open(ctx.events_dir / "driver.log", "wb")  # noqa: SIM115 (closed by close())
        self.logs.append(log)
        head_pid, cwd = self.procs[0].pid, os.getcwd()

        def enter() -> None:
            set_pdeathsig()
            enter_node(head_pid, head.namespace)
            os.chdir(cwd)  # entering a mount namespace moves the process to its root

        driver_env = env | self.params.driver_env()
        self.driver = subprocess.Popen(
            [sys.executable, "-m", "bench.strategies.ray_train.driver", str(path)],
            env=driver_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=enter,
        )
        knobs = {k: v for k, v in driver_env.items() if k.startswith(("RAY_TRAIN_", "RAY_health_check"))}
        self.events.emit("ray_driver_start", of_pid=self.driver.pid, knobs=knobs)

    def poll(self, timeout_s: float) -> bool:
        if self.memory is not None and time.monotonic() - self._sampled >= 1.0:
            self._sampled = time.monotonic()
            self.memory.sample({i: p.pid for i, p in self.procs.items()}, self.driver.pid)
        try:
            self.driver.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def close(self) -> None:
        if hasattr(self, "events"):
            if self.memory is not None:
                self.events.emit("ray_memory", **self.memory.report())
            left = self.ctx.host.sweep_trial()  # every Ray process carries the run's marker
            if left:
                self.events.emit("cleanup_problem", what=f"processes outlived SIGKILL: {left}")
            for proc in [*self.procs.values(), *([self.driver] if hasattr(self, "driver") else [])]:
                proc.wait(timeout=30)
            for log in self.logs:
                log.close()
            self.events.close()
        else:
            self.ctx.host.sweep_trial()

    def versions(self) -> dict[str, Any]:
        p = self.params
        return {
            "ray": importlib.metadata.version("ray"),
            **p.driver_env(),
            **p.node_env(),
            "workers": f"{p.min_workers}-{self.ctx.scenario.workload.world_size}" if p.min_workers else "fixed",
        }
