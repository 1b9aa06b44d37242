"""Checks on the GPU as the kernel drivers show it: device nodes, the arch, and the arch variables."""

from __future__ import annotations

import re

from sagebuild import archs, profiles
from sagebuild.checks.helpers import VISIBLE_VARS
from sagebuild.checks.registry import Verdict, check, fail, ok, skip, warn
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


@check("device-nodes", "GPU device nodes for the platform")
def check_device_nodes(facts: Facts, profile: Profile) -> Verdict:
    d, wsl = facts.devices, facts.system.wsl
    if profile.vendor == "cpu":
        return skip("the cpu profile needs no device nodes")
    if wsl == "1":
        return fail(
            "WSL1 has no GPU access",
            "in PowerShell: wsl --set-version <distro> 2 (list distros with `wsl -l -v`)",
        )
    if wsl == "2":
        render128 = "/dev/dri/renderD128" in d.render_nodes
        if profile.vendor == "cuda":
            if d.dxg:
                return ok(
                    "WSL2: /dev/dxg present (NVIDIA's WSL driver bridge)"
                    + ("" if d.wsl_libcuda else "; /usr/lib/wsl/lib/libcuda.so not found")
                )
            return fail(
                "WSL2 without /dev/dxg: no GPU paravirtualization",
                "install the NVIDIA Windows driver, run `wsl --update` and `wsl --shutdown` in PowerShell",
            )
        if d.dxg:
            model = "dxg model (/dev/dxg"
            model += ", plus /dev/dri/renderD128 as in the seed's older guide)" if render128 else ")"
            dxg_env = facts.env.get("HSA_ENABLE_DXG_DETECTION") == "1"
            if facts.torch.devices or dxg_env:
                return ok(
                    f"WSL2 {model}" + ("; HSA_ENABLE_DXG_DETECTION=1" if dxg_env else "; torch sees the GPU")
                )
            return warn(
                f"WSL2 {model}; current ROCm on WSL (librocdxg, ROCm >= 7.1) finds the GPU through "
                "/dev/dxg only with HSA_ENABLE_DXG_DETECTION=1, which is not set",
                "export HSA_ENABLE_DXG_DETECTION=1 (add it to ~/.bashrc)",
            )
        if render128:
            return ok("WSL2 renderD128 model (the seed's guide): /dev/dri/renderD128 present, no /dev/dxg")
        return fail(
            "WSL2 with neither /dev/dxg (current librocdxg model) nor /dev/dri/renderD128 (the seed's "
            "model): Windows does not pass the GPU through",
            "update the AMD Adrenalin driver on Windows, then run `wsl --update` and `wsl --shutdown` "
            "in PowerShell and reopen the distro",
        )
    if profile.vendor == "rocm":
        missing = ([] if d.kfd else ["/dev/kfd"]) + ([] if d.render_nodes else ["/dev/dri/renderD*"])
        if not missing:
            return ok(f"native ROCm: /dev/kfd and {', '.join(d.render_nodes)}")
        return fail(
            f"native Linux ROCm needs {' and '.join(missing)}: not present",
            "install the amdgpu kernel driver (sudo amdgpu-install --usecase=dkms), reboot; in a "
            "container pass --device=/dev/kfd --device=/dev/dri",
        )
    ctl = any(n.endswith("/nvidiactl") for n in d.nvidia)
    gpus = [n for n in d.nvidia if re.search(r"/nvidia\d+$", n)]
    if ctl and gpus:
        return ok(f"NVIDIA: {', '.join(gpus)} and /dev/nvidiactl")
    return fail(
        f"NVIDIA needs /dev/nvidia0.. and /dev/nvidiactl; found {', '.join(d.nvidia) or 'none'}",
        "install the NVIDIA driver (`nvidia-smi` must list the GPU); in a container run with --gpus all",
    )


