"""Harness-side contract of a recovery strategy: a :class:`Job` per trial."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.hosts.cluster import Cluster, ClusterLauncher
from bench.hosts.launcher import AgentLauncher
from bench.procs.events import Event
from bench.procs.launcher import ProcessHost
from bench.rank.entry import HookSpec, RankSpec
from bench.scenario.model import Point, Scenario


class TrialNetwork(Protocol):
    """Where a trial's processes live when not all on the harness's own loopback:
    namespaced hosts for link faults (:class:`injectors.link.netns.Topology`), or one
    private namespace that confines servers which cannot be told where to bind
    (:class:`injectors.link.netns.PrivateNet`)."""

    def namespace_for(self, host: int) -> str: ...

    @property
    def store_namespace(self) -> str: ...

    @property
    def store_address(self) -> str: ...

    @property
    def ifname(self) -> str: ...

    def destroy(self) -> list[str]: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class TrialContext:
    point: Point
    trial: int
    seed: int
    """``measure.seed``: data and model (the same in every trial of a point)."""
    trial_dir: Path
    events_dir: Path
    host: ProcessHost
    backend: str
    """Resolved backend, ``gloo`` or ``nccl``."""
    deadline_s: float
    fault_free: bool = False
    """A reference run: same point and seed, no faults injected."""
    network: TrialNetwork | None = None
    """The trial's network namespaces, or None (everything on the host's loopback)."""
    cluster: Cluster | None = None
    """Host agents the cluster started (``ftbench run --agents-at``): the trial's ranks
    run on real hosts, its store listens on the address they reach."""
    memory_cgroup: str = ""
    """The trial's parent memory cgroup, for an ``oom`` fault ("" without one)."""

    @property
    def scenario(self) -> Scenario:
        return self.point.scenario

    def namespace_of(self, rank: int) -> str:
        """The network namespace of ``rank``'s host ("" on loopback)."""
        if self.network is None:
            return ""
        return self.network.namespace_for(rank // self.scenario.launch.ranks_per_host)

    @property
    def checkpoint_dir(self) -> Path:
        """Where the ranks of a strategy that checkpoints to disk keep their checkpoint
        (a ``storage`` fault mounts its file system here)."""
        return self.trial_dir / f"ckpt-{self.events_dir.name}"

    @property
    def store_host(self) -> str:
        """Where the launcher's store listens and ranks reach it."""
        if self.cluster is not None:
            return self.cluster.address
        return self.network.store_address if self.network is not None else "127.0.0.1"

    @property
    def store_namespace(self) -> str:
        return self.network.store_namespace if self.network is not None else ""

    @property
    def ifname(self) -> str:
        """The interface ranks' collectives use (``GLOO_SOCKET_IFNAME``; "" on real hosts:
        gloo's own choice, or what the host's environment sets)."""
        if self.cluster is not None:
            return ""
        return self.network.ifname if self.network is not None else "lo"


@dataclass(kw_only=True, slots=True)
class Observed:
    """A trial's events as its figures read them (:meth:`Job.observe`)."""

    events: list[Event]
    steps: int | None = None
    """The steps the job ran, where the job says so itself (a command job that
    finished), instead of ``workload.steps``."""
    blind: dict[str, str] = field(default_factory=dict)
    """Figure -> why it cannot be known in this trial: left empty, the reason reported."""
    sources: dict[str, str] = field(default_factory=dict)
    """What -> where it was seen (steps, step numbers, detection, loss...), for a job
    watched from outside; empty for ftbench's own ranks, which report it all."""


class Job(ABC):
    """The processes of one trial under one strategy.

    The trial driver calls :meth:`start`, then :meth:`poll` in a loop (injecting faults
    between calls) until it returns True or the deadline passes, then :meth:`close`,
    which must leave no process of the trial behind, whatever state it is in.
    """

    def __init__(self, ctx: TrialContext) -> None:
        self.ctx = ctx

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def poll(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for something to happen; True once the job is over."""

    @abstractmethod
    def close(self) -> None: ...

    @classmethod
    def unavailable(cls, scenario: Scenario) -> str | None:
        """Why this strategy cannot run ``scenario`` on this machine (its stack is not
        installed, say), or None; the runner then skips the point with that reason."""
        return None

    def versions(self) -> dict[str, Any]:
        """Versions of the stack this strategy ran on (beyond torch and the backend)."""
        return {}

    def clocks(self) -> dict[str, dict[str, int]]:
        """Offsets of host agents' clocks to the harness's, once started ({} on one host)."""
        return {}

    def deliver(self) -> Callable[[str, dict[str, Any]], None] | None:
        """Where faults aimed at a host's ranks go when a host agent carries them out
        (``(host, command)``), or None: the harness injects them itself."""
        return None

    def observe(self, events: list[Event]) -> Observed:
        """The trial's events as its figures read them, once the trial is over: those of
        ftbench's own ranks as they are; a job watched from outside (a command job) turns
        what it showed into them."""
        return Observed(events=events)


def start_method(scenario: Scenario) -> str:
    """``launch.start_method``, with ``auto`` resolved to what the strategy declares."""
    from bench.scenario.strategy import STRATEGIES

    chosen = scenario.launch.start_method
    return STRATEGIES[scenario.recovery.strategy].start_method if chosen == "auto" else chosen


FULL_PRELOAD = ("bench.rank.zygote_optim", "torchft")
"""The forkserver's preload for ``forkserver`` ranks, whatever the point: their pages stay
the server's, so more preloaded only starts them sooner, and one server serves a run."""


def zygote_preload(scenario: Scenario) -> tuple[str, ...]:
    """What the forkserver imports for this scenario's ranks beyond torch and ftbench's
    rank layer. For ``forkserver-private`` ranks, what the workload's and the strategy's
    rank code imports (an optimizer's step pulls in ``torch._dynamo``; torchft's replicas
    import torchft) and nothing a rank would not import itself: a private rank owns a
    copy of all of it, and a fatter rank dies slower."""
    from bench.scenario.strategy import STRATEGIES
    from bench.scenario.workload import WORKLOADS, WorkloadPlugin

    if start_method(scenario) != "forkserver-private":
        return FULL_PRELOAD
    workload = WORKLOADS[scenario.workload.kind]
    workload_preload = workload.rank_preload if isinstance(workload, WorkloadPlugin) else ()
    return (*workload_preload, *STRATEGIES[scenario.recovery.strategy].rank_preload)


def rank_spec(ctx: TrialContext, rank: int, role: str, **fields: Any) -> RankSpec:
    """The spec of a rank of this trial: the point's workload and strategy, resolved to
    the code that runs them, and its rank-side fault hooks; ``fields`` add or override."""
    from bench.scenario.faults import FAULTS
    from bench.scenario.strategy import STRATEGIES
    from bench.scenario.workload import WORKLOADS

    s = ctx.scenario
    strategy = STRATEGIES[s.recovery.strategy]
    hooks = (
        ()
        if ctx.fault_free
        else tuple(
            HookSpec(index=i, kind=f.kind, impl=FAULTS[f.kind].impl, params=f.knobs())
            for i, f in enumerate(s.faults)
            if FAULTS[f.kind].rank_side
        )
    )
    base: dict[str, Any] = dict(
        rank=rank,
        members=(),
        store_host=ctx.store_host,
        netns=ctx.namespace_of(rank),
        ifname=ctx.ifname,
        events_dir=str(ctx.events_dir),
        entry=strategy.rank_entry,
        policy=strategy.rank_policy,
        workload=s.workload,
        workload_impl=WORKLOADS[s.workload.kind].impl,
        recovery=s.recovery,
        backend=ctx.backend,
        interpose=s.launch.interposer == "always",
        seed=ctx.seed,
        wait_s=ctx.deadline_s,
        role=role,
        hooks=hooks,
        env=s.launch.nccl.environment() if ctx.backend == "nccl" else {},
        memory_cgroup=ctx.memory_cgroup,
    )
    return RankSpec(**(base | fields))


def host_launcher(ctx: TrialContext, *, start_method: str, supervised: bool) -> AgentLauncher:
    """The launcher of a trial with ``launch.agents``: the agents the cluster started
    (``--agents-at``), else one agent per host namespace of the trial's topology; the
    store stays with the harness."""
    from injectors.link.netns import Topology

    launch = ctx.scenario.launch
    count = ctx.scenario.workload.world_size // launch.ranks_per_host
    common: dict[str, Any] = dict(
        host=ctx.host,
        start_method=start_method,
        preload=zygote_preload(ctx.scenario),
        trial_dir=ctx.trial_dir,
        events_dir=ctx.events_dir,
        ranks_per_host=launch.ranks_per_host,
        deadline_s=ctx.deadline_s,
        supervised=supervised,
    )
    if ctx.cluster is not None:
        hosts, addresses = ctx.cluster.hosts(count)
        return ClusterLauncher(
            address=ctx.cluster.address,
            hosts=hosts,
            addresses=addresses,
            cluster=ctx.cluster,
            secret=ctx.cluster.secret,
            **common,
        )
    assert isinstance(ctx.network, Topology), "launch.agents runs every host in a namespace of a topology"
    return AgentLauncher(
        namespace=ctx.store_namespace,
        address=ctx.store_host,
        hosts=tuple(ctx.network.namespace_for(i) for i in range(count)),
        addresses=tuple(ctx.network.hosts[i].address for i in range(count)),
        clock_shift_s=launch.clock_shift_s,
        **common,
    )
