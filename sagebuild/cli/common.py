"""Shared CLI plumbing: option types, JSON output, error → exit-code mapping. Imports no torch.

With ``--json`` the JSON document is the only thing on stdout, errors included.
"""

from __future__ import annotations

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
from sagebuild.errors import Exit, SagebuildError, Terminated, internal_error

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

# options shared by compile and accept
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
# the bench options ``bench`` and ``accept`` share, as ``bench.config_from_profile`` takes them:
# (parameter, type, option, help); each defaults to None: the profile's value (rounds, sustain and
# gate-on: BenchConfig's defaults)
_BENCH_OPTIONS = (
    ("batch", int, "--batch", "Bench batch size (default: profile)."),
    ("heads", int, "--heads", "Bench attention heads (default: profile)."),
    ("seq", str, "--seq", "Bench sequence length(s), e.g. 1024 or 1024,4096,16384 (default: profile)."),
    ("head_dim", int, "--head-dim", "Bench head dim (default: profile)."),
    (
        "kv_seq",
        int,
        "--kv-seq",
        "Keys per call for cross-attention, e.g. 77 (SDXL's text) or 512 (default: as many as --seq).",
    ),
    ("kv_heads", int, "--kv-heads", "K/V heads for GQA/MQA, a divisor of --heads (default: --heads)."),
    (
        "varlen",
        str,
        "--varlen",
        "Packed sequences' lengths instead of --seq, e.g. 4680,3120, or N:Nk for their keys (4096:137,"
        "4096:512): sageattn_varlen against SDPA per sequence.",
    ),
    ("causal", bool, "--causal/--no-causal", "Bench with a causal mask."),
    ("warmup", int, "--warmup", "Bench warm-up calls (default: profile)."),
    ("reps", int, "--reps", "Bench timed calls (default: profile)."),
    (
        "rounds",
        int,
        "--rounds",
        "Split the timed calls into this many rounds, each timing every provider (default 5).",
    ),
    (
        "sustain_s",
        float,
        "--sustain",
        "Also time each provider over this many seconds of back-to-back calls per round: the "
        "GPU at its power limit, what a long job sees (GPU only; default 0 = off).",
    ),
    (
        "gate_on",
        str,
        "--gate-on",
        "Which speed-up the profile's speed gate compares: cold (default; L2 flushed before "
        "each call) or sustained (needs --sustain: the GPU at its power limit, steadier in CI).",
    ),
    (
        "against",
        str,
        "--against",
        "Also time these peers beside SDPA and ours: a comma-separated list of sdpa, ck (Comfy "
        "Kitchen), upstream (SageAttention), fa2, fa3, fa4 (FlashAttention), aiter, or all; one not "
        "installed or refusing the shape is listed with its reason (default: sdpa).",
    ),
    (
        "min_speedup",
        float,
        "--min-speedup",
        "Also fail when sageattn's speed-up over SDPA is below this (an explicit SDPA-relative gate; "
        "the default gate compares with the speed-up the profile recorded for this GPU).",
    ),
)

F = TypeVar("F", bound=Callable[..., Any])


def with_bench_options(fn: F) -> F:
    """Put the :data:`_BENCH_OPTIONS` in place of a command's ``bench`` parameter, which gets their dict."""
    from_table = [
        inspect.Parameter(
            name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None,
            annotation=Annotated[Optional[typ], typer.Option(flag, help=text)],
        )
        for name, typ, flag, text in _BENCH_OPTIONS
    ]
    hints = get_type_hints(fn, include_extras=True)  # resolved: typer reads the annotations
    own = [p.replace(annotation=hints[p.name]) for p in inspect.signature(fn).parameters.values()]
    merged = [q for p in own for q in (from_table if p.name == "bench" else [p])]

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        from sagebuild.bench.config import parse_against, parse_int_list, parse_varlen

        bench = {p.name: kwargs.pop(p.name) for p in from_table}
        # an empty value is a usage error there, not "the profile's default"
        bench["seq"] = parse_int_list(bench["seq"], "seq") if bench["seq"] is not None else None
        varlen = parse_varlen(bench["varlen"]) if bench["varlen"] is not None else (None, None)
        bench["varlen"], bench["varlen_keys"] = varlen
        bench["against"] = parse_against(bench["against"]) if bench["against"] else None
        return fn(**kwargs, bench=bench)

    wrapper.__signature__ = inspect.Signature(merged)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in merged}
    return wrapper  # type: ignore[return-value]


def parse_shape(text: str, option: str) -> Any:
    """The ``B,H,N,D`` an option such as ``--shape`` names, or a usage error (exit 2)."""
    from sagebuild.bench.config import parse_int_list

    dims = parse_int_list(text, option.lstrip("-"))
    if len(dims) != 4:
        raise SagebuildError(
            f"{option} {text}: expected four numbers B,H,N,D", fix=f"e.g. {option} 1,8,512,64"
        )
    return dims


def path_option(text: Optional[str], option: str) -> Optional[Path]:
    """A path option's value as a ``Path``; an empty one is a usage error (exit 2), never the current
    directory that ``Path("")`` would be (an unset CI variable, ``--out "$OUT"``, must not write
    over the files where the job stands)."""
    if text is None:
        return None
    if not text.strip():
        raise SagebuildError(
            f"{option} is empty (an unset variable?)",
            fix=f"pass {option} a path; '.' if you mean the current directory",
        )
    return Path(text)


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
    from sagebuild.fsio import user_error

    if isinstance(exc, SagebuildError):
        return exc
    on_disk = user_error(exc)  # a named path or the disk, not a bug
    if on_disk is not None:
        return on_disk
    if isinstance(exc, MemoryError):
        return SagebuildError(
            "out of memory", fix="close other programs or pass smaller sizes", code=Exit.ENVIRONMENT
        )
    return internal_error(exc)


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
        try:
            return fn(*args, **kwargs)
        except _PASSTHROUGH:
            raise
        except KeyboardInterrupt:
            console.print("[yellow]interrupted[/]")
            raise typer.Exit(int(Exit.INTERRUPTED)) from None
        except Terminated:
            console.print("[yellow]terminated (SIGTERM)[/]")
            raise typer.Exit(int(Exit.TERMINATED)) from None
        except BrokenPipeError:
            # the reader of stdout left (`sagebuild bench --json | head`): nothing is wrong and no one
            # is left to tell (rich's own writes end the same way: ``console._Console``)
            _consoles.silence(sys.stdout)
            raise typer.Exit(int(Exit.BROKEN_PIPE)) from None
        except Exception as exc:  # noqa: BLE001 - every error ends in one line and an exit code
            json_out = kwargs.get("json_out", kwargs.get("json")) is True
            command = fn.__name__.removesuffix("_cmd").removesuffix("_command").rstrip("_")
            err = as_user_error(exc)
            if err.code == Exit.INTERNAL and DEBUG:
                traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
            print_error(err)
            if json_out:
                emit_json({"command": command, "ok": False, "error": err.to_dict()})
            raise typer.Exit(int(err.code)) from None

    return wrapper  # type: ignore[return-value]


def print_error(err: SagebuildError) -> None:
    """The ``error:`` and ``fix:`` lines on stderr."""
    console.print(f"[bold red]error:[/] {escape(err.message)}", highlight=False)
    if err.fix:
        console.print(f"[bold]fix:[/] {escape(err.fix)}", highlight=False)


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
