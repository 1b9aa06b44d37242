"""Triton quantization kernels: K's mean and V's channel scales, INT8 blocks, FP8 V.

The layout is a contract shared with the C++ extension (``sagebuild.ext``):

* INT8 per block: ``step = max(amax(|y|), 1e-8) / 127`` for each ``blk`` tokens of one head,
  ``int8 = round_half_away_from_zero(y * (1 / step))`` clamped to ±127, stored scale
  ``step * scale_mul``; for K, ``y = k - mean_over_tokens(k)`` (per KV head), for Q ``y = q`` and
  ``scale_mul`` folds in ``sm_scale * log2(e)``. Output [B, H, N, Dp] int8 (Dp = padded head
  dim, zeros in the pad), scales float32 [B, H, cdiv(N, blk)].
* FP8 V per channel: ``v_scale = max(amax over tokens of |v|, 1e-8) / FP8_MAX`` float32
  [B, H, Dp], ``v_fp8 = saturate(v * (1 / v_scale))`` rounded to nearest even.
* Non-finite inputs: a block (Q row, K block, V channel) holding inf or NaN gets a NaN scale, so
  the attention's outputs it enters are NaN (as SDPA's are), never a number quantized from it;
  K's mean skips a channel whose sum is not finite (0 there).

The scales and their reciprocals are IEEE quotients (``tl.math.div_rn``: Triton's ``/`` on
float32 is ``div.full.f32`` on NVIDIA, within 2 ulp); each element costs one rounded product,
never a division (an IEEE division per element makes the quantization launch issue-bound), and
the product is rounded on its own before the INT8 rounding (``to_int8``), as torch and the
extension compute it. Q is quantized inside the attention kernel (no launch at all).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents

from . import launcher
from .fp8 import to_fp8
from .layout import KEY_GROUP, SeqView, empty_like_view, in_unit, key_rows_of, row_unit, wgmma_key_order

# Up to this many keys (packed: of the longest sequence) × padded head dim, K's mean and V's amax
# are computed inside the K/V quantization launch (saving the statistics launches); each program
# re-reads its whole head from L2, so the traffic grows with N²·D and longer heads use kv_stats
# (already faster at 1024 keys × 128).
INLINE_STATS_MAX_ELEMENTS = 1024 * 64
# The in-launch statistics' loads (``_column_stats``), INLINE_STAGES in flight: (rows per load,
# the launch's warps) by (padded head dim, whether V is read too). The sweeps' fastest within
# INLINE_SMEM_BYTES of loads in shared memory; 64 rows at head dim 128 left too few registers
# beside the two FP32 accumulators and the block being quantized.
INLINE_LAUNCH = {
    (64, False): (256, 8),
    (64, True): (128, 4),
    (128, False): (32, 4),
    (128, True): (32, 4),
    (256, False): (32, 4),
    (256, True): (32, 4),
}
INLINE_STAGES = 3
# the pipelined loads' buffers (INLINE_STAGES - 1 of rows × head dim × 2 B per tensor read) stay
# within what every supported NVIDIA GPU gives a CTA (sm86/sm89: 99 KB)
INLINE_SMEM_BYTES = 64 * 1024
# Longer sequences: one launch of column statistics over parts of the tokens (K sums, V
# amaxes), PART_CHUNK_ELEMS elements (chunk_rows: 32 rows at head dim 128) per load and
# PART_STAGES loads in flight (Triton's pipeliner: asynchronous copies into shared memory,
# 2 B · 2 tensors · PART_CHUNK_ELEMS · PART_STAGES = 48 KB per program at any head dim, inside
# AMD's 64 KB of LDS), at least PART_MIN_ROWS tokens and at most PART_WAVES programs per SM
# (``part_rows``); a small launch combines each head's parts. Three stages keep loads in flight
# (with one, each load was consumed before the next was issued: ~2 TB/s).
PART_CHUNK_ELEMS = 4096
PART_MIN_ROWS = 256
PART_WAVES = 4
PART_WARPS = 4
PART_STAGES = 3
LOG2E = 1.4426950408889634
assert math.isclose(LOG2E, math.log2(math.e))


@triton.jit
def scale_and_inverse(amax, top):
    """The contract's scale max(amax, 1e-8) / top (127 for INT8, FP8_MAX for V; the floor makes an
    all-zero block quantize to zeros, not NaN) and its reciprocal, both IEEE quotients: one division
    per block or channel, none per element. An amax that is inf or NaN (``abs_max``: the block
    holds one) gives a NaN scale, so the NaN reaches every score or output the block enters
    instead of being quantized into a number."""
    s = tl.math.div_rn(tl.maximum(amax, 1e-8), top)
    s = tl.where(amax < float("inf"), s, float("nan"))
    return s, tl.math.div_rn(tl.full(s.shape, 1.0, tl.float32), s)


@triton.jit
def abs_bits(x):
    """|x| of float32 values as int32 bits: ordered as the magnitudes are, with inf above every
    finite value and NaN above inf, so an integer max is an amax that keeps NaN (a float max
    drops it: maxnum on GPUs); ``.to(tl.float32, bitcast=True)`` reads the amax back."""
    return x.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def column_mean(ksum, n):
    """K's mean from its column sums over n tokens, an IEEE quotient (n may be a constexpr 1). A
    channel whose sum is not finite (K holds inf or NaN there) gets 0: the smoothing is any vector
    subtracted from every key (softmax ignores it), and a NaN mean would spread one bad value over
    the whole head; the bad value itself still reaches its own block (``scale_and_inverse``)."""
    m = tl.math.div_rn(ksum, tl.zeros(ksum.shape, dtype=tl.float32) + n)
    return tl.where(tl.abs(m) < float("inf"), m, 0.0)


@triton.jit
def to_int8(r):
    """The contract's INT8 code of the product r = y · (1/step): half away from zero, ±127.

    |r| is taken by masking the sign bit, an integer operation, so the compiler cannot fold the
    product into an FMA with the rounding add (an FMA would skip r's own rounding and shift a
    few codes off the contract). |r| + 0.49999997 (the float just below one half) truncated is
    the exact half-away rounding of every float32 below 2²³ (checked exhaustively below 128;
    adding 0.5 itself would round 0.49999997 up to 1); the sign goes back by bits, and the
    float→int conversion truncates.
    """
    bits = r.to(tl.int32, bitcast=True)
    a = (bits & 0x7FFFFFFF).to(tl.float32, bitcast=True)
    t = tl.minimum(a + 0.49999997, 127.0)
    return ((t.to(tl.int32, bitcast=True) | (bits & -0x80000000)).to(tl.float32, bitcast=True)).to(tl.int8)


@triton.jit
def seq_base(CU, b, N, T, stride_b, stride_n, IS_VARLEN: tl.constexpr):
    """(offset of sequence b's first token, its length) for dense or packed inputs.

    Packed: the cumulative lengths are read on the device, never checked on the host (that
    would synchronise every call), so they are clamped here: a sequence lies within the T
    packed tokens and has at most N of them, whatever the caller passed."""
    if IS_VARLEN:
        start = tl.minimum(tl.maximum(tl.load(CU + b), 0), T)
        end = tl.minimum(tl.maximum(tl.load(CU + b + 1), start), T)
        n = tl.minimum(end - start, N)
        base = start.to(tl.int64) * stride_n
    else:
        n = N
        base = b.to(tl.int64) * stride_b
    return base, n


@triton.jit
def packed_v_position(CU, b, T):
    """Where packed sequence b begins in channel-major FP8 V: its first token (clamped as in
    ``seq_base``) rounded up to 16, plus 16·b (``layout.packed_v_start`` on the host)."""
    start = tl.minimum(tl.maximum(tl.load(CU + b), 0), T)
    return (start + 15) // 16 * 16 + 16 * b


@triton.jit
def packed_v_base(CU, b, N, T, stride_b, stride_n, IS_VARLEN: tl.constexpr):
    """``seq_base`` for channel-major FP8 V: a packed sequence starts at ``packed_v_position``, so
    its rows start 16-byte aligned, provably (vectorised, asynchronous copies)."""
    base, n = seq_base(CU, b, N, T, stride_b, stride_n, IS_VARLEN)
    if IS_VARLEN:
        base = packed_v_position(CU, b, T).to(tl.int64) * stride_n
    return base, n


@triton.jit
def _column_stats(
    K, V, kbase, vbase, n, stride_kn, stride_vn, offs_d,
    HEAD_DIM: tl.constexpr, CHUNK: tl.constexpr, WANT_K: tl.constexpr, WANT_V: tl.constexpr,
    STAGES: tl.constexpr,
):  # fmt: skip
    """(sum of K, amax of |V|) over tokens [0, n) from kbase/vbase, for the channels offs_d.

    Element-wise accumulators over CHUNK-row loads, reduced across rows once at the end (a
    reduction per load puts a CTA barrier in every iteration); STAGES > 1 keeps that many loads
    in flight (Triton's pipeliner: asynchronous copies into shared memory)."""
    offs_c = tl.arange(0, CHUNK)
    ksum = tl.zeros([CHUNK, offs_d.shape[0]], dtype=tl.float32)
    vmax = tl.zeros([CHUNK, offs_d.shape[0]], dtype=tl.int32)  # ``abs_bits``: NaN is kept
    for start in tl.range(0, n, CHUNK, num_stages=STAGES):
        rows = start + offs_c
        mask = (rows < n)[:, None] & (offs_d < HEAD_DIM)[None, :]
        if WANT_K:
            k = tl.load(
                K + kbase + rows.to(tl.int64)[:, None] * stride_kn + offs_d[None, :], mask=mask, other=0.0
            )
            ksum += k.to(tl.float32)
        if WANT_V:
            v = tl.load(
                V + vbase + rows.to(tl.int64)[:, None] * stride_vn + offs_d[None, :], mask=mask, other=0.0
            )
            vmax = tl.maximum(vmax, abs_bits(v.to(tl.float32)))
    return tl.sum(ksum, axis=0), tl.max(vmax, axis=0).to(tl.float32, bitcast=True)


@triton.jit
def _kv_partials_kernel(
    K, V, KP, VP, CU,
    stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
    H, N, T, PART_ROWS, NPART,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, CHUNK: tl.constexpr,
    SMOOTH_K: tl.constexpr, V_FP8: tl.constexpr, IS_VARLEN: tl.constexpr, PART_STAGES: tl.constexpr,
    ROW_UNIT: tl.constexpr,
):  # fmt: skip
    """One program per (PART_ROWS tokens, sequence·KV head) of dense or packed K/V: the part's
    column sums of K and column amaxes of |V| (a part past its sequence's end sums nothing).
    ROW_UNIT: K's and V's strides came divided by it (``layout.row_unit``)."""
    stride_kb, stride_kh, stride_kn = stride_kb * ROW_UNIT, stride_kh * ROW_UNIT, stride_kn * ROW_UNIT
    stride_vb, stride_vh, stride_vn = stride_vb * ROW_UNIT, stride_vh * ROW_UNIT, stride_vn * ROW_UNIT
    pid_s = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    pid_bh = b * H + h
    start = pid_s * PART_ROWS
    kbase, n_seq = seq_base(CU, b, N, T, stride_kb, stride_kn, IS_VARLEN)
    vbase, _ = seq_base(CU, b, N, T, stride_vb, stride_vn, IS_VARLEN)
    kbase += h.to(tl.int64) * stride_kh + start.to(tl.int64) * stride_kn
    vbase += h.to(tl.int64) * stride_vh + start.to(tl.int64) * stride_vn
    offs_d = tl.arange(0, BLOCK_D)
    n = tl.minimum(PART_ROWS, n_seq - start)
    ksum, vmax = _column_stats(
        K, V, kbase, vbase, n, stride_kn, stride_vn, offs_d, HEAD_DIM, CHUNK, SMOOTH_K, V_FP8, PART_STAGES
    )
    out = (pid_bh.to(tl.int64) * NPART + pid_s) * BLOCK_D + offs_d
    if SMOOTH_K:
        tl.store(KP + out, ksum)
    if V_FP8:
        tl.store(VP + out, vmax)


@triton.jit
def _kv_finalize_kernel(
    KP, VP, KM, VA, CU, H, N, T, NPART,
    BLOCK_D: tl.constexpr, SMOOTH_K: tl.constexpr, V_FP8: tl.constexpr, IS_VARLEN: tl.constexpr,
):  # fmt: skip
    """Per sequence·KV head: K's mean and V's amax from the NPART parts, in part order
    (deterministic, unlike float atomics)."""
    pid_bh = tl.program_id(0)
    offs_d = tl.arange(0, BLOCK_D)
    base = pid_bh.to(tl.int64) * NPART * BLOCK_D + offs_d
    ksum = tl.zeros([BLOCK_D], dtype=tl.float32)
    vmax = tl.zeros([BLOCK_D], dtype=tl.int32)  # the parts' amaxes as ``abs_bits``: NaN is kept
    for s in range(NPART):
        if SMOOTH_K:
            ksum += tl.load(KP + base + s * BLOCK_D)
        if V_FP8:
            vmax = tl.maximum(vmax, tl.load(VP + base + s * BLOCK_D).to(tl.int32, bitcast=True))
    out = pid_bh.to(tl.int64) * BLOCK_D + offs_d
    if SMOOTH_K:
        _, n = seq_base(CU, pid_bh // H, N, T, 0, 0, IS_VARLEN)
        tl.store(KM + out, column_mean(ksum, tl.maximum(n, 1)))
    if V_FP8:
        tl.store(VA + out, vmax.to(tl.float32, bitcast=True))


@triton.jit
def _quant_blocks_kernel(
    X,
    KM,
    XQ,
    XS,
    V,
    VA,
    VSO,
    VQ,
    CU,
    stride_xb,
    stride_xh,
    stride_xn,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_wb,
    stride_wh,
    stride_wn,
    stride_wd,
    H,
    N,
    T,
    NBLK,
    scale_mul,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLK: tl.constexpr,
    HAS_MEAN: tl.constexpr,
    V_FP8: tl.constexpr,
    FP8_MAX: tl.constexpr,
    FP8_CVT_ASM: tl.constexpr,
    IS_VARLEN: tl.constexpr,
    INLINE_STATS: tl.constexpr,
    STATS_BLK: tl.constexpr,
    STATS_STAGES: tl.constexpr,
    PDL_TRIGGER: tl.constexpr,
    V_KEY_ORDER: tl.constexpr,
    ROW_UNIT: tl.constexpr,
):
    """One program per (BLK tokens, sequence·head): INT8 block of X (minus mean) and FP8 block of V.

    ROW_UNIT: X's and V's (the inputs') strides came divided by it (``layout.row_unit``).

    FP8_CVT_ASM: V becomes FP8 through the arch's packed conversion (``fp8.to_fp8``) where Triton
    would cast in software (RDNA4), after the same clamp, so the codes are Triton's.

    V_KEY_ORDER (dense): V's tokens stored in wgmma key order (``layout.wgmma_key_order`` on the
    block's rows: a register permutation, so the stores stay coalesced), the rows up to the next
    multiple of ``layout.KEY_GROUP`` written as zeros.

    PDL_TRIGGER: every program lets the next launch (the attention kernel, launched as a
    programmatic dependent) start once all of them have started; it waits for this grid's
    results before reading them (``attn_fwd``'s PDL).

    INLINE_STATS (short sequences, dense or packed): every program computes its head's K mean and
    V amax itself (the head's other blocks are re-read from L2) instead of reading them from
    KM/VA, and the first block's program writes the mean to KM: no reduction launches at all.
    """
    stride_xb, stride_xh, stride_xn = stride_xb * ROW_UNIT, stride_xh * ROW_UNIT, stride_xn * ROW_UNIT
    stride_vb, stride_vh, stride_vn = stride_vb * ROW_UNIT, stride_vh * ROW_UNIT, stride_vn * ROW_UNIT
    if PDL_TRIGGER:
        gdc_launch_dependents()
    pid_n = tl.program_id(0)
    h = tl.program_id(1)
    b = tl.program_id(2)
    pid_bh = b * H + h
    xbase, n = seq_base(CU, b, N, T, stride_xb, stride_xn, IS_VARLEN)
    qbase, _ = seq_base(CU, b, N, T, stride_qb, stride_qn, IS_VARLEN)
    xbase += h.to(tl.int64) * stride_xh
    qbase += h.to(tl.int64) * stride_qh
    rows = pid_n * BLK + tl.arange(0, BLK)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = rows < n
    mask = row_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    x = tl.load(
        X + xbase + rows.to(tl.int64)[:, None] * stride_xn + offs_d[None, :], mask=mask, other=0.0
    ).to(tl.float32)
    vbase, _ = seq_base(CU, b, N, T, stride_vb, stride_vn, IS_VARLEN)
    vbase += h.to(tl.int64) * stride_vh
    if INLINE_STATS:
        ksum, vmax = _column_stats(
            X, V, xbase, vbase, n, stride_xn, stride_vn, offs_d,
            HEAD_DIM, STATS_BLK, HAS_MEAN, V_FP8, STATS_STAGES,
        )  # fmt: skip
    if HAS_MEAN:
        if INLINE_STATS:
            km = column_mean(ksum, tl.maximum(n, 1))  # an empty packed sequence: zeros
            if pid_n == 0:
                tl.store(KM + pid_bh.to(tl.int64) * BLOCK_D + offs_d, km)
        else:
            km = tl.load(KM + pid_bh.to(tl.int64) * BLOCK_D + offs_d)
        x = tl.where(mask, x - km[None, :], 0.0)
    amax = tl.max(tl.max(abs_bits(x), axis=1), axis=0).to(tl.float32, bitcast=True)  # NaN kept
    step, inv = scale_and_inverse(amax, 127.0)
    xq = to_int8(x * inv)
    tl.store(XQ + qbase + rows.to(tl.int64)[:, None] * stride_qn + offs_d[None, :], xq, mask=row_ok[:, None])
    tl.store(XS + pid_bh.to(tl.int64) * NBLK + pid_n, step * scale_mul, mask=pid_n * BLK < n)
    if V_FP8:
        wbase, _ = packed_v_base(CU, b, N, T, stride_wb, stride_wn, IS_VARLEN)
        wbase += h.to(tl.int64) * stride_wh
        v = tl.load(
            V + vbase + rows.to(tl.int64)[:, None] * stride_vn + offs_d[None, :], mask=mask, other=0.0
        )
        if INLINE_STATS:  # noqa: SIM108 (vmax exists only then: keep the branches)
            va = vmax
        else:
            va = tl.load(VA + pid_bh.to(tl.int64) * BLOCK_D + offs_d)
        vs, vinv = scale_and_inverse(va, FP8_MAX)
        if pid_n == 0:
            tl.store(VSO + pid_bh.to(tl.int64) * BLOCK_D + offs_d, vs)
        vq = v.to(tl.float32) * vinv[None, :]
        vq = tl.minimum(tl.maximum(vq, -FP8_MAX), FP8_MAX)
        if V_KEY_ORDER:  # row k of the block ← its key σ(k); rows past n (zeros) fill the last group
            vq = tl.trans(wgmma_key_order(tl.trans(vq)))
            w_ok = rows < key_rows_of(n)
        else:  # rows past n up to 16 (zeros): the row stride and packed starts leave room, and a
            # bound the compiler knows to be a multiple of 16 keeps the byte stores 16-wide
            w_ok = rows < (n + 15) // 16 * 16
        tl.store(
            VQ + wbase + rows.to(tl.int64)[:, None] * stride_wn + offs_d.to(tl.int64)[None, :] * stride_wd,
            to_fp8(vq, VQ.dtype.element_ty, FP8_MAX, FP8_CVT_ASM, False),  # clamped above
            mask=w_ok[:, None],
        )
        if IS_VARLEN and pid_n == 0:
            _zero_packed_gap(VQ, CU, b, n, h, T, stride_wh, stride_wn, stride_wd, offs_d, BLK)


@triton.jit
def _zero_packed_gap(VQ, CU, b, n, h, T, stride_wh, stride_wn, stride_wd, offs_d, BLK: tl.constexpr):
    """Zeros in packed FP8 V from sequence b's written rows (n rounded up to 16) to the next
    sequence's position, or after the last sequence to the buffer's end (``stride_wd``: each
    channel row's positions, ``layout.packed_v_tokens``): a key tile read past a sequence's end
    (a tensor descriptor's box) then meets finite values only, whatever the buffer held."""
    end = tl.minimum(tl.maximum(tl.load(CU + b + 1), 0), T)
    pos = packed_v_position(CU, b, T)
    gap0 = pos + (n + 15) // 16 * 16
    gap1 = tl.where(b == tl.num_programs(2) - 1, stride_wd, (end + 15) // 16 * 16 + 16 * (b + 1))
    offs = tl.arange(0, BLK)
    zero = tl.zeros([BLK, offs_d.shape[0]], dtype=VQ.dtype.element_ty)
    head = VQ + h.to(tl.int64) * stride_wh + offs_d.to(tl.int64)[None, :] * stride_wd
    for p in range(gap0, gap1, BLK):
        rows = p + offs
        tl.store(head + rows.to(tl.int64)[:, None] * stride_wn, zero, mask=(rows < gap1)[:, None])


def fp8_max(dtype: torch.dtype) -> float:
    """Largest finite value of an fp8 dtype (448 for e4m3fn, 240 for the fnuz variant)."""
    return float(torch.finfo(dtype).max)


@functools.cache
def _sm_count(index: int) -> int:
    """A GPU's SM count, read once per process (``part_rows`` is on every call's host path)."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def inline_launch(head_dim_pad: int, reads_v: bool) -> tuple[int, int]:
    """(rows per load, warps) of the quantization launch's in-launch statistics."""
    return INLINE_LAUNCH.get((head_dim_pad, reads_v), (16, 4))


def chunk_rows(head_dim_pad: int) -> int:
    """Rows per load of the statistics launch: PART_CHUNK_ELEMS elements, at least 16 rows."""
    return max(16, PART_CHUNK_ELEMS // head_dim_pad)


def part_rows(n: int, heads: int, device: torch.device, head_dim_pad: int) -> int:
    """Tokens per statistics part of K/V (packed: of the longest sequence): at most PART_WAVES
    programs per SM (about that many), each at least PART_MIN_ROWS tokens, a multiple of
    ``chunk_rows``."""
    if device.type == "cuda":
        sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    else:
        sms = 4  # Triton's CPU interpreter (tests): a few parts
    # rounded down: one full wave (PART_WAVES programs per SM fit), not a few programs more that
    # run as a second wave on their own
    count = max(1, min(launcher.cdiv(n, PART_MIN_ROWS), PART_WAVES * sms // heads))
    chunk = chunk_rows(head_dim_pad)
    return launcher.cdiv(launcher.cdiv(n, count), chunk) * chunk


def kv_stats(
    k: SeqView,
    v: Optional[SeqView],
    head_dim_pad: int,
    smooth_k: bool,
    fp8_dtype: Optional[torch.dtype],
    launch_key: Optional[tuple] = None,
    row_unit: int = 1,
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(km float32 [B, Hkv, Dp] or None, amax of |V| per channel float32 [B, Hkv, Dp] or None
    when there is no FP8 dtype), per sequence for packed inputs: column statistics per part of
    the tokens (K and V read once, side by side, about PART_WAVES programs per SM), then one small
    launch combining each head's parts. Packed sequences are parted by the longest one."""
    if fp8_dtype is None:  # V's amax serves only FP8 V
        v = None
    if not smooth_k and v is None:
        return None, None
    rows = part_rows(k.max_len, k.batch * k.heads, k.t.device, head_dim_pad)
    count = launcher.cdiv(k.max_len, rows)
    dev = k.t.device
    parts = torch.empty((2 if smooth_k and v is not None else 1, k.batch * k.heads, count, head_dim_pad),
                        dtype=torch.float32, device=dev)  # fmt: skip
    kp, vp = parts[0], parts[-1]
    stats = torch.empty((2, k.batch, k.heads, head_dim_pad), dtype=torch.float32, device=dev)
    vv = v if v is not None else k
    cu = k.cu if k.cu is not None else stats  # unused when dense
    consts = dict(SMOOTH_K=smooth_k, V_FP8=v is not None, IS_VARLEN=k.is_varlen)
    launcher.launch(
        _kv_partials_kernel,
        (count, k.heads, k.batch),
        (
            k.t,
            vv.t,
            kp,
            vp,
            cu,
            *in_unit(k, row_unit),
            *in_unit(vv, row_unit),
            k.heads,
            k.max_len,
            k.total,
            rows,
            count,
        ),
        dict(
            HEAD_DIM=k.head_dim,
            BLOCK_D=head_dim_pad,
            CHUNK=chunk_rows(head_dim_pad),
            **consts,
            PART_STAGES=PART_STAGES,
            ROW_UNIT=row_unit,
        ),
        num_warps=PART_WARPS,
        key=launch_key,
    )
    launcher.launch(
        _kv_finalize_kernel,
        (k.batch * k.heads,),
        (kp, vp, stats[0], stats[1], cu, k.heads, k.max_len, k.total, count),
        dict(BLOCK_D=head_dim_pad, **consts),
        num_warps=1,
        key=launch_key,
    )
    return (stats[0] if smooth_k else None), (stats[1] if v is not None else None)


def quant_blocks(
    x: SeqView,
    km: Optional[torch.Tensor],
    blk: int,
    scale_mul: float,
    head_dim_pad: int,
    v: Optional[SeqView] = None,
    v_amax: Optional[torch.Tensor] = None,
    fp8_dtype: Optional[torch.dtype] = None,
    launch_key: Optional[tuple] = None,
    inline_stats: bool = False,
    pdl_trigger: bool = False,
    v_key_order: bool = False,
    row_unit: int = 1,
    fp8_cvt_asm: bool = False,
) -> tuple[SeqView, torch.Tensor, Optional[SeqView], Optional[torch.Tensor]]:
    """INT8 blocks of x (minus km when given) and, in the same launch, FP8 V when v_amax is given
    (``inline_stats``: the statistics computed in the launch instead, km, when given, filled with
    K's mean, and V quantized whenever v and fp8_dtype are given). ``row_unit``: x's and v's
    strides go divided by it (``layout.row_unit`` of both); ``pdl_trigger``: the next launch is a
    programmatic dependent (``LaunchPlan.pdl``); ``v_key_order`` (dense): FP8 V's tokens in wgmma
    key order (``layout.KEY_GROUP``); ``fp8_cvt_asm``: V's FP8 codes by the arch's conversion
    instruction (``LaunchPlan.fp8_cvt_asm``).

    Returns (x_int8 view, scales float32 [B, H, cdiv(N, blk)], v_fp8 view or None, v_scale
    float32 [B, H, Dp] or None): INT8 contiguous with the padded head dim, FP8 V channel-major
    (``layout.empty_like_view``)."""
    xq = empty_like_view(x, head_dim_pad, torch.int8)
    nblk = launcher.cdiv(x.max_len, blk)
    xs = torch.empty((x.batch, x.heads, nblk), dtype=torch.float32, device=x.t.device)
    want_v = v is not None and fp8_dtype is not None and (v_amax is not None or inline_stats)
    if v_key_order and (x.is_varlen or blk % KEY_GROUP):
        raise ValueError(f"v_key_order needs dense inputs and blocks of a multiple of {KEY_GROUP} tokens")
    vq = vs = None
    stats_rows, stats_warps = inline_launch(head_dim_pad, want_v)
    vv, ww = x, xq  # stand-ins for V's arguments, never read without V
    if want_v:
        vq = empty_like_view(v, head_dim_pad, fp8_dtype, channel_major=True, key_order=v_key_order)
        vs = torch.empty((v.batch, v.heads, head_dim_pad), dtype=torch.float32, device=xs.device)
        vv, ww = v, vq
    # the statistics' placement is decided by module knobs (quant_kv), not by the launch key
    consts = launcher.constexprs(
        _quant_blocks_kernel,
        (launch_key, inline_stats, pdl_trigger, v_key_order, fp8_cvt_asm) if launch_key is not None else None,
        lambda: dict(
            HEAD_DIM=x.head_dim,
            BLOCK_D=head_dim_pad,
            BLK=blk,
            HAS_MEAN=km is not None,
            V_FP8=want_v,
            FP8_MAX=fp8_max(fp8_dtype) if want_v else 1.0,
            FP8_CVT_ASM=want_v and fp8_cvt_asm,
            IS_VARLEN=x.is_varlen,
            INLINE_STATS=inline_stats,
            STATS_BLK=stats_rows,
            STATS_STAGES=INLINE_STAGES,
            PDL_TRIGGER=pdl_trigger,
            V_KEY_ORDER=want_v and v_key_order,
            ROW_UNIT=row_unit,
        ),
    )
    launcher.launch(
        _quant_blocks_kernel,
        (nblk, x.heads, x.batch),
        (
            x.t,
            km if km is not None else xs,
            xq.t,
            xs,
            vv.t,
            v_amax if v_amax is not None else xs,
            vs if want_v else xs,
            ww.t,
            x.cu,
            *in_unit(x, row_unit),
            *xq.strides(),
            *in_unit(vv, row_unit),
            *ww.strides(),
            ww.stride_d,
            x.heads,
            x.max_len,
            x.total,
            nblk,
            float(scale_mul),
        ),
        consts,
        num_warps=stats_warps if inline_stats else 4,
        key=launch_key,
    )
    return xq, xs, vq, vs


def quant_kv(
    k: SeqView,
    v: SeqView,
    head_dim_pad: int,
    smooth_k: bool,
    fp8_dtype: Optional[torch.dtype],
    blk: int,
    launch_key: Optional[tuple] = None,
    pdl_trigger: bool = False,
    v_key_order: bool = False,
    fp8_cvt_asm: bool = False,
) -> tuple[SeqView, torch.Tensor, Optional[torch.Tensor], Optional[SeqView], Optional[torch.Tensor]]:
    """K to INT8 blocks (smoothed) and, for the FP8 path, V to FP8 per channel, by one Triton
    launch; K's mean and V's amax computed inside it up to INLINE_STATS_MAX_ELEMENTS keys (the
    longest packed sequence) × head dim, else by ``kv_stats``. ``pdl_trigger``, ``v_key_order``,
    ``fp8_cvt_asm``: as ``quant_blocks``. Returns (k_int8, k_scale, km or None, v_fp8 or None,
    v_scale or None)."""
    inline = k.max_len * head_dim_pad <= INLINE_STATS_MAX_ELEMENTS
    # the launch key fixes the strides, hence the unit: decided once per key
    unit = launcher.constexprs(quant_kv, launch_key, lambda: {"ROW_UNIT": row_unit((k, v))})["ROW_UNIT"]
    if inline:  # statistics computed inside the quantization launch: km is filled there
        km, va = None, None
        if smooth_k:
            km = torch.empty((k.batch, k.heads, head_dim_pad), dtype=torch.float32, device=k.t.device)
    else:
        km, va = kv_stats(k, v, head_dim_pad, smooth_k, fp8_dtype, launch_key, unit)
    kq, ks, vq, vs = quant_blocks(
        k,
        km,
        blk,
        1.0,
        head_dim_pad,
        v=v,
        v_amax=va,
        fp8_dtype=fp8_dtype,
        launch_key=launch_key,
        inline_stats=inline,
        pdl_trigger=pdl_trigger,
        v_key_order=v_key_order,
        row_unit=unit,
        fp8_cvt_asm=fp8_cvt_asm,
    )
    return kq, ks, km, vq, vs
