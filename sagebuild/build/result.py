"""What a compile returns, shared by the bundled build (``run``) and the external tree (``source``):
the result record, a failed result with its key log lines and explanation, the build's environment."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from sagebuild.build.proc import key_lines
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
    lines: list[str],
    jobs: int,
    retried: bool = False,
    aot: Optional[list[dict[str, Any]]] = None,
) -> CompileResult:
    """A failed compile: ``error`` in one sentence, the log's key lines and what ``explain`` makes of them."""
    keys = key_lines(lines) if lines else []
    return CompileResult(
        ok=False,
        mode=plan.mode,
        artefact=None,
        sha256=None,
        seconds=time.monotonic() - t0,
        log_path=str(log_path),
        jobs=jobs,
        retried_with_half_jobs=retried,
        key_lines=keys,
        explanation=explain_for_report(error + "\n" + "\n".join(lines[-400:])),
        aot=aot or [],
        error=error,
    )
