"""The attention calls as ``torch.library`` custom ops, so ``torch.compile`` traces them whole.

Dynamo cannot trace our host code (plan keys hash pointers); as custom ops with fake
implementations each call is one graph node, and device-dependent decisions are taken inside, at
run time. Ops: ``attention`` (dense), ``attention_lse`` (dense, with the LSE), ``attention_ref``
(dropout: exact attention, where upstream drops dropout silently) and ``attention_varlen``.
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import Any, Callable, Optional

import torch

from sagebuild.attention import api
from sagebuild.attention.reference import causal_mask, expand_kv
from sagebuild.attention.validate import check_heads

# The calls themselves: what the ops run, and the public functions eagerly (by these names, which
# scripts wrap to count calls).
run_dense = api.attend
run_varlen = api.attend_varlen
_warned: set[tuple[str, str]] = set()  # the dropout warnings given
_lock = threading.Lock()

_DENSE = (
    "Tensor q, Tensor k, Tensor v, str tensor_layout, bool is_causal, float? sm_scale, str qk_quant_gran, "
    "bool smooth_k, str pv, str pv_accum, str quantization_backend, str? config, Tensor? attn_mask=None"
)


def _op(name: str, schema: str, run: Callable[..., Any], fake: Callable[..., Any]) -> Any:
    op = torch.library.custom_op(f"sagebuild::{name}", run, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op


# The fakes read only what shapes the outputs: q (and the layout for the LSE).
def _out_like(q: torch.Tensor, *_: Any) -> torch.Tensor:
    """The kernels' output: q's shape and dtype, contiguous (``api._execute`` allocates it so)."""
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def _lse_like(q: torch.Tensor, tensor_layout: str, return_lse: bool = True) -> torch.Tensor:
    if not return_lse:  # an op returns tensors: an empty one stands for "no LSE"
        return q.new_empty((0,), dtype=torch.float32)
    b, h, n = (q.shape[0], q.shape[2], q.shape[1]) if tensor_layout == "NHD" else q.shape[:3]
    return torch.empty((b, h, n), dtype=torch.float32, device=q.device)


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """A call with dropout (``attention_ref``): exact attention in the caller's layout, (out
    contiguous in q's shape, LSE [B, H, N_q], empty without ``return_lse``). ``attn_mask``: SDPA's;
    causal is bottom-right as in the kernels; GQA repeats each KV head for its query group. One
    RuntimeWarning per ``where`` and ``dropout_p``: the call runs at SDPA's speed."""
    if dropout_p > 0:
        reason = f"dropout_p={dropout_p} (the quantized kernels are inference-only: no dropout)"
        with _lock:
            first = (where, reason) not in _warned
            _warned.add((where, reason))
        if first:
            warnings.warn(
                f"sagebuild {where}: {reason}; this call runs exact attention instead (torch's "
                "scaled_dot_product_attention, or the same maths in float32 when the LSE is returned), "
                "without the quantized kernels (warned once)",
                RuntimeWarning,
                stacklevel=4,
            )
    nhd = tensor_layout == "NHD"
    qh, kh, vh = (t.transpose(1, 2) if nhd else t for t in (q, k, v))
    hq = qh.shape[1]
    check_heads(hq, kh.shape[1], vh.shape[1], tensor_layout)
    kh, vh = expand_kv(kh, hq), expand_kv(vh, hq)
    scale = sm_scale if sm_scale is not None else qh.shape[-1] ** -0.5
    mask = attn_mask
    if is_causal:
        causal = causal_mask(qh.shape[2], kh.shape[2], qh.device)
        if mask is None:
            mask = causal
        elif mask.dtype == torch.bool:
            mask = mask & causal
        else:
            mask = mask.masked_fill(~causal, -math.inf)
    lse = None
    if return_lse:  # SDPA returns no LSE: the same maths written out, in float32
        s = torch.matmul(qh.float(), kh.float().transpose(-1, -2)) * scale
        if mask is not None:
            s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.float()
        lse = torch.logsumexp(s, dim=-1)
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        if dropout_p > 0:
            p = torch.nn.functional.dropout(p, dropout_p)
        out = torch.matmul(p, vh.float()).to(q.dtype)
    else:
        out = torch.nn.functional.scaled_dot_product_attention(
            qh, kh, vh, attn_mask=mask, dropout_p=dropout_p, scale=scale
        )
    out = (out.transpose(1, 2) if nhd else out).contiguous()
    return out, (lse.contiguous() if lse is not None else _lse_like(out, "", False))


def reference_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    dropout_p: float,
    is_causal: bool,
    sm_scale: Optional[float],
) -> torch.Tensor:
    """``sageattn_varlen`` with dropout: packed sequences ([total, H, D]) one by one."""
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for i in range(len(cq) - 1):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        args = (None, dropout_p, "NHD", is_causal, sm_scale, False, "sageattn_varlen")
        o, _ = run_reference(q[None, qs], k[None, ks], v[None, ks], *args)
        out[qs] = o[0]
    return out


attention = _op(
    "attention", f"({_DENSE}) -> Tensor", lambda *a: run_dense(*a[:12], False, *a[12:]), _out_like
)
attention_lse = _op(
    "attention_lse",
    f"({_DENSE}) -> (Tensor, Tensor)",
    lambda *a: run_dense(*a[:12], True, *a[12:]),
    lambda q, k, v, tensor_layout, *_: (_out_like(q), _lse_like(q, tensor_layout)),
)
attention_ref = _op(
    "attention_ref",
    "(Tensor q, Tensor k, Tensor v, Tensor? attn_mask, float dropout_p, str tensor_layout, bool is_causal, "
    "float? sm_scale, bool return_lse, str where) -> (Tensor, Tensor)",
    run_reference,
    lambda q, k, v, m, p, tensor_layout, c, s, return_lse, w: (
        _out_like(q),
        _lse_like(q, tensor_layout, return_lse),
    ),
)
attention_varlen = _op(
    "attention_varlen",
    "(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
    "int max_seqlen_k, bool is_causal, float? sm_scale, bool smooth_k, str qk_quant_gran, str pv, "
    "str? config) -> Tensor",
    lambda *a: run_varlen(*a),
    _out_like,
)

__all__ = [
    "attention",
    "attention_lse",
    "attention_ref",
    "attention_varlen",
    "run_dense",
    "reference_varlen",
    "run_reference",
    "run_varlen",
]
