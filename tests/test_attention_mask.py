"""Attention masks in the kernels (``attn_fwd``'s MASK_MODE): SDPA's boolean and additive masks,
broadcastable to [B, H, N_q, N_k], through every dense public function, under Triton's CPU
interpreter (on the GPU when there is one). Bounds as in test_upstream_api: the quantized kernels
against fp32 attention with the same mask."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from kernel_inputs import CFG as SMALL_TILES
from kernel_inputs import fp64_attention

from sagebuild.attention import api, functions
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.validate import AttentionInputError

DEV = "cuda" if torch.cuda.is_available() else "cpu"
CFG = None if DEV == "cuda" else SMALL_TILES  # several tiles per sequence in the interpreter
BOUNDS = {"fp16": (0.999, 0.025), "fp8": (0.998, 0.06)}
FUNCS = {
    "sageattn": (functions.sageattn, "fp16"),
    "fp16_triton": (functions.sageattn_qk_int8_pv_fp16_triton, "fp16"),
    "fp8_triton": (functions.sageattn_qk_int8_pv_fp8_triton, "fp8"),
}

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")


def _qkv(b=2, hq=4, hk=2, nq=40, nk=72, d=64, seed=0, nhd=False):
    g = torch.Generator().manual_seed(seed)
    shape = (lambda h, n: (b, n, h, d)) if nhd else (lambda h, n: (b, h, n, d))
    return tuple(
        torch.randn(shape(h, n), generator=g).half().to(DEV) for h, n in ((hq, nq), (hk, nk), (hk, nk))
    )


def _check(out, ref, kind):
    acc = accuracy(out.float(), ref)
    cos, rel = BOUNDS[kind]
    assert acc["finite"] and acc["cos"] >= cos and acc["rel_l1"] <= rel, (kind, acc)


def _key_padding(b=2, nk=72):
    pad = torch.ones(b, 1, 1, nk, dtype=torch.bool, device=DEV)
    pad[0, ..., 50:] = False
    pad[1, ..., 9:] = False  # most keys padded: a tile of nothing but padding
    return pad


@pytest.mark.parametrize("fn", list(FUNCS))
@pytest.mark.parametrize("causal", [False, True])
def test_key_padding_masks_run_in_the_kernels(fn, causal):
    f, kind = FUNCS[fn]
    q, k, v = _qkv()
    pad = _key_padding()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="sagebuild")  # no SDPA fallback
        out, lse = f(q, k, v, attn_mask=pad, is_causal=causal, return_lse=True, config=CFG)
    ref, ref_lse = fp64_attention(q, k, v, causal=causal, mask=pad)
    _check(out, ref, kind)
    assert torch.equal(torch.isfinite(lse), torch.isfinite(ref_lse))
    fin = torch.isfinite(ref_lse)
    assert (lse - ref_lse)[fin].abs().max() < 0.05


@pytest.mark.parametrize("kind", ["fp16", "fp8"])
def test_full_boolean_and_additive_masks_with_gqa_and_nhd(kind):
    f = FUNCS["fp16_triton" if kind == "fp16" else "fp8_triton"][0]
    q, k, v = _qkv(nhd=True, seed=3)
    g = torch.Generator().manual_seed(5)
    full = torch.rand(2, 4, 40, 72, generator=g).to(DEV) > 0.3
    full[0, 1, 7] = False  # one row attends to nothing: zeros, as SDPA
    out = f(q, k, v, tensor_layout="NHD", attn_mask=full, config=CFG)
    ref, _ = fp64_attention(q, k, v, "NHD", mask=full)
    _check(out, ref, kind)
    assert out[0, 7, 1].abs().max() == 0
    additive = (torch.randn(40, 72, generator=g) * 2).to(DEV)  # [N_q, N_k]: broadcast over B and H
    additive[:, 60:] = -math.inf
    out = f(q, k, v, tensor_layout="NHD", attn_mask=additive, is_causal=True, config=CFG)
    _check(out, fp64_attention(q, k, v, "NHD", causal=True, mask=additive)[0], kind)


@pytest.mark.parametrize(
    "name", ["bool with holes", "bool left padding", "fp16 finfo.min padding", "bf16 -inf with a bias"]
)
def test_key_vectors_that_are_not_plain_prefixes(name):
    """Key masks the kernel cannot reduce to a shorter sequence (``_key_extent``) are applied per
    tile; HF-style fp16 padding (finfo.min) is a prefix and stops the loop."""
    q, k, v = _qkv(seed=9)
    keep = torch.ones(2, 72, dtype=torch.bool, device=DEV)
    if name == "bool with holes":
        keep[0, 10:20], keep[1, 40:] = False, False
        mask = keep[:, None, None]
    elif name == "bool left padding":
        keep[:, :30] = False
        mask = keep[:, None, None]
    elif name == "fp16 finfo.min padding":
        keep[1, 33:] = False
        mask = torch.zeros(2, 1, 1, 72, dtype=torch.float16, device=DEV).masked_fill(
            ~keep[:, None, None], -65504.0
        )
    else:
        keep[0, 50:] = False
        bias = torch.linspace(-2, 0, 72, device=DEV).expand(2, 72).masked_fill(~keep, -math.inf)
        mask = bias.to(torch.bfloat16)[:, None, None]
    out = functions.sageattn_qk_int8_pv_fp16_triton(q, k, v, attn_mask=mask, config=CFG)
    _check(out, fp64_attention(q, k, v, mask=mask)[0], "fp16")


def test_finite_floor_masks_behave_like_sdpa():
    """HF-style masks hold finfo.min, not -inf: a row masked everywhere is a plain average there."""
    q, k, v = _qkv(b=1, hq=2, hk=2)
    floor = torch.zeros(1, 1, 40, 72, device=DEV)
    floor[..., 30:] = torch.finfo(torch.float32).min
    floor[..., 5, :] = torch.finfo(torch.float32).min  # every key of row 5
    out = functions.sageattn(q, k, v, attn_mask=floor, config=CFG)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=floor)
    _check(out, ref, "fp16")
    torch.testing.assert_close(out[0, :, 5].float(), v[0].float().mean(1), atol=2e-2, rtol=0)


def test_an_all_true_mask_changes_nothing():
    q, k, v = _qkv(seed=7)
    plain = functions.sageattn_qk_int8_pv_fp16_triton(q, k, v, config=CFG)
    ones = torch.ones(72, dtype=torch.bool, device=DEV)
    zeros = torch.zeros(1, 1, 1, 72, dtype=torch.bfloat16, device=DEV)
    for mask in (ones, zeros):
        torch.testing.assert_close(
            functions.sageattn_qk_int8_pv_fp16_triton(q, k, v, attn_mask=mask, config=CFG),
            plain,
            atol=1e-3,
            rtol=0,
        )


def test_the_plan_records_the_mask():
    q, k, v = _qkv()
    plan = api.plan_dense(q, k, v, attn_mask=_key_padding())
    assert (plan.mask, plan.mask_rows, plan.constexprs()["MASK_MODE"]) == ("bool", False, 1)
    rows = api.plan_dense(q, k, v, attn_mask=torch.zeros(40, 72, device=DEV))
    assert (rows.mask, rows.mask_rows, rows.constexprs()["MASK_MODE"]) == ("additive", True, 2)
    assert api.plan_dense(q, k, v).constexprs()["MASK_MODE"] == 0


def test_bad_masks_get_clear_errors():
    q, k, v = _qkv()
    with pytest.raises(AttentionInputError, match="does not broadcast") as err:
        functions.sageattn(q, k, v, attn_mask=torch.ones(2, 1, 1, 71, dtype=torch.bool, device=DEV))
    assert "key padding" in err.value.fix
    with pytest.raises(AttentionInputError, match="boolean or float16"):
        functions.sageattn(q, k, v, attn_mask=torch.ones(1, 1, 1, 72, dtype=torch.int64, device=DEV))


# ---------------------------------------------------------------------------------------------
# On the GPU: accuracy at real sizes, and a key-padding mask costs at most 10% (issue 35)

GPU_CASES = {  # name: (B, H, N_q, N_k, D, dtype, valid keys per batch entry)
    "text key padding (diffusers)": (2, 24, 4096, 512, 128, torch.bfloat16, [137, 512]),
    "self-attention, padded batch": (2, 16, 4096, 4096, 64, torch.float16, [4096, 2900]),
}


@pytest.mark.gpu
@pytest.mark.timing
@pytest.mark.parametrize("case", list(GPU_CASES))
def test_key_padding_costs_at_most_ten_percent_on_the_gpu(case):
    from triton.testing import do_bench

    b, h, nq, nk, d, dtype, valid = GPU_CASES[case]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, generator=g, device="cuda", dtype=dtype) for n in (nq, nk, nk))
    pad = (torch.arange(nk, device="cuda")[None, :] < torch.tensor(valid, device="cuda")[:, None])[
        :, None, None
    ]
    out = functions.sageattn(q, k, v, attn_mask=pad)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=pad)
    acc = accuracy(out.float(), ref)
    assert acc["finite"] and acc["cos"] >= 0.999 and acc["rel_l1"] <= 0.05, acc
    masked_ms, plain_ms = [], []
    for _ in range(5):  # interleaved rounds of do_bench medians (L2 flushed)
        masked_ms.append(do_bench(lambda: functions.sageattn(q, k, v, attn_mask=pad), return_mode="median"))
        plain_ms.append(do_bench(lambda: functions.sageattn(q, k, v), return_mode="median"))
    masked, plain = sorted(masked_ms)[2], sorted(plain_ms)[2]
    print(f"{case}: masked {masked:.4f} ms, unmasked {plain:.4f} ms, ratio {masked / plain:.3f}")
    ratio = masked / plain
    assert ratio <= 1.1, (masked_ms, plain_ms)
