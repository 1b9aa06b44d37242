"""Counting an AMD kernel's instructions in its AMDGCN assembly (``kernel.asm["amdgcn"]``), for
``test_aot``'s checks of the AMD FP8 paths (test evidence, not a product feature).

What ``kernel_asm.sass_loops`` is for NVIDIA's SASS: without an AMD GPU, the ISA is the evidence of what
a kernel costs. Per kernel: registers and spills (the metadata's ``.vgpr_spill_count`` and the
``ScratchSize`` line), and per innermost key loop (one key tile per trip): its matrix
instructions by type (``v_wmma_*``, ``v_mfma_*``), its hardware FP8 conversions (``v_cvt_*fp8*``,
``v_cvt_*bf8*``: RDNA4/CDNA3 convert two values per instruction) and the VALU work around them.
A conversion to FP8 that the compiler writes in software shows up as no ``v_cvt_*fp8`` at all
and a ladder of compares and selects (``v_cmp_*``, ``v_cndmask_*``) per value.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Optional

# an instruction line: a tab or spaces, then an opcode such as v_wmma_f32_16x16x16_fp8_fp8
_INSN = re.compile(r"^\s+([sv]_[a-z0-9_]+)\b(.*)$")
_LABEL = re.compile(r"^(\.LBB\d+_\d+):")
_BRANCH = re.compile(r"^s_(?:cbranch_\w+|branch)$")
_MATRIX = re.compile(r"v_(?:wmma|swmmac|mfma|smfmac)_\w+")
# hardware FP8/BF8 conversions: to FP8 (v_cvt_pk_fp8_f32, v_cvt_sr_fp8_f32, v_cvt_scalef32_pk_fp8_f32)
# and from FP8 (v_cvt_f32_fp8, v_cvt_pk_f32_fp8, v_cvt_scalef32_pk_f32_fp8 ...)
_CVT_TO_FP8 = re.compile(r"v_cvt_(?:scalef32_)?(?:pk_|sr_)(?:fp8|bf8)_\w+")
_CVT_FROM_FP8 = re.compile(r"v_cvt_(?:scalef32_)?(?:pk_)?(?:f32|f16|bf16)_(?:fp8|bf8)\w*")
# metadata lines (the assembler's comment block and the HSA code object's YAML)
_META = {
    "vgprs": re.compile(r"^\s*; NumVgprs:\s*(\d+)", re.M),
    "sgprs": re.compile(r"^\s*; TotalNumSgprs:\s*(\d+)", re.M),
    "scratch_bytes": re.compile(r"^\s*; ScratchSize:\s*(\d+)", re.M),
    "occupancy": re.compile(r"^\s*; Occupancy:\s*(\d+)", re.M),
    "vgpr_spills": re.compile(r"^\s*\.vgpr_spill_count:\s*(\d+)", re.M),
    "sgpr_spills": re.compile(r"^\s*\.sgpr_spill_count:\s*(\d+)", re.M),
    "lds_bytes": re.compile(r"^\s*\.group_segment_fixed_size:\s*(\d+)", re.M),
}
# the suffixes that name an encoding, not an operation (v_cvt_f16_f32_e32 is v_cvt_f16_f32)
_ENCODING = re.compile(r"_(?:e32|e64|dpp|sdwa)$")
# scheduling hints that the sequencer consumes without issuing work (RDNA3+)
_HINTS = {"s_delay_alu", "s_wait_alu", "s_nop", "s_clause"}


def opcode(name: str) -> str:
    """An opcode without its encoding suffix: ``v_cndmask_b32_e32`` → ``v_cndmask_b32``."""
    return _ENCODING.sub("", name)


def kernel_info(asm: str) -> dict[str, Optional[int]]:
    """Registers, spills, scratch, LDS and occupancy from a kernel's metadata (None: line absent)."""
    out: dict[str, Optional[int]] = {}
    for key, pattern in _META.items():
        m = pattern.search(asm)
        out[key] = int(m.group(1)) if m else None
    return out


def count(opcodes: list[str]) -> dict[str, Any]:
    """The counts of one instruction sequence: all instructions (scheduling hints apart), VALU and
    SALU, matrix instructions by opcode, hardware conversions to and from FP8, and the compares
    and selects a software FP8 conversion is made of."""
    ops = [opcode(o) for o in opcodes]
    work = [o for o in ops if o not in _HINTS]
    matrix = Counter(o for o in work if _MATRIX.fullmatch(o))
    return {
        "instructions": len(work),
        "valu": sum(o.startswith("v_") and o not in matrix for o in work),
        "salu": sum(o.startswith("s_") for o in work),
        "matrix": dict(sorted(matrix.items())),
        "cvt_to_fp8": sum(bool(_CVT_TO_FP8.fullmatch(o)) for o in work),
        "cvt_from_fp8": sum(bool(_CVT_FROM_FP8.fullmatch(o)) for o in work),
        "compares": sum(o.startswith("v_cmp_") for o in work),
        "selects": sum(o.startswith("v_cndmask_") for o in work),
    }


