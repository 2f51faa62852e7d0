"""What the one-GPU run does, in what time, and the dry run that checks it without a GPU.

A GPU lease here is short: one command of at most 10 minutes, about 15 minutes of device
time in all with the machine's start. So the run has one wall-clock budget
(:data:`WALL_S`), ends everything well inside it (:data:`END_S`), and gives each
section a slice (``budget_s``) that ends at a fixed point of the run: a section that
finishes early leaves its time to the next, one that outruns its slice is stopped
(its finished trials are kept) so that the next still has its own. Trials are
interleaved in every section, so a section cut short still has a trial of each point.

The budgets rest on what was said of the machine (16 cores; a process importing torch
there takes about 2-5 s) and on a conservative floor per trial (:data:`TRIAL_FLOOR_S`:
a launch of fresh interpreters, a restart of them, the steps): a section whose points
cannot each have one trial at that floor is refused by the dry run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packaging.utils import canonicalize_name

from bench.onegpu import image
from bench.onegpu.wheels import pinned_version, pins
from bench.scenario import catalogue
from bench.scenario.config import ConfigError
from bench.scenario.loader import expand, load
from bench.scenario.model import Point
from bench.scenario.overrides import parse_override
from bench.scenario.strategy import STRATEGIES

WALL_S = 480.0
"""The issue's budget for the whole command on the GPU machine (8 minutes), install included."""
END_S = 450.0
"""Everything (sections, summary, packing) is done by then: 30 s to spare under WALL_S."""
RESERVE_S = 30.0
"""Kept after the last section for the summary and the packing."""
GRACE_S = 20.0
"""How long a section stopped at its budget has to end its trial cleanly before it is killed."""
MIN_START_S = 20.0
"""A section with less than this left of its slice is not started (it would be stopped at once)."""
TRIAL_FLOOR_S = 15.0
"""A conservative floor for one trial on the GPU machine: fresh interpreters importing
torch (2-5 s there) and making a CUDA context, a restart of them, the steps."""
OUTPUT_FILES = ("summary.md", "runs.tar.gz", "gpu-check.log", "environment.txt")
"""What the run writes into its folder: at most 8 files come back, each at most 16 MiB."""
MAX_FILES = 8
MAX_FILE_BYTES = 16 * 2**20


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    scenario: str
    """A named scenario (``scenarios/``)."""
    budget_s: float
    what: str
    left_out: frozenset[str] = frozenset()
    """Labels the scenario's ``sweep.refused = "skip"`` is expected to leave out on the
    GPU: any other refused combination is an invalid point, which fails the dry run."""
    image_skips: frozenset[str] = frozenset()
    """Labels expected to be skipped on the GPU image (a stack its torch cannot serve)."""
    rehearsal: tuple[str, ...] = field(default=())
    """``--set`` values of the CPU rehearsal (``--rehearse``): the same plumbing, on the
    CPU, small enough for a machine without a GPU."""


SECTIONS = (
    Section(
        name="recovery",
        scenario="gpu-recovery",
        budget_s=100.0,
        what="a kill under restart, reinit and torchft, DDP MLP and transformer on the GPU: "
        "restart's CUDA context and upload phases",
        left_out=frozenset({"kind=transformer strategy=torchft"}),
        rehearsal=(
            "workload.device=cpu",
            "workload.steps=40",
            "faults.0.trigger.at_step=20",
            "recovery.restart.checkpoint_every=10",
            'sweep.workload.kind=["ddp"]',
        ),
    ),
    Section(
        name="checkpoints",
        scenario="gpu-checkpoints",
        budget_s=185.0,
        what="torch.save, DCP, DCP async and NVRx's async writer from device memory, 100 MB and 1 GB a rank: "
        "write and restore in s/GB",
        rehearsal=(
            "workload.device=cpu",
            'sweep.recovery.restart.checkpoint=["dcp-async", "torch-save"]',
            "sweep.workload.state_mb=[1, 4]",
        ),
    ),
    Section(
        name="tax",
        scenario="gpu-tax",
        budget_s=120.0,
        what="no fault: each stack's step time against plain DDP and its host and device memory",
        image_skips=frozenset({"strategy=torch-reconfigure"}),
        rehearsal=(
            "workload.device=cpu",
            "workload.steps=40",
            "workload.warmup_steps=5",
            "workload.hidden=256",
            "workload.batch_per_rank=32",
            'sweep.recovery.strategy=["failstop", "reinit", "torch-reconfigure"]',
            "measure.trials=2",
        ),
    ),
)


