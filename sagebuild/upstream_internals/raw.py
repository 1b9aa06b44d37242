"""Upstream's raw attention kernels (``_qattn_sm80/89/90``, ``sm*_compile``) and its Triton
``attn_false``/``attn_true``, with upstream's argument order, on our attention.

They take what upstream's quantizers produced (INT8 Q/K with per-warp or per-thread scales, FP16
or upstream's FP8 V layout) and write ``output`` in place. Our kernel quantizes Q itself and reads
K in its own blocks, so these dequantize their inputs (``quant.dequantize_*``) and run ``sageattn``
on them: the same result within the kernels' bounds, at the memory of a 16-bit Q/K/V, not the
smaller footprint the callers quantized ahead for. Every accumulation variant (``accum_f16``,
``inst_buf``) runs our default P·V. The scale layout is read off the scale tensors' lengths and
the arch's CTA sizes (upstream's: 128 query and 64 key rows on sm80/sm89, 64 and 128 on sm90);
one that fits neither granularity is a clear error. Returns the log-sum-exp in upstream's base-2
units when ``return_lse`` (``core`` divides it by log2(e)), else an empty tensor.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch
import triton

from sagebuild.attention.functions import sageattn
from sagebuild.attention.validate import AttentionInputError
from sagebuild.kernels.triton.quant import LOG2E
from sagebuild.upstream_internals import quant

# (query rows, key rows) per CTA of upstream's kernels, by the arch they were built for
CTA = {"sm80": (128, 64), "sm89": (128, 64), "sm90": (64, 128)}
PER_WARP, PER_THREAD = 2, 3  # upstream's qk_quant_gran codes


def _warp_rows(n: int, cta: int, entries: int, name: str) -> int:
    """Rows per warp slice from a scale tensor's entries per warp-ordered head (``entries``)."""
    blocks = triton.cdiv(n, cta)
    if entries <= 0 or (blocks * cta) % entries:
        raise AttentionInputError(
            f"{name} has a scale layout that fits no warp size for {n} rows in blocks of {cta}",
            "pass the scales upstream's quantizer (per_warp_int8 / per_thread_int8) returned for this kernel",
        )
    return blocks * cta // entries


