"""The declaration of a recovery strategy, and the registry strategies register in.

It sits at the bottom with the other registries, so that the loader, the rank entry and
the host agent look strategies up without importing the plug-ins' package; each
strategy (a folder of :mod:`bench.strategies`) registers itself when discovery imports
it. ``docs/adding-a-strategy.md`` is generated from the fields below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from bench.scenario.registry import Plugin, Registry

if TYPE_CHECKING:
    from bench.scenario.model import Scenario


@dataclass(frozen=True, kw_only=True, slots=True)
class Package:
    """A package of a stack under test, as runs record its version."""

    column: str
    """Its column in trials.csv (and key in an environment's versions): ``torchft``."""
    module: str
    """Its import name: the version is read from the distribution that ``import`` loads."""
    dists: tuple[str, ...]
    """The distributions that may provide it (``torchft``, ``torchft-nightly``)."""
    supported: str = ""
    """The versions ftbench can drive, as a specifier (``<0.5``); empty: any. A point
    whose version (pinned by ``launch.env``, else installed) is outside is skipped with
    :attr:`unsupported_why`, and a scenario none of whose points can run is refused."""
    unsupported_why: str = ""
    """What breaks outside :attr:`supported` (one line, for that reason)."""

    def gap(self, version: str) -> str | None:
        """Why ``version`` cannot be driven, or None."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            if not self.supported or SpecifierSet(self.supported).contains(Version(version), prereleases=True):
                return None
        except InvalidVersion:
            return None
        return f"{self.dists[0]} {version} is outside {self.supported}" + (
            f": {self.unsupported_why}" if self.unsupported_why else ""
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class Strategy(Plugin):
    """A strategy's declaration; ``impl`` is ``module:Class`` of its harness-side Job."""

    stack: str
    """What it runs: the stock stack it stands for, whose own code paths it runs and
    only observes, or ``ftbench's own design`` for a recovery design of ours."""
    own_design: bool = False
    """A recovery design of ftbench's (it may replace parts of the stack), not a stock one."""
    start_method: Literal["forkserver", "forkserver-private", "spawn"] = "spawn"
    """How ftbench's launcher starts its ranks under ``launch.start_method = "auto"``:
    fresh interpreters (as a real job's launcher) unless its design has warm spares."""
    rank_preload: tuple[str, ...] = ()
    """Modules its rank code imports that the forkserver may import for it beforehand
    (torchft: ``torchft``); only those, so that a forked rank is no fatter than a fresh one."""
    supervised: bool = True
    """The supervisor's notice of a rank's exit is the stack's own detection (a node
    agent, a scheduler). Without one (plain torch.distributed) it only observes, and its
    notice is no ``detect``."""

    rank_entry: str = "bench.rank.loop:train"
    """``module:function(spec, events) -> exit code`` that each rank runs."""
    rank_policy: str = ""
    """``module:Class`` of its rank policy, for ranks that run the shared loop."""
    phases: tuple[tuple[str, str], ...] = (("reconfigure", "reconfigured"), ("restore", "restore_end"))
    """(phase name, event that ends it) between detection and the first good step:
    ``event`` or ``event@src`` (the first such event from that source)."""
    blame: tuple[str, ...] = ()
    """Where the stack itself names a culprit: ``event@src:field`` (``@src`` optional),
    an event whose field holds the blamed ranks (a rank, a list of ranks, or a mapping
    keyed by rank). Empty: the stack names no one, and ``blame_correct``/``tta_s`` stay
    empty (never 0)."""
    timeouts: tuple[str, ...] = ("workload.pg_timeout_s",)
    """Dotted config keys (``workload.X``, ``recovery.<strategy>.X``; ``_ms`` keys are
    milliseconds) of the timeouts by which the stack declares a silent peer failed; the
    smallest is its tolerance: a fault shorter than it should be absorbed, and a
    detection of one is a ``false_alarm``."""
    components: tuple[str, ...] = ("store",)
    """Control-plane processes of its trials that a fault may target."""
    namespaces: bool = False
    """Its ranks are started by ftbench's launcher, which can place every host in a
    network namespace of its own (link faults need that)."""
    agents: bool = False
    """Its trials can run with ``launch.agents``: its ranks run the shared loop under
    the shared supervisor, which a host agent plays on each host."""
    rank_side_faults: bool = True
    """Its collectives pass through ftbench's rank-side fault hooks."""
    host_commands: bool = False
    """Its hosts are the commands it started there (a command job): a whole-host fault
    takes every process of those commands, whatever they started, without host agents."""
    namespaced_hosts: bool = False
    """Its trials always run each host in a network namespace of its own, whatever
    ``launch.network`` says: its node daemons stand for machines (a Ray node per host)."""
    workloads: tuple[str, ...] = ()
    """Workload kinds it can train (empty: every one)."""
    unbound_servers: tuple[str, ...] = ()
    """Servers of its stack that cannot be told where to bind (they listen on every
    interface). As root its trials then run in a private network namespace that nothing
    outside can reach; otherwise run.json says they were not confined."""
    packages: tuple[Package, ...] = ()
    """The packages of its stack beyond torch, whose versions every run records
    (run.json) and every trial row carries (trials.csv)."""
    torch: str = ""
    """The torch versions its stack needs, as a specifier (``>=2.14``); empty: any. A
    point whose torch is outside (the version ``launch.env`` pins, else the harness's) is
    skipped with the reason; a scenario none of whose points can run is refused."""
    default: bool = False
    """The strategy of a scenario that names none (exactly one declares it)."""
    check: Callable[[Scenario, str], None] | None = None
    """Further checks of a point (raising ConfigError), beyond the ones above."""

    def serves_torch(self, version: str) -> bool:
        """Whether its stack runs on torch ``version`` (:attr:`torch`); a version that
        cannot be read is given the benefit of the doubt (the running torch decides)."""
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        if not self.torch:
            return True
        try:
            return SpecifierSet(self.torch).contains(Version(version), prereleases=True)
        except InvalidVersion:
            return True


STRATEGIES: Registry[Strategy] = Registry("strategy")


def stack_packages() -> list[Package]:
    """Every package some strategy declares, each once, in the order of their columns."""
    seen: dict[str, Package] = {}
    for name in STRATEGIES.names():
        for p in STRATEGIES[name].packages:
            seen.setdefault(p.column, p)
    return [seen[c] for c in sorted(seen)]
