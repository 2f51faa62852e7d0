"""``python -m bench.onegpu``: the one-GPU run's commands (tools/gpu-check.sh --one-gpu
calls them; docs/development.md, "The one-GPU run").

- ``dry-run OUT``: every section's points validated as the run will load them, the
  points the GPU image will skip, the budgets, the carried wheels against the image,
  the tree's size; exit 1 on any problem;
- ``run OUT [--rehearse]``: the sections under their deadlines, then the summary and
  the pack into OUT (``--rehearse``: the same on the CPU, each section made small);
- ``wheels``: fetch the pinned wheels into ``.whl/`` and check them (``make gpu-wheels``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from bench.onegpu import image, plan, wheels


@click.group()
def main() -> None:
    """The one-GPU run of ftbench."""


@main.command("dry-run")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
def dry_run(out: Path) -> None:
    """Check everything the run needs without running it; say what would run."""
    problems = plan.check_plan()
    report = wheels.check()
    pinned = plan.carried_versions()
    click.echo(
        f"one-GPU run: into {out}, {len(plan.SECTIONS)} sections, done by {plan.END_S:.0f} s of {plan.WALL_S:.0f} s"
    )
    for section, deadline in zip(plan.SECTIONS, plan.deadlines(), strict=True):
        checked = plan.check_section(section, pinned=pinned)
        problems += checked.problems
        runnable = len(checked.points) - len(checked.on_image)
        click.echo(
            f"  {section.name}: ftbench run {section.scenario}: {len(checked.points)} point(s), "
            f"{runnable} on the GPU image; budget {section.budget_s:.0f} s, over by {deadline:.0f} s"
        )
        click.echo(f"    {section.what}")
        for p in checked.points:
            s = p.scenario
            where = checked.on_image.get(p.label)
            click.echo(
                f"    {p.label}: {s.workload.kind} x{s.workload.world_size} on {s.workload.backend}/"
                f"{s.workload.device}, {s.measure.trials} trial(s)"
                + (f"; skipped on the image: {where}" if where else "")
            )
        for label, why in checked.refused.items():
            click.echo(f"    left out: {label}: {why[:200]}")
        rehearsal = plan.check_section(section, section.rehearsal, pinned=pinned)
        problems += [f"rehearsal: {p}" for p in rehearsal.problems]
    click.echo(
        f"  wheels: {len(report.wheels)} in {wheels.WHEELS} ({report.wheel_bytes / 2**20:.1f} MiB), "
        f"checked against CPython {'.'.join(map(str, image.PYTHON))} on manylinux x86-64 (glibc <= 2.39)"
    )
    for wheel in report.wheels:
        click.echo(f"    {wheel.path.name}  {wheel.size / 2**20:.2f} MiB")
    for note in report.notes:
        click.echo(f"    note: {note}")
    total = report.tree_bytes + report.wheel_bytes
    click.echo(
        f"  travels: tree {report.tree_bytes / 2**20:.1f} MiB + wheels {report.wheel_bytes / 2**20:.1f} MiB = "
        f"{total / 2**20:.1f} MiB of {wheels.LIMIT_BYTES / 2**20:.0f} MiB"
    )
    click.echo(f"  writes: {', '.join(plan.OUTPUT_FILES)} (at most {plan.MAX_FILES} files of 16 MiB come back)")
    problems += report.problems
    for problem in problems:
        click.echo(f"problem: {problem}", err=True)
    if problems:
        sys.exit(1)
    click.echo("dry run: ok")


@main.command("run")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--rehearse", is_flag=True, help="Every section on the CPU, made small: the plumbing, proven here.")
@click.option(
    "--scale",
    type=click.FloatRange(min=0.05, max=1.0),
    default=1.0,
    show_default=True,
    help="Every budget and deadline times this (a rehearsal that must meet its deadlines sooner).",
)
def run(out: Path, rehearse: bool, scale: float) -> None:
    """Run the sections into OUT under the run's deadline."""
    from bench.onegpu.drive import run as drive

    sys.exit(drive(out, python=sys.executable, rehearse=rehearse, scale=scale))


@main.command("wheels")
def fetch() -> None:
    """Fetch the pinned wheels for the GPU image into .whl/ and check them."""
    try:
        report = wheels.fetch(progress=click.echo)
    except (RuntimeError, ValueError) as err:
        click.echo(f"gpu-wheels: {err}", err=True)
        sys.exit(1)
    for problem in report.problems:
        click.echo(f"problem: {problem}", err=True)
    click.echo(f"gpu-wheels: {len(report.wheels)} wheels, {report.wheel_bytes / 2**20:.1f} MiB in {wheels.WHEELS}")
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
