"""``sagebuild accept``: the four-step acceptance (doctor → compile → verify → bench) as one CI gate.

The exit code is the first failure's (10/20/30/40; 2/3: settings refused; 1: internal error). A run
is written beside ``--out`` and swapped in whole: the folder never mixes two runs.
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from sagebuild import fsio, rundir
from sagebuild.errors import Exit, SagebuildError
from sagebuild.explain import explain_for_report, fix_entry
from sagebuild.lock import DEFAULT_NAME
from sagebuild.report.schema import validate
from sagebuild.report.write import BACKUP_NAME, BUILD_LOG, REPORT_FILES, environment_backup, write_report

STEPS = ("doctor", "compile", "verify", "bench")
STEP_EXIT = {
    "doctor": Exit.DOCTOR_FAILED,
    "compile": Exit.COMPILE_FAILED,
    "verify": Exit.VERIFY_FAILED,
    "bench": Exit.BENCH_BELOW_THRESHOLD,
}
LOCK_NAME = DEFAULT_NAME
# every file a run writes: what the swap replaces, or removes when the new run did not write it
RUN_FILES = (*REPORT_FILES.values(), BUILD_LOG, BACKUP_NAME, LOCK_NAME, f"{LOCK_NAME}.requirements.txt")
INTERNAL = "internal error (a sagebuild bug, please report it)"


@dataclass
class StepResult:
    name: str
    status: str  # ok | fail | skip
    exit_code: int
    seconds: Optional[float]
    summary: str
    error: Optional[str] = None
    explanation: list[dict[str, Any]] = field(default_factory=list)


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
    compat: bool = False  # after a passing run, install the `sageattention` distribution into ``python``
    tune: bool = False  # ``sagebuild tune`` the bench's shapes and the mission preset before the bench
    tune_budget: Optional[float] = None  # its budget in seconds (None: the mission preset's)


@dataclass
class AcceptResult:
    exit_code: int
    report: dict[str, Any]
    paths: dict[str, Path]
    problems: list[str] = field(default_factory=list)  # what went wrong outside the steps (the lockfile)
    # with ``compat``: {"installed", "site_packages"} or {"error", "fix"}; None when the run failed
    compat: Optional[dict[str, Any]] = None
    compat_exit: int = 0  # the install's exit code when it failed

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
            "problems": self.problems,
        }


def _step(name: str, ok: bool, summary: str, error: str = "", explanation: Any = ()) -> StepResult:
    """A step that ran to its end: passed, or failed with its error and explanation."""
    if ok:
        return StepResult(name, "ok", 0, None, summary)
    return StepResult(name, "fail", int(STEP_EXIT[name]), None, summary, error, list(explanation))


def _failed_step(name: str, exc: BaseException) -> StepResult:
    """A step that raised: ours with its code, fix and explanation; anything else an internal error."""
    exc = fsio.user_error(exc) or exc  # a path it could not write (a read-only HOME's cache): not a bug
    if isinstance(exc, SagebuildError):
        text = str(exc)
        expl = [fix_entry(f"{name}.error", f"{name} stopped", exc.message, exc.fix)] if exc.fix else []
        return _step(name, False, exc.message, text, expl + explain_for_report(text))
    missing = _missing_stack(exc)
    if missing:  # not a bug: the environment lacks it, and the doctor's check says how to install it
        summary = f"{name} needs {missing}, which is not importable here ({exc})"
        fix = f"see the doctor step's {missing}-import check for how to install it, then run accept again"
        expl = [fix_entry(f"{name}.error", f"{name} stopped", summary, fix)]
        return _step(name, False, summary, summary, expl)
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-8000:]
    summary = f"{INTERNAL} in {name}: {type(exc).__name__}: {exc}".splitlines()[0][:300]
    return StepResult(name, "fail", int(Exit.INTERNAL), None, summary, text, explain_for_report(text))


def run_accept(opts: AcceptOptions, say: Callable[[str], None] = lambda _m: None) -> AcceptResult:
    """Run the pipeline and write the output directory; raises ``SagebuildError`` only when the
    output cannot be written at all (exit 2) or ``--python`` cannot be run (exit 3), never for a
    failing step."""
    out = Path(opts.out).expanduser()
    with rundir.terminate_raises():
        staging = rundir.staging_dir(out)
        try:
            result = _run(opts, staging, out, say)
            say("moving the run into place")
            fsio.swap_dir_in(staging, out, owned=RUN_FILES)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    result.paths = {k: out / p.name for k, p in result.paths.items()}
    if opts.compat and result.exit_code == 0:  # passed: let `sageattention` callers have the kernels
        from sagebuild.compat import installer

        say("installing sageattention (compat install)")
        try:
            done = installer.install(opts.python)
            result.compat = {"installed": done["installed"], "site_packages": done["site_packages"]}
        except SagebuildError as err:
            result.compat, result.compat_exit = {"error": err.message, "fix": err.fix}, int(err.code)
    return result


def _run(opts: AcceptOptions, run_dir: Path, out: Path, say: Callable[[str], None]) -> AcceptResult:
    say("saving pip freeze (before anything changes)")
    backup = environment_backup(run_dir, opts.python)
    run = _Steps(opts, _settings(opts, say), run_dir, say)
    steps, exit_code = run.all()
    say("writing the lockfile and the report")
    lock_path, req_path, problems = _write_lock(run.settings, opts, run_dir)
    if problems and exit_code == 0:
        exit_code = int(Exit.INTERNAL) if INTERNAL in problems[0] else int(Exit.ENVIRONMENT)
    files = {
        "environment_backup": backup.name,
        "build_log": BUILD_LOG if run.log_path.is_file() else None,
        "lockfile": lock_path.name if lock_path else None,
        "requirements": req_path.name if req_path else None,
        "report_json": REPORT_FILES["json"],
        "report_md": REPORT_FILES["markdown"],
        "report_html": REPORT_FILES["html"],
        "junit": REPORT_FILES["junit"],
    }
    report = _conforming(_report(run, opts, out, steps, exit_code, files))
    paths = write_report(report, run_dir, build_log=run.log_path if run.log_path.is_file() else None)
    paths["environment_backup"] = backup
    if lock_path and req_path:
        paths.update({"lockfile": lock_path, "requirements": req_path})
    return AcceptResult(int(report["exit_code"]), report, paths, problems)


@dataclass
class _Settings:
    """The run's settings, resolved and checked before any step runs. A refusal is the failure of the
    step it belongs to (``stage``), and the report still says so."""

    facts: Any = None
    profile: Any = None
    why: str = ""
    bench_cfg: Any = None
    stage: str = "doctor"
    refusal: Optional[Exception] = None


def _settings(opts: AcceptOptions, say: Callable[[str], None]) -> _Settings:
    from sagebuild import bench as bench_mod
    from sagebuild import probe, profiles

    got = _Settings()
    try:
        say("probing the machine")
        got.facts = probe.collect(root=opts.root, python=opts.python)
        got.profile, got.why = profiles.resolve(opts.profile, got.facts.gpu_archs())
        got.stage = "bench"
        got.bench_cfg = bench_mod.config_from_profile(got.profile, **opts.bench)
        _check_fits(got, opts)
    except Exception as e:  # noqa: BLE001 - reported as the failure of the step the setting is for
        got.refusal = e
    return got


def _check_fits(got: _Settings, opts: AcceptOptions) -> None:
    """Refuse a bench or verify shape that will not fit before 10 minutes of build. The memory is
    measured through torch: without torch there is nothing to measure, and the doctor's torch-import
    check fails with the fix."""
    from sagebuild.bench import memory as benchmem

    try:
        benchmem.check_fits(got.bench_cfg)
        got.stage = "verify"
        benchmem.check_shape_fits(opts.verify_shape, option="--verify-shape")
    except ModuleNotFoundError as e:
        if _missing_stack(e) is None:
            raise


def _missing_stack(exc: BaseException) -> Optional[str]:
    """``torch`` or ``triton`` when ``exc`` is their import failing, else None."""
    name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    top = (name or "").split(".", 1)[0]
    return top if top in ("torch", "triton") else None


class _Steps:
    """The four steps over one run's settings: each returns its result and keeps its record."""

    def __init__(self, opts: AcceptOptions, settings: _Settings, run_dir: Path, say: Callable[[str], None]):
        self.opts, self.settings, self.say = opts, settings, say
        self.log_path = run_dir / BUILD_LOG
        self.checks: list[Any] = []
        self.docs: dict[str, Optional[dict[str, Any]]] = {
            "compile": None,
            "verify": None,
            "bench": None,
            "tune": None,
        }

    def all(self) -> tuple[list[StepResult], int]:
        """Every step in order (run, refused, or skipped); the exit code is the first failure's."""
        steps: list[StepResult] = []
        first_failure: Optional[str] = None
        exit_code = 0
        for name in STEPS:
            step = self.one(name, first_failure)
            steps.append(step)
            if step.status == "fail" and first_failure is None:
                first_failure, exit_code = name, step.exit_code
        return steps, exit_code

    def one(self, name: str, first_failure: Optional[str]) -> StepResult:
        refusal, stage = self.settings.refusal, self.settings.stage
        if refusal is not None and name == stage:
            step = _failed_step(name, refusal)
            if isinstance(refusal, SagebuildError):
                step.exit_code = int(refusal.code)  # a refused setting keeps its own code (2, 3)
            self.say(f"{name}: refused: {step.summary}")
            return step
        if refusal is not None:
            when = "before" if STEPS.index(name) < STEPS.index(stage) else "after"
            return StepResult(name, "skip", 0, None, f"not run: {stage}'s settings were refused {when} start")
        if first_failure and not self.opts.keep_going:
            return StepResult(
                name, "skip", 0, None, f"skipped: {first_failure} failed (--keep-going runs every step)"
            )
        self.say(f"{name}: running")
        t0 = time.monotonic()
        try:
            step = getattr(self, name)()
        except Exception as e:  # noqa: BLE001 - a step that raised is a failed step, never a traceback
            step = _failed_step(name, e)
        step.seconds = round(time.monotonic() - t0, 3)
        self.say(f"{name}: {step.status} in {step.seconds:.1f} s — {step.summary}")
        return step

    def doctor(self) -> StepResult:
        from sagebuild.doctor import run_doctor

        result = run_doctor(self.settings.facts, self.settings.profile, self.settings.why)
        self.checks = result.checks
        return _step("doctor", result.ok, result.counts_line(), result.failure_text(), result.explanation())

    def compile(self) -> StepResult:
        from sagebuild.build import run
        from sagebuild.build.plan import make_plan

        plan = make_plan(self.settings.profile, self.settings.facts, jobs=self.opts.jobs, arch=self.opts.arch)
        res = run.compile(plan, self.log_path, self.opts.progress)
        self.docs["compile"] = {"plan": plan.to_dict(), "result": res.to_dict()}
        if res.ok:
            return _step("compile", True, res.summary())
        return _step("compile", False, res.summary(), res.failure_text(), res.explain())

    def verify(self) -> StepResult:
        from sagebuild.verify import run_verify

        res = run_verify(self.settings.profile, self.opts.verify_shape)
        self.docs["verify"] = res.to_dict()
        n_ok = sum(r.ok for r in res.results)
        summary = f"{res.mode}: {n_ok}/{len(res.results)} passed on {res.device}"
        if res.ok:
            return _step("verify", True, summary)
        error = res.failure_text()
        expl = [  # a failed check always names its problems
            fix_entry(f"verify.{r.variant}", f"{r.variant} failed", r.cause, r.fix, r.problems[0])
            for r in res.results
            if not r.ok and r.cause and r.fix
        ]
        return _step("verify", False, summary, error, expl + explain_for_report(error))

    def tune(self) -> str:
        """``--tune``: tune the bench's shapes and the mission preset on this GPU (the record the bench
        then replays); the report's tune section compares the shipped table with the tuned choice."""
        from sagebuild.tuning import classes, session

        device = _tune_device()
        if device is None:
            return "; --tune skipped: no GPU"
        workloads = list(
            dict.fromkeys(classes.from_bench(self.settings.bench_cfg) + classes.PRESETS["mission"])
        )
        budget = self.opts.tune_budget or session.default_budget("mission", len(workloads))
        bounds = session.bounds_of(self.settings.profile)
        outcome = session.tune(workloads, device=device, budget_s=budget, bounds=bounds, progress=self.say)
        self.docs["tune"] = session.comparison(outcome)
        if outcome.run.interrupted:
            raise KeyboardInterrupt
        return f"; tuned {len(outcome.run.results)} classes in {outcome.run.seconds:.0f} s"

    def bench(self) -> StepResult:
        from sagebuild import bench as bench_mod

        profile = self.settings.profile
        tuned = self.tune() if self.opts.tune else ""
        res = bench_mod.run_bench(profile, self.settings.bench_cfg, progress=self.say)
        self.docs["bench"] = res.to_dict()
        headline = (bench_mod.AUTO, f"golden:{profile.kernels[0]}")  # sageattn, or the CPU's stand-in
        best = ", ".join(
            f"{r.speedup:.2f}× @ {r.seq}"
            for r in res.rows
            if r.kind == "whole_call" and r.speedup is not None and r.provider in headline
        )
        label = "CPU timings (not a GPU result)" if res.timing_kind == "cpu" else "GPU"
        summary = f"{label}; SDPA backend {res.sdpa_backend['name']}; {best or 'no speed-up measured'}{tuned}"
        error = "\n".join(res.failures)
        return _step("bench", res.ok, summary, error, explain_for_report(error) if error else ())


