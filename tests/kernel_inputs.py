"""Shared inputs and comparisons of the interpreter tests of the kernel modules (test_attn_fwd,
test_quant, test_layout, test_attention_interp): seeded Q/K/V, the golden-model agreement check
with (dtype, atol, rtol) triples, and a plan's launches run directly; and the GPU tests' host
time per call (``host_us``)."""

from __future__ import annotations

import math
import time
from typing import Optional

import pytest
import torch

from sagebuild.attention import api
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.plan import INTERPRETER, LaunchPlan, make_plan
from sagebuild.kernels.triton import configs, layout
from sagebuild.kernels.triton.attn_fwd import attention_forward

DEV = "cpu"
CFG = configs.LaunchConfig(32, 16, 4, 1)  # small tiles: several M and N tiles at these shapes

# (dtype, atol, rtol) of an output against the golden model, which quantizes the same way: they
# differ by the order of the FP32 sums and the output's final rounding (fp16: 2^-11, bf16: 2^-8);
# with FP8 P·V a P value on a rounding boundary may also land one FP8 step (2^-3 relative) apart.
TOLERANCES = {
    "qk_int8_pv_fp16": {torch.float16: (2e-3, 1e-2), torch.bfloat16: (2e-2, 2e-2)},
    "qk_int8_pv_fp8": {torch.float16: (3e-2, 2e-2), torch.bfloat16: (3e-2, 2e-2)},
}
VARIANTS = tuple(TOLERANCES)


def tol(variant: str, dtype: torch.dtype = torch.float16) -> tuple[float, float]:
    return TOLERANCES[variant][dtype]


def triples(variant: str, dtypes=(torch.float16, torch.bfloat16)) -> list:
    """pytest params (dtype, atol, rtol) of one variant."""
    return [pytest.param(dt, *tol(variant, dt), id=str(dt).split(".")[-1]) for dt in dtypes]


def variant_triples(dtypes=(torch.float16, torch.bfloat16)) -> list:
    """pytest params (variant, dtype, atol, rtol) of both variants."""
    return [
        pytest.param(var, dt, *tol(var, dt), id=f"{var.rsplit('_', 1)[-1]}-{str(dt).split('.')[-1]}")
        for var in VARIANTS
        for dt in dtypes
    ]


def qkv(b=1, hq=4, hk=2, nq=80, nk=72, d=64, dtype=torch.float16, seed=0, layout_="HND"):
    g = torch.Generator().manual_seed(seed)
    shp = (lambda h, n: (b, h, n, d)) if layout_ == "HND" else (lambda h, n: (b, n, h, d))
    q = torch.randn(shp(hq, nq), generator=g).to(dtype)
    k = torch.randn(shp(hk, nk), generator=g).to(dtype)
    v = torch.randn(shp(hk, nk), generator=g).to(dtype)
    return q.to(DEV), k.to(DEV), v.to(DEV)


def close(out: torch.Tensor, ref: torch.Tensor, atol: float = 2e-3, rtol: float = 1e-2, rel_l1=None):
    """``out`` agrees with the golden model's float32 ``ref`` element-wise (atol, rtol) and overall
    (cosine ≥ 0.99999, relative L1 ≤ rel_l1: 1e-3 for fp16 outputs, 6e-3 for bf16); non-finite
    outputs fail."""
    rel_l1 = rel_l1 if rel_l1 is not None else (1e-3 if out.dtype == torch.float16 else 6e-3)
    acc = accuracy(out, ref)
    assert acc["finite"], acc
    assert acc["cos"] >= 0.99999 and acc["rel_l1"] <= rel_l1, acc
    torch.testing.assert_close(out.float(), ref.float(), atol=atol, rtol=rtol)
    return acc


def plan(head_dim: int, n_k: int, pv: str = "fp16", config=CFG, **kw) -> LaunchPlan:
    """The interpreter's plan of a dense call (``config`` forced: the small tiles)."""
    return make_plan(INTERPRETER, head_dim=head_dim, n_k=n_k, pv=pv, config=config, **kw)


def forward(p: LaunchPlan, q, k, v, out: Optional[torch.Tensor] = None):
    """The plan's K/V quantization and attention launches on [B, H, N, D] views (any strides);
    returns (out, lse or None). ``out`` (optional) is written in place."""
    kv = api.quantize_kv(p, k, v)
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device) if p.return_lse else None
    attention_forward(layout.dense(q), kv, layout.dense(out), p, lse=lse)
    return out, lse


def fp64_attention(q, k, v, layout="HND", causal=False, scale=None, mask=None):
    """Exact attention in float64 in the caller's layout, as SDPA defines it: (out, LSE) in float32.
    GQA by repetition, causal bottom-right, ``mask`` boolean (True attends) or additive; a row that
    attends to nothing gives zeros and LSE -inf."""
    if layout == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    q, k, v = (t.double() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    s = q @ k.transpose(-1, -2) * (scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(~torch.ones(nq, nk, dtype=torch.bool, device=s.device).tril(nk - nq), -math.inf)
    if mask is not None:
        s = s.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else s + mask.double()
    lse = torch.logsumexp(s, -1)
    out = torch.softmax(s, -1).nan_to_num(0.0) @ v
    return (out.transpose(1, 2) if layout == "NHD" else out).float(), lse.float()


def host_us(fn, n: int = 2000) -> float:
    """Back-to-back calls' wall time per call, µs (GPU; at small shapes the host's, not the device's)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6