def _dequant_qk(
    arch: str, q: Any, k: Any, qs: Any, ks: Any, layout: str, gran: int, dtype: torch.dtype
) -> tuple[Any, Any]:
    """[B, H, N, D] Q and K in ``dtype`` from upstream's INT8 codes and per-warp or per-thread scales."""
    cta_q, cta_k = CTA[arch]
    nq, nk = quant.hnd(q, layout).shape[2], quant.hnd(k, layout).shape[2]
    dev = q.device
    if gran == PER_THREAD:
        wq = _warp_rows(nq, cta_q, qs.shape[-1] // 8, "query_scale")
        wk = _warp_rows(nk, cta_k, ks.shape[-1] // 4, "key_scale")
        qi, ki = quant.thread_index(nq, wq, True, dev), quant.thread_index(nk, wk, False, dev)
    elif gran == PER_WARP:
        qi = quant.block_index(nq, _warp_rows(nq, cta_q, qs.shape[-1], "query_scale"), dev)
        ki = quant.block_index(nk, cta_k, dev)
    else:
        raise AttentionInputError(
            f"qk_quant_gran {gran} is not one of upstream's codes", "pass 2 (per warp) or 3 (per thread)"
        )
    return quant.dequantize_int8(q, qs, qi, layout, dtype), quant.dequantize_int8(k, ks, ki, layout, dtype)


def _compute_dtype(out: Any) -> torch.dtype:
    """The 16-bit type our kernels run in for an output tensor (its own, else float16)."""
    return out.dtype if out.dtype in (torch.float16, torch.bfloat16) else torch.float16


def _layout_name(tensor_layout: Any) -> str:
    """Upstream's integer layout (0 NHD, 1 HND) or its name."""
    names = {0: "NHD", 1: "HND", "NHD": "NHD", "HND": "HND"}
    if tensor_layout not in names:
        raise AttentionInputError(
            f"tensor_layout {tensor_layout!r}", "pass 0 (NHD) or 1 (HND), upstream's codes"
        )
    return names[tensor_layout]


def _attend(
    q: Any, k: Any, v: Any, out: Any, layout: str, causal: Any, sm_scale: float, lse: Any, mask: Any = None
) -> Any:
    """Our attention on HND q/k/v in ``out``'s 16-bit type, written into ``out`` (in ``layout``);
    the LSE in upstream's base-2 units when ``lse``, else an empty tensor."""
    dtype = _compute_dtype(out)
    res = sageattn(
        q.to(dtype), k.to(dtype), v.to(dtype), "HND", bool(causal), float(sm_scale), bool(lse), attn_mask=mask
    )
    o, lse_nat = res if lse else (res, None)
    quant.hnd(out, layout).copy_(o)
    return lse_nat * LOG2E if lse_nat is not None else torch.empty(0, dtype=torch.float32, device=out.device)


def _kernel(arch: str, fp8: bool, scaled: bool, mean: bool) -> Callable[..., Any]:
    """One of upstream's raw kernels: ``value_scale`` after the key scale when ``scaled``,
    ``value_mean`` after that when ``mean``, then the integer flags (upstream's order)."""

    def run(
        query: Any, key: Any, value: Any, output: Any, query_scale: Any, key_scale: Any, *rest: Any
    ) -> Any:
        extra = int(scaled) + int(mean)
        if len(rest) != extra + 5:
            raise AttentionInputError(
                f"{run.__name__} takes {11 + extra} arguments, got {6 + len(rest)}",
                "pass upstream's order: q, k, v, o, q_scale, k_scale, "
                + ("v_scale, " if scaled else "")
                + ("v_mean, " if mean else "")
                + "tensor_layout, is_causal, qk_quant_gran, sm_scale, return_lse",
            )
        v_scale = rest[0] if scaled else None
        v_mean: Optional[Any] = rest[extra - 1] if mean else None
        layout_code, causal, gran, sm_scale, lse = rest[extra:]
        layout = _layout_name(layout_code)
        dtype = _compute_dtype(output)
        q, k = _dequant_qk(arch, query, key, query_scale, key_scale, layout, int(gran), dtype)
        if fp8:
            v = quant.dequantize_fp8_v(value, v_scale, v_mean, k.shape[2], layout, dtype)
        else:
            v = quant.hnd(value, layout).to(dtype)
            v = v if v_mean is None else v + v_mean[:, :, None].to(dtype)
        return _attend(q, k, v, output, layout, causal, sm_scale, lse)

    return run


# upstream's pybind names per module: (FP8 V, fused V scale, fused V mean)
KERNELS = {
    "sm80": {
        "qk_int8_sv_f16_accum_f32_attn": (False, False, False),
        "qk_int8_sv_f16_accum_f16_attn": (False, False, False),
        "qk_int8_sv_f16_accum_f16_attn_inst_buf": (False, False, False),
        "qk_int8_sv_f16_accum_f16_fuse_v_mean_attn": (False, False, True),
    },
    "sm89": {
        "qk_int8_sv_f8_accum_f32_attn": (True, False, False),
        "qk_int8_sv_f8_accum_f32_attn_inst_buf": (True, False, False),
        "qk_int8_sv_f8_accum_f16_attn_inst_buf": (True, False, False),
        "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn": (True, True, False),
        "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf": (True, True, False),
        "qk_int8_sv_f8_accum_f16_fuse_v_scale_attn_inst_buf": (True, True, False),
        "qk_int8_sv_f8_accum_f32_fuse_v_scale_fuse_v_mean_attn": (True, True, True),
    },
    "sm90": {
        "qk_int8_sv_f8_accum_f32_attn_inst_buf": (True, False, False),
        "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn": (True, True, False),
        "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf": (True, True, False),
    },
}


def _module(arch: str) -> SimpleNamespace:
    fns = {}
    for name, flags in KERNELS[arch].items():
        fn = _kernel(arch, *flags)
        fn.__name__ = fn.__qualname__ = name
        fns[name] = fn
    return SimpleNamespace(**fns)


sm80, sm89, sm90 = _module("sm80"), _module("sm89"), _module("sm90")


def _per_block(q: Any, k: Any, qs: Any, ks: Any, layout: str, dtype: torch.dtype) -> tuple[Any, Any]:
    """Q (times sm_scale·log2 e, folded in its scales) and K from ``per_block_int8``'s output as
    upstream's ``attn_false`` reads it: one scale per 128 queries and per 64 keys."""
    nq, nk = quant.hnd(q, layout).shape[2], quant.hnd(k, layout).shape[2]
    for name, scale, n, rows in (("q_scale", qs, nq, 128), ("k_scale", ks, nk, 64)):
        if scale.shape[-1] != triton.cdiv(n, rows):
            raise AttentionInputError(
                f"{name} has {scale.shape[-1]} entries per head; attn_false reads one per {rows} rows "
                f"({triton.cdiv(n, rows)} for {n})",
                "quantize with per_block_int8 at its defaults (BLKQ=128, BLKK=64)",
            )
    qi, ki = quant.block_index(nq, 128, q.device), quant.block_index(nk, 64, k.device)
    return quant.dequantize_int8(q, qs, qi, layout, dtype), quant.dequantize_int8(k, ks, ki, layout, dtype)


def _triton_forward(
    q: Any, k: Any, v: Any, qs: Any, ks: Any, layout: str, mask: Any, dtype: Any, lse: bool, causal: bool
) -> tuple[Any, Any]:
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    qf, kf = _per_block(q, k, qs, ks, layout, _compute_dtype(out))
    vf = quant.hnd(v, layout).to(qf.dtype)
    # Q's scales carry sm_scale·log2 e: an sm_scale of ln 2 makes the kernel's exponent exactly that
    return out, _attend(qf, kf, vf, out, layout, causal, 1 / LOG2E, lse, mask)


def attn_false(
    q: Any, k: Any, v: Any, q_scale: Any, k_scale: Any, tensor_layout: str = "HND", attn_mask: Any = None,
    output_dtype: torch.dtype = torch.float16, return_lse: bool = False,
) -> tuple[Any, Any]:  # fmt: skip
    """Upstream's non-causal Triton forward on ``per_block_int8``'s output: (o, lse in base-2
    units, or an empty tensor). ``attn_mask``: bool (True attends) or additive, as upstream's."""
    return _triton_forward(
        q, k, v, q_scale, k_scale, tensor_layout, attn_mask, output_dtype, bool(return_lse), False
    )


def attn_true(
    q: Any, k: Any, v: Any, q_scale: Any, k_scale: Any, tensor_layout: str = "HND",
    output_dtype: torch.dtype = torch.float16, return_lse: bool = False,
) -> tuple[Any, Any]:  # fmt: skip
    """Upstream's causal Triton forward on ``per_block_int8``'s output: (o, lse or empty)."""
    return _triton_forward(
        q, k, v, q_scale, k_scale, tensor_layout, None, output_dtype, bool(return_lse), True
    )
