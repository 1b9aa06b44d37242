"""Which kernel variant a device gets: ``sagebuild.archs`` (its ``pv`` column) is the one table."""

from __future__ import annotations

import functools

import torch

from sagebuild import archs
from sagebuild.attention.validate import AttentionInputError, interpreter_enabled

INTERPRETER = "interpreter"  # the pseudo-arch of Triton's CPU interpreter (tests)
VARIANTS = {"fp16": "qk_int8_pv_fp16", "fp8": "qk_int8_pv_fp8"}


def device_arch(device: torch.device | str | int) -> str:
    """Canonical arch name of a device (``sm90``, ``gfx1201``), or ``interpreter`` for the CPU interpreter."""
    dev = torch.device(device) if not isinstance(device, torch.device) else device
    if isinstance(device, int):
        dev = torch.device("cuda", device)
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
    props = torch.cuda.get_device_properties(index)
    if getattr(torch.version, "hip", None):
        return archs.normalize(props.gcnArchName)
    return archs.cuda_arch(props.major, props.minor)


@functools.cache
def _row(arch: str) -> archs.Arch:
    try:
        archs.pv_path(arch)
        return archs.get(arch)
    except archs.UnknownArchError as exc:
        raise AttentionInputError(
            str(exc), "use torch.nn.functional.scaled_dot_product_attention on this GPU"
        ) from None


def variant_for_device(device: torch.device | str | int) -> str:
    """The default variant for a device, from the arch table's ``pv`` column."""
    arch = device_arch(device)
    if arch == INTERPRETER:
        return VARIANTS["fp16"]
    _row(arch)
    return VARIANTS[archs.pv_path(arch)]


def variant_for_call(device: torch.device | str | int, head_dim: int, n_k: int) -> str:
    """The variant ``sageattn`` runs on a device for a head dim and key count."""
    return variant_for_arch_call(device_arch(device), head_dim, n_k)


def variant_for_arch_call(arch: str, head_dim: int, n_k: int) -> str:
    """The arch table's variant, unless the launch-config module records that the other P·V
    path is measurably faster for this head dim and key count on this arch family."""
    return _choice(arch, head_dim, n_k)[0]


def choice_for_call(device: torch.device | str | int, head_dim: int, n_k: int) -> tuple[str, str]:
    """What ``sageattn`` runs: (variant, FP8 accumulation "fp32+fp32" or "fp32", upstream's names).

    Memoised per GPU device object, head dim and key count (it is on every call's host path);
    CPU devices are not (whether the interpreter serves them is read from the environment)."""
    key = (device, head_dim, n_k)
    choice = _CALL_CHOICES.get(key)
    if choice is None:
        choice = _choice(device_arch(device), head_dim, n_k)
        if isinstance(device, torch.device) and device.type == "cuda":
            if len(_CALL_CHOICES) >= 4096:
                _CALL_CHOICES.clear()
            _CALL_CHOICES[key] = choice
    return choice


_CALL_CHOICES: dict[tuple, tuple[str, str]] = {}


@functools.lru_cache(maxsize=4096)
def _choice(arch: str, head_dim: int, n_k: int) -> tuple[str, str]:
    """(variant, FP8 accumulation) for ``sageattn``: the arch table's, or the measured preference."""
    if arch == INTERPRETER:
        return VARIANTS["fp16"], "fp32+fp32"
    row = _row(arch)
    from sagebuild.kernels.triton import configs

    dp = configs.padded_head_dim(head_dim) if head_dim > 0 else None
    pv = configs.preferred_pv(row.family, dp, n_k) if dp is not None else None
    accum = "fp32" if pv == "fp8acc" else "fp32+fp32"
    pv = "fp8" if pv == "fp8acc" else pv
    if pv == "fp8" and not row.fp8_dtype:
        pv = None
    return VARIANTS[pv or archs.pv_path(arch)], accum


def available_variants(device: torch.device | str | int) -> list[str]:
    """Every variant that runs on a device: FP16 P·V wherever INT8 runs, FP8 where the arch has FP8."""
    arch = device_arch(device)
    if arch == INTERPRETER:
        return list(VARIANTS.values())
    row = _row(arch)
    return [VARIANTS["fp16"]] + ([VARIANTS["fp8"]] if row.fp8_dtype else [])


@functools.cache
def family(arch: str) -> str:
    """The arch family that keys the launch-config table."""
    return INTERPRETER if arch == INTERPRETER else archs.get(arch).family


@functools.cache
def fp8_dtype(arch: str) -> torch.dtype:
    """The FP8 E4M3 dtype the arch's matrix units take, or a clear error when it has none."""
    if arch == INTERPRETER:
        return torch.float8_e4m3fn
    row = _row(arch)
    if row.fp8_dtype is None:
        raise AttentionInputError(
            f"{arch} ({row.family}) has no FP8 matrix units, so the FP8 P·V kernel would be emulated",
            "use sageattn_qk_int8_pv_fp16_triton (or sageattn, which picks it) on this GPU",
        )
    return getattr(torch, row.fp8_dtype)
