"""``ftbench scale``: the recovery stacks' control planes against thousands of real
participants on this machine, or spread over a cluster's hosts (docs/scale.md)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bench.cli.common import Ascii, agents_cluster, cli, errors, interrupt

if TYPE_CHECKING:
    from bench.hosts.cluster import Cluster


@cli.command()
@click.option(
    "--full",
    is_flag=True,
    help="8 to 16,384 participants (under 30 min; each coordinator stops at its limit) instead of 8 to 1,024.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="A key of the sweep (coordinators, sizes, repeats, deadline_s, resolver, the coordinators' settings; "
    "docs/scale.md), VALUE read as TOML. Example: --set coordinators='[\"tcpstore-libuv\"]' --set sizes=[8,64,512]",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Base directory of results (the run goes to OUT/scale/<UTC>_<commit>/).",
)
@click.option(
    "--show",
    "show_run",
    metavar="RUN",
    help="Print and re-render an existing scale run (a directory, or results/scale for the newest); no measurement.",
)
@click.option(
    "--agents-at",
    metavar="ADDR:PORT",
    help="Spread the participants over the hosts whose agents the cluster started (srun/ssh: ftbench host "
    "--serve --controller ADDR:PORT): serve the run store and the coordinators on this one address, "
    "wait for --hosts agents (docs/multihost.md).",
)
@click.option(
    "--hosts",
    type=Ascii(click.IntRange(min=1, max=100_000)),
    help="With --agents-at: how many host agents (h0 .. hN-1) hold the participants; default under Slurm: "
    "$SLURM_NTASKS.",
)
@click.option(
    "--machine",
    "machine_sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="A value of the cluster the model replays the protocols on (rtt_s, bandwidth_bytes_s, coordinator_cores, "
    "cpu_scale, arrival_s, ...: docs/scale.md), VALUE read as TOML. Example: --machine rtt_s=250e-6",
)
@click.option(
    "--agents-wait-s",
    type=Ascii(click.FloatRange(min=1, max=86400)),
    default=300.0,
    show_default=True,
    help="How long to wait for those agents to join.",
)
@errors
def scale(
    full: bool,
    sets: tuple[str, ...],
    out: Path,
    show_run: str | None,
    agents_at: str | None,
    hosts: int | None,
    agents_wait_s: float,
    machine_sets: tuple[str, ...],
) -> None:
    """Time the real coordinators of the recovery stacks (torch's TCPStore, torchrun's rendezvous, torchft's
    lighthouse, NVRx's store barriers, the in-process strategies' membership) against N participants, N from 8
    upward on a log scale until this machine's limit; fit growth models, find where they cross 1, 10 and 60 s,
    and set published figures beside them. ftbench project uses the newest run for the phases that are
    control-plane work. Then a model of each protocol, calibrated by the run, replays it on this machine (beside
    what was measured) and on a cluster (at 1K, 16K and 131K participants, beside published figures)."""
    from bench.scale import page, rundir, spec, sweep
    from bench.scale.model import machine as profiles

    machine = profiles.CLUSTER
    for item in machine_sets:
        machine = profiles.check(machine, item, "--machine")
    if show_run is not None:
        run = rundir.load(show_run)
        md, png = page.write(run, machine)
        click.echo(page.text(run, machine))
        _clocks(run.info)
        click.echo(f"\nwritten: {md}, {png}")
        return
    chosen = spec.build(sets, full=full)
    cluster, count = _cluster(agents_at, hosts, agents_wait_s)
    if cluster is not None:
        from bench.scale.remote import spec_for_hosts

        why = spec_for_hosts(chosen)
        if why:
            raise click.UsageError(why)
    signal.signal(signal.SIGINT, interrupt)  # also where a parent started it with SIGINT ignored
    signal.signal(signal.SIGTERM, interrupt)
    from bench.procs.launcher import LaunchError

    network = sweep.isolate() if cluster is None else ""
    try:
        path = sweep.run(
            chosen,
            out,
            progress=lambda line: click.echo(line, err=True),
            cluster=cluster,
            hosts=count,
            network=network,
        )
    except LaunchError as err:  # the agents did not come, or a host was lost
        click.echo(f"ftbench: error: {err}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo(
            "\nftbench: scale interrupted; every process it started is ended, the points measured are kept.", err=True
        )
        sys.exit(130)
    run = rundir.load(path)
    md, png = page.write(run, machine)
    click.echo(page.text(run, machine))
    _clocks(run.info)
    click.echo(f"\nwritten: {md}, {png}")


def _clocks(info: dict[str, Any]) -> None:
    """A run across hosts: each host's clock and the uncertainty it put on the figures."""
    from bench.scale.remote import clock_lines

    lines = clock_lines(info)
    if lines:
        click.echo("\n" + "\n".join(lines))


def _cluster(agents_at: str | None, hosts: int | None, wait_s: float) -> tuple[Cluster | None, int]:
    """The run's rendezvous with host agents the cluster started, from ``--agents-at``,
    and how many there are; (None, 0) without it."""
    if agents_at is None:
        if hosts is not None:
            raise click.UsageError("--hosts goes with --agents-at")
        return None, 0
    if hosts is None:
        tasks = os.environ.get("SLURM_NTASKS", "")
        if not tasks.isdecimal() or int(tasks) < 1:
            raise click.UsageError("give --hosts N with --agents-at (outside Slurm, whose $SLURM_NTASKS would say)")
        hosts = int(tasks)
    return agents_cluster(agents_at, wait_s), hosts
