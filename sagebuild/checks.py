"""The doctor's checks: each reads ``Facts`` and a ``Profile`` and returns a verdict with a fix.

Checks never touch the system; everything they know comes from the probe. The registry is a
plain list of functions so other parts (the built extension's metadata, ...) can append their
own with ``@register``. Each function returns one ``Check`` (or ``None`` to say nothing).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass
from typing import Callable, Literal, Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sagebuild import archs
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile

Status = Literal["ok", "warn", "fail", "skip"]
STATUSES: tuple[str, ...] = ("ok", "warn", "fail", "skip")


@dataclass
class Check:
    """One verdict: what was checked, how it went, what was seen, and the exact fix."""

    id: str
    title: str
    status: Status
    detail: str
    fix: Optional[str] = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Optional[str]]:
        return asdict(self)


CheckFn = Callable[[Facts, Profile], Optional[Check]]
REGISTRY: list[CheckFn] = []


def register(fn: CheckFn) -> CheckFn:
    """Add a check function to the registry (usable as a decorator); returns it unchanged."""
    REGISTRY.append(fn)
    return fn


def run_checks(facts: Facts, profile: Profile, registry: Optional[list[CheckFn]] = None) -> list[Check]:
    """Run every registered check in order. A check that raises is reported, not propagated."""
    out: list[Check] = []
    for fn in REGISTRY if registry is None else registry:
        try:
            result = fn(facts, profile)
        except Exception as e:  # a bug in one check must not hide the others
            name = getattr(fn, "__name__", "check").removeprefix("check_").replace("_", "-")
            result = Check(
                name,
                name,
                "warn",
                f"the check itself failed: {type(e).__name__}: {e}",
                "report this as a sagebuild bug, with `sagebuild doctor --json`",
            )
        if result is not None:
            out.append(result)
    return out


def overall(checks: list[Check]) -> str:
    """``fail`` if any check failed, else ``warn`` if any warned, else ``ok``."""
    statuses = {c.status for c in checks}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


# ---- helpers ---------------------------------------------------------------------------------


def _leading_version(text: Optional[str]) -> Optional[Version]:
    """``6.4.43482-0f2d60242`` → 6.4.43482; ``2.13.0+cpu`` → 2.13.0+cpu; junk → None."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        m = re.match(r"\d+(?:\.\d+)*", text.strip())
        return Version(m.group(0)) if m else None


def _in_range(version: Optional[str], spec: str) -> Optional[bool]:
    """Whether ``version`` satisfies ``spec`` ("" = anything); None when the version is unreadable."""
    v = _leading_version(version)
    if v is None:
        return None
    try:
        return SpecifierSet(spec).contains(v, prereleases=True)
    except InvalidSpecifier:
        return None


def _major(version: Optional[str]) -> Optional[int]:
    v = _leading_version(version)
    return v.major if v is not None else None


def _index_url(profile: Profile) -> Optional[str]:
    parts = shlex.split(profile.torch_install)
    for i, p in enumerate(parts):
        if p == "--index-url" and i + 1 < len(parts):
            return parts[i + 1]
        if p.startswith("--index-url="):
            return p.split("=", 1)[1]
    return None


def _platform(facts: Facts) -> str:
    return {"2": "WSL2", "1": "WSL1"}.get(facts.system.wsl, "native Linux")


def _torch_ok(facts: Facts) -> bool:
    return facts.torch.importable and facts.torch.build is not None


def _build_matches(facts: Facts, profile: Profile) -> bool:
    return profile.vendor == "cpu" or facts.torch.build == profile.vendor


_HIDE_VALUES = ("", "-1", "none", "void")
_VISIBLE_VARS = {
    "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "cuda": ("CUDA_VISIBLE_DEVICES",),
    "cpu": (),
}


def _hiding_vars(facts: Facts, vendor: str) -> list[str]:
    return [
        v
        for v in _VISIBLE_VARS.get(vendor, ())
        if v in facts.env and facts.env[v].strip().lower() in _HIDE_VALUES
    ]


# ---- interpreter ------------------------------------------------------------------------------


@register
def check_python_version(facts: Facts, profile: Profile) -> Check:
    title = "Python version"
    v = facts.python.version
    if v is None:
        return Check(
            "python-version",
            title,
            "fail",
            f"could not run the interpreter {facts.python.executable} ({facts.torch.error})",
            "pass an existing Linux interpreter with --python, e.g. --python .venv/bin/python",
        )
    ok = _in_range(v, profile.versions.python)
    if ok:
        return Check(
            "python-version",
            title,
            "ok",
            f"Python {v} satisfies {profile.name}'s '{profile.versions.python or 'any'}'",
        )
    return Check(
        "python-version",
        title,
        "fail",
        f"Python {v} is outside {profile.name}'s range '{profile.versions.python}'",
        f"create a venv with a Python in '{profile.versions.python}' (3.10 or 3.11 are safest): "
        "python3.11 -m venv .venv && . .venv/bin/activate",
    )