def _lines(asm: str) -> list[tuple[Optional[str], Optional[str], str]]:
    """(label, opcode, operands) per line of the listing's code: a label line has no opcode."""
    out: list[tuple[Optional[str], Optional[str], str]] = []
    for raw in asm.splitlines():
        line = raw.split(";", 1)[0].rstrip()
        m = _LABEL.match(line)
        if m:
            out.append((m.group(1), None, ""))
            continue
        m = _INSN.match(line)
        if m:
            out.append((None, m.group(1), m.group(2).strip()))
    return out


def loops(asm: str) -> list[dict[str, Any]]:
    """The innermost loops that issue matrix instructions (the key loops: one trip per key tile),
    in listing order, each counted (``count``). A loop is a label and a later branch back to it."""
    lines = _lines(asm)
    where = {label: i for i, (label, _, _) in enumerate(lines) if label}
    spans = []
    for i, (_, op, args) in enumerate(lines):
        if op and _BRANCH.match(op):
            target = args.split(",")[-1].strip()
            start = where.get(target)
            if start is not None and start < i:
                body = [o for _, o, _ in lines[start : i + 1] if o]
                if any(_MATRIX.fullmatch(opcode(o)) for o in body):
                    spans.append((start, i, body))
    inner = [sp for sp in spans if not any(o is not sp and sp[0] <= o[0] and o[1] <= sp[1] for o in spans)]
    return [count(body) for _, _, body in sorted(inner)]


# global/buffer loads by the bits each lane reads: global_load_u16 (RDNA) and global_load_ushort
# (CDNA) are 16, global_load_b128 and global_load_dwordx4 128
_LOAD = re.compile(r"^\s+(?:global|buffer)_load_(?:d16_(?:hi_)?)?(\w+)", re.M)
_LOAD_BITS = {"u8": 8, "i8": 8, "ubyte": 8, "sbyte": 8, "u16": 16, "i16": 16, "b16": 16, "ushort": 16,
              "sshort": 16, "short": 16, "b32": 32, "dword": 32, "b64": 64, "dwordx2": 64, "b96": 96,
              "dwordx3": 96, "b128": 128, "dwordx4": 128}  # fmt: skip


def global_load_bits(asm: str) -> dict[int, int]:
    """How many global/buffer load instructions of each width (bits per lane) an AMDGCN kernel has."""
    widths = Counter(_LOAD_BITS[m] for m in _LOAD.findall(asm))
    return dict(sorted(widths.items()))


def report(asm: str) -> dict[str, Any]:
    """A kernel's metadata (``kernel_info``), whether it spills, its whole-kernel counts and its
    key loops' counts (``loops``)."""
    info = kernel_info(asm)
    return {
        "kernel": info,
        "spills": any((info[k] or 0) > 0 for k in ("vgpr_spills", "sgpr_spills", "scratch_bytes")),
        "total": count([op for _, op, _ in _lines(asm) if op]),
        "loops": loops(asm),
    }


def attention_report(
    variant: str,
    arch: str,
    head_dim: int = 128,
    causal: bool = False,
    n_k: int = 0,
    accum: str = "fp32+fp32",
    config: Optional[str] = None,
) -> dict[str, Any]:
    """Compile the attention kernel for an AMD arch without a GPU (as ``aot.compile_variant``
    does: the table's config for ``n_k`` keys, or ``config``) and ``report`` its AMDGCN, with the
    config and the key tile (BLOCK_M × BLOCK_N, per ``num_warps`` waves) that each loop trip covers."""
    from sagebuild import archs
    from sagebuild.attention import aot

    row = archs.get(arch)
    if row.vendor != "rocm":
        raise ValueError(f"{row.name}: AMDGCN exists only for AMD archs (NVIDIA: kernel_asm.sass_report)")
    kernel, cfg = aot.compile_attention(variant, row, head_dim, causal, n_k, accum, config)
    out = report(aot.assembly(kernel, row))
    out.update(
        arch=row.name,
        variant=variant,
        head_dim=head_dim,
        config=cfg.spec(),
        tile=[cfg.block_m, cfg.block_n],
        waves=cfg.num_warps,
    )
    return out


# Issue cycles of one wave32 WMMA on RDNA4 (16·16·16 multiply-adds), from AMD's dense rates per CU
# and clock (FP16/BF16 1024 FLOPs, FP8/BF8/INT8 2048: the RX 9070 XT's 64 CUs at 2.97 GHz give its
# published 779 INT8 TOPS with sparsity) over a CU's two SIMD32: 256 and 512 multiply-adds per clock.
RDNA4_WMMA_CYCLES = {
    "v_wmma_f32_16x16x16_f16": 16,
    "v_wmma_f32_16x16x16_bf16": 16,
    "v_wmma_f32_16x16x16_fp8_fp8": 8,
    "v_wmma_i32_16x16x16_iu8": 8,
}


def issue_cycles(loop: dict[str, Any], matrix_cycles: dict[str, int]) -> int:
    """A key loop's issue cycles per wave: one per VALU instruction plus each matrix instruction's
    cycles. On RDNA the WMMA executes on the SIMD's own ALUs, so VALU work and matrix work add up
    rather than overlap (scalar instructions issue apart and are left out)."""
    unknown = sorted(set(loop["matrix"]) - set(matrix_cycles))
    if unknown:
        raise ValueError(f"no issue cycles known for {', '.join(unknown)}; add them to the cycle table")
    return loop["valu"] + sum(n * matrix_cycles[op] for op, n in loop["matrix"].items())
