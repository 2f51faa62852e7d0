"""``ftbench scale``: the recovery stacks' control planes against thousands of real
participants on this machine (docs/scale.md)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import click

from bench.cli.common import cli, errors, interrupt


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
@errors
def scale(full: bool, sets: tuple[str, ...], out: Path, show_run: str | None) -> None:
    """Time the real coordinators of the recovery stacks (torch's TCPStore, torchrun's rendezvous, torchft's
    lighthouse, NVRx's store barriers, the in-process strategies' membership) against N participants, N from 8
    upward on a log scale until this machine's limit; fit growth models, find where they cross 1, 10 and 60 s,
    and set published figures beside them. ftbench project uses the newest run for the phases that are
    control-plane work."""
    from bench.scale import page, rundir, spec, sweep

    if show_run is not None:
        run = rundir.load(show_run)
        md, png = page.write(run)
        click.echo(page.text(run))
        click.echo(f"\nwritten: {md}, {png}")
        return
    chosen = spec.build(sets, full=full)
    signal.signal(signal.SIGINT, interrupt)  # also where a parent started it with SIGINT ignored
    signal.signal(signal.SIGTERM, interrupt)
    try:
        path = sweep.run(chosen, out, progress=lambda line: click.echo(line, err=True))
    except KeyboardInterrupt:
        click.echo(
            "\nftbench: scale interrupted; every process it started is ended, the points measured are kept.", err=True
        )
        sys.exit(130)
    run = rundir.load(path)
    md, png = page.write(run)
    click.echo(page.text(run))
    click.echo(f"\nwritten: {md}, {png}")
