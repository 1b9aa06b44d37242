"""The doctor as a service: probe a machine and check it against a profile; nothing here prints.

``sagebuild doctor`` prints a :class:`DoctorResult`; ``sagebuild accept`` runs the same :func:`run_doctor`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sagebuild import checks, probe, profiles
from sagebuild.checks import Check
from sagebuild.errors import SagebuildError
from sagebuild.explain import explain_for_report, fix_entry
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


@dataclass
class DoctorResult:
    """The checks of one machine against one profile, with the verdict and its sentence."""

    facts: Facts
    profile: Profile
    why: str  # how the profile was chosen ("auto: ...", "named on the command line")
    checks: list[Check]

    @property
    def ok(self) -> bool:  # warnings pass
        return checks.overall(self.checks) != "fail"

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def counts_line(self) -> str:
        """``17 ok, 1 warn, 5 skip`` (statuses with no check left out)."""
        return ", ".join(f"{n} {s}" for s, n in checks.counts(self.checks).items() if n) or "no checks"

    def failure_text(self) -> str:
        """Each failed check on one line: title, what was seen, and its fix."""
        return "\n".join(
            f"{c.title}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "") for c in self.failures
        )

    def explanation(self) -> list[dict[str, Any]]:
        """The failed checks' fixes as report explanations, then what ``explain`` finds in them."""
        fixes = [fix_entry(f"doctor.{c.id}", c.title, c.detail, c.fix) for c in self.failures if c.fix]
        return fixes + explain_for_report(self.failure_text()) if self.failures else fixes

    def to_dict(self) -> dict[str, Any]:
        """What ``doctor --json`` prints (without the schema version)."""
        return {
            "command": "doctor",
            "profile": {"name": self.profile.name, "source": self.profile.source, "why": self.why},
            "verdict": checks.overall(self.checks),
            # the closing sentence: where the machine stands, what to do next
            "summary": checks.verdict(self.facts, self.profile, self.why, self.checks),
            "counts": checks.counts(self.checks),
            "checks": [c.to_dict() for c in self.checks],
            "facts": self.facts.to_dict(),
        }


def locked_torch(cwd: Path) -> Optional[dict]:
    """The torch record of ``cwd``'s ``sagebuild.lock`` (what `sagebuild lock` froze) with its path;
    the reason when the file is not a readable lock; None without one."""
    from sagebuild import lock

    path = cwd / lock.DEFAULT_NAME
    if not path.is_file():
        return None
    try:
        doc = lock.load(path)
    except SagebuildError as err:
        return {"path": str(path), "error": err.message}
    return {"path": str(path), **(doc.get("torch") or {})}


def run_doctor(facts: Facts, profile: Profile, why: str = "named") -> DoctorResult:
    """Every registered check on already probed facts (with the working directory's lock read in
    first, when the facts do not have it: the lock is a service above the probe)."""
    if facts.lock_torch is None and facts.root == "/":
        facts.lock_torch = locked_torch(Path(facts.cwd))
    return DoctorResult(facts, profile, why, checks.run_checks(facts, profile))


def diagnose(
    profile_spec: str = "auto", root: Path = Path("/"), python: Optional[str] = None, timeout: float = 60.0
) -> DoctorResult:
    """Probe the machine (or the image under ``root``), pick the profile, run the checks; an
    interpreter or timeout the probe cannot use is refused before anything runs."""
    if not timeout > 0:  # also refuses NaN
        raise SagebuildError(
            f"--timeout {timeout:g}: the torch probe needs a time limit of more than 0 seconds",
            fix="pass a positive number of seconds, e.g. --timeout 60 (the default)",
        )
    if python is not None:
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
    facts = probe.collect(root=root, python=python, timeout=timeout)
    profile, why = profiles.resolve(profile_spec, facts.gpu_archs())
    return run_doctor(facts, profile, why)