def _tune_device() -> Any:
    """The GPU ``--tune`` measures (torch's current one), or None without a GPU."""
    import torch

    return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None


def _write_lock(
    settings: _Settings, opts: AcceptOptions, run_dir: Path
) -> tuple[Optional[Path], Optional[Path], list[str]]:
    """The run's lockfile and its requirements export, or the problem that kept them from being written
    (a disk that cannot be written raises: nothing else of the run can be written either)."""
    from sagebuild import lock

    if settings.profile is None:
        return None, None, []
    try:
        lock_doc = lock.current(settings.profile, settings.facts, python=opts.python)
        lock_path, req_path = lock.write(lock_doc, run_dir / LOCK_NAME)
        return lock_path, req_path, []
    except SagebuildError as e:
        if e.code == Exit.USAGE and "cannot write" in e.message:
            raise
        return None, None, [f"no lockfile: {e.message}"]
    except Exception as e:  # noqa: BLE001 - the report still gets written
        return None, None, [f"no lockfile: {INTERNAL}: {type(e).__name__}: {e}"]


def _report(
    run: _Steps,
    opts: AcceptOptions,
    out: Path,
    steps: list[StepResult],
    exit_code: int,
    files: dict[str, Any],
) -> dict[str, Any]:
    """The report document of the run (before the schema check)."""
    from sagebuild._version import __version__

    settings = run.settings
    result_doc = (run.docs["compile"] or {}).get("result")
    if isinstance(result_doc, dict) and result_doc.get("log_path") == str(run.log_path):
        result_doc["log_path"] = str(out / BUILD_LOG)  # where it lives after the swap
    profile_doc = (
        {**settings.profile.to_dict(), "why": settings.why}
        if settings.profile is not None
        else {"name": opts.profile, "why": f"not resolved: {steps[0].summary}"}
    )
    return {
        "report": "sagebuild-report",
        "schema_version": 1,
        "sagebuild_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "ok": exit_code == 0,
        "exit_code": exit_code,
        "profile": profile_doc,
        "facts": settings.facts.to_dict() if settings.facts is not None else None,
        "checks": [c.to_dict() for c in run.checks],
        "steps": [asdict(s) for s in steps],
        **run.docs,
        "files": files,
    }


