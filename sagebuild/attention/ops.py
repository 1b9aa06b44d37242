"""The attention calls as ``torch.library`` custom ops, so ``torch.compile`` traces them whole.

Dynamo cannot trace our host code (plan keys hash pointers, launches go through Triton's
launcher), so without ops a compiled model graph-breaks at every attention call, or fails under
``fullgraph=True``. As custom ops with fake (meta) implementations, each call is one node of the
graph: Dynamo, AOTAutograd and Inductor see only shapes and dtypes, and ``mode="reduce-overhead"``
captures the kernels' launches in its CUDA graphs.

Every argument is a tensor, str, bool, int, float or None. Decisions that need the device
(``pv="auto"``: the variant ``sageattn`` picks) are taken inside the ops, at run time.

Ops (namespace ``sagebuild``):
  ``attention``        dense (with or without an ``attn_mask`` the kernels take), returns out
  ``attention_lse``    dense, returns (out, lse [B, H_q, N_q] float32)
  ``attention_ref``    dense with dropout: exact attention (``masked.reference``), warned
  ``attention_varlen`` packed sequences, returns out
"""

from __future__ import annotations

from typing import Optional

import torch

from sagebuild.attention import api, masked

# The calls themselves: what the ops run, and the public functions eagerly (by these names, which
# scripts wrap to count calls).
run_dense = api.attend
run_varlen = api.attend_varlen


def _out_like(q: torch.Tensor) -> torch.Tensor:
    """The kernels' output: q's shape and dtype, contiguous (``api._execute`` allocates it so)."""
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def _lse_like(q: torch.Tensor, tensor_layout: str) -> torch.Tensor:
    b, h, n = (q.shape[0], q.shape[2], q.shape[1]) if tensor_layout == "NHD" else q.shape[:3]
    return torch.empty((b, h, n), dtype=torch.float32, device=q.device)


@torch.library.custom_op("sagebuild::attention", mutates_args=())
def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    qk_quant_gran: str,
    smooth_k: bool,
    pv: str,
    pv_accum: str,
    quantization_backend: str,
    config: Optional[str],
    attn_mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    return run_dense(q, k, v, tensor_layout, is_causal, sm_scale, qk_quant_gran, smooth_k, pv, pv_accum,
                     quantization_backend, config, False, attn_mask)  # fmt: skip


# The fakes read only what shapes the outputs: q (and the layout for the LSE).
@attention.register_fake
def _attention_fake(q, *args, **kwargs):
    return _out_like(q)


@torch.library.custom_op("sagebuild::attention_lse", mutates_args=())
def attention_lse(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    qk_quant_gran: str,
    smooth_k: bool,
    pv: str,
    pv_accum: str,
    quantization_backend: str,
    config: Optional[str],
    attn_mask: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    return run_dense(q, k, v, tensor_layout, is_causal, sm_scale, qk_quant_gran, smooth_k, pv, pv_accum,
                     quantization_backend, config, True, attn_mask)  # fmt: skip


@attention_lse.register_fake
def _attention_lse_fake(q, k, v, tensor_layout, *args, **kwargs):
    return _out_like(q), _lse_like(q, tensor_layout)


def run_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: Optional[torch.Tensor],
    dropout_p: float,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    return_lse: bool,
    where: str,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """A call with dropout (``masked.route``): warned once, then exact attention."""
    reason = masked.route(dropout_p)
    if reason is not None:
        masked.warn_once(reason, where)
    return masked.reference(q, k, v, attn_mask, dropout_p, tensor_layout, is_causal, sm_scale, return_lse)


@torch.library.custom_op("sagebuild::attention_ref", mutates_args=())
def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: Optional[torch.Tensor],
    dropout_p: float,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    return_lse: bool,
    where: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = run_reference(
        q, k, v, attn_mask, dropout_p, tensor_layout, is_causal, sm_scale, return_lse, where
    )
    return out, (lse if lse is not None else q.new_empty((0,), dtype=torch.float32))


@attention_ref.register_fake
def _attention_ref_fake(q, k, v, attn_mask, dropout_p, tensor_layout, is_causal, sm_scale, return_lse, where):
    lse = _lse_like(q, tensor_layout) if return_lse else q.new_empty((0,), dtype=torch.float32)
    return _out_like(q), lse


@torch.library.custom_op("sagebuild::attention_varlen", mutates_args=())
def attention_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    is_causal: bool,
    sm_scale: Optional[float],
    smooth_k: bool,
    qk_quant_gran: str,
    pv: str,
    config: Optional[str],
) -> torch.Tensor:
    return run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal, sm_scale,
                      smooth_k, qk_quant_gran, pv, config)  # fmt: skip


@attention_varlen.register_fake
def _attention_varlen_fake(q, *args, **kwargs):
    return _out_like(q)


__all__ = [
    "attention",
    "attention_lse",
    "attention_ref",
    "attention_varlen",
    "run_dense",
    "run_reference",
    "run_varlen",
]
