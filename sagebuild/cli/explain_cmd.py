"""``sagebuild explain FILE|-``: name the known failure in a build or run log and print the fix.

Exit 0 whether or not something matched (in ``cmd 2>&1 | sagebuild explain -`` the pipeline's own
status decides; ``--json`` carries ``matched``), 2 when unreadable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from sagebuild.cli.common import JsonOpt, console, emit_json, handle_errors, out


@handle_errors
def explain_command(
    log: Annotated[
        str, typer.Argument(metavar="FILE|-", help="Build or run log to explain; '-' reads stdin.")
    ],
    json_out: JsonOpt = False,
) -> None:
    """Match a build or run log against known failures and print cause and fix."""
    from sagebuild.explain import explain, read_log, read_log_file

    if log == "-":
        name, text = "<stdin>", read_log(sys.stdin.buffer)
    else:
        name, text = log, read_log_file(Path(log))
    matches = explain(text.text)
    if json_out:
        doc = {"log": name, "matched": bool(matches), "matches": [m.to_dict() for m in matches]}
        emit_json({**doc, "read": text.to_dict()})
        return
    if text.note:
        console.print(f"[yellow]note:[/] {escape(name)}: {escape(text.note)}", highlight=False)
    if not matches:
        out.print(f"no known failure matched in {escape(name)}", highlight=False)
        out.print(
            "see docs/troubleshooting.md, or run `sagebuild doctor` to check this machine", highlight=False
        )
        return
    for i, m in enumerate(matches, 1):
        if i > 1:
            out.print()
        out.print(f"[bold red]{i}. {escape(m.title)}[/]  [dim]({m.id})[/]", highlight=False)
        out.print(f"   [dim]line {m.line_number}:[/] {escape(m.matched_line)}", highlight=False)
        out.print(f"   [bold]cause:[/] {escape(m.cause)}", highlight=False)
        out.print(f"   [bold green]fix:[/] {escape(m.fix)}", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("explain")(explain_command)
