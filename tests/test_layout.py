"""How the kernels see sequences (``kernels/triton/layout.py``): SeqView strides of dense, NHD
and packed tensors, the channel-major FP8 V buffer, and wgmma key order on host and in a kernel."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from sagebuild.kernels.triton import configs, layout

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (a GPU is present)")


def test_dense_and_nhd_views_are_strides_not_copies():
    x = torch.empty(2, 5, 3, 64)  # NHD
    view = layout.dense(x.transpose(1, 2))
    assert (view.batch, view.heads, view.max_len, view.head_dim) == (2, 3, 5, 64)
    assert view.strides() == (5 * 3 * 64, 64, 3 * 64) and view.stride_d == 1
    assert view.t.data_ptr() == x.data_ptr() and not view.is_varlen


def test_packed_views_start_sequences_at_their_cumulative_lengths():
    x = torch.empty(10, 4, 64)
    cu = torch.tensor([0, 3, 10], dtype=torch.int32)
    view = layout.packed(x, cu, 7)
    assert view.is_varlen and (view.batch, view.heads, view.max_len) == (2, 4, 7)
    assert view.strides() == (0, 64, 4 * 64) and view.cu is cu


@pytest.mark.parametrize("key_order", [False, True])
def test_fp8_v_buffers_are_channel_major(key_order):
    """FP8 V is stored [Dp, N] per head (tokens contiguous) behind the logical [B, H, N, Dp] view;
    in key order its rows hold whole KEY_GROUPs (150 keys in 160 rows), and every channel row
    starts 16-byte aligned (``v_row_stride``: 150 keys in rows of 160 bytes either way)."""
    src = layout.dense(torch.empty(2, 3, 150, 40))
    out = layout.empty_like_view(src, 64, torch.float8_e4m3fn, channel_major=True, key_order=key_order)
    assert layout.key_rows(150, key_order) == (160 if key_order else 150) and out.t.shape == (2, 3, 150, 64)
    stride = layout.v_row_stride(150, key_order)
    assert stride == 160 and out.stride_d == stride and out.strides() == (3 * 64 * stride, 64 * stride, 1)
    assert [layout.v_row_stride(n, False) for n in (1, 16, 17, 4104)] == [16, 16, 32, 4112]
    packed = layout.packed(torch.empty(12, 3, 40), torch.tensor([0, 5, 12], dtype=torch.int32), 7)
    pv = layout.empty_like_view(packed, 64, torch.float8_e4m3fn, channel_major=True)
    # packed: each sequence's rows start 16-byte aligned (its first token rounded up to 16, plus
    # 16 per sequence), so 12 tokens in 2 sequences take 12 + 48 positions, rounded to 64
    assert layout.packed_v_tokens(12, 2) == 64 and [
        layout.packed_v_start(s, b) for b, s in enumerate((0, 5))
    ] == [0, 32]
    assert pv.t.shape == (64, 3, 64) and pv.stride_n == 1 and pv.stride_d == 64 and pv.is_varlen
    plain = layout.empty_like_view(src, 64, torch.int8)
    assert plain.t.shape == (2, 3, 150, 64) and plain.t.is_contiguous()


@triton.jit
def _key_order_kernel(OUT, M: tl.constexpr, N: tl.constexpr):
    """OUT [M, N] ← each row's column indices put in wgmma key order."""
    cols = tl.arange(0, N)
    idx = tl.broadcast_to(cols[None, :], (M, N))
    tl.store(OUT + tl.arange(0, M)[:, None] * N + cols[None, :], layout.wgmma_key_order(idx))


def test_p_in_wgmma_key_order_is_v_stored_order():
    """The kernel's reordering of P's columns (``layout.wgmma_key_order``) is the order the
    quantization stores V's keys in (``layout.key_order``; the quantization applies the same
    function to its block's rows): a permutation within each group of 32 keys, the same for
    every row."""
    out = torch.empty(4, 128, dtype=torch.int32)
    _key_order_kernel[(1,)](out, 4, 128)
    order = layout.key_order(128)
    assert torch.equal(out, order.to(torch.int32).expand(4, 128))
    assert torch.equal(order.sort().values, torch.arange(128)) and not torch.equal(order, torch.arange(128))
    assert torch.equal(order // configs.KEY_GROUP, torch.arange(128) // configs.KEY_GROUP)
