"""``sagebuild doctor``: probe the machine, check it against a profile, print the verdict and fixes."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer

from sagebuild.cli.common import (
    JsonOpt,
    ProfileOpt,
    PythonOpt,
    RootOpt,
    console,
    emit_json,
    exit_with,
    handle_errors,
)
from sagebuild.errors import Exit, SagebuildError

_STYLE = {
    "ok": "[green]ok[/]",
    "warn": "[yellow]warn[/]",
    "fail": "[bold red]FAIL[/]",
    "skip": "[dim]skip[/]",
}


def _check_python(python: Optional[str]) -> None:
    if python is None:
        return
    p = Path(python)
    if not p.exists():
        raise SagebuildError(
            f"--python {python}: no such file",
            fix="pass the interpreter of the environment to check, e.g. --python .venv/bin/python",
        )
    if p.is_dir() or not os.access(p, os.X_OK):
        raise SagebuildError(
            f"--python {python}: not an executable file",
            fix="pass the interpreter itself, e.g. --python .venv/bin/python",
        )


def diagnose(
    profile_spec: str = "auto", root: Path = Path("/"), python: Optional[str] = None, timeout: float = 60.0
) -> dict[str, Any]:
    """Probe + checks as one JSON-able document (what ``doctor --json`` prints, minus the schema version)."""
    from sagebuild import checks, probe, profiles

    if not root.is_dir():
        raise SagebuildError(
            f"--root {root}: not a directory", fix="pass a directory holding a system image, or omit --root"
        )
    _check_python(python)
    facts = probe.collect(root=root, python=python, timeout=timeout)
    profile, why = profiles.resolve(profile_spec, facts.gpu_archs())
    results = checks.run_checks(facts, profile)
    return {
        "command": "doctor",
        "profile": {"name": profile.name, "source": profile.source, "why": why},
        "verdict": checks.overall(results),
        "summary": checks.verdict(facts, profile, why, results),
        "counts": {s: sum(1 for c in results if c.status == s) for s in checks.STATUSES},
        "checks": [c.to_dict() for c in results],
        "facts": facts.to_dict(),
    }


def render(doc: dict[str, Any]) -> None:
    """The human report on the stderr console: facts line, a table of checks, the verdict."""
    from rich.markup import escape
    from rich.table import Table

    f = doc["facts"]
    t = f["torch"]
    wsl = {"none": "", "1": " (WSL1)", "2": " (WSL2)"}[f["system"]["wsl"]]
    console.print(
        f"[bold]system[/] {f['system']['distro'] or f['system']['os']}{wsl}, kernel "
        f"{f['system']['kernel']}, {f['system']['cpu_count']} cores, {f['system']['mem_total_gb']} GB RAM",
        highlight=False,
    )
    console.print(
        f"[bold]python[/] {f['python']['version']} at {f['python']['executable']}; [bold]torch[/] "
        f"{t['version'] or '(not importable)'} ({t['build'] or '-'}); [bold]GPU archs[/] "
        f"{', '.join(f['gpu_archs']) or 'none'}",
        highlight=False,
    )
    if f.get("driver"):
        console.print(f"[bold]driver[/] {f['driver']}", highlight=False)
    p = doc["profile"]
    console.print(f"[bold]profile[/] {p['name']} — {p['why']}", highlight=False)
    table = Table(show_lines=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("detail / fix")
    for c in doc["checks"]:
        cell = escape(c["detail"]) + (f"\n[bold]fix:[/] {escape(c['fix'])}" if c["fix"] else "")
        table.add_row(_STYLE[c["status"]], c["id"], cell)
    console.print(table)
    colour = {"ok": "green", "warn": "yellow", "fail": "red"}[doc["verdict"]]
    console.print(f"[bold {colour}]{doc['verdict'].upper()}[/] {doc['summary']}", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    @handle_errors
    def doctor(
        profile: ProfileOpt = "auto",
        root: RootOpt = Path("/"),
        python: PythonOpt = None,
        json: JsonOpt = False,
        timeout: float = typer.Option(60.0, "--timeout", help="Seconds to wait for the torch probe."),
    ) -> None:
        """Probe this machine (devices, drivers, torch, Triton, compilers) and check it against a profile.

        Every failing check comes with the exact fix. Exit code 10 when any check fails.
        """
        if json:
            doc = diagnose(profile, root, python, timeout)
            emit_json(doc)
        else:
            with console.status("probing (torch is imported in a subprocess)…"):
                doc = diagnose(profile, root, python, timeout)
            render(doc)
        exit_with(Exit.DOCTOR_FAILED if doc["verdict"] == "fail" else Exit.OK)
