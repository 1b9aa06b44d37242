"""What a compile returns, shared by the bundled build (``run``) and the external tree (``source``):
the result record, a failed result with its key log lines and explanation, the build's environment."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

from sagebuild.build.proc import RunOutcome, key_lines
from sagebuild.explain import explain_for_report

if TYPE_CHECKING:
    from sagebuild.build.plan import BuildPlan


@dataclass
class CompileResult:
    ok: bool
    mode: str
    artefact: Optional[str]  # the verified .so (bundled) or the first new extension file (source)
    sha256: Optional[str]
    seconds: float
    log_path: str
    jobs: int
    retried_with_half_jobs: bool = False
    key_lines: list[str] = field(default_factory=list)
    explanation: list[dict[str, Any]] = field(default_factory=list)
    aot: list[dict[str, Any]] = field(default_factory=list)
    error: Optional[str] = None  # one sentence: what failed
    artefacts: list[dict[str, str]] = field(default_factory=list)  # source mode: every new file + sha256
    build_info: Optional[dict[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def build_env(plan: BuildPlan) -> dict[str, str]:
    """The build subprocess's environment: ours with the plan's variables on top."""
    env = dict(os.environ)
    env.update(plan.env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def failed(
    plan: BuildPlan,
    log_path: Path,
    t0: float,
    error: str,
    extra: Sequence[str] = (),
    out: Optional[RunOutcome] = None,
) -> CompileResult:
    """A failed compile: ``error`` in one sentence, the key lines of the build's output (``out``) and
    of ``extra``, and what ``explain`` makes of them."""
    lines = (out.lines if out else []) + list(extra)
    return CompileResult(
        ok=False,
        mode=plan.mode,
        artefact=None,
        sha256=None,
        seconds=time.monotonic() - t0,
        log_path=str(log_path),
        jobs=out.jobs if out else plan.jobs,
        retried_with_half_jobs=bool(out and out.retried_with_half_jobs),
        key_lines=key_lines(lines) if lines else [],
        explanation=explain_for_report(error + "\n" + "\n".join(lines[-400:])),
        error=error,
    )