@register
def check_python_linux(facts: Facts, profile: Profile) -> Check:
    title = "Interpreter is a Linux one"
    py = facts.python
    if py.under_mnt:
        return Check(
            "python-linux",
            title,
            "fail",
            f"{py.executable} is a Windows interpreter (under /mnt/ or a drive path, platform "
            f"{py.platform or 'unknown'}): it cannot use the GPU from {_platform(facts)}, and its "
            "torch is not the one you installed in Linux",
            "create and use a venv inside the Linux file system: python3 -m venv ~/.venvs/sage && "
            f". ~/.venvs/sage/bin/activate && {profile.torch_install}",
        )
    return Check("python-linux", title, "ok", f"{py.executable} (platform {py.platform or 'unknown'})")


@register
def check_path_python(facts: Facts, profile: Profile) -> Check:
    title = "python3 on PATH"
    found = facts.python.path_python
    if found is None:
        return Check("path-python", title, "skip", "no python3 or python on PATH")
    if found.startswith("/mnt/"):
        return Check(
            "path-python",
            title,
            "warn",
            f"`python3` on PATH resolves to {found}, a Windows interpreter: pip and scripts run "
            "with it will not see your Linux torch",
            "put Linux first: export PATH=/usr/bin:$PATH (or set appendWindowsPath=false under "
            "[interop] in /etc/wsl.conf, then `wsl --shutdown` in PowerShell)",
        )
    return Check("path-python", title, "ok", f"`python3` on PATH is {found}")


# ---- torch ------------------------------------------------------------------------------------


@register
def check_torch_import(facts: Facts, profile: Profile) -> Check:
    title = "torch importable"
    t = facts.torch
    if t.importable:
        return Check(
            "torch-import", title, "ok", f"torch {t.version} ({t.build} build) in {t.seconds or '?'} s"
        )
    err = t.error or "unknown error"
    if "killed by" in err or "did not finish" in err:
        fix = (
            f"reinstall torch: {profile.torch_install}; if it persists, run "
            f"`{facts.python.executable} -c 'import torch'` to see where it crashes"
        )
    else:
        fix = profile.torch_install
    return Check("torch-import", title, "fail", f"import torch failed: {err}", fix)


@register
def check_torch_build(facts: Facts, profile: Profile) -> Check:
    title = "torch build matches the profile"
    t = facts.torch
    if not _torch_ok(facts):
        return Check("torch-build", title, "skip", "torch is not importable (see torch-import)")
    if profile.vendor == "cpu":
        return Check(
            "torch-build", title, "ok", f"{t.build} build of torch {t.version}; the cpu profile runs on any"
        )
    if t.build == profile.vendor:
        extra = f"HIP {t.hip}" if t.build == "rocm" else f"CUDA {t.cuda}"
        return Check("torch-build", title, "ok", f"torch {t.version} is a {t.build} build ({extra})")
    want = {"rocm": "ROCm", "cuda": "CUDA"}[profile.vendor]
    why = (
        " (a plain `pip install torch` replaces the ROCm build with a CPU/CUDA one)"
        if profile.vendor == "rocm"
        else ""
    )
    return Check(
        "torch-build",
        title,
        "fail",
        f"torch {t.version} is a {t.build} build, profile {profile.name} needs a {want} build{why}",
        profile.torch_install,
    )


@register
def check_torch_version(facts: Facts, profile: Profile) -> Check:
    title = "torch version in the profile's range"
    t = facts.torch
    if not _torch_ok(facts):
        return Check("torch-version", title, "skip", "torch is not importable (see torch-import)")
    ok = _in_range(t.version, profile.versions.torch)
    if ok is None:
        return Check(
            "torch-version",
            title,
            "warn",
            f"cannot read torch's version {t.version!r}",
            profile.torch_install,
        )
    if ok:
        return Check(
            "torch-version", title, "ok", f"torch {t.version} satisfies '{profile.versions.torch or 'any'}'"
        )
    return Check(
        "torch-version",
        title,
        "fail",
        f"torch {t.version} is outside {profile.name}'s range '{profile.versions.torch}'",
        profile.torch_install,
    )


