"""Commands about scenarios and running them: list, show, validate, run, cleanup, host."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bench.cli.common import SET_OPTION, Ascii, cli, errors, load_scenario
from bench.scenario import catalogue, mix
from bench.scenario.config import ConfigError, to_dict
from bench.scenario.faults import FAULTS
from bench.scenario.loader import expand, load, points, stack_gap
from bench.scenario.registry import Registry
from bench.scenario.strategy import STRATEGIES
from bench.scenario.workload import WORKLOADS

if TYPE_CHECKING:
    pass


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
    from bench.scale.coordinators import COORDINATORS

    click.echo("coordinators (ftbench scale: control planes against N participants):")
    width = max(len(n) for n in COORDINATORS)
    for name, c in COORDINATORS.items():
        click.echo(f"  {name:<{width}}  {c.summary}; ops: {', '.join(o.name for o in c.ops)}")


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
            pts, refused = expand(sc)
            gaps = {p.label: why for p in pts if (why := stack_gap(p.scenario))}
            click.echo(f"ok    {one_line(sc.source)}: {sc.name}, {len(pts)} point(s)")
            if (drawn := mix.of(sc.faults)) is not None:
                click.echo(f"      {drawn.text()}")
            for label, why in refused.items():
                click.echo(f"      left out: {label}: {why}")
            for label, why in gaps.items():
                click.echo(f"      skipped here: {label}: {why}")
        except ConfigError as err:
            click.echo(f"error {err}", err=True)
            bad += 1
    if bad:
        sys.exit(2)


@cli.command()
@click.option("--envs", is_flag=True, help="List the cached environments (launch.env), their size and last use.")
@click.option(
    "--remove-env",
    "remove_envs",
    multiple=True,
    metavar="SPEC|PATH|all",
    help="Remove a cached environment by its spec or path, or all of them (repeatable).",
)
@errors
def cleanup(envs: bool, remove_envs: tuple[str, ...]) -> None:
    """Remove what killed runs left: processes, network namespaces, firewall rules; with
    --envs / --remove-env, list or remove cached environments instead."""
    if envs or remove_envs:
        _environments(remove_envs)
        return
    from bench.procs.leftovers import cleanup as clean

    removed = clean()
    for line in removed:
        click.echo(f"removed {line}")
    click.echo(f"cleanup: {len(removed)} item(s) removed" if removed else "cleanup: nothing left behind")


def _environments(remove: tuple[str, ...]) -> None:
    """``cleanup --envs``: list the cache; ``--remove-env``: remove what is named."""
    from bench.procs import envcache
    from bench.procs.venvs import cache_dir
    from bench.scenario.requirements import parse

    found = envcache.listing()
    if remove:
        wanted = set(remove)
        normal = {" ".join(parse(w)) for w in wanted if w != "all" and os.sep not in w}
        chosen = [e for e in found if "all" in wanted or e.spec in normal or str(e.path) in wanted]
        if not chosen:
            raise ConfigError("--remove-env", "", "a cached environment's spec or path, or all", ", ".join(remove))
        for env in chosen:
            try:
                envcache.remove(env)
            except RuntimeError as err:
                click.echo(f"kept {env.path}: {err}", err=True)
                continue
            click.echo(f"removed {env.spec or env.path} ({env.size_bytes / 1e9:.2f} GB)")
        return
    if not found:
        click.echo(f"no cached environments under {cache_dir()}")
        return
    for env in found:
        click.echo(envcache.describe(env))
    total = sum(e.size_bytes for e in found)
    click.echo(f"{len(found)} environment(s), {total / 1e9:.2f} GB under {cache_dir()}")


@cli.command("host")
@click.option(
    "--controller",
    required=True,
    metavar="ADDR:PORT",
    help="The harness: its trial store, or with --serve its run store.",
)
@click.option(
    "--host",
    "name",
    metavar="hN",
    help="This host's name in the run (h0, h1, ...); default under srun: h$SLURM_PROCID.",
)
@click.option(
    "--serve",
    is_flag=True,
    help="Started by the cluster (srun, ssh): join the run at --controller (ftbench run --agents-at) and "
    "serve each of its trials until it ends.",
)
@click.option(
    "--events-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="The trial's events directory (one trial, started by the harness; shared between the hosts).",
)
@click.option(
    "--deadline-s",
    type=Ascii(click.FloatRange(min=1)),
    default=600.0,
    show_default=True,
    help="Give up after this long (with --serve: without word from the harness, before its first trial "
    "or between two).",
)
@click.option("--hostname", default="", help="Set this host's name first (a host that is a UTS namespace).")
@errors
def host_agent(
    controller: str, name: str | None, serve: bool, events_dir: Path | None, deadline_s: float, hostname: str
) -> None:
    """Run this host's part of a multi-host run: register, align clocks, start and
    supervise this host's ranks, carry out the faults aimed at them (docs/multihost.md)."""
    if name is None:
        procid = os.environ.get("SLURM_PROCID", "")
        if not procid.isdecimal():
            raise click.UsageError("give --host hN (outside srun, whose SLURM_PROCID would name it)")
        name = f"h{int(procid)}"
    if not re.fullmatch(r"h[0-9]{1,4}", name):
        raise click.BadParameter(f"{name!r}: expected h0, h1, ...", param_hint="--host")
    if serve:
        from bench.hosts.auth import SecretError
        from bench.hosts.cluster import parse_address
        from bench.hosts.cluster import serve as serve_run

        try:
            parse_address(controller)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--controller") from None
        try:
            sys.exit(serve_run(controller, name, deadline_s))
        except SecretError as err:
            click.echo(f"ftbench host: error: {err}", err=True)
            sys.exit(2)
    if events_dir is None:
        raise click.UsageError("give --events-dir (one trial), or --serve (a run, agents started by the cluster)")
    from bench.hosts.agent import main as agent_main

    sys.exit(agent_main(controller, name, events_dir, deadline_s, hostname))
