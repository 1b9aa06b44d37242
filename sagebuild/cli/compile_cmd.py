"""``sagebuild compile``: build the bundled extension (or an external tree) for this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from sagebuild.cli.common import (
    ArchOpt,
    JobsOpt,
    JsonOpt,
    ProfileOpt,
    RootOpt,
    console,
    emit_json,
    exit_with,
    handle_errors,
)
from sagebuild.errors import Exit, SagebuildError

_HELP_SOURCE = "Build this external torch-extension tree (setup.py build_ext --inplace) instead."
_HELP_DRY = "Print the plan (env vars, jobs, archs, commands, output paths) and build nothing."
_HELP_LOG = "Write the full build log to this file (default: under the extension cache)."


def plan_for(profile_spec: str, root: Path, jobs: Optional[int], arch: Optional[str],
             source: Optional[Path]) -> tuple[Any, str, Any]:
    """Probe (the machine or the image under ``root``), pick the profile, make the plan."""
    from sagebuild import probe, profiles
    from sagebuild.build.plan import make_plan

    if not root.is_dir():
        raise SagebuildError(f"--root {root}: not a directory",
                             fix="pass a directory holding a system image, or omit --root")
    if source is not None and not source.is_dir():
        raise SagebuildError(f"--source {source}: not a directory",
                             fix="pass the directory holding the extension's setup.py")
    facts = probe.collect(root=root)
    profile, why = profiles.resolve(profile_spec, facts.gpu_archs())
    return make_plan(profile, facts, jobs=jobs, arch=arch, source=source), why, facts


def render_plan(plan: Any, why: str, dry_run: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="sagebuild compile — plan" + (" (dry run)" if dry_run else ""), show_header=False,
                  title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("profile", escape(f"{plan.profile} ({why})"))
    table.add_row("mode", "external tree: " + escape(plan.build_dir) if plan.mode == "source"
                  else "bundled extension" + (" (CPU + GPU)" if plan.with_gpu else " (CPU only)"))
    table.add_row("jobs", escape(f"MAX_JOBS={plan.jobs} — {plan.jobs_reason}"))
    archs = ", ".join(plan.archs) or "none"
    table.add_row("archs", escape(f"{archs} — {plan.arch_reason}"))
    table.add_row("env", escape(" ".join(f"{k}={v}" for k, v in plan.env.items())))
    table.add_row("commands", escape("\n".join(plan.commands())))
    table.add_row("output", escape(plan.output))
    console.print(table)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    for p in plan.problems:
        console.print(f"[bold red]problem:[/] {escape(p)}", highlight=False)


def render_result(res: Any) -> None:
    from rich.markup import escape

    if res.ok:
        extra = " (after an OOM retry with half the jobs)" if res.retried_with_half_jobs else ""
        console.print(f"[green]built[/] {escape(str(res.artefact))} in {res.seconds:.0f} s "
                      f"with MAX_JOBS={res.jobs}{extra}", highlight=False)
        console.print(f"sha256 {res.sha256}", highlight=False)
        for a in res.aot:
            state = "skipped" if a.get("ok") is None else "ok"
            detail = a.get("instruction") or a.get("skipped") or ""
            line = f"  triton {a['variant']}@{a['arch']}: {state} {detail}"
            console.print(escape(line), highlight=False)
        console.print(f"log: {escape(res.log_path)}", highlight=False)
        return
    console.print(f"[bold red]compile failed:[/] {escape(str(res.error))}", highlight=False)
    if res.retried_with_half_jobs:
        console.print(f"(retried once with MAX_JOBS={res.jobs} after an out-of-memory kill)")
    if res.key_lines:
        console.print("[bold]key lines of the log:[/]")
        for line in res.key_lines:
            console.print(f"  {escape(line)}", highlight=False)
    for m in res.explanation[:3]:
        cause = f"{m.get('title', '')} — {m.get('cause', '')}"
        console.print(f"[bold]likely cause:[/] {escape(cause)}", highlight=False)
        if m.get("fix"):
            console.print(f"[bold]fix:[/] {escape(str(m['fix']))}", highlight=False)
    console.print(f"full log: {escape(res.log_path)}", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command("compile")
    @handle_errors
    def compile_cmd(
        profile: ProfileOpt = "auto",
        jobs: JobsOpt = None,
        arch: ArchOpt = None,
        source: Annotated[Optional[Path], typer.Option("--source", help=_HELP_SOURCE)] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help=_HELP_DRY)] = False,
        root: RootOpt = Path("/"),
        json_out: JsonOpt = False,
        log: Annotated[Optional[Path], typer.Option("--log", help=_HELP_LOG)] = None,
    ) -> None:
        """Build the fused quantization extension for this machine's GPUs with a safe MAX_JOBS,
        verify it in a fresh interpreter, and compile the profile's Triton kernels ahead of time."""
        plan, why, _facts = plan_for(profile, root, jobs, arch, source)
        if not json_out:
            render_plan(plan, why, dry_run)
        if dry_run:
            if json_out:
                emit_json({"command": "compile", "dry_run": True, "profile_why": why, "plan": plan.to_dict()})
            return
        from sagebuild.build.run import compile as run_compile

        res = run_compile(plan, log, progress=not json_out)
        if json_out:
            emit_json({"command": "compile", "dry_run": False, "profile_why": why, "plan": plan.to_dict(),
                       "result": res.to_dict()})
        else:
            render_result(res)
        exit_with(Exit.OK if res.ok else Exit.COMPILE_FAILED)
