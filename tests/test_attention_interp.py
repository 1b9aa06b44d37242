"""The attention API (``sagebuild.attention.api``) end to end under Triton's CPU interpreter:
layouts, packed sequences, inputs left untouched, dispatch and config overrides, the plan cache.
The kernels' own numbers are in the test files of their modules (test_attn_fwd, test_quant)."""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import CFG, DEV, close, qkv, tol

from sagebuild import knobs
from sagebuild.attention import (
    AttentionInputError,
    dispatch,
    sageattn,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_qk_int8_pv_fp16_triton,
    sageattn_varlen,
)
from sagebuild.attention.reference import golden_attention
from sagebuild.kernels.triton import configs

FP16 = "qk_int8_pv_fp16"

pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (a GPU is present)"),
]


def _run(q, k, v, **kw):
    return sageattn_qk_int8_pv_fp16_triton(q, k, v, config=CFG, quantization_backend="triton", **kw)


def test_nhd_layout_matches_hnd():
    q, k, v = qkv(layout_="NHD", seed=3)
    out = _run(q, k, v, tensor_layout="NHD", is_causal=True)
    assert out.shape == q.shape
    close(out, golden_attention(q, k, v, tensor_layout="NHD", is_causal=True, config=CFG), *tol(FP16))
    hnd = _run(*(t.transpose(1, 2).contiguous() for t in (q, k, v)), is_causal=True)
    assert torch.equal(hnd.transpose(1, 2), out)


@pytest.mark.parametrize(("variant", "causal"), [(FP16, True), ("qk_int8_pv_fp8", False)])
def test_varlen_matches_per_sequence_golden(variant, causal):
    lens_q, lens_k = [17, 40, 1], [23, 40, 9]
    g = torch.Generator().manual_seed(11)
    q = torch.randn(sum(lens_q), 4, 64, generator=g).half().to(DEV)
    k = torch.randn(sum(lens_k), 2, 64, generator=g).half().to(DEV)
    v = torch.randn(sum(lens_k), 2, 64, generator=g).half().to(DEV)
    cuq = torch.tensor([0, 17, 57, 58], dtype=torch.int32, device=DEV)
    cuk = torch.tensor([0, 23, 63, 72], dtype=torch.int32, device=DEV)
    pv = variant.rsplit("_", 1)[1]
    out = sageattn_varlen(q, k, v, cuq, cuk, max(lens_q), max(lens_k), is_causal=causal, pv=pv, config=CFG)
    assert out.shape == q.shape
    bounds = zip(cuq.tolist(), cuq.tolist()[1:], cuk.tolist(), cuk.tolist()[1:])
    kw = dict(variant=variant, tensor_layout="NHD", is_causal=causal, config=CFG)
    ref = torch.cat(
        [golden_attention(q[a:b][None], k[c:d][None], v[c:d][None], **kw)[0] for a, b, c, d in bounds]
    )
    close(out, ref, *tol(variant))


def test_inputs_not_modified_and_strided_inputs_served():
    q, k, v = qkv(seed=19, layout_="NHD")
    wide = torch.randn(1, 72, 2, 128, dtype=torch.float16, device=DEV)
    v_strided = wide[..., ::2]  # last-dim stride 2: the one case that is copied
    before = [t.clone() for t in (q, k, v_strided)]
    out = _run(q, k, v_strided, tensor_layout="NHD")
    for t, b in zip((q, k, v_strided), before):
        assert torch.equal(t, b)
    close(out, golden_attention(q, k, v_strided, tensor_layout="NHD", config=CFG), *tol(FP16))


def test_sageattn_dispatches_and_config_override(monkeypatch):
    q, k, v = qkv(seed=23)
    variant = dispatch.variant_for_device(q.device)
    monkeypatch.setenv(configs.ENV_VAR, "64,32,4,1")
    knobs.refresh()
    out = sageattn(q, k, v, is_causal=True, quantization_backend="triton")
    ref = golden_attention(q, k, v, variant, is_causal=True, config=configs.LaunchConfig(64, 32, 4, 1))
    close(out, ref, *tol(variant))
    monkeypatch.setenv(configs.ENV_VAR, "64,30,4,1")
    knobs.refresh()
    with pytest.raises(AttentionInputError, match="power of two"):
        sageattn(q, k, v)


def test_plan_cache_reuses_decisions_and_never_caches_bad_input(monkeypatch):
    """A repeated call signature reuses its plan (one entry, same result); a changed config
    variable or layout is another signature; bad input raises every time, never cached."""
    from sagebuild.attention import api

    q, k, v = qkv(nq=40, nk=40, seed=11)
    api._PLANS.clear()
    first = _run(q, k, v)
    assert len(api._PLANS) == 1
    again = _run(q, k, v)
    assert len(api._PLANS) == 1
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    monkeypatch.setenv(configs.ENV_VAR, "16,16,4,1")
    knobs.refresh()
    sageattn_qk_int8_pv_fp16_triton(q, k, v, quantization_backend="triton")
    assert len(api._PLANS) == 2
    call = next(c for key, c in api._PLANS.items() if knobs.plan_values() in key)
    assert (call.plan.config.block_m, call.plan.config.block_n) == (16, 16) and not call.nhd
    for _ in range(2):
        with pytest.raises(AttentionInputError, match="float32"):
            sageattn_qk_int8_pv_fp16_triton(q.float(), k.float(), v.float())
        with pytest.raises(AttentionInputError, match="qk_quant_gran"):
            sageattn_qk_int8_pv_fp16_triton(q, k, v, qk_quant_gran="per_lane")
    assert len(api._PLANS) == 2
    assert api._plan_key("not a tensor", k, v) is None


def _inside_nan_storage(t: torch.Tensor, order: tuple[int, ...], gap: int) -> torch.Tensor:
    """t as a view of a NaN-filled storage: dims laid out outermost-first by ``order``, ``gap``
    NaN elements after every row of every outer dim and past the end. A kernel that reads one
    element outside the view brings a NaN into the output (0 · NaN is NaN)."""
    strides, step = [0] * t.dim(), 1
    for dim in reversed(order):
        strides[dim] = step
        step = step * t.shape[dim] + gap
    size = 8 + sum((n - 1) * s for n, s in zip(t.shape, strides)) + 1 + 64
    view = torch.full((size,), float("nan"), dtype=t.dtype, device=t.device).as_strided(t.shape, strides, 8)
    return view.copy_(t)


@pytest.mark.parametrize("variant", ["qk_int8_pv_fp16", "qk_int8_pv_fp8"])
@pytest.mark.parametrize(
    ("d", "order", "gap"),
    [(40, (0, 1, 2, 3), 8), (96, (0, 2, 1, 3), 3), (128, (1, 0, 2, 3), 16), (64, (2, 0, 1, 3), 5)],
)
def test_views_inside_nan_storage_read_only_their_elements(variant, d, order, gap):
    """Q, K and V as views with gaps (rows, heads and batches apart, NaN between and after them),
    and K/V broadcast along the batch (stride 0): the output is finite and the golden model's."""
    q, k, v = qkv(b=2, hq=4, hk=2, nq=50, nk=37, d=d, seed=d + gap)
    q, k, v = (_inside_nan_storage(t, order, gap) for t in (q, k, v))
    k, v = k[:1].expand_as(k), v[:1].expand_as(v)
    fn = {FP16: sageattn_qk_int8_pv_fp16_triton, "qk_int8_pv_fp8": sageattn_qk_int8_pv_fp8_triton}[variant]
    out = fn(q, k, v, config=CFG, quantization_backend="triton")
    close(out, golden_attention(q, k, v, variant=variant, config=CFG), *tol(variant))
