"""The coordinators ``ftbench scale`` measures: what runs in the coordinator's process,
what a participant is, and the operations timed against the number of participants.

A declaration names no code of the other layers: the participant's class is a
``module:attribute`` string, imported only in the processes that hold participants,
and the server is one of :data:`SERVERS`. :data:`STANDS_FOR` says which recovery phase
of which strategy each operation's curve stands for when ``ftbench project`` scales a
run to a cluster (:mod:`bench.project.control`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Server = Literal["tcpstore-libuv", "tcpstore-legacy", "lighthouse"]
SERVERS: tuple[Server, ...] = ("tcpstore-libuv", "tcpstore-legacy", "lighthouse")
Unit = Literal["rank", "host", "replica group"]


@dataclass(frozen=True, slots=True)
class Op:
    """One operation, timed from the moment it is released to every participant until
    each participant has its result."""

    name: str
    summary: str
    victim: bool = False
    """One participant (the last) is killed or stopped first, or plays the part its death
    leaves to others; the figures are the survivors'."""
    needs: tuple[str, ...] = ()
    """Operations that must have run before it in the same point (it is not attempted at
    sizes where one of them could not be done)."""


@dataclass(frozen=True, slots=True)
class Coordinator:
    name: str
    summary: str
    stack: str
    """Whose code runs, on both sides."""
    unit: Unit
    """What one participant stands for in a job."""
    server: Server
    participant: str
    """``module:Class`` of the participant side (:mod:`bench.scale.participants`)."""
    ops: tuple[Op, ...]
    connections: int = 1
    """Connections to the coordinator per participant, at most."""
    threads: int = 1
    """Threads per participant, at most (the op's own; a client's runtime threads)."""
    descriptors: int = 1
    """Descriptors per participant in its worker process, at most."""
    victim_runs: bool = False
    """The victim takes part in its operations, as what its death leaves behind (NVRx: its
    monitor process records it and arrives at the barrier for it); else it is killed
    before the first of them."""
    module: str = ""
    """A module that must import for the coordinator to run (skipped with the reason
    otherwise)."""

    def op(self, name: str) -> Op:
        return next(o for o in self.ops if o.name == name)


_P = "bench.scale.participants"

_STORE_OPS = (
    Op("connect", "every client constructs its TCPStore (connects, is validated)"),
    Op("barrier", "torch's store-based barrier (_store_based_barrier: add, add 0, wait)", needs=("connect",)),
    Op("get", "one key set by participant 0, got by all (a get waits for the key)", needs=("connect",)),
)
"""What both TCPStore backends are timed on."""

