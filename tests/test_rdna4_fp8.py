"""The FP8 P·V variant on RDNA4's settings, in Triton's CPU interpreter (issue 38).

No AMD GPU here: what runs is the kernel itself, interpreted, with what an RX 9070 XT (gfx1201)
or RX 9060 XT (gfx1200) call would use: the launch-config table's RDNA4 row (wave32 tiles,
forced with ``config=``) and the arch's FP8 format (OCP e4m3, ``float8_e4m3fn``, max 448), held
to the bounds Hopper's FP8 path meets: cosine >= 0.999 and relative L1 <= 0.05 against the
float32 exact attention. The matrix instructions these tiles compile to on gfx1201 are checked
ahead of time in tests/test_aot.py.
"""

from __future__ import annotations

import pytest
import torch

from sagebuild import archs
from sagebuild.attention import plan, sageattn_qk_int8_pv_fp8_triton
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.reference import exact_attention
from sagebuild.kernels.triton import configs, quant

RDNA4 = ("gfx1201", "gfx1200")
COS_MIN, REL_L1_MAX = 0.999, 0.05  # issue 38: the bounds of Hopper's FP8 path

pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (a GPU is present)"),
]


def _rdna4_config(head_dim: int, causal: bool) -> configs.LaunchConfig:
    """The config a gfx1201 call of the FP8 variant gets from the table (any key count)."""
    return configs.lookup(archs.get("gfx1201").family, configs.padded_head_dim(head_dim), "fp8", causal)


def _qkv(b: int, hq: int, hk: int, n: int, d: int, seed: int, v_outliers: bool = False):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=g) for h in (hq, hk, hk))
    k = k + 2.0 * torch.randn(1, hk, 1, d, generator=g)  # a channel offset: what smooth K removes
    if v_outliers:  # a few loud channels: V's per-channel FP8 scale keeps the quiet ones resolved
        v[..., :: max(1, d // 8)] *= 20.0
    return (x.half() for x in (q, k, v))


def test_rdna4_settings_are_wave32_tiles_and_ocp_e4m3():
    """What the accuracy tests below stand for: both RDNA4 archs are wave32, take OCP e4m3 (the
    interpreter's FP8 format too), have an FP8 matrix path in the table, and the launch-config
    table gives the FP8 variant 64x32 tiles over 4 waves, one stage."""
    for name in RDNA4:
        row = archs.get(name)
        assert row.family == "RDNA4" and row.warp_size == 32 and row.fp8_mma, row
        assert plan.fp8_dtype_name(name) == plan.fp8_dtype_name(plan.INTERPRETER) == "float8_e4m3fn"
    assert quant.fp8_max(torch.float8_e4m3fn) == 448.0
    for d in (64, 128):
        for causal in (False, True):
            cfg = _rdna4_config(d, causal)
            assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.num_stages) == (64, 32, 4, 1), cfg


@pytest.mark.parametrize(
    ("head_dim", "causal", "seq", "v_outliers"),
    [
        (64, False, 256, False),
        (64, True, 200, False),  # ragged last key tile, bottom-right causal mask
        (128, False, 192, True),
        (128, True, 256, False),
    ],
)
def test_fp8_variant_accuracy_on_rdna4_settings(head_dim, causal, seq, v_outliers):
    """GQA (4 query heads on 2 KV heads), several 64x32 tiles per head: cos >= 0.999 and
    rel-L1 <= 0.05 against float32, with the table's RDNA4 config forced."""
    q, k, v = _qkv(1, 4, 2, seq, head_dim, seed=head_dim + seq, v_outliers=v_outliers)
    cfg = _rdna4_config(head_dim, causal)
    out = sageattn_qk_int8_pv_fp8_triton(q, k, v, is_causal=causal, config=cfg, quantization_backend="triton")
    ref = exact_attention(q, k, v, is_causal=causal)
    assert out.shape == q.shape and out.dtype == q.dtype
    acc = accuracy(out, ref)
    assert acc["finite"], acc
    assert acc["cos"] >= COS_MIN and acc["rel_l1"] <= REL_L1_MAX, acc


def test_fp8_variant_accumulated_by_the_mma_on_rdna4_settings():
    """``pv_accum_dtype="fp32"`` (the WMMA accumulates across key tiles; RDNA4's FP8 WMMA has an
    fp32 accumulator) meets the same bounds on the RDNA4 tiles."""
    q, k, v = _qkv(1, 2, 2, 256, 128, seed=7)
    cfg = _rdna4_config(128, False)
    kw = dict(config=cfg, pv_accum_dtype="fp32", quantization_backend="triton")
    out = sageattn_qk_int8_pv_fp8_triton(q, k, v, **kw)
    acc = accuracy(out, exact_attention(q, k, v))
    assert acc["finite"] and acc["cos"] >= COS_MIN and acc["rel_l1"] <= REL_L1_MAX, acc
