"""Upstream's quantizers with its signatures, shapes, dtypes and scale layouts, on our kernels.

* ``per_block_int8`` (upstream's ``per_block_int8_triton`` and ``per_block_int8_cuda``) and
  ``per_warp_int8`` (``per_warp_int8_cuda``): our INT8 block launch (``quant.quant_blocks``); Q's
  scale folds ``sm_scale · log2(e)`` in per block, as upstream's does, and not per warp.
* ``per_thread_int8`` (``per_thread_int8_triton``): our per-thread Triton kernels
  (``quant_per_thread``), upstream's grid and argument order.
* ``per_channel_fp8`` and ``sub_mean``: V transposed, padded to 64 tokens and permuted within each
  16 as upstream's FP8 MMA reads it, in torch operations (our FP8 V launch writes our kernels'
  layout, not this one).

INT8 codes follow our contract (``kernels/triton/quant.py``: scale ``max(amax, 1e-8) / 127``,
half away from zero); upstream adds 1e-7 to the scale instead, so codes can differ by one where
that moves a rounding boundary, and every scale dequantizes its codes. The ``dequantize_*``
functions are these layouts' inverses (the raw kernels' inputs, and the tests' check).
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch
import triton

from sagebuild.attention.validate import AttentionInputError, unit_stride
from sagebuild.kernels.triton import layout, quant
from sagebuild.kernels.triton import quant_per_thread as qpt
from sagebuild.kernels.triton.configs import padded_head_dim

# the scale an all-zero block gets (quant.scale_and_inverse's floor): the padding of per-warp scales
ZERO_BLOCK_SCALE = 1e-8 / 127
# upstream's FP8 V: within each 16 tokens, stored position j holds token V_PERM[j]
V_PERM = (0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15)
V_PAD = 64  # FP8 V's tokens padded to a multiple of this


def hnd(x: torch.Tensor, tensor_layout: str) -> torch.Tensor:
    """x as a [B, H, N, D] view (NHD transposed); a clear error for any other layout."""
    if tensor_layout == "HND":
        return x
    if tensor_layout == "NHD":
        return x.transpose(1, 2)
    raise AttentionInputError(
        f"Unknown tensor layout: {tensor_layout!r}", "pass tensor_layout='HND' or 'NHD'"
    )


def _mean_rows(km: Optional[torch.Tensor], k_hnd: torch.Tensor, tensor_layout: str) -> Optional[torch.Tensor]:
    """K's mean as our launch takes it: float32 [B, H, Dp] (upstream's km: [B, H, 1, D] for HND,
    [B, 1, H, D] for NHD, or anything that broadcasts so)."""
    if km is None:
        return None
    b, h, _, d = k_hnd.shape
    km4 = hnd(km if km.dim() == 4 else km.reshape((1,) * (4 - km.dim()) + tuple(km.shape)), tensor_layout)
    flat = torch.broadcast_to(km4, (b, h, 1, d))[:, :, 0].float()
    return torch.nn.functional.pad(flat, (0, _padded(d) - d)).contiguous()


def _padded(d: int) -> int:
    dp = padded_head_dim(d)
    if dp is None:
        raise AttentionInputError(
            f"head dim {d} is larger than the kernels take", "use a head dim of at most 256"
        )
    return dp


def _blocks(
    x_hnd: torch.Tensor, km: Optional[torch.Tensor], blk: int, scale_mul: float, out_hnd: torch.Tensor
) -> torch.Tensor:
    """INT8 of x_hnd in blocks of ``blk`` rows by our launch, written into ``out_hnd``; returns
    the scales [B, H, cdiv(N, blk)] (each times ``scale_mul``)."""
    d = x_hnd.shape[-1]
    with _on(x_hnd):
        xq, xs, _, _ = quant.quant_blocks(layout.dense(unit_stride(x_hnd)), km, blk, scale_mul, _padded(d))
    out_hnd.copy_(xq.t[..., :d])
    return xs


def _on(x: torch.Tensor) -> Any:
    """The tensor's GPU as the current device (Triton launches there); a no-op on the CPU."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _int8_like(x: torch.Tensor) -> torch.Tensor:
    """Upstream's INT8 output: x's shape (and layout), on its device."""
    return torch.empty(x.shape, dtype=torch.int8, device=x.device)


