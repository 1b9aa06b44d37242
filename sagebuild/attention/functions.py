"""The public attention API: upstream SageAttention 2.2.0's six functions, exactly, over our kernels.

Same names, positional order, defaults and trailing ``**kwargs`` as upstream's
``sageattention/core.py``, so code written for upstream runs unchanged. Every value upstream
accepts maps to our nearest kernel of equal or better accuracy (docs/kernels.md, "Upstream API
mapping"; the tables below are its code). A non-None ``attn_mask`` runs in the kernels and
``dropout_p > 0`` runs exact attention, warned once (``ops.run_reference``): neither is dropped as upstream
does. sagebuild's own keywords ride along in ``**kwargs``: ``qk_quant_gran``, ``config``,
``quantization_backend="ext"``, varlen's ``pv`` and ``sageattn``'s ``pv_accum_dtype``. The
``_cuda`` names run our Triton kernels on every GPU. Under ``torch.compile`` every call is one
custom op (``ops``): no graph break.
"""

from __future__ import annotations

from typing import Any, Optional

import torch

from sagebuild.attention import ops
from sagebuild.attention.plan import check_choice
from sagebuild.attention.validate import AttentionInputError
from sagebuild.upstream_api import UPSTREAM_NAMES

# upstream value -> ours (each table in sorted order: its error lists it). Upstream's per-thread
# scales are finer than anything we have; our finest is one scale per warp's slice of a Q block.
_GRANULARITY = {"per_block": "per_block", "per_thread": "per_warp", "per_warp": "per_warp"}
# upstream's "cuda" quantization kernels -> ours (Triton, or fused into the attention kernel)
_BACKEND = {"auto": "auto", "cuda": "auto", "ext": "ext", "triton": "triton"}
# FP8 P·V accumulation: "fp32" accumulates in the MMA across key tiles (as upstream's "fp32");
# every other name upstream takes runs two-level FP32, at least as accurate as each of them
_ACCUM = {"fp32": "fp32", **dict.fromkeys(("fp32+fp32", "fp32+fp16", "fp16+fp32", "fp16"), "fp32+fp32")}

# Eager calls skip the op layer (torch.library's dispatch costs host time at small shapes); traced
# calls always take it. ``tests/test_compile_ops_gpu.py`` measures the difference.
ALWAYS_OPS = False


def _pick(name: str, table: dict[str, str], value: Any, fix: str) -> str:
    check_choice(name, value, table, fix)
    return table[value]


def _gran(value: Any) -> str:
    fix = "pass 'per_thread' or 'per_warp' (both run our finest, per-warp scales) or 'per_block'"
    return _pick("qk_quant_gran", _GRANULARITY, value, fix)


def _fp8_accum(value: Any) -> str:
    return _pick(
        "pv_accum_dtype", _ACCUM, value, "pass 'fp32+fp32' (two-level, accurate) or 'fp32' (MMA-accumulated)"
    )


def _config(value: Any) -> Optional[str]:
    """A launch config as the ops take it: the string ``configs.parse_config`` reads."""
    if value is None or isinstance(value, str):
        return value
    spec = getattr(value, "spec", None)
    if callable(spec):
        return spec()
    if isinstance(value, (tuple, list)):
        return ",".join(str(x) for x in value)
    raise AttentionInputError(
        f"config must be a LaunchConfig, a tuple or a string like '128,64,8,3', got {type(value).__name__}",
        "pass config='BLOCK_M,BLOCK_N,num_warps,num_stages' or leave it unset",
    )


def _use_ops() -> bool:
    return ALWAYS_OPS or torch.compiler.is_compiling()


def _dense(
    where: str,
    pv: str,
    pv_accum: str,
    q: Any,
    k: Any,
    v: Any,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    return_lse: bool,
    smooth_k: bool,
    x: dict[str, Any],
) -> Any:
    """Every dense public function ends here (``x``: upstream's values of the keywords beyond its
    signature): to the kernels (masks included), or with dropout to exact attention, warned once."""
    gran, config, attn_mask = _gran(x["qk_quant_gran"]), _config(x["config"]), x["attn_mask"]
    fix = "pass 'triton' or 'cuda' (both run our quantization kernels), or 'ext' for the C++ extension"
    backend = _pick("quantization_backend", _BACKEND, x["quantization_backend"], fix)
    if x["dropout_p"]:
        reference = ops.attention_ref if _use_ops() else ops.run_reference
        out, lse = reference(q, k, v, attn_mask, float(x["dropout_p"]), tensor_layout, bool(is_causal),
                             sm_scale, bool(return_lse), where)  # fmt: skip
        return (out, lse) if return_lse else out
    args = (q, k, v, tensor_layout, bool(is_causal), sm_scale, gran, bool(smooth_k), pv, pv_accum, backend,
            config)  # fmt: skip
    if _use_ops():
        return ops.attention_lse(*args, attn_mask) if return_lse else ops.attention(*args, attn_mask)
    return ops.run_dense(*args, bool(return_lse), attn_mask)


