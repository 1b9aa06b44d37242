"""``sagebuild lock``: write the frozen lockfile, or ``--check`` the environment against one (exit 50)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape

from sagebuild.cli.common import JsonOpt, handle_errors, path_option, respond
from sagebuild.cli.common import out as out_
from sagebuild.errors import Exit
from sagebuild.lock import DEFAULT_NAME

_OUT_HELP = "Where to write the lockfile (a pip requirements export is written beside it)."
_CHECK_HELP = "Compare the environment with this lockfile instead of writing one; exit 50 on drift."
_PROFILE_HELP = "Bundled profile name, YAML path or 'auto' (with --check the default is the lock's profile)."


def lock(
    out_text: Annotated[str, typer.Option("--out", "-o", help=_OUT_HELP)] = DEFAULT_NAME,
    check_text: Annotated[Optional[str], typer.Option("--check", help=_CHECK_HELP)] = None,
    profile: Annotated[Optional[str], typer.Option("--profile", "-p", help=_PROFILE_HELP)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Freeze this environment (versions, torch build, GPU archs, artefact hashes) or check it for drift."""
    from sagebuild import lock as lk
    from sagebuild import probe, profiles

    out, check = path_option(out_text, "--out"), path_option(check_text, "--check")
    locked = lk.load(check) if check is not None else None  # a bad file fails fast, before probing
    facts = probe.collect()
    archs = facts.gpu_archs()
    if locked is not None:
        spec = profile or (locked.get("profile") or {}).get("name") or "auto"
        try:
            prof, _ = profiles.resolve(spec, archs)
        except Exception:  # noqa: BLE001 - a locked custom profile that is gone is itself drift
            prof = None
        drifts = lk.diff(locked, lk.current(prof, facts))
        where = escape(str(check))

        def show_drift() -> None:
            if not drifts:
                out_.print(f"[green]no drift[/]: the environment matches {where}", highlight=False)
                return
            out_.print(f"[bold red]{len(drifts)} drift(s)[/] from {where}:", highlight=False)
            for d in drifts:
                out_.print(f"  - {d}", highlight=False, markup=False)

        doc = {
            "command": "lock",
            "check": str(check),
            "drift": [d.to_dict() for d in drifts],
            "ok": not drifts,
        }
        return respond(json_out, doc, show_drift, Exit.LOCK_DRIFT if drifts else Exit.OK)
    prof, why = profiles.resolve(profile or "auto", archs)
    lock_doc = lk.current(prof, facts)
    path, req = lk.write(lock_doc, out)
    n = len(lock_doc["distributions"])
    doc = {
        "command": "lock",
        "lockfile": str(path),
        "requirements": str(req),
        "profile": prof.name,
        "distributions": n,
        "tuning": lock_doc["tuning"],
    }
    said = (
        f"wrote {path} ({n} distributions, profile {prof.name}: {why})"
        f"\nwrote {req} (pip install -r {req} reinstalls the same versions)"
    )
    if not lock_doc["tuning"]:
        said += "\ntuning record: none (no GPU detected)"
    for arch, sha in lock_doc["tuning"].items():
        said += f"\ntuning record {arch}: " + (
            f"sha256 {sha}" if sha else "none yet (`sagebuild tune` writes one)"
        )
    respond(json_out, doc, lambda: out_.print(said, markup=False, highlight=False))


def register(app: typer.Typer) -> None:
    app.command("lock")(handle_errors(lock))
