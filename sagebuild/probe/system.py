"""File-system facts read under a root directory: OS, WSL, resources, device nodes, KFD topology.

Every path is relative to the root, so a system image or a test fixture is probed like ``/``.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from sagebuild import archs
from sagebuild.probe.facts import DeviceFacts, SystemFacts

KFD_NODES = "sys/devices/virtual/kfd/kfd/topology/nodes"

# Env vars whose values change what gets built or which GPU is used: the GPU stack's (by prefix,
# e.g. PYTORCH_ROCM_ARCH, HSA_OVERRIDE_GFX_VERSION, CUDA_VISIBLE_DEVICES, ROCM_HOME) and these.
ENV_VARS = ("MAX_JOBS", "CXX", "WSL_DISTRO_NAME", "VIRTUAL_ENV", "CONDA_PREFIX")
ENV_PREFIXES = ("HSA_", "HIP_", "ROCM", "ROCR_", "CUDA", "TORCH", "PYTORCH_", "TRITON_", "NVIDIA_")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
REDACTED = "***"
MAX_READ_BYTES = 1024 * 1024  # the files probed (os-release, /proc and /sys nodes, versions) are small


def read_text_capped(path: Path) -> Optional[str]:
    """A regular file's first MiB as text; None for anything else: a FIFO, socket or device under a
    probed root would block or never end."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_READ_BYTES)
    except OSError:
        return None
    return data.decode("utf-8", errors="replace")


class Root:
    """Paths of one system root: ``Root("/tmp/x").path("/dev/kfd")`` → ``/tmp/x/dev/kfd``."""

    def __init__(self, root: Path | str = "/") -> None:
        self.base = Path(root)

    @property
    def is_host(self) -> bool:
        return self.base.resolve() == Path("/")

    def path(self, p: str | Path) -> Path:
        return self.base / str(p).lstrip("/")

    def read(self, p: str | Path) -> Optional[str]:
        return read_text_capped(self.path(p))

    def exists(self, p: str | Path) -> bool:
        return os.path.lexists(self.path(p))

    def unroot(self, p: str | Path) -> str:
        """A host path inside the root, written as the root sees it (``/tmp/x/mnt/c`` → ``/mnt/c``)."""
        path = Path(p)
        if self.is_host:
            return str(path)
        try:
            return "/" + str(path.absolute().relative_to(self.base.absolute()))
        except ValueError:
            return str(path)


def relevant_env(env: Mapping[str, str]) -> dict[str, str]:
    """The env vars that matter, secret-looking values redacted."""
    return {
        name: REDACTED if _SECRET.search(name) else env[name]
        for name in sorted(env)
        if name in ENV_VARS or name.startswith(ENV_PREFIXES)
    }


def wsl_kind(root: Root) -> str:
    """``"2"`` for a WSL2 kernel (``microsoft-standard``), ``"1"`` for WSL1, ``"none"`` otherwise."""
    text = " ".join(t for t in (root.read("proc/version"), root.read("proc/sys/kernel/osrelease")) if t)
    low = text.lower()
    if "microsoft" not in low and "wsl" not in low:
        # WSL_DISTRO_NAME leaks into containers and ssh sessions; the kernel string decides.
        return "none"
    return "2" if "microsoft-standard" in low or "wsl2" in low else "1"


def _meminfo(root: Root) -> tuple[Optional[float], Optional[float]]:
    text = root.read("proc/meminfo")
    if text is not None:
        vals = {k: int(v) / 2**20 for k, v in re.findall(r"^(\w+):\s+(\d+)\s*kB", text, re.M)}
        total = vals.get("MemTotal")
        avail = vals.get("MemAvailable", vals.get("MemFree"))
        return (round(total, 2) if total else None, round(avail, 2) if avail is not None else None)
    if root.is_host:
        import psutil

        vm = psutil.virtual_memory()
        return round(vm.total / 2**30, 2), round(vm.available / 2**30, 2)
    return None, None


def _cpu_count(root: Root) -> Optional[int]:
    if root.is_host:
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count()
    return len(re.findall(r"^processor\s*:", root.read("proc/cpuinfo") or "", re.M)) or None


def _distro(root: Root) -> Optional[str]:
    m = re.search(r"^PRETTY_NAME=(.*)$", root.read("etc/os-release") or "", re.M)
    return m.group(1).strip().strip('"') if m else None


def system_facts(root: Root) -> SystemFacts:
    kernel = (root.read("proc/sys/kernel/osrelease") or "").strip() or None
    if kernel is None and root.is_host:
        kernel = platform.release()
    total, avail = _meminfo(root)
    try:
        free = round(shutil.disk_usage(root.base).free / 2**30, 2)
    except OSError:
        free = None
    return SystemFacts(
        os=platform.system() if root.is_host else "Linux",
        distro=_distro(root),
        kernel=kernel,
        wsl=wsl_kind(root),
        cpu_count=_cpu_count(root),
        mem_total_gb=total,
        mem_available_gb=avail,
        disk_free_gb=free,
        disk_path=str(root.base),
    )


def device_facts(root: Root) -> DeviceFacts:
    def names(pattern: str) -> list[str]:
        parent, _, glob = pattern.rpartition("/")
        d = root.path(parent)
        return sorted(f"/{parent}/{p.name}" for p in d.glob(glob)) if d.is_dir() else []

    return DeviceFacts(
        kfd=root.exists("dev/kfd"),
        render_nodes=names("dev/dri/renderD*"),
        dxg=root.exists("dev/dxg"),
        nvidia=names("dev/nvidia*"),
        wsl_libcuda=root.exists("usr/lib/wsl/lib/libcuda.so") or root.exists("usr/lib/wsl/lib/libcuda.so.1"),
    )


def kfd_archs(root: Root) -> list[str]:
    """GPU archs from KFD topology ``gfx_target_version`` (CPU nodes, value 0, are skipped)."""
    nodes = root.path(KFD_NODES)
    if not nodes.is_dir():
        return []

    def order(p: Path) -> tuple[int, str]:
        return (int(p.name), "") if p.name.isdigit() else (1 << 30, p.name)

    props = (read_text_capped(node / "properties") or "" for node in sorted(nodes.iterdir(), key=order))
    found = (re.search(r"^gfx_target_version\s+(\d+)\s*$", text, re.M) for text in props)
    names = (archs.decode_gfx_target_version(int(m.group(1))) for m in found if m)
    return list(dict.fromkeys(n for n in names if n))


def driver_version(root: Root) -> Optional[str]:
    """The GPU kernel driver: NVIDIA's module version, or amdgpu's (DKMS builds carry one)."""
    nv = root.read("proc/driver/nvidia/version")
    if nv:
        m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([\d.]+)", nv)
        if m:
            return f"nvidia {m.group(1)}"
    amd = (root.read("sys/module/amdgpu/version") or "").strip()
    return f"amdgpu {amd}" if amd else None