def _extras(kwargs: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    """sagebuild's own keywords out of ``**kwargs`` (a fresh dict, with defaults); others are ignored."""
    if not kwargs:  # the usual call: no per-call dict to build (small calls are host-bound)
        return defaults
    return {name: kwargs.get(name, default) for name, default in defaults.items()}


def sageattn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    return_lse: bool = False,
    *,
    attn_mask: Optional[torch.Tensor] = None,
    **kwargs: Any,
) -> Any:
    """Quantized attention with the variant measured best for this GPU, head dim and key count.

    As upstream's, K is always smoothed (a ``smooth_k`` keyword is ignored). ``attn_mask`` (SDPA's:
    bool, True keeps, or additive) is a keyword-only parameter beyond upstream's, named in the
    signature because ComfyUI sends masks only to a ``sageattn`` whose signature names it. Returns
    out, or (out, lse [B, H_q, N_q] float32, natural log) with ``return_lse``.
    """
    x = _extras(kwargs, qk_quant_gran="per_warp", quantization_backend="auto", pv_accum_dtype=None,
                config=None, dropout_p=0.0)  # fmt: skip
    x["attn_mask"] = attn_mask
    accum = "auto" if x["pv_accum_dtype"] is None else _fp8_accum(x["pv_accum_dtype"])
    return _dense("sageattn", "auto", accum, q, k, v, tensor_layout, is_causal, sm_scale, return_lse, True, x)


def sageattn_qk_int8_pv_fp16_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    quantization_backend: str = "triton",
    is_causal: bool = False,
    attn_mask: Optional[torch.Tensor] = None,
    sm_scale: Optional[float] = None,
    smooth_k: bool = True,
    return_lse: bool = False,
    **kwargs: Any,
) -> Any:
    """INT8 Q·Kᵀ, FP16 (or BF16) P·V with FP32 accumulation. Returns out, or (out, lse)."""
    x = _extras(kwargs, qk_quant_gran="per_warp", config=None, dropout_p=0.0)
    x.update(quantization_backend=quantization_backend, attn_mask=attn_mask)
    return _dense("sageattn_qk_int8_pv_fp16_triton", "fp16", "fp32+fp32", q, k, v, tensor_layout, is_causal,
                  sm_scale, return_lse, smooth_k, x)  # fmt: skip


def sageattn_qk_int8_pv_fp8_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    qk_quant_gran: str = "per_warp",
    smooth_k: bool = True,
    return_lse: bool = False,
    quantization_backend: str = "auto",
    pv_accum_dtype: str = "fp32+fp32",
    config: Any = None,
    **kwargs: Any,
) -> Any:
    """INT8 Q·Kᵀ, FP8 E4M3 P·V (sagebuild's own name). Returns out, or (out, lse).

    ``pv_accum_dtype``: "fp32+fp32" adds each key tile's P·V into an FP32 buffer; "fp32" lets the
    FP8 MMA accumulate across key tiles (faster, less accurate at length: docs/kernels.md). A GPU
    without FP8 matrix units is a clear error (``sageattn_qk_int8_pv_fp8_cuda`` runs FP16 there).
    """
    x = _extras(kwargs, attn_mask=None, dropout_p=0.0)
    x.update(qk_quant_gran=qk_quant_gran, quantization_backend=quantization_backend, config=config)
    return _dense("sageattn_qk_int8_pv_fp8_triton", "fp8", _fp8_accum(pv_accum_dtype), q, k, v, tensor_layout,
                  is_causal, sm_scale, return_lse, smooth_k, x)  # fmt: skip


def _cuda_named(
    where: str, pv: str, q: Any, k: Any, v: Any, tensor_layout: str, is_causal: bool, qk_quant_gran: str,
    sm_scale: Optional[float], pv_accum_dtype: str, smooth_k: bool, return_lse: bool, kwargs: dict[str, Any],
) -> Any:  # fmt: skip
    """Upstream's CUDA-kernel names on our kernels. ``smooth_v`` is accepted and has nothing to do:
    upstream smooths V only to protect FP16 accumulation, and ours always accumulates in FP32."""
    x = _extras(kwargs, quantization_backend="auto", config=None, attn_mask=None, dropout_p=0.0)
    x["qk_quant_gran"] = qk_quant_gran
    accum = _fp8_accum(pv_accum_dtype)  # validates the name for either P·V
    accum = "fp32+fp32" if pv == "fp16" else accum  # FP16 P·V always accumulates in FP32
    return _dense(where, pv, accum, q, k, v, tensor_layout, is_causal, sm_scale, return_lse, smooth_k, x)


