"""Execute a build plan: compile in a subprocess, verify the library in a fresh interpreter (in a staging
directory), record its hash and metadata, swap ``<ext_dir>/current`` to it with one ``rename`` (a failed
build never touches it), then compile the Triton kernels ahead of time. ``--source DIR`` runs
``setup.py build_ext --inplace`` in an external tree instead, then checks that extension files appeared
or changed (a ``setup.py`` that skips its extensions exits 0 too)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Optional

from sagebuild.build import paths
from sagebuild.build.plan import EXPECTED_OPS, SPEC_FILE, BuildPlan
from sagebuild.build.result import CompileResult, finish, run_plan
from sagebuild.explain import explain_for_report
from sagebuild.fsio import sha256_file
from sagebuild.probe.tools import run_tool

KEEP_BUILDS = 2  # the current build and the one before it
EXT_SUFFIXES = (".so", ".pyd")
_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules"}


@contextlib.contextmanager
def _build_lock(base: Path) -> Iterator[None]:
    """One build per extension directory at a time (a second sagebuild waits)."""
    base.mkdir(parents=True, exist_ok=True)
    with open(base / ".lock", "w") as fh:
        with contextlib.suppress(ImportError):  # no fcntl (Windows): builds there are not concurrent-safe
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def compile(plan: BuildPlan, log_path: Optional[Path] = None, progress: bool = True) -> CompileResult:
    """Run the plan; never raises for a failed build (the result says what failed and why)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    log_path = Path(log_path) if log_path else Path(plan.ext_dir) / "logs" / f"compile-{stamp}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    log_path.write_text(f"[sagebuild] plan: {json.dumps(plan.to_dict(), default=str)}\n", encoding="utf-8")
    if plan.problems:
        return finish(
            plan, log_path, t0, None, "the build cannot start: " + "; ".join(plan.problems), plan.problems
        )
    if plan.mode == "source":
        return build_source(plan, log_path, progress, t0)
    result = _build_bundled(plan, log_path, progress, t0)
    if result.ok and plan.aot:
        result.aot = run_aot(plan.aot, log_path, plan.python)
        broken = [a for a in result.aot if a.get("ok") is False]
        if broken:
            names = [f"{a['variant']}@{a['arch']}" for a in broken]
            result.ok = False
            result.error = "Triton ahead-of-time compile failed for " + ", ".join(names)
            result.key_lines = [f"{n}: {a.get('error')}" for n, a in zip(names, broken)]
            result.explanation = explain_for_report("\n".join(str(a.get("error")) for a in broken))
    result.seconds = time.monotonic() - t0
    return result


def extension_files(root: Path) -> dict[Path, tuple[int, int]]:
    """Every extension file under ``root`` with (mtime_ns, size): the before/after snapshot."""
    out: dict[Path, tuple[int, int]] = {}
    for path in root.rglob("*"):
        if any(part in _SKIP_DIRS for part in path.relative_to(root).parts):
            continue
        if path.suffix in EXT_SUFFIXES and path.is_file():
            st = path.stat()
            out[path] = (st.st_mtime_ns, st.st_size)
    return out


def build_source(plan: BuildPlan, log_path: Path, progress: bool, t0: float) -> CompileResult:
    root = Path(plan.build_dir)
    before = extension_files(root)
    out = run_plan(plan, log_path, f"building {root.name}", progress)
    if out.rc != 0:
        return finish(plan, log_path, t0, out, out.failure("setup.py build_ext"))
    fresh = sorted(p for p, sig in extension_files(root).items() if before.get(p) != sig)
    if not fresh:
        why = (
            f"setup.py build_ext finished without an error but no extension file (*.so / *.pyd) appeared "
            f"under {root}: the extensions were skipped or built elsewhere (check that setup.py found a "
            f"CUDA/ROCm torch and that the log lists compile steps)"
        )
        return finish(plan, log_path, t0, out, why, [why])
    artefacts = [{"path": str(p), "sha256": sha256_file(p)} for p in fresh]
    path, sha = artefacts[0]["path"], artefacts[0]["sha256"]
    return finish(plan, log_path, t0, out, artefact=path, sha256=sha, artefacts=artefacts)


