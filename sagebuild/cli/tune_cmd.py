"""``sagebuild tune``: measure this GPU's best path per shape class (one of our launch configs and
P·V variants, or SDPA) and keep the winners in the tuning record that ``sageattn`` replays."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Optional

import typer

from sagebuild.cli.common import JsonOpt, ProfileOpt, console, handle_errors, out, resolve_profile, respond
from sagebuild.errors import Exit, SagebuildError

_PRESET = "Shape classes to tune: mission (the acceptance bench's shapes), diffusion, llm or all."
_SHAPES = "Shape classes in bench's shape-key syntax, e.g. 1x16x1024x64,2x10x4096:77x64,1x32/8x4096x128c."
_FROM = "Tune the call signatures recorded while SAGEBUILD_RECORD=FILE was set (what your program runs)."
_BUDGET = "Seconds the whole run may take, compiles included (default: mission 60, diffusion 180, llm 120)."
_EXPORT = "Also write the record to FILE without paths or environment, to attach to an issue."
_VARIANTS = "Only these P·V variants, e.g. fp16 or fp16,fp8acc (default: every one the GPU runs)."


def _classes(
    preset: Optional[str], shapes: Optional[str], from_record: Optional[Path], dtype: str
) -> list[Any]:
    from sagebuild.tuning import classes

    given = [x for x in (preset, shapes, from_record) if x is not None]
    if len(given) > 1:
        raise SagebuildError(
            "pass one of --preset, --shapes and --from-record", fix="e.g. sagebuild tune --preset diffusion"
        )
    if shapes is not None:
        return list(classes.from_shapes(shapes, dtype))
    if from_record is not None:
        return list(classes.from_record(from_record))
    return list(classes.from_preset(preset or "mission"))


def _device() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise SagebuildError(
            "sagebuild tune needs a GPU: torch sees no CUDA or ROCm device",
            code=Exit.ENVIRONMENT,
        )
    return torch.device("cuda", torch.cuda.current_device())


@contextlib.contextmanager
def _progress(total: int, json_out: bool) -> Iterator[tuple[Callable[[str], None], Callable[[Any], None]]]:
    """(say, advance): a rich progress bar over the classes on a terminal, a line per step in a
    pipe or CI, nothing with --json."""
    from sagebuild.console import err, interactive, steps

    if json_out:
        yield (lambda _m: None), (lambda _r: None)
        return
    if not interactive(json_out):
        with steps("tune") as say:
            yield say, lambda r: say(f"{r.cls.key}: {_verdict(r)}")
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("tune"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
    )
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("", total=total)
        yield (lambda m: bar.update(task, description=m)), (lambda _r: bar.advance(task))


def _verdict(r: Any) -> str:
    w = r.winner
    if w is None:
        return "no path ran"
    sdpa = r.sdpa.ms if r.sdpa else None
    ratio = f", {sdpa / w.ms:.2f}x SDPA" if sdpa and w.ms and w.variant != "sdpa" else ""
    return f"{w.label} {w.ms:.4f} ms{ratio}"


def _show(outcome: Any) -> None:
    from rich.markup import escape
    from rich.table import Table

    run = outcome.run
    table = Table(title=f"sagebuild tune — {run.device_name} ({run.arch})", title_justify="left")
    for col in ("class", "shipped ms", "winner", "ms", "SDPA ms", "vs SDPA", "runner-up", "failed"):
        left = col in ("class", "winner", "runner-up")
        table.add_column(col, justify="left" if left else "right", no_wrap=col == "class")
    for r in run.results:
        w, s, sdpa = r.winner, r.shipped, r.sdpa
        ms = lambda m: f"{m.ms:.4f}" if m and m.ms else "—"  # noqa: E731
        ratio = f"{sdpa.ms / w.ms:.2f}x" if w and w.ms and sdpa and sdpa.ms else "—"
        failed = sum(p.status == "failed" for p in r.paths)
        label = r.cls.key + (f" ({r.cls.label})" if r.cls.label else "")
        cells = (
            label,
            ms(s),
            w.label if w else "none",
            ms(w),
            ms(sdpa),
            ratio,
            r.runner_up.label if r.runner_up else "—",
            str(failed),
        )
        table.add_row(*(escape(c) for c in cells))
    out.print(table)
    for c, why in run.skipped:
        out.print(f"[yellow]not tuned[/] {escape(c.key)}: {escape(why)}", highlight=False)
    if outcome.note:
        out.print(escape(outcome.note), highlight=False)
    out.print(
        f"record: {escape(str(outcome.path))} ({len(run.results)} classes in {run.seconds:.0f} s, budget "
        f"{run.budget_s:.0f} s); sageattn replays it from the next call",
        highlight=False,
    )


def tune(
    preset: Annotated[Optional[str], typer.Option("--preset", help=_PRESET)] = None,
    shapes: Annotated[Optional[str], typer.Option("--shapes", help=_SHAPES)] = None,
    from_record: Annotated[Optional[Path], typer.Option("--from-record", help=_FROM)] = None,
    dtype: Annotated[
        str, typer.Option("--dtype", help="The dtype of --shapes: float16 or bfloat16.")
    ] = "float16",
    budget: Annotated[Optional[float], typer.Option("--budget", help=_BUDGET)] = None,
    variants: Annotated[Optional[str], typer.Option("--variants", help=_VARIANTS)] = None,
    export: Annotated[Optional[Path], typer.Option("--export", help=_EXPORT)] = None,
    profile: ProfileOpt = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Tune sageattn for this GPU: time candidate launch configs of each P·V variant beside SDPA per
    shape class and keep the fastest accurate path in the tuning record (Ctrl-C keeps finished classes)."""
    from sagebuild.tuning import session, share

    if export is not None and preset is None and shapes is None and from_record is None:
        return _export_only(export, json_out)
    workloads = _classes(preset, shapes, from_record, dtype)
    only = tuple(v for v in (variants or "").replace(" ", "").split(",") if v)
    bad = [v for v in only if v not in ("fp16", "fp8", "fp8acc")]
    if bad:
        raise SagebuildError(
            f"--variants {','.join(bad)}: unknown", fix="pass fp16, fp8 or fp8acc, comma-separated"
        )
    if budget is not None and budget <= 0:
        raise SagebuildError(f"--budget {budget:g}: must be positive seconds", fix="e.g. --budget 60")
    device = _device()
    prof = _profile(profile, device)
    seconds = (
        budget
        if budget is not None
        else session.default_budget(preset or (None if shapes or from_record else "mission"), len(workloads))
    )
    with _progress(len(workloads), json_out) as (say, advance):
        outcome = session.tune(
            workloads,
            device=device,
            budget_s=seconds,
            bounds=session.bounds_of(prof),
            variants=only,
            progress=say,
            on_class=advance,
        )
    doc = {"command": "tune", "profile": prof.name, **outcome.to_dict()}
    if export is not None and outcome.path.exists():
        doc["export"] = str(share.export(outcome.path, export))
    if outcome.run.interrupted:
        console.print(
            f"[yellow]interrupted[/]: kept {len(outcome.run.results)} finished classes in {outcome.path}",
            highlight=False,
        )
    respond(json_out, doc, lambda: _show(outcome), Exit.INTERRUPTED if outcome.run.interrupted else Exit.OK)


def _export_only(dest: Path, json_out: bool) -> None:
    """``--export FILE`` alone: share the record already tuned on this machine."""
    import torch

    from sagebuild.tuning import share

    arch = None
    if torch.cuda.is_available():
        from sagebuild.attention import dispatch

        arch = dispatch.device_arch(torch.cuda.current_device())
    source = share.current_record(arch)
    path = share.export(source, dest)
    said = f"wrote {path} from {source}: attach it to an issue (docs/kernels.md says where)"
    respond(
        json_out,
        {"command": "tune", "record": str(source), "export": str(path)},
        lambda: out.print(said, markup=False),
    )


def _profile(spec: str, device: Any) -> Any:
    """The profile whose accuracy bounds a candidate must meet: ``auto`` matches the GPU being
    tuned (no machine probe: its seconds would come out of the budget)."""
    from sagebuild import profiles
    from sagebuild.attention import dispatch

    if spec in ("", "auto"):
        return profiles.match([dispatch.device_arch(device)])[0]
    return resolve_profile(spec)[0]


def register(app: typer.Typer) -> None:
    app.command("tune")(handle_errors(tune))
