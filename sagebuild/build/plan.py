"""The build plan: jobs, archs, env, commands, output paths. It reads only probed facts and the
profile, so a plan can be made for a system image (``--root``) and tested with fake machines."""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

from sagebuild import archs, probe, profiles
from sagebuild.build import paths
from sagebuild.build.jobs import jobs_that_fit, overfill, parse_max_jobs
from sagebuild.errors import SagebuildError
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile

# Sources of the bundled extension: CPU ops always, the CUDA/HIP file on GPU builds.
CPU_SOURCES = ("ops_cpu.cpp",)
GPU_SOURCES = ("ops_cuda.cu",)
EXPECTED_OPS = ("k_mean", "quant_per_block_int8", "quant_v_fp8_per_channel")
_HSA_OVERRIDE = "HSA_OVERRIDE_GFX_VERSION"
SPEC_FILE = "spec.json"  # what the build subprocess compiles, written into the ninja tree


@dataclass
class BuildPlan:
    """Everything a build needs, decided up front and printable as-is (``--dry-run``)."""

    profile: str
    vendor: str  # "rocm" | "cuda" | "cpu"
    mode: str  # "bundled" | "source"
    jobs: int
    jobs_reason: str
    archs: list[str]
    arch_reason: str
    arch_env: Optional[str]  # PYTORCH_ROCM_ARCH | TORCH_CUDA_ARCH_LIST | None
    env: dict[str, str]  # set on top of os.environ for the build subprocess
    with_gpu: bool  # compile the CUDA/HIP sources too
    python: str
    ext_dir: str
    build_dir: str  # ninja tree (bundled) or the external source dir
    output: str  # the verified artefact's final path (bundled) or the source dir (source)
    sources: list[str] = field(default_factory=list)
    command: list[str] = field(default_factory=list)
    cwd: Optional[str] = None
    aot: list[tuple[str, str]] = field(default_factory=list)  # (variant, arch) to compile ahead of time
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # blockers: compile() refuses to start
    torch_version: Optional[str] = None
    torch_build: Optional[str] = None

    def commands(self) -> list[str]:
        """Human-readable commands of the plan (shell-quoted build command plus the AOT step)."""
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        cd = f"cd {shlex.quote(self.cwd)} && " if self.cwd else ""
        aot = [f"sagebuild.attention.aot.compile_variant({v!r}, {a!r})" for v, a in self.aot]
        return [f"{cd}{env} {shlex.join(self.command)}".strip(), *aot]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aot"] = [{"variant": v, "arch": a} for v, a in self.aot]
        d["commands"] = self.commands()
        return d


def _available_mem_gb(facts: Facts) -> tuple[Optional[float], str]:
    mem = facts.system.mem_available_gb
    if mem is not None:
        return float(mem), "probe"
    try:
        import psutil

        return psutil.virtual_memory().available / 2**30, "psutil"
    except Exception:  # psutil is a dependency, but a broken /proc must not stop planning
        return None, "unknown"


def plan_jobs(
    profile: Profile, facts: Facts, jobs: Optional[int] = None, env: Optional[Mapping[str, str]] = None
) -> tuple[int, str]:
    """``MAX_JOBS`` and why: ``--jobs`` > ``MAX_JOBS`` env > min(memory/per-job, cores, profile cap)."""
    env = os.environ if env is None else env
    if jobs is not None:
        if jobs < 1:
            raise SagebuildError(f"--jobs must be at least 1, got {jobs}", fix="pass --jobs 1 or more")
        return jobs, f"--jobs {jobs} given on the command line"
    raw = env.get("MAX_JOBS")
    if raw:
        return parse_max_jobs(raw), f"MAX_JOBS={raw} set in the environment"
    per_job = profile.build.mem_per_job_gb
    cap = profile.build.max_jobs
    cores = facts.system.cpu_count or os.cpu_count() or 1
    mem, src = _available_mem_gb(facts)
    if mem is None:
        n = max(1, min(2, cores, cap))
        return n, f"available memory unknown: {n} job(s) to stay safe ({cores} cores, profile cap {cap})"
    by_mem = jobs_that_fit(mem, per_job)
    n = max(1, min(by_mem, cores, cap))
    limit = "memory" if n == by_mem else ("cores" if n == cores else "the profile cap")
    reason = (
        f"{mem:.1f} GiB available ({src}) / {per_job:g} GiB per job = {by_mem}, {cores} cores, "
        f"profile cap {cap} → {n} (limited by {limit})"
    )
    if mem < per_job:
        reason += f"; less than one job's {per_job:g} GiB is free: the build may be killed for memory"
    return n, reason


