"""INT8 per-thread quantization in upstream SageAttention's layout, for callers that launch it.

Upstream's CUDA kernels read Q and K with one scale per MMA thread's rows; LightX2V and KJNodes
launch its two Triton kernels by name (``sageattention.triton.quant_per_thread``). These are ours,
with upstream's argument order, grid and scale layout, our rounding contract (``quant.to_int8``,
``quant.scale_and_inverse``: ``max(amax, 1e-8) / 127``) and 64-bit row offsets (upstream's 32-bit
ones overflow past 2³¹ elements, the MiniMax-H3 failure KJNodes patches around).

Layout (``WARP``: the kernel's ``BLK``, rows per warp slice of a block):

* Q: program p = 8·w + t quantizes rows ``w·WARP + 8i + t`` (i < WARP/8) with scale ``Scale[p]``;
  the scale index of row r is ``(r // WARP)·8 + r % 8``.
* K: program p = 4·w + t quantizes rows ``w·WARP + 8i + 2t + {0, 1}`` with scale ``Scale[p]``; the
  scale index of row r is ``(r // WARP)·4 + (r % 8) // 2``.

Grid: (scale entries per head, heads, batch). ``C`` (the head dim) is a power of two and the head
dim is unit-stride; rows at or past ``L`` are neither read nor written.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .quant import scale_and_inverse, to_int8


@triton.jit
def _quant_rows(
    Input, Output, Scale, L, rows,
    stride_iz, stride_ih, stride_in, stride_oz, stride_oh, stride_on, stride_sz, stride_sh,
    C: tl.constexpr,
):  # fmt: skip
    """One scale for ``rows`` of (batch, head) = (program_id 2, program_id 1), stored at the
    program's index along the scale's last dim."""
    b = tl.program_id(2).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    cols = tl.arange(0, C)
    ok = (rows < L)[:, None]
    r64 = rows.to(tl.int64)[:, None]
    x = tl.load(Input + b * stride_iz + h * stride_ih + r64 * stride_in + cols[None, :], mask=ok, other=0.0)
    step, inv = scale_and_inverse(tl.max(tl.max(tl.abs(x.to(tl.float32)), axis=1), axis=0), 127.0)
    xq = to_int8(x.to(tl.float32) * inv)
    tl.store(Output + b * stride_oz + h * stride_oh + r64 * stride_on + cols[None, :], xq, mask=ok)
    tl.store(Scale + b * stride_sz + h * stride_sh + tl.program_id(0), step)


@triton.jit
def quant_query_per_thread_int8_kernel(
    Input, Output, Scale, L,
    stride_iz, stride_ih, stride_in, stride_oz, stride_oh, stride_on, stride_sz, stride_sh,
    C: tl.constexpr, BLK: tl.constexpr,
):  # fmt: skip
    """Q's per-thread INT8 (see the module docstring); ``BLK``: rows per warp slice."""
    p = tl.program_id(0)
    rows = (p // 8) * BLK + tl.arange(0, BLK // 8) * 8 + p % 8
    _quant_rows(Input, Output, Scale, L, rows, stride_iz, stride_ih, stride_in, stride_oz, stride_oh,
                stride_on, stride_sz, stride_sh, C)  # fmt: skip


@triton.jit
def quant_key_per_thread_int8_kernel(
    Input, Output, Scale, L,
    stride_iz, stride_ih, stride_in, stride_oz, stride_oh, stride_on, stride_sz, stride_sh,
    C: tl.constexpr, BLK: tl.constexpr,
):  # fmt: skip
    """K's per-thread INT8 (see the module docstring): each program a pair of rows per 8."""
    p = tl.program_id(0)
    i = tl.arange(0, BLK // 4)
    rows = (p // 4) * BLK + (i // 2) * 8 + (p % 4) * 2 + i % 2
    _quant_rows(Input, Output, Scale, L, rows, stride_iz, stride_ih, stride_in, stride_oz, stride_oh,
                stride_on, stride_sz, stride_sh, C)  # fmt: skip


def scales_per_head(n: int, block: int, warp: int, per_warp: int) -> int:
    """Scale entries per head (the grid's first dim): ``per_warp`` (8 for Q, 4 for K) per warp
    slice, ``block // warp`` slices per block of ``block`` rows, blocks covering n rows."""
    return triton.cdiv(n, block) * (block // warp) * per_warp
