"""Ahead-of-time compiles of the attention kernel for a GPU that is not present.

``triton.compile`` with a ``GPUTarget`` needs no GPU: this proves that a variant lowers for an
arch and that the matrix instructions we count on (``archs.Arch.int8_mma`` / ``fp8_mma``) are
really in the assembly (PTX for CUDA, AMDGCN for ROCm) rather than an emulation.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
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
    v_type = _fp8_type(row) if fp8 else "fp16"
    ptr = {
        "QF": "*fp16",
        "K": "*i8",
        "KS": "*fp32",
        "V": f"*{v_type}",
        "VS": "*fp32",
        "KM": "*fp32",
        "Out": "*fp16",
        "LSE": "*fp32",
        "CUQ": "*i32",
        "CUK": "*i32",
        "AM": "*i8",  # the attn_mask (unused: no mask)
    }
    if plan.tma:  # host-built descriptors (attn_fwd._kv_descriptors): their dtype and box
        boxes = kv_desc_boxes(plan.head_dim_pad, plan.config.block_n, plan.split_head_dim)
        types = ("i8", v_type, "i8", v_type)
        ptr |= {
            name: f"tensordesc<{t}{box}>" for name, t, box in zip(("KD", "VD", "KD2", "VD2"), types, boxes)
        }
    else:  # the K/V pointers again, unused
        ptr |= {"KD": ptr["K"], "VD": ptr["V"], "KD2": ptr["K"], "VD2": ptr["V"]}
    constexprs = plan.constexprs()
    # Unit strides are folded by Triton's JIT: FP16 V is token-major (channel stride 1) unless the
    # config copies it channel-major (``vcm``), FP8 V channel-major (token stride 1).
    constexprs["stride_vn" if fp8 or plan.v_channel_major else "stride_vd"] = 1
    aligned = {"H", "GROUP", "N_Q", "N_K", "KS_NBLK"}
    src = _ast_source(
        _attn_fwd_kernel, constexprs, ptr, ("q_scale_mul", "sm_scale"),
        lambda a: a.startswith("stride_") or a in aligned,
    )  # fmt: skip
    return src, plan.config


def compile_attention(variant: str, row: archs.Arch, *args: Any):
    """The attention kernel compiled for ``row`` without a GPU, and its config (``_source``'s
    arguments)."""
    import triton
    from triton.backends.compiler import GPUTarget

    src, cfg = _source(variant, row, *args)
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
    """Compile one variant for one arch and look for its INT8 (and FP8) matrix instructions, with the
    config table's row for ``n_k`` keys (0: any length) and FP8 accumulation ``accum``."""
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
        patterns = {"int8": row.int8_mma, **({"fp8": row.fp8_mma} if variant.endswith("fp8") else {})}
        for label, pattern in patterns.items():
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