def _build_bundled(plan: BuildPlan, log_path: Path, progress: bool, t0: float) -> CompileResult:
    base = Path(plan.ext_dir)
    tree = Path(plan.build_dir)
    with _build_lock(base):
        tree.mkdir(parents=True, exist_ok=True)
        spec = {
            "name": paths.EXT_NAME,
            "sources": plan.sources,
            "build_directory": str(tree),
            "with_cuda": plan.with_gpu,
            "include_paths": [str(paths.csrc_dir())],
            # the quantization contract rounds each product on its own (sb_numeric.h mul_rn)
            "extra_cflags": ["-O3", "-ffp-contract=off"],
            "extra_cuda_cflags": ["-O3"],
        }
        (tree / SPEC_FILE).write_text(json.dumps(spec, indent=1), encoding="utf-8")
        built = tree / paths.LIB_FILE
        built.unlink(missing_ok=True)  # a stale library must not pass for this build's output
        out = run_plan(plan, log_path, "compiling the sagebuild extension", progress)
        if out.rc != 0:
            return finish(plan, log_path, t0, out, out.failure("the build"))
        if not built.is_file():
            return finish(plan, log_path, t0, out, f"the build exited 0 but produced no {built}")

        build_id = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        staging = base / f"staging-{build_id}"
        staging.mkdir(parents=True)
        try:
            lib = staging / paths.LIB_FILE
            shutil.copy2(built, lib)
            ok, report = verify_library(plan.python, lib, plan.with_gpu)
            _append_log(log_path, f"[sagebuild] verification: {json.dumps(report)}\n")
            if not ok:
                why = f"the built library failed verification: {report.get('error')}"
                return finish(plan, log_path, t0, out, why, [str(report.get("error"))])
            info = _build_info(plan, lib, report, out.jobs, out.retried_with_half_jobs, time.monotonic() - t0)
            (staging / paths.INFO_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
            final = paths.builds_dir(base) / build_id
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, final)
            _point_current(base, final)
            _prune(base, keep=final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        lib_path, sha = str(paths.current_lib(base)), info["sha256"]
        return finish(plan, log_path, t0, out, artefact=lib_path, sha256=sha, build_info=info)


def _append_log(log_path: Path, text: str) -> None:
    with open(log_path, "a", encoding="utf-8") as log:
        log.write(text)


def _point_current(base: Path, target: Path) -> None:
    """Atomically make ``base/current`` point at ``target`` (relative symlink + rename)."""
    tmp = base / f".current-{uuid.uuid4().hex[:8]}"
    os.symlink(os.path.relpath(target, base), tmp)
    os.replace(tmp, paths.current_dir(base))


def _prune(base: Path, keep: Path) -> None:
    builds = sorted((p for p in paths.builds_dir(base).iterdir() if p.is_dir()), key=lambda p: p.name)
    for old in builds[:-KEEP_BUILDS]:
        if old != keep:
            shutil.rmtree(old, ignore_errors=True)
    for stale in base.glob("staging-*"):
        shutil.rmtree(stale, ignore_errors=True)


_VERIFY_SCRIPT = r"""
import json, sys
report = {"ok": False}
try:
    import torch
    torch.ops.load_library(sys.argv[1])
    expected = json.loads(sys.argv[2])
    report["ops"] = [o for o in expected if hasattr(torch.ops.sagebuild, o)]
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    report["dispatch_keys"] = [k for k in ("CPU", "CUDA") if all(has("sagebuild::" + o, k) for o in expected)]
    k = torch.arange(24, dtype=torch.float32).reshape(1, 1, 6, 4).half()
    km = torch.ops.sagebuild.k_mean(k)
    report["smoke"] = bool(torch.allclose(km, k.float().mean(dim=2, keepdim=True)))
    report["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda, "hip": torch.version.hip,
                       "git": getattr(torch.version, "git_version", None)}
    report["python"] = {"version": sys.version.split()[0], "executable": sys.executable}
    report["ok"] = report["ops"] == expected and report["smoke"] and "CPU" in report["dispatch_keys"]
    if not report["ok"]:
        report["error"] = "missing ops or kernels: " + json.dumps(
            {"ops": report["ops"], "dispatch_keys": report["dispatch_keys"], "smoke": report["smoke"]})
except Exception as e:
    report["error"] = type(e).__name__ + ": " + str(e)
print("SAGEBUILD_VERIFY " + json.dumps(report))
"""


def _run_script(
    python: str,
    script: str,
    args: list[str],
    marker: str,
    timeout: float,
    env: Optional[dict[str, str]] = None,
) -> tuple[str, list[dict[str, Any]], Optional[str]]:
    """Run one of the scripts here in ``python``: (its output and error output, the JSON documents it
    printed on lines starting with ``marker``, why it ended badly or None)."""
    try:
        proc = subprocess.run(
            [python, "-c", script, *args], capture_output=True, text=True, env=env, timeout=timeout
        )
        out, err = proc.stdout, proc.stderr
        tail = " | ".join((err or out).strip().splitlines()[-5:])
        ended = f"exited {proc.returncode}" + (f": {tail}" if tail else "") if proc.returncode else None
    except subprocess.TimeoutExpired as e:
        out, err = (x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
        ended = f"took more than {timeout:.0f} s"
    reports = [json.loads(ln[len(marker) :]) for ln in out.splitlines() if ln.startswith(marker)]
    return out + err, reports, ended


def verify_library(
    python: str, lib: Path, with_gpu: bool, timeout: float = 180.0
) -> tuple[bool, dict[str, Any]]:
    """Load ``lib`` in a fresh interpreter of ``python``; check ops, kernels per key and a smoke call."""
    args = [str(lib), json.dumps(list(EXPECTED_OPS))]
    _, reports, ended = _run_script(python, _VERIFY_SCRIPT, args, "SAGEBUILD_VERIFY ", timeout)
    # no report, or a report and then a hang (``_run_script``'s timeout): the build fails
    if not reports or (ended or "").startswith("took more than"):
        return False, {"error": f"the verifying interpreter {ended or 'printed no report'}"}
    report = reports[0]
    if report.get("ok") and with_gpu and "CUDA" not in report.get("dispatch_keys", []):
        report["ok"] = False
        report["error"] = "a GPU build whose library has no CUDA/HIP kernels registered"
    return bool(report.get("ok")), report


def _tool_version(cmd: list[str]) -> Optional[str]:
    out, _ = run_tool(cmd, os.environ, timeout=20)  # no output when the tool is missing
    lines = [ln.strip() for ln in (out or "").splitlines() if ln.strip()]
    if cmd[0] == "nvcc":
        lines = [ln for ln in lines if "release" in ln] or lines
    return lines[0] if lines else None


def compiler_versions(vendor: str) -> dict[str, Optional[str]]:
    gpu = {"cuda": "nvcc", "rocm": "hipcc"}.get(vendor)
    tools = {"c++": os.environ.get("CXX", "c++"), "ninja": "ninja", **({gpu: gpu} if gpu else {})}
    return {name: _tool_version([exe, "--version"]) for name, exe in tools.items()}


def _build_info(
    plan: BuildPlan, lib: Path, report: dict[str, Any], jobs: int, retried: bool, seconds: float
) -> dict[str, Any]:
    from sagebuild._version import __version__

    return {
        "sagebuild": __version__,
        "name": paths.EXT_NAME,
        "sha256": sha256_file(lib),
        "built_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1),
        "profile": plan.profile,
        "vendor": plan.vendor,
        "archs": plan.archs,
        "arch_env": {plan.arch_env: plan.env[plan.arch_env]} if plan.arch_env in plan.env else {},
        "jobs": jobs,
        "retried_with_half_jobs": retried,
        "compilers": compiler_versions(plan.vendor),
        "torch": report.get("torch", {}),
        "python": report.get("python", {"version": sys.version.split()[0], "executable": plan.python}),
        "ops": report.get("ops", []),
        "dispatch_keys": report.get("dispatch_keys", []),
    }


_AOT_SCRIPT = r"""
import json, sys
from dataclasses import asdict
from sagebuild.attention import aot
for variant, arch in json.loads(sys.argv[1]):
    try:
        d = asdict(aot.compile_variant(variant, arch))
    except Exception as e:
        d = {"variant": variant, "arch": arch, "ok": False, "error": type(e).__name__ + ": " + str(e)}
    print("SAGEBUILD_AOT " + json.dumps(d, default=str), flush=True)
"""


def run_aot(
    pairs: list[tuple[str, str]], log_path: Path, python: Optional[str] = None, timeout: float = 1800.0
) -> list[dict[str, Any]]:
    """Compile each (variant, arch) with Triton for the target, in subprocesses: they isolate compiler
    crashes and run without ``TRITON_INTERPRET`` (the interpreter cannot compile ahead of time).
    One process per target arch: Triton 3.6 carries state from one AMD target's compile into the
    next in a process (gfx950 FP8 then gfx1201 FP8 aborts LLVM, and gfx950 after another target
    loses its hardware FP8 conversion), so no target ever follows another in a process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    py = python or sys.executable
    done: dict[tuple[str, str], dict[str, Any]] = {}
    lost: dict[str, str] = {}
    for arch in dict.fromkeys(a for _, a in pairs):  # each target once, in the pairs' order
        mine = [(v, a) for v, a in pairs if a == arch]
        out, reports, ended = _run_script(py, _AOT_SCRIPT, [json.dumps(mine)], "SAGEBUILD_AOT ", timeout, env)
        note = f"[sagebuild] the compile process {ended}\n" if ended else ""  # a timeout says so nowhere else
        _append_log(log_path, f"[sagebuild] triton ahead-of-time compile for {arch}\n{out}{note}")
        done |= {(d["variant"], d["arch"]): d for d in reports}
        lost[arch] = "the compile process ended before this kernel" + (f": it {ended}" if ended else "")
    return [done.get((v, a), {"variant": v, "arch": a, "ok": False, "error": lost[a]}) for v, a in pairs]
