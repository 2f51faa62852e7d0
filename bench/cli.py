"""The ``ftbench`` command line: a thin layer of click over plain functions.

Everything a command does is a function of :mod:`bench` that a test or a notebook can
call; this module only parses arguments, prints, and maps errors to exit statuses
(2 for bad input, with one line naming the file and the key).
"""

from __future__ import annotations

import functools
import json
import signal
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bench.scenario import catalogue
from bench.scenario.config import ConfigError, to_dict
from bench.scenario.faults import FAULTS
from bench.scenario.loader import load, points
from bench.scenario.model import Scenario
from bench.scenario.overrides import parse_override
from bench.scenario.registry import Registry
from bench.strategies import STRATEGIES
from bench.workloads import WORKLOADS

if TYPE_CHECKING:
    from bench.results.reader import Run
    from bench.results.writer import RunDir

F = TypeVar("F", bound=Callable[..., Any])


def _errors(func: F) -> F:
    """Bad input becomes one line on stderr and exit status 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as err:
            click.echo(f"ftbench: error: {err}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def _load(name_or_file: str, sets: tuple[str, ...]) -> Scenario:
    return load(catalogue.resolve(name_or_file), [parse_override(s) for s in sets])


SET_OPTION = click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario key (dotted, e.g. workload.world_size=3); "
    "VALUE is read as TOML, else as a string. Replaces a sweep of that key.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ftbench")
def cli() -> None:
    """Fault injection and recovery-latency benchmarks for distributed PyTorch."""


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
@_errors
def show(scenario: str, sets: tuple[str, ...]) -> None:
    """Print the resolved points of SCENARIO (a name or a TOML file)."""
    sc = _load(scenario, sets)
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
@_errors
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
        sc, rundir = _load(scenario, sets), None

    signal.signal(signal.SIGTERM, _interrupt)
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


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _latest_run(out: Path, name: str, rundir: RunDir | None) -> Path:
    if rundir is not None:
        return rundir.path
    runs = sorted((out / name).glob("*/run.json"), key=lambda p: p.stat().st_mtime)
    return runs[-1].parent if runs else out / name


# --- report, compare, gate, export, baseline ----------------------------------------------


def _run(path: str) -> Run:
    """A results directory, loaded; unreadable files become one-line errors (exit 2)."""
    from bench.results.reader import load as load_run

    try:
        run = load_run(path)
    except ConfigError:
        raise
    except (OSError, ValueError, KeyError) as err:
        raise ConfigError(path, "", "a readable ftbench results directory", str(err)) from None
    for note in run.notes:
        click.echo(f"ftbench: warning: {note}", err=True)
    return run


def _gate_options(fn: F) -> F:
    """Thresholds of the comparison; each overrides the candidate scenario's [gate] table."""
    for option in reversed(
        (
            click.option(
                "--metric",
                "metrics",
                multiple=True,
                metavar="FIGURE",
                help="Figure to compare (repeatable). Default: gate.metric for gate, every figure for compare.",
            ),
            click.option("--factor", type=float, help="Median ratio above which a change counts (gate.factor)."),
            click.option("--floor-s", type=float, help="Absolute difference below which it does not (gate.floor_s)."),
            click.option("--alpha", type=float, help="Mann-Whitney p threshold (gate.alpha)."),
            click.option("--min-trials", type=int, help="Values needed on each side (gate.min_trials)."),
        )
    ):
        fn = option(fn)
    return fn


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory (default: the run directory itself; required for several runs).",
)
@_errors
def report(run_dirs: tuple[str, ...], out: Path | None) -> None:
    """Markdown and self-contained HTML report (tables, ECDFs, boxes, phases, timelines,
    loss curves, environment) of one or more RUN_DIRS."""
    from bench.report import make_report

    for d in run_dirs:
        _run(d)
    files = make_report(list(run_dirs), out)
    click.echo(f"report: {files.markdown}")
    click.echo(f"html:   {files.html}")
    click.echo(f"plots:  {len(files.images)} PNG file(s) in {files.markdown.parent / 'plots'}")


ENV_BASELINE = click.option(
    "--env-baseline",
    metavar="REQUIREMENTS",
    help="Within one run made with --env: compare every other environment against this one "
    "(as written to --env; '' for the harness's own).",
)


@cli.command()
@click.argument("base")
@click.argument("cand", required=False)
@ENV_BASELINE
@_gate_options
@_errors
def compare(
    base: str,
    cand: str | None,
    env_baseline: str | None,
    metrics: tuple[str, ...],
    factor: float | None,
    floor_s: float | None,
    alpha: float | None,
    min_trials: int | None,
) -> None:
    """Per point of BASE and CAND: medians, ratio, Mann-Whitney p and an asv-style mark.
    With --env-baseline, BASE alone: its environments against one of them."""
    from bench.results import compare as cmp
    from bench.results import environments

    b = _run(base)
    if (cand is None) == (env_baseline is None):
        raise click.UsageError("give BASE and CAND, or one run and --env-baseline")
    c = b if cand is None else _run(cand)
    opts = cmp.GateOptions.from_spec(
        c.gate_spec(),
        metrics=metrics or cmp.default_metrics(b, c),
        factor=factor,
        floor_s=floor_s,
        alpha=alpha,
        min_trials=min_trials,
    )
    if env_baseline is not None:
        click.echo(f"run: {b.path}\nbaseline environment: {environments.normal(env_baseline) or 'the harness own'}")
        rows, messages = environments.compare_envs(b, env_baseline, opts)
    else:
        click.echo(f"baseline:  {b.path}\ncandidate: {c.path}")
        rows, messages = cmp.compare_runs(b, c, opts), cmp.run_differences(b, c)
    for line in messages:
        click.echo(f"  differs: {line}")
    click.echo(cmp.format_rows(rows, opts))