def deadlines(sections: tuple[Section, ...] = SECTIONS, scale: float = 1.0) -> list[float]:
    """Seconds after the command's start by which each section must be over: each ends
    where the later sections' budgets and the reserve still fit before :data:`END_S`."""
    out = []
    for i in range(len(sections)):
        later = sum(s.budget_s for s in sections[i + 1 :])
        out.append((END_S - RESERVE_S - later) * scale)
    return out


@dataclass(slots=True)
class Checked:
    section: Section
    points: list[Point] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    on_image: dict[str, str] = field(default_factory=dict)
    """Points the image's stack cannot serve, and why."""
    problems: list[str] = field(default_factory=list)


def check_section(section: Section, sets: tuple[str, ...] = (), pinned: dict[str, str] | None = None) -> Checked:
    """Validate the section's scenario as the run will load it: every point valid, only
    the expected ones left out, the skips on the image (its torch, the carried
    versions of the stacks' packages) the expected ones, a trial of each point within
    the section's budget at :data:`TRIAL_FLOOR_S`."""
    out = Checked(section)
    try:
        scenario = load(catalogue.resolve(section.scenario), [parse_override(s) for s in sets])
        out.points, refused = expand(scenario)
        out.refused = {label: why.replace(f"{scenario.source}: ", "") for label, why in refused.items()}
    except ConfigError as err:
        out.problems.append(f"{section.scenario}: {err}")
        return out
    if not sets and set(out.refused) != section.left_out:
        for label in sorted(set(out.refused) - section.left_out):
            out.problems.append(f"{section.scenario}: {label}: {out.refused[label]}")
        for label in sorted(section.left_out - set(out.refused)):
            out.problems.append(f"{section.scenario}: {label} was expected to be left out and is not")
    carried = carried_versions() if pinned is None else pinned
    for p in out.points:
        why = image_gap(p, carried)
        if why:
            out.on_image[p.label] = why
    if not sets and set(out.on_image) != section.image_skips:
        out.problems.append(
            f"{section.scenario}: points skipped on the image {sorted(out.on_image)}, "
            f"expected {sorted(section.image_skips)}"
        )
    if not sets:
        runnable = len(out.points) - len(out.on_image)
        if runnable * TRIAL_FLOOR_S > section.budget_s:
            out.problems.append(
                f"{section.scenario}: {runnable} point(s) at {TRIAL_FLOOR_S:g} s a trial do not fit its "
                f"{section.budget_s:g} s: not one trial of each"
            )
    return out


def carried_versions() -> dict[str, str]:
    """Distribution -> version of every wheel the run carries (``tools/gpu-wheels.txt``)."""
    return {name: str(pinned_version(req)) for name, req in pins().items()}


def image_gap(point: Point, pinned: dict[str, str]) -> str | None:
    """Why the GPU image's stack cannot serve ``point``: its torch, or the carried
    version (``pinned``: distribution -> version) of a package its strategy drives."""
    strategy = STRATEGIES[point.scenario.recovery.strategy]
    if not strategy.serves_torch(image.TORCH):
        return f"{strategy.name} needs torch {strategy.torch}; the image has torch {image.TORCH}"
    for package in strategy.packages:
        versions = [pinned[d] for d in map(canonicalize_name, package.dists) if d in pinned]
        if not versions:
            return f"{strategy.name}: {package.dists[0]} is neither on the image nor carried"
        why = package.gap(versions[0])
        if why:
            return f"{strategy.name}: {why} (carried)"
    return None


def check_plan() -> list[str]:
    """The budgets against the wall time and the output folder's limits."""
    problems = []
    total = sum(s.budget_s for s in SECTIONS) + RESERVE_S
    if total > END_S or END_S > WALL_S:
        problems.append(f"the sections' budgets and the reserve ({total:g} s) do not fit {END_S:g} s of {WALL_S:g} s")
    if len(OUTPUT_FILES) > MAX_FILES:
        problems.append(f"{len(OUTPUT_FILES)} output files, over the {MAX_FILES} that come back")
    return problems