@check("arch-supported", "GPU arch supported by the profile")
def check_arch_supported(facts: Facts, profile: Profile) -> Verdict:
    found = facts.gpu_archs()
    if not found:
        if profile.vendor == "cpu":
            return ok("no GPU detected; the cpu profile applies")
        return skip("no GPU arch detected (torch, KFD, rocminfo and nvidia-smi saw none)")
    best, _ = profiles.match(found)
    use_best = f"sagebuild doctor --profile {best.name} (or --profile auto)"
    known = [(a, archs.ARCHS[a]) for a in found if a in archs.ARCHS]
    unsupported = [f"{a} ({row.family}: {row.note})" for a, row in known if row.pv is None]
    if profile.vendor == "cpu":
        if best.vendor != "cpu":
            return warn(f"GPU {', '.join(found)} present but the cpu profile is selected", use_best)
        if unsupported:
            return warn(
                f"{'; '.join(unsupported)}: the quantized kernels cannot run on it; the cpu profile applies",
                "keep torch.nn.functional.scaled_dot_product_attention on this GPU",
            )
        return ok(f"GPU {', '.join(found)} has no bundled profile; the cpu profile applies")
    covered = [a for a in found if a in profile.archs]
    if covered and len(covered) == len(found):
        return ok(f"{', '.join(found)} in {profile.name} ({', '.join(profile.archs)})")
    if covered:
        keep = [str(d.index) for d in facts.torch.devices if d.arch in covered]
        return warn(
            f"{', '.join(covered)} covered, {', '.join(a for a in found if a not in covered)} not: "
            "kernels built for this profile will not run on those GPUs",
            f"hide them: export {VISIBLE_VARS[profile.vendor][0]}={','.join(keep) or '0'}",
        )
    if unsupported:
        return fail(
            f"{'; '.join(unsupported)}: no INT8 matrix units, the quantized kernels cannot run",
            "use torch.nn.functional.scaled_dot_product_attention on this GPU (nearest supported: "
            f"{'gfx1100, RDNA3' if profile.vendor == 'rocm' else 'sm80, Ampere'})",
        )
    fix = (
        use_best
        if best.vendor != "cpu"
        else "no bundled profile covers it; write one (see docs/profiles.md) and pass --profile FILE"
    )
    return fail(f"detected {', '.join(found)}, profile {profile.name} covers {', '.join(profile.archs)}", fix)


@check("hsa-override", "HSA_OVERRIDE_GFX_VERSION unset")
def check_hsa_override(facts: Facts, profile: Profile) -> Verdict:
    val = facts.hsa_override
    if val is None:
        return ok("not set: ROCm reports the real arch")
    fake = archs.decode_hsa_override(val)
    real = f"; the hardware is {', '.join(facts.kfd_archs)} (KFD)" if facts.kfd_archs else ""
    return warn(
        f"HSA_OVERRIDE_GFX_VERSION={val} makes ROCm report {fake or 'another arch'}{real}: it masks "
        "the real arch, and kernels built for the masked one can fail or run wrong",
        "unset HSA_OVERRIDE_GFX_VERSION (and remove it from ~/.bashrc)",
    )


# Names torch's extension builder also takes in TORCH_CUDA_ARCH_LIST (it expands them itself).
_TORCH_NAMED_CUDA_ARCHS = (
    "kepler",
    "kepler+tesla",
    "maxwell",
    "maxwell+tegra",
    "pascal",
    "volta",
    "turing",
    "ampere",
    "ada",
    "hopper",
)
_ARCH_SHAPE = {"rocm": re.compile(r"gfx[0-9a-f]{3,4}"), "cuda": re.compile(r"sm\d{2,3}")}


def _names_an_arch(entry: str, vendor: str) -> bool:
    """Whether an arch list entry names an arch of ``vendor`` (a table row, or a name shaped like one)."""
    if vendor == "cuda" and entry.lower() in _TORCH_NAMED_CUDA_ARCHS:
        return True
    name = archs.normalize(entry)
    known = archs.ARCHS.get(name)
    return known.vendor == vendor if known else bool(_ARCH_SHAPE[vendor].fullmatch(name))


@check("arch-env", "Arch list env var includes the GPU")
def check_arch_env(facts: Facts, profile: Profile) -> Verdict:
    var = profile.build.arch_env
    if var is None:
        return skip("the cpu profile builds no GPU code")
    val = facts.env.get(var)
    if not val:
        return ok(f"{var} not set: sagebuild compile sets it from the detected arch")
    entries = [x for x in re.split(r"[;,\s]+", val) if x]
    found = facts.gpu_archs()
    want = [a for a in found if a in profile.archs] or found or list(profile.archs)
    cuda = {a.name for a in archs.ARCHS.values() if a.vendor == "cuda"}
    spelled = ";".join(archs.arch_list_entry(a) if a in cuda else a for a in want)
    fix = f"export {var}='{spelled}' (or unset {var}: sagebuild compile sets it)"
    bad = [x for x in entries if not _names_an_arch(x, profile.vendor)]
    if bad:
        return warn(
            f"{var}={val}: {', '.join(repr(b) for b in bad)} names no {profile.vendor} GPU arch; a build "
            f"that reads {var} (pip installing an extension, setup.py) fails or targets no GPU",
            fix,
        )
    listed = {archs.normalize(x) for x in entries}
    named = {x.split("+")[0].lower() for x in entries if x.lower() in _TORCH_NAMED_CUDA_ARCHS}
    listed |= {a.name for a in archs.ARCHS.values() if a.family.lower() in named}  # "Hopper" is sm90
    missing = [a for a in found if a not in listed]
    if not missing:
        return ok(f"{var}={val}")
    return warn(
        f"{var}={val} leaves out {', '.join(missing)}: an extension built so fails with "
        "'invalid device function' (HIP) / 'no kernel image' (CUDA)",
        fix,
    )
