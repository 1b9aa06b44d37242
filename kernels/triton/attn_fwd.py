"""Triton attention forward: INT8 Q·Kᵀ, online softmax in exp2, P·V in FP16 or FP8.

One kernel serves every variant through constexpr switches:

* ``PV_FP8``: P (in [0, 1]) scaled by FP8_MAX and V (per-channel FP8) multiplied in FP8 with a
  fresh FP32 accumulator per key tile, added into the FP32 output accumulator (two-level
  accumulation: FP8 MMA units accumulate with ~22 bits). Otherwise P·V in V's 16-bit type.
* ``Q_INT8``: Q arrives pre-quantized (scales already times sm_scale·log2e); otherwise the
  kernel quantizes its FP16/BF16 Q tile in registers (no launch, no extra pass over Q).
* ``CAUSAL``: bottom-right aligned: query i sees keys j <= i + (N_k - N_q) (FlashAttention ≥ 2.1,
  SDPA's ``causal_lower_right``). Key tiles wholly below the diagonal run without any mask;
  only the diagonal tiles and a ragged last tile pay for it.
* GQA/MQA: query head h reads KV head h // (H // H_kv). Layouts, padding and varlen are strides
  and masks (see ``layout.SeqView``); nothing is copied.
* ``RETURN_LSE``: log-sum-exp (natural log) of the *unsmoothed* scores sm_scale·q·kᵀ, i.e. the
  smoothed kernel's value plus sm_scale·q·mean(K)ᵀ.
* ``KV_FUSED``: K (and V for FP8) arrive in 16 bits and are quantized tile by tile in here
  (opt-in, ``configs.fuse_kv``; measured slower on an H200, kept for other GPUs).
* FP8 V is read channel-major (``stride_vd`` = N): the K-major B operand Hopper's FP8 wgmma wants.
* ``USE_TMA``: K and V tiles by tensor descriptors built on the host over every head's rows (the
  TMA engine on NVIDIA sm90+; one descriptor per channel piece of a split head dim) instead of
  per-thread copies, where the launch config asks for it (the Hopper
  table's register-bound rows) or ``SAGEBUILD_TMA=1`` forces it (``configs.use_tma``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from . import configs, launcher, layout
from .configs import K_BLK, LaunchConfig
from .layout import SeqView, key_rows_of, wgmma_key_order
from .quant import LOG2E, scale_and_inverse, seq_base, to_int8

# float32 1.5·2²³ and its bit pattern: (i + MAGIC_I) read as a float is MAGIC_F + i for |i| < 2²².
MAGIC_F: tl.constexpr = tl.constexpr(12582912.0)
MAGIC_I: tl.constexpr = tl.constexpr(0x4B400000)


@triton.jit
def _load_rows(ptrs, col_ok, d_ok, other, MASKED: tl.constexpr, D_MASKED: tl.constexpr):
    """A [BLOCK_N, D] tile: key rows past the end and (D_MASKED) channels past the head dim read
    ``other`` (0 for integer tiles, 0.0 for floating ones)."""
    if MASKED:
        mask = col_ok[:, None]
        if D_MASKED:
            mask = mask & d_ok[None, :]
        x = tl.load(ptrs, mask=mask, other=other)
    elif D_MASKED:
        x = tl.load(ptrs, mask=d_ok[None, :], other=other)
    else:
        x = tl.load(ptrs)
    return x


@triton.jit
def _accumulate_pv(acc, p, v, TWO_LEVEL: tl.constexpr, V_KEY_ORDER: tl.constexpr):
    """acc + P·V: a fresh MMA accumulator added in FP32 (TWO_LEVEL), or the MMA accumulating onto acc.
    V_KEY_ORDER: V's rows are in wgmma key order, so P's columns are put in it too."""
    p = p.to(v.dtype)
    if V_KEY_ORDER:
        p = wgmma_key_order(p)
    if TWO_LEVEL:
        acc += tl.dot(p, v)
    else:
        acc = tl.dot(p, v, acc)
    return acc


@triton.jit
def _wgmma_wait(x):
    """Wait for every wgmma this warpgroup has committed (sm90 PTX; ``x`` only anchors the
    statement: Triton keeps a side-effecting asm in program order)."""
    tl.inline_asm_elementwise(
        "wgmma.wait_group.sync.aligned 0;\n\tmov.u32 $0, $1;",
        "=r,r",
        [x],
        dtype=tl.int32,
        is_pure=False,
        pack=1,
    )


@triton.jit
def _attn_tiles(
    acc,
    acc2,
    l_i,
    m_i,
    q,
    q2,
    qs,
    K,
    V,
    KS,
    k_base,
    v_base,
    ks_base,
    n_k,
    lo,
    hi,
    diag,
    stride_kn,
    stride_vn,
    stride_vd,
    offs_m,
    offs_d,
    offs_d2,
    km_row,
    vinv_row,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_N: tl.constexpr,
    KS_BLK: tl.constexpr,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    PV_FP8: tl.constexpr,
    FP8_MAX: tl.constexpr,
    V_PADDED: tl.constexpr,
    P_SHIFT: tl.constexpr,
    KV_FUSED: tl.constexpr,
    P_DTYPE: tl.constexpr,
    PV_DIRECT: tl.constexpr,
    SPLIT_D: tl.constexpr,
    k_desc,
    v_desc,
    k2_desc,
    v2_desc,
    k_row0,
    v_row0,
    USE_TMA: tl.constexpr,
    WGMMA_WAIT: tl.constexpr,
    V_KEY_ORDER: tl.constexpr,
    ROW_SUM_PARTS: tl.constexpr,
):
    """Key tiles [lo, hi): scores, online softmax, P·V. MASKED tiles check bounds and causality.

    V_KEY_ORDER: FP8 V stored in wgmma key order (``layout.KEY_GROUP``), its rows padded with zeros
    to whole groups: a ragged tile reads V rows up to the padded end, where stored positions
    past n_k hold keys before it.

    WGMMA_WAIT (Hopper): the P·V wgmma is waited on inside its iteration, not across the loop
    edge, where ptxas serialises every wgmma (``configs.use_wgmma_pipe``).

    SPLIT_D: the head dim runs as two channel pieces, ``offs_d`` (q, acc) and ``offs_d2`` (q2,
    acc2), instead of one padded tile (pre-quantized K/V only); otherwise q2/acc2 are unused.

    KV_FUSED: K (and V for FP8 P·V) arrive in 16 bits and are quantized here, tile by tile,
    exactly as the quantization kernels would (same 64-token K blocks, same rounding): no
    launch of their own, for short sequences where launches, not arithmetic, set the time.
    """
    offs_n = tl.arange(0, BLOCK_N)
    d_ok = offs_d < HEAD_DIM
    d2_ok = offs_d2 < HEAD_DIM
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < n_k
        v_ok = cols < key_rows_of(n_k) if V_KEY_ORDER else col_ok
        if KV_FUSED:
            kmask = d_ok[None, :]
            if MASKED:
                kmask = kmask & col_ok[:, None]
            kf = tl.load(K + k_base + cols[:, None] * stride_kn + offs_d[None, :], mask=kmask, other=0.0)
            y = tl.where(kmask, kf.to(tl.float32) - km_row[None, :], 0.0)
            if BLOCK_N == KS_BLK:  # one K block per tile: a scalar scale, no reshapes
                kstep, kinv = scale_and_inverse(tl.max(tl.max(tl.abs(y), axis=1), axis=0), 127.0)
                k = to_int8(y * kinv)
                s = tl.dot(q, tl.trans(k)).to(tl.float32)
                c = qs * kstep
            else:
                kamax = tl.max(tl.reshape(tl.abs(y), (BLOCK_N // KS_BLK, KS_BLK * BLOCK_D)), axis=1)
                kstep, kinv = scale_and_inverse(kamax, 127.0)
                kstep_col = tl.reshape(
                    tl.broadcast_to(kstep[:, None], (BLOCK_N // KS_BLK, KS_BLK)), (BLOCK_N,)
                )
                kinv_col = tl.reshape(tl.broadcast_to(kinv[:, None], (BLOCK_N // KS_BLK, KS_BLK)), (BLOCK_N,))
                k = to_int8(y * kinv_col[:, None])
                s = tl.dot(q, tl.trans(k)).to(tl.float32) * kstep_col[None, :]
                c = qs
            off = tl.zeros_like(qs)
        else:
            k_rows = K + k_base + cols[:, None] * stride_kn
            if USE_TMA:  # the copy engine fetches the tile (rows past n_k: masked scores)
                k = k_desc.load([k_row0 + start_n, 0])
            else:
                k = _load_rows(k_rows + offs_d[None, :], col_ok, d_ok, 0, MASKED, False)
            # INT32 scores to FP32 without the conversion unit (I2F issues at 16/clk/SM on sm80-90,
            # like the exp): adding 1.5·2²³'s bit pattern makes the bits read as the float
            # MAGIC_F + s exactly (|s| ≤ 127²·256 < 2²²); Triton folds the add into the MMA's
            # accumulator. The offset is removed per row or per column, never per score.
            si = tl.dot(q, tl.trans(k)) + MAGIC_I
            if SPLIT_D:  # the second channel piece accumulates onto the first
                if USE_TMA:
                    k2 = k2_desc.load([k_row0 + start_n, BLOCK_D // 2])
                else:
                    k2 = _load_rows(k_rows + offs_d2[None, :], col_ok, d2_ok, 0, MASKED, False)
                si = tl.dot(q2, tl.trans(k2), si, out_dtype=tl.int32)
            s = si.to(tl.float32, bitcast=True)
            # Scores are s·c with c = q_scale·k_scale > 0, so max(s·c) = max(s)·c and the softmax
            # needs one FMA per score (s·c − m) instead of two multiplies and a subtraction.
            if KS_BLK % BLOCK_N == 0:  # the tile lies in one K block: one K scale for the tile
                c = qs * tl.load(KS + ks_base + start_n // KS_BLK)
                off = c * MAGIC_F
            else:
                if MASKED:
                    ks = tl.load(KS + ks_base + cols // KS_BLK, mask=col_ok, other=0.0)
                else:
                    ks = tl.load(KS + ks_base + cols // KS_BLK)
                s = s * ks[None, :] - (ks * MAGIC_F)[None, :]  # one FMA per score
                c = qs
                off = tl.zeros_like(qs)
        if MASKED:
            ok = col_ok[None, :]
            if CAUSAL:
                ok = ok & (cols[None, :] <= offs_m[:, None] + diag)
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1) * c - off)
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet
        else:
            if not KV_FUSED and KS_BLK % BLOCK_N == 0:
                # One scale for the tile, so the row max is taken on the INT32 bits, which grow
                # with the score (MAGIC_F + s > 0): the same float, and ptxas fuses integer max
                # chains into sm90's three-input VIMNMX3 (FMNMX takes two): half the instructions.
                top = tl.max(si, axis=1).to(tl.float32, bitcast=True)
            else:
                top = tl.max(s, axis=1)
            m_new = tl.maximum(m_i, top * c - off)
            m_use = m_new
        # FP8 P·V: P is wanted times FP8_MAX; exp2(x + log2(FP8_MAX)) does it for free, and l
        # (summed from the same P) carries the same factor, which cancels in acc / l.
        p = tl.math.exp2(s * c[:, None] - (m_use + off - P_SHIFT)[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        if ROW_SUM_PARTS > 1:  # [rows, ROW_SUM_PARTS] partial sums: no shuffles (configs.row_sum_parts)
            parts = tl.reshape(p, (p.shape[0], BLOCK_N // ROW_SUM_PARTS, ROW_SUM_PARTS))
            l_i = l_i * alpha[:, None] + tl.sum(parts, axis=1)
        else:
            l_i = l_i * alpha + tl.sum(p, axis=1)
        v_rows = V + v_base + cols[:, None] * stride_vn
        if USE_TMA:  # FP8 V is channel-major: a [D, BLOCK_N] box, used transposed
            v = tl.trans(v_desc.load([v_row0, start_n]))
        else:
            v = _load_rows(v_rows + offs_d[None, :] * stride_vd, v_ok, d_ok, 0.0, MASKED, V_PADDED)
        if PV_FP8 and KV_FUSED:
            v = v.to(tl.float32) * vinv_row[None, :]
            v = tl.minimum(tl.maximum(v, -FP8_MAX), FP8_MAX).to(P_DTYPE)
        # FP8 P·V: each tile's product in a fresh accumulator added into FP32 ("fp32+fp32"), or
        # (PV_DIRECT, "fp32") accumulated by the MMA itself: no FP32 add per output element,
        # and one accumulator's registers fewer. FP16 P·V always accumulates in the MMA.
        two_level: tl.constexpr = PV_FP8 and not PV_DIRECT
        acc = _accumulate_pv(acc * alpha[:, None], p, v, two_level, V_KEY_ORDER)
        if SPLIT_D:
            if USE_TMA:
                v2 = tl.trans(v2_desc.load([v_row0 + BLOCK_D // 2, start_n]))
            else:
                v2 = _load_rows(v_rows + offs_d2[None, :] * stride_vd, v_ok, d2_ok, 0.0, MASKED, V_PADDED)
            acc2 = _accumulate_pv(acc2 * alpha[:, None], p, v2, two_level, V_KEY_ORDER)
        if WGMMA_WAIT:
            _wgmma_wait(start_n)
        m_i = m_new
    return acc, acc2, l_i, m_i


@triton.jit
def _attn_fwd_kernel(
    QF,
    QI,
    QS,
    K,
    KS,
    V,
    VS,
    KM,
    Out,
    LSE,
    CUQ,
    CUK,
    KD,
    VD,
    KD2,
    VD2,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_ib,
    stride_ih,
    stride_in,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_on,
    H,
    GROUP,
    N_Q,
    N_K,
    QS_NBLK,
    KS_NBLK,
    q_scale_mul,
    sm_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    Q_BLK: tl.constexpr,
    KS_BLK: tl.constexpr,
    CAUSAL: tl.constexpr,
    PV_FP8: tl.constexpr,
    FP8_MAX: tl.constexpr,
    Q_INT8: tl.constexpr,
    RETURN_LSE: tl.constexpr,
    SMOOTH_K: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    V_PADDED: tl.constexpr,
    P_SHIFT: tl.constexpr,
    KV_FUSED: tl.constexpr,
    P_DTYPE: tl.constexpr,
    PV_DIRECT: tl.constexpr,
    SPLIT_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    PDL: tl.constexpr,
    Q_FROM_MEMORY: tl.constexpr,
    WGMMA_WAIT: tl.constexpr,
    V_KEY_ORDER: tl.constexpr,
    ROW_SUM_PARTS: tl.constexpr,
):
    pid_m = tl.program_id(0)
    if CAUSAL:  # the longest rows first: better tail balance across SMs
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    hk = h // GROUP
    q_base, n_q = seq_base(CUQ, b, N_Q, stride_qb, stride_qn, IS_VARLEN)
    k_base, n_k = seq_base(CUK, b, N_K, stride_kb, stride_kn, IS_VARLEN)
    v_base, _ = seq_base(CUK, b, N_K, stride_vb, stride_vn, IS_VARLEN)
    o_base, _ = seq_base(CUQ, b, N_Q, stride_ob, stride_on, IS_VARLEN)
    q_base += h.to(tl.int64) * stride_qh
    k_base += hk.to(tl.int64) * stride_kh
    v_base += hk.to(tl.int64) * stride_vh
    o_base += h.to(tl.int64) * stride_oh
    start_m = pid_m * BLOCK_M
    if start_m < n_q:
        offs_m = start_m + tl.arange(0, BLOCK_M)
        # SPLIT_D: channels [0, BLOCK_D/2) and [BLOCK_D/2, 3·BLOCK_D/4) instead of a BLOCK_D tile
        D1: tl.constexpr = BLOCK_D // 2 if SPLIT_D else BLOCK_D
        D2: tl.constexpr = BLOCK_D // 4
        offs_d = tl.arange(0, D1)
        offs_d2 = D1 + tl.arange(0, D2)
        row_ok = offs_m < n_q
        d_ok = offs_d < HEAD_DIM
        d2_ok = offs_d2 < HEAD_DIM
        kv_bh = (b * (H // GROUP) + hk).to(tl.int64)

        # Q: INT8 tile and its per-row scale (sm_scale·log2e folded in).
        q_rows = QF + q_base + offs_m[:, None] * stride_qn
        if Q_INT8 and not RETURN_LSE:
            qf = tl.zeros([BLOCK_M, D1], dtype=tl.float32)
            qf2 = tl.zeros([BLOCK_M, D2], dtype=tl.float32)
        else:
            qf = tl.load(q_rows + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
            qf = qf.to(tl.float32)
            if SPLIT_D:
                qf2 = tl.load(q_rows + offs_d2[None, :], mask=row_ok[:, None] & d2_ok[None, :], other=0.0)
                qf2 = qf2.to(tl.float32)
            else:
                qf2 = tl.zeros([BLOCK_M, D2], dtype=tl.float32)
        if Q_INT8:
            i_base, _ = seq_base(CUQ, b, N_Q, stride_ib, stride_in, IS_VARLEN)
            i_rows = QI + i_base + h.to(tl.int64) * stride_ih + offs_m[:, None] * stride_in
            q = tl.load(i_rows + offs_d[None, :], mask=row_ok[:, None], other=0)
            q2 = tl.load(i_rows + offs_d2[None, :], mask=row_ok[:, None], other=0) if SPLIT_D else q
            # rows past the end get scale 1, not 0: 0 · (-inf) in masked tiles would be NaN
            qs = tl.load(QS + pid_bh.to(tl.int64) * QS_NBLK + offs_m // Q_BLK, mask=row_ok, other=1.0)
        else:
            amax = tl.max(tl.reshape(tl.abs(qf), (BLOCK_M // Q_BLK, Q_BLK * D1)), axis=1)
            if SPLIT_D:
                amax2 = tl.max(tl.reshape(tl.abs(qf2), (BLOCK_M // Q_BLK, Q_BLK * D2)), axis=1)
                amax = tl.maximum(amax, amax2)
            step, inv = scale_and_inverse(amax, 127.0)  # the contract of quant.py
            step_row = tl.reshape(tl.broadcast_to(step[:, None], (BLOCK_M // Q_BLK, Q_BLK)), (BLOCK_M,))
            inv_row = tl.reshape(tl.broadcast_to(inv[:, None], (BLOCK_M // Q_BLK, Q_BLK)), (BLOCK_M,))
            q = to_int8(qf * inv_row[:, None])
            q2 = to_int8(qf2 * inv_row[:, None]) if SPLIT_D else q
            qs = step_row * q_scale_mul
            if Q_FROM_MEMORY:
                # The INT8 tile goes through this program's own output rows (written only at the
                # end; 2·HEAD_DIM bytes each, ≥ D1 + D2: the caller checks) and comes back as a
                # loaded tile, which Triton keeps in shared memory for the loop's wgmma instead
                # of reloading registers every key tile (``configs.use_wgmma_pipe``).
                out_bytes: tl.constexpr = Out.dtype.element_ty.primitive_bitwidth // 8
                scratch = Out.to(tl.pointer_type(tl.int8)) + out_bytes * (
                    o_base + offs_m[:, None] * stride_on
                )
                tl.store(scratch + offs_d[None, :], q, mask=row_ok[:, None])
                if SPLIT_D:
                    tl.store(scratch + offs_d2[None, :], q2, mask=row_ok[:, None])
                tl.debug_barrier()  # every thread's stores visible to every thread of the program
                q = tl.load(scratch + offs_d[None, :], mask=row_ok[:, None], other=0)
                if SPLIT_D:
                    q2 = tl.load(scratch + offs_d2[None, :], mask=row_ok[:, None], other=0)

        if PDL:  # launched before the K/V quantization finished: its results are read from here on
            gdc_wait()
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        if ROW_SUM_PARTS > 1:
            l_i = tl.zeros([BLOCK_M, ROW_SUM_PARTS], dtype=tl.float32)
        else:
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, D1], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_M, D2], dtype=tl.float32)
        ks_base = kv_bh * KS_NBLK
        if KV_FUSED and SMOOTH_K:
            km_row = tl.load(KM + kv_bh * BLOCK_D + offs_d)
        else:
            km_row = tl.zeros([BLOCK_D], dtype=tl.float32)
        if KV_FUSED and PV_FP8:  # VS holds V's amax per channel: the scale is derived here
            vs_row, vinv_row = scale_and_inverse(tl.load(VS + kv_bh * BLOCK_D + offs_d), FP8_MAX)
        else:
            vs_row = tl.zeros([BLOCK_D], dtype=tl.float32)
            vinv_row = vs_row

        if USE_TMA:  # host-built descriptors over every head: K rows (b, h, n), FP8 V rows (b, h, d)
            k_row0 = (kv_bh * N_K).to(tl.int32)
            v_row0 = (kv_bh * BLOCK_D).to(tl.int32)
        else:
            k_row0 = 0
            v_row0 = 0
        # Key tiles [0, full) need no mask; [full, hi) are diagonal or ragged tiles.
        diag = n_k - n_q
        if CAUSAL:
            hi = tl.minimum(n_k, start_m + BLOCK_M + diag)
            full = tl.maximum(tl.minimum(hi, start_m + diag + 1), 0) // BLOCK_N * BLOCK_N
            hi = tl.maximum(hi, 0)
        else:
            hi = n_k
            full = n_k // BLOCK_N * BLOCK_N
        # the unmasked tiles, then the masked ones: one loop, unrolled at compile time
        for masked in tl.static_range(2):
            acc, acc2, l_i, m_i = _attn_tiles(
                acc,
                acc2,
                l_i,
                m_i,
                q,
                q2,
                qs,
                K,
                V,
                KS,
                k_base,
                v_base,
                ks_base,
                n_k,
                full if masked else 0,
                hi if masked else full,
                diag,
                stride_kn,
                stride_vn,
                stride_vd,
                offs_m,
                offs_d,
                offs_d2,
                km_row,
                vinv_row,
                HEAD_DIM,
                BLOCK_D,
                BLOCK_N,
                KS_BLK,
                masked == 1,
                CAUSAL,
                PV_FP8,
                FP8_MAX,
                V_PADDED,
                P_SHIFT,
                KV_FUSED,
                P_DTYPE,
                PV_DIRECT,
                SPLIT_D,
                KD,
                VD,
                KD2,
                VD2,
                k_row0,
                v_row0,
                USE_TMA,
                WGMMA_WAIT,
                V_KEY_ORDER,
                ROW_SUM_PARTS,
            )

        if ROW_SUM_PARTS > 1:
            l_i = tl.sum(l_i, axis=1)
        inv_l = tl.where(l_i > 0, 1.0 / l_i, 0.0)
        o_rows = Out + o_base + offs_m[:, None] * stride_on
        if PV_FP8:
            vs = vs_row if KV_FUSED else tl.load(VS + kv_bh * BLOCK_D + offs_d)
            out = acc * vs[None, :] * inv_l[:, None]  # l carries P's FP8_MAX factor
        else:
            out = acc * inv_l[:, None]
        tl.store(o_rows + offs_d[None, :], out.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
        if SPLIT_D:
            if PV_FP8:
                out2 = acc2 * tl.load(VS + kv_bh * BLOCK_D + offs_d2)[None, :] * inv_l[:, None]
            else:
                out2 = acc2 * inv_l[:, None]
            mask2 = row_ok[:, None] & d2_ok[None, :]
            tl.store(o_rows + offs_d2[None, :], out2.to(Out.dtype.element_ty), mask=mask2)
        if RETURN_LSE:
            lse = (m_i + tl.math.log2(l_i) - P_SHIFT) / 1.4426950408889634
            if SMOOTH_K:
                km = tl.load(KM + kv_bh * BLOCK_D + offs_d)
                lse += tl.sum(qf * km[None, :], axis=1) * sm_scale
                if SPLIT_D:
                    km2 = tl.load(KM + kv_bh * BLOCK_D + offs_d2)
                    lse += tl.sum(qf2 * km2[None, :], axis=1) * sm_scale
            lse = tl.where(l_i > 0, lse, float("-inf"))
            tl.store(LSE + pid_bh.to(tl.int64) * N_Q + offs_m, lse, mask=row_ok)


@dataclass
class QuantizedKV:
    """K (and, for FP8 P·V, V) after quantization, as the attention kernel reads them."""

    k: SeqView  # int8 [.., Dp]
    k_scale: torch.Tensor  # float32 [B, Hkv, cdiv(N_k, k_blk)]
    k_blk: int
    km: Optional[torch.Tensor]  # float32 [B, Hkv, Dp] or None (smooth_k=False)
    v: SeqView  # fp8 [.., Dp] (FP8 path) or the caller's fp16/bf16 V
    v_scale: Optional[torch.Tensor]  # float32 [B, Hkv, Dp] (FP8 path)
    # True: k and v are the caller's 16-bit tensors, quantized inside the attention kernel;
    # k_scale is unused and v_scale holds V's amax per channel (FP8 path).
    fused: bool = False
    # True: FP8 V's tokens are in wgmma key order (``layout.KEY_GROUP``, ``quant.quant_kv``)
    v_key_order: bool = False


@dataclass
class QuantizedQ:
    """Q quantized outside the attention kernel (the extension's path)."""

    q: SeqView  # int8 [.., Dp]
    scale: torch.Tensor  # float32 [B, H, cdiv(N_q, blk)], sm_scale·log2e folded in
    blk: int


_TL_FP8 = {torch.float8_e4m3fn: tl.float8e4nv, torch.float8_e4m3fnuz: tl.float8e4b8}


def tma_layout_ok(pv_fp8: bool, fused: bool, v_row_stride: int) -> bool:
    """TMA's conditions that a call's shapes decide, for K/V laid out as ``quant.quant_kv`` lays
    them out (K in rows of head_dim_pad bytes, FP8 V channel-major in rows of N tokens): FP8 P·V
    on K/V quantized beforehand, V's row stride a multiple of 16 bytes (TMA's rule; a split head
    dim's second piece starts 64 or 128 bytes in, aligned too). The API decides from these before
    quantizing; ``tma_eligible`` checks actual buffers."""
    return pv_fp8 and not fused and v_row_stride % 16 == 0


def tma_eligible(kv: QuantizedKV, head_dim_pad: int, pv_fp8: bool) -> bool:
    """Whether a launch can read these K/V buffers by tensor descriptors: ``tma_layout_ok``, and
    both as ``layout.empty_like_view`` lays dense sequences out: K [B, H, N, Dp] and FP8 V
    [B, H, Dp, N], each contiguous (one descriptor spans every head: ``_kv_descriptors``)."""
    k, v = kv.k, kv.v
    dn = head_dim_pad * k.max_len  # one head's elements
    vrows = layout.key_rows(k.max_len, kv.v_key_order)  # V's row length (padded in key order)
    return (
        tma_layout_ok(pv_fp8, kv.fused, v.stride_d)
        and not k.is_varlen
        and k.head_dim == head_dim_pad
        and v.head_dim == head_dim_pad
        and (k.stride_n, k.stride_h, k.stride_b) == (head_dim_pad, dn, k.heads * dn)
        and (v.stride_n, v.stride_d, v.stride_h, v.stride_b)
        == (1, vrows, head_dim_pad * vrows, v.heads * head_dim_pad * vrows)
    )


def kv_desc_boxes(head_dim_pad: int, block_n: int, split: bool) -> tuple[list[int], ...]:
    """The boxes of the K, V, second K and second V descriptors (``_kv_descriptors``; the AOT
    sources declare the same): a tile's keys by a channel piece, V's transposed. Unsplit, the
    second pieces are the first."""
    d1 = head_dim_pad // 2 if split else head_dim_pad
    d2 = head_dim_pad // 4 if split else d1
    return [block_n, d1], [d1, block_n], [block_n, d2], [d2, block_n]


def _kv_descriptors(kv: QuantizedKV, head_dim_pad: int, block_n: int, split: bool) -> tuple:
    """Host-built tensor descriptors (K, V, K's and V's second channel piece) over every head's
    rows (``tma_eligible`` layouts): the kernel takes them as launch parameters, so no program
    writes a descriptor to global scratch and fences it before its first load, and a call needs
    no scratch allocation. A K tile past a head's last key reads the next head's rows (those
    scores are masked); V's key axis ends at N, so its tiles there arrive as zeros."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    k_box, v_box, k2_box, v2_box = kv_desc_boxes(head_dim_pad, block_n, split)
    n = kv.k.max_len
    vrows = layout.key_rows(n, kv.v_key_order)
    k_shape, k_strides = [kv.k.batch * kv.k.heads * n, head_dim_pad], [head_dim_pad, 1]
    v_shape, v_strides = [kv.v.batch * kv.v.heads * head_dim_pad, vrows], [vrows, 1]
    kd = TensorDescriptor(kv.k.t, k_shape, k_strides, k_box)
    vd = TensorDescriptor(kv.v.t, v_shape, v_strides, v_box)
    if not split:  # the same boxes: the same descriptors
        return kd, vd, kd, vd
    return (
        kd,
        vd,
        TensorDescriptor(kv.k.t, k_shape, k_strides, k2_box),
        TensorDescriptor(kv.v.t, v_shape, v_strides, v2_box),
    )


def q_tile_fits_out(head_dim: int, head_dim_pad: int) -> bool:
    """Whether an output row (head_dim 16-bit elements) holds the kernel's INT8 Q row (at most
    head_dim_pad bytes): every head dim from 32 up."""
    return 2 * head_dim >= head_dim_pad


def attention_forward(
    q: SeqView,
    kv: QuantizedKV,
    out: SeqView,
    cfg: LaunchConfig,
    *,
    head_dim_pad: int,
    sm_scale: float,
    causal: bool,
    pv_fp8: bool,
    q_blk: int,
    fp8_max: float = 448.0,
    fp8_dtype: Optional[torch.dtype] = None,
    q_int8: Optional[QuantizedQ] = None,
    lse: Optional[torch.Tensor] = None,
    launch_key: Optional[tuple] = None,
    pv_direct: bool = False,
    tma: bool = False,
    pdl: bool = False,
    wgmma_pipe: bool = False,
    q_from_memory: Optional[bool] = None,
    row_sum_parts: int = 1,
) -> None:
    """Launch the attention kernel; writes ``out`` (and ``lse`` [B, H, N_q] float32 when given).

    ``wgmma_pipe`` (Hopper, ``configs.use_wgmma_pipe``): Q's INT8 tile is read back from memory
    (``q_from_memory``, where the output rows have room for it) and the P·V wgmma is waited on
    inside its iteration, so that ptxas pipelines the kernel's wgmma. ``q_from_memory`` alone
    (None: as ``wgmma_pipe``) runs the round trip anywhere (tests: the interpreter).

    ``row_sum_parts``: P's row sums kept in that many partial sums per row until the epilogue
    (``configs.row_sum_parts``; it must divide the key tile).

    ``pv_direct``: FP8 P·V accumulated by the MMA across key tiles (``pv_accum_dtype="fp32"``).

    ``tma``: K/V tiles by tensor descriptors (``configs.use_tma``; FP8 P·V, K/V quantized
    beforehand, 16-byte aligned token strides: ``tma_eligible``).

    ``pdl``: launched as a programmatic dependent of the K/V quantization launch just issued
    (``configs.use_pdl``): the kernel loads and quantizes its Q tile while that launch finishes,
    then waits for it. Q must not be written by that launch (it is the caller's).

    ``launch_key``: see ``launcher.launch`` and ``launcher.constexprs`` (the API passes its
    per-signature plan key, which fixes the head dims, config, flags and FP8 type).
    """
    group = q.heads // kv.k.heads
    qi = q_int8.q if q_int8 is not None else q
    qs = q_int8.scale if q_int8 is not None else kv.k_scale
    q_blk = q_int8.blk if q_int8 is not None else q_blk
    if cfg.block_m % q_blk:
        raise ValueError(f"Q block of {q_blk} rows does not divide BLOCK_M={cfg.block_m}")
    if cfg.block_n % row_sum_parts:
        raise ValueError(f"{row_sum_parts} row-sum parts do not divide BLOCK_N={cfg.block_n}")
    if pdl and q_int8 is not None:  # Q would be read before the wait
        raise ValueError("pdl=True needs Q quantized inside the kernel (q_int8=None)")
    grid = (launcher.cdiv(q.max_len, cfg.block_m), q.batch * q.heads)
    dummy = kv.k_scale
    if q_from_memory is None:
        q_from_memory = wgmma_pipe
    q_from_memory = q_from_memory and q_int8 is None and q_tile_fits_out(q.head_dim, head_dim_pad)
    consts = launcher.constexprs(
        _attn_fwd_kernel,
        launch_key,
        lambda: dict(
            HEAD_DIM=q.head_dim,
            BLOCK_D=head_dim_pad,
            BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n,
            Q_BLK=q_blk,
            KS_BLK=kv.k_blk,
            CAUSAL=causal,
            PV_FP8=pv_fp8,
            FP8_MAX=fp8_max,
            Q_INT8=q_int8 is not None,
            RETURN_LSE=lse is not None,
            SMOOTH_K=kv.km is not None,
            IS_VARLEN=q.is_varlen,
            V_PADDED=kv.v.head_dim != head_dim_pad,
            P_SHIFT=math.log2(fp8_max) if pv_fp8 else 0.0,
            KV_FUSED=kv.fused,
            P_DTYPE=_TL_FP8[fp8_dtype] if pv_fp8 and kv.fused else tl.float16,
            PV_DIRECT=pv_fp8 and pv_direct,
            SPLIT_D=configs.split_head_dim(q.head_dim, head_dim_pad) and not kv.fused,
            USE_TMA=tma,
            PDL=pdl,
            Q_FROM_MEMORY=q_from_memory,
            WGMMA_WAIT=wgmma_pipe,
            V_KEY_ORDER=pv_fp8 and kv.v_key_order,
            ROW_SUM_PARTS=row_sum_parts,
        ),
    )
    if tma:
        if not tma_eligible(kv, head_dim_pad, pv_fp8):  # the descriptors span heads as laid out there
            raise ValueError("tma=True needs K/V as quant.quant_kv lays out dense sequences (tma_eligible)")
        descs = _kv_descriptors(kv, head_dim_pad, cfg.block_n, consts["SPLIT_D"])
    else:  # unused by the kernel
        descs = (kv.k.t, kv.v.t, kv.k.t, kv.v.t)
    launcher.launch(
        _attn_fwd_kernel,
        grid,
        (
            q.t,
            qi.t,
            qs,
            kv.k.t,
            kv.k_scale,
            kv.v.t,
            kv.v_scale if kv.v_scale is not None else dummy,
            kv.km if kv.km is not None else dummy,
            out.t,
            lse if lse is not None else dummy,
            q.cu,
            kv.k.cu,
            *descs,
            *q.strides(),
            *qi.strides(),
            *kv.k.strides(),
            *kv.v.strides(),
            kv.v.stride_d,
            *out.strides(),
            q.heads,
            group,
            q.max_len,
            kv.k.max_len,
            qs.shape[-1],
            kv.k_scale.shape[-1],
            sm_scale * LOG2E,
            sm_scale,
        ),
        consts,
        key=launch_key,
        **cfg.launch_options(),
        **({"launch_pdl": True} if pdl else {}),
    )


__all__ = [
    "K_BLK",
    "QuantizedKV",
    "QuantizedQ",
    "attention_forward",
    "kv_desc_boxes",
    "tma_eligible",
    "tma_layout_ok",
]
