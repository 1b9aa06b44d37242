"""``sagebuild accept``: the four-step acceptance (doctor → compile → verify → bench) as one CI gate.

One output directory holds everything: ``environment-backup.txt`` (taken first, before anything
is built), the build log, ``report.json/.md/.html``, ``junit.xml`` and the lockfile. The run
stops at the first failing step unless ``keep_going``; the exit code is the first failure's
(10/20/30/40). A failed step's error text goes through ``sagebuild.explain`` and the
explanation lands in the report.
"""

from __future__ import annotations

import datetime as _dt
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from sagebuild.errors import Exit, SagebuildError
from sagebuild.explain import explain_for_report

STEPS = ("doctor", "compile", "verify", "bench")
STEP_EXIT = {
    "doctor": Exit.DOCTOR_FAILED,
    "compile": Exit.COMPILE_FAILED,
    "verify": Exit.VERIFY_FAILED,
    "bench": Exit.BENCH_BELOW_THRESHOLD,
}
LOCK_NAME = "sagebuild.lock"
BUILD_LOG = "build.log"


@dataclass
class StepResult:
    name: str
    status: str  # ok | fail | skip
    exit_code: int
    seconds: Optional[float]
    summary: str
    error: Optional[str] = None
    explanation: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AcceptOptions:
    profile: str = "auto"
    out: Path = Path("sagebuild-out")
    keep_going: bool = False
    jobs: Optional[int] = None
    arch: Optional[str] = None
    root: Path = Path("/")
    python: Optional[str] = None
    verify_shape: tuple[int, int, int, int] = (1, 8, 512, 64)
    bench: dict[str, Any] = field(default_factory=dict)  # BenchConfig overrides (None = profile default)
    progress: bool = False


@dataclass
class AcceptResult:
    exit_code: int
    report: dict[str, Any]
    paths: dict[str, Path]

    def summary(self) -> dict[str, Any]:
        """The ``--json`` document: verdict, steps and where every file is."""
        return {
            "command": "accept",
            "ok": self.report["ok"],
            "exit_code": self.exit_code,
            "profile": self.report["profile"]["name"],
            "steps": [
                {k: s[k] for k in ("name", "status", "exit_code", "seconds", "summary")}
                for s in self.report["steps"]
            ],
            "files": {k: str(v) for k, v in sorted(self.paths.items())},
        }


def _match(id_: str, title: str, cause: str, fix: str, line: Optional[str]) -> dict[str, Any]:
    return {"id": id_, "title": title, "cause": cause, "fix": fix, "matched_line": line}