@register
def check_gpu_runtime_version(facts: Facts, profile: Profile) -> Check:
    title = "HIP/CUDA version in the profile's range"
    t = facts.torch
    if profile.vendor == "cpu":
        return Check("gpu-runtime-version", title, "skip", "the cpu profile needs no GPU runtime")
    if not _torch_ok(facts) or not _build_matches(facts, profile):
        return Check("gpu-runtime-version", title, "skip", "no matching torch build (see torch-build)")
    name, have, spec = (
        ("HIP", t.hip, profile.versions.hip)
        if profile.vendor == "rocm"
        else ("CUDA", t.cuda, profile.versions.cuda)
    )
    ok = _in_range(have, spec)
    if ok:
        return Check("gpu-runtime-version", title, "ok", f"torch's {name} {have} satisfies '{spec or 'any'}'")
    return Check(
        "gpu-runtime-version",
        title,
        "fail",
        f"torch is built with {name} {have}, profile {profile.name} needs '{spec}'",
        profile.torch_install,
    )


@register
def check_gpu_visible(facts: Facts, profile: Profile) -> Check:
    title = "GPU visible to torch"
    t = facts.torch
    if profile.vendor == "cpu":
        return Check("gpu-visible", title, "skip", "the cpu profile needs no GPU")
    if not _torch_ok(facts) or not _build_matches(facts, profile):
        return Check("gpu-visible", title, "skip", "no matching torch build (see torch-build)")
    if t.cuda_available and t.devices:
        names = ", ".join(f"{d.index}: {d.name} ({d.arch})" for d in t.devices)
        return Check("gpu-visible", title, "ok", names)
    hidden = _hiding_vars(facts, profile.vendor)
    detail = "torch.cuda.is_available() is False" + (f" ({t.error})" if t.error else "")
    if hidden:
        return Check(
            "gpu-visible",
            title,
            "fail",
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
    return Check("gpu-visible", title, "fail", detail, fix)


# ---- devices and arch -------------------------------------------------------------------------


@register
def check_device_nodes(facts: Facts, profile: Profile) -> Check:
    title = "GPU device nodes for the platform"
    d, wsl = facts.devices, facts.system.wsl
    if profile.vendor == "cpu":
        return Check("device-nodes", title, "skip", "the cpu profile needs no device nodes")
    if wsl == "1":
        return Check(
            "device-nodes",
            title,
            "fail",
            "WSL1 has no GPU access",
            "in PowerShell: wsl --set-version <distro> 2 (list distros with `wsl -l -v`)",
        )
    if wsl == "2":
        render128 = "/dev/dri/renderD128" in d.render_nodes
        if profile.vendor == "cuda":
            if d.dxg:
                return Check(
                    "device-nodes",
                    title,
                    "ok",
                    "WSL2: /dev/dxg present (NVIDIA's WSL driver bridge)"
                    + ("" if d.wsl_libcuda else "; /usr/lib/wsl/lib/libcuda.so not found"),
                )
            return Check(
                "device-nodes",
                title,
                "fail",
                "WSL2 without /dev/dxg: no GPU paravirtualization",
                "install the NVIDIA Windows driver, run `wsl --update` and `wsl --shutdown` in PowerShell",
            )
        if d.dxg:
            model = "dxg model (/dev/dxg"
            model += ", plus /dev/dri/renderD128 as in the seed's older guide)" if render128 else ")"
            dxg_env = facts.env.get("HSA_ENABLE_DXG_DETECTION") == "1"
            if facts.torch.devices or dxg_env:
                return Check(
                    "device-nodes",
                    title,
                    "ok",
                    f"WSL2 {model}" + ("; HSA_ENABLE_DXG_DETECTION=1" if dxg_env else "; torch sees the GPU"),
                )
            return Check(
                "device-nodes",
                title,
                "warn",
                f"WSL2 {model}; current ROCm on WSL (librocdxg, ROCm >= 7.1) finds the GPU through "
                "/dev/dxg only with HSA_ENABLE_DXG_DETECTION=1, which is not set",
                "export HSA_ENABLE_DXG_DETECTION=1 (add it to ~/.bashrc)",
            )
        if render128:
            return Check(
                "device-nodes",
                title,
                "ok",
                "WSL2 renderD128 model (the seed's guide): /dev/dri/renderD128 present, no /dev/dxg",
            )
        return Check(
            "device-nodes",
            title,
            "fail",
            "WSL2 with neither /dev/dxg (current librocdxg model) nor /dev/dri/renderD128 (the seed's "
            "model): Windows does not pass the GPU through",
            "update the AMD Adrenalin driver on Windows, then run `wsl --update` and `wsl --shutdown` "
            "in PowerShell and reopen the distro",
        )
    if profile.vendor == "rocm":
        missing = ([] if d.kfd else ["/dev/kfd"]) + ([] if d.render_nodes else ["/dev/dri/renderD*"])
        if not missing:
            return Check(
                "device-nodes", title, "ok", f"native ROCm: /dev/kfd and {', '.join(d.render_nodes)}"
            )
        return Check(
            "device-nodes",
            title,
            "fail",
            f"native Linux ROCm needs {' and '.join(missing)}: not present",
            "install the amdgpu kernel driver (sudo amdgpu-install --usecase=dkms), reboot; in a "
            "container pass --device=/dev/kfd --device=/dev/dri",
        )
    ctl = any(n.endswith("/nvidiactl") for n in d.nvidia)
    gpus = [n for n in d.nvidia if re.search(r"/nvidia\d+$", n)]
    if ctl and gpus:
        return Check("device-nodes", title, "ok", f"NVIDIA: {', '.join(gpus)} and /dev/nvidiactl")
    return Check(
        "device-nodes",
        title,
        "fail",
        f"NVIDIA needs /dev/nvidia0.. and /dev/nvidiactl; found {', '.join(d.nvidia) or 'none'}",
        "install the NVIDIA driver (`nvidia-smi` must list the GPU); in a container run with --gpus all",
    )


@register
def check_arch_supported(facts: Facts, profile: Profile) -> Check:
    title = "GPU arch supported by the profile"
    found = facts.gpu_archs()
    if not found:
        if profile.vendor == "cpu":
            return Check("arch-supported", title, "ok", "no GPU detected; the cpu profile applies")
        return Check(
            "arch-supported",
            title,
            "skip",
            "no GPU arch detected (torch, KFD, rocminfo and nvidia-smi saw none)",
        )
    from sagebuild import profiles

    best, _ = profiles.match(found)
    unsupported = []
    for a in found:
        row = archs.ARCHS.get(a)
        if row is not None and row.pv is None:
            unsupported.append(f"{a} ({row.family}: {row.note})")
    if profile.vendor == "cpu":
        if best.vendor != "cpu":
            return Check(
                "arch-supported",
                title,
                "warn",
                f"GPU {', '.join(found)} present but the cpu profile is selected",
                f"sagebuild doctor --profile {best.name} (or --profile auto)",
            )
        if unsupported:
            return Check(
                "arch-supported",
                title,
                "warn",
                f"{'; '.join(unsupported)}: the quantized kernels cannot run on it; the cpu profile applies",
                "keep torch.nn.functional.scaled_dot_product_attention on this GPU",
            )
        return Check(
            "arch-supported",
            title,
            "ok",
            f"GPU {', '.join(found)} has no bundled profile; the cpu profile applies",
        )
    covered = [a for a in found if a in profile.archs]
    if covered and len(covered) == len(found):
        return Check(
            "arch-supported",
            title,
            "ok",
            f"{', '.join(found)} in {profile.name} ({', '.join(profile.archs)})",
        )
    if covered:
        visible_var = "HIP_VISIBLE_DEVICES" if profile.vendor == "rocm" else "CUDA_VISIBLE_DEVICES"
        keep = [str(d.index) for d in facts.torch.devices if d.arch in covered]
        return Check(
            "arch-supported",
            title,
            "warn",
            f"{', '.join(covered)} covered, {', '.join(a for a in found if a not in covered)} not: "
            "kernels built for this profile will not run on those GPUs",
            f"hide them: export {visible_var}={','.join(keep) or '0'}",
        )
    if unsupported:
        return Check(
            "arch-supported",
            title,
            "fail",
            f"{'; '.join(unsupported)}: no INT8 matrix units, the quantized kernels cannot run",
            "use torch.nn.functional.scaled_dot_product_attention on this GPU (nearest supported: "
            f"{'gfx1100, RDNA3' if profile.vendor == 'rocm' else 'sm80, Ampere'})",
        )
    fix = (
        f"sagebuild doctor --profile {best.name} (or --profile auto)"
        if best.vendor != "cpu"
        else "no bundled profile covers it; write one (see docs/profiles.md) and pass --profile FILE"
    )
    return Check(
        "arch-supported",
        title,
        "fail",
        f"detected {', '.join(found)}, profile {profile.name} covers {', '.join(profile.archs)}",
        fix,
    )


def _override_arch(value: str) -> Optional[str]:
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value)
    if not m:
        return None
    return f"gfx{int(m.group(1))}{int(m.group(2))}{int(m.group(3)):x}"


