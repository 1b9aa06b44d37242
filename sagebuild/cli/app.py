"""The ``sagebuild`` typer application, composed of one ``register(app)`` module per command.

Command modules import torch inside their functions only, so ``sagebuild --help`` stays fast.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Annotated

import typer

from sagebuild._version import __version__

COMMAND_MODULES = (
    "doctor", "profiles", "compile", "verify", "bench", "tune", "accept", "lock", "explain", "compat",
)  # fmt: skip

app = typer.Typer(
    name="sagebuild",
    help="Quantized attention (INT8 Q·Kᵀ, FP16/FP8 P·V) on any AMD or NVIDIA machine: "
    "doctor → compile → verify → bench, ending in a report and a frozen lockfile.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"sagebuild {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
    debug: Annotated[
        bool,
        typer.Option("--debug", help="Show the Python traceback of an internal error (to report it)."),
    ] = False,
) -> None:
    """Quantized attention that builds, verifies and benchmarks itself."""
    from sagebuild.cli import common

    common.DEBUG = debug


for _name in COMMAND_MODULES:
    importlib.import_module(f"sagebuild.cli.{_name}_cmd").register(app)


def main() -> None:
    # torch prints this when numpy is absent (CPU wheels do not require it); nothing here uses
    # numpy, so it would only alarm a user reading the pipeline's output
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    from sagebuild.console import encodable_streams

    encodable_streams()
    app()
