"""Commands that read run directories: report, compare, gate, export, baseline, project."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bench.cli.common import Ascii, cli, errors
from bench.scenario.config import ConfigError

if TYPE_CHECKING:
    from bench.results.reader import Run

F = TypeVar("F", bound=Callable[..., Any])


def open_run(path: str) -> Run:
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


def gate_options(fn: F) -> F:
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
            click.option(
                "--factor", type=Ascii(click.FLOAT), help="Median ratio above which a change counts (gate.factor)."
            ),
            click.option(
                "--floor-s", type=Ascii(click.FLOAT), help="Absolute difference below which it does not (gate.floor_s)."
            ),
            click.option("--alpha", type=Ascii(click.FLOAT), help="Mann-Whitney p threshold (gate.alpha)."),
            click.option("--min-trials", type=Ascii(click.INT), help="Values needed on each side (gate.min_trials)."),
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
@errors
def report(run_dirs: tuple[str, ...], out: Path | None) -> None:
    """Markdown and self-contained HTML report (tables, ECDFs, boxes, phases, timelines,
    loss curves, environment) of one or more RUN_DIRS."""
    from bench.report import make_report

    for d in run_dirs:
        open_run(d)
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
@gate_options
@errors
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
    from bench.results import envcompare

    b = open_run(base)
    if (cand is None) == (env_baseline is None):
        raise click.UsageError("give BASE and CAND, or one run and --env-baseline")
    c = b if cand is None else open_run(cand)
    opts = cmp.GateOptions.from_spec(
        c.gate_spec(),
        metrics=metrics or cmp.default_metrics(b, c),
        factor=factor,
        floor_s=floor_s,
        alpha=alpha,
        min_trials=min_trials,
    )
    if env_baseline is not None:
        click.echo(f"run: {b.path}\nbaseline environment: {envcompare.normal(env_baseline) or 'the harness own'}")
        rows, messages = envcompare.compare_envs(b, env_baseline, opts)
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
@gate_options
@click.option(
    "--slo/--no-slo",
    default=True,
    show_default=True,
    help="Check the candidate scenario's [[gate.slo]] service levels.",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="Also write JUnit XML here.")
@errors
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

    c = open_run(candidate)
    b = open_run(baseline) if baseline else None
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
@errors
def export(run_dir: str, fmt: str, out: Path | None) -> None:
    """Write RUN_DIR's figures as pytest-benchmark JSON, github-action-benchmark JSON or Bencher BMF."""
    from bench.results import export as exp

    if fmt not in exp.FORMATS:
        raise ConfigError("--format", "", f"one of {', '.join(exp.FORMATS)}", fmt)
    text = exp.write(open_run(run_dir), fmt, out)
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
@errors
def baseline(run_dir: str, name: str | None, root: Path) -> None:
    """Keep RUN_DIR's run.json and trials as a baseline (for gate --baseline NAME)."""
    from bench.results.reader import save_baseline

    dest = save_baseline(open_run(run_dir), name, root)
    click.echo(f"baseline: {dest}")


@cli.command()
@click.argument("run_dir", required=False)
@click.option("--scaling", help="Run of a world-size sweep (scenario phase-scaling) to fit phase growth on.")
@click.option(
    "--tax",
    default="auto",
    show_default=True,
    help="resilience-tax run giving each stack's fault-free step-time tax; auto: the newest one beside RUN_DIR's "
    "scenario directory, if any; none: assume no tax.",
)
@click.option(
    "--state",
    default="auto",
    show_default=True,
    help="state-scaling run whose fits size checkpoint writes and restores (with --set model_params=...); "
    "auto / none as for --tax.",
)
@click.option(
    "--scale",
    "scale_run",
    default="auto",
    show_default=True,
    help="ftbench scale run whose coordinator curves scale the control-plane phases (rendezvous, quorum, "
    "membership, barriers) at the cluster's participants; auto: the newest finished results/scale run beside "
    "RUN_DIR's scenario directory that measured every coordinator (else the newest), if any; none: do without.",
)
@click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False, path_type=Path), help="Cluster TOML file.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a cluster key (docs/project.md).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), help="Where project.md/png go [RUN/project].")
@click.option(
    "--validate",
    is_flag=True,
    help="RUN_DIR is a long chaos run: set its measured effective training time beside the model's prediction "
    "for its own failure rate, world size, checkpoints and per-fault losses (writes validate.md).",
)
@click.option(
    "--published",
    is_flag=True,
    help="No RUN_DIR: the published effective-training-time figures (Llama 3, FT-HSDP, Revisiting Reliability) "
    "beside this arithmetic at each paper's own inputs.",
)
@errors
def project(
    run_dir: str | None,
    scaling: str | None,
    tax: str,
    state: str,
    scale_run: str,
    cluster_file: Path | None,
    sets: tuple[str, ...],
    out: Path | None,
    validate: bool,
    published: bool,
) -> None:
    """Effective training time of each strategy at cluster scale (1K-100K GPUs), from
    RUN_DIR's measured recovery, each stack's fault-free tax and its state-moving costs,
    with bands and every input said to be measured or assumed."""
    from bench.project import assumptions, build, inputs, render

    if published:
        from bench.project.published import lines

        click.echo("\n".join(lines()))
        return
    if run_dir is None:
        raise click.UsageError("give RUN_DIR (or --published)")
    run = open_run(run_dir)
    if validate:
        from bench.project.validate import check
        from bench.project.validate_page import write

        page = write(check(run), run, out or run.path / "project")
        click.echo(page.read_text())
        click.echo(f"written: {page}")
        return
    measured = inputs.gather(
        inputs.locate(tax, run, inputs.TAX_SCENARIO, "--tax"),
        inputs.locate(state, run, inputs.STATE_SCENARIO, "--state"),
    )
    cluster = assumptions.cluster(cluster_file, sets)
    from bench.scale import rundir

    control = rundir.locate(scale_run, run.path)
    res = build(run, cluster, open_run(scaling) if scaling else None, inputs=measured, control=control)
    out = out or res.run.path / "project"
    png = render.plot(res, out / "project.png")
    click.echo(render.text(res))
    click.echo(f"\nwritten: {render.write(res, out, png)}, {png}")
