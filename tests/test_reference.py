"""The golden model against exact attention: inside the quantization's expected error, and smoothing."""

from __future__ import annotations

import torch

from sagebuild.attention.metrics import accuracy
from sagebuild.attention.reference import exact_attention, golden_attention


def _qkv(n=256, d=64, seed=0, k_offset=0.0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, n, d, generator=g) for _ in range(3))
    k = k + k_offset * torch.randn(1, 1, 1, d, generator=g)
    return q.half(), k.half(), v.half()


def test_exact_attention_matches_sdpa():
    q, k, v = _qkv(n=96)
    for causal in (False, True):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        ref = sdpa(q.double(), k.double(), v.double(), is_causal=causal)
        # float32 on the CPU: an occasional run is 2e-5 off (1 run in ~10 under pytest; a wrong
        # softmax or mask is off by more than 1e-2)
        assert torch.allclose(exact_attention(q, k, v, is_causal=causal).double(), ref, atol=1e-4)


def test_golden_within_quantization_bounds():
    q, k, v = _qkv()
    exact = exact_attention(q, k, v)
    fp16 = accuracy(golden_attention(q, k, v, "qk_int8_pv_fp16"), exact)
    fp8 = accuracy(golden_attention(q, k, v, "qk_int8_pv_fp8"), exact)
    assert fp16["cos"] >= 0.9998 and fp16["rel_l1"] <= 0.015, fp16
    assert fp8["cos"] >= 0.999 and fp8["rel_l1"] <= 0.05, fp8
    assert fp8["rel_l1"] > fp16["rel_l1"]  # FP8 P·V costs accuracy: the model must show it
    finer = accuracy(golden_attention(q, k, v, qk_quant_gran="per_warp"), exact)["rel_l1"]
    coarser = accuracy(golden_attention(q, k, v, qk_quant_gran="per_block"), exact)["rel_l1"]
    assert finer <= coarser


def test_smoothing_is_invariant_and_helps_with_k_offsets():
    """Subtracting K's mean leaves exact attention unchanged and cuts the INT8 error."""
    q, k, v = _qkv(k_offset=8.0, seed=1)
    exact = exact_attention(q, k, v)
    shifted = exact_attention(q, (k.float() - k.float().mean(dim=2, keepdim=True)).half(), v)
    assert accuracy(shifted, exact)["cos"] > 0.99999
    on = accuracy(golden_attention(q, k, v, smooth_k=True), exact)
    off = accuracy(golden_attention(q, k, v, smooth_k=False), exact)
    assert on["rel_l1"] <= 0.015 and off["rel_l1"] > 2 * on["rel_l1"], (on, off)


def test_lse_is_corrected_for_smoothing():
    q, k, v = _qkv(k_offset=8.0, seed=2)
    _, lse = exact_attention(q, k, v, is_causal=True, return_lse=True)
    _, g = golden_attention(q, k, v, is_causal=True, smooth_k=True, return_lse=True)
    assert torch.allclose(g, lse, atol=0.05), (g - lse).abs().max()
    # the correction is far from negligible here: without it the LSE would be off by this much
    correction = (q.float() * k.float().mean(dim=2, keepdim=True)).sum(-1) * 64**-0.5
    assert correction.abs().max() > 1.0


def test_accuracy_of_zero_and_empty_outputs():
    """A zero side has no angle: identical outputs score cos 1, anything else 0 (this raised)."""
    z = torch.zeros(4)
    assert accuracy(z, z)["cos"] == 1.0 and accuracy(z, z)["max_abs"] == 0.0
    bad = accuracy(torch.tensor([0.0, 2.0, 0.0, 0.0]), z)
    assert bad["cos"] == 0.0 and bad["max_abs"] == 2.0
    empty = accuracy(torch.zeros(0), torch.zeros(0))
    assert (empty["cos"], empty["max_abs"], empty["rmse"], empty["finite"]) == (1.0, 0.0, 0.0, True)
