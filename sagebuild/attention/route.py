"""Routing to PyTorch SDPA: where a call's shape class was measured faster on SDPA (the tuning
record, ``sagebuild.tuning``), ``sageattn`` runs SDPA for it, exactly, and counts it.

The decision is the plan's (``plan.make_plan``: ``LaunchPlan.sdpa``), so it is taken once per
call signature and cached with the plan; this module runs a routed call and keeps the counter
(``routed``). Only ``sageattn`` routes: the explicit variant functions, a ``config=`` (or
``SAGEBUILD_ATTN_CONFIG``), ``return_lse=True`` (SDPA returns no LSE, and computing it exactly
would cost a second pass over the scores) and packed (varlen) calls never do, nor anything while
``SAGEBUILD_ROUTE=0``. Under ``torch.compile`` the call stays one custom op (``ops``) that routes
at run time, so graphs with dynamic shapes trace whole as well.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Optional

import torch

from sagebuild.attention.reference import causal_mask

_lock = threading.Lock()
_routed: Counter[str] = Counter()  # routed calls by shape class ("1x16x1024x64", ``ShapeClass.label``)


def run_sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: float,
    attn_mask: Optional[torch.Tensor],
    label: str,
) -> torch.Tensor:
    """A dense call as PyTorch SDPA runs it (exact attention), out in q's layout and shape, as
    our kernels return it: HND/NHD, GQA (``enable_gqa``), the caller's boolean or additive mask,
    and causal bottom-right aligned as in our kernels (query i sees key j <= i + N_k - N_q): for
    N_q != N_k an explicit mask, since SDPA's ``is_causal`` is top-left. A query row that sees no
    key gets zeros (as in our kernels). Counts the call under ``label``."""
    nhd = tensor_layout == "NHD"
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v)) if nhd else (q, k, v)
    nq, nk = qh.shape[2], kh.shape[2]
    mask, causal = attn_mask, bool(is_causal)
    if causal and (nq != nk or mask is not None):
        keep = causal_mask(nq, nk, qh.device)
        if mask is None:
            mask = keep
        elif mask.dtype == torch.bool:
            mask = mask & keep
        else:
            mask = mask.masked_fill(~keep, float("-inf"))
        causal = False
    gqa = {"enable_gqa": True} if qh.shape[1] != kh.shape[1] else {}
    out = torch.nn.functional.scaled_dot_product_attention(
        qh, kh, vh, attn_mask=mask, is_causal=causal, scale=sm_scale, **gqa
    )
    with _lock:
        _routed[label] += 1
    return out.transpose(1, 2).contiguous() if nhd else out.contiguous()


def routed() -> Counter[str]:
    """Calls ``sageattn`` sent to SDPA since the last ``reset``, by shape class (the matching
    class's label, e.g. ``"16x1024x64"``: batch × heads, query tokens, head dim)."""
    with _lock:
        return Counter(_routed)


def reset() -> None:
    """Zero the counter (between a baseline and a measured run)."""
    with _lock:
        _routed.clear()
