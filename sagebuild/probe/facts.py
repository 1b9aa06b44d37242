"""The probe's facts as plain data: what the checks read, what ``doctor --json`` prints. Every field
has a default, so tests build the exact machine they check (``Facts(system=SystemFacts(wsl="2"))``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from sagebuild import archs


@dataclass
class SystemFacts:
    """Operating system, WSL flavour and the resources a build needs."""

    os: str = "Linux"
    distro: Optional[str] = None
    kernel: Optional[str] = None
    wsl: str = "none"  # "none" | "1" | "2"
    cpu_count: Optional[int] = None
    mem_total_gb: Optional[float] = None
    mem_available_gb: Optional[float] = None
    disk_free_gb: Optional[float] = None
    disk_path: str = "/"


@dataclass
class PythonFacts:
    """The target interpreter (the one whose torch is probed) and the ``python3`` on PATH."""

    version: Optional[str] = None
    executable: Optional[str] = None
    prefix: Optional[str] = None  # sys.prefix of the target: one per venv (keys its extension build)
    platform: Optional[str] = None  # sys.platform of the target: "linux", "win32", ...
    in_venv: bool = False
    under_mnt: bool = False  # a Windows interpreter reached through /mnt/<drive>/ from WSL
    path_python: Optional[str] = None  # what `python3` (or `python`) on PATH resolves to
    # what Triton's launcher compiles against (None: not probed): the interpreter's include dir,
    # whether Python.h is in it, and on Windows whether a python3*.lib is in its libs folder
    include_dir: Optional[str] = None
    python_h: Optional[bool] = None
    python_libs: Optional[bool] = None
    # pip's build isolation as its configuration sets it (None: nothing sets it, pip isolates),
    # and which setting (the env var or a config file's section) with its value
    pip_isolation: Optional[bool] = None
    pip_isolation_source: Optional[str] = None


@dataclass
class DeviceFacts:
    """Device nodes under ``dev/``: the kernel drivers' view of the GPUs."""

    kfd: bool = False
    render_nodes: list[str] = field(default_factory=list)
    dxg: bool = False
    nvidia: list[str] = field(default_factory=list)
    wsl_libcuda: bool = False  # usr/lib/wsl/lib/libcuda.so: NVIDIA's WSL driver bridge


@dataclass
class ToolFact:
    """One executable: found or not, where, and its version line."""

    present: bool = False
    path: Optional[str] = None
    version: Optional[str] = None
    error: Optional[str] = None


@dataclass
class TritonFacts:
    """Triton in the target interpreter and torch's declared requirement on it."""

    importable: bool = False
    version: Optional[str] = None
    error: Optional[str] = None
    distribution: Optional[str] = None  # the distribution providing the `triton` import name
    distributions: list[str] = field(default_factory=list)  # all of them (more than one = conflict)
    distribution_version: Optional[str] = None
    torch_requirement: Optional[str] = None  # e.g. 'pytorch-triton-rocm==3.3.1; platform_system == "Linux"'
    requirement_applies: Optional[bool] = None  # the requirement's markers hold for the target
    satisfied: Optional[bool] = None  # None: nothing to compare (no requirement or no triton)


@dataclass
class DeviceInfo:
    index: int
    name: str
    arch: Optional[str]  # canonical: "gfx1201", "sm90"
    raw_arch: Optional[str] = None  # gcnArchName ("gfx942:sramecc+:xnack-") or "9.0"
    total_mem_gb: Optional[float] = None


@dataclass
class TorchFacts:
    """torch as the target interpreter sees it, read in a subprocess."""

    importable: bool = False
    error: Optional[str] = None  # import error, crash (signal) or timeout
    version: Optional[str] = None
    build: Optional[str] = None  # "rocm" | "cuda" | "cpu"
    hip: Optional[str] = None
    cuda: Optional[str] = None
    cuda_available: bool = False
    device_count: int = 0
    devices: list[DeviceInfo] = field(default_factory=list)
    hip_runtime: Optional[str] = None
    miopen: Optional[str] = None
    cudnn: Optional[str] = None
    triton: TritonFacts = field(default_factory=TritonFacts)
    seconds: Optional[float] = None


@dataclass
class ShadowFact:
    """A source folder in the working directory that imports before the installed package."""

    name: str
    path: str
    installed_at: Optional[str] = None


@dataclass
class ConflictFacts:
    sageattention: Optional[str] = None  # version of an installed `sageattention` distribution
    sageattention_location: Optional[str] = None
    shadowing: list[ShadowFact] = field(default_factory=list)
    installed_here: list[str] = field(default_factory=list)  # cwd folders that are the installed package


@dataclass
class ExtensionFacts:
    """The built C++/CUDA extension for the probed interpreter + torch (``sagebuild compile``)."""

    dir: Optional[str] = None
    built: bool = False
    lib_present: bool = False
    sha256_ok: Optional[bool] = None  # None when nothing is built
    info: Optional[dict] = None  # build_info.json: archs, jobs, compilers, torch, time
    unwritable: Optional[str] = None  # why ``dir`` cannot be created or written (a read-only HOME)


@dataclass
class Facts:
    """Everything the probe learned about one machine (or system image) and interpreter."""

    root: str = "/"
    cwd: str = "."
    system: SystemFacts = field(default_factory=SystemFacts)
    python: PythonFacts = field(default_factory=PythonFacts)
    devices: DeviceFacts = field(default_factory=DeviceFacts)
    driver: Optional[str] = None  # "amdgpu 6.10.5" / "nvidia 550.54.14" from the kernel module
    kfd_archs: list[str] = field(default_factory=list)
    rocminfo_archs: list[str] = field(default_factory=list)
    nvidia_smi_archs: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    tools: dict[str, ToolFact] = field(default_factory=dict)
    torch: TorchFacts = field(default_factory=TorchFacts)
    conflicts: ConflictFacts = field(default_factory=ConflictFacts)
    extension: ExtensionFacts = field(default_factory=ExtensionFacts)
    # the torch record of ./sagebuild.lock (``lock.snapshot``'s "torch", plus "path"), or
    # {"path", "error"} for an unreadable lock; None without one (``doctor.run_doctor`` reads it)
    lock_torch: Optional[dict[str, Any]] = None

    @property
    def hsa_override(self) -> Optional[str]:
        """``HSA_OVERRIDE_GFX_VERSION`` when set: it makes ROCm report a different arch."""
        return self.env.get("HSA_OVERRIDE_GFX_VERSION") or None

    def gpu_archs(self) -> list[str]:
        """De-duplicated canonical archs: torch devices first, then KFD sysfs, rocminfo, nvidia-smi."""
        sources = [d.arch for d in self.torch.devices if d.arch]
        sources += self.kfd_archs + self.rocminfo_archs + self.nvidia_smi_archs
        return list(dict.fromkeys(archs.normalize(a) for a in sources))

    def tool(self, name: str) -> ToolFact:
        """The fact for ``name``; an absent tool when it was not probed."""
        return self.tools.get(name, ToolFact())

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "hsa_override": self.hsa_override, "gpu_archs": self.gpu_archs()}
