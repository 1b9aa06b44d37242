"""Input checks for the attention API: one clear error per user mistake, never a traceback.

What the kernels can run is decided by ``reasons`` (one ordered list, shared with the SDPA patch):
these checks raise its first reason. They never modify their inputs; they return views, and copy
only a tensor whose last dimension is not contiguous (the kernels need unit stride along the head
dim), a mask whose key stride would overflow the kernel's 32-bit offsets, and ``cu_seqlens``
(int32 on q's device).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from sagebuild.attention import reasons
from sagebuild.attention.plan import AttentionInputError

SUPPORTED_DTYPES = tuple(getattr(torch, name) for name in reasons.DTYPES)
LAYOUTS = reasons.DENSE_LAYOUTS


def interpreter_enabled() -> bool:
    """True when Triton's CPU interpreter is on (CPU tensors are then accepted, for tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def kernel_devices() -> tuple[str, ...]:
    """The device types the kernels run on here: GPUs, and the CPU under Triton's interpreter."""
    return ("cuda", "cpu") if interpreter_enabled() else ("cuda",)


def unit_stride(t: torch.Tensor) -> torch.Tensor:
    """t itself when its last dim is contiguous; a contiguous copy otherwise (the only copy made)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def check_dense(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tensor_layout: str, attn_mask: Any = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validated logical [B, H, N, D] views of q, k, v (NHD inputs become transposed views), their
    ``attn_mask`` checked too when given."""
    call = reasons.Call(q, k, v, layout=tensor_layout, attn_mask=attn_mask, devices=kernel_devices())
    reasons.raise_first(call)
    if tensor_layout == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return unit_stride(q), unit_stride(k), unit_stride(v)


MASK_DTYPES = {getattr(torch, name): kind for name, kind in reasons.MASK_KINDS.items()}


def check_mask(mask: torch.Tensor, q: torch.Tensor, nk: int) -> tuple[torch.Tensor, str, bool]:
    """The kernels' view of an ``attn_mask`` for q ([B, H, N_q, D] view) and nk keys: ([B, H, N_q,
    N_k] view with stride 0 on broadcast dims, uint8 for a boolean mask; "bool" | "additive";
    whether it varies along query rows). SDPA's rules: True attends, floats are added to the
    scaled scores, the mask broadcasts to [B, H, N_q, N_k] (``reasons.mask_reason``)."""
    b, h, nq = q.shape[:3]
    why = reasons.mask_reason(mask, (b, h, nq, nk), q.device)
    if why is not None:
        raise why.error()
    view = mask.expand(b, h, nq, nk)
    if view.stride(-1) * 256 >= 2**31:  # the kernel steps along keys at 32-bit offsets within a tile
        view = view.contiguous()
    if mask.dtype == torch.bool:
        view = view.view(torch.uint8)
    return view, MASK_DTYPES[mask.dtype], nq > 1 and view.stride(2) != 0


def check_grid(batch: int, heads: int, what: str) -> None:
    """``reasons.grid_reason``, raised."""
    why = reasons.grid_reason(batch, heads, what)
    if why is not None:
        raise why.error()


def check_heads(hq: int, hk: int, hv: int, layout: str) -> None:
    """``reasons.heads_reason``, raised: K and V head counts agree and divide Q's (GQA/MQA)."""
    why = reasons.heads_reason(hq, hk, hv, layout)
    if why is not None:
        raise why.error()


def check_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validated packed [total, H, D] q, k, v and int32 cumulative lengths on the inputs' device.

    The lengths' values are checked when they are on the CPU. On a GPU they are not read here (that
    would synchronise every call): the kernels clamp each sequence to the packed tensor instead, so
    bad values cannot reach other memory."""
    reasons.raise_first(reasons.Call(q, k, v, packed=True, devices=kernel_devices()))
    if k.shape[0] != v.shape[0]:
        raise AttentionInputError(
            f"k and v hold different token counts ({k.shape[0]} vs {v.shape[0]})",
            "k and v must be packed from the same sequences",
        )
    check_heads(q.shape[1], k.shape[1], v.shape[1], "")
    cus = []
    for name, cu, total, max_len in (
        ("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q),
        ("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k),
    ):
        if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2:
            raise AttentionInputError(
                f"{name} must be a 1-D tensor of batch+1 cumulative lengths starting at 0",
                "build it with torch.cumsum over the sequence lengths, prepended with 0",
            )
        if cu.dtype not in (torch.int32, torch.int64):
            raise AttentionInputError(f"{name} must be an integer tensor, got {cu.dtype}", "use torch.int32")
        if cu.device.type == "cpu":
            host = cu.detach().to(torch.int64)
            lens = host[1:] - host[:-1]
            if int(host[0]) != 0 or bool((lens < 0).any()) or int(host[-1]) != total:
                raise AttentionInputError(
                    f"{name} must start at 0, never decrease and end at the token count {total}, "
                    f"got {host.tolist()[:8]}{'...' if host.numel() > 8 else ''}",
                    "pass the cumulative sequence lengths of the packed tensor",
                )
            if int(max_len) < int(lens.max()):
                raise AttentionInputError(
                    f"max_seqlen for {name} is {max_len} but a sequence has {int(lens.max())} tokens",
                    "pass the longest sequence length",
                )
        cus.append(cu.to(q.device, torch.int32))  # cu itself when already so
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise AttentionInputError(
            "cu_seqlens_q and cu_seqlens_k describe different batch sizes",
            "pass one entry per sequence in both",
        )
    check_grid(cu_seqlens_q.numel() - 1, q.shape[1], "sequences")
    return unit_stride(q), unit_stride(k), unit_stride(v), cus[0], cus[1]
