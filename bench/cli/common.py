"""What every ``ftbench`` command shares: the click group, the mapping of bad input to
one line and exit status 2, the scenario loader with ``--set``, and SIGTERM as Ctrl-C."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bench.scenario import catalogue
from bench.scenario.config import ConfigError
from bench.scenario.loader import load
from bench.scenario.model import Scenario
from bench.scenario.overrides import parse_override

if TYPE_CHECKING:
    from bench.hosts.cluster import Cluster

F = TypeVar("F", bound=Callable[..., Any])


class Ascii(click.ParamType[Any, Any]):
    """A number option in ASCII digits. click's INT and FLOAT convert with Python's
    ``int()`` and ``float()``, which take full-width and other Unicode digits ("３"), so
    a value that looks like nothing a shell script would write was accepted."""

    def __init__(self, inner: click.ParamType[Any, Any]) -> None:
        self.inner = inner
        self.name = inner.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.isascii():
            self.fail(f"{value!r} is not a number in ASCII digits", param, ctx)
        return self.inner.convert(value, param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        return self.inner.get_metavar(param, ctx)


def errors(func: F) -> F:
    """Bad input becomes one line on stderr and exit status 2, never a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ConfigError as err:
            click.echo(f"ftbench: error: {err}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def load_scenario(name_or_file: str, sets: tuple[str, ...]) -> Scenario:
    """A named scenario or a file, with ``--set`` overrides applied."""
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


def interrupt(signum: int, frame: Any) -> None:
    """SIGINT and SIGTERM handler: end the current trial cleanly, as Ctrl-C does."""
    raise KeyboardInterrupt


def agents_cluster(agents_at: str, wait_s: float) -> Cluster:
    """The rendezvous with host agents at ``--agents-at`` (``ftbench run`` and ``ftbench
    scale``): its address checked, and the shared secret a routable address requires."""
    from bench.hosts.auth import SecretError, required_secret
    from bench.hosts.cluster import Cluster, parse_address

    try:
        address, port = parse_address(agents_at)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--agents-at") from None
    try:
        secret = required_secret(address, "--agents-at")
    except SecretError as err:
        click.echo(f"ftbench: error: {err}", err=True)
        sys.exit(2)
    return Cluster(address, port, secret=secret, wait_s=wait_s)
