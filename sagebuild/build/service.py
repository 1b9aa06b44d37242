"""Compiling as a service (``sagebuild compile``, ``accept``'s compile step): plan the build for a
machine and profile, run it, and describe the outcome. Nothing here prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sagebuild import probe, profiles
from sagebuild.build import run
from sagebuild.build.plan import BuildPlan, make_plan
from sagebuild.build.result import CompileResult
from sagebuild.explain import explain_for_report, read_log_file


@dataclass
class CompileOutcome:
    """A plan and, once run, its result."""

    plan: BuildPlan
    result: CompileResult

    @property
    def ok(self) -> bool:
        return self.result.ok

    def summary(self) -> str:
        """One line: what was built, or what failed."""
        res = self.result
        if res.ok:
            name = Path(res.artefact or "").name
            return f"built {name} (MAX_JOBS={res.jobs}, sha256 {str(res.sha256)[:12]}…)"
        return str(res.error)

    def failure_text(self) -> str:
        """The error sentence followed by the log's key lines."""
        return "\n".join([str(self.result.error), *self.result.key_lines])

    def explanation(self) -> list[dict[str, Any]]:
        """What ``explain`` made of the failure; the log's tail when the build gave nothing to match."""
        found = list(self.result.explanation)
        log = Path(self.result.log_path)
        if not found and log.is_file():
            found = explain_for_report(read_log_file(log).text)
        return found

    def to_dict(self) -> dict[str, Any]:
        return {"plan": self.plan.to_dict(), "result": self.result.to_dict()}


def plan_for_machine(
    profile_spec: str,
    root: Path = Path("/"),
    jobs: Optional[int] = None,
    arch: Optional[str] = None,
    source: Optional[Path] = None,
) -> tuple[BuildPlan, str]:
    """Probe the machine (or the image under ``root``), pick the profile, make the plan; returns
    the plan and why the profile was chosen."""
    facts = probe.collect(root=root)
    profile, why = profiles.resolve(profile_spec, facts.gpu_archs())
    return make_plan(profile, facts, jobs=jobs, arch=arch, source=source), why


def run_build(plan: BuildPlan, log_path: Optional[Path] = None, progress: bool = True) -> CompileOutcome:
    """Run a plan; never raises for a failed build (the outcome says what failed and why)."""
    return CompileOutcome(plan, run.compile(plan, log_path, progress=progress))