@register
def check_hsa_override(facts: Facts, profile: Profile) -> Check:
    title = "HSA_OVERRIDE_GFX_VERSION unset"
    val = facts.hsa_override
    if val is None:
        return Check("hsa-override", title, "ok", "not set: ROCm reports the real arch")
    fake = _override_arch(val)
    real = f"; the hardware is {', '.join(facts.kfd_archs)} (KFD)" if facts.kfd_archs else ""
    return Check(
        "hsa-override",
        title,
        "warn",
        f"HSA_OVERRIDE_GFX_VERSION={val} makes ROCm report {fake or 'another arch'}{real}: it masks "
        "the real arch, and kernels built for the masked one can fail or run wrong",
        "unset HSA_OVERRIDE_GFX_VERSION (and remove it from ~/.bashrc)",
    )


@register
def check_arch_env(facts: Facts, profile: Profile) -> Check:
    title = "Arch list env var includes the GPU"
    var = profile.build.arch_env
    if var is None:
        return Check("arch-env", title, "skip", "the cpu profile builds no GPU code")
    val = facts.env.get(var)
    if not val:
        return Check(
            "arch-env", title, "ok", f"{var} not set: sagebuild compile sets it from the detected arch"
        )
    listed = {archs.normalize(x) for x in re.split(r"[;,\s]+", val) if x}
    found = facts.gpu_archs()
    missing = [a for a in found if a not in listed]
    if not missing:
        return Check("arch-env", title, "ok", f"{var}={val}")
    want = [a for a in found if a in profile.archs] or found
    spelled = ";".join(archs.get(a).cuda_arch_list_entry or a if a in archs.ARCHS else a for a in want)
    return Check(
        "arch-env",
        title,
        "warn",
        f"{var}={val} leaves out {', '.join(missing)}: an extension built so fails with "
        "'invalid device function' (HIP) / 'no kernel image' (CUDA)",
        f"export {var}='{spelled}' (or unset {var}: sagebuild compile sets it)",
    )


