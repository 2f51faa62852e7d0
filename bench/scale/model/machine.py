"""The machines the model replays a protocol on: this one, where the model must
reproduce what ``ftbench scale`` measured, and a cluster, where it meets published
figures. Every value says where it comes from, and ``--set`` overrides any of them.

What a machine decides in the model:

- where a participant's work runs: on ``shared_cores`` cores that every participant
  (and, with ``coordinator_shares_cores``, the coordinator) competes for, as on this
  machine; or on a CPU of its own (``shared_cores`` = 0), as each rank of a job has;
- how participants are packed: as threads of a few processes, each with one
  interpreter lock they take turns at (``packed``; ``ftbench scale`` spreads them over
  2 to 8 processes of up to 2,048), or a process each;
- the coordinator's serving threads (the stack's: one libuv event loop; the legacy
  server's one polling loop; the lighthouse's state under one lock) and how fast its
  CPU is against this machine's (``cpu_scale``);
- the network: a round trip and the coordinator's bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

from bench.scenario.config import ConfigError
from bench.scenario.overrides import split_setting, toml_value

LOOPBACK_RTT_S = 20e-6
"""A round trip over loopback between two processes (the kernel's rtt of a store
connection here: ``ss`` shows 11-18 µs)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Machine:
    name: str
    """How tables name it."""
    shared_cores: int
    """Cores the participants share; 0: each participant has a CPU of its own."""
    coordinator_shares_cores: bool
    """Whether the coordinator runs on those same cores (one machine) or on a host of its own."""
    packed: bool
    """Participants are threads of a few processes and take turns at each process's
    interpreter lock (``ftbench scale``'s packing: :func:`processes`); else a process each."""
    coordinator_cores: int
    """Cores of the coordinator's host: a coordinator that serves on a thread per core
    (torchft's lighthouse, a tokio runtime) uses them; one event loop uses one."""
    rtt_s: float
    """A network round trip between a participant and the coordinator."""
    bandwidth_bytes_s: float
    """What the coordinator can send and receive, in bytes a second (its NIC)."""
    cpu_scale: float = 1.0
    """CPU seconds of a piece of work there for one second of it on this machine's cores."""
    arrival_s: float = 0.0
    """Over how long the participants start an operation (uniformly): 0, together, as
    ``ftbench scale`` releases them and as a job's agents re-rendezvous after a failure
    (each sees it within milliseconds); a job's first start spreads them over its launch."""
    sources: tuple[tuple[str, str], ...] = ()
    """(key, where its value comes from), printed beside it."""

    def describe(self) -> list[str]:
        why = dict(self.sources)
        out = []
        for f in fields(self):
            if f.name in ("name", "sources"):
                continue
            v = getattr(self, f.name)
            out.append(f"{f.name} = {_show(f.name, v)}" + (f"  ({why[f.name]})" if f.name in why else ""))
        return out


def _show(key: str, v: Any) -> str:
    if key == "rtt_s":
        return f"{v * 1e6:g} µs"
    if key == "bandwidth_bytes_s":
        return f"{v * 8 / 1e9:g} Gbit/s"
    if key == "arrival_s":
        return f"{v:g} s"
    return str(v)


def this_machine(cores: int) -> Machine:
    """The machine a scale run measured: ``cores`` shared by everything, threads packed."""
    return Machine(
        name=f"this machine ({cores} cores)",
        shared_cores=cores,
        coordinator_shares_cores=True,
        packed=True,
        coordinator_cores=cores,
        rtt_s=LOOPBACK_RTT_S,
        bandwidth_bytes_s=5e9,
        sources=(
            ("shared_cores", "the run's scale.json: the machine's CPUs"),
            ("packed", "ftbench scale: participants are threads, 2-8 processes of up to 2,048"),
            ("rtt_s", "loopback: the kernel's rtt of a store connection (ss), 11-18 µs"),
            ("bandwidth_bytes_s", "loopback copies, far above any operation's bytes per second here"),
        ),
    )


CLUSTER = Machine(
    name="cluster",
    shared_cores=0,
    coordinator_shares_cores=False,
    packed=False,
    coordinator_cores=32,
    rtt_s=100e-6,
    bandwidth_bytes_s=100e9 / 8,
    cpu_scale=1.0,
    sources=(
        ("shared_cores", "a rank, agent or replica group is a process on a host's cores of its own"),
        ("coordinator_shares_cores", "the store is served by one host (torchrun's agent, the launcher)"),
        ("coordinator_cores", "a host's cores for a coordinator on a thread per core (an assumption: hosts have more)"),
        ("packed", "one process per participant: no interpreter lock shared between participants"),
        (
            "rtt_s",
            "TCP over a datacenter's front-end Ethernet between hosts: tens to a few hundred µs; "
            "100 µs taken (an assumption: set yours)",
        ),
        ("bandwidth_bytes_s", "a 100 Gbit/s host NIC (an H100 host's front-end network; an assumption)"),
        ("cpu_scale", "a host core as fast as this machine's (an assumption)"),
        ("arrival_s", "a recovery: every participant learns of the failure within milliseconds"),
    ),
)

PROFILES = ("cluster",)


def check(machine: Machine, item: str, where: str = "--set") -> Machine:
    """``KEY=VALUE`` onto ``machine``, checked; a ConfigError naming the key otherwise."""
    key, text = split_setting(item)
    names = [f.name for f in fields(Machine) if f.name not in ("name", "sources")]
    if key not in names:
        raise ConfigError(where, key, "one of " + ", ".join(names), text)
    v = toml_value(text.strip())
    current = getattr(machine, key)
    if isinstance(current, bool):
        ok = isinstance(v, bool)
    elif isinstance(current, int):
        ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 100_000
    else:
        low = 0 if key == "arrival_s" else 1e-12
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= low
        v = float(v) if ok else v
    if not ok:
        raise ConfigError(where, key, f"a value like {current!r}", v)
    kept = tuple((k, s) for k, s in machine.sources if k != key)
    return replace(machine, **{key: v}, sources=(*kept, (key, where)))
