"""Shared CLI plumbing: option types, JSON output, error → exit-code mapping. Imports no torch.

With ``--json`` the JSON document is the only thing on stdout, errors included.
"""

from __future__ import annotations

import errno
import functools
import inspect
import json
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, TypeVar, get_type_hints

import typer
from rich.markup import escape

from sagebuild import console as _consoles
from sagebuild.errors import Exit, SagebuildError, internal_error

JSON_SCHEMA_VERSION = 1

console = _consoles.err  # diagnostics: progress, warnings, errors
out = _consoles.out  # reports and tables

# set by the root ``--debug`` option: an internal error then shows its traceback
DEBUG = False

# a check's or a step's status as a table cell
STATUS_STYLE = {
    "ok": "[green]ok[/]",
    "warn": "[yellow]warn[/]",
    "fail": "[bold red]FAIL[/]",
    "skip": "[dim]skip[/]",
}

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

# options shared by compile/bench and accept
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
MinSpeedupOpt = Annotated[
    Optional[float],
    typer.Option(
        "--min-speedup",
        help="Also fail when sageattn's speed-up over SDPA is below this (an explicit SDPA-relative gate; "
        "the default gate compares with the speed-up the profile recorded for this GPU).",
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


def bench_overrides(
    batch: BatchOpt = None,
    heads: HeadsOpt = None,
    seq: SeqOpt = None,
    head_dim: HeadDimOpt = None,
    causal: CausalOpt = None,
    warmup: WarmupOpt = None,
    reps: RepsOpt = None,
    rounds: RoundsOpt = None,
    sustain: SustainOpt = None,
    gate_on: GateOnOpt = None,
    min_speedup: MinSpeedupOpt = None,
) -> dict[str, Any]:
    """The bench options ``bench`` and ``accept`` share, as ``bench.config_from_profile`` takes
    them (None keeps the profile's value)."""
    from sagebuild.bench import parse_int_list

    return {
        "batch": batch, "heads": heads, "seq": parse_int_list(seq, "seq") if seq else None,
        "head_dim": head_dim, "causal": causal, "warmup": warmup, "reps": reps, "rounds": rounds,
        "sustain_s": sustain, "gate_on": gate_on, "min_speedup": min_speedup,
    }  # fmt: skip


def with_bench_options(fn: F) -> F:
    """Give a command :func:`bench_overrides`' options in place of its ``bench`` parameter, which
    then receives their dict: the options are declared once for every command that benches."""

    def params(f: Callable[..., Any]) -> list[inspect.Parameter]:  # annotations resolved (typer reads them)
        hints = get_type_hints(f, include_extras=True)
        return [p.replace(annotation=hints[p.name]) for p in inspect.signature(f).parameters.values()]

    shared = params(bench_overrides)
    merged = [q for p in params(fn) for q in (shared if p.name == "bench" else [p])]

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        bench = bench_overrides(**{p.name: kwargs.pop(p.name) for p in shared})
        return fn(**kwargs, bench=bench)

    wrapper.__signature__ = inspect.Signature(merged)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in merged}
    return wrapper  # type: ignore[return-value]


def parse_shape(text: str, option: str) -> Any:
    """The ``B,H,N,D`` an option such as ``--shape`` names, or a usage error (exit 2)."""
    from sagebuild.bench import parse_int_list

    dims = parse_int_list(text, option.lstrip("-"))
    if len(dims) != 4:
        raise SagebuildError(
            f"{option} {text}: expected four numbers B,H,N,D", fix=f"e.g. {option} 1,8,512,64"
        )
    return dims


def resolve_profile(spec: str) -> tuple[Any, str]:
    """The profile for ``spec`` with this machine's probed archs (``auto`` matches them)."""
    from sagebuild import probe, profiles

    return profiles.resolve(spec, probe.collect().gpu_archs())


def emit_json(doc: dict[str, Any]) -> None:
    """Write ``doc`` (with the schema version) as the only thing on stdout."""
    doc = {"schema_version": JSON_SCHEMA_VERSION, **doc}
    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    sys.stdout.flush()


def as_user_error(exc: BaseException) -> SagebuildError:
    """Any exception as the error the user sees: ours as is, a file-system or memory failure as a
    clear line (exit 2 / 3), else an internal error (exit 1)."""
    from sagebuild.fsio import write_error

    if isinstance(exc, SagebuildError):
        return exc
    if isinstance(exc, OSError) and (exc.filename is not None or exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        # a file-system operation on a named path failed: the path or the disk, not a bug
        return write_error(exc.filename or "a file", exc, "access")
    if isinstance(exc, MemoryError):
        return SagebuildError(
            "out of memory", fix="close other programs or pass smaller sizes", code=Exit.ENVIRONMENT
        )
    return internal_error(exc)


def fail(err: SagebuildError, json_out: bool = False, command: str | None = None) -> None:
    """Print ``err`` (and, with ``--json``, a JSON document carrying it) and exit with its code."""
    console.print(f"[bold red]error:[/] {escape(err.message)}", highlight=False)
    if err.fix:
        console.print(f"[bold]fix:[/] {escape(err.fix)}", highlight=False)
    if json_out:
        doc: dict[str, Any] = {"ok": False, "error": err.to_dict()}
        if command:
            doc = {"command": command, **doc}
        emit_json(doc)
    raise typer.Exit(int(err.code))


def _passthrough() -> tuple[type[BaseException], ...]:
    """The CLI framework's own exits and usage errors: typer's, and click's where installed."""
    types: list[type[BaseException]] = [typer.Exit, typer.Abort]
    types += [typer.TyperException] if hasattr(typer, "TyperException") else []
    try:
        import click

        types.append(click.ClickException)
    except ImportError:
        pass
    return tuple(types)


_PASSTHROUGH = _passthrough()


def handle_errors(fn: F) -> F:
    """Any error as its message, fix and exit code, with no traceback (``--debug`` shows an internal
    error's); with ``--json`` a JSON document carries it too."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        json_out = kwargs.get("json_out", kwargs.get("json")) is True
        command = fn.__name__.removesuffix("_cmd").removesuffix("_command").rstrip("_")
        try:
            return fn(*args, **kwargs)
        except _PASSTHROUGH:
            raise
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]")
            raise typer.Exit(int(Exit.INTERRUPTED)) from None
        except Exception as exc:  # noqa: BLE001 - every error ends in one line and an exit code
            err = as_user_error(exc)
            if err.code == Exit.INTERNAL and DEBUG:
                traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
            fail(err, json_out, command)

    return wrapper  # type: ignore[return-value]


def exit_with(code: Exit | int) -> None:
    if int(code) != 0:
        raise typer.Exit(int(code))


def respond(json_out: bool, doc: dict[str, Any], show: Callable[[], None], code: Exit | int = 0) -> None:
    """``doc`` as the JSON document, or ``show()``'s view for a person; then exit with ``code``."""
    if json_out:
        emit_json(doc)
    else:
        show()
    exit_with(code)