# ---- Triton -----------------------------------------------------------------------------------


def _triton_fix(facts: Facts, profile: Profile) -> str:
    tri = facts.torch.triton
    if tri.torch_requirement:
        from packaging.requirements import Requirement

        req = Requirement(tri.torch_requirement)
        line = f"pip install '{req.name}{req.specifier}'"
        if req.name.startswith("pytorch-triton") and _index_url(profile):
            line += f" --index-url {_index_url(profile)}"
        others = [d for d in tri.distributions if d != req.name]
        return (f"pip uninstall -y {' '.join(others)} && " if others else "") + line
    if profile.vendor == "rocm" and _index_url(profile):
        return f"pip install pytorch-triton-rocm --index-url {_index_url(profile)}"
    return "pip install triton"


@register
def check_triton_import(facts: Facts, profile: Profile) -> Check:
    title = "Triton importable"
    tri = facts.torch.triton
    if facts.torch.error and not facts.torch.importable and not tri.distributions and not tri.error:
        return Check("triton-import", title, "skip", "the interpreter could not be probed (see torch-import)")
    if tri.importable:
        return Check(
            "triton-import", title, "ok", f"triton {tri.version} from distribution {tri.distribution or '?'}"
        )
    status = "warn" if profile.vendor == "cpu" else "fail"
    return Check(
        "triton-import",
        title,
        status,
        f"import triton failed: {tri.error or 'not installed'}"
        + (" (the cpu profile uses it only for the interpreter tests)" if status == "warn" else ""),
        _triton_fix(facts, profile),
    )


@register
def check_triton_pin(facts: Facts, profile: Profile) -> Check:
    title = "Triton satisfies torch's pin"
    tri = facts.torch.triton
    if not _torch_ok(facts):
        return Check("triton-pin", title, "skip", "torch is not importable (see torch-import)")
    if tri.torch_requirement is None:
        return Check(
            "triton-pin",
            title,
            "skip",
            f"torch {facts.torch.version} declares no Triton requirement (CPU wheels do not); "
            "nothing to compare",
        )
    if tri.requirement_applies is False:
        return Check(
            "triton-pin",
            title,
            "skip",
            f"torch's requirement '{tri.torch_requirement}' does not apply here (markers)",
        )
    if tri.satisfied:
        extra = [d for d in tri.distributions if d != tri.distribution]
        if extra:
            return Check(
                "triton-pin",
                title,
                "warn",
                f"{tri.distribution} {tri.distribution_version} satisfies '{tri.torch_requirement}', "
                f"but {', '.join(extra)} also installs the `triton` module: whichever was installed "
                "last wins",
                f"pip uninstall -y {' '.join(extra)}",
            )
        return Check(
            "triton-pin",
            title,
            "ok",
            f"{tri.distribution} {tri.distribution_version} satisfies '{tri.torch_requirement}'",
        )
    if tri.satisfied is None:
        return Check(
            "triton-pin",
            title,
            "warn",
            f"cannot read the version of {tri.distribution} to compare with '{tri.torch_requirement}'",
            _triton_fix(facts, profile),
        )
    have = f"{tri.distribution} {tri.distribution_version}" if tri.distribution else "no distribution"
    return Check(
        "triton-pin",
        title,
        "fail",
        f"torch {facts.torch.version} requires '{tri.torch_requirement}'; `import triton` comes from {have}",
        _triton_fix(facts, profile),
    )