@cli.command()
@click.argument("candidate")
@click.option("--baseline", help="Run directory, scenario results directory or name under results/baselines/.")
@ENV_BASELINE
@_gate_options
@click.option(
    "--slo/--no-slo",
    default=True,
    show_default=True,
    help="Check the candidate scenario's [[gate.slo]] service levels.",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@_errors
def gate(
    candidate: str,
    baseline: str | None,
    env_baseline: str | None,
    metrics: tuple[str, ...],
    factor: float | None,
    floor_s: float | None,
    alpha: float | None,
    min_trials: int | None,
    slo: bool,
    junit: Path | None,
) -> None:
    """Gate CANDIDATE against a baseline and/or service levels: exit 0 pass, 1 regression,
    2 insufficient data or bad input."""
    from bench.results import compare as cmp
    from bench.results import gate as gt

    c = _run(candidate)
    b = _run(baseline) if baseline else None
    spec = c.gate_spec()
    opts = cmp.GateOptions.from_spec(
        spec, metrics=metrics, factor=factor, floor_s=floor_s, alpha=alpha, min_trials=min_trials
    )
    result = gt.gate(c, opts, base=b, env_baseline=env_baseline, slos=spec.slo if slo else ())
    click.echo(f"candidate: {c.path}" + (f"\nbaseline:  {b.path}" if b else ""))
    for line in result.messages:
        click.echo(f"  differs: {line}")
    if result.rows:
        click.echo(cmp.format_rows(result.rows, opts))
    if result.slo_rows:
        click.echo("service levels:")
        click.echo(gt.format_slos(result.slo_rows))
    if junit is not None:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(gt.junit_xml(result))
    click.echo(gt.verdict_line(result))
    sys.exit(result.status)


@cli.command()
@click.argument("run_dir")
@click.option(
    "--format",
    "fmt",
    required=True,
    metavar="FORMAT",
    help="pytest-benchmark, github-smaller, github-bigger or bencher.",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="File to write (default: stdout).")
@_errors
def export(run_dir: str, fmt: str, out: Path | None) -> None:
    """Write RUN_DIR's figures as pytest-benchmark JSON, github-action-benchmark JSON or Bencher BMF."""
    from bench.results import export as exp

    if fmt not in exp.FORMATS:
        raise ConfigError("--format", "", f"one of {', '.join(exp.FORMATS)}", fmt)
    text = exp.write(_run(run_dir), fmt, out)
    if out is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"{fmt}: {out}")


@cli.command()
@click.argument("run_dir")
@click.option("--name", help="Baseline name (default: the scenario's name).")
@click.option(
    "--dir",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results/baselines"),
    show_default=True,
    help="Where baselines are kept.",
)
@_errors
def baseline(run_dir: str, name: str | None, root: Path) -> None:
    """Keep RUN_DIR's run.json and trials as a baseline (for gate --baseline NAME)."""
    from bench.results.reader import save_baseline

    dest = save_baseline(_run(run_dir), name, root)
    click.echo(f"baseline: {dest}")


@cli.command()
@click.option(
    "--case",
    "cases",
    multiple=True,
    metavar="CASE",
    help="kill-ddp, kill-allreduce or stall-ddp (repeatable; default: all three).",
)
@click.option(
    "--trials",
    type=click.IntRange(min=2),
    default=15,
    show_default=True,
    help="Trials per case and path (bare and ftbench, interleaved).",
)
@click.option(
    "--tolerance-ms",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Absolute part of the tolerance on the difference of medians.",
)
@click.option(
    "--tolerance-rel",
    type=click.FloatRange(min=0),
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
@_errors
def calibrate(cases: tuple[str, ...], trials: int, tolerance_ms: float, tolerance_rel: float, out: Path) -> None:
    """Check ftbench's detection figures against a bare torch.distributed loop on this
    machine: exit 0 if every median is within the tolerance, 1 if one is not."""
    from bench.calibrate.cases import BY_NAME, CASES
    from bench.calibrate.session import Tolerance, format_table
    from bench.calibrate.session import calibrate as run_calibration

    for name in cases:
        if name not in BY_NAME:
            raise ConfigError("--case", "", f"one of {', '.join(BY_NAME)}", name)
    chosen = [BY_NAME[n] for n in cases] if cases else list(CASES)
    tolerance = Tolerance(abs_s=tolerance_ms / 1e3, rel=tolerance_rel)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        report = run_calibration(
            chosen,
            trials=trials,
            out=out,
            tolerance=tolerance,
            argv=sys.argv,
            progress=lambda line: click.echo(line, err=True),
        )
    except KeyboardInterrupt:
        click.echo("\nftbench: calibration interrupted; the finished trials are kept.", err=True)
        sys.exit(130)
    click.echo(format_table(report, tolerance))
    click.echo(f"results: {report.rundir.path}")
    sys.exit(0 if report.comparisons and all(c.ok for c in report.comparisons) else 1)


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
@_errors
def host_agent(controller: str, name: str, events_dir: Path, deadline_s: float, hostname: str) -> None:
    """Run this host's part of a multi-host trial (started on every host by the harness,
    srun or ssh; docs/multihost.md): register, align clocks, start and supervise this
    host's ranks, carry out the faults aimed at them."""
    from bench.procs.agent import main as agent_main

    sys.exit(agent_main(controller, name, events_dir, deadline_s, hostname))


def main() -> None:
    # torch.cuda imports pynvml (a dependency of nvidia-resiliency-ext), which warns on
    # every import that it is deprecated: noise on a console that shows figures.
    warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)
    cli(prog_name="ftbench")
