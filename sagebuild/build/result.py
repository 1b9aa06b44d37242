"""The record of a compile, bundled (``run``) or external (``source``): failed (with its key log lines
and explanation) or not."""

from __future__ import annotations

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


def _result(
    plan: BuildPlan,
    log_path: Path,
    t0: float,
    out: Optional[RunOutcome],
    ok: bool,
    artefact: Optional[str] = None,
    sha256: Optional[str] = None,
    **fields: Any,
) -> CompileResult:
    """The record of a compile of ``plan`` begun at ``t0``; ``out``: its build command's run, if any."""
    return CompileResult(
        ok=ok,
        mode=plan.mode,
        artefact=artefact,
        sha256=sha256,
        seconds=time.monotonic() - t0,
        log_path=str(log_path),
        jobs=out.jobs if out else plan.jobs,
        retried_with_half_jobs=bool(out and out.retried_with_half_jobs),
        **fields,
    )


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
    why = explain_for_report(error + "\n" + "\n".join(lines[-400:]))
    return _result(plan, log_path, t0, out, False, key_lines=key_lines(lines), explanation=why, error=error)


def succeeded(
    plan: BuildPlan, log_path: Path, t0: float, out: RunOutcome, artefact: str, sha256: str, **extra: Any
) -> CompileResult:
    """A successful compile of ``plan`` whose build command's run was ``out``."""
    return _result(plan, log_path, t0, out, True, artefact, sha256, **extra)