@register
def check_triton_version(facts: Facts, profile: Profile) -> Check:
    title = "Triton version in the profile's range"
    tri = facts.torch.triton
    version = tri.version or tri.distribution_version
    if not profile.versions.triton:
        return Check("triton-version", title, "skip", f"profile {profile.name} sets no Triton range")
    if version is None:
        return Check("triton-version", title, "skip", "Triton is not installed (see triton-import)")
    ok = _in_range(version, profile.versions.triton)
    if ok:
        return Check("triton-version", title, "ok", f"triton {version} satisfies '{profile.versions.triton}'")
    return Check(
        "triton-version",
        title,
        "fail",
        f"triton {version} is outside {profile.name}'s range '{profile.versions.triton}'",
        f"install the torch the profile names (it brings its Triton): {profile.torch_install}",
    )


# ---- compilers and build resources -------------------------------------------------------------


@register
def check_nvcc(facts: Facts, profile: Profile) -> Check:
    title = "nvcc matches torch's CUDA major"
    t, nvcc = facts.torch, facts.tool("nvcc")
    if not _torch_ok(facts) or t.build != "cuda":
        return Check("nvcc", title, "skip", "torch is not a CUDA build: nvcc is not used")
    if not nvcc.present:
        return Check(
            "nvcc",
            title,
            "warn",
            "no nvcc: the C++ quantization extension cannot be built (the Triton kernels need none)",
            f"install the CUDA {_major(t.cuda)} toolkit (e.g. apt install cuda-toolkit-"
            f"{(t.cuda or '12.0').replace('.', '-')}) and export CUDA_HOME=/usr/local/cuda-{t.cuda}",
        )
    have, want = _major(nvcc.version), _major(t.cuda)
    if have is not None and have == want:
        return Check("nvcc", title, "ok", f"nvcc {nvcc.version} ({nvcc.path}), torch CUDA {t.cuda}")
    return Check(
        "nvcc",
        title,
        "fail",
        f"nvcc {nvcc.version} ({nvcc.path}) but torch is built with CUDA {t.cuda}: the extension "
        "fails to build or load with a mismatched major",
        f"export CUDA_HOME=/usr/local/cuda-{t.cuda} PATH=/usr/local/cuda-{t.cuda}/bin:$PATH "
        f"(install that toolkit if missing), or install the torch built for CUDA {have}",
    )


@register
def check_hipcc(facts: Facts, profile: Profile) -> Check:
    title = "hipcc matches torch's HIP major"
    t, hipcc = facts.torch, facts.tool("hipcc")
    if not _torch_ok(facts) or t.build != "rocm":
        return Check("hipcc", title, "skip", "torch is not a ROCm build: hipcc is not used")
    if not hipcc.present:
        return Check(
            "hipcc",
            title,
            "warn",
            "no hipcc: the C++ quantization extension cannot be built (the Triton kernels need no SDK)",
            f"install ROCm {t.hip and '.'.join(t.hip.split('.')[:2])}'s hipcc (sudo apt install "
            "rocm-hip-sdk from repo.radeon.com) and export ROCM_HOME=/opt/rocm",
        )
    have, want = _major(hipcc.version), _major(t.hip)
    if have is not None and have == want:
        return Check("hipcc", title, "ok", f"hipcc HIP {hipcc.version} ({hipcc.path}), torch HIP {t.hip}")
    return Check(
        "hipcc",
        title,
        "fail",
        f"hipcc is HIP {hipcc.version} ({hipcc.path}) but torch is built with HIP {t.hip}",
        f"export ROCM_HOME=/opt/rocm-{'.'.join((t.hip or '').split('.')[:2])} (a ROCm of torch's "
        "major), or remove the old hipcc from PATH",
    )


@register
def check_cxx(facts: Facts, profile: Profile) -> Check:
    title = "C++ compiler present"
    cxx = facts.tool("c++")
    if cxx.present and not cxx.error:
        return Check("cxx", title, "ok", f"{cxx.version} ({cxx.path})")
    if cxx.present:
        return Check(
            "cxx",
            title,
            "fail",
            f"{cxx.path} does not run: {cxx.error}",
            "sudo apt install --reinstall build-essential",
        )
    return Check(
        "cxx",
        title,
        "fail",
        "no c++/g++/clang++ on PATH: the extension cannot be built and Triton cannot compile its launcher",
        "sudo apt install build-essential",
    )