def _conforming(report: dict[str, Any]) -> dict[str, Any]:
    """The report, with any section that does not match the schema replaced by the internal error
    it is: that step fails (exit 1) and names the violations, and the rest is still written."""
    report = json.loads(json.dumps(report, default=str))  # Paths etc. become the strings JSON holds
    errors = validate(report)
    if not errors:
        return report
    by_section: dict[str, list[str]] = {}
    for err in errors:
        section = err[2:].split(".", 1)[0].split("[", 1)[0].split(":", 1)[0]
        by_section.setdefault(section, []).append(err)
    steps = {s["name"]: s for s in report["steps"]}
    for section, errs in by_section.items():
        text = f"the report's {section} record does not match its schema:\n  " + "\n  ".join(errs[:20])
        if section not in ("compile", "verify", "bench", "facts", "checks"):
            raise ValueError(f"{INTERNAL}: {text}")  # the frame itself is wrong: nothing sound to write
        report[section] = [] if section == "checks" else None
        if section in STEPS:  # a step's record: that step fails
            summary = f"{INTERNAL}: {text.splitlines()[0]}"
            steps[section].update(status="fail", exit_code=int(Exit.INTERNAL), summary=summary, error=text)
        if report["exit_code"] == 0:
            report["exit_code"] = int(Exit.INTERNAL)
        report["ok"] = False
    return report
