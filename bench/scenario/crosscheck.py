"""Checks across a scenario's sections, once each section is valid on its own: a fault
against the world it targets and the strategy that must serve it, the workload's and the
strategy's own checks (their ``check`` hooks), the machine's memory, NCCL knobs against
the backend. :func:`bench.scenario.loader.parse` runs them on every point of a sweep.
"""

from __future__ import annotations

import re

from bench.scenario import limits, memory, mix
from bench.scenario.config import ConfigError, to_dict
from bench.scenario.faults import FAULTS, check_fault
from bench.scenario.model import NCCL_NAME, Scenario
from bench.scenario.requirements import parse as parse_requirements
from bench.scenario.strategy import STRATEGIES
from bench.scenario.workload import WORKLOADS, WorkloadPlugin, own_strategy


def cross_check(s: Scenario, file: str) -> None:
    """What no single section can check alone: sections against each other, each fault
    against the world and the strategy, the workload's and the strategy's own checks."""
    w = s.workload
    if w.warmup_steps >= w.steps:
        raise ConfigError(file, "workload.warmup_steps", f"fewer than workload.steps ({w.steps})", w.warmup_steps)
    if w.world_size % s.launch.ranks_per_host:
        raise ConfigError(
            file, "launch.ranks_per_host", f"a divisor of workload.world_size ({w.world_size})", s.launch.ranks_per_host
        )
    for name in s.launch.nccl.extra:
        if not re.fullmatch(NCCL_NAME, name):
            raise ConfigError(file, f"launch.nccl.extra.{name}", "a name NCCL_* or TORCH_NCCL_* in capitals", name)
    if s.workload.backend == "gloo" and s.launch.nccl.environment():
        raise ConfigError(file, "launch.nccl", 'no NCCL knobs for workload.backend = "gloo"', "a knob set")
    if w.device == "cpu" and w.backend == "nccl":
        raise ConfigError(file, "workload.device", '"auto" or "cuda" with workload.backend = "nccl"', w.device)
    max_seed = (2**63 - 1 - w.steps) // limits.SEED_FACTOR
    if s.measure.seed > max_seed:
        raise ConfigError(
            file,
            "measure.seed",
            f"a seed <= {max_seed} (the workloads seed step s with seed x {limits.SEED_FACTOR} + s, "
            "which must stay below 2**63)",
            s.measure.seed,
        )
    strategy = STRATEGIES[s.recovery.strategy]
    for i, f in enumerate(s.faults):
        check_fault(
            f,
            world_size=w.world_size,
            steps=w.steps,
            ranks_per_host=s.launch.ranks_per_host,
            deadline_s=s.measure.deadline_s,
            strategy=strategy.name,
            components=strategy.components,
            file=file,
            where=f"faults.{i}",
            agents=s.launch.agents,
        )
    mix.check(s.faults, file=file)
    declared = WORKLOADS[w.kind]
    if isinstance(declared, WorkloadPlugin) and declared.check is not None:
        declared.check(s, file)  # first: its reason is more precise than a strategy's list of kinds
    memory.check(s, file)
    check_strategy(s, file)
    try:
        parse_requirements(s.launch.env)
    except ValueError as err:
        raise ConfigError(file, "launch.env", "requirements NAME[==VERSION] separated by spaces", str(err)) from None


def check_strategy(s: Scenario, file: str) -> None:
    """What the point's strategy declares it can run (:class:`bench.strategies.Strategy`)."""
    name, w = s.recovery.strategy, s.workload
    strategy = STRATEGIES[name]
    own = own_strategy(w.kind)
    if own and name != own:
        raise ConfigError(
            file, "recovery.strategy", f"{own!r} for workload kind {w.kind!r} (the job is its own stack)", name
        )
    if strategy.workloads and w.kind not in strategy.workloads:
        kinds = " or ".join(repr(k) for k in strategy.workloads)
        raise ConfigError(file, "workload.kind", f"{kinds} with strategy {name}", w.kind)
    for i, f in enumerate(s.faults):
        if FAULTS[f.kind].rank_side and not strategy.rank_side_faults:
            raise ConfigError(
                file,
                f"faults.{i}.kind",
                f"a fault that acts from outside the rank with strategy "
                f"{name} (its collectives do not pass through ftbench's hooks)",
                f.kind,
            )
        if FAULTS[f.kind].rank_side and i >= limits.rt_signals():
            raise ConfigError(
                file,
                f"faults.{i}.kind",
                f"a fault that acts from outside the rank at index {i}: rank-side faults are armed by "
                f"the real-time signal SIGRTMIN + index, and there are {limits.rt_signals()}",
                f.kind,
            )
        if FAULTS[f.kind].whole_host and not (
            (s.launch.agents or strategy.host_commands) and f.target.host is not None
        ):
            raise ConfigError(
                file,
                f"faults.{i}",
                f"launch.agents = true and target = {{ host = k }}: {f.kind!r} takes a host's agent away with it",
                to_dict(f.target),
            )
    links = any(FAULTS[f.kind].family == "link" for f in s.faults)
    if links and s.launch.network == "loopback":
        raise ConfigError(file, "launch.network", "'auto' or 'namespaces' (link faults need namespaces)", "loopback")
    if (links or s.launch.network == "namespaces") and not strategy.namespaces:
        able = " or ".join(repr(n) for n in STRATEGIES.names() if STRATEGIES[n].namespaces)
        raise ConfigError(
            file,
            "recovery.strategy",
            f"{able} with network namespaces (their ranks are started by ftbench's own launcher, "
            "which puts each host in its namespace)",
            name,
        )
    if strategy.check is not None:
        strategy.check(s, file)


def uses_namespaces(scenario: Scenario) -> bool:
    """Whether the trials of ``scenario`` run each host in a network namespace."""
    network = scenario.launch.network
    return (
        network == "namespaces"
        or STRATEGIES[scenario.recovery.strategy].namespaced_hosts
        or (network == "auto" and any(FAULTS[f.kind].family == "link" for f in scenario.faults))
    )