COORDINATORS: dict[str, Coordinator] = {
    c.name: c
    for c in (
        Coordinator(
            name="tcpstore-libuv",
            summary="torch's TCPStore, libuv server (the default since torch 2.4): N clients",
            stack="torch.distributed.TCPStore server (use_libuv=True) and clients",
            unit="rank",
            server="tcpstore-libuv",
            participant=f"{_P}:StoreClient",
            ops=_STORE_OPS,
        ),
        Coordinator(
            name="tcpstore-legacy",
            summary="torch's TCPStore, legacy server (use_libuv=False): N clients",
            stack="torch.distributed.TCPStore server (use_libuv=False) and clients",
            unit="rank",
            server="tcpstore-legacy",
            participant=f"{_P}:StoreClient",
            ops=_STORE_OPS,
        ),
        Coordinator(
            name="rendezvous",
            summary="torchrun's c10d rendezvous: N agents' DynamicRendezvousHandlers over one TCPStore",
            stack="torch.distributed.elastic DynamicRendezvousHandler + C10dRendezvousBackend, libuv TCPStore",
            unit="host",
            server="tcpstore-libuv",
            participant=f"{_P}:Agent",
            threads=2,
            ops=(
                Op("form", "N agents call next_rendezvous: a round of N (min N-1, max N)"),
                Op(
                    "kill",
                    "one agent dies (no more keep-alives, connection closed); the others call "
                    "next_rendezvous until they have a round without it",
                    victim=True,
                    needs=("form",),
                ),
            ),
        ),
        Coordinator(
            name="lighthouse",
            summary="torchft's lighthouse: N replica groups heartbeat and ask for a quorum",
            stack="torchft LighthouseServer (Rust, gRPC) and LighthouseClient",
            unit="replica group",
            server="lighthouse",
            participant=f"{_P}:ReplicaGroup",
            threads=3,
            descriptors=6,
            module="torchft._torchft",
            ops=(
                Op("quorum", "N heartbeating replica groups ask for a quorum; all N are in it"),
                Op(
                    "failover",
                    "one replica group stops heartbeating; the others ask for a quorum until they have one without it",
                    victim=True,
                    needs=("quorum",),
                ),
            ),
        ),
        Coordinator(
            name="nvrx",
            summary="NVRx in-process restart: its store barriers and rank assignment over a TCPStore",
            stack="nvidia_resiliency_ext.inprocess store (StoreMixin barriers) and rank_assignment, libuv TCPStore",
            unit="rank",
            server="tcpstore-libuv",
            participant=f"{_P}:NVRxRank",
            victim_runs=True,
            module="nvidia_resiliency_ext.inprocess.store",
            ops=(
                Op("barrier", "the Wrapper's initial barrier (StoreMixin.barrier: add, append, wait)"),
                Op(
                    "restart",
                    "one rank terminated (its monitor records it and arrives for it); the others pass the "
                    "iteration barrier, read the terminated ranks and take new ranks (ShiftRanks)",
                    victim=True,
                ),
                Op("tree", "rank assignment Tree's first build: every rank's state and key, read by all"),
            ),
        ),
        Coordinator(
            name="membership",
            summary="reinit's and torch-reconfigure's membership agreement and handle exchange over the job's store",
            stack="ftbench's Membership (bench.rank.membership), libuv TCPStore",
            unit="rank",
            server="tcpstore-libuv",
            participant=f"{_P}:Member",
            connections=2,
            threads=1,
            descriptors=2,
            ops=(
                Op("abort", "member 0 posts the abort key; every member's watcher (its own connection) sees it"),
                Op(
                    "agree",
                    "one member is dead (reported as the supervisor reports a reaped rank: dead/<id>, the deaths "
                    "log and counter); the others check in (append, add) and wait for the next world, which the "
                    "first to check in publishes, as a change, once every member is here or dead "
                    "(Membership.next_world); every live member must be in it",
                    victim=True,
                ),
                Op(
                    "resume",
                    "the next world agrees on the step to resume after: rank 0 reads every committed step with one "
                    "multi_get and writes the decision once; the others wait for it (Membership.agree_on_step)",
                    victim=True,
                ),
                Op(
                    "handles",
                    "torch-reconfigure's handle exchange in the next world: rank 0 gathers every handle with one "
                    "multi_get into one value, which each member reads from the store or from a member that relays "
                    "it (a tree of fan-out 32; Membership.exchange_handles)",
                    victim=True,
                ),
            ),
        ),
    )
}

#: (coordinator, op) -> the (strategy, phase, fallback) whose growth with the job it gives
#: ``ftbench project``: the phase it is, or where a run has no such phase (no trial needed
#: it), the phase its time falls in instead ("" for none).
STANDS_FOR: dict[tuple[str, str], tuple[tuple[str, str, str], ...]] = {
    ("rendezvous", "form"): (("restart", "rendezvous", ""), ("nvrx-launcher", "rendezvous", "")),
    ("lighthouse", "failover"): (("torchft", "lighthouse", ""),),
    ("nvrx", "restart"): (("nvrx-inprocess", "barrier", ""),),
    ("membership", "agree"): (("reinit", "isolate", ""), ("torch-reconfigure", "isolate", "")),
    ("membership", "handles"): (("torch-reconfigure", "handles", ""),),
    # The resume step is agreed after the group is re-formed: in the restore phase where a
    # peer's state is sent, else before the first step, which the run counts in catch-up;
    # it is recovery work, so a run without a restore phase carries it in reconfigure.
    ("membership", "resume"): (("reinit", "restore", "reconfigure"), ("torch-reconfigure", "restore", "reconfigure")),
}

#: Where a curve stands for a stack that is not the one measured, why it may.
BORROWED: dict[str, str] = {
    "nvrx-launcher": "ft_launcher's rendezvous (NVRx 0.4.1) is a fork of torch's dynamic rendezvous: the same "
    "pickled state written with compare-and-set over a c10d store; torch's was measured",
}


def names() -> list[str]:
    return list(COORDINATORS)
