"""Ahead-of-time compiles of the attention kernel for a GPU that is not present.

``triton.compile`` with a ``GPUTarget`` needs no GPU: this proves that a variant lowers for an
arch and that the matrix instructions we count on (``archs.Arch.int8_mma`` / ``fp8_mma``) are
really in the assembly (PTX for CUDA, AMDGCN for ROCm) rather than an emulation.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterable, Optional

from sagebuild import archs

VARIANTS = ("qk_int8_pv_fp16", "qk_int8_pv_fp8")


@dataclass
class AotResult:
    """One compile: whether it lowered and which expected matrix instruction(s) were found."""

    arch: str
    variant: str
    head_dim: int
    ok: bool
    instruction: Optional[str]
    seconds: float
    error: Optional[str] = None

    def to_dict(self) -> dict:
        return asdict(self)


def _fp8_type(row: archs.Arch) -> str:
    return "fp8e4b8" if row.fp8_dtype == "float8_e4m3fnuz" else "fp8e4nv"


def _ast_source(
    fn: Any, constexprs: dict, ptr: dict[str, str], floats: Iterable[str], aligned: Callable[[str], bool]
):
    """``fn`` as the JIT sees it for contiguous inputs: the pointers in ``ptr`` 16-byte aligned,
    the ``floats`` fp32, every other argument int32, a multiple of 16 where ``aligned(name)``.
    Without these hints loads are not vectorised and the assembly would not be the one that runs."""
    from triton.compiler import ASTSource

    div16 = [["tt.divisibility", 16]]
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in ptr:  # pointers (16-byte aligned) and tensor descriptors
            signature[name] = ptr[name]
            if ptr[name].startswith("*"):
                attrs[(i,)] = div16
        elif name in floats:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if aligned(name):
                attrs[(i,)] = div16
    return ASTSource(fn, signature, constexprs, attrs)


def _source(
    variant: str,
    row: archs.Arch,
    head_dim: int,
    causal: bool,
    n_k: int = 0,
    accum: str = "fp32+fp32",
    config: Optional[str] = None,
):
    """The attention kernel's source for one arch exactly as a call would compile it: the plan
    (``plan.make_plan``) of a dense call with ``n_k`` keys, or with ``config`` forced. The
    alignment hints are those of contiguous inputs whose head dim is a multiple of 16."""
    from sagebuild.attention.plan import make_plan
    from sagebuild.kernels.triton.attn_fwd import _attn_fwd_kernel, kv_desc_boxes

    fp8 = variant == "qk_int8_pv_fp8"
    plan = make_plan(
        row.name, head_dim=head_dim, n_k=n_k, pv="fp8" if fp8 else "fp16", pv_accum=accum,
        causal=causal, config=config,
    )  # fmt: skip
    ptr = {
        "QF": "*fp16",
        "K": "*i8",
        "KS": "*fp32",
        "V": f"*{_fp8_type(row)}" if fp8 else "*fp16",
        "VS": "*fp32",
        "KM": "*fp32",
        "Out": "*fp16",
        "LSE": "*fp32",
        "CUQ": "*i32",
        "CUK": "*i32",
        "AM": "*i8",  # the attn_mask (unused: no mask)
    }
    v_type = _fp8_type(row) if fp8 else "fp16"
    if plan.tma:  # host-built descriptors (attn_fwd._kv_descriptors): their dtype and box
        boxes = kv_desc_boxes(plan.head_dim_pad, plan.config.block_n, plan.split_head_dim)
        types = ("i8", v_type, "i8", v_type)
        ptr |= {
            name: f"tensordesc<{t}{box}>" for name, t, box in zip(("KD", "VD", "KD2", "VD2"), types, boxes)
        }
    else:  # the K/V pointers again, unused
        ptr |= {"KD": "*i8", "VD": f"*{v_type}", "KD2": "*i8", "VD2": f"*{v_type}"}
    constexprs = plan.constexprs()
    # Unit strides are folded by Triton's JIT: FP16 V is token-major (channel stride 1), FP8 V
    # channel-major (token stride 1).
    constexprs["stride_vn" if fp8 else "stride_vd"] = 1
    aligned = {"H", "GROUP", "N_Q", "N_K", "KS_NBLK"}
    src = _ast_source(
        _attn_fwd_kernel, constexprs, ptr, ("q_scale_mul", "sm_scale"),
        lambda a: a.startswith("stride_") or a in aligned,
    )  # fmt: skip
    return src, plan.config


def compile_attention(
    variant: str,
    row: archs.Arch,
    head_dim: int,
    causal: bool,
    n_k: int = 0,
    accum: str = "fp32+fp32",
    config: Optional[str] = None,
):
    """The attention kernel compiled for ``row`` without a GPU (``_source``), and its config."""
    import triton
    from triton.backends.compiler import GPUTarget

    src, cfg = _source(variant, row, head_dim, causal, n_k, accum, config)
    return triton.compile(src, target=GPUTarget(*row.triton_target), options=cfg.launch_options()), cfg


def assembly(kernel: Any, row: archs.Arch) -> str:
    """A compiled kernel's PTX (NVIDIA) or AMDGCN (AMD) as text."""
    asm = kernel.asm.get("ptx" if row.vendor == "cuda" else "amdgcn") or ""
    return asm.decode(errors="replace") if isinstance(asm, bytes) else asm


