"""``sagebuild accept``: doctor → compile → verify → bench into one output directory; the CI gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from sagebuild.cli import common
from sagebuild.cli.common import (
    STATUS_STYLE,
    ArchOpt,
    JobsOpt,
    JsonOpt,
    ProfileOpt,
    PythonOpt,
    RootOpt,
    console,
    emit_json,
    exit_with,
    handle_errors,
    out,
    parse_shape,
    path_option,
    with_bench_options,
)
from sagebuild.errors import SagebuildError

_OUT = (
    "Output directory: report.json/.md/.html, junit.xml, build.log, sagebuild.lock, environment-backup.txt."
)
_KEEP = "Run every step even after one fails (the exit code is still the first failure's)."


def register(app: typer.Typer) -> None:
    @app.command("accept")
    @handle_errors
    @with_bench_options
    def accept_cmd(
        profile: ProfileOpt = "auto",
        out_dir: Annotated[str, typer.Option("--out", "-o", help=_OUT)] = "sagebuild-out",
        keep_going: Annotated[bool, typer.Option("--keep-going", help=_KEEP)] = False,
        jobs: JobsOpt = None,
        arch: ArchOpt = None,
        verify_shape: Annotated[
            str, typer.Option("--verify-shape", help="B,H,N,D of the smoke test.")
        ] = "1,8,512,64",
        bench: Any = None,  # the shared bench options: with_bench_options
        root: RootOpt = Path("/"),
        python: PythonOpt = None,
        compat: Annotated[
            bool,
            typer.Option("--compat", help="After a passing run, install `sageattention` (compat install)."),
        ] = False,
        tune: Annotated[
            bool,
            typer.Option(
                "--tune",
                help="Before the bench, run `sagebuild tune` on the bench's shapes and the mission preset; "
                "the report compares the shipped table with the tuned choice per class.",
            ),
        ] = False,
        tune_budget: Annotated[
            Optional[float],
            typer.Option("--tune-budget", help="Seconds --tune may take, compiles included (default 60)."),
        ] = None,
        json_out: JsonOpt = False,
    ) -> None:
        """The four-step acceptance: doctor, compile, verify, bench — ending in a report and a
        lockfile. Stops at the first failing step (exit 10/20/30/40) unless --keep-going. Prints one
        line per step as it goes (stderr); the run is swapped into --out whole when it ends."""
        from rich.markup import escape

        from sagebuild.accept import AcceptOptions, run_accept
        from sagebuild.console import interactive, steps
        from sagebuild.errors import Exit

        dims = parse_shape(verify_shape, "--verify-shape")
        if tune_budget is not None and tune_budget <= 0:
            raise SagebuildError(
                f"--tune-budget {tune_budget:g}: must be positive seconds", fix="e.g. --tune-budget 60"
            )
        opts = AcceptOptions(
            profile=profile,
            out=path_option(out_dir, "--out"),
            keep_going=keep_going,
            jobs=jobs,
            arch=arch,
            root=root,
            python=python,
            verify_shape=dims,
            bench=bench,
            progress=interactive(json_out),
            compat=compat,
            tune=tune or tune_budget is not None,
            tune_budget=tune_budget,
        )
        with steps("accept", json_out) as say:
            res = run_accept(opts, say)
        for problem in res.problems:
            console.print(f"[bold red]error:[/] {escape(problem)}", highlight=False)
        compat_doc = res.compat
        if compat_doc and "error" in compat_doc:
            console.print(
                f"[bold red]compat:[/] {escape(compat_doc['error'])} (fix: {escape(compat_doc['fix'] or '')})"
            )
        if json_out:
            emit_json({**res.summary(), **({"compat": compat_doc} if compat else {})})
        else:
            for s in res.report["steps"]:
                out.print(
                    f"{STATUS_STYLE[s['status']]:>22} {s['name']:<8} {escape(s['summary'])}", highlight=False
                )
                for m in s["explanation"][:2]:
                    if m.get("cause") and m.get("fix"):
                        out.print(
                            f"         likely cause: {escape(m['cause'])}\n         fix: {escape(m['fix'])}",
                            highlight=False,
                        )
            verdict = (
                "[green]accepted[/]"
                if res.exit_code == 0
                else f"[bold red]not accepted (exit {res.exit_code})[/]"
            )
            out.print(f"{verdict} — report: {escape(str(res.paths['html']))}", highlight=False)
            if compat_doc and "installed" in compat_doc:
                where = compat_doc["site_packages"]
                out.print(f"sageattention {compat_doc['installed']} installed into {escape(where)}")
        if common.DEBUG:  # the tracebacks the report keeps, for a bug report
            for s in res.report["steps"]:
                if s["exit_code"] == int(Exit.INTERNAL) and s.get("error"):
                    console.print(escape(s["error"]), highlight=False)
        if res.exit_code == int(Exit.INTERNAL):
            console.print(
                "[bold red]an internal error (a sagebuild bug) stopped a step:[/] please report it with "
                f"{escape(str(res.paths['json']))} (`sagebuild --debug accept` adds the traceback)",
                highlight=False,
            )
        exit_with(res.compat_exit or res.exit_code)