def per_block_int8(
    q: torch.Tensor,
    k: torch.Tensor,
    km: Optional[torch.Tensor] = None,
    BLKQ: int = 128,  # noqa: N803 (upstream's parameter names)
    BLKK: int = 64,  # noqa: N803
    sm_scale: Optional[float] = None,
    tensor_layout: str = "HND",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q_int8, q_scale [B, Hq, cdiv(Nq, BLKQ)], k_int8, k_scale [B, Hk, cdiv(Nk, BLKK)]): INT8 in
    the inputs' shape and layout, Q's scales times ``sm_scale · log2(e)`` (default sm_scale
    head_dim⁻¹ᐟ²), K minus ``km`` when given."""
    qh, kh = hnd(q, tensor_layout), hnd(k, tensor_layout)
    q_int8, k_int8 = _int8_like(q), _int8_like(k)
    scale = qh.shape[-1] ** -0.5 if sm_scale is None else sm_scale
    q_scale = _blocks(qh, None, BLKQ, scale * quant.LOG2E, hnd(q_int8, tensor_layout))
    k_scale = _blocks(kh, _mean_rows(km, kh, tensor_layout), BLKK, 1.0, hnd(k_int8, tensor_layout))
    return q_int8, q_scale, k_int8, k_scale


def per_warp_int8(
    q: torch.Tensor,
    k: torch.Tensor,
    km: Optional[torch.Tensor] = None,
    BLKQ: int = 128,  # noqa: N803
    WARPQ: int = 32,  # noqa: N803
    BLKK: int = 64,  # noqa: N803
    tensor_layout: str = "HND",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q_int8, q_scale [B, Hq, cdiv(Nq, BLKQ)·BLKQ/WARPQ], k_int8, k_scale [B, Hk, cdiv(Nk, BLKK)]):
    one Q scale per WARPQ rows (no sm_scale folded in, as upstream), K per block minus ``km``;
    the scales of warp slices past the last row are ``ZERO_BLOCK_SCALE``."""
    qh, kh = hnd(q, tensor_layout), hnd(k, tensor_layout)
    q_int8, k_int8 = _int8_like(q), _int8_like(k)
    b, h, n, _ = qh.shape
    warps = _blocks(qh, None, WARPQ, 1.0, hnd(q_int8, tensor_layout))
    q_scale = torch.full(
        (b, h, triton.cdiv(n, BLKQ) * (BLKQ // WARPQ)), ZERO_BLOCK_SCALE, dtype=torch.float32, device=q.device
    )
    q_scale[..., : warps.shape[-1]] = warps
    k_scale = _blocks(kh, _mean_rows(km, kh, tensor_layout), BLKK, 1.0, hnd(k_int8, tensor_layout))
    return q_int8, q_scale, k_int8, k_scale


def _per_thread(
    x_hnd: torch.Tensor, out_hnd: torch.Tensor, block: int, warp: int, query: bool
) -> torch.Tensor:
    """One of upstream's per-thread layouts (Q's or K's) by our kernel; returns the scales."""
    b, h, n, d = x_hnd.shape
    per = 8 if query else 4
    if warp < 8 or warp & (warp - 1) or block % warp:
        raise AttentionInputError(
            f"per-thread quantization takes warp slices of a power of two (at least 8) rows dividing the "
            f"block, got {warp} rows in blocks of {block}",
            "pass upstream's values: BLKQ 128 or 64 with WARPQ 32 or 16, BLKK 64 or 128 with WARPK = BLKK",
        )
    scale = torch.empty(
        (b, h, qpt.scales_per_head(n, block, warp, per)), dtype=torch.float32, device=x_hnd.device
    )
    src, dst = unit_stride(x_hnd), out_hnd
    dp = triton.next_power_of_2(d)
    if dp != d:  # the kernel's head dim is a power of two: zero channels change no scale
        src = torch.nn.functional.pad(src, (0, dp - d))
        dst = torch.empty(src.shape, dtype=torch.int8, device=src.device)
    kernel = qpt.quant_query_per_thread_int8_kernel if query else qpt.quant_key_per_thread_int8_kernel
    with _on(x_hnd):
        kernel[(scale.shape[-1], h, b)](
            src, dst, scale, n, src.stride(0), src.stride(1), src.stride(2), dst.stride(0), dst.stride(1),
            dst.stride(2), scale.stride(0), scale.stride(1), C=dp, BLK=warp,
        )  # fmt: skip
    if dst is not out_hnd:
        out_hnd.copy_(dst[..., :d])
    return scale


def per_thread_int8(
    q: torch.Tensor,
    k: torch.Tensor,
    km: Optional[torch.Tensor] = None,
    BLKQ: int = 128,  # noqa: N803
    WARPQ: int = 32,  # noqa: N803
    BLKK: int = 64,  # noqa: N803
    WARPK: int = 64,  # noqa: N803
    sm_scale: Optional[float] = None,
    tensor_layout: str = "HND",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q_int8, q_scale [B, Hq, cdiv(Nq, BLKQ)·BLKQ/WARPQ·8], k_int8, k_scale [B, Hk,
    cdiv(Nk, BLKK)·BLKK/WARPK·4]) in upstream's per-thread layout (``quant_per_thread``'s
    docstring); K minus ``km`` when given. ``sm_scale`` is not folded in (upstream ignores it too)."""
    qh, kh = hnd(q, tensor_layout), hnd(k if km is None else k - km, tensor_layout)
    q_int8, k_int8 = _int8_like(q), _int8_like(k)
    q_scale = _per_thread(qh, hnd(q_int8, tensor_layout), BLKQ, WARPQ, True)
    k_scale = _per_thread(kh, hnd(k_int8, tensor_layout), BLKK, WARPK, False)
    return q_int8, q_scale, k_int8, k_scale


def per_channel_fp8(
    v: torch.Tensor, tensor_layout: str = "HND", scale_max: float = 448.0, smooth_v: bool = True
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """(v_fp8 float8_e4m3fn, v_scale float32 [B, H, D], v_mean float32 [B, H, D] or None): V
    minus its per-channel mean (``smooth_v``) over ``max(amax, 1e-8) / scale_max`` per channel,
    transposed to [B, H, D, P] (HND) or [B, D, H, P] (NHD), P the tokens padded to 64 with zeros,
    each 16 tokens stored in ``V_PERM`` order."""
    x = hnd(v, tensor_layout).float()
    b, h, n, d = x.shape
    vm = x.mean(dim=2) if smooth_v else None
    if vm is not None:
        x = x - vm[:, :, None]
    v_scale = x.abs().amax(dim=2).clamp_min(1e-8) / scale_max
    pad = triton.cdiv(n, V_PAD) * V_PAD
    t = torch.zeros((b, h, d, pad), dtype=torch.float32, device=v.device)
    t[..., :n] = (x / v_scale[:, :, None]).clamp(-scale_max, scale_max).transpose(-1, -2)
    perm = torch.tensor(V_PERM, device=v.device)
    fp8 = t.view(b, h, d, pad // 16, 16)[..., perm].reshape(b, h, d, pad).to(torch.float8_e4m3fn)
    if tensor_layout == "NHD":
        fp8 = fp8.permute(0, 2, 1, 3).contiguous()
    return fp8, v_scale, vm


def sub_mean(v: torch.Tensor, tensor_layout: str = "HND") -> tuple[torch.Tensor, torch.Tensor]:
    """(v minus its per-channel token mean in float16, the mean [B, H, D] in v's dtype)."""
    vh = hnd(v, tensor_layout)
    vm = vh.mean(dim=2)
    return (v.float() - hnd(vm[:, :, None], tensor_layout).float()).to(torch.float16), vm


# ---- the layouts' inverses -------------------------------------------------------------------


def row_scales(scale: torch.Tensor, n: int, index: torch.Tensor) -> torch.Tensor:
    """Each of n rows' scale [B, H, n] from a scale tensor [B, H, S] and each row's index."""
    if int(index.max()) >= scale.shape[-1]:
        raise AttentionInputError(
            f"a scale tensor of {scale.shape[-1]} entries per head cannot cover {n} rows in this layout",
            "pass the scales the matching quantizer returned for these tensors",
        )
    return scale[..., index]


def thread_index(n: int, warp: int, query: bool, device: torch.device) -> torch.Tensor:
    """Each row's per-thread scale index (``quant_per_thread``'s layout)."""
    r = torch.arange(n, device=device)
    return (r // warp) * 8 + r % 8 if query else (r // warp) * 4 + (r % 8) // 2


def block_index(n: int, rows: int, device: torch.device) -> torch.Tensor:
    """Each row's per-block (or per-warp) scale index: one scale per ``rows`` rows."""
    return torch.arange(n, device=device) // rows


def dequantize_int8(
    x_int8: torch.Tensor,
    scale: torch.Tensor,
    index: torch.Tensor,
    tensor_layout: str,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """[B, H, N, D] in ``dtype`` of INT8 codes times their rows' scales (``index``: ``*_index``)."""
    xh = hnd(x_int8, tensor_layout)
    return xh.to(dtype) * row_scales(scale, xh.shape[2], index)[..., None].to(dtype)


def dequantize_fp8_v(
    v_fp8: torch.Tensor,
    v_scale: Optional[torch.Tensor],
    v_mean: Optional[torch.Tensor],
    n: int,
    tensor_layout: str,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """[B, H, n, D] in ``dtype`` of ``per_channel_fp8``'s output (scale and mean applied when given)."""
    t = v_fp8.to(dtype) if tensor_layout == "HND" else v_fp8.to(dtype).permute(0, 2, 1, 3)
    b, h, d, pad = t.shape
    inverse = torch.argsort(torch.tensor(V_PERM, device=t.device))
    x = t.reshape(b, h, d, pad // 16, 16)[..., inverse].reshape(b, h, d, pad)[..., :n].transpose(-1, -2)
    if v_scale is not None:
        x = x * v_scale[:, :, None].to(dtype)
    return x if v_mean is None else x + v_mean[:, :, None].to(dtype)
