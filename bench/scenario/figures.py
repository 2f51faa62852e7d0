"""The figures and outcomes of a trial: one table, read by everything that shows them.

Each figure's name (its ``trials.csv`` column), unit, direction and one-line meaning are
written here once. The summary tables, ``compare`` and ``gate``, the exports, the
report and ``docs/figures.md`` (``python -m bench.scenario.figures`` writes it) all read
this table, so a figure cannot mean one thing in the gate and another in the report.
How each is computed from the event logs is :mod:`bench.results.derive`.

This module imports nothing heavy: scenario validation needs it (``gate.metric``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Literal

Unit = Literal["s", "steps", "ratio", "loss", "bytes", "ranks", "count", "tokens", "tokens/s"]
Better = Literal["lower", "higher", "neither"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Figure:
    name: str
    """Column of trials.csv."""
    unit: Unit
    """``s`` (seconds of CLOCK_MONOTONIC), ``steps``, ``ratio``, ``loss``, ``bytes``, ``ranks``, ``count``,
    ``tokens`` or ``tokens/s``."""
    better: Better
    """Which way is an improvement; ``neither`` for a signed deviation (``loss_delta``)."""
    meaning: str
    """One line for tables, help texts and the docs."""
    per: Literal["fault", "trial"] = "fault"
    """``fault``: one value per injection; ``trial``: a property of the whole trial,
    repeated on each of its rows."""


FIGURES: tuple[Figure, ...] = (
    Figure(
        name="ttd_s",
        unit="s",
        better="lower",
        meaning="first detection by a surviving process (a rank, an agent, the lighthouse) minus the injection",
    ),
    Figure(
        name="ttd_rank_s",
        unit="s",
        better="lower",
        meaning="first detection by a surviving rank (an exception out of backward(), all_reduce() or wait() in its "
        "training loop) minus the injection",
    ),
    Figure(
        name="ttd_all_s",
        unit="s",
        better="lower",
        meaning="the last surviving rank's first detection minus the injection (empty if one never detected)",
    ),
    Figure(
        name="ttr_s",
        unit="s",
        better="lower",
        meaning="end of the first good step (new world, past the last committed step) minus the first detection",
    ),
    Figure(name="downtime_s", unit="s", better="lower", meaning="ttd_s + ttr_s"),
    Figure(name="steps_lost", unit="steps", better="lower", meaning="committed steps computed again after recovery"),
    Figure(
        name="goodput",
        unit="ratio",
        better="higher",
        meaning="distinct steps x fault-free median step time / training wall time, at most 1",
    ),
    Figure(
        name="degraded_step_ratio",
        unit="ratio",
        better="lower",
        meaning="median step time after recovery (for an undetected fault: while it lasted) / fault-free median",
    ),
    Figure(
        name="loss_delta",
        unit="loss",
        better="neither",
        meaning="final loss minus the fault-free reference's (needs measure.reference = true)",
    ),
    Figure(
        name="ttfs_s",
        unit="s",
        better="lower",
        meaning="time to full strength: first step of a post-fault world as large as before, minus the injection",
    ),
    Figure(
        name="survivor_crashes",
        unit="ranks",
        better="lower",
        meaning="surviving ranks whose training code crashed after the fault (the stack's own handling took them down)",
    ),
    Figure(
        name="steps_discarded",
        unit="steps",
        better="lower",
        meaning="iterations a surviving process computed and threw away (torchft's uncommitted steps)",
    ),
    Figure(
        name="restore_s",
        unit="s",
        better="lower",
        meaning="the longest state transfer of the recovery (from disk or from a peer)",
    ),
    Figure(name="restore_bytes", unit="bytes", better="lower", meaning="the size of that transfer"),
    Figure(
        name="inject_phase",
        unit="ratio",
        better="neither",
        meaning="where in the step the fault landed: time since the victim's last step end / its step period "
        "(median interval between its step ends): 0-1, past 1 where that step ran longer than the median",
    ),
    Figure(
        name="inject_after_s",
        unit="s",
        better="neither",
        meaning="how long the job had trained when the fault came: the injection minus the end of the trial's first "
        "step",
    ),
    Figure(
        name="blame_correct",
        unit="ratio",
        better="higher",
        meaning="1 when the ranks the stack blamed (its own evictions, quorum drops, failure records, rank monitors) "
        "are the fault's victims, 0 when not; empty when the stack names no one",
    ),
    Figure(
        name="tta_s",
        unit="s",
        better="lower",
        meaning="time to attribution: the stack's first record naming a culprit minus the injection (empty when it "
        "names no one)",
    ),
    Figure(
        name="checkpoint_s",
        unit="s",
        better="lower",
        per="trial",
        meaning="seconds the training loop was held by checkpoints in the trial, summed over saves (the other side "
        "of steps_lost)",
    ),
    Figure(
        name="checkpoint_bytes",
        unit="bytes",
        better="lower",
        per="trial",
        meaning="bytes the last checkpoint wrote, every rank together (a replicating design counts its copies)",
    ),
    Figure(
        name="checkpoint_blocked_s",
        unit="s",
        better="lower",
        per="trial",
        meaning="median per save of the time the training loop was held (the slowest rank's)",
    ),
    Figure(
        name="checkpoint_background_s",
        unit="s",
        better="lower",
        per="trial",
        meaning="median per save of the time an asynchronous save ran on after the loop went on (empty for "
        "synchronous designs)",
    ),
    Figure(
        name="rss_rank_peak_bytes",
        unit="bytes",
        better="lower",
        per="trial",
        meaning="largest peak resident memory (VmHWM) of a training rank (needs measure.resources)",
    ),
    Figure(
        name="rss_job_peak_bytes",
        unit="bytes",
        better="lower",
        per="trial",
        meaning="largest resident memory of the whole job at one sample: ranks, the stack's helper processes, the "
        "store (needs measure.resources; sampled every 0.1 s)",
    ),
    Figure(
        name="cuda_rank_peak_bytes",
        unit="bytes",
        better="lower",
        per="trial",
        meaning="largest torch.cuda.max_memory_allocated of a rank (ranks on GPUs only)",
    ),
    Figure(
        name="cuda_rank_reserved_peak_bytes",
        unit="bytes",
        better="lower",
        per="trial",
        meaning="largest torch.cuda.max_memory_reserved of a rank: what its caching allocator held from the driver "
        "(ranks on GPUs only)",
    ),
    Figure(
        name="wire_bytes_per_step",
        unit="bytes",
        better="lower",
        per="trial",
        meaning="bytes the job's hosts sent per fault-free step, headers included, counted at each host's interface "
        "(needs measure.resources and network namespaces)",
    ),
    Figure(
        name="job_procs",
        unit="count",
        better="lower",
        per="trial",
        meaning="most processes of the job alive at once: ranks plus the stack's helpers (needs measure.resources)",
    ),
    Figure(
        name="job_threads",
        unit="count",
        better="lower",
        per="trial",
        meaning="most threads in those processes at once (needs measure.resources)",
    ),
    Figure(
        name="tokens_skipped",
        unit="tokens",
        better="lower",
        per="trial",
        meaning="tokens of the data stream the trained run never read (batches below the furthest one read that no "
        "surviving step read; workloads that report their data position)",
    ),
    Figure(
        name="tokens_repeated",
        unit="tokens",
        better="lower",
        per="trial",
        meaning="tokens the trained run read twice (a batch read by two surviving steps; replayed steps supersede "
        "the lost ones)",
    ),
    Figure(
        name="tokens_per_s",
        unit="tokens/s",
        better="higher",
        per="trial",
        meaning="tokens of one global batch / the median fault-free step time (workloads that report tokens)",
    ),
)

PHASE_PREFIX, PHASE_SUFFIX = "phase_", "_s"
PHASE = Figure(
    name="phase_<name>_s",
    unit="s",
    better="lower",
    meaning="one phase of the downtime: detect, the strategy's own phases (each from the boundary before it in "
    "time to its own), catch-up (the rest, to the first good step; a command job's: only the steps it lost); they "
    "add up to downtime_s",
)

BY_NAME: dict[str, Figure] = {f.name: f for f in FIGURES}
#: Names of the figures that have one value per injection, in table order.
FAULT_FIGURES: tuple[str, ...] = tuple(f.name for f in FIGURES if f.per == "fault")
#: Names of the figures that describe a whole trial.
TRIAL_FIGURES: tuple[str, ...] = tuple(f.name for f in FIGURES if f.per == "trial")


def is_phase(name: str) -> bool:
    return name.startswith(PHASE_PREFIX) and name.endswith(PHASE_SUFFIX) and len(name) > 8


def phase_column(phase: str) -> str:
    """``reconfigure`` -> ``phase_reconfigure_s``."""
    return f"{PHASE_PREFIX}{phase}{PHASE_SUFFIX}"


def phase_name(column: str) -> str:
    """``phase_reconfigure_s`` -> ``reconfigure``."""
    return column.removeprefix(PHASE_PREFIX).removesuffix(PHASE_SUFFIX)


def is_figure(name: str) -> bool:
    return name in BY_NAME or is_phase(name)


def figure(name: str) -> Figure:
    """The definition of a figure or phase column; KeyError for anything else."""
    if name in BY_NAME:
        return BY_NAME[name]
    if is_phase(name):
        return PHASE
    raise KeyError(name)


def unit(name: str) -> Unit:
    return figure(name).unit


def higher_is_better(name: str) -> bool:
    return figure(name).better == "higher"


def known() -> str:
    """For 'expected ...' messages: every figure name, and the phase pattern."""
    return ", ".join(f.name for f in FIGURES) + ", or phase_<name>_s"


@dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    name: str
    bad: bool
    """The trial did not end well; one the baseline never had is a regression."""
    meaning: str


OUTCOMES: tuple[Outcome, ...] = (
    Outcome(name="recovered", bad=False, meaning="the job detected the fault and trained again"),
    Outcome(name="failed", bad=True, meaning="the job stopped (expected for fail-stop)"),
    Outcome(name="absorbed", bad=False, meaning="nothing detected the fault and the job went on"),
    Outcome(
        name="false_alarm",
        bad=True,
        meaning="the stack declared a failure for a fault that ended within its detection timeout (a stall, a "
        "straggler's delay shorter than the timeout: it should have been absorbed)",
    ),
    Outcome(name="hung", bad=True, meaning="the trial deadline was reached and everything was killed"),
    Outcome(
        name="corrupted", bad=True, meaning="nothing detected the fault, the job finished, and its parameters are wrong"
    ),
    Outcome(name="not_injected", bad=True, meaning="the trigger was never reached, or no live target was left"),
    Outcome(name="completed", bad=False, meaning="a trial without faults that ran to its end"),
)
BAD_OUTCOMES: frozenset[str] = frozenset(o.name for o in OUTCOMES if o.bad)


def outcomes_text(counts: dict[str, int]) -> str:
    """``recovered 3, failed 1``: how every table writes a point's outcomes."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def markdown() -> str:
    """``docs/figures.md``: the tables above, for readers of the repository."""
    lines = [
        "# Figures and outcomes",
        "",
        "Generated from `bench/scenario/figures.py` by `python -m bench.scenario.figures > docs/figures.md`;",
        "a test keeps the two in step. How each figure is computed: `bench/results/derive.py`.",
        "",
        "| figure | unit | better | per | meaning |",
        "|---|---|---|---|---|",
    ]
    for f in (*FIGURES, PHASE):
        lines.append(f"| `{f.name}` | {f.unit} | {f.better} | {f.per} | {f.meaning} |")
    lines += [
        "",
        "Times are seconds of CLOCK_MONOTONIC. A figure that does not exist for an outcome is empty, never 0.",
        "",
        "| outcome | bad | meaning |",
        "|---|---|---|",
    ]
    lines += [f"| `{o.name}` | {'yes' if o.bad else 'no'} | {o.meaning} |" for o in OUTCOMES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
