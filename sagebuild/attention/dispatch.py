"""Which arch a device is, and which variants run there (the decisions live in ``plan``)."""

from __future__ import annotations

import functools

import torch

from sagebuild import archs
from sagebuild.attention import plan
from sagebuild.attention.plan import INTERPRETER, VARIANTS
from sagebuild.attention.validate import AttentionInputError, interpreter_enabled

family = plan.family_of  # the arch family that keys the launch-config and features tables


def device_arch(device: torch.device | str | int) -> str:
    """Canonical arch name of a device (``sm90``, ``gfx1201``), or ``interpreter`` for the CPU interpreter."""
    dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if dev.type == "cpu":
        if interpreter_enabled():
            return INTERPRETER
        raise AttentionInputError(
            "the quantized attention kernels need a GPU; got a CPU device",
            "move the tensors to a CUDA/ROCm GPU",
        )
    if dev.type != "cuda":
        raise AttentionInputError(f"unsupported device {dev}", "use a CUDA or ROCm GPU")
    return _gpu_arch(dev.index if dev.index is not None else torch.cuda.current_device())


@functools.cache
def _gpu_arch(index: int) -> str:
    """A GPU's arch never changes within a process: read its properties once."""
    return archs.of_device_properties(torch.cuda.get_device_properties(index), bool(torch.version.hip))


def variant_for_device(device: torch.device | str | int) -> str:
    """The arch table's default variant for a device (``archs.Arch.pv``)."""
    return VARIANTS[plan.default_pv(device_arch(device), 0, 0)[0]]  # the interpreter's: FP16


def available_variants(device: torch.device | str | int) -> list[str]:
    """Every variant that runs on a device: FP16 P·V wherever INT8 runs, FP8 where the arch has FP8."""
    row = plan.arch_row(device_arch(device))  # None for the interpreter, which runs both
    return [VARIANTS["fp16"]] + ([VARIANTS["fp8"]] if row is None or row.fp8_dtype else [])