def compile_variant(
    variant: str,
    arch: str,
    head_dim: int = 128,
    causal: bool = False,
    n_k: int = 0,
    accum: str = "fp32+fp32",
) -> AotResult:
    """Compile one variant for one arch and look for its INT8 (and FP8) matrix instructions.

    The config is the table's row for ``n_k`` keys (0: the rows for any length) and the FP8
    accumulation ``accum`` ("fp32+fp32" or "fp32", as ``pv_accum_dtype``)."""
    t0 = time.perf_counter()
    name = archs.normalize(arch)

    def result(instruction: Optional[str] = None, error: Optional[str] = None) -> AotResult:
        return AotResult(name, variant, head_dim, error is None, instruction, time.perf_counter() - t0, error)

    try:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: {VARIANTS}")
        row = archs.get(name)
        if variant == "qk_int8_pv_fp8" and not row.fp8_mma:
            raise ValueError(f"{row.name} has no FP8 matrix path in the arch table (fp8_mma is empty)")
        if not row.int8_mma:
            raise ValueError(f"{row.name} has no INT8 matrix instruction in the arch table")
        asm = assembly(compile_attention(variant, row, head_dim, causal, n_k, accum)[0], row)
        found = []
        for label, pattern in (
            ("int8", row.int8_mma),
            ("fp8", row.fp8_mma if variant.endswith("fp8") else None),
        ):
            if not pattern:
                continue
            m = re.search(pattern, asm)
            if m is None:
                return result(
                    error=f"no {label} matrix instruction matching {pattern!r} in the {row.vendor} assembly"
                )
            found.append(m.group(0))
        return result("; ".join(found))
    except Exception as exc:  # report, never raise: callers tabulate results across archs
        text = str(exc).strip()
        return result(error=f"{type(exc).__name__}: {text.splitlines()[-1] if text else ''}")


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
    import os
    import subprocess
    import tempfile

    row = archs.get(archs.normalize(arch))
    if row.vendor != "cuda":
        raise ValueError(f"{row.name}: SASS exists only for NVIDIA archs")
    kernel, cfg = compile_attention(variant, row, head_dim, causal, n_k, accum, config)
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
    arch: str, head_dim: int = 128, stages: Optional[int] = None, varlen: bool = False
) -> dict[str, dict]:
    """Compile the dense K/V pre-processing kernels (column statistics per part, the combining
    launch, the INT8 + FP8 block quantization) for ``arch`` without a GPU.

    Returns {kernel: {"ok", "error", "asm"}} (asm: PTX or AMDGCN). FP8 V where the arch table
    has an FP8 path; ``stages`` overrides ``quant.PART_STAGES``; the PDL trigger as for an
    unknown key count (``features``: only with SAGEBUILD_PDL=1); ``varlen``: packed sequences.
    """
    import triton
    from triton.backends.compiler import GPUTarget

    from sagebuild.attention import features
    from sagebuild.kernels.triton import quant

    row = archs.get(archs.normalize(arch))
    fp8 = bool(row.fp8_mma)
    both = dict(SMOOTH_K=True, V_FP8=fp8, IS_VARLEN=varlen)
    kernels = {
        "kv_partials": (
            quant._kv_partials_kernel,
            dict(HEAD_DIM=head_dim, BLOCK_D=head_dim, CHUNK=quant.chunk_rows(head_dim), **both,
                 PART_STAGES=quant.PART_STAGES if stages is None else stages),
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
                 FP8_MAX=240.0 if _fp8_type(row) == "fp8e4b8" else 448.0, IS_VARLEN=varlen,
                 INLINE_STATS=False, STATS_BLK=128, STATS_STAGES=1,
                 PDL_TRIGGER=features.enabled("pdl", row.family), V_KEY_ORDER=False,
                 stride_wn=1),  # FP8 V's tokens are contiguous: the JIT specialises that 1
            {"X": "*fp16", "KM": "*fp32", "XQ": "*i8", "XS": "*fp32", "V": "*fp16", "VA": "*fp32",
             "VSO": "*fp32", "VQ": f"*{_fp8_type(row)}" if fp8 else "*fp16", "CU": "*i32"},
        ),
    }  # fmt: skip
    out: dict[str, dict] = {}
    for name, (fn, constexprs, ptr) in kernels.items():
        # every stride a multiple of 16 elements, FP8 V's rows too (``layout.v_row_stride``)
        aligned = lambda a: a == "PART_ROWS" or a.startswith("stride_")  # noqa: E731
        src = _ast_source(fn, constexprs, ptr, ("scale_mul",), aligned)
        try:
            k = triton.compile(src, target=GPUTarget(*row.triton_target), options={"num_warps": 4})
            out[name] = {"ok": True, "error": None, "asm": assembly(k, row)}
        except Exception as exc:  # report, never raise
            out[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[-500:], "asm": None}
    return out


# ptxas's notes that it serialised every wgmma of a kernel (an accumulator read in flight:
# C7514; a wgmma input defined by another instruction while one is in flight: C7513; too few
# registers: C7512): each wgmma is then waited on alone, and the MMA overlaps nothing.
WGMMA_SERIALIZED = re.compile(r"C751[234]\b[^\n]*")


def _bundled_tool(name: str) -> str:
    """The path of a CUDA binary shipped with Triton's NVIDIA backend (ptxas, cuobjdump)."""
    import os

    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def ptxas_verbose(ptx: str, cc: int) -> Optional[str]:
    """``ptxas -v`` on a kernel's PTX with the ptxas bundled with Triton (registers, spills and
    its performance notes, which Triton's own compile does not show); None without one."""
    import os
    import subprocess
    import tempfile

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
