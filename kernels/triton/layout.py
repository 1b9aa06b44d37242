"""How the kernels see a tensor of sequences: strides of a logical [B, H, N, D] view.

Dense inputs (``HND`` as is, ``NHD`` as a transposed view) and packed variable-length inputs
([total_tokens, H, D] with cumulative sequence lengths) are both described by one
``SeqView``, so every kernel handles both through strides and never copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass(frozen=True)
class SeqView:
    """A tensor plus the strides and sizes the kernels index it with."""

    t: torch.Tensor
    stride_b: int  # 0 for varlen: sequences start at cu[b] tokens instead
    stride_h: int
    stride_n: int
    batch: int
    heads: int
    max_len: int  # N for dense inputs, the longest sequence for varlen
    cu: Optional[torch.Tensor] = None  # int32 [batch + 1] cumulative lengths (varlen only)

    @property
    def head_dim(self) -> int:
        return self.t.shape[-1]

    @property
    def is_varlen(self) -> bool:
        return self.cu is not None

    def strides(self) -> tuple[int, int, int]:
        return (self.stride_b, self.stride_h, self.stride_n)


def dense(x: torch.Tensor) -> SeqView:
    """A logical [B, H, N, D] tensor (any strides; the last one must be 1)."""
    b, h, n, _ = x.shape
    return SeqView(x, x.stride(0), x.stride(1), x.stride(2), b, h, n)


def packed(x: torch.Tensor, cu: torch.Tensor, max_len: int) -> SeqView:
    """A packed [total_tokens, H, D] tensor with int32 cumulative sequence lengths."""
    _, h, _ = x.shape
    return SeqView(x, 0, x.stride(1), x.stride(0), cu.numel() - 1, h, max_len, cu)


def empty_like_view(view: SeqView, head_dim: int, dtype: torch.dtype) -> SeqView:
    """A fresh contiguous tensor of the same sequences: [B, H, N, Dp] dense, [total, H, Dp] packed."""
    if view.is_varlen:
        total = view.t.shape[0]
        out = torch.empty((total, view.heads, head_dim), dtype=dtype, device=view.t.device)
        return packed(out, view.cu, view.max_len)
    out = torch.empty((view.batch, view.heads, view.max_len, head_dim), dtype=dtype, device=view.t.device)
    return dense(out)
