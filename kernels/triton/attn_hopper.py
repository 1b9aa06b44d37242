"""Hopper attention forward in Gluon: warp-specialised, asynchronous wgmma, TMA-fed.

The portable Triton kernel (``attn_fwd.py``) is latency-bound on sm90: Triton 3.6 waits on each
wgmma as soon as it is issued, so a CTA's softmax never overlaps its own matrix work
(docs/performance.md, "Where the targets stand"). This kernel states the schedule explicitly:

* a one-warp **load partition** streams Q once and K/V tiles through a ring of ``STAGES``
  shared-memory slots with TMA, each slot guarded by a ready and an empty mbarrier;
* the **compute partition** (``num_warps`` warps, one or two warpgroups) issues Q·Kᵀ of tile j
  and P·V of tile j−1 asynchronously, waits only for Q·Kᵀ, runs tile j's softmax while P·V
  still runs on the tensor cores, then folds P·V into the output (FA3's intra-warpgroup
  pipelining).

Same quantization contract as ``attn_fwd.py`` (INT8 Q per block with sm_scale·log2e folded in,
INT8 K per 64-token block after smoothing, FP8 E4M3 V per channel stored channel-major, P·V in
FP8 with a fresh FP32 accumulator per tile added into the FP32 output), so results agree with
the golden model to accumulation order. Scope (``supports`` says it): dense inputs, padded head
dim 64 or 128, NVIDIA sm90, no LSE; everything else runs the portable kernel.
"""

from __future__ import annotations

import math
from typing import Optional

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from . import launcher, quant
from .attn_fwd import MAGIC_F, MAGIC_I, QuantizedKV  # the INT32→FP32 bit trick's constants
from .configs import K_BLK, LaunchConfig
from .layout import SeqView


