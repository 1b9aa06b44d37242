"""Counting an AMD kernel's instructions in its AMDGCN assembly (``kernel.asm["amdgcn"]``), for
``test_aot``'s checks of the AMD FP8 paths (test evidence, not a product feature).

What ``kernel_asm.sass_loops`` is for NVIDIA's SASS: without an AMD GPU, the ISA is the evidence of what
a kernel costs. Per kernel: registers and spills (the metadata's ``.vgpr_spill_count`` and the
``ScratchSize`` line), and per innermost key loop (one key tile per trip): its matrix
instructions by type (``v_wmma_*``, ``v_mfma_*``), its hardware FP8 conversions (``v_cvt_*fp8*``,
``v_cvt_*bf8*``: RDNA4/CDNA3 convert two values per instruction) and the VALU work around them.
A conversion to FP8 that the compiler writes in software shows up as no ``v_cvt_*fp8`` at all
and a ladder of compares and selects (``v_cmp_*``, ``v_cndmask_*``) per value. Memory instructions
are counted by kind (LDS ``ds_``, global ``global_``/``flat_``/``scratch_``, ``buffer_``, scalar loads
``s_load``/``s_buffer_load``), with LDS's two-byte reads apart: a 16-bit tile read element by element.

``python tests/isa_counts.py [HEAD_DIM]`` prints docs/kernels.md's table of every AMD target, each
compiled in its own process with an empty Triton cache.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Optional

# an instruction line: a tab or spaces, then an opcode such as v_wmma_f32_16x16x16_fp8_fp8 or
# ds_load_u16_d16 (scalar, vector, LDS, global/flat/scratch and buffer instructions)
_INSN = re.compile(r"^\s+((?:[sv]|ds|global|flat|scratch|buffer)_[a-z0-9_]+)\b(.*)$")
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
# memory instructions by where they go: LDS, global memory (global_/flat_/scratch_: RDNA's and
# CDNA's vector memory), buffer resources (Triton's AMD loads), scalar loads of constants and arguments
_MEMORY = {
    "lds": re.compile(r"ds_\w+"),
    "global": re.compile(r"(?:global|flat|scratch)_\w+"),
    "buffer": re.compile(r"buffer_\w+"),
    "scalar_loads": re.compile(r"s_(?:buffer_)?load_\w+"),
}
# LDS reads of two bytes per lane (ds_load_u16, ds_load_u16_d16_hi on RDNA; ds_read_u16 on CDNA):
# a 16-bit tile read one element at a time, the layout a channel-major V removes
_LDS_B16_READ = re.compile(r"ds_(?:load|read)_(?:u16|i16|b16)\w*")


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
    """The counts of one instruction sequence: all instructions (``lines``: scheduling hints too;
    ``instructions``: without them), VALU and SALU, memory instructions by kind (``_MEMORY``, two-byte
    LDS reads apart), matrix instructions by opcode, hardware conversions to and from FP8, and the
    compares and selects a software FP8 conversion is made of."""
    ops = [opcode(o) for o in opcodes]
    work = [o for o in ops if o not in _HINTS]
    matrix = Counter(o for o in work if _MATRIX.fullmatch(o))
    memory = {kind: sum(bool(p.fullmatch(o)) for o in work) for kind, p in _MEMORY.items()}
    return {
        "lines": len(ops),
        "instructions": len(work),
        "valu": sum(o.startswith("v_") and o not in matrix for o in work),
        "salu": sum(o.startswith("s_") and not _MEMORY["scalar_loads"].fullmatch(o) for o in work),
        "memory": sum(memory.values()),
        **memory,
        "lds_b16_reads": sum(bool(_LDS_B16_READ.fullmatch(o)) for o in work),
        "matrix": dict(sorted(matrix.items())),
        "cvt_to_fp8": sum(bool(_CVT_TO_FP8.fullmatch(o)) for o in work),
        "cvt_from_fp8": sum(bool(_CVT_FROM_FP8.fullmatch(o)) for o in work),
        "compares": sum(o.startswith("v_cmp") for o in work),  # v_cmp_* and v_cmpx_*
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


def table_rows(head_dim: int = 128) -> list[tuple[str, str, Optional[str]]]:
    """(arch, variant, config or None) for every AMD target the arch table runs: each variant with
    the table's config, and FP16 P·V with channel-major V (``vcm``) beside it."""
    from dataclasses import replace

    from sagebuild import archs
    from sagebuild.attention.plan import make_plan

    rows: list[tuple[str, str, Optional[str]]] = []
    for row in archs.ARCHS.values():
        if row.vendor != "rocm" or row.pv is None:
            continue
        for variant in archs.variants(row.name):
            rows.append((row.name, variant, None))
            if variant.endswith("fp16"):
                cfg = make_plan(row.name, head_dim=head_dim, n_k=0, pv="fp16").config
                rows.append((row.name, variant, replace(cfg, vcm=True).spec()))
    return rows


TABLE_HEADER = (
    "| target | variant, config | VGPRs, waves per SIMD, scratch | instructions | VALU | memory | matrix "
    "| FP8 conversions | compares | whole kernel: lines, compares |\n" + "| --- " * 10 + "|"
)


def markdown_row(rep: dict[str, Any]) -> str:
    """One line of docs/kernels.md's AMD table from an ``attention_report``: per wave and trip of the
    unmasked key loop, and the whole kernel's instruction lines and compares."""
    k, loop, tot = rep["kernel"], rep["loops"][0], rep["total"]
    matrix = ", ".join(f"{n} {op}" for op, n in loop["matrix"].items())
    memory = f"{loop['memory']} ({loop['lds']} LDS, {loop['lds_b16_reads']} of them 2-byte reads; "
    memory += f"{loop['global']} global, {loop['buffer']} buffer)"
    variant = rep["variant"].removeprefix("qk_int8_pv_").upper()
    return (
        f"| {rep['arch']} | {variant}, {rep['config']} "
        f"| {k['vgprs']}, {k['occupancy']}, {k['scratch_bytes']} "
        f"| {loop['instructions']} | {loop['valu']} | {memory} | {matrix} | {loop['cvt_to_fp8']} "
        f"| {loop['compares']} | {tot['lines']}, {tot['compares']} |"
    )


_ONE_REPORT = (
    "import json, sys, isa_counts as i\n"
    "v, a, d, cfg = sys.argv[1:5]\n"
    "print(json.dumps(i.attention_report(v, a, int(d), config=cfg or None)))"
)


def _main() -> None:
    """``python tests/isa_counts.py [HEAD_DIM]``: docs/kernels.md's AMD table, every target compiled in
    its own process with an empty Triton cache (Triton 3.6 carries state between AMD targets)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    head_dim = sys.argv[1] if len(sys.argv) > 1 else "128"
    here = os.path.dirname(os.path.abspath(__file__))
    print(TABLE_HEADER)
    for arch, variant, cfg in table_rows(int(head_dim)):
        with tempfile.TemporaryDirectory() as cache:
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            env |= {
                "TRITON_CACHE_DIR": cache,
                "PYTHONPATH": os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")])),
            }
            args = [sys.executable, "-c", _ONE_REPORT, variant, arch, head_dim, cfg or ""]
            proc = subprocess.run(args, capture_output=True, text=True, env=env)
        if proc.returncode:
            print(
                f"| {arch} | {variant}, {cfg or 'table'} | failed: {proc.stderr.strip().splitlines()[-1]} |"
            )
            continue
        print(markdown_row(json.loads(proc.stdout.strip().splitlines()[-1])), flush=True)


if __name__ == "__main__":
    _main()