def parse_arch_list(text: str, vendor: str) -> list[str]:
    """``--arch`` value ("gfx1201,gfx1100" / "9.0;8.9" / "sm90") → canonical, de-duplicated names."""
    out: list[str] = []
    for tok in re.split(r"[,;\s]+", text.strip()):
        if not tok:
            continue
        try:
            arch = archs.get(tok)
        except archs.UnknownArchError as e:
            raise SagebuildError(str(e), fix="pass arch names such as gfx1201, gfx1100, sm90, 9.0") from None
        if vendor != "cpu" and arch.vendor != vendor:
            raise SagebuildError(
                f"--arch {tok} is a {arch.vendor} arch but the profile is for {vendor}",
                fix=f"pass {vendor} archs or pick a {arch.vendor} profile",
            )
        if arch.name not in out:
            out.append(arch.name)
    if not out:
        raise SagebuildError(f"--arch {text!r} names no arch", fix="pass e.g. --arch gfx1201 or --arch 9.0")
    return out


def _dedup(names: list[str], vendor: str) -> list[str]:
    """``vendor``'s archs among ``names`` (table entries, or unknown names that look like one), once each."""
    out: list[str] = []
    for n in filter(None, names):
        name = archs.normalize(n)
        known = archs.ARCHS.get(name)
        ours = known.vendor == vendor if known else name.startswith("gfx" if vendor == "rocm" else "sm")
        if ours and name not in out:
            out.append(name)
    return out


def plan_archs(
    profile: Profile, facts: Facts, arch: Optional[str] = None, env: Optional[Mapping[str, str]] = None
) -> tuple[list[str], str, list[str]]:
    """(arch list, why, warnings) for the profile's vendor."""
    vendor = profile.vendor
    warnings: list[str] = []
    if vendor == "cpu":
        if arch:
            warnings.append(f"--arch {arch} ignored: profile {profile.name} builds the CPU variant only")
        return [], f"profile {profile.name} is CPU-only: no GPU code is compiled", warnings
    if arch:
        return parse_arch_list(arch, vendor), "--arch given on the command line", warnings

    override = facts.env.get(_HSA_OVERRIDE) or (env or {}).get(_HSA_OVERRIDE)
    torch_archs = [d.arch for d in facts.torch.devices if d.arch]
    candidates: list[tuple[str, list[str]]]
    if vendor == "rocm":
        candidates = [
            ("the visible devices' gcnArchName (torch)", torch_archs),
            ("KFD sysfs gfx_target_version", facts.kfd_archs),
            ("rocminfo", facts.rocminfo_archs),
        ]
    else:
        candidates = [
            ("the devices' compute capability (torch)", torch_archs),
            ("nvidia-smi", facts.nvidia_smi_archs),
        ]
    found, source = next(((f, src) for src, names in candidates if (f := _dedup(names, vendor))), ([], ""))

    if vendor == "rocm" and override:
        shown = archs.decode_hsa_override(override)
        real = _dedup(facts.kfd_archs, vendor)
        from_kfd = f" ({', '.join(real)}, from KFD sysfs)" if real else ""
        warnings.append(
            f"{_HSA_OVERRIDE}={override} is set: the ROCm runtime reports {shown or 'a different arch'} "
            f"instead of the GPU's real arch{from_kfd}; kernels are built for the arch the runtime reports. "
            "Unset it if your ROCm supports the card natively (RDNA4 needs ROCm ≥ 6.4), then rebuild"
        )
        if shown and source != candidates[0][0]:
            # Without torch's view, the runtime's arch under the override is the override itself.
            found, source = [shown], f"{_HSA_OVERRIDE}={override}"

    if found:
        unknown = [a for a in found if a not in archs.ARCHS]
        if unknown:
            warnings.append(
                f"arch(s) {', '.join(unknown)} are not in sagebuild's arch table: "
                "the build targets them, but no kernel path is known to work there"
            )
        reason = f"from {source}" + (" (several different GPUs)" if len(found) > 1 else "")
        return found, reason, warnings
    return list(profile.archs), f"no GPU detected: profile {profile.name}'s arch list", warnings


