"""Checks on what a build needs: compilers matching torch, ninja, memory, jobs and disk."""

from __future__ import annotations

from typing import Optional

from sagebuild.build import jobs
from sagebuild.checks.helpers import major_of, torch_ok
from sagebuild.checks.registry import Verdict, check, fail, ok, skip, warn
from sagebuild.errors import SagebuildError
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


@check("nvcc", "nvcc matches torch's CUDA major")
def check_nvcc(facts: Facts, profile: Profile) -> Verdict:
    t, nvcc = facts.torch, facts.tool("nvcc")
    if not torch_ok(facts) or t.build != "cuda":
        return skip("torch is not a CUDA build: nvcc is not used")
    if not nvcc.present:
        return warn(
            "no nvcc: the C++ quantization extension cannot be built (the Triton kernels need none)",
            f"install the CUDA {major_of(t.cuda)} toolkit (e.g. apt install cuda-toolkit-"
            f"{(t.cuda or '12.0').replace('.', '-')}) and export CUDA_HOME=/usr/local/cuda-{t.cuda}",
        )
    have, want = major_of(nvcc.version), major_of(t.cuda)
    if have is not None and have == want:
        return ok(f"nvcc {nvcc.version} ({nvcc.path}), torch CUDA {t.cuda}")
    return fail(
        f"nvcc {nvcc.version} ({nvcc.path}) but torch is built with CUDA {t.cuda}: the extension "
        "fails to build or load with a mismatched major",
        f"export CUDA_HOME=/usr/local/cuda-{t.cuda} PATH=/usr/local/cuda-{t.cuda}/bin:$PATH "
        f"(install that toolkit if missing), or install the torch built for CUDA {have}",
    )


@check("hipcc", "hipcc matches torch's HIP major")
def check_hipcc(facts: Facts, profile: Profile) -> Verdict:
    t, hipcc = facts.torch, facts.tool("hipcc")
    if not torch_ok(facts) or t.build != "rocm":
        return skip("torch is not a ROCm build: hipcc is not used")
    if not hipcc.present:
        return warn(
            "no hipcc: the C++ quantization extension cannot be built (the Triton kernels need no SDK)",
            f"install ROCm {t.hip and '.'.join(t.hip.split('.')[:2])}'s hipcc (sudo apt install "
            "rocm-hip-sdk from repo.radeon.com) and export ROCM_HOME=/opt/rocm",
        )
    have, want = major_of(hipcc.version), major_of(t.hip)
    if have is not None and have == want:
        return ok(f"hipcc HIP {hipcc.version} ({hipcc.path}), torch HIP {t.hip}")
    return fail(
        f"hipcc is HIP {hipcc.version} ({hipcc.path}) but torch is built with HIP {t.hip}",
        f"export ROCM_HOME=/opt/rocm-{'.'.join((t.hip or '').split('.')[:2])} (a ROCm of torch's "
        "major), or remove the old hipcc from PATH",
    )


@check("cxx", "C++ compiler present")
def check_cxx(facts: Facts, profile: Profile) -> Verdict:
    cxx = facts.tool("c++")
    if cxx.present and not cxx.error:
        return ok(f"{cxx.version} ({cxx.path})")
    if cxx.present:
        return fail(f"{cxx.path} does not run: {cxx.error}", "sudo apt install --reinstall build-essential")
    return fail(
        "no c++/g++/clang++ on PATH: the extension cannot be built and Triton cannot compile its launcher",
        "sudo apt install build-essential",
    )


@check("ninja", "ninja present")
def check_ninja(facts: Facts, profile: Profile) -> Verdict:
    ninja = facts.tool("ninja")
    if ninja.present and not ninja.error:
        return ok(f"ninja {ninja.version} ({ninja.path})")
    return fail(
        "ninja not found on PATH: torch's extension builder needs it (without it builds are serial "
        "and slow, or fail)"
        if not ninja.present
        else f"{ninja.path} does not run: {ninja.error}",
        f"{facts.python.executable or 'python'} -m pip install ninja",
    )


