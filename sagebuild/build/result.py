"""Running a plan's build command (full output in a log file, a progress bar on a TTY, one retry at half
the jobs when the compiler was killed for memory) and the record of a compile, bundled or external."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Mapping, Optional, Sequence

from sagebuild import console
from sagebuild.explain import explain_for_report, read_log_file

if TYPE_CHECKING:
    from sagebuild.build.plan import BuildPlan

# A compiler killed for memory: the OOM killer's SIGKILL (rc -9 / 137) or the messages gcc,
# nvcc and the kernel leave behind.
OOM_PATTERNS = re.compile(
    r"\bKilled\b|signal 9|SIGKILL|killed signal terminated program|virtual memory exhausted|"
    r"cannot allocate memory|out of memory|std::bad_alloc|nvcc error\s*:.*killed",
    re.IGNORECASE,
)
_KEY_PATTERNS = re.compile(
    r"error|FAILED|fatal|Killed|undefined (reference|symbol)|cannot find|no such file|not found|"
    r"out of memory|exhausted|Traceback|Exception|unsupported|invalid",
    re.IGNORECASE,
)
_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


@dataclass
class RunOutcome:
    """What one (possibly retried) build command did."""

    rc: int
    jobs: int
    retried_with_half_jobs: bool = False
    oom: bool = False  # killed for memory again, after the retry
    lines: list[str] = field(default_factory=list)  # the last lines of the final attempt

    def failure(self, command: str) -> str:
        """Why the command (as errors name it) failed, in one sentence."""
        if self.oom:
            return "the compiler was killed for memory again, after the retry with half the jobs"
        return f"{command} exited with status {self.rc}"


def looks_like_oom(rc: int, text: str) -> bool:
    """True when the build died of memory rather than of a compile error."""
    return rc in (-9, 137) or bool(OOM_PATTERNS.search(text))


def key_lines(lines: list[str], limit: int = 15) -> list[str]:
    """The lines of a log a human should read first: errors, kills, missing things."""
    hits = [ln for ln in lines if _KEY_PATTERNS.search(ln)]
    picked = hits[-limit:] if hits else lines[-limit:]
    return [ln.rstrip()[:400] for ln in picked if ln.strip()]


def run_once(
    cmd: list[str], env: Mapping[str, str], cwd: Optional[str], log: IO[str], label: str, progress: bool
) -> tuple[int, list[str]]:
    """Run ``cmd`` once, streaming its output into ``log``; returns (rc, last lines)."""
    tail: deque[str] = deque(maxlen=4000)
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    )
    assert proc.stdout is not None
    bar: Any = None
    if progress and console.interactive():
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
        bar = Progress(*columns, console=console.err, transient=True)
    with bar or contextlib.nullcontext():
        task = bar.add_task(label, total=None) if bar else None
        for line in proc.stdout:
            log.write(line)
            tail.append(line)
            m = _NINJA_STEP.match(line)
            if bar and m:
                done, total = m.groups()
                bar.update(
                    task, completed=int(done) - 1, total=int(total), description=f"{label} [{done}/{total}]"
                )
    rc = proc.wait()
    log.write(f"[sagebuild] exit status {rc}\n")
    log.flush()
    return rc, list(tail)


def run_plan(plan: BuildPlan, log_path: Path, label: str, progress: bool) -> RunOutcome:
    """Run the plan's command in our environment with the plan's variables on top, its output appended to
    ``log_path``; on an OOM kill retry once with half the jobs and say so in the log."""
    env = {**os.environ, **plan.env}
    env.setdefault("PYTHONUNBUFFERED", "1")
    cmd, jobs = plan.command, plan.jobs
    with open(log_path, "a", encoding="utf-8") as log:
        rc, lines = run_once(cmd, {**env, "MAX_JOBS": str(jobs)}, plan.cwd, log, label, progress)
        if rc == 0 or not looks_like_oom(rc, "".join(lines)):
            return RunOutcome(rc, jobs, lines=lines)
        half = max(1, jobs // 2)
        note = (
            f"[sagebuild] the compiler was killed for memory with MAX_JOBS={jobs}; "
            f"retrying once with MAX_JOBS={half}"
        )
        log.write(note + "\n")
        console.err.print(f"[yellow]{note}[/]", highlight=False)
        rc, lines = run_once(cmd, {**env, "MAX_JOBS": str(half)}, plan.cwd, log, label, progress)
        return RunOutcome(rc, half, True, rc != 0 and looks_like_oom(rc, "".join(lines)), lines)


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

    def summary(self) -> str:
        """One line: what was built, or what failed."""
        if self.ok:
            name = Path(self.artefact or "").name
            return f"built {name} (MAX_JOBS={self.jobs}, sha256 {str(self.sha256)[:12]}…)"
        return str(self.error)

    def failure_text(self) -> str:
        """The error sentence followed by the log's key lines."""
        return "\n".join([str(self.error), *self.key_lines])

    def explain(self) -> list[dict[str, Any]]:
        """What ``explain`` made of the failure; the log's tail when the build gave nothing to match."""
        log = Path(self.log_path)
        if not self.explanation and log.is_file():
            return explain_for_report(read_log_file(log).text)
        return list(self.explanation)


def finish(
    plan: BuildPlan,
    log_path: Path,
    t0: float,
    out: Optional[RunOutcome],
    error: Optional[str] = None,
    extra: Sequence[str] = (),
    artefact: Optional[str] = None,
    sha256: Optional[str] = None,
    **fields: Any,
) -> CompileResult:
    """The record of a compile of ``plan`` begun at ``t0`` (``out``: its build command's run, if any).
    A failed one (``error``: what failed, in one sentence) keeps the key lines of the build's output
    and of ``extra``, and what ``explain`` makes of them."""
    if error is not None:
        lines = (out.lines if out else []) + list(extra)
        why = explain_for_report(error + "\n" + "\n".join(lines[-400:]))
        fields.update(key_lines=key_lines(lines), explanation=why)
    return CompileResult(
        ok=error is None,
        mode=plan.mode,
        artefact=artefact,
        sha256=sha256,
        seconds=time.monotonic() - t0,
        log_path=str(log_path),
        jobs=out.jobs if out else plan.jobs,
        retried_with_half_jobs=bool(out and out.retried_with_half_jobs),
        error=error,
        **fields,
    )
