"""The one home of GPU architecture facts (names, families, decoding, kernel dispatch): the probe,
profiles, build, attention dispatch and AOT checks all read this table; a new GPU is one row here."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Arch:
    """One GPU architecture as the tool sees it."""

    name: str  # canonical: "gfx1201", "sm90"
    vendor: str  # "rocm" | "cuda"
    family: str  # "RDNA4", "Hopper", ...
    products: str
    pv: str | None  # dispatch: "fp16" | "fp8" | None (no int8 matrix units: unsupported)
    fp8_dtype: str | None  # torch dtype name of the fp8 format the arch's matrix units take
    warp_size: int
    int8_mma: str  # regex the compiled assembly must contain for the INT8 Q·Kᵀ dot
    fp8_mma: str | None  # regex for the FP8 P·V dot (None: the arch's fp8 path is not used)
    note: str = ""
    # P becomes FP8 through inline ``v_cvt_pk_fp8_f32`` (``kernels/triton/fp8.py``): where Triton 3.6
    # casts float32 to the arch's FP8 in software although the ISA has the packed conversion (gfx12)
    fp8_cvt_asm: bool = False

    @property
    def triton_target(self) -> tuple[str, int | str, int]:
        """(backend, arch, warp_size) as ``triton.backends.compiler.GPUTarget`` takes them."""
        if self.vendor == "cuda":
            return ("cuda", int(self.name[2:]), 32)
        return ("hip", self.name, self.warp_size)


_WMMA_I8 = r"v_wmma_i32_16x16x16_iu8"
_WMMA_FP8 = r"v_wmma_f32_16x16x16_fp8_fp8"  # RDNA4's OCP e4m3 WMMA (fp32 accumulator)
_MFMA_I8 = r"v_mfma_i32_\w+i8"
# RDNA4's P·V default and its basis (issues 38, 59; docs/kernels.md "FP8 P·V on RDNA4"), taken by
# sageattn once sagebuild verify has passed it on the machine (``attention.gate``):
_RDNA4_PV = (
    "fp8 (ISA, hd128 key loop per wave, VALU + WMMA at AMD's rates): 452 issue cycles against FP16's 556 "
    "(564 with channel-major V) since P converts by v_cvt_pk_fp8_f32; FP16 until verify passes here"
)
_MMA_S8 = r"mma\.sync\.aligned\.m16n8k32\.row\.col(\.satfinite)?\.s32\.s8\.s8\.s32"
_MMA_E4M3 = r"mma\.sync\.aligned\.m16n8k32\.row\.col\.f32\.e4m3\.e4m3\.f32"
_WGMMA_S8 = r"wgmma\.mma_async\.sync\.aligned\.\w+\.s32\.s8\.s8"
_WGMMA_E4M3 = r"wgmma\.mma_async\.sync\.aligned\.\w+\.f32\.e4m3\.e4m3"

# fmt: off
_ROWS = [
    # AMD: RDNA (wave32) and CDNA (wave64)
    Arch("gfx1201", "rocm", "RDNA4", "RX 9070 XT / 9070 / 9070 GRE, Radeon AI PRO R9700",
         "fp8", "float8_e4m3fn", 32, _WMMA_I8, _WMMA_FP8, _RDNA4_PV, fp8_cvt_asm=True),
    Arch("gfx1200", "rocm", "RDNA4", "RX 9060 XT / 9060",
         "fp8", "float8_e4m3fn", 32, _WMMA_I8, _WMMA_FP8, _RDNA4_PV, fp8_cvt_asm=True),
    Arch("gfx1100", "rocm", "RDNA3", "RX 7900 XTX / XT / GRE, Radeon PRO W7900",
         "fp16", None, 32, _WMMA_I8, None, "no FP8 matrix units: FP8 would be emulated"),
    Arch("gfx1101", "rocm", "RDNA3", "RX 7800 XT / 7700 XT", "fp16", None, 32, _WMMA_I8, None),
    Arch("gfx1102", "rocm", "RDNA3", "RX 7600", "fp16", None, 32, _WMMA_I8, None),
    Arch("gfx1030", "rocm", "RDNA2", "RX 6800 / 6900", None, None, 32, "", None,
         "no WMMA: no int8 matrix units"),
    Arch("gfx1031", "rocm", "RDNA2", "RX 6700 XT", None, None, 32, "", None, "no WMMA: no int8 matrix units"),
    Arch("gfx1032", "rocm", "RDNA2", "RX 6600", None, None, 32, "", None, "no WMMA: no int8 matrix units"),
    Arch("gfx90a", "rocm", "CDNA2", "Instinct MI210 / MI250 / MI250X", "fp16", None, 64, _MFMA_I8, None),
    Arch("gfx942", "rocm", "CDNA3", "Instinct MI300X / MI300A / MI325X",
         "fp8", "float8_e4m3fnuz", 64, _MFMA_I8, r"v_mfma_f32_\w+fp8_fp8"),
    Arch("gfx950", "rocm", "CDNA4", "Instinct MI350X / MI355X",
         "fp8", "float8_e4m3fn", 64, _MFMA_I8, r"v_mfma_f32_\w+f8f6f4|v_mfma_f32_\w+fp8_fp8"),
    # NVIDIA
    Arch("sm70", "cuda", "Volta", "V100", None, None, 32, "", None, "no INT8 tensor cores"),
    Arch("sm75", "cuda", "Turing", "T4, RTX 20xx", None, None, 32, "", None,
         "Triton lacks bf16 on sm75; not supported"),
    Arch("sm80", "cuda", "Ampere", "A100 / A30", "fp16", None, 32, _MMA_S8, None),
    Arch("sm86", "cuda", "Ampere", "RTX 30xx / A6000 / A40", "fp16", None, 32, _MMA_S8, None),
    Arch("sm89", "cuda", "Ada", "RTX 40xx / L4 / L20 / L40", "fp8", "float8_e4m3fn", 32, _MMA_S8, _MMA_E4M3),
    Arch("sm90", "cuda", "Hopper", "H100 / H200 / H20", "fp8", "float8_e4m3fn", 32, _WGMMA_S8, _WGMMA_E4M3),
    Arch("sm100", "cuda", "Blackwell", "B200 / GB200", "fp8", "float8_e4m3fn", 32, r"\.s8", r"e4m3"),
    Arch("sm120", "cuda", "Blackwell", "RTX 50xx / RTX PRO 6000",
         "fp8", "float8_e4m3fn", 32, _MMA_S8, _MMA_E4M3),
]
# fmt: on

ARCHS: dict[str, Arch] = {a.name: a for a in _ROWS}


class UnknownArchError(ValueError):
    """An arch name the table does not know."""


def normalize(name: str) -> str:
    """Canonical arch name: ``gfx942:sramecc+:xnack-`` → ``gfx942``; ``9.0``/``sm_90``/``90`` → ``sm90``."""
    s = name.strip().lower()
    if s.startswith("gfx"):
        return s.split(":", 1)[0]
    s = s.replace("sm_", "sm").replace("+ptx", "").removesuffix("a")
    if s.startswith("sm"):
        return s
    if re.fullmatch(r"\d+\.\d", s):
        return "sm" + s.replace(".", "")
    if re.fullmatch(r"\d{2,3}", s):
        return f"sm{s}"
    return s


def get(name: str) -> Arch:
    """The table row for ``name`` (any accepted spelling) or a clear error listing what is known."""
    key = normalize(name)
    if key not in ARCHS:
        raise UnknownArchError(f"unknown GPU arch {name!r}; known: {', '.join(ARCHS)}")
    return ARCHS[key]


def cuda_arch(major: int, minor: int) -> str:
    """Compute capability → canonical name (9, 0 → ``sm90``)."""
    return f"sm{major}{minor}"


def arch_list_entry(name: str) -> str:
    """A CUDA arch name, in the table or not, as ``TORCH_CUDA_ARCH_LIST`` spells it (``sm90`` → 9.0)."""
    return f"{name[2:-1]}.{name[-1]}"


def of_device_properties(props: Any, hip: bool) -> str:
    """``torch.cuda.get_device_properties(i)`` → canonical name (ROCm's ``gcnArchName``, CUDA's
    compute capability); "" when a ROCm build does not report one."""
    if hip:
        return normalize(getattr(props, "gcnArchName", None) or "")
    return cuda_arch(props.major, props.minor)


def decode_gfx_target_version(value: int) -> str | None:
    """KFD ``gfx_target_version`` → ``gfxNNNN`` (stepping in hex); None for a CPU node (0)."""
    if value <= 0:
        return None
    return f"gfx{value // 10000 % 100}{value // 100 % 100}{value % 100:x}"


def decode_hsa_override(value: str) -> str | None:
    """``HSA_OVERRIDE_GFX_VERSION`` → the arch ROCm then reports: ``11.0.0`` → ``gfx1100``,
    ``9.0.10`` → ``gfx90a``; None when the value is malformed."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value)
    if not m:
        return None
    major, minor, step = (int(x) for x in m.groups())
    return f"gfx{major}{minor}{step:x}"


def pv_path(name: str) -> str:
    """The P·V variant the dispatch table names for an arch, or an error naming the nearest path."""
    arch = get(name)
    if arch.pv is None:
        raise UnknownArchError(
            f"{arch.name} ({arch.family}: {arch.note or 'no int8 matrix units'}) is not supported by the "
            f"quantized kernels; the nearest supported paths are "
            f"{'gfx1100 (RDNA3, fp16 P·V)' if arch.vendor == 'rocm' else 'sm80 (Ampere, fp16 P·V)'}; "
            f"use torch.nn.functional.scaled_dot_product_attention on this GPU"
        )
    return arch.pv


def variants(name: str) -> list[str]:
    """The kernel variants an arch's matrix units run: FP16 P·V wherever INT8 Q·Kᵀ runs, FP8 P·V
    where the table has an FP8 matrix path; [] for an arch the table does not know or rules out."""
    arch = ARCHS.get(normalize(name))
    if arch is None or arch.pv is None:
        return []
    return ["qk_int8_pv_fp16"] + (["qk_int8_pv_fp8"] if arch.fp8_mma else [])
