"""The ``ftbench`` command line: a thin layer of click over plain functions.

Layer: the top (with :mod:`bench.pytest_plugin`); nothing imports it.

Everything a command does is a function of :mod:`bench` that a test or a notebook can
call; these modules only parse arguments, print, and map errors to exit statuses (2 for
bad input, with one line naming the file and the key). One module per family of
commands; importing them registers them on :data:`~bench.cli.common.cli`.
"""

from __future__ import annotations

import os
import warnings

from bench.cli import calibrate, results, run, scale, scenarios
from bench.cli.common import cli

__all__ = ["calibrate", "cli", "main", "results", "run", "scale", "scenarios"]


PYNVML_WARNING = "ignore:The pynvml package is deprecated:FutureWarning"
"""torch.cuda imports pynvml (a dependency of nvidia-resiliency-ext), which warns on every
import that it is deprecated: noise on a console that shows figures, and in every log."""


def main() -> None:
    warnings.filterwarnings("ignore", message="The pynvml package is deprecated", category=FutureWarning)
    # ...and in every Python the run starts (forkserver, agents, torchrun's workers).
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (os.environ.get("PYTHONWARNINGS"), PYNVML_WARNING)))
    cli(prog_name="ftbench")
