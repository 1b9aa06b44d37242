"""Checks on torch: importable, the profile's build and versions, and a GPU it can see."""

from __future__ import annotations

from typing import Optional

from sagebuild.checks.helpers import NO_TORCH, hiding_vars, in_range, range_verdict, torch_ok
from sagebuild.checks.registry import Verdict, check, fail, ok, skip, warn
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


@check("torch-import", "torch importable")
def check_torch_import(facts: Facts, profile: Profile) -> Verdict:
    t = facts.torch
    if t.importable:
        return ok(f"torch {t.version} ({t.build} build) in {t.seconds or '?'} s")
    err, fix = t.error or "unknown error", profile.torch_install
    if "killed by" in err or "did not finish" in err:
        fix = (
            f"reinstall torch: {fix}; if it persists, run "
            f"`{facts.python.executable} -c 'import torch'` to see where it crashes"
        )
    return fail(f"import torch failed: {err}", fix)


@check("torch-build", "torch build matches the profile")
def check_torch_build(facts: Facts, profile: Profile) -> Verdict:
    t = facts.torch
    if not torch_ok(facts):
        return NO_TORCH
    if profile.vendor == "cpu":
        return ok(f"{t.build} build of torch {t.version}; the cpu profile runs on any")
    if t.build == profile.vendor:
        extra = f"HIP {t.hip}" if t.build == "rocm" else f"CUDA {t.cuda}"
        return ok(f"torch {t.version} is a {t.build} build ({extra})")
    want = {"rocm": "ROCm", "cuda": "CUDA"}[profile.vendor]
    why = (
        " (a plain `pip install torch` replaces the ROCm build with a CPU/CUDA one)"
        if profile.vendor == "rocm"
        else ""
    )
    return fail(
        f"torch {t.version} is a {t.build} build, profile {profile.name} needs a {want} build{why}",
        profile.torch_install,
    )


@check("torch-build-lock", "torch build kind as locked")
def check_torch_build_lock(facts: Facts, profile: Profile) -> Optional[Verdict]:
    """The build kind (rocm/cuda/cpu) ./sagebuild.lock froze: a requirements install that lists
    torch swaps a ROCm build for a CPU or CUDA one from PyPI, which then asks for an NVIDIA driver."""
    locked = facts.lock_torch
    if locked is None:
        return None
    path = locked["path"]
    if "error" in locked:
        return warn(f"{path}: {locked['error']}", "rewrite it with `sagebuild lock` in a working environment")
    if not torch_ok(facts):
        return NO_TORCH
    t, was = facts.torch, locked.get("build")
    if not was or was == t.build:
        return ok(f"torch {t.version} is a {t.build} build, as {path} locked")
    index = f" --index-url {locked['index_url']}" if locked.get("index_url") else ""
    return fail(
        f"torch {t.version} is a {t.build} build, but {path} locked {locked.get('version')} ({was}): "
        "a later install replaced it (a requirements file that lists torch pulls PyPI's build)",
        f"pip install --force-reinstall 'torch=={locked.get('version')}'{index}; install such "
        "requirements with --no-deps (or with torch removed from them)",
    )


@check("torch-version", "torch version in the profile's range")
def check_torch_version(facts: Facts, profile: Profile) -> Verdict:
    t = facts.torch
    if not torch_ok(facts):
        return NO_TORCH
    if in_range(t.version, profile.versions.torch) is None:
        return warn(f"cannot read torch's version {t.version!r}", profile.torch_install)
    return range_verdict("torch", t.version, profile.versions.torch, profile, profile.torch_install)


@check("gpu-runtime-version", "HIP/CUDA version in the profile's range")
def check_gpu_runtime_version(facts: Facts, profile: Profile) -> Verdict:
    t = facts.torch
    if profile.vendor == "cpu":
        return skip("the cpu profile needs no GPU runtime")
    if not torch_ok(facts) or t.build != profile.vendor:
        return skip("no matching torch build (see torch-build)")
    name, have, spec = (
        ("HIP", t.hip, profile.versions.hip)
        if profile.vendor == "rocm"
        else ("CUDA", t.cuda, profile.versions.cuda)
    )
    if in_range(have, spec):
        return ok(f"torch's {name} {have} satisfies '{spec or 'any'}'")
    return fail(
        f"torch is built with {name} {have}, profile {profile.name} needs '{spec}'", profile.torch_install
    )


@check("gpu-visible", "GPU visible to torch")
def check_gpu_visible(facts: Facts, profile: Profile) -> Verdict:
    t = facts.torch
    if profile.vendor == "cpu":
        return skip("the cpu profile needs no GPU")
    if not torch_ok(facts) or t.build != profile.vendor:
        return skip("no matching torch build (see torch-build)")
    if t.cuda_available and t.devices:
        return ok(", ".join(f"{d.index}: {d.name} ({d.arch})" for d in t.devices))
    hidden = hiding_vars(facts, profile.vendor)
    detail = "torch.cuda.is_available() is False" + (f" ({t.error})" if t.error else "")
    if hidden:
        return fail(
            f"{detail}; {', '.join(f'{v}={facts.env[v]!r}' for v in hidden)} hides every GPU",
            "unset " + " ".join(hidden),
        )
    if profile.vendor == "rocm" and facts.system.wsl == "2":
        fix = (
            "update the AMD Adrenalin driver on Windows, run `wsl --update` and `wsl --shutdown` in "
            "PowerShell; with ROCm >= 7.1 (librocdxg) also export HSA_ENABLE_DXG_DETECTION=1"
        )
    elif profile.vendor == "rocm":
        fix = (
            "sudo usermod -aG render,video $USER, log out and in again, and check `ls -l /dev/kfd "
            "/dev/dri` (install the amdgpu driver with `sudo amdgpu-install --usecase=dkms` if missing)"
        )
    else:
        fix = (
            "make `nvidia-smi` work: install the NVIDIA driver (on WSL2 the Windows one); in a container "
            "run with --gpus all"
        )
    return fail(detail, fix)
