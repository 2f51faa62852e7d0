"""``ftbench calibrate``: ftbench's detection figures against a bare torch.distributed loop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import get_args

import click

from bench.cli.common import Ascii, cli, errors, interrupt
from bench.scenario.config import ConfigError
from bench.scenario.model import StartMethod

ENV_SPEC = "FTBENCH_CALIBRATE_ENV"
"""Set in a calibration that runs in an ``--env`` environment, so it does not start another."""


@cli.command()
@click.option(
    "--case",
    "cases",
    multiple=True,
    metavar="CASE",
    help="kill-ddp, kill-ddp-user, kill-allreduce, stall-ddp, kill-ddp-blackbox or restart-ddp-blackbox "
    "(repeatable; default: all but the last, which takes a minute a trial pair).",
)
@click.option(
    "--trials",
    type=Ascii(click.IntRange(min=2)),
    default=15,
    show_default=True,
    help="Trials per case and path (bare and ftbench, interleaved).",
)
@click.option(
    "--tolerance-ms",
    type=Ascii(click.FloatRange(min=0)),
    default=5.0,
    show_default=True,
    help="Absolute part of the tolerance on the difference of medians (its 95 % CI must lie within).",
)
@click.option(
    "--tolerance-rel",
    type=Ascii(click.FloatRange(min=0)),
    default=0.10,
    show_default=True,
    help="Relative part (of the bare median); the larger of the two applies.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="Base directory of results (the run goes to OUT/calibrate/).",
)
@click.option(
    "--start-method",
    type=click.Choice(get_args(StartMethod)),
    default="auto",
    show_default=True,
    help="How ftbench's side starts its ranks (launch.start_method): calibrate a launch mode.",
)
@click.option(
    "--at-step",
    type=Ascii(click.IntRange(min=10)),
    default=None,
    help="Fault both sides after this step instead; the reference loops time their steps until then.",
)
@click.option(
    "--after-s",
    type=Ascii(click.FloatRange(min=0, max=3600)),
    default=None,
    help="Fault both sides after this many seconds of training (default 20: what a job long in training sees).",
)
@click.option(
    "--env",
    "env_spec",
    default="",
    metavar="REQUIREMENTS",
    help="Calibrate in this environment (e.g. torch==2.15.0), built once and cached as for `run --env`.",
)
@errors
def calibrate(
    cases: tuple[str, ...],
    trials: int,
    tolerance_ms: float,
    tolerance_rel: float,
    out: Path,
    start_method: str,
    at_step: int | None,
    after_s: float | None,
    env_spec: str,
) -> None:
    """Check ftbench's detection figures against a bare torch.distributed loop on this
    machine.

    Each figure's verdict is decided by the 95 % confidence interval of the difference
    of the medians: it agrees when the whole interval lies within the tolerance,
    disagrees when it lies wholly beyond it, and cannot tell otherwise (or with fewer
    than 5 trials a side), saying how many trials would likely decide. Exit 0 when all
    agree, 1 when any disagrees, 2 when none disagrees but some cannot tell (or bad
    input), as ftbench gate exits; run in --env, the environment's run's status."""
    if env_spec and os.environ.get(ENV_SPEC) != env_spec:
        args = [f"--case={c}" for c in cases] + [f"--trials={trials}", f"--tolerance-ms={tolerance_ms}"]
        args += [f"--tolerance-rel={tolerance_rel}", f"--out={out.resolve()}", f"--env={env_spec}"]
        args += [f"--start-method={start_method}"]
        args += [f"--at-step={at_step}"] if at_step is not None else []
        args += [f"--after-s={after_s}"] if after_s is not None else []
        sys.exit(_in_environment(env_spec, args))
    from bench.calibrate import user
    from bench.calibrate.cases import BY_NAME, DEFAULT_CASES, DEFAULT_MOMENT, Moment
    from bench.calibrate.session import Tolerance, format_table
    from bench.calibrate.session import calibrate as run_calibration

    for name in cases:
        if name not in BY_NAME:
            raise ConfigError("--case", "", f"one of {', '.join(BY_NAME)}", name)
    if at_step is not None and after_s is not None:
        raise ConfigError("--after-s", "", "either --at-step or --after-s, not both", after_s)
    moment = DEFAULT_MOMENT if at_step is None and after_s is None else Moment(at_step=at_step, after_s=after_s)
    chosen = [BY_NAME[n] for n in cases or DEFAULT_CASES]
    why = user.unavailable()
    if why and any(c.reference in ("user", "blackbox") for c in chosen):
        if cases:
            raise ConfigError("--case", "", "a case whose reference loop is here", f"{why}")
        click.echo(f"ftbench: skipping the cases of examples/ddp/train.py: {why}", err=True)
        chosen = [c for c in chosen if c.reference not in ("user", "blackbox")]
    tolerance = Tolerance(abs_s=tolerance_ms / 1e3, rel=tolerance_rel)
    signal.signal(signal.SIGTERM, interrupt)
    try:
        report = run_calibration(
            chosen,
            trials=trials,
            out=out,
            tolerance=tolerance,
            start_method=start_method,
            moment=moment,
            argv=sys.argv,
            progress=lambda line: click.echo(line, err=True),
        )
    except KeyboardInterrupt:
        click.echo("\nftbench: calibration interrupted; the finished trials are kept.", err=True)
        sys.exit(130)
    click.echo(format_table(report, tolerance))
    click.echo(f"results: {report.rundir.path}")
    sys.exit(report.exit_status)


def _in_environment(spec: str, args: list[str]) -> int:
    """Run this same calibration with the interpreter of ``spec``'s environment (both its
    paths, the bare ranks too, then import that environment's torch); its exit code."""
    from bench.procs import venvs

    try:
        env = venvs.prepare(spec, progress=lambda line: click.echo(line, err=True))
    except (venvs.EnvBuildError, ValueError) as err:
        raise ConfigError("--env", "", "an environment that can be built", f"{spec}: {err}") from None
    click.echo(f"ftbench: calibrating in environment {env.spec!r} ({env.python})", err=True)
    argv = [env.python, "-m", "bench", "calibrate", *args]
    return subprocess.run(argv, env=venvs.child_environ() | {ENV_SPEC: spec}, check=False).returncode
