"""Reference attention in plain torch (runs on the CPU): exact, and a golden model of the kernels
(``golden_attention``: the same INT8 blocks, K smoothing, FP8 casts and online softmax, so the two
differ only by accumulation order and exp2's last bits).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from sagebuild.kernels.triton.configs import LaunchConfig

LOG2E = math.log2(math.e)
DEFAULT_CONFIG = LaunchConfig(128, 64, 4, 3)
_EXACT_CHUNK = 1024  # query rows per step of exact_attention: bounds memory at long sequences


def _to_hnd(x: torch.Tensor, tensor_layout: str) -> torch.Tensor:
    return x.transpose(1, 2) if tensor_layout == "NHD" else x


def causal_mask(n_q: int, n_k: int, device: torch.device, rows: slice = slice(None)) -> torch.Tensor:
    """Bottom-right aligned: query i sees key j when j <= i + (n_k - n_q)."""
    i = torch.arange(n_q, device=device)[rows, None]
    j = torch.arange(n_k, device=device)[None, :]
    return j <= i + (n_k - n_q)


def expand_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.repeat_interleave(heads // x.shape[1], dim=1) if x.shape[1] != heads else x


def exact_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention in float32 (no TF32), in the input's layout; GQA and causal as the kernels."""
    qh, kh, vh = (_to_hnd(t, tensor_layout).float() for t in (q, k, v))
    heads, n_q, d = qh.shape[1], qh.shape[2], qh.shape[3]
    kh, vh = expand_kv(kh, heads), expand_kv(vh, heads)
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)
    outs, lses = [], []
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for r0 in range(0, n_q, _EXACT_CHUNK):
            rows = slice(r0, min(n_q, r0 + _EXACT_CHUNK))
            s = torch.matmul(qh[:, :, rows], kh.transpose(-1, -2)) * scale
            if is_causal:
                s = s.masked_fill(~causal_mask(n_q, kh.shape[2], s.device, rows), float("-inf"))
            lse = torch.logsumexp(s, dim=-1)
            p = torch.exp(s - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
            outs.append(torch.matmul(p, vh))
            lses.append(lse)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev
    out = _to_hnd(torch.cat(outs, dim=2), tensor_layout)  # back to NHD: the same swap
    return (out, torch.cat(lses, dim=2)) if return_lse else out


def round_half_away(y: torch.Tensor) -> torch.Tensor:
    """Round to nearest, ties away from zero, exactly (|y| + 0.5 in float64 does not round)."""
    return (torch.sign(y) * torch.floor(y.abs().double() + 0.5)).to(y.dtype)


def ieee_div(a: torch.Tensor, b: float) -> torch.Tensor:
    """a / b rounded once, on every device. torch's CUDA kernels turn division by a Python scalar
    into multiplication by its reciprocal (an ulp off the quotient at times); the contract's
    scales are quotients in the Triton kernels (``div_rn``) and the C++ extension alike."""
    return a / torch.full_like(a, b)


def quant_int8_blocks(y: torch.Tensor, blk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 [B, H, N, D] → (integer-valued float32 tensor, step [B, H, cdiv(N, blk)]): the contract."""
    b, h, n, d = y.shape
    nblk = -(-n // blk)
    padded = torch.nn.functional.pad(y, (0, 0, 0, nblk * blk - n))
    amax = padded.abs().reshape(b, h, nblk, blk * d).amax(dim=-1)
    step = ieee_div(amax.clamp_min(1e-8), 127.0)
    inv = torch.ones_like(step) / step
    rows = inv.repeat_interleave(blk, dim=-1)[..., :n, None]
    return round_half_away(y * rows).clamp(-127, 127), step


def quant_v_fp8(v: torch.Tensor, fp8_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 [B, H, N, D] → (fp8 values as float32, v_scale [B, H, D]): per-channel, saturating RNE."""
    fmax = float(torch.finfo(fp8_dtype).max)
    vs = ieee_div(v.abs().amax(dim=2).clamp_min(1e-8), fmax)
    inv = torch.ones_like(vs) / vs
    return (v * inv[:, :, None, :]).clamp(-fmax, fmax).to(fp8_dtype).float(), vs


def golden_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    variant: str = "qk_int8_pv_fp16",
    tensor_layout: str = "HND",
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    qk_quant_gran: str = "per_warp",
    smooth_k: bool = True,
    return_lse: bool = False,
    config: LaunchConfig = DEFAULT_CONFIG,
    fp8_dtype: torch.dtype = torch.float8_e4m3fn,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The kernels' arithmetic in plain torch (float32 result in the input's layout). ``config``
    sets Q's and K's scale blocks and the key tile of the online softmax (where P is rounded)."""
    if variant not in ("qk_int8_pv_fp16", "qk_int8_pv_fp8"):
        raise ValueError(f"unknown variant {variant!r}")
    qh, kh, vh = (_to_hnd(t, tensor_layout) for t in (q, k, v))
    qf, kf, vf = qh.float(), kh.float(), vh.float()
    b, heads, n_q, d = qf.shape
    n_k = kf.shape[2]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(d)

    km = kf.mean(dim=2, keepdim=True) if smooth_k else torch.zeros_like(kf[:, :, :1])
    qi, q_step = quant_int8_blocks(qf, config.q_blk(qk_quant_gran))
    ki, k_step = quant_int8_blocks(kf - km, config.k_blk)
    qs = q_step * (scale * LOG2E)
    qs_row = qs.repeat_interleave(config.q_blk(qk_quant_gran), dim=-1)[..., :n_q]
    ks_col = k_step.repeat_interleave(config.k_blk, dim=-1)[..., :n_k]
    # Integer products are exact in float64 (and in int32 on the GPU).
    dots = torch.matmul(qi.double(), expand_kv(ki, heads).double().transpose(-1, -2)).float()
    s = dots * qs_row[..., :, None] * expand_kv(ks_col, heads)[..., None, :]
    if is_causal:
        s = s.masked_fill(~causal_mask(n_q, n_k, s.device), float("-inf"))

    fp8 = variant == "qk_int8_pv_fp8"
    if fp8:
        vq, vs = quant_v_fp8(vf, fp8_dtype)
        vq, vs = expand_kv(vq, heads), expand_kv(vs, heads)
        fmax = float(torch.finfo(fp8_dtype).max)
    else:
        vq = expand_kv(vh, heads)  # P·V in the input's 16-bit type
    m = torch.full((b, heads, n_q), float("-inf"), device=s.device)
    l_sum = torch.zeros((b, heads, n_q), device=s.device)
    acc = torch.zeros((b, heads, n_q, d), device=s.device)
    for c0 in range(0, n_k, config.block_n):
        st = s[..., c0 : c0 + config.block_n]
        m_new = torch.maximum(m, st.amax(dim=-1))
        m_use = torch.where(torch.isinf(m_new), 0.0, m_new)
        p = torch.exp2(st - m_use[..., None])
        alpha = torch.exp2(m - m_use)
        l_sum = l_sum * alpha + p.sum(dim=-1)
        vt = vq[:, :, c0 : c0 + config.block_n]
        if fp8:
            part = torch.matmul((p * fmax).to(fp8_dtype).float(), vt)
        else:
            part = torch.matmul(p.to(qh.dtype).float(), vt.float())
        acc = acc * alpha[..., None] + part
        m = m_new
    inv_l = torch.where(l_sum > 0, 1.0 / l_sum, 0.0)
    out = acc * (vs / fmax)[:, :, None, :] * inv_l[..., None] if fp8 else acc * inv_l[..., None]
    out = out.transpose(1, 2) if tensor_layout == "NHD" else out
    if not return_lse:
        return out
    lse = (m + torch.log2(l_sum)) / LOG2E + (qf * expand_kv(km, heads)).sum(-1) * scale
    return out, torch.where(l_sum > 0, lse, float("-inf"))
