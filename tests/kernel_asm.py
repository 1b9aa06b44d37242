"""Compiling and reading our kernels' assembly without a GPU, for ``test_aot`` and
``scripts/sass_loops.py`` (test and maintainer evidence, not a product feature): the K/V
pre-processing kernels' PTX/AMDGCN, and the sm90 SASS of the attention kernel (registers, spills,
each key loop's instruction classes, ptxas's wgmma notes). ``isa_counts.py`` is the AMD sibling.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Optional

from sagebuild import archs
from sagebuild.attention import aot

_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);")
_BACK_BRANCH = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")
_RES_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")
# The instruction classes ``sass_loops`` counts per key loop, by opcode, in the order
# scripts/sass_loops.py prints them under its header.
_LOOP_CLASSES = tuple(
    (name, re.compile(pattern))
    for name, pattern in (
        ("mma", r"[A-Z]*GMMA\b"),
        ("mma_waits", r"WARPGROUP\.DEPBAR\b"),  # one per MMA when ptxas serialised the wgmma
        ("mufu", r"MUFU\b"),  # exponentials: a tile's scores per thread, plus the rescale's
        ("fsel", r"FSEL\b"),  # masked tiles select −inf
        ("local", r"(LDL|STL)\b"),  # spills
        ("shuffles", r"(SHFL\.IDX|PRMT)\b"),  # P moved into the P·V operand's layout
        ("async_copies", r"LDGSTS\b"),  # loads Triton's pipeliner staged through shared memory
        ("fmnmx", r"FMNMX\b"),  # two-input float max
        ("max3", r"VIMNMX3\b"),  # sm90's three-input integer max: row maxima on the INT32 scores
    )
)


def sass_loops(sass: str) -> list[dict]:
    """The innermost loops of a SASS listing that issue matrix instructions (``*GMMA``, ``*MMA``),
    in listing order: each one's instruction count and its count of each of ``_LOOP_CLASSES``.
    A backward branch whose span runs through the kernel's exit is not a loop: TMA kernels place
    their barrier-wait retry blocks after the exit and branch back into the key loop from there."""
    # (address, instruction without its @predicate)
    ins = [
        (int(m.group(1), 16), re.sub(r"^@!?\w+\s+", "", m.group(2).strip()))
        for m in _SASS_LINE.finditer(sass)
    ]
    index = {addr: i for i, (addr, _) in enumerate(ins)}
    spans = []
    for i, (addr, text) in enumerate(ins):
        m = _BACK_BRANCH.search(text)
        if m and int(m.group(1), 16) < addr and int(m.group(1), 16) in index:
            body = [t for _, t in ins[index[int(m.group(1), 16)] : i + 1]]
            exits = any(re.match(r"(EXIT|RET)\b", t) for t in body)
            if not exits and any(re.match(r"[A-Z]*MMA\b", t) for t in body):
                spans.append((index[int(m.group(1), 16)], i, body))
    inner = [sp for sp in spans if not any(o is not sp and sp[0] <= o[0] and o[1] <= sp[1] for o in spans)]
    return [
        {
            "instructions": len(body),
            **{name: sum(bool(op.match(t)) for t in body) for name, op in _LOOP_CLASSES},
        }
        for _, _, body in sorted(inner)
    ]


def sass_report(
    variant: str = "qk_int8_pv_fp8",
    arch: str = "sm90",
    head_dim: int = 128,
    causal: bool = False,
    n_k: int = 0,
    accum: str = "fp32",
    config: Optional[str] = None,
) -> dict:
    """Compile the attention kernel for an NVIDIA arch without a GPU and read its SASS: registers,
    the stack frame (where spills go) and shared memory per CTA, and the key loops (``sass_loops``). The
    table's config for ``n_k`` keys unless ``config`` (``"64,128,4,2,168,tma"``). This is how a
    change is predicted before it is measured: instructions per tile and spills."""
    row = archs.get(archs.normalize(arch))
    if row.vendor != "cuda":
        raise ValueError(f"{row.name}: SASS exists only for NVIDIA archs")
    kernel, cfg = aot.compile_attention(variant, row, head_dim, causal, n_k, accum, config)
    tool = _bundled_tool("cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(kernel.asm["cubin"])
        sass = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True, check=True).stdout
        res = subprocess.run([tool, "-res-usage", cubin], capture_output=True, text=True, check=True).stdout
    usage = _RES_USAGE.search(res)
    serialized = WGMMA_SERIALIZED.search(ptxas_verbose(kernel.asm["ptx"], row.triton_target[1]) or "")
    return {
        "config": cfg.spec(),
        "tma": "UTMALDG" in sass,
        "registers": int(usage.group(1)) if usage else None,
        "stack_bytes": int(usage.group(2)) if usage else None,  # spills live in the stack frame
        "shared_bytes": kernel.metadata.shared,
        "loops": sass_loops(sass),
        "wgmma_serialized": serialized.group(0) if serialized else None,  # ptxas serialised the wgmma
    }


def compile_preprocessing(
    arch: str,
    head_dim: int = 128,
    stages: Optional[int] = None,
    varlen: bool = False,
    inline: Optional[tuple[int, int, bool]] = None,
) -> dict[str, dict]:
    """Compile the dense K/V pre-processing kernels (column statistics per part, the combining
    launch, the INT8 + FP8 block quantization) for ``arch`` without a GPU.

    Returns {kernel: {"ok", "error", "asm"}} (asm: PTX or AMDGCN). FP8 V where the arch table
    has an FP8 path; ``stages`` overrides ``quant.PART_STAGES``; the PDL trigger as for an
    unknown key count (``features``: only with SAGEBUILD_PDL=1); ``varlen``: packed sequences;
    ``inline``: the quantization with its in-launch statistics, (rows per load, warps, FP8 V).
    Each result also has ``shared``: the bytes of shared memory a CTA needs (None on failure).
    """
    import triton
    from triton.backends.compiler import GPUTarget

    from sagebuild.attention import features
    from sagebuild.kernels.triton import quant

    row = archs.get(archs.normalize(arch))
    fp8 = bool(row.fp8_mma) if inline is None else inline[2]
    stats = dict(INLINE_STATS=inline is not None, STATS_BLK=128 if inline is None else inline[0])
    both = dict(SMOOTH_K=True, V_FP8=fp8, IS_VARLEN=varlen)
    kernels = {
        "kv_partials": (
            quant._kv_partials_kernel,
            dict(HEAD_DIM=head_dim, BLOCK_D=head_dim, CHUNK=quant.chunk_rows(head_dim), **both,
                 PART_STAGES=quant.PART_STAGES if stages is None else stages, ROW_UNIT=1),
            {"K": "*fp16", "V": "*fp16", "KP": "*fp32", "VP": "*fp32", "CU": "*i32"},
        ),
        "kv_finalize": (
            quant._kv_finalize_kernel,
            dict(BLOCK_D=head_dim, **both),
            {"KP": "*fp32", "VP": "*fp32", "KM": "*fp32", "VA": "*fp32", "CU": "*i32"},
        ),
        "quant_blocks": (
            quant._quant_blocks_kernel,
            dict(HEAD_DIM=head_dim, BLOCK_D=head_dim, BLK=64, HAS_MEAN=True, V_FP8=fp8,
                 FP8_MAX=240.0 if aot._fp8_type(row) == "fp8e4b8" else 448.0,
                 FP8_CVT_ASM=fp8 and row.fp8_cvt_asm, IS_VARLEN=varlen,
                 **stats, STATS_STAGES=1 if inline is None else quant.INLINE_STAGES,
                 PDL_TRIGGER=features.enabled("pdl", row.family), V_KEY_ORDER=False, ROW_UNIT=1,
                 stride_wn=1),  # FP8 V's tokens are contiguous: the JIT specialises that 1
            {"X": "*fp16", "KM": "*fp32", "XQ": "*i8", "XS": "*fp32", "V": "*fp16", "VA": "*fp32",
             "VSO": "*fp32", "VQ": f"*{aot._fp8_type(row)}" if fp8 else "*fp16", "CU": "*i32"},
        ),
    }  # fmt: skip
    out: dict[str, dict] = {}
    for name, (fn, constexprs, ptr) in kernels.items():
        # every stride a multiple of 16 elements, FP8 V's rows too (``layout.v_row_stride``)
        aligned = lambda a: a == "PART_ROWS" or a.startswith("stride_")  # noqa: E731
        src = aot._ast_source(fn, constexprs, ptr, ("scale_mul",), aligned)
        try:
            warps = inline[1] if inline is not None and name == "quant_blocks" else 4
            k = triton.compile(src, target=GPUTarget(*row.triton_target), options={"num_warps": warps})
            out[name] = {"ok": True, "error": None, "asm": aot.assembly(k, row), "shared": k.metadata.shared}
        except Exception as exc:  # report, never raise
            error = f"{type(exc).__name__}: {exc}"[-500:]
            out[name] = {"ok": False, "error": error, "asm": None, "shared": None}
    return out


# ptxas's notes that it serialised every wgmma of a kernel (an accumulator read in flight:
# C7514; a wgmma input defined by another instruction while one is in flight: C7513; too few
# registers: C7512): each wgmma is then waited on alone, and the MMA overlaps nothing.
WGMMA_SERIALIZED = re.compile(r"C751[234]\b[^\n]*")


def _bundled_tool(name: str) -> str:
    """The path of a CUDA binary shipped with Triton's NVIDIA backend (ptxas, cuobjdump)."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def ptxas_verbose(ptx: str, cc: int) -> Optional[str]:
    """``ptxas -v`` on a kernel's PTX with the ptxas bundled with Triton (registers, spills and
    its performance notes, which Triton's own compile does not show); None without one."""
    ptxas = _bundled_tool("ptxas")
    if not os.path.exists(ptxas):
        return None
    arch = f"sm_{cc}a" if cc == 90 else f"sm_{cc}"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run(
            [ptxas, f"-arch={arch}", "-v", src, "-o", os.path.join(tmp, "k.cubin")],
            capture_output=True,
            text=True,
            timeout=300,
        )
    return proc.stdout + proc.stderr