@gluon.jit
def _load_partition(
    q_desc,
    k_desc,
    v_desc,
    q_smem,
    k_bufs,
    v_bufs,
    q_bar,
    ready,
    empty,
    q_row,
    k_row,
    v_row,
    n_tiles,
    BLOCK_N: gl.constexpr,
):
    """One warp: Q once, then K/V tile j into slot j % STAGES once the slot is released."""
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_bar, q_smem)
    for j in range(n_tiles):
        slot = j % STAGES
        # empty barriers start "phase 1 complete": the first STAGES waits pass at once
        mbarrier.wait(empty.index(slot), ((j // STAGES) & 1) ^ 1)
        bar = ready.index(slot)
        mbarrier.expect(bar, k_desc.block_type.nbytes + v_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(k_desc, [k_row + j * BLOCK_N, 0], bar, k_bufs.index(slot))
        tma.async_copy_global_to_shared(v_desc, [v_row, j * BLOCK_N], bar, v_bufs.index(slot))


@gluon.jit
def _tile_scale(KS, ks_base, j, n_k, BLOCK_N: gl.constexpr, KS_BLK: gl.constexpr, s_layout: gl.constexpr):
    """K's scale for key tile j: a scalar when the tile lies in one K block, else per column.

    Loaded one tile ahead by the caller: a global load on the softmax's critical path would
    stall every tile for the memory latency.
    """
    if KS_BLK % BLOCK_N == 0:
        ks = gl.load(KS + ks_base + (j * BLOCK_N) // KS_BLK)
    else:
        cols = j * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        ks = gl.load(KS + ks_base + cols // KS_BLK, mask=cols < n_k, other=0.0)
    return ks


@gluon.jit
def _softmax_tile(
    s,
    qs,
    ks,
    m_i,
    l_i,
    offs_m,
    j,
    full,
    n_k,
    diag,
    BLOCK_N: gl.constexpr,
    KS_BLK: gl.constexpr,
    CAUSAL: gl.constexpr,
    P_SHIFT: gl.constexpr,
    s_layout: gl.constexpr,
):
    """Online softmax of one score tile: returns P (unnormalised, ×2^P_SHIFT), m, l, alpha.

    ``s`` holds int32 scores plus MAGIC_I (the MMA accumulated onto it), so its bits read as the
    float MAGIC_F + score exactly: no INT→FP conversion (16/clk/SM, like exp2) per score. The
    offset is removed per row or per column, never per score.
    """
    col_l: gl.constexpr = gl.SliceLayout(0, s_layout)
    start_n = j * BLOCK_N
    sf = s.to(gl.float32, bitcast=True)
    if KS_BLK % BLOCK_N == 0:  # the tile lies in one K block: one scale, folded into c
        c = qs * ks
        off = c * MAGIC_F
    else:
        sf = sf * gl.expand_dims(ks, 0) - gl.expand_dims(ks * MAGIC_F, 0)  # one FMA per score
        c = qs
        off = gl.zeros_like(qs)
    if start_n + BLOCK_N > full:  # a diagonal or ragged tile
        cols = start_n + gl.arange(0, BLOCK_N, layout=col_l)
        ok = gl.expand_dims(cols < n_k, 0)
        if CAUSAL:
            ok = ok & (gl.expand_dims(cols, 0) <= gl.expand_dims(offs_m + diag, 1))
        sf = gl.where(ok, sf, float("-inf"))
    # scores are sf·c − off with c > 0: max over the row is max(sf)·c − off; one FMA per score
    m_new = gl.maximum(m_i, gl.max(sf, axis=1) * c - off)
    m_use = gl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no visible key yet
    p = gl.exp2(sf * gl.expand_dims(c, 1) - gl.expand_dims(m_use + off - P_SHIFT, 1))
    alpha = gl.exp2(m_i - m_use)
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, m_new, l_i, alpha


@gluon.jit
def _compute_partition(
    q_smem,
    k_bufs,
    v_bufs,
    q_bar,
    ready,
    empty,
    QS,
    KS,
    VS,
    Out,
    qs_base,
    ks_base,
    vs_base,
    o_base,
    stride_on,
    start_m,
    n_q,
    n_k,
    n_tiles,
    full,
    diag,
    HEAD_DIM: gl.constexpr,
    BLOCK_D: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    Q_BLK: gl.constexpr,
    KS_BLK: gl.constexpr,
    CAUSAL: gl.constexpr,
    P_SHIFT: gl.constexpr,
    NUM_WARPS: gl.constexpr,
):
    """Tile j's softmax runs while Q·Kᵀ of tile j+1 and P·V of tile j−1 run on the tensor cores.

    Per iteration: issue S(j+1); softmax S(j); wait for PV(j−1) (S(j+1) may still run) and fold
    it into the output; release tile j−1's slot; issue PV(j); wait for S(j+1) (PV(j) may still
    run). A dummy PV with P = 0 stands in for tile −1, so the loop has no first-iteration case.
    """
    STAGES: gl.constexpr = k_bufs.type.shape[0]
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_N, 32]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, BLOCK_D, 32]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=4)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    col_o: gl.constexpr = gl.SliceLayout(0, o_layout)
    P_TYPE: gl.constexpr = v_bufs.type.element_ty

    offs_m = start_m + gl.arange(0, BLOCK_M, layout=row_s)
    # rows past the end get scale 1, not 0: 0 · (-inf) in masked tiles would be NaN
    qs = gl.load(QS + qs_base + offs_m // Q_BLK, mask=offs_m < n_q, other=1.0)
    magic = gl.full([BLOCK_M, BLOCK_N], MAGIC_I, gl.int32, s_layout)
    zero_o = gl.zeros([BLOCK_M, BLOCK_D], gl.float32, o_layout)
    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, row_s)
    l_i = gl.zeros([BLOCK_M], gl.float32, row_s)
    acc = zero_o
    alpha_prev = gl.full([BLOCK_M], 1.0, gl.float32, row_o)

    ks = _tile_scale(KS, ks_base, 0, n_k, BLOCK_N, KS_BLK, s_layout)
    mbarrier.wait(q_bar, 0)
    mbarrier.wait(ready.index(0), 0)
    s = warpgroup_mma(q_smem, k_bufs.index(0).permute((1, 0)), magic, is_async=True)
    p_op = gl.zeros([BLOCK_M, BLOCK_N], P_TYPE, p_layout)
    pv = warpgroup_mma(p_op, v_bufs.index(0).permute((1, 0)), zero_o, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(1, deps=(s,))
    for j in range(0, n_tiles - 1):
        nxt = (j + 1) % STAGES
        mbarrier.wait(ready.index(nxt), ((j + 1) // STAGES) & 1)
        s_next = warpgroup_mma(q_smem, k_bufs.index(nxt).permute((1, 0)), magic, is_async=True)
        ks_next = _tile_scale(KS, ks_base, j + 1, n_k, BLOCK_N, KS_BLK, s_layout)
        p, m_i, l_i, alpha = _softmax_tile(
            s,
            qs,
            ks,
            m_i,
            l_i,
            offs_m,
            j,
            full,
            n_k,
            diag,
            BLOCK_N,
            KS_BLK,
            CAUSAL,
            P_SHIFT,
            s_layout,
        )
        # PV(j−1) is done; S(j+1), issued before the softmax, has had the softmax's time. A
        # wait(1) here would be exact, but ptxas cannot prove it retires PV(j−1) across the loop
        # edge and then serialises every wgmma of the kernel (C7514).
        pv = warpgroup_mma_wait(0, deps=(pv,))
        # two-level accumulation: the FP8 MMA's partial sum of one tile, added in FP32
        acc = acc * gl.expand_dims(alpha_prev, 1) + pv
        mbarrier.arrive(empty.index((j + STAGES - 1) % STAGES), pred=j > 0)
        p_op = gl.convert_layout(p.to(P_TYPE), p_layout)
        # pv (consumed above) is the accumulator operand, ignored under use_acc=False: the MMA
        # writes in place, so no register copy reads an in-flight accumulator (ptxas would then
        # serialise every wgmma: "C7514")
        pv = warpgroup_mma(p_op, v_bufs.index(j % STAGES).permute((1, 0)), pv, use_acc=False, is_async=True)
        s = warpgroup_mma_wait(1, deps=(s_next,))
        alpha_prev = gl.convert_layout(alpha, row_o)
        ks = ks_next
    last = n_tiles - 1
    p, m_i, l_i, alpha = _softmax_tile(
        s,
        qs,
        ks,
        m_i,
        l_i,
        offs_m,
        last,
        full,
        n_k,
        diag,
        BLOCK_N,
        KS_BLK,
        CAUSAL,
        P_SHIFT,
        s_layout,
    )
    pv = warpgroup_mma_wait(0, deps=(pv,))
    acc = acc * gl.expand_dims(alpha_prev, 1) + pv
    p_op = gl.convert_layout(p.to(P_TYPE), p_layout)
    pv = warpgroup_mma(
        p_op, v_bufs.index(last % STAGES).permute((1, 0)), zero_o, use_acc=False, is_async=True
    )
    pv = warpgroup_mma_wait(0, deps=(pv,))
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1) + pv

    offs_d = gl.arange(0, BLOCK_D, layout=col_o)
    vs = gl.load(VS + vs_base + offs_d)
    l_o = gl.convert_layout(l_i, row_o)
    inv_l = gl.where(l_o > 0, 1.0 / l_o, 0.0)  # l carries P's 2^P_SHIFT, as acc does
    out = acc * gl.expand_dims(vs, 0) * gl.expand_dims(inv_l, 1)
    rows = start_m + gl.arange(0, BLOCK_M, layout=row_o)
    ptrs = Out + o_base + gl.expand_dims(rows, 1) * stride_on + gl.expand_dims(offs_d, 0)
    ok = gl.expand_dims(rows < n_q, 1) & gl.expand_dims(offs_d < HEAD_DIM, 0)
    gl.store(ptrs, out.to(Out.dtype.element_ty), mask=ok)


@gluon.jit
def _attn_fwd_hopper_kernel(
    q_desc,
    k_desc,
    v_desc,
    QS,
    KS,
    VS,
    Out,
    stride_ob,
    stride_oh,
    stride_on,
    H,
    GROUP,
    N_Q,
    N_K,
    QS_NBLK,
    KS_NBLK,
    HEAD_DIM: gl.constexpr,
    BLOCK_D: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    Q_BLK: gl.constexpr,
    KS_BLK: gl.constexpr,
    STAGES: gl.constexpr,
    CAUSAL: gl.constexpr,
    P_SHIFT: gl.constexpr,
    NUM_WARPS: gl.constexpr,
):
    pid_m = gl.program_id(0)
    if CAUSAL:  # the longest rows first: better tail balance across SMs
        pid_m = gl.num_programs(0) - 1 - pid_m
    pid_bh = gl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    kv_bh = b * (H // GROUP) + h // GROUP
    start_m = pid_m * BLOCK_M
    diag = N_K - N_Q
    if CAUSAL:  # bottom-right aligned; the host sends N_Q <= N_K only, so hi >= 1
        hi = gl.minimum(N_K, start_m + BLOCK_M + diag)
        full = gl.minimum(hi, start_m + diag + 1) // BLOCK_N * BLOCK_N
    else:
        hi = N_K
        full = N_K // BLOCK_N * BLOCK_N
    n_tiles = gl.cdiv(hi, BLOCK_N)

    q_smem = gl.allocate_shared_memory(q_desc.dtype, q_desc.block_type.shape, q_desc.layout)
    k_bufs = gl.allocate_shared_memory(k_desc.dtype, [STAGES] + k_desc.block_type.shape, k_desc.layout)
    v_bufs = gl.allocate_shared_memory(v_desc.dtype, [STAGES] + v_desc.block_type.shape, v_desc.layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)

    gl.warp_specialize(
        [
            (
                _compute_partition,
                (
                    q_smem,
                    k_bufs,
                    v_bufs,
                    q_bar,
                    ready,
                    empty,
                    QS,
                    KS,
                    VS,
                    Out,
                    pid_bh.to(gl.int64) * QS_NBLK,
                    kv_bh.to(gl.int64) * KS_NBLK,
                    kv_bh.to(gl.int64) * BLOCK_D,
                    b.to(gl.int64) * stride_ob + h.to(gl.int64) * stride_oh,
                    stride_on,
                    start_m,
                    N_Q,
                    N_K,
                    n_tiles,
                    full,
                    diag,
                    HEAD_DIM,
                    BLOCK_D,
                    BLOCK_M,
                    BLOCK_N,
                    Q_BLK,
                    KS_BLK,
                    CAUSAL,
                    P_SHIFT,
                    NUM_WARPS,
                ),
            ),
            (
                _load_partition,
                (
                    q_desc,
                    k_desc,
                    v_desc,
                    q_smem,
                    k_bufs,
                    v_bufs,
                    q_bar,
                    ready,
                    empty,
                    pid_bh * N_Q + start_m,
                    kv_bh * N_K,
                    kv_bh * BLOCK_D,
                    n_tiles,
                    BLOCK_N,
                ),
            ),
        ],
        [1],
        [24],
    )


def _descriptor(t2d: torch.Tensor, block: list[int], dtype) -> TensorDescriptor:
    layout = gl.NVMMASharedLayout.get_default_for(block, dtype)
    return TensorDescriptor(t2d, list(t2d.shape), list(t2d.stride()), block, layout)


_GL_FP8 = {torch.float8_e4m3fn: gl.float8e4nv}


def kernel_args(
    q_int8: torch.Tensor,
    q_scale: torch.Tensor,
    k_int8: torch.Tensor,
    k_scale: torch.Tensor,
    v_fp8_t: torch.Tensor,
    v_scale: torch.Tensor,
    out: torch.Tensor,
    *,
    heads: int,
    group: int,
    head_dim: int,
    block_m: int,
    block_n: int,
    stages: int,
    num_warps: int,
    q_blk: int,
    causal: bool,
    fp8_max: float = 448.0,
) -> tuple[tuple, dict, tuple]:
    """(positional args, constexprs, grid) of one launch, from dense contiguous buffers.

    q_int8 [B, H, N_q, Dp], k_int8 [B, Hkv, N_k, Dp], v_fp8_t [B, Hkv, Dp, N_k] (channel-major),
    out [B, H, N_q, D] (any strides but a unit last one); scales as ``quant`` makes them.
    """
    b, h, n_q, dp = q_int8.shape
    n_k = k_int8.shape[2]
    q_desc = _descriptor(q_int8.view(-1, dp), [block_m, dp], gl.int8)
    k_desc = _descriptor(k_int8.view(-1, dp), [block_n, dp], gl.int8)
    v_desc = _descriptor(v_fp8_t.reshape(-1, n_k), [dp, block_n], _GL_FP8[v_fp8_t.dtype])
    args = (
        q_desc,
        k_desc,
        v_desc,
        q_scale,
        k_scale,
        v_scale,
        out,
        out.stride(0),
        out.stride(1),
        out.stride(2),
        heads,
        group,
        n_q,
        n_k,
        q_scale.shape[-1],
        k_scale.shape[-1],
    )
    constexprs = dict(
        HEAD_DIM=head_dim,
        BLOCK_D=dp,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        Q_BLK=q_blk,
        KS_BLK=K_BLK,
        STAGES=stages,
        CAUSAL=causal,
        P_SHIFT=math.log2(fp8_max),
        NUM_WARPS=num_warps,
    )
    grid = (launcher.cdiv(n_q, block_m), b * h)
    return args, constexprs, grid


def takes(fp8_dtype: Optional[torch.dtype], n_q: int, n_k: int, causal: bool) -> bool:
    """Whether a dense call of these properties fits the kernel (decided once per plan)."""
    return (
        fp8_dtype in _GL_FP8
        and n_k % 16 == 0  # TMA: V's channel-major rows must start 16-byte aligned
        and (not causal or n_q <= n_k)  # else whole query blocks see no key: the portable kernel
    )


def buffers_fit(kv: QuantizedKV) -> bool:
    """Whether the quantized K/V buffers are laid out as the TMA descriptors need (per call: the
    plan already fixed dense, unfused FP8 inputs; the extension's buffers may differ in layout)."""
    return kv.k.t.is_contiguous() and kv.v.t.transpose(-1, -2).is_contiguous()


def attention_forward_hopper(
    q: SeqView,
    kv: QuantizedKV,
    out: SeqView,
    cfg: LaunchConfig,
    *,
    head_dim_pad: int,
    sm_scale: float,
    causal: bool,
    q_blk: int,
    fp8_max: float,
) -> None:
    """Quantize Q (one launch, INT8 per q_blk rows with sm_scale·log2e folded in) and run the
    kernel; the caller checked ``eligible``. Writes ``out``."""
    qi, qs, _, _ = quant.quant_blocks(q, None, q_blk, sm_scale * quant.LOG2E, head_dim_pad)
    args, constexprs, grid = kernel_args(
        qi.t,
        qs,
        kv.k.t,
        kv.k_scale,
        kv.v.t.transpose(-1, -2),
        kv.v_scale,
        out.t,
        heads=q.heads,
        group=q.heads // kv.k.heads,
        head_dim=q.head_dim,
        block_m=cfg.block_m,
        block_n=cfg.block_n,
        stages=cfg.num_stages,
        num_warps=cfg.num_warps,
        q_blk=q_blk,
        causal=causal,
        fp8_max=fp8_max,
    )
    _attn_fwd_hopper_kernel[grid](*args, **constexprs, num_warps=cfg.num_warps, maxnreg=cfg.maxnreg)