def run_accept(opts: AcceptOptions, say: Callable[[str], None] = lambda _m: None) -> AcceptResult:
    """Run the pipeline and write the output directory; never raises for a failing step."""
    from sagebuild import bench as bench_mod
    from sagebuild import lock, probe, profiles
    from sagebuild._version import __version__
    from sagebuild.report.write import environment_backup, write_report
    from sagebuild.verify import run_verify

    out = Path(opts.out)
    out.mkdir(parents=True, exist_ok=True)
    say("saving pip freeze (before anything changes)")
    backup = environment_backup(out, opts.python)

    say("probing the machine")
    facts = probe.collect(root=opts.root, python=opts.python)
    profile, why = profiles.resolve(opts.profile, facts.gpu_archs())
    bench_cfg = bench_mod.config_from_profile(profile, **opts.bench)  # usage errors before any step runs

    steps: list[StepResult] = []
    checks: list[Any] = []
    compile_doc: Optional[dict[str, Any]] = None
    verify_doc: Optional[dict[str, Any]] = None
    bench_doc: Optional[dict[str, Any]] = None
    first_failure: Optional[str] = None
    log_path = out / BUILD_LOG

    def doctor() -> StepResult:
        nonlocal checks
        from sagebuild.doctor import run_doctor

        result = run_doctor(facts, profile, why)
        checks = result.checks
        if result.ok:
            return StepResult("doctor", "ok", 0, None, result.counts_line())
        return StepResult(
            "doctor", "fail", int(Exit.DOCTOR_FAILED), None, result.counts_line(), result.failure_text(),
            result.explanation(),
        )

    def compile_() -> StepResult:
        nonlocal compile_doc
        from sagebuild.build.service import compile_for

        outcome = compile_for(profile, facts, jobs=opts.jobs, arch=opts.arch, log_path=log_path,
                              progress=opts.progress)
        compile_doc = outcome.to_dict()
        if outcome.ok:
            return StepResult("compile", "ok", 0, None, outcome.summary())
        return StepResult(
            "compile", "fail", int(Exit.COMPILE_FAILED), None, outcome.summary(), outcome.failure_text(),
            outcome.explanation(),
        )

    def verify() -> StepResult:
        nonlocal verify_doc
        res = run_verify(profile, opts.verify_shape)
        verify_doc = res.to_dict()
        n_ok = sum(r.ok for r in res.results)
        summary = f"{res.mode}: {n_ok}/{len(res.results)} passed on {res.device}"
        if res.ok:
            return StepResult("verify", "ok", 0, None, summary)
        error = res.failure_text()
        expl = [
            _match(
                f"verify.{r.variant}",
                f"{r.variant} failed",
                r.cause,
                r.fix,
                r.problems[0] if r.problems else None,
            )
            for r in res.results
            if not r.ok and r.cause and r.fix
        ]
        return StepResult(
            "verify", "fail", int(Exit.VERIFY_FAILED), None, summary, error, expl + explain_for_report(error)
        )

    def bench() -> StepResult:
        nonlocal bench_doc
        res = bench_mod.run_bench(profile, bench_cfg, progress=say)
        bench_doc = res.to_dict()
        autos = [
            r
            for r in res.rows
            if r.kind == "whole_call"
            and r.speedup is not None
            and r.provider in (bench_mod.AUTO, f"golden:{profile.kernels[0]}")
        ]
        best = ", ".join(f"{r.speedup:.2f}× @ {r.seq}" for r in autos)
        label = "CPU timings (not a GPU result)" if res.timing_kind == "cpu" else "GPU"
        summary = f"{label}; SDPA backend {res.sdpa_backend['name']}; {best or 'no speed-up measured'}"
        if res.ok:
            return StepResult("bench", "ok", 0, None, summary)
        error = "\n".join(res.failures)
        return StepResult(
            "bench", "fail", int(Exit.BENCH_BELOW_THRESHOLD), None, summary, error, explain_for_report(error)
        )

    runners = {"doctor": doctor, "compile": compile_, "verify": verify, "bench": bench}
    for name in STEPS:
        if first_failure and not opts.keep_going:
            steps.append(
                StepResult(
                    name, "skip", 0, None, f"skipped: {first_failure} failed (--keep-going runs every step)"
                )
            )
            continue
        say(name)
        t0 = time.monotonic()
        try:
            step = runners[name]()
        except SagebuildError as e:
            text = str(e)
            step = StepResult(
                name,
                "fail",
                int(STEP_EXIT[name]),
                None,
                e.message,
                text,
                ([_match(f"{name}.error", f"{name} stopped", e.message, e.fix, None)] if e.fix else [])
                + explain_for_report(text),
            )
        except Exception as e:  # noqa: BLE001 - an unexpected failure is a failed step with its traceback
            text = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-8000:]
            step = StepResult(
                name,
                "fail",
                int(STEP_EXIT[name]),
                None,
                f"{type(e).__name__}: {e}"[:300],
                text,
                explain_for_report(text),
            )
        step.seconds = round(time.monotonic() - t0, 3)
        steps.append(step)
        if step.status == "fail" and first_failure is None:
            first_failure = name

    exit_code = int(STEP_EXIT[first_failure]) if first_failure else 0
    say("writing the lockfile and the report")
    lock_path, req_path = lock.write(lock.current(profile, facts), out / LOCK_NAME)
    files = {
        "environment_backup": backup.name,
        "build_log": BUILD_LOG if log_path.is_file() else None,
        "lockfile": lock_path.name,
        "requirements": req_path.name,
        "report_json": "report.json",
        "report_md": "report.md",
        "report_html": "report.html",
        "junit": "junit.xml",
    }
    report = {
        "report": "sagebuild-report",
        "schema_version": 1,
        "sagebuild_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "profile": {**profile.to_dict(), "why": why},
        "facts": facts.to_dict(),
        "checks": [c.to_dict() for c in checks],
        "steps": [s.to_dict() for s in steps],
        "compile": compile_doc,
        "verify": verify_doc,
        "bench": bench_doc,
        "files": files,
    }
    paths = write_report(report, out, build_log=log_path if log_path.is_file() else None)
    paths.update({"environment_backup": backup, "lockfile": lock_path, "requirements": req_path})
    return AcceptResult(exit_code, report, paths)
