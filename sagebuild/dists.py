"""The distributions installed in an environment, this interpreter's or another one's (``--python``,
read in a subprocess): one home for the lockfile and the report's environment backup."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from packaging.utils import canonicalize_name

from sagebuild.errors import Exit, SagebuildError

_TIMEOUT_S = 120.0
canonical_name = canonicalize_name  # PEP 503: ``Foo_Bar.baz`` → ``foo-bar-baz``

# Defines collect(); runs in this interpreter, or in the target one (Python >= 3.9, stdlib only).
_COLLECT = r"""
import json, re, sys
from importlib import metadata

def collect():
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name")
        if not name:
            continue
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in found:
            continue
        entry = {"version": dist.version}
        try:
            direct = dist.read_text("direct_url.json")
        except OSError:
            direct = None
        if direct:
            try:
                info = json.loads(direct)
            except ValueError:
                info = {}
            if info.get("dir_info", {}).get("editable"):
                entry["source"] = "editable"
            elif "vcs_info" in info or "archive_info" in info or "dir_info" in info:
                entry["source"] = "url"
                entry["url"] = info.get("url", "")
        found[key] = entry
    return dict(sorted(found.items()))
"""
_SCRIPT = _COLLECT + "\njson.dump(collect(), sys.stdout)\n"


def environment_of(python: str) -> str:
    """The environment an interpreter's path runs in: a venv's folder (``pyvenv.cfg`` beside its
    ``bin/``), else the installation the real binary belongs to. Two venvs made from one Python have
    the same binary (their ``python`` links to it) and different environments."""
    exe = Path(python).absolute()
    for folder in (exe.parent.parent, exe.parent):  # venv/bin/python; venv/python.exe on Windows
        if (folder / "pyvenv.cfg").is_file():
            return os.path.realpath(folder)
    return os.path.realpath(Path(os.path.realpath(exe)).parent.parent)


def is_this_interpreter(python: Optional[str]) -> bool:
    """True when ``python`` is None or names the running interpreter in the running environment."""
    if not python:
        return True
    try:
        same_binary = os.path.samefile(python, sys.executable)
    except OSError:
        return False
    return same_binary and environment_of(python) == os.path.realpath(sys.prefix)


def run_json(python: str, script: str, *args: str, what: str, timeout: float = _TIMEOUT_S) -> Any:
    """Run a standard-library ``script`` in the interpreter ``python`` and parse the JSON document it
    prints; a clear error (exit 3) when the interpreter cannot run it."""
    fix = "pass --python the path of a working Python interpreter (python -c 'import sys' must run)"
    try:
        proc = subprocess.run(
            [python, "-c", script, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if proc.returncode == 0:
            return json.loads(proc.stdout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SagebuildError(f"cannot {what} of {python}: {e}", fix=fix, code=Exit.ENVIRONMENT) from None
    except ValueError:
        pass
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1][:300]
    raise SagebuildError(
        f"cannot {what} of {python} (exit {proc.returncode}): {last}", fix=fix, code=Exit.ENVIRONMENT
    )


def installed_distributions(python: Optional[str] = None) -> dict[str, Any]:
    """Every distribution visible to ``python`` (default: this one; first on ``sys.path`` wins) by name:
    its version and, when not from an index, how it was installed (editable / url)."""
    if python and not is_this_interpreter(python):
        return run_json(python, _SCRIPT, what="list the distributions")
    ns: dict[str, Any] = {}
    exec(compile(_COLLECT, "<sagebuild.dists>", "exec"), ns)  # noqa: S102 - our own constant
    return ns["collect"]()
