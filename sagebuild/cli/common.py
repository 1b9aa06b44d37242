"""Shared CLI plumbing: option types, the stderr console, JSON output, error → exit-code mapping.

Diagnostics go to stderr; stdout carries data only (the ``--json`` document). Nothing here
imports torch.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, TypeVar

import typer
from rich.console import Console

from sagebuild.errors import Exit, SagebuildError

JSON_SCHEMA_VERSION = 1

console = Console(stderr=True)
if not console.is_terminal and "COLUMNS" not in os.environ:
    # a pipe or a CI log has no width: rich would assume 80 columns and squeeze tables
    console.width = 160

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout and nothing else.")]
ProfileOpt = Annotated[
    str,
    typer.Option("--profile", "-p", help="Bundled profile name, a path to a YAML file, or 'auto'."),
]
RootOpt = Annotated[
    Path,
    typer.Option(
        "--root", help="Probe this directory as the system root (a system image, chroot or test fixture)."
    ),
]
PythonOpt = Annotated[
    Optional[str],
    typer.Option(
        "--python", help="Probe this interpreter's torch/triton (default: the one running sagebuild)."
    ),
]

# Build and bench options shared by `compile`/`bench` and `accept` (one declaration each).
JobsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--jobs",
        "-j",
        help="MAX_JOBS for the build (default: from free memory, cores and the profile's cap).",
    ),
]
ArchOpt = Annotated[
    Optional[str],
    typer.Option(
        "--arch",
        help="Target archs: 'gfx1201', 'gfx1201,gfx1100', '9.0', 'sm90' (default: the detected GPUs).",
    ),
]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", help="Bench batch size (default: profile).")]
HeadsOpt = Annotated[Optional[int], typer.Option("--heads", help="Bench attention heads (default: profile).")]
SeqOpt = Annotated[
    Optional[str],
    typer.Option("--seq", help="Bench sequence length(s), e.g. 1024 or 1024,4096,16384 (default: profile)."),
]
HeadDimOpt = Annotated[Optional[int], typer.Option("--head-dim", help="Bench head dim (default: profile).")]
CausalOpt = Annotated[Optional[bool], typer.Option("--causal/--no-causal", help="Bench with a causal mask.")]
WarmupOpt = Annotated[Optional[int], typer.Option("--warmup", help="Bench warm-up calls (default: profile).")]
RepsOpt = Annotated[Optional[int], typer.Option("--reps", help="Bench timed calls (default: profile).")]
SustainOpt = Annotated[
    Optional[float],
    typer.Option(
        "--sustain",
        help="Also time each provider over this many seconds of back-to-back calls per round: the "
        "GPU at its power limit, what a long job sees (GPU only; default 0 = off).",
    ),
]
GateOnOpt = Annotated[
    Optional[str],
    typer.Option(
        "--gate-on",
        help="Which speed-up the profile's speed gate compares: cold (default; L2 flushed before "
        "each call) or sustained (needs --sustain: the GPU at its power limit, steadier in CI).",
    ),
]
RoundsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--rounds",
        help="Split the timed calls into this many rounds, each timing every provider (default 5).",
    ),
]

F = TypeVar("F", bound=Callable[..., Any])


def emit_json(doc: dict[str, Any]) -> None:
    """Write ``doc`` (with the schema version) as the only thing on stdout."""
    doc = {"schema_version": JSON_SCHEMA_VERSION, **doc}
    sys.stdout.write(json.dumps(doc, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def report_error(err: SagebuildError) -> None:
    console.print(f"[bold red]error:[/] {err.message}", highlight=False)
    if err.fix:
        console.print(f"[bold]fix:[/] {err.fix}", highlight=False)


def handle_errors(fn: F) -> F:
    """Turn a ``SagebuildError`` into a message, its fix and the mapped exit code: no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SagebuildError as err:
            report_error(err)
            raise typer.Exit(int(err.code)) from None
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]")
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]


def exit_with(code: Exit | int) -> None:
    if int(code) != 0:
        raise typer.Exit(int(code))
