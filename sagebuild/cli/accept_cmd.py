"""``sagebuild accept``: doctor → compile → verify → bench into one output directory; the CI gate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sagebuild.cli.common import (
    ArchOpt,
    BatchOpt,
    CausalOpt,
    GateOnOpt,
    HeadDimOpt,
    HeadsOpt,
    JobsOpt,
    JsonOpt,
    MinSpeedupOpt,
    ProfileOpt,
    PythonOpt,
    RepsOpt,
    RootOpt,
    RoundsOpt,
    SeqOpt,
    SustainOpt,
    WarmupOpt,
    console,
    emit_json,
    exit_with,
    handle_errors,
)

_OUT = (
    "Output directory: report.json/.md/.html, junit.xml, build.log, sagebuild.lock, environment-backup.txt."
)
_KEEP = "Run every step even after one fails (the exit code is still the first failure's)."


def register(app: typer.Typer) -> None:
    @app.command("accept")
    @handle_errors
    def accept_cmd(
        profile: ProfileOpt = "auto",
        out: Annotated[Path, typer.Option("--out", "-o", help=_OUT)] = Path("sagebuild-out"),
        keep_going: Annotated[bool, typer.Option("--keep-going", help=_KEEP)] = False,
        jobs: JobsOpt = None,
        arch: ArchOpt = None,
        verify_shape: Annotated[
            str, typer.Option("--verify-shape", help="B,H,N,D of the smoke test.")
        ] = "1,8,512,64",
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
        root: RootOpt = Path("/"),
        python: PythonOpt = None,
        json_out: JsonOpt = False,
    ) -> None:
        """The four-step acceptance: doctor, compile, verify, bench — ending in a report and a
        lockfile. Stops at the first failing step (exit 10/20/30/40) unless --keep-going."""
        from rich.markup import escape

        from sagebuild.accept import AcceptOptions, run_accept
        from sagebuild.bench import parse_int_list
        from sagebuild.cli._progress import interactive, status
        from sagebuild.errors import SagebuildError

        dims = parse_int_list(verify_shape, "verify-shape")
        if len(dims) != 4:
            raise SagebuildError(
                f"--verify-shape {verify_shape}: expected B,H,N,D", fix="e.g. --verify-shape 1,8,512,64"
            )
        overrides = {
            "batch": batch,
            "heads": heads,
            "seq": parse_int_list(seq, "seq") if seq else None,
            "head_dim": head_dim,
            "causal": causal,
            "warmup": warmup,
            "reps": reps,
            "rounds": rounds,
            "sustain_s": sustain,
            "gate_on": gate_on,
            "min_speedup": min_speedup,
        }
        opts = AcceptOptions(
            profile=profile,
            out=out,
            keep_going=keep_going,
            jobs=jobs,
            arch=arch,
            root=root,
            python=python,
            verify_shape=dims,
            bench=overrides,
            progress=interactive(json_out),
        )
        with status("sagebuild accept", json_out) as say:
            res = run_accept(opts, say or (lambda _m: None))
        if json_out:
            emit_json(res.summary())
        else:
            style = {"ok": "[green]ok[/]", "fail": "[bold red]FAIL[/]", "skip": "[dim]skip[/]"}
            for s in res.report["steps"]:
                console.print(
                    f"{style[s['status']]:>22} {s['name']:<8} {escape(s['summary'])}", highlight=False
                )
                for m in s["explanation"][:2]:
                    console.print(
                        f"         likely cause: {escape(m['cause'])}\n         fix: {escape(m['fix'])}",
                        highlight=False,
                    )
            verdict = (
                "[green]accepted[/]"
                if res.exit_code == 0
                else f"[bold red]not accepted (exit {res.exit_code})[/]"
            )
            console.print(f"{verdict} — report: {escape(str(res.paths['html']))}", highlight=False)
        exit_with(res.exit_code)
