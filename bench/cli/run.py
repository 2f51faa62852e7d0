"""``ftbench run``: a scenario's points x trials, or a job given as its own command.

``ftbench run SCENARIO`` runs a named scenario or a file; ``ftbench run --job [options]
-- COMMAND...`` runs the user's own training job as written, its fault, target and
trigger given as options (:mod:`bench.workloads.command.adhoc` makes the scenario).
Either way the run directory is the same, and ``report``, ``compare`` and ``gate`` read
it like any other.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bench.cli.common import SET_OPTION, Ascii, agents_cluster, cli, errors, interrupt, load_scenario
from bench.scenario.faults import FAULTS

if TYPE_CHECKING:
    from bench.hosts.cluster import Cluster
    from bench.results.writer import RunDir
    from bench.scenario.model import Scenario

JOB_EXAMPLE = """\b
Your own job, unmodified (everything after -- is its command, run without a shell):
  ftbench run --job --fault kill --target 2 --at-step 50 --trials 5 -- \\
      torchrun --nproc-per-node 4 --max-restarts 3 train.py --steps 300
  ftbench run --job --per-rank --world-size 4 --fault stall --duration-s 8 -- \\
      python train.py --steps 300
"""


@cli.command(epilog=JOB_EXAMPLE)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option(
    "--job",
    is_flag=True,
    help="ARGS is your own job's command (after --): run it unmodified, observed from outside (docs/your-job.md).",
)
@click.option(
    "--fault",
    type=click.Choice(sorted(FAULTS.names())),
    default="kill",
    show_default=True,
    help="--job: the fault.",
)
@click.option("--target", type=Ascii(click.IntRange(min=0)), default=1, show_default=True, help="--job: its rank.")
@click.option("--at-step", type=Ascii(click.IntRange(min=1)), help="--job: fire after this step (default 50).")
@click.option("--after-s", type=Ascii(click.FloatRange(min=0)), help="--job: fire after this long in training.")
@click.option("--duration-s", type=Ascii(click.FloatRange(min=0)), help="--job: how long a stall (or the like) holds.")
@click.option(
    "--world-size", type=Ascii(click.IntRange(min=2)), help="--job: ranks, where its launcher's args do not say."
)
@click.option(
    "--steps", "job_steps", type=Ascii(click.IntRange(min=2)), help="--job: the steps the job runs, if known."
)
@click.option(
    "--pg-timeout-s",
    type=Ascii(click.FloatRange(min=0, min_open=True)),
    help="--job: the job's own process-group timeout (judges stalls).",
)
@click.option("--per-rank", is_flag=True, help="--job: start the command once per rank with a launcher's environment.")
@click.option(
    "--progress",
    default="auto",
    show_default=True,
    help="--job: the job's progress format or a regex with (?P<step>...).",
)
@click.option("--name", default="", help="--job: the run's name (default: job-<script>).")
@click.option("--trials", type=Ascii(click.IntRange(min=1)), help="Trials per point (overrides measure.trials).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Base directory of results.",
)
@click.option(
    "--resume",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Complete an interrupted run in this results directory (SCENARIO not needed).",
)
@click.option(
    "--env",
    "env_specs",
    multiple=True,
    metavar="REQUIREMENTS",
    help="Run every point in this environment too (repeatable; e.g. --env torch==2.13.0 "
    "--env torch==2.14.1; quote several requirements): a sweep of launch.env. Each is "
    "built once into a cached virtual environment.",
)
@click.option(
    "--agents-at",
    metavar="ADDR:PORT",
    help="The hosts' agents were started by the cluster (srun/ssh: ftbench host --serve --controller "
    "ADDR:PORT): serve the run's store on this one address, wait for them, run every host there "
    "(sets launch.agents = true; docs/multihost.md).",
)
@click.option(
    "--agents-wait-s",
    type=Ascii(click.FloatRange(min=1, max=86400)),
    default=300.0,
    show_default=True,
    help="How long to wait for those agents to join.",
)
@click.option(
    "--all-figures",
    is_flag=True,
    help="Also print every figure of every point (n, median, min, max), not only the first table's.",
)
@click.option("--point", "only", multiple=True, hidden=True, help="Run only this point hash (a child harness).")
@SET_OPTION
@errors
def run(
    args: tuple[str, ...],
    job: bool,
    fault: str,
    target: int,
    at_step: int | None,
    after_s: float | None,
    duration_s: float | None,
    world_size: int | None,
    job_steps: int | None,
    pg_timeout_s: float | None,
    per_rank: bool,
    progress: str,
    name: str,
    trials: int | None,
    out: Path,
    resume: Path | None,
    env_specs: tuple[str, ...],
    agents_at: str | None,
    agents_wait_s: float,
    all_figures: bool,
    only: tuple[str, ...],
    sets: tuple[str, ...],
) -> None:
    """Run every point of SCENARIO (a name or a TOML file); with --job, run your own
    job's command instead.

    Prints one table: per point (a row) the medians of the figures that exist for its
    outcomes (detection, recovery, steps lost, goodput, the phases of the downtime),
    under a units row, then one plain line per point saying what happened. Every
    figure: --all-figures, ftbench report, or the run's trials.csv."""
    from bench.procs.launcher import LaunchError
    from bench.report.glance import first_table
    from bench.results.reader import load
    from bench.results.summary import format_point
    from bench.results.writer import ResultsError, RunDir
    from bench.run.runner import resume_scenario
    from bench.run.runner import run as run_scenario

    cluster = _cluster(agents_at, agents_wait_s, env_specs)
    if cluster is not None:
        sets += ("launch.agents=true",)

    if resume is not None:
        rundir = RunDir(resume)
        sc, resume_trials = resume_scenario(rundir)
        trials = trials or resume_trials
    elif job:
        from bench.workloads.command.adhoc import JobOptions

        opts = JobOptions(
            fault=fault,
            target=target,
            at_step=at_step,
            after_s=after_s,
            duration_s=duration_s,
            world_size=world_size,
            steps=job_steps,
            pg_timeout_s=pg_timeout_s,
            per_rank=per_rank,
            progress=progress,
            name=name,
        )
        sc, rundir = _job_scenario(args, opts, sets), None
    elif len(args) != 1:
        raise click.UsageError("give one SCENARIO, --resume DIR, or --job -- COMMAND...")
    else:
        if env_specs:
            sets += (f"sweep.launch.env={_toml_list(env_specs)}",)
        sc, rundir = load_scenario(args[0], sets), None

    # SIGINT too: a shell starts a background job with SIGINT ignored, and Python then
    # installs no handler of its own; `kill -INT` must still end the run cleanly.
    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        report = run_scenario(
            sc, out=out, trials=trials, resume=rundir, argv=sys.argv, only=set(only) or None, cluster=cluster
        )
    except (LaunchError, ResultsError) as err:  # no agents came; the results cannot be written
        click.echo(f"ftbench: error: {err}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo(
            "\nftbench: interrupted; finished trials are kept. Complete the run with:\n"
            f"  ftbench run --resume {_latest_run(out, sc.name, rundir)}",
            err=True,
        )
        sys.exit(130)
    if only:
        return  # a child harness: the parent prints the run's figures
    click.echo("")
    if all_figures:
        for point_hash, stats in report.stats.items():
            click.echo(format_point(stats, point_hash))
            click.echo("")
        click.echo("times: seconds of CLOCK_MONOTONIC (1 ns resolution); ratios are unitless.\n")
    table = first_table(load(report.rundir.path))
    if table:
        click.echo(table + "\n")
        click.echo("Medians of the trials that have each figure; (n): only n of the point's trials have it; -: none.")
        click.echo(
            "ttd + the phases = downtime." + ("" if all_figures else " Every figure: --all-figures, ftbench report.")
        )
    for label, why in report.skipped.items():
        click.echo(f"skipped {label}: {why}")
    click.echo(f"results: {report.rundir.path}")


def _cluster(agents_at: str | None, wait_s: float, env_specs: tuple[str, ...]) -> Cluster | None:
    """The run's rendezvous with agents the cluster started, from ``--agents-at``."""
    if agents_at is None:
        return None
    if env_specs:
        raise click.UsageError("--agents-at and --env cannot be combined yet (each environment is a child harness)")
    return agents_cluster(agents_at, wait_s)


def _toml_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _latest_run(out: Path, name: str, rundir: RunDir | None) -> Path:
    if rundir is not None:
        return rundir.path
    runs = sorted((out / name).glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else out / name


def _job_scenario(argv: tuple[str, ...], opts: object, sets: tuple[str, ...]) -> Scenario:
    """The scenario of ``--job``, checked like a file, ``--set`` applied."""
    from bench.scenario.loader import parse
    from bench.scenario.overrides import parse_override
    from bench.workloads.command.adhoc import FILE, JobOptions, scenario

    assert isinstance(opts, JobOptions)
    return parse(scenario(argv, opts), file=FILE, overrides=[parse_override(s) for s in sets])
