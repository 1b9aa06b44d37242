"""Calls with dropout: warned once, then exact attention with torch's SDPA.

Upstream SageAttention silently drops ``attn_mask`` and ``dropout_p``; here masks run in the
kernels (``validate.check_mask``) and dropout runs ``reference`` (SDPA, or the same maths in
float32 when the LSE is asked for).
"""

from __future__ import annotations

import math
import threading
import warnings
from typing import Optional

import torch

from sagebuild.attention.reference import causal_mask, expand_kv
from sagebuild.attention.validate import AttentionInputError

_warned: set[str] = set()
_lock = threading.Lock()


def warn_dropout(dropout_p: float, where: str) -> None:
    """One RuntimeWarning per reason and function per process for a call with dropout (the
    quantized kernels are inference-only): it runs at SDPA's speed, which a user enabling
    SageAttention should be told."""
    if dropout_p <= 0:
        return
    reason = f"dropout_p={dropout_p} (the quantized kernels are inference-only: no dropout)"
    key = f"{where}: {reason}"
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(
        f"sagebuild {where}: {reason}; this call runs torch's scaled_dot_product_attention instead, "
        "exactly but without the quantized kernels (warned once)",
        RuntimeWarning,
        stacklevel=4,
    )


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: Optional[torch.Tensor],
    dropout_p: float,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    return_lse: bool,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Exact attention in the caller's layout: (out contiguous in q's shape, LSE [B, H, N_q] or None).

    ``attn_mask``: boolean (True = attend) or additive, broadcastable to [B, H, N_q, N_k]; causal
    is bottom-right aligned as in the kernels; GQA by repeating each KV head for its query group.
    """
    nhd = tensor_layout == "NHD"
    qh, kh, vh = (t.transpose(1, 2) if nhd else t for t in (q, k, v))
    hq, hk = qh.shape[1], kh.shape[1]
    if hq != hk:
        if hk == 0 or hq % hk:
            raise AttentionInputError(
                f"query heads ({hq}) must be a multiple of key/value heads ({hk})",
                "pass k and v with a head count dividing q's",
            )
        kh, vh = expand_kv(kh, hq), expand_kv(vh, hq)
    n_q, n_k = qh.shape[2], kh.shape[2]
    scale = sm_scale if sm_scale is not None else qh.shape[-1] ** -0.5
    mask = attn_mask
    if is_causal:
        causal = causal_mask(n_q, n_k, qh.device)
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
    out = out.transpose(1, 2) if nhd else out
    return out.contiguous(), (lse.contiguous() if lse is not None else None)


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
    """Packed sequences ([total, H, D]) one by one through ``reference``."""
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for i in range(len(cq) - 1):
        qs, ks = slice(cq[i], cq[i + 1]), slice(ck[i], ck[i + 1])
        o, _ = reference(
            q[None, qs], k[None, ks], v[None, ks], None, dropout_p, "NHD", is_causal, sm_scale, False
        )
        out[qs] = o[0]
    return out


__all__ = ["reference", "reference_varlen", "warn_dropout"]