def arch_env_value(vendor: str, names: list[str]) -> str:
    """The value of ``PYTORCH_ROCM_ARCH`` (``gfx1201;gfx1100``) or ``TORCH_CUDA_ARCH_LIST`` (``9.0;8.9``)."""
    return ";".join(archs.arch_list_entry(n) if vendor == "cuda" else n for n in names)


def make_plan(
    profile: Profile,
    facts: Facts,
    jobs: Optional[int] = None,
    arch: Optional[str] = None,
    source: Optional[Path | str] = None,
    env: Optional[Mapping[str, str]] = None,
) -> BuildPlan:
    """Decide jobs, archs, env, command and paths for the profile on the probed machine."""
    env = os.environ if env is None else env
    n_jobs, jobs_reason = plan_jobs(profile, facts, jobs, env)
    arch_list, arch_reason, warnings = plan_archs(profile, facts, arch, env)
    if jobs is not None or env.get("MAX_JOBS"):  # a count the user chose: the doctor's max-jobs rule applies
        given = f"--jobs {jobs}" if jobs is not None else f"MAX_JOBS={env['MAX_JOBS']}"
        too_many = overfill(n_jobs, _available_mem_gb(facts)[0], profile.build.mem_per_job_gb, given)
        if too_many:
            warnings.append("; ".join(too_many))
    problems: list[str] = []

    torch_version, torch_build = facts.torch.version, facts.torch.build
    if not facts.torch.importable:
        problems.append(
            "torch is not importable in the target interpreter: the extension needs it to build "
            f"(install it: {profile.torch_install})"
        )
    elif profile.vendor != "cpu" and torch_build and torch_build != profile.vendor:
        problems.append(
            f"profile {profile.name} builds {profile.vendor} code but this torch is a "
            f"{torch_build} build ({torch_version}); install the matching torch: "
            f"{profile.torch_install}"
        )

    with_gpu = profile.vendor != "cpu"
    build_env: dict[str, str] = {"MAX_JOBS": str(n_jobs)}
    arch_env = profile.build.arch_env if with_gpu else None
    if arch_env and arch_list:
        build_env[arch_env] = arch_env_value(profile.vendor, arch_list)

    py = facts.python.executable or sys.executable
    base = paths.ext_dir(torch_version or "unknown", facts.python.version, env, facts.python.prefix)
    # what both kinds of build share
    common: dict[str, Any] = dict(
        profile=profile.name, vendor=profile.vendor, jobs=n_jobs, jobs_reason=jobs_reason,
        archs=arch_list, arch_reason=arch_reason, arch_env=arch_env, env=build_env, with_gpu=with_gpu,
        python=py, ext_dir=str(base), warnings=warnings, problems=problems,
        torch_version=torch_version, torch_build=torch_build,
    )  # fmt: skip
    if source is not None:
        src = Path(source).expanduser().resolve()
        if not (src / "setup.py").is_file():
            raise SagebuildError(
                f"--source {src}: no setup.py there",
                fix="point --source at a torch-extension source tree with a setup.py "
                "(e.g. a SageAttention checkout)",
            )
        return BuildPlan(
            **common,
            mode="source",
            build_dir=str(src),
            output=str(src),
            command=[py, "setup.py", "build_ext", "--inplace"],
            cwd=str(src),
        )

    csrc, tree = paths.csrc_dir(), paths.tree_dir(base)
    # every variant the arch table says each arch runs, beside the profile's (RDNA4's FP8, say);
    # a CPU profile has no archs, so no AOT step
    aot = [(v, a) for a in arch_list for v in dict.fromkeys([*profile.kernels, *archs.variants(a)])]
    return BuildPlan(
        **common,
        mode="bundled",
        build_dir=str(tree),
        output=str(paths.current_lib(base)),
        sources=[str(csrc / s) for s in CPU_SOURCES + (GPU_SOURCES if with_gpu else ())],
        command=[py, "-m", "sagebuild.build.ext_builder", str(tree / SPEC_FILE)],
        aot=aot,
    )


def plan_for_machine(
    profile_spec: str,
    root: Path = Path("/"),
    jobs: Optional[int] = None,
    arch: Optional[str] = None,
    source: Optional[Path] = None,
) -> tuple[BuildPlan, str]:
    """Probe the machine (or the image under ``root``), pick the profile, make the plan; returns
    the plan and why the profile was chosen."""
    facts = probe.collect(root=root)
    profile, why = profiles.resolve(profile_spec, facts.gpu_archs())
    return make_plan(profile, facts, jobs=jobs, arch=arch, source=source), why
