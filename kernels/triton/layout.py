"""How the kernels see a tensor of sequences: strides of a logical [B, H, N, D] view.

Dense inputs (``HND`` as is, ``NHD`` as a transposed view) and packed variable-length inputs
([total_tokens, H, D] with cumulative sequence lengths) are both described by one
``SeqView``, so every kernel handles both through strides and never copies.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Optional

import torch
import triton
import triton.language as tl

from .configs import KEY_GROUP

# FP8 V in wgmma key order (Hopper, the features table): within each group of KEY_GROUP
# keys, stored position k holds key σ(k), where σ moves the index bits [h, t1, t0, i1, i0] (k =
# 16h + 4t + 2i1 + i0) to [h, i1, t1, t0, i0]. A thread's FP32 P·V-side scores after the Q·Kᵀ
# wgmma hold keys 8j + 2t + {0, 1} (t: its lane in a quad, j: the n8 chunk), while an FP8 A
# operand of the k32 wgmma wants keys 4t + {0..3} and 16 + 4t + {0..3} in its registers; with V
# stored in σ order, P's columns put in the same order (``wgmma_key_order``) are already where
# the operand wants them, and Triton drops the shuffles of the conversion (48 per tile on sm90).
# The sum over keys is the same; the buffer's key rows are padded to a multiple of KEY_GROUP.
KEY_GROUP_C: tl.constexpr = tl.constexpr(KEY_GROUP)  # the same, for kernels


@triton.jit
def key_rows_of(n):
    """``key_rows(n, True)`` inside a kernel: n padded to whole key groups."""
    return (n + KEY_GROUP_C - 1) // KEY_GROUP_C * KEY_GROUP_C


class SeqView(NamedTuple):
    """A tensor plus the strides and sizes the kernels index it with (a NamedTuple, not a frozen
    dataclass: several are built per call, and at small shapes the host path is the whole call)."""

    t: torch.Tensor
    stride_b: int  # 0 for varlen: sequences start at cu[b] tokens instead
    stride_h: int
    stride_n: int
    batch: int
    heads: int
    max_len: int  # N for dense inputs, the longest sequence for varlen
    cu: Optional[torch.Tensor] = None  # int32 [batch + 1] cumulative lengths (varlen only)
    # FP8 V (channel-major for the MMA): its channel rows' stride (v_row_stride, packed_v_tokens)
    stride_d: int = 1

    @property
    def head_dim(self) -> int:
        return self.t.shape[-1]

    @property
    def is_varlen(self) -> bool:
        return self.cu is not None

    @property
    def total(self) -> int:
        """Packed tokens (varlen: the sequences' offsets are clamped to it), else max_len."""
        return self.t.shape[0] if self.cu is not None else self.max_len

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


# 16 bytes of a 16-bit tensor: the widest vector load, and Triton's own stride specialisation
# (integers divisible by 16 elements) proves twice that
ROW_UNIT = 8


def row_unit(views: Iterable[SeqView]) -> int:
    """The unit the kernels' 16-bit tensors' strides are passed in (``ROW_UNIT`` or 1).

    Triton proves a row's alignment only from strides divisible by 16 elements; a head dim of 40
    (SD1.5) gives rows 40 elements apart, 16-byte aligned but unproven, and every load and store
    of such a tile becomes a 2-byte one. Strides passed divided by ROW_UNIT and multiplied back
    in the kernel prove 16 bytes. 1 where Triton proves it already, where a stride is not a
    multiple of ROW_UNIT, or where one reaches 2³¹ (the product is computed in 32 bits)."""
    strides = [s for v in views for s in v.strides()]
    if all(s % 16 == 0 for s in strides) or any(s % ROW_UNIT or s >= 2**31 for s in strides):
        return 1
    return ROW_UNIT


def in_unit(view: SeqView, unit: int) -> tuple[int, ...]:
    """A view's (b, h, n) strides divided by ``unit`` (``row_unit``; the kernels multiply back)."""
    return view.strides() if unit == 1 else tuple(s // unit for s in view.strides())


def key_rows(n: int, key_order: bool) -> int:
    """Key rows of FP8 V's buffer for n keys: n, or n padded to whole KEY_GROUPs in key order."""
    return -(-n // KEY_GROUP) * KEY_GROUP if key_order else n


def packed_v_tokens(total: int, batch: int) -> int:
    """Token positions of packed channel-major FP8 V: each of the batch sequences starts at its
    first token rounded up to 16 plus 16·b (``quant.packed_v_base``)."""
    return v_row_stride(total + 16 * (batch + 1), False)


def packed_v_start(start: int, b: int) -> int:
    """Where packed sequence b (first token ``start``) begins in channel-major FP8 V: its first
    token rounded up to 16, plus 16·b (``quant.packed_v_position``, on the host)."""
    return -(-start // 16) * 16 + 16 * b


def v_row_stride(n: int, key_order: bool) -> int:
    """FP8 V's row stride for n keys: ``key_rows`` rounded up to 16 bytes, so every channel row
    starts 16-byte aligned (vectorised and asynchronous copies, TMA) whatever n is; the tail
    past ``key_rows`` is never read (masked loads, descriptors sized to ``key_rows``)."""
    return -(-key_rows(n, key_order) // 16) * 16


@triton.jit
def wgmma_key_order(p):
    """P [M, N] with its columns in wgmma key order: column k of the result is column σ(k) of p
    (N a multiple of KEY_GROUP); a free register renaming after the Q·Kᵀ wgmma on Hopper."""
    M: tl.constexpr = p.shape[0]
    N: tl.constexpr = p.shape[1]
    x = tl.reshape(p, [M, N // KEY_GROUP_C, 2, 2, 4, 2])  # column bits (group, h, i1, t, i0)
    return tl.reshape(tl.permute(x, (0, 1, 2, 4, 3, 5)), [M, N])  # → (group, h, t, i1, i0)


def key_order(n: int) -> torch.Tensor:
    """σ over n keys (a multiple of KEY_GROUP) as an index: stored position k holds key σ[k]
    (``wgmma_key_order``'s reshape and permute, on the host)."""
    x = torch.arange(n).reshape(n // KEY_GROUP, 2, 2, 4, 2)
    return x.permute(0, 1, 3, 2, 4).reshape(n)


def channel_major(view: SeqView) -> SeqView:
    """A 16-bit V copied channel-major (the config's ``vcm``, FP16 P·V): each head's channels as
    rows of its keys, rows ``v_row_stride`` apart (16-byte aligned), behind the same logical view,
    so the kernel's V tiles have their keys contiguous, as the P·V MMA's B operand wants them."""
    t = view.t
    if view.is_varlen:  # [total, H, D] -> [H, D, total] (tokens keep their positions)
        total, heads, d = t.shape
        buf = torch.empty((heads, d, v_row_stride(total, False)), dtype=t.dtype, device=t.device)[..., :total]
        buf.copy_(t.permute(1, 2, 0))
        return packed(buf.permute(2, 0, 1), view.cu, view.max_len)
    b, h, n, d = t.shape
    buf = torch.empty((b, h, d, v_row_stride(n, False)), dtype=t.dtype, device=t.device)[..., :n]
    buf.copy_(t.transpose(-1, -2))
    return dense(buf.transpose(-1, -2))


def empty_like_view(
    view: SeqView, head_dim: int, dtype: torch.dtype, channel_major: bool = False, key_order: bool = False
) -> SeqView:
    """A fresh tensor of the same sequences: [B, H, N, Dp] dense, [total, H, Dp] packed.

    ``channel_major`` stores each head's tile as [Dp, N] (tokens contiguous) behind the same
    logical view: the FP8 V layout, because Hopper's FP8 wgmma takes its B operand only
    K-major (here K is the token axis), so a token-major V would need a transpose per tile.
    ``key_order`` (dense, channel-major): rows of ``key_rows`` tokens, for V in wgmma key order.
    """
    dev = view.t.device
    if view.is_varlen:
        total = view.t.shape[0]
        if channel_major:  # sequences at 16-aligned positions (``quant.packed_v_base``)
            rows = packed_v_tokens(total, view.batch)
            out = torch.empty((view.heads, head_dim, rows), dtype=dtype, device=dev).permute(2, 0, 1)
        else:
            out = torch.empty((total, view.heads, head_dim), dtype=dtype, device=dev)
        return packed(out, view.cu, view.max_len)
    shape = (view.batch, view.heads, view.max_len, head_dim)
    if channel_major:
        rows = v_row_stride(view.max_len, key_order)
        out = torch.empty(shape[:2] + (head_dim, rows), dtype=dtype, device=dev)
        if rows != view.max_len:
            out = out[..., : view.max_len]
        out = out.transpose(-1, -2)
    else:
        out = torch.empty(shape, dtype=dtype, device=dev)
    return dense(out)
