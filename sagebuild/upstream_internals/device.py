"""Upstream's device queries (``sageattention.core``), answering on AMD GPUs too.

Upstream's ``get_cuda_arch_versions`` builds ``f"sm{major}{minor}"`` from the compute capability,
which a ROCm torch fills with the gfx arch's digits (gfx1151 becomes "sm115", gfx1201 "sm120", a
real NVIDIA name). Ours names the GPU as it is: ``sm90`` on NVIDIA, ``gfx1201`` on AMD
(``archs.of_device_properties``), so a caller can tell them apart.
"""

from __future__ import annotations

from typing import Optional

import torch

from sagebuild import archs


def get_cuda_arch_versions() -> list[str]:
    """One canonical arch name per visible GPU (``sm90``, ``gfx1201``); [] without a GPU."""
    if not torch.cuda.is_available():
        return []
    hip = bool(torch.version.hip)
    names = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        names.append(archs.of_device_properties(props, hip) or f"sm{props.major}{props.minor}")
    return names


def get_cuda_version() -> tuple[Optional[int], Optional[int]]:
    """(major, minor) of the GPU runtime torch was built with: CUDA's, or on ROCm HIP's (so a
    check such as ``>= (12, 8)`` for an NVIDIA-only kernel is False there); (None, None) on a CPU
    build. Upstream asks ``nvcc``; the runtime torch uses is the one its kernels would meet."""
    version = torch.version.cuda or torch.version.hip
    if not version:
        return None, None
    parts = [int(p) for p in str(version).split(".")[:2] if p.isdigit()]
    return (parts[0], parts[1]) if len(parts) == 2 else (None, None)
