"""Checks on the target interpreter: its version, that it is a Linux one, and `python3` on PATH."""

from __future__ import annotations

from sagebuild.checks.helpers import range_verdict
from sagebuild.checks.registry import Verdict, check, fail, ok, skip, warn
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


@check("python-version", "Python version")
def check_python_version(facts: Facts, profile: Profile) -> Verdict:
    v = facts.python.version
    if v is None:
        return fail(
            f"could not run the interpreter {facts.python.executable} ({facts.torch.error})",
            "pass an existing Linux interpreter with --python, e.g. --python .venv/bin/python",
        )
    spec = profile.versions.python
    fix = (
        f"create a venv with a Python in '{spec}' (3.10 or 3.11 are safest): "
        "python3.11 -m venv .venv && . .venv/bin/activate"
    )
    return range_verdict("Python", v, spec, profile, fix)


@check("python-linux", "Interpreter is a Linux one")
def check_python_linux(facts: Facts, profile: Profile) -> Verdict:
    py = facts.python
    if py.under_mnt:
        linux = {"2": "WSL2", "1": "WSL1"}.get(facts.system.wsl, "native Linux")
        return fail(
            f"{py.executable} is a Windows interpreter (under /mnt/ or a drive path, platform "
            f"{py.platform or 'unknown'}): it cannot use the GPU from {linux}, and its "
            "torch is not the one you installed in Linux",
            "create and use a venv inside the Linux file system: python3 -m venv ~/.venvs/sage && "
            f". ~/.venvs/sage/bin/activate && {profile.torch_install}",
        )
    return ok(f"{py.executable} (platform {py.platform or 'unknown'})")


@check("path-python", "python3 on PATH")
def check_path_python(facts: Facts, profile: Profile) -> Verdict:
    found = facts.python.path_python
    if found is None:
        return skip("no python3 or python on PATH")
    if found.startswith("/mnt/"):
        return warn(
            f"`python3` on PATH resolves to {found}, a Windows interpreter: pip and scripts run "
            "with it will not see your Linux torch",
            "put Linux first: export PATH=/usr/bin:$PATH (or set appendWindowsPath=false under "
            "[interop] in /etc/wsl.conf, then `wsl --shutdown` in PowerShell)",
        )
    return ok(f"`python3` on PATH is {found}")
