"""``sagebuild compat install|status|remove``: the ``sageattention`` distribution on our kernels."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from sagebuild.cli.common import JsonOpt, console, emit_json, handle_errors, out, respond

_PYTHON_HELP = "Act on this interpreter's site-packages (default: the one running sagebuild)."
_FORCE_HELP = "Replace an upstream install (backed up first)."
_RESTORE_HELP = "Then put back the upstream install backed up by --force."
TargetOpt = Annotated[Optional[str], typer.Option("--python", help=_PYTHON_HELP)]


def _say(line: str) -> None:
    """A line of the answer (stdout: ``sagebuild compat status > where.txt`` keeps it)."""
    out.print(escape(line), highlight=False)


def _print_status(st: dict[str, Any]) -> None:
    from sagebuild.compat.target import describe

    _say(f"python:        {st['python']} ({st['python_version']})")
    _say(f"site-packages: {st['site_packages']}")
    _say(f"imports:       {describe(st)}")
    for d in st["distributions"]:
        whose = "sagebuild" if d["ours"] else f"upstream (installer {d['installer'] or 'unknown'})"
        _say(f"distribution:  sageattention {d['version']}, {whose}, {d['dist_info']}")


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        help="Install a `sageattention` distribution that runs sagebuild's kernels (diffusers, ComfyUI, "
        "KJNodes, WanVideoWrapper import it unchanged), show which one Python imports, or remove it.",
        no_args_is_help=True,
    )

    @sub.command("install")
    @handle_errors
    def compat_install(
        python: TargetOpt = None,
        force: Annotated[bool, typer.Option("--force", help=_FORCE_HELP)] = False,
        json: JsonOpt = False,
    ) -> None:
        """Install `sageattention` (version 2.2.0+sagebuild.VER) into the interpreter's site-packages."""
        from sagebuild.compat import installer

        res = installer.install(python, force=force)
        if json:
            emit_json({"command": "compat install", **res})
            return
        for b in res["backups"]:
            _say(f"backed up the upstream install to {b} (`sagebuild compat remove --restore` puts it back)")
        _say(f"installed sageattention {res['installed']} into {res['site_packages']}")
        if res["shadowed"]:
            console.print(
                "[bold yellow]warning:[/] this interpreter still imports another sageattention: "
                + escape(res["status"]["import_origin"] or "?"),
                highlight=False,
            )
        _print_status(res["status"])

    @sub.command("status")
    @handle_errors
    def compat_status(python: TargetOpt = None, json: JsonOpt = False) -> None:
        """Which `sageattention` this interpreter would import, its distribution, version and whose it is."""
        from sagebuild.compat.target import status

        st = status(python)
        respond(json, {"command": "compat status", **st}, lambda: _print_status(st))

    @sub.command("remove")
    @handle_errors
    def compat_remove(
        python: TargetOpt = None,
        restore: Annotated[bool, typer.Option("--restore", help=_RESTORE_HELP)] = False,
        json: JsonOpt = False,
    ) -> None:
        """Remove sagebuild's `sageattention` (as `pip uninstall sageattention` would)."""
        from sagebuild.compat import installer

        res = installer.remove(python, restore=restore)
        if json:
            emit_json({"command": "compat remove", **res})
            return
        site, restored, backup = res["site_packages"], res["restored"], res["backup_available"]
        if res["removed"]:
            _say(f"removed sageattention {', '.join(res['removed'])} from {site}")
        else:
            _say(f"sagebuild's sageattention is not installed in {site}: nothing to remove")
        if restored:
            _say(f"restored upstream sageattention {restored['version']} from {restored['from']}")
        elif backup:
            _say(f"an upstream backup exists ({backup}): `sagebuild compat remove --restore`")
        _print_status(res["status"])

    app.add_typer(sub, name="compat")
