"""Commands about scenarios and running them: list, show, validate, run, cleanup, host."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bench.cli.common import SET_OPTION, cli, errors, interrupt, load_scenario
from bench.scenario import catalogue
from bench.scenario.config import ConfigError, to_dict
from bench.scenario.faults import FAULTS
from bench.scenario.loader import load, points
from bench.scenario.registry import Registry
from bench.strategies import STRATEGIES
from bench.workloads import WORKLOADS

if TYPE_CHECKING:
    from bench.results.writer import RunDir


@cli.command("list")
def list_cmd() -> None:
    """Named scenarios, and the workloads, fault kinds and strategies they can use."""
    click.echo(f"scenarios ({catalogue.directory()}):")
    rows = catalogue.describe()
    width = max((len(n) for n, _ in rows), default=0)
    for name, description in rows:
        click.echo(f"  {name:<{width}}  {description}")
    for title, registry in (("workloads", WORKLOADS), ("faults", FAULTS)):
        _list_registry(title, registry)
    click.echo("strategies:")
    width = max(len(n) for n in STRATEGIES.names())
    for name in STRATEGIES.names():
        s = STRATEGIES[name]
        kind = "ftbench's own recovery design" if s.own_design else "stock stack, observed, not replaced"
        click.echo(f"  {name:<{width}}  {s.summary}\n  {'':<{width}}    runs {s.stack} [{kind}]")


def _list_registry(title: str, registry: Registry[Any]) -> None:
    click.echo(f"{title}:")
    width = max(len(n) for n in registry.names())
    for name in registry.names():
        click.echo(f"  {name:<{width}}  {registry[name].summary}")


@cli.command()
@click.argument("scenario")
@SET_OPTION
@errors
def show(scenario: str, sets: tuple[str, ...]) -> None:
    """Print the resolved points of SCENARIO (a name or a TOML file)."""
    sc = load_scenario(scenario, sets)
    pts = points(sc)
    click.echo(f"{sc.name}: {sc.description}")
    click.echo(f"source: {sc.source}")
    click.echo(f"{len(pts)} point(s) x {sc.measure.trials} trial(s), deadline {sc.measure.deadline_s:g} s per trial")
    for p in pts:
        s = p.scenario
        click.echo(f"\n{p.label}  (point {p.point_hash[:12]})")
        click.echo(f"  workload  {_kv(to_dict(s.workload))}")
        for i, f in enumerate(s.faults):
            click.echo(f"  fault {i}   {_kv(to_dict(f))}")
        click.echo(f"  recovery  {_kv(to_dict(s.recovery))}")
        click.echo(f"  launch    {_kv(to_dict(s.launch))}  seed={s.measure.seed}")


def _kv(d: dict[str, Any], prefix: str = "") -> str:
    parts = []
    for k, v in d.items():
        if isinstance(v, dict):
            if v:
                parts.append(_kv(v, f"{prefix}{k}."))
        else:
            parts.append(f"{prefix}{k}={v}")
    return " ".join(parts)


@cli.command()
@click.argument("files", nargs=-1, required=True)
def validate(files: tuple[str, ...]) -> None:
    """Check scenario files; one line per file, exit status 2 if any is invalid."""
    from bench.scenario.config import one_line  # a path may hold a newline

    bad = 0
    for name in files:
        try:
            sc = load(catalogue.resolve(name))
            click.echo(f"ok    {one_line(sc.source)}: {sc.name}, {len(points(sc))} point(s)")
        except ConfigError as err:
            click.echo(f"error {err}", err=True)
            bad += 1
    if bad:
        sys.exit(2)


@cli.command()
@click.argument("scenario", required=False)
@click.option("--trials", type=click.IntRange(min=1), help="Trials per point (overrides measure.trials).")
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
@click.option("--point", "only", multiple=True, hidden=True, help="Run only this point hash (a child harness).")
@SET_OPTION
@errors
def run(
    scenario: str | None,
    trials: int | None,
    out: Path,
    resume: Path | None,
    env_specs: tuple[str, ...],
    only: tuple[str, ...],
    sets: tuple[str, ...],
) -> None:
    """Run every point of SCENARIO and print its figures."""
    from bench.results.summary import format_point, format_side_by_side
    from bench.results.writer import RunDir
    from bench.run.runner import resume_scenario
    from bench.run.runner import run as run_scenario

    if resume is not None:
        rundir = RunDir(resume)
        sc, resume_trials = resume_scenario(rundir)
        trials = trials or resume_trials
    elif scenario is None:
        raise click.UsageError("give a SCENARIO, or --resume DIR")
    else:
        if env_specs:
            sets += (f"sweep.launch.env={_toml_list(env_specs)}",)
        sc, rundir = load_scenario(scenario, sets), None

    signal.signal(signal.SIGTERM, interrupt)
    try:
        report = run_scenario(sc, out=out, trials=trials, resume=rundir, argv=sys.argv, only=set(only) or None)
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
    for point_hash, stats in report.stats.items():
        click.echo(format_point(stats, point_hash))
        click.echo("")
    if len(report.stats) > 1:
        click.echo(format_side_by_side(report.stats))
        click.echo("")
    for label, why in report.skipped.items():
        click.echo(f"skipped {label}: {why}")
    click.echo(
        "times: seconds of CLOCK_MONOTONIC (1 ns resolution); ratios are unitless. "
        "Empty (-) means the figure does not exist for that outcome."
    )
    click.echo(f"results: {report.rundir.path}")


@cli.command()
def cleanup() -> None:
    """Remove what killed runs left: processes, network namespaces, firewall rules."""
    from bench.procs.leftovers import cleanup as clean

    removed = clean()
    for line in removed:
        click.echo(f"removed {line}")
    click.echo(f"cleanup: {len(removed)} item(s) removed" if removed else "cleanup: nothing left behind")


def _toml_list(items: tuple[str, ...]) -> str:
    return "[" + ", ".join(json.dumps(i) for i in items) + "]"


def _latest_run(out: Path, name: str, rundir: RunDir | None) -> Path:
    if rundir is not None:
        return rundir.path
    runs = sorted((out / name).glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else out / name


@cli.command("host")
@click.option("--controller", required=True, metavar="ADDR:PORT", help="The trial's c10d store (the harness).")
@click.option("--host", "name", required=True, metavar="hN", help="This host's name in the trial (h0, h1, ...).")
@click.option(
    "--events-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The trial's events directory (shared between the hosts).",
)
@click.option("--deadline-s", type=click.FloatRange(min=1), default=600.0, show_default=True)
@click.option("--hostname", default="", help="Set this host's name first (a host that is a UTS namespace).")
@errors
def host_agent(controller: str, name: str, events_dir: Path, deadline_s: float, hostname: str) -> None:
    """Run this host's part of a multi-host trial (started on every host by the harness,
    srun or ssh; docs/multihost.md): register, align clocks, start and supervise this
    host's ranks, carry out the faults aimed at them."""
    from bench.procs.agent import main as agent_main

    sys.exit(agent_main(controller, name, events_dir, deadline_s, hostname))
