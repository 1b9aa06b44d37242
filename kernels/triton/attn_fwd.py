"""Triton attention forward: INT8 Q·Kᵀ, online softmax in exp2, P·V in FP16 or FP8.

One kernel serves every variant through constexpr switches:

* ``PV_FP8``: P (in [0, 1]) scaled by FP8_MAX and V (per-channel FP8) multiplied in FP8 with a
  fresh FP32 accumulator per key tile, added into the FP32 output accumulator (two-level
  accumulation: FP8 MMA units accumulate with ~22 bits). Otherwise P·V in V's 16-bit type.
* Q: the kernel quantizes its FP16/BF16 Q tile in registers (no launch, no extra pass over Q).
* ``CAUSAL``: bottom-right aligned: query i sees keys j <= i + (N_k - N_q) (FlashAttention ≥ 2.1,
  SDPA's ``causal_lower_right``). Key tiles wholly below the diagonal run without any mask;
  only the diagonal tiles and a ragged last tile pay for it.
* GQA/MQA: query head h reads KV head h // (H // H_kv). Layouts, padding and varlen are strides
  and masks (see ``layout.SeqView``); nothing is copied.
* ``RETURN_LSE``: log-sum-exp (natural log) of the *unsmoothed* scores sm_scale·q·kᵀ, i.e. the
  smoothed kernel's value plus sm_scale·q·mean(K)ᵀ.
* FP8 V is read channel-major (``stride_vd``: ``layout.v_row_stride``): the K-major B operand
  Hopper's FP8 wgmma wants. ``V_CHANNEL_MAJOR``: a 16-bit V copied so too (``layout.channel_major``,
  the ``vcm`` config), whose strides are not passed in ``ROW_UNIT``.
* ``FP8_CVT_ASM``: P becomes FP8 through the arch's packed conversion in inline asm (``fp8.to_fp8``).
* ``USE_TMA``: K and V tiles by tensor descriptors built on the host over every head's rows (the
  TMA engine on NVIDIA sm90+; one descriptor per channel piece of a split head dim) instead of
  per-thread copies, where the plan says so (``sagebuild.attention.plan``).
* Offsets: row indices are widened to 64 bits before they meet a stride, so views of buffers
  past 2³¹ elements (fused QKV of long videos) address correctly.

Which constexprs a call gets is decided by ``LaunchPlan.constexprs``; nothing here decides.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Optional

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_wait

from . import configs, launcher, layout
from .fp8 import to_fp8
from .layout import SeqView, key_rows_of, wgmma_key_order
from .quant import LOG2E, abs_bits, packed_v_base, packed_v_position, scale_and_inverse, seq_base, to_int8

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
def _accumulate_pv(
    acc,
    p,
    v,
    TWO_LEVEL: tl.constexpr,
    V_KEY_ORDER: tl.constexpr,
    CVT_ASM: tl.constexpr,
    FP8_MAX: tl.constexpr,
):
    """acc + P·V: a fresh MMA accumulator added in FP32 (TWO_LEVEL), or the MMA accumulating onto acc.
    V_KEY_ORDER: V's rows are in wgmma key order, so P's columns are put in it too. CVT_ASM: P
    becomes FP8 through the arch's packed conversion (``fp8.to_fp8``), else Triton's cast."""
    p = to_fp8(p, v.dtype, FP8_MAX, CVT_ASM, False)  # P ≤ FP8_MAX·(1 + exp2's error): no saturation
    if V_KEY_ORDER:
        p = wgmma_key_order(p)
    if TWO_LEVEL:
        acc += tl.dot(p, v)
    else:
        acc = tl.dot(p, v, acc)
    return acc


@triton.jit
def _apply_attn_mask(
    s, c, off, AM, am_base, start_n, offs_n, offs_m, row_ok, col_ok, stride_mm, stride_mn,
    MASKED: tl.constexpr, MODE: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    """The caller's mask on a tile of scores ``s`` (softmax logits s·c − off, per row c > 0):
    boolean (0 = -inf) or additive (a·log2e/c, so that s·c gains a·log2e). Rows past the sequence and
    keys past its end are never read."""
    ptrs = AM + (am_base + tl.cast(start_n, tl.int64) * stride_mn) + offs_n * stride_mn
    if ROWS:
        ptrs = ptrs[None, :] + offs_m.to(tl.int64)[:, None] * stride_mm
        ok = row_ok[:, None] & col_ok[None, :] if MASKED else row_ok[:, None]
        a = tl.load(ptrs, mask=ok, other=0)
    elif MASKED:
        a = tl.load(ptrs, mask=col_ok, other=0)[None, :]
    else:
        a = tl.load(ptrs)[None, :]
    if MODE == 1:
        s = tl.where(a != 0, s, float("-inf"))
    else:
        # Large finite values keep the exponent in float32's precision (at finfo.min its rounding
        # alone would be ±1e13): below -3e4 a value is -3e4, whose exp is 0 beside any attended
        # key; at -1e9 and below (finfo.min masks) the score is dropped too, as it vanishes in
        # SDPA's sum, so a row of nothing but such values averages V as SDPA's does. -inf stays.
        a = a.to(tl.float32)
        absorbed = (a <= -1e9) & (a != float("-inf"))
        a = tl.where(a == float("-inf"), a, tl.maximum(a, -3e4))
        s = tl.where(absorbed, ((off - 43281.0) / c)[:, None], s + a * (1.4426950408889634 / c)[:, None])
    return s


@triton.jit
def _key_extent(AM, am_base, n_k, stride_mn, MODE: tl.constexpr, SCAN: tl.constexpr):
    """A key mask's extent: (n, plain) with n = 1 + the last key not blocked (False, or additive
    ≤ -65504: fp16's finfo.min and below, where exp underflows to 0 in float32) and plain = keys
    [0, n) are all neutral (True, or +0.0). A plain mask is the sequence [0, n) and nothing else:
    the key loop stops at n and never reads the mask again (key padding at no cost)."""
    offs = tl.arange(0, SCAN)
    last = -1
    neutral = 0
    for start in range(0, n_k, SCAN):
        cols = start + offs
        ok = cols < n_k
        a = tl.load(AM + am_base + cols.to(tl.int64) * stride_mn, mask=ok, other=0)
        if MODE == 1:
            keep = ok & (a != 0)
            neut = keep
        else:
            a = a.to(tl.float32)
            keep = ok & (a > -65504.0)
            neut = ok & (a == 0.0)
        last = tl.maximum(last, tl.max(tl.where(keep, cols, -1)))
        neutral += tl.sum(neut.to(tl.int32))
    n = last + 1
    return n, (n > 0) & (neutral == n)


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
def _attn_fwd_kernel(
    QF,
    K,
    KS,
    V,
    VS,
    KM,
    Out,
    LSE,
    CUQ,
    CUK,
    AM,
    KD,
    VD,
    KD2,
    VD2,
    stride_qb,
    stride_qh,
    stride_qn,
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
    stride_mb,
    stride_mh,
    stride_mm,
    stride_mn,
    H,
    GROUP,
    N_Q,
    N_K,
    T_Q,
    T_K,
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
    RETURN_LSE: tl.constexpr,
    SMOOTH_K: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    V_PADDED: tl.constexpr,
    P_SHIFT: tl.constexpr,
    PV_DIRECT: tl.constexpr,
    SPLIT_D: tl.constexpr,
    USE_TMA: tl.constexpr,
    PDL: tl.constexpr,
    Q_FROM_MEMORY: tl.constexpr,
    WGMMA_WAIT: tl.constexpr,
    V_KEY_ORDER: tl.constexpr,
    ROW_SUM_PARTS: tl.constexpr,
    MASK_MODE: tl.constexpr,
    MASK_ROWS: tl.constexpr,
    ROW_UNIT: tl.constexpr,
    HEADS_FIRST: tl.constexpr,
    FP8_CVT_ASM: tl.constexpr,
    V_CHANNEL_MAJOR: tl.constexpr,
):
    if ROW_UNIT != 1:  # the 16-bit tensors' strides came divided by it (``layout.row_unit``)
        stride_qb, stride_qh, stride_qn = stride_qb * ROW_UNIT, stride_qh * ROW_UNIT, stride_qn * ROW_UNIT
        stride_ob, stride_oh, stride_on = stride_ob * ROW_UNIT, stride_oh * ROW_UNIT, stride_on * ROW_UNIT
        if not PV_FP8 and not V_CHANNEL_MAJOR:
            stride_vb, stride_vh, stride_vn = stride_vb * ROW_UNIT, stride_vh * ROW_UNIT, stride_vn * ROW_UNIT
    if HEADS_FIRST:  # grid (H, B, query blocks): every head's longest rows before any shorter ones
        h = tl.program_id(0)
        b = tl.program_id(1)
        pid_m = tl.num_programs(2) - 1 - tl.program_id(2)
    else:  # grid (query blocks, H, B): a head's blocks run side by side and share its K/V in L2
        pid_m = tl.program_id(0)
        if CAUSAL:  # the longest rows first: better tail balance across SMs
            pid_m = tl.num_programs(0) - 1 - pid_m
        h = tl.program_id(1)
        b = tl.program_id(2)
    pid_bh = b * H + h
    hk = h // GROUP
    q_base, n_q = seq_base(CUQ, b, N_Q, T_Q, stride_qb, stride_qn, IS_VARLEN)
    k_base, n_k = seq_base(CUK, b, N_K, T_K, stride_kb, stride_kn, IS_VARLEN)
    if PV_FP8:  # our channel-major FP8 V (``quant.packed_v_base``)
        v_base, _ = packed_v_base(CUK, b, N_K, T_K, stride_vb, stride_vn, IS_VARLEN)
    else:  # the caller's 16-bit V
        v_base, _ = seq_base(CUK, b, N_K, T_K, stride_vb, stride_vn, IS_VARLEN)
    o_base, _ = seq_base(CUQ, b, N_Q, T_Q, stride_ob, stride_on, IS_VARLEN)
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
        q_rows = QF + q_base + offs_m.to(tl.int64)[:, None] * stride_qn
        qf = tl.load(q_rows + offs_d[None, :], mask=row_ok[:, None] & d_ok[None, :], other=0.0)
        qf = qf.to(tl.float32)
        if SPLIT_D:
            qf2 = tl.load(q_rows + offs_d2[None, :], mask=row_ok[:, None] & d2_ok[None, :], other=0.0)
            qf2 = qf2.to(tl.float32)
        else:
            qf2 = tl.zeros([BLOCK_M, D2], dtype=tl.float32)
        # Each row's amax as ordered bits (``abs_bits``): a row holding inf or NaN stays out of its
        # block's amax and its output and LSE are NaN, as SDPA's row is (set after the key loop: a
        # NaN put into the row's scale here costs a layout conversion in every iteration on sm90).
        row_top = tl.max(abs_bits(qf), axis=1)
        if SPLIT_D:
            row_top = tl.maximum(row_top, tl.max(abs_bits(qf2), axis=1))
        row_bad = row_top >= 0x7F800000
        amax = tl.max(tl.reshape(tl.where(row_bad, 0, row_top), (BLOCK_M // Q_BLK, Q_BLK)), axis=1)
        step, inv = scale_and_inverse(amax.to(tl.float32, bitcast=True), 127.0)  # the contract of quant.py
        step_row = tl.reshape(tl.broadcast_to(step[:, None], (BLOCK_M // Q_BLK, Q_BLK)), (BLOCK_M,))
        inv_row = tl.reshape(tl.broadcast_to(inv[:, None], (BLOCK_M // Q_BLK, Q_BLK)), (BLOCK_M,))
        q = to_int8(qf * inv_row[:, None])
        q2 = to_int8(qf2 * inv_row[:, None]) if SPLIT_D else q
        qs = step_row * q_scale_mul
        if Q_FROM_MEMORY:
            # The INT8 tile goes through this program's own output rows (written only at the
            # end; 2·HEAD_DIM bytes each, ≥ D1 + D2: the caller checks) and comes back as a
            # loaded tile, which Triton keeps in shared memory for the loop's wgmma instead
            # of reloading registers every key tile (``LaunchPlan.q_from_memory``).
            out_bytes: tl.constexpr = Out.dtype.element_ty.primitive_bitwidth // 8
            scratch = Out.to(tl.pointer_type(tl.int8)) + out_bytes * (
                o_base + offs_m.to(tl.int64)[:, None] * stride_on
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
        acc = tl.zeros([BLOCK_M, D1], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_M, D2], dtype=tl.float32)
        if ROW_SUM_PARTS > 1:
            l_i = tl.zeros([BLOCK_M, ROW_SUM_PARTS], dtype=tl.float32)
        else:
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        ks_base = kv_bh * KS_NBLK
        k_row0, k_col0, v_row0, v_col0 = 0, 0, 0, 0
        if USE_TMA and IS_VARLEN:  # descriptors over packed tokens: K [T, H·Dp], FP8 V [H·Dp, positions]
            k_row0 = tl.minimum(tl.maximum(tl.load(CUK + b), 0), T_K)
            k_col0 = hk * BLOCK_D
            v_row0 = hk * BLOCK_D
            v_col0 = packed_v_position(CUK, b, T_K)
        elif USE_TMA:  # host-built descriptors over every head: K rows (b, h, n), FP8 V rows (b, h, d)
            k_row0 = (kv_bh * N_K).to(tl.int32)
            v_row0 = (kv_bh * BLOCK_D).to(tl.int32)
        am_base = b.to(tl.int64) * stride_mb + h.to(tl.int64) * stride_mh
        n_loop = n_k  # the keys the loop visits
        apply_mask = MASK_MODE != 0
        if MASK_MODE != 0 and not MASK_ROWS:  # key padding: stop at the last key, mask only holes
            n_eff, plain = _key_extent(AM, am_base, n_k, stride_mn, MASK_MODE, 1024)
            n_loop = tl.where(plain, n_eff, n_k)
            apply_mask = plain == 0
        # Key tiles [0, full) need no mask; [full, hi) are diagonal or ragged tiles.
        diag = n_k - n_q
        if CAUSAL:
            hi = tl.minimum(n_loop, start_m + BLOCK_M + diag)
            full = tl.maximum(tl.minimum(hi, start_m + diag + 1), 0) // BLOCK_N * BLOCK_N
            hi = tl.maximum(hi, 0)
        else:
            hi = n_loop
            full = n_loop // BLOCK_N * BLOCK_N
        # The unmasked tiles, then the masked ones (bounds and causality checked): one loop, unrolled
        # at compile time.
        # - MASK_MODE (the caller's ``attn_mask``, every tile): 1 boolean (nonzero attends), 2 additive
        #   (natural-log units, added to sm_scale·q·kᵀ); MASK_ROWS: it varies along query rows, else
        #   one [BLOCK_N] vector per tile serves every row (key padding).
        # - V_KEY_ORDER: FP8 V in wgmma key order (``layout.KEY_GROUP``), its rows zero-padded to whole
        #   groups: a ragged tile reads V rows up to the padded end, where positions past n_loop hold
        #   keys before it.
        # - WGMMA_WAIT (Hopper): the P·V wgmma is waited on inside its iteration, not across the loop
        #   edge, where ptxas serialises every wgmma.
        # - SPLIT_D: the head dim runs as two channel pieces, ``offs_d`` (q, acc) and ``offs_d2`` (q2,
        #   acc2), instead of one padded tile.
        offs_n = tl.arange(0, BLOCK_N)
        # FP8 P·V: each tile's product in a fresh accumulator added into FP32 ("fp32+fp32"), or
        # (PV_DIRECT, "fp32") accumulated by the MMA itself: no FP32 add per output element,
        # and one accumulator's registers fewer. FP16 P·V always accumulates in the MMA.
        two_level: tl.constexpr = PV_FP8 and not PV_DIRECT
        for masked in tl.static_range(2):
            for start_n in range(full if masked else 0, hi if masked else full, BLOCK_N):
                cols = start_n + offs_n
                col_ok = cols < n_loop
                v_ok = cols < key_rows_of(n_loop) if V_KEY_ORDER else col_ok
                # the tile's start in 64 bits (a scalar), its rows' offsets in 32: BLOCK_N·stride < 2³¹ holds
                # for our K and FP8 V, and the API copies a 16-bit V whose token stride would break it
                k_rows = K + (k_base + tl.cast(start_n, tl.int64) * stride_kn) + offs_n[:, None] * stride_kn
                if USE_TMA:  # the copy engine fetches the tile (rows past n_loop: masked scores)
                    k = KD.load([k_row0 + start_n, k_col0])
                else:
                    k = _load_rows(k_rows + offs_d[None, :], col_ok, d_ok, 0, masked == 1, False)
                # INT32 scores to FP32 without the conversion unit (I2F issues at 16/clk/SM on sm80-90,
                # like the exp): adding 1.5·2²³'s bit pattern makes the bits read as the float
                # MAGIC_F + s exactly (|s| ≤ 127²·256 < 2²²); Triton folds the add into the MMA's
                # accumulator. The offset is removed per row or per column, never per score.
                si = tl.dot(q, tl.trans(k)) + MAGIC_I
                if SPLIT_D:  # the second channel piece accumulates onto the first
                    if USE_TMA:
                        k2 = KD2.load([k_row0 + start_n, k_col0 + BLOCK_D // 2])
                    else:
                        k2 = _load_rows(k_rows + offs_d2[None, :], col_ok, d2_ok, 0, masked == 1, False)
                    si = tl.dot(q2, tl.trans(k2), si, out_dtype=tl.int32)
                s = si.to(tl.float32, bitcast=True)
                # Scores are s·c with c = q_scale·k_scale > 0, so max(s·c) = max(s)·c and the softmax
                # needs one FMA per score (s·c − m) instead of two multiplies and a subtraction.
                if KS_BLK % BLOCK_N == 0:  # the tile lies in one K block: one K scale for the tile
                    c = qs * tl.load(KS + ks_base + start_n // KS_BLK)
                    off = c * MAGIC_F
                else:
                    if masked:
                        ks = tl.load(KS + ks_base + cols // KS_BLK, mask=col_ok, other=0.0)
                    else:
                        ks = tl.load(KS + ks_base + cols // KS_BLK)
                    s = s * ks[None, :] - (ks * MAGIC_F)[None, :]  # one FMA per score
                    c = qs
                    off = tl.zeros_like(qs)
                if MASK_MODE != 0 and apply_mask:
                    s = _apply_attn_mask(
                        s, c, off, AM, am_base, start_n, offs_n, offs_m, row_ok, col_ok, stride_mm, stride_mn,
                        masked == 1, MASK_MODE, MASK_ROWS,
                    )  # fmt: skip
                if masked:
                    ok = col_ok[None, :]
                    if CAUSAL:
                        ok = ok & (cols[None, :] <= offs_m[:, None] + diag)
                    s = tl.where(ok, s, float("-inf"))
                if masked or MASK_MODE != 0:  # a row may have no key yet
                    m_new = tl.maximum(m_i, tl.max(s, axis=1) * c - off)
                    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
                else:
                    if KS_BLK % BLOCK_N == 0:
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
                if ROW_SUM_PARTS > 1:  # [rows, ROW_SUM_PARTS] partial sums: no shuffles per tile
                    parts = tl.reshape(p, (p.shape[0], BLOCK_N // ROW_SUM_PARTS, ROW_SUM_PARTS))
                    l_i = l_i * alpha[:, None] + tl.sum(parts, axis=1)
                else:
                    l_i = l_i * alpha + tl.sum(p, axis=1)
                v_rows = V + (v_base + tl.cast(start_n, tl.int64) * stride_vn) + offs_n[:, None] * stride_vn
                if USE_TMA:  # FP8 V is channel-major: a [D, BLOCK_N] box, used transposed
                    v = tl.trans(VD.load([v_row0, v_col0 + start_n]))
                else:
                    v = _load_rows(
                        v_rows + offs_d.to(tl.int64)[None, :] * stride_vd,
                        v_ok,
                        d_ok,
                        0.0,
                        masked == 1,
                        V_PADDED,
                    )
                acc = _accumulate_pv(acc * alpha[:, None], p, v, two_level, V_KEY_ORDER, FP8_CVT_ASM, FP8_MAX)
                if SPLIT_D:
                    if USE_TMA:
                        v2 = tl.trans(VD2.load([v_row0 + BLOCK_D // 2, v_col0 + start_n]))
                    else:
                        v2 = _load_rows(
                            v_rows + offs_d2.to(tl.int64)[None, :] * stride_vd,
                            v_ok,
                            d2_ok,
                            0.0,
                            masked == 1,
                            V_PADDED,
                        )
                    acc2 = _accumulate_pv(
                        acc2 * alpha[:, None], p, v2, two_level, V_KEY_ORDER, FP8_CVT_ASM, FP8_MAX
                    )
                if WGMMA_WAIT:
                    _wgmma_wait(start_n)
                m_i = m_new

        if ROW_SUM_PARTS > 1:
            l_i = tl.sum(l_i, axis=1)
        inv_l = tl.where(l_i == 0.0, 0.0, 1.0 / l_i)  # a row without keys: zeros; a NaN sum stays NaN
        inv_l = tl.where(row_bad, float("nan"), inv_l)
        o_rows = Out + o_base + offs_m.to(tl.int64)[:, None] * stride_on
        if PV_FP8:
            vs = tl.load(VS + kv_bh * BLOCK_D + offs_d)
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
            lse = tl.where(row_bad, float("nan"), tl.where(l_i == 0.0, float("-inf"), lse))
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
    # True: FP8 V's tokens are in wgmma key order (``layout.KEY_GROUP``, ``quant.quant_kv``)
    v_key_order: bool = False


def tma_eligible(kv: QuantizedKV, head_dim_pad: int) -> bool:
    """Whether a launch can read these K/V buffers by tensor descriptors: as
    ``layout.empty_like_view`` lays them out, each contiguous, V's rows a multiple of 16 bytes
    (one descriptor spans every head: ``_kv_descriptors``). Dense: K [B, H, N, Dp], FP8 V
    [B, H, Dp, N]; packed: K [T, H, Dp], FP8 V [H, Dp, positions] (``layout.packed_v_tokens``,
    zeros between sequences). The plan decides TMA from the shapes; this checks the buffers."""
    k, v = kv.k, kv.v
    if k.head_dim != head_dim_pad or v.head_dim != head_dim_pad or v.stride_d % 16:
        return False
    if k.is_varlen:
        rows = v.t.shape[0]
        return k.t.stride() == (k.heads * head_dim_pad, head_dim_pad, 1) and v.t.stride() == (
            1, head_dim_pad * rows, rows
        )  # fmt: skip
    dn = head_dim_pad * k.max_len  # one head's elements
    vrows = layout.v_row_stride(k.max_len, kv.v_key_order)  # V's row stride (16-byte aligned)
    return (k.stride_n, k.stride_h, k.stride_b) == (head_dim_pad, dn, k.heads * dn) and (
        v.stride_n, v.stride_d, v.stride_h, v.stride_b
    ) == (1, vrows, head_dim_pad * vrows, v.heads * head_dim_pad * vrows)  # fmt: skip


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
    writes a descriptor to global scratch and fences it before its first load. A K tile past a
    sequence's last key reads the next head's or sequence's rows (those scores are masked);
    dense V's key axis ends at its key rows (``layout.key_rows``), so its tiles there arrive as
    zeros, and packed V holds zeros between sequences (``quant._zero_packed_gap``)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    k_box, v_box, k2_box, v2_box = kv_desc_boxes(head_dim_pad, block_n, split)
    n, hd = kv.k.max_len, kv.k.heads * head_dim_pad
    if kv.k.is_varlen:  # K rows are tokens (a head's channels at hk·Dp), V rows channels of every head
        k_shape, k_strides = [kv.k.t.shape[0], hd], [hd, 1]
        v_shape = [hd, kv.v.t.shape[0]]
    else:  # V's descriptor ends at its key rows (reads past them arrive as zeros)
        k_shape, k_strides = [kv.k.batch * kv.k.heads * n, head_dim_pad], [head_dim_pad, 1]
        v_shape = [kv.v.batch * hd, layout.key_rows(n, kv.v_key_order)]
    v_strides = [kv.v.stride_d, 1]  # rows v.stride_d apart
    k_desc = functools.partial(TensorDescriptor, kv.k.t, k_shape, k_strides)
    v_desc = functools.partial(TensorDescriptor, kv.v.t, v_shape, v_strides)
    kd, vd = k_desc(k_box), v_desc(v_box)
    if not split:  # the same boxes: the same descriptors
        return kd, vd, kd, vd
    return kd, vd, k_desc(k2_box), v_desc(v2_box)


def attention_forward(
    q: SeqView,
    kv: QuantizedKV,
    out: SeqView,
    plan: Any,
    *,
    lse: Optional[torch.Tensor] = None,
    mask: Optional[torch.Tensor] = None,
    launch_key: Optional[tuple] = None,
) -> None:
    """Launch the attention kernel as ``plan`` (``sagebuild.attention.plan.LaunchPlan``) says;
    writes ``out`` (and ``lse`` [B, H, N_q] float32, when the plan returns it). ``mask``: the
    caller's attention mask as a [B, H, N_q, N_k] view (broadcast dims stride 0), uint8 (nonzero
    attends) or floating (additive), exactly when the plan has one. ``launch_key``: see
    ``launcher.launch`` (the API passes its per-signature plan key, which fixes the plan)."""
    cfg = plan.config
    if kv.k_blk != plan.k_blk:
        raise ValueError(f"K was quantized in blocks of {kv.k_blk} tokens; the plan reads {plan.k_blk}")
    if plan.return_lse != (lse is not None):
        raise ValueError("pass lse exactly when the plan returns it")
    if (plan.mask != "none") != (mask is not None):
        raise ValueError("pass mask exactly when the plan has one")
    group = q.heads // kv.k.heads
    m_blocks = launcher.cdiv(q.max_len, cfg.block_m)
    kv_bytes = kv.k.t.numel() * kv.k.t.element_size() + kv.v.t.numel() * kv.v.t.element_size()
    heads_first = m_blocks <= launcher.GRID_YZ_MAX and configs.heads_first(plan.family, plan.causal, kv_bytes)
    grid = (q.heads, q.batch, m_blocks) if heads_first else (m_blocks, q.heads, q.batch)
    dummy = kv.k_scale  # never read where it stands in

    # The 16-bit tensors' strides go in the unit that proves their rows' alignment (``layout.row_unit``):
    # the launch key fixes the strides, so the unit is decided with the constexprs, once per key.
    v_in_unit = not (plan.fp8 or plan.v_channel_major)  # V's keys contiguous: its strides stay as they are

    def build() -> dict[str, Any]:
        wide = (q, out, *((kv.v,) if v_in_unit else ()))
        return {**plan.constexprs(), "ROW_UNIT": layout.row_unit(wide), "HEADS_FIRST": heads_first}

    consts = launcher.constexprs(_attn_fwd_kernel, launch_key, build)
    unit = consts["ROW_UNIT"]

    if plan.tma:
        if not tma_eligible(kv, plan.head_dim_pad):  # the descriptors span heads as laid out there
            raise ValueError("plan.tma needs K/V as quant.quant_kv lays them out (tma_eligible)")
        descs = _kv_descriptors(kv, plan.head_dim_pad, cfg.block_n, plan.split_head_dim)
    else:  # unused by the kernel
        descs = (kv.k.t, kv.v.t, kv.k.t, kv.v.t)
    launcher.launch(
        _attn_fwd_kernel,
        grid,
        (
            q.t,
            kv.k.t,
            kv.k_scale,
            kv.v.t,
            kv.v_scale if kv.v_scale is not None else dummy,
            kv.km if kv.km is not None else dummy,
            out.t,
            lse if lse is not None else dummy,
            q.cu,
            kv.k.cu,
            mask if mask is not None else dummy,
            *descs,
            *layout.in_unit(q, unit),
            *kv.k.strides(),
            *layout.in_unit(kv.v, unit if v_in_unit else 1),
            kv.v.stride_d,
            *layout.in_unit(out, unit),
            *(mask.stride() if mask is not None else (0, 0, 0, 0)),
            q.heads,
            group,
            q.max_len,
            kv.k.max_len,
            q.total,
            kv.k.total,
            kv.k_scale.shape[-1],
            plan.sm_scale * LOG2E,
            plan.sm_scale,
        ),
        consts,
        key=launch_key,
        **cfg.launch_options(),
        **({"launch_pdl": True} if plan.pdl else {}),
    )


__all__ = [
    "QuantizedKV",
    "attention_forward",
    "kv_desc_boxes",
    "tma_eligible",
]