@check("build-memory", "Memory for a build")
def check_build_memory(facts: Facts, profile: Profile) -> Verdict:
    s, b = facts.system, profile.build
    if s.mem_total_gb is None:
        return skip("memory size unknown (no proc/meminfo under the root)")
    wsl_fix = (
        "raise the WSL VM's memory: in %UserProfile%\\.wslconfig set [wsl2] memory=16GB, then "
        "`wsl --shutdown` in PowerShell"
    )
    if s.mem_total_gb < b.min_mem_gb:
        return fail(
            f"{s.mem_total_gb:.1f} GB RAM, profile {profile.name} needs {b.min_mem_gb:g} GB to build",
            wsl_fix
            if s.wsl == "2"
            else f"add swap (sudo fallocate -l {int(b.min_mem_gb)}G /swapfile && sudo mkswap /swapfile && "
            "sudo swapon /swapfile) or build on a larger machine",
        )
    avail = s.mem_available_gb if s.mem_available_gb is not None else s.mem_total_gb
    if avail < b.mem_per_job_gb:
        return warn(
            f"{avail:.1f} GB free of {s.mem_total_gb:.1f} GB, one compile job takes "
            f"~{b.mem_per_job_gb:g} GB: the build will swap or be killed",
            "close memory-hungry programs and build with MAX_JOBS=1"
            + (f"; or {wsl_fix}" if s.wsl == "2" else ""),
        )
    jobs = max(1, min(b.max_jobs, int(avail // b.mem_per_job_gb)))
    return ok(f"{avail:.1f} GB free of {s.mem_total_gb:.1f} GB: room for ~{jobs} compile jobs")


@check("max-jobs", "MAX_JOBS fits memory")
def check_max_jobs(facts: Facts, profile: Profile) -> Verdict:
    val = facts.env.get("MAX_JOBS")
    if val is None:
        return ok("MAX_JOBS not set: sagebuild compile picks it from free memory")
    try:
        n = jobs.parse_max_jobs(val)
    except SagebuildError as e:
        return fail(e.message, e.fix)
    per_job = profile.build.mem_per_job_gb
    too_many = jobs.overfill(n, facts.system.mem_available_gb, per_job, f"MAX_JOBS={val}")
    if too_many:
        return warn(*too_many)
    return ok(f"MAX_JOBS={val}")


@check("build-disk", "Free disk for a build")
def check_build_disk(facts: Facts, profile: Profile) -> Verdict:
    free = facts.system.disk_free_gb
    need = profile.build.min_free_disk_gb
    if free is None:
        return skip("free disk unknown")
    if free >= need:
        return ok(f"{free:.1f} GB free at {facts.system.disk_path}")
    return fail(
        f"{free:.1f} GB free at {facts.system.disk_path}, a build needs {need:g} GB",
        f"free at least {need - free:.1f} GB there (e.g. `pip cache purge`, remove old venvs)",
    )


@check("pip-build-isolation", "pip's build isolation setting")
def check_pip_build_isolation(facts: Facts, profile: Profile) -> Optional[Verdict]:
    """A pip setting that turns build isolation on, read as pip reads it: pip stores the value of a
    no- option as the setting itself (pip's docs, Configuration: no- options take falsy values),
    so ``PIP_NO_BUILD_ISOLATION=1`` or ``no-build-isolation = true`` isolates every source build."""
    py = facts.python
    if py.pip_isolation_source is None:
        return None  # nothing sets it: pip's default (isolated), which `sagebuild compile` never uses
    if py.pip_isolation is None:
        return warn(
            f"{py.pip_isolation_source}: pip refuses this value (a boolean: false/0/no or true/1/yes)",
            "set it to false (pip then builds against your torch) or remove it",
        )
    if py.pip_isolation:
        return warn(
            f"{py.pip_isolation_source} turns pip's build isolation ON (pip reads a no- option's value "
            "as the setting: true/1 means isolated): a source build whose setup imports torch stops "
            "with `No module named 'torch'` while getting its build requirements",
            "set it to false (`export PIP_NO_BUILD_ISOLATION=0`, or `no-build-isolation = false` in "
            "pip.conf), or remove it and pass --no-build-isolation",
        )
    return ok(f"{py.pip_isolation_source}: pip builds source packages against the installed torch")
