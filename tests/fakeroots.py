"""Fake system roots for probe, doctor and dry-run tests.

Each builder makes a directory that looks, to ``sagebuild.probe.collect(root=...)``, like one
kind of machine: device nodes (plain files), ``proc/`` text, KFD topology, and optional tool
scripts (``#!/bin/sh`` stubs that print what the real tool would). Pass ``ENV`` (or your own
mapping with a PATH) as ``env`` so the tools are looked up under the fake root only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

from sagebuild.probe.facts import DeviceInfo, TorchFacts, TritonFacts

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV: dict[str, str] = {"PATH": PATH}
KFD_NODES = "sys/devices/virtual/kfd/kfd/topology/nodes"
WINDOWS_PYTHON = "mnt/c/Users/me/AppData/Local/Programs/Python/Python311/python.exe"
NATIVE_KERNEL = "6.8.0-51-generic"
WSL2_KERNEL = "5.15.167.4-microsoft-standard-WSL2"
WSL1_KERNEL = "4.4.0-19041-Microsoft"


def write(root: Path, rel: str, text: str = "") -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    return p


def add_tool(root: Path, rel: str, script: str) -> Path:
    """An executable ``#!/bin/sh`` stub at ``root/rel`` running ``script``."""
    p = write(root, rel, "#!/bin/sh\n" + script + "\n")
    p.chmod(0o755)
    return p


def add_tool_output(root: Path, rel: str, output: str) -> Path:
    """A tool stub that prints ``output`` whatever its arguments."""
    return add_tool(root, rel, "cat <<'SAGEBUILD_EOF'\n" + output.rstrip("\n") + "\nSAGEBUILD_EOF")