def sageattn_qk_int8_pv_fp16_cuda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    qk_quant_gran: str = "per_thread",
    sm_scale: Optional[float] = None,
    pv_accum_dtype: str = "fp32",
    smooth_k: bool = True,
    smooth_v: bool = False,
    return_lse: bool = False,
    **kwargs: Any,
) -> Any:
    """Upstream's name for INT8 Q·Kᵀ, FP16 P·V: our FP16 P·V kernel, FP32 accumulation whatever
    ``pv_accum_dtype`` says ("fp16", "fp16+fp32" or "fp32"). Returns out, or (out, lse)."""
    return _cuda_named("sageattn_qk_int8_pv_fp16_cuda", "fp16", q, k, v, tensor_layout, is_causal,
                       qk_quant_gran, sm_scale, pv_accum_dtype, smooth_k, return_lse, kwargs)  # fmt: skip


def sageattn_qk_int8_pv_fp8_cuda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    qk_quant_gran: str = "per_thread",
    sm_scale: Optional[float] = None,
    pv_accum_dtype: str = "fp32+fp16",
    smooth_k: bool = True,
    smooth_v: bool = False,
    return_lse: bool = False,
    **kwargs: Any,
) -> Any:
    """Upstream's name for INT8 Q·Kᵀ, FP8 P·V: our FP8 kernel ("fp32" accumulates in the MMA,
    every other name two-level FP32); FP16 P·V on a GPU without FP8 matrix units."""
    return _cuda_named("sageattn_qk_int8_pv_fp8_cuda", "prefer_fp8", q, k, v, tensor_layout, is_causal,
                       qk_quant_gran, sm_scale, pv_accum_dtype, smooth_k, return_lse, kwargs)  # fmt: skip


def sageattn_qk_int8_pv_fp8_cuda_sm90(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    qk_quant_gran: str = "per_thread",
    sm_scale: Optional[float] = None,
    pv_accum_dtype: str = "fp32+fp32",
    smooth_k: bool = True,
    return_lse: bool = False,
    **kwargs: Any,
) -> Any:
    """Upstream's Hopper name: the same kernels as ``sageattn_qk_int8_pv_fp8_cuda`` (on Hopper the
    config table's TMA rows where they serve), on any GPU."""
    return _cuda_named("sageattn_qk_int8_pv_fp8_cuda_sm90", "prefer_fp8", q, k, v, tensor_layout, is_causal,
                       qk_quant_gran, sm_scale, pv_accum_dtype, smooth_k, return_lse, kwargs)  # fmt: skip


def _v_head_dim(q: Any, k: Any, v: Any) -> int:
    """V's head dim when it differs from Q's and K's shared one, else 0. Zero channels change
    neither Q·Kᵀ nor the kept columns of P·V, so such a call runs padded to the larger dim."""
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (q, k, v)):
        return 0  # check_varlen reports what is wrong
    dq, dk, dv = q.shape[-1], k.shape[-1], v.shape[-1]
    return dv if dq == dk != dv else 0


def sageattn_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    smooth_k: bool = True,
    **kwargs: Any,
) -> torch.Tensor:
    """Attention over packed sequences ([total, H, D]; causal is bottom-right per sequence, so a
    query block after a cached prefix, ``cu_seqlens_q`` ≠ ``cu_seqlens_k``, sees the prefix).

    V may have its own head dim (SGLang's MLA models): ``_v_head_dim`` pads. sagebuild's keywords:
    ``qk_quant_gran``, ``pv`` ("auto", "fp16", "fp8"), ``config``. ``dropout_p > 0`` runs SDPA per
    sequence (warned once); an ``attn_mask`` is refused.
    """
    x = _extras(kwargs, qk_quant_gran="per_warp", pv="auto", config=None, attn_mask=None, dropout_p=0.0)
    if x["attn_mask"] is not None:
        raise AttentionInputError(
            "sageattn_varlen got an attn_mask; packed sequences are masked by their lengths",
            "drop attn_mask and pass each sequence's extent in cu_seqlens_q / cu_seqlens_k",
        )
    dv = _v_head_dim(q, k, v)
    if dv:
        if sm_scale is None:
            sm_scale = q.shape[-1] ** -0.5  # Q's own head dim, before any padding
        d = max(q.shape[-1], dv)
        pad = torch.nn.functional.pad
        q, k, v = (t if t.shape[-1] == d else pad(t, (0, d - t.shape[-1])) for t in (q, k, v))
        out = sageattn_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal,
                              sm_scale, smooth_k, **kwargs)  # fmt: skip
        return out if out.shape[-1] == dv else out[..., :dv].contiguous()
    if x["dropout_p"]:
        return ops.reference_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, float(x["dropout_p"]),
                                           bool(is_causal), sm_scale)  # fmt: skip
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, bool(is_causal), sm_scale,
            bool(smooth_k), _gran(x["qk_quant_gran"]), x["pv"], _config(x["config"]))  # fmt: skip
    return (ops.attention_varlen if _use_ops() else ops.run_varlen)(*args)


__all__ = [*UPSTREAM_NAMES, "UPSTREAM_NAMES", "sageattn_qk_int8_pv_fp8_triton"]
