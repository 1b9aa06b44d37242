"""``sagebuild compile``: the build plan for this machine and its result, as tables on stdout or as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from sagebuild.cli.common import (
    ArchOpt,
    JobsOpt,
    JsonOpt,
    ProfileOpt,
    RootOpt,
    console,
    handle_errors,
    out,
    path_option,
    respond,
)
from sagebuild.errors import Exit

if TYPE_CHECKING:
    from sagebuild.build.plan import BuildPlan
    from sagebuild.build.result import CompileResult

_HELP_SOURCE = "Build this external torch-extension tree (setup.py build_ext --inplace) instead."
_HELP_DRY = "Print the plan (env vars, jobs, archs, commands, output paths) and build nothing."
_HELP_LOG = "Write the full build log to this file (default: under the extension cache)."


def render_plan(plan: BuildPlan, why: str, dry_run: bool) -> None:
    """The plan as a table on stdout; its warnings and blockers on stderr."""
    from rich.markup import escape
    from rich.table import Table

    title = "sagebuild compile — plan" + (" (dry run)" if dry_run else "")
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("profile", escape(f"{plan.profile} ({why})"))
    mode = (
        "external tree: " + escape(plan.build_dir)
        if plan.mode == "source"
        else "bundled extension" + (" (CPU + GPU)" if plan.with_gpu else " (CPU only)")
    )
    table.add_row("mode", mode)
    table.add_row("jobs", escape(f"MAX_JOBS={plan.jobs} — {plan.jobs_reason}"))
    archs = ", ".join(plan.archs) or "none"
    table.add_row("archs", escape(f"{archs} — {plan.arch_reason}"))
    table.add_row("env", escape(" ".join(f"{k}={v}" for k, v in plan.env.items())))
    table.add_row("commands", escape("\n".join(plan.commands())))
    table.add_row("output", escape(plan.output))
    out.print(table)
    for w in plan.warnings:
        console.print(f"[yellow]warning:[/] {escape(w)}", highlight=False)
    for p in plan.problems:
        console.print(f"[bold red]problem:[/] {escape(p)}", highlight=False)


def render_result(res: CompileResult) -> None:
    """What was built on stdout; a failure, its key log lines and likely causes on stderr."""
    from rich.markup import escape

    if res.ok:
        extra = " (after an OOM retry with half the jobs)" if res.retried_with_half_jobs else ""
        out.print(
            f"[green]built[/] {escape(str(res.artefact))} in {res.seconds:.0f} s "
            f"with MAX_JOBS={res.jobs}{extra}",
            highlight=False,
        )
        out.print(f"sha256 {res.sha256}", highlight=False)
        for a in res.aot:
            out.print(
                escape(f"  triton {a['variant']}@{a['arch']}: ok {a.get('instruction') or ''}"),
                highlight=False,
            )
        out.print(f"log: {escape(res.log_path)}", highlight=False)
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
        source_text: Annotated[Optional[str], typer.Option("--source", help=_HELP_SOURCE)] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help=_HELP_DRY)] = False,
        root: RootOpt = Path("/"),
        json_out: JsonOpt = False,
        log_text: Annotated[Optional[str], typer.Option("--log", help=_HELP_LOG)] = None,
    ) -> None:
        """Build the fused quantization extension for this machine's GPUs with a safe MAX_JOBS,
        verify it in a fresh interpreter, and compile the profile's Triton kernels ahead of time."""
        from sagebuild.build import plan as build_plan
        from sagebuild.build import run

        source, log = path_option(source_text, "--source"), path_option(log_text, "--log")
        plan, why = build_plan.plan_for_machine(profile, root, jobs, arch, source)
        doc = {"command": "compile", "dry_run": dry_run, "profile_why": why, "plan": plan.to_dict()}
        if not json_out:
            render_plan(plan, why, dry_run)
        if dry_run:
            return respond(json_out, doc, lambda: None)
        res = run.compile(plan, log, progress=not json_out)
        doc["result"] = res.to_dict()
        respond(json_out, doc, lambda: render_result(res), 0 if res.ok else Exit.COMPILE_FAILED)
