"""``sagebuild profiles``: list the bundled profiles (marking this machine's), show one."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from sagebuild.cli.common import JsonOpt, RootOpt, emit_json, handle_errors, out, respond


def _match_here(root: Path) -> tuple[str, str, list[str]]:
    """(matching profile name, why, detected archs) from the device facts alone (no torch import)."""
    from sagebuild import probe, profiles

    found = probe.collect(root=root, probe_torch=False).gpu_archs()
    profile, why = profiles.match(found)
    return profile.name, why, found


def show_yaml(profile: Any) -> str:
    """A profile as YAML that ``load_file`` reads back to the same profile (a start for your own)."""
    import yaml

    d = profile.to_dict()
    d.pop("source", None)
    return yaml.safe_dump(d, sort_keys=False, allow_unicode=True)


def register(app: typer.Typer) -> None:
    sub = typer.Typer(help="List the bundled profiles (the one matching this machine is marked) or show one.")

    @sub.callback(invoke_without_command=True)
    @handle_errors
    def profiles_list(
        ctx: typer.Context,
        json: JsonOpt = False,
        root: RootOpt = Path("/"),
    ) -> None:
        """List the bundled profiles and mark the one matching this machine's GPU (or cpu)."""
        if ctx.invoked_subcommand is not None:
            return
        from sagebuild import profiles

        match, why, found = _match_here(root)
        rows = [
            {
                "name": p.name,
                "vendor": p.vendor,
                "archs": list(p.archs),
                "torch": p.versions.torch,
                "description": p.description,
                "torch_install": p.torch_install,
                "matches": p.name == match,
            }
            for p in profiles.load_all()
        ]
        doc = {"command": "profiles", "match": match, "why": why, "detected_archs": found, "profiles": rows}
        if json:
            emit_json(doc)
            return
        from rich.table import Table

        table = Table()
        for col in ("", "name", "vendor", "archs", "torch", "description"):
            table.add_column(col, no_wrap=col in ("", "name"))
        for r in doc["profiles"]:
            table.add_row(
                "[bold green]*[/]" if r["matches"] else "",
                r["name"],
                r["vendor"],
                ", ".join(r["archs"]) or "-",
                r["torch"] or "any",
                r["description"],
            )
        out.print(table)
        out.print(f"[bold]*[/] {doc['match']}: {doc['why']}", highlight=False)
        out.print("show one: sagebuild profiles show NAME", highlight=False)

    @sub.command("show")
    @handle_errors
    def profiles_show(
        name: Annotated[str, typer.Argument(help="A bundled profile name or a path to a YAML file.")],
        json: JsonOpt = False,
    ) -> None:
        """Print one profile (bundled name or YAML path); as YAML on stdout, or JSON with --json."""
        from sagebuild import profiles

        if name == "auto":
            name = _match_here(Path("/"))[0]
        profile, _ = profiles.resolve(name)
        doc = {"command": "profiles show", "profile": profile.to_dict()}
        respond(
            json, doc, lambda: sys.stdout.write(f"# {profile.name} ({profile.source})\n{show_yaml(profile)}")
        )

    app.add_typer(sub, name="profiles")
