"""How the kernels see a tensor of sequences: strides of a logical [B, H, N, D] view.

Dense inputs (``HND`` as is, ``NHD`` as a transposed view) and packed variable-length inputs
([total_tokens, H, D] with cumulative sequence lengths) are both described by one
``SeqView``, so every kernel handles both through strides and never copies.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch


class SeqView(NamedTuple):
    """A tensor plus the strides and sizes the kernels index it with.

    A NamedTuple, not a frozen dataclass: several are built per attention call, and at small
    shapes the host path is the whole call.
    """

    t: torch.Tensor
    stride_b: int  # 0 for varlen: sequences start at cu[b] tokens instead
    stride_h: int
    stride_n: int
    batch: int
    heads: int
    max_len: int  # N for dense inputs, the longest sequence for varlen
    cu: Optional[torch.Tensor] = None  # int32 [batch + 1] cumulative lengths (varlen only)
    stride_d: int = 1  # N (not 1) for the FP8 V buffer, stored channel-major for the MMA

    @property
    def head_dim(self) -> int:
        return self.t.shape[-1]

    @property
    def is_varlen(self) -> bool:
        return self.cu is not None

    def strides(self) -> tuple[int, int, int]:
        return (self.stride_b, self.stride_h, self.stride_n)


def dense(x: torch.Tensor) -> SeqView:
    """A logical [B, H, N, D] tensor (any strides)."""
    b, h, n, _ = x.shape
    sb, sh, sn, sd = x.stride()
    return SeqView(x, sb, sh, sn, b, h, n, stride_d=sd)


def packed(x: torch.Tensor, cu: torch.Tensor, max_len: int) -> SeqView:
    """A packed [total_tokens, H, D] tensor with int32 cumulative sequence lengths."""
    _, h, _ = x.shape
    return SeqView(x, 0, x.stride(1), x.stride(0), cu.numel() - 1, h, max_len, cu, stride_d=x.stride(2))


def empty_like_view(
    view: SeqView, head_dim: int, dtype: torch.dtype, channel_major: bool = False
) -> SeqView:
    """A fresh tensor of the same sequences: [B, H, N, Dp] dense, [total, H, Dp] packed.

    ``channel_major`` stores each head's tile as [Dp, N] (tokens contiguous) behind the same
    logical view: the FP8 V layout, because Hopper's FP8 wgmma takes its B operand only
    K-major (here K is the token axis), so a token-major V would need a transpose per tile.
    """
    dev = view.t.device
    if view.is_varlen:
        total = view.t.shape[0]
        if channel_major:
            out = torch.empty((view.heads, head_dim, total), dtype=dtype, device=dev).permute(2, 0, 1)
        else:
            out = torch.empty((total, view.heads, head_dim), dtype=dtype, device=dev)
        return packed(out, view.cu, view.max_len)
    shape = (view.batch, view.heads, view.max_len, head_dim)
    if channel_major:
        out = torch.empty(shape[:2] + (head_dim, view.max_len), dtype=dtype, device=dev).transpose(-1, -2)
    else:
        out = torch.empty(shape, dtype=dtype, device=dev)
    return dense(out)