@register
def check_ninja(facts: Facts, profile: Profile) -> Check:
    title = "ninja present"
    ninja = facts.tool("ninja")
    if ninja.present and not ninja.error:
        return Check("ninja", title, "ok", f"ninja {ninja.version} ({ninja.path})")
    return Check(
        "ninja",
        title,
        "fail",
        "ninja not found on PATH: torch's extension builder needs it (without it builds are serial "
        "and slow, or fail)"
        if not ninja.present
        else f"{ninja.path} does not run: {ninja.error}",
        f"{facts.python.executable or 'python'} -m pip install ninja",
    )


@register
def check_build_memory(facts: Facts, profile: Profile) -> Check:
    title = "Memory for a build"
    s, b = facts.system, profile.build
    if s.mem_total_gb is None:
        return Check("build-memory", title, "skip", "memory size unknown (no proc/meminfo under the root)")
    wsl_fix = (
        "raise the WSL VM's memory: in %UserProfile%\\.wslconfig set [wsl2] memory=16GB, then "
        "`wsl --shutdown` in PowerShell"
    )
    if s.mem_total_gb < b.min_mem_gb:
        return Check(
            "build-memory",
            title,
            "fail",
            f"{s.mem_total_gb:.1f} GB RAM, profile {profile.name} needs {b.min_mem_gb:g} GB to build",
            wsl_fix
            if s.wsl == "2"
            else f"add swap (sudo fallocate -l {int(b.min_mem_gb)}G /swapfile && sudo mkswap /swapfile && "
            "sudo swapon /swapfile) or build on a larger machine",
        )
    avail = s.mem_available_gb if s.mem_available_gb is not None else s.mem_total_gb
    if avail < b.mem_per_job_gb:
        return Check(
            "build-memory",
            title,
            "warn",
            f"{avail:.1f} GB free of {s.mem_total_gb:.1f} GB, one compile job takes "
            f"~{b.mem_per_job_gb:g} GB: the build will swap or be killed",
            "close memory-hungry programs and build with MAX_JOBS=1"
            + (f"; or {wsl_fix}" if s.wsl == "2" else ""),
        )
    jobs = max(1, min(b.max_jobs, int(avail // b.mem_per_job_gb)))
    return Check(
        "build-memory",
        title,
        "ok",
        f"{avail:.1f} GB free of {s.mem_total_gb:.1f} GB: room for ~{jobs} compile jobs",
    )


@register
def check_max_jobs(facts: Facts, profile: Profile) -> Check:
    title = "MAX_JOBS fits memory"
    val = facts.env.get("MAX_JOBS")
    if val is None:
        return Check("max-jobs", title, "ok", "MAX_JOBS not set: sagebuild compile picks it from free memory")
    if not val.strip().isdigit() or int(val) < 1:
        return Check(
            "max-jobs",
            title,
            "fail",
            f"MAX_JOBS={val!r} is not a positive integer",
            "export MAX_JOBS=2 (or unset MAX_JOBS)",
        )
    avail = facts.system.mem_available_gb
    need = int(val) * profile.build.mem_per_job_gb
    if avail is not None and need > avail:
        fit = max(1, int(avail // profile.build.mem_per_job_gb))
        return Check(
            "max-jobs",
            title,
            "warn",
            f"MAX_JOBS={val} × ~{profile.build.mem_per_job_gb:g} GB per job > {avail:.1f} GB free: the "
            "machine can freeze while compiling",
            f"export MAX_JOBS={fit}",
        )
    return Check("max-jobs", title, "ok", f"MAX_JOBS={val}")


@register
def check_build_disk(facts: Facts, profile: Profile) -> Check:
    title = "Free disk for a build"
    free = facts.system.disk_free_gb
    need = profile.build.min_free_disk_gb
    if free is None:
        return Check("build-disk", title, "skip", "free disk unknown")
    if free >= need:
        return Check("build-disk", title, "ok", f"{free:.1f} GB free at {facts.system.disk_path}")
    return Check(
        "build-disk",
        title,
        "fail",
        f"{free:.1f} GB free at {facts.system.disk_path}, a build needs {need:g} GB",
        f"free at least {need - free:.1f} GB there (e.g. `pip cache purge`, remove old venvs)",
    )


# ---- conflicts -------------------------------------------------------------------------------


@register
def check_sageattention_installed(facts: Facts, profile: Profile) -> Check:
    title = "No conflicting sageattention"
    c = facts.conflicts
    if c.sageattention is None:
        return Check("sageattention-installed", title, "ok", "no `sageattention` distribution installed")
    return Check(
        "sageattention-installed",
        title,
        "warn",
        f"sageattention {c.sageattention} is installed ({c.sageattention_location}): code that imports "
        "`sageattention` gets that build, not sagebuild's kernels",
        f"{facts.python.executable or 'python'} -m pip uninstall -y sageattention "
        "(sagebuild offers `from sagebuild import sageattn` with the same signature)",
    )


@register
def check_shadowing(facts: Facts, profile: Profile) -> Check:
    title = "No shadowing source folder"
    sh = facts.conflicts.shadowing
    if not sh:
        return Check(
            "shadowing", title, "ok", f"no sageattention/ or sagebuild/ package folder in {facts.cwd}"
        )
    what = "; ".join(
        f"./{s.name}/ shadows "
        + (
            f"the installed {s.name} at {s.installed_at}"
            if s.installed_at
            else f"the {s.name} import (not installed)"
        )
        for s in sh
    )
    return Check(
        "shadowing",
        title,
        "fail",
        f'{what}: Python imports the folder in the working directory first (errors like "cannot '
        "import name '_fused' from partially initialized module\")",
        "run from another directory (cd ..), or rename the folder: "
        + ", ".join(f"mv {s.name} {s.name}-src" for s in sh),
    )


# ---- the built extension ---------------------------------------------------------------------


@register
def check_extension(facts: Facts, profile: Profile) -> Check:
    """What `sagebuild compile` built (xformers.info style), and whether it still fits."""
    title = "Built extension"
    ext = facts.extension
    if not facts.torch.importable:
        return Check("extension", title, "skip", "torch is not importable")
    compile_cmd = f"sagebuild compile --profile {profile.name}"
    if not ext.built:
        return Check(
            "extension", title, "skip",
            f"not built yet in {ext.dir} (optional: attention quantizes with Triton unless asked for "
            "quantization_backend='ext')", compile_cmd,
        )
    info = ext.info or {}
    t = info.get("torch", {})
    summary = (
        f"built {info.get('built_at', '?')} for {', '.join(info.get('archs') or ['cpu'])} "
        f"(MAX_JOBS={info.get('jobs', '?')}, torch {t.get('version', '?')}, {info.get('seconds', '?')} s); "
        f"sha256 {str(info.get('sha256', '?'))[:12]}…"
    )
    if not ext.sha256_ok:
        return Check(
            "extension", title, "fail",
            f"{summary}: the library in {ext.dir} is missing or changed since it was verified",
            compile_cmd,
        )
    built_archs = set(info.get("archs") or [])
    gpus = [a for a in facts.gpu_archs() if a in archs.ARCHS and archs.ARCHS[a].vendor == profile.vendor]
    missing = [a for a in gpus if built_archs and a not in built_archs]
    if missing:
        return Check(
            "extension", title, "warn",
            f"{summary}; this machine's {', '.join(missing)} is not in the build (the runtime falls back "
            "to Triton's quantization for it)",
            f"sagebuild compile --arch {','.join(sorted(built_archs | set(missing)))}",
        )
    return Check("extension", title, "ok", summary)


# ---- the verdict ------------------------------------------------------------------------------


def verdict(facts: Facts, profile: Profile, why: str, checks: list[Check]) -> str:
    """One honest sentence or three on where this machine stands, for the end of the report."""
    fails = [c for c in checks if c.status == "fail"]
    warns = [c for c in checks if c.status == "warn"]
    gpus = facts.gpu_archs()
    if profile.vendor == "cpu":
        if gpus:
            head = f"GPU {', '.join(gpus)} found, but the cpu profile is in use ({why}). "
        else:
            head = (
                "No GPU found (no /dev/kfd, /dev/dxg or /dev/nvidia*, and torch "
                f"{facts.torch.version or '(not importable)'} sees none); the cpu profile applies ({why}): "
                "the golden model and the CPU extension only. "
            )
        tail = (
            "For a GPU: install its driver, then the torch build its profile names "
            "(`sagebuild profiles` lists them; `sagebuild profiles show rdna4-rocm6` for an RX 9070 XT)."
        )
    else:
        head = f"Profile {profile.name} ({why}). "
        tail = ""
    if fails:
        return (
            head
            + (
                f"{len(fails)} check(s) failed ({', '.join(c.id for c in fails)}): apply the fixes "
                "in order and run `sagebuild doctor` again. " + tail
            ).rstrip()
        )
    if warns:
        return (
            head
            + (f"Usable, with {len(warns)} warning(s) ({', '.join(c.id for c in warns)}). " + tail).rstrip()
        )
    nxt = f"Ready. Next: sagebuild compile --profile {profile.name}. "
    return (head + nxt + tail).rstrip()