def _base(root: Path, kernel: str, mem_gb: int, cores: int, distro: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write(root, "proc/version", f"Linux version {kernel} (gcc version 13.2.0) #1 SMP\n")
    write(root, "proc/sys/kernel/osrelease", kernel + "\n")
    kb = mem_gb * 2**20
    write(
        root,
        "proc/meminfo",
        f"MemTotal:       {kb} kB\nMemFree:        {kb // 2} kB\nMemAvailable:   {kb * 3 // 4} kB\n",
    )
    write(
        root, "proc/cpuinfo", "".join(f"processor\t: {i}\nmodel name\t: Fake CPU\n\n" for i in range(cores))
    )
    write(root, "etc/os-release", f'NAME="Ubuntu"\nPRETTY_NAME="{distro}"\n')
    (root / "dev").mkdir(exist_ok=True)
    return root


def add_kfd_node(root: Path, index: int, gfx_target_version: int) -> None:
    """One KFD topology node (0 = CPU node)."""
    write(
        root,
        f"{KFD_NODES}/{index}/properties",
        f"cpu_cores_count {0 if gfx_target_version else 16}\nsimd_count {0 if gfx_target_version else 0}\n"
        f"gfx_target_version {gfx_target_version}\nvendor_id {4098 if gfx_target_version else 0}\n",
    )


def make_rdna4_native(tmp: Path, rocminfo: bool = True, name: str = "rdna4") -> Path:
    """Native Linux with an RX 9070 XT: /dev/kfd, renderD128, KFD node 1 = gfx1201 (120001)."""
    root = _base(tmp / name, NATIVE_KERNEL, mem_gb=32, cores=16, distro="Ubuntu 24.04.1 LTS")
    write(root, "dev/kfd")
    write(root, "sys/module/amdgpu/version", "6.10.5\n")
    write(root, "dev/dri/card0")
    write(root, "dev/dri/renderD128")
    add_kfd_node(root, 0, 0)
    add_kfd_node(root, 1, 120001)
    if rocminfo:
        add_tool_output(
            root,
            "opt/rocm/bin/rocminfo",
            "ROCk module version 6.10.5 is loaded\nRuntime Version:         1.14\n"
            "Agent 1\n  Name:                    AMD Ryzen 9 7950X\n"
            "Agent 2\n  Name:                    gfx1201\n  Marketing Name:          "
            "AMD Radeon RX 9070 XT\n",
        )
    return root


def make_wsl2_dxg(tmp: Path, render128: bool = False, name: str = "wsl2") -> Path:
    """WSL2: /dev/dxg, ``microsoft-standard`` kernel; ``render128`` adds the seed's renderD128 node."""
    root = _base(tmp / name, WSL2_KERNEL, mem_gb=16, cores=12, distro="Ubuntu 22.04.5 LTS")
    write(root, "dev/dxg")
    write(root, "usr/lib/wsl/lib/libdxcore.so")
    if render128:
        write(root, "dev/dri/renderD128")
    return root


def make_wsl1(tmp: Path, name: str = "wsl1") -> Path:
    return _base(tmp / name, WSL1_KERNEL, mem_gb=16, cores=8, distro="Ubuntu 20.04.6 LTS")


def make_wsl2_windows_python(tmp: Path, name: str = "wsl2win") -> Path:
    """WSL2 whose interpreter is Windows' python.exe under /mnt/c (a stub that runs this Python)."""
    root = make_wsl2_dxg(tmp, name=name)
    add_tool(root, WINDOWS_PYTHON, f'exec "{sys.executable}" "$@"')
    return root


def windows_python(root: Path) -> Path:
    return root / WINDOWS_PYTHON


def make_nvidia(
    tmp: Path, cc: str = "9.0", nvcc_release: Optional[str] = "12.4", name: str = "nvidia"
) -> Path:
    """Native Linux with an NVIDIA GPU: /dev/nvidia0 + nvidiactl, nvidia-smi (and nvcc) stubs."""
    root = _base(tmp / name, NATIVE_KERNEL, mem_gb=64, cores=32, distro="Ubuntu 22.04.4 LTS")
    write(
        root,
        "proc/driver/nvidia/version",
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n",
    )
    for n in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        write(root, f"dev/{n}")
    add_tool_output(root, "usr/bin/nvidia-smi", f"550.54.14, {cc}")
    if nvcc_release:
        add_tool_output(
            root,
            "usr/local/cuda/bin/nvcc",
            "nvcc: NVIDIA (R) Cuda compiler driver\n"
            f"Cuda compilation tools, release {nvcc_release}, V{nvcc_release}.131\n",
        )
    return root


def make_cpu_only(tmp: Path, name: str = "cpu") -> Path:
    """A machine without any GPU device node."""
    return _base(tmp / name, NATIVE_KERNEL, mem_gb=16, cores=4, distro="Debian GNU/Linux 12 (bookworm)")


# ---- torch facts to inject (what the subprocess probe would report on such a machine) ----------


def cpu_torch(version: str = "2.13.0+cpu") -> TorchFacts:
    return TorchFacts(
        importable=True,
        version=version,
        build="cpu",
        triton=TritonFacts(
            importable=True,
            version="3.6.0",
            distribution="triton",
            distributions=["triton"],
            distribution_version="3.6.0",
        ),
    )


def rocm_torch(
    arch: str = "gfx1201",
    version: str = "2.8.0+rocm6.4",
    hip: str = "6.4.43482-0f2d60242",
    name: str = "AMD Radeon RX 9070 XT",
    triton: str = "3.4.0",
) -> TorchFacts:
    req = f'pytorch-triton-rocm=={triton}; platform_system == "Linux"'
    return TorchFacts(
        importable=True,
        version=version,
        build="rocm",
        hip=hip,
        cuda_available=True,
        device_count=1,
        devices=[DeviceInfo(0, name, arch, raw_arch=f"{arch}", total_mem_gb=15.9)],
        hip_runtime=hip,
        miopen="3.4.0",
        triton=TritonFacts(
            importable=True,
            version=triton,
            distribution="pytorch-triton-rocm",
            distributions=["pytorch-triton-rocm"],
            distribution_version=triton,
            torch_requirement=req,
            requirement_applies=True,
            satisfied=True,
        ),
        seconds=1.5,
    )


def cuda_torch(
    arch: str = "sm90",
    version: str = "2.11.0+cu130",
    cuda: str = "13.0",
    name: str = "NVIDIA H200",
    triton: str = "3.6.0",
) -> TorchFacts:
    cc = arch[2:]
    return TorchFacts(
        importable=True,
        version=version,
        build="cuda",
        cuda=cuda,
        cuda_available=True,
        device_count=1,
        devices=[DeviceInfo(0, name, arch, raw_arch=f"{cc[:-1]}.{cc[-1]}", total_mem_gb=139.8)],
        cudnn="91002",
        triton=TritonFacts(
            importable=True,
            version=triton,
            distribution="triton",
            distributions=["triton"],
            distribution_version=triton,
            torch_requirement=f"triton=={triton}; "
            'platform_system == "Linux" and platform_machine == "x86_64"',
            requirement_applies=True,
            satisfied=True,
        ),
        seconds=1.5,
    )


def fake_python(tmp: Path, script: str, name: str = "fakepython") -> str:
    """An 'interpreter' stub for the torch probe (crash, hang, partial output)."""
    p = tmp / name
    p.write_text("#!/bin/sh\n" + script + "\n", encoding="utf-8")
    p.chmod(0o755)
    return str(p)


def python_line(**facts: object) -> str:
    """The tagged line the probe script prints first (for stubs that then crash)."""
    from sagebuild.probe.torch_probe import PY_TAG

    base = {"version": "3.11.9", "executable": "/usr/bin/python3", "platform": "linux", "in_venv": False}
    base.update(facts)
    return PY_TAG + json.dumps(base)
