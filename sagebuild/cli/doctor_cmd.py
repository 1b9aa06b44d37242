"""``sagebuild doctor``: the doctor service's result as a table on stdout, or as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from sagebuild import console
from sagebuild.cli.common import STATUS_STYLE, JsonOpt, ProfileOpt, PythonOpt, RootOpt, handle_errors, respond
from sagebuild.errors import Exit


def render(doc: dict[str, Any]) -> None:
    """The human report on stdout: facts lines, a table of checks, the verdict."""
    from rich.markup import escape
    from rich.table import Table

    out = console.out
    f = doc["facts"]
    s, py, t = f["system"], f["python"], f["torch"]
    wsl = {"none": "", "1": " (WSL1)", "2": " (WSL2)"}[s["wsl"]]
    out.print(
        f"[bold]system[/] {escape(str(s['distro'] or s['os']))}{wsl}, kernel {escape(str(s['kernel']))}, "
        f"{s['cpu_count']} cores, {s['mem_total_gb']} GB RAM",
        highlight=False,
    )
    out.print(
        f"[bold]python[/] {py['version']} at {escape(str(py['executable']))}; [bold]torch[/] "
        f"{escape(str(t['version'] or '(not importable)'))} ({t['build'] or '-'}); "
        f"[bold]GPU archs[/] {escape(', '.join(f['gpu_archs']) or 'none')}",
        highlight=False,
    )
    if f.get("driver"):
        out.print(f"[bold]driver[/] {escape(f['driver'])}", highlight=False)
    p = doc["profile"]
    out.print(f"[bold]profile[/] {escape(p['name'])} — {escape(p['why'])}", highlight=False)
    table = Table(show_lines=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("detail / fix")
    for c in doc["checks"]:
        cell = escape(c["detail"]) + (f"\n[bold]fix:[/] {escape(c['fix'])}" if c["fix"] else "")
        table.add_row(STATUS_STYLE[c["status"]], c["id"], cell)
    out.print(table)
    colour = {"ok": "green", "warn": "yellow", "fail": "red"}[doc["verdict"]]
    out.print(f"[bold {colour}]{doc['verdict'].upper()}[/] {escape(doc['summary'])}", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def doctor(
        profile: ProfileOpt = "auto",
        root: RootOpt = Path("/"),
        python: PythonOpt = None,
        json: JsonOpt = False,
        timeout: float = typer.Option(
            60.0, "--timeout", help="Seconds to wait for the torch probe (more than 0)."
        ),
    ) -> None:
        """Probe this machine (devices, drivers, torch, Triton, compilers) and check it against a profile.

        Every failing check comes with the exact fix. Exit code 10 when any check fails.
        """
        from sagebuild.doctor import diagnose

        with console.status("probing (torch is imported in a subprocess)…", json_out=json):
            result = diagnose(profile, root, python, timeout)
        doc = result.to_dict()
        respond(json, doc, lambda: render(doc), Exit.OK if result.ok else Exit.DOCTOR_FAILED)
