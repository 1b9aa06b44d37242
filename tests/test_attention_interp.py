"""Every kernel variant under Triton's CPU interpreter at small shapes, against the golden model.

The golden model does the same quantization and the same online softmax, so the kernel must
agree with it to accumulation order: cosine ≥ 0.99999 and relative L1 ≤ 1e-3 (fp16 output).
Interpreter only: the tiny tiles here (BLOCK_N 16) do not compile for a GPU's FP8 MMA, and a
GPU's approximate exp2 needs looser LSE bounds; ``test_attention_gpu.py`` checks the same
agreement on a GPU, with its own shapes and bounds.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from sagebuild.attention import (
    AttentionInputError,
    dispatch,
    sageattn,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_qk_int8_pv_fp16_triton,
    sageattn_varlen,
)
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.reference import golden_attention, golden_varlen, quant_int8_blocks, quant_v_fp8
from sagebuild.kernels.triton import configs, layout, quant
from sagebuild.kernels.triton.attn_fwd import QuantizedKV, QuantizedQ, attention_forward, q_tile_fits_out

DEV = "cpu"
CFG = configs.LaunchConfig(32, 16, 4, 1)  # small tiles: several M and N tiles at these shapes
FNS = {"qk_int8_pv_fp16": sageattn_qk_int8_pv_fp16_triton, "qk_int8_pv_fp8": sageattn_qk_int8_pv_fp8_triton}

pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (a GPU is present)"),
]


def _qkv(b=1, hq=4, hk=2, nq=80, nk=72, d=64, dtype=torch.float16, seed=0, layout_="HND"):
    g = torch.Generator().manual_seed(seed)
    shp = (lambda h, n: (b, h, n, d)) if layout_ == "HND" else (lambda h, n: (b, n, h, d))
    q = torch.randn(shp(hq, nq), generator=g).to(dtype)
    k = torch.randn(shp(hk, nk), generator=g).to(dtype)
    v = torch.randn(shp(hk, nk), generator=g).to(dtype)
    return q.to(DEV), k.to(DEV), v.to(DEV)


def _close(out: torch.Tensor, ref: torch.Tensor, rel_l1: float = 1e-3) -> dict:
    acc = accuracy(out, ref)
    assert acc["finite"], acc
    assert acc["cos"] >= 0.99999 and acc["rel_l1"] <= rel_l1, acc
    return acc


def _run(variant, q, k, v, **kw):
    kw.setdefault("quantization_backend", "triton")
    return FNS[variant](q, k, v, config=CFG, **kw)


@pytest.mark.parametrize("variant", list(FNS))
@pytest.mark.parametrize("causal", [False, True])
def test_kernel_matches_golden_gqa_lse(variant, causal):
    """GQA (4 query heads on 2 KV heads), q_len ≠ kv_len, ragged tiles, LSE with K smoothing."""
    q, k, v = _qkv()
    out, lse = _run(variant, q, k, v, is_causal=causal, return_lse=True)
    ref, ref_lse = golden_attention(
        q.cpu(), k.cpu(), v.cpu(), variant, is_causal=causal, return_lse=True, config=CFG
    )
    assert out.shape == q.shape and out.dtype == q.dtype
    _close(out.cpu(), ref)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    assert torch.allclose(lse.cpu()[finite], ref_lse[finite], atol=1e-4, rtol=1e-5)


def test_causal_rows_without_keys_are_zero():
    """Bottom-right alignment: with 80 queries and 72 keys the first 8 queries see no key."""
    q, k, v = _qkv(nq=80, nk=72)
    out, lse = _run("qk_int8_pv_fp16", q, k, v, is_causal=True, return_lse=True)
    assert torch.count_nonzero(out[:, :, :8]) == 0
    assert torch.isinf(lse[:, :, :8]).all() and torch.isfinite(lse[:, :, 8:]).all()
    assert torch.count_nonzero(out[:, :, 8]) > 0


def test_nhd_layout_matches_hnd():
    q, k, v = _qkv(layout_="NHD", seed=3)
    out = _run("qk_int8_pv_fp16", q, k, v, tensor_layout="NHD", is_causal=True)
    assert out.shape == q.shape
    ref = golden_attention(q.cpu(), k.cpu(), v.cpu(), tensor_layout="NHD", is_causal=True, config=CFG)
    _close(out.cpu(), ref)
    hnd = _run("qk_int8_pv_fp16", *(t.transpose(1, 2).contiguous() for t in (q, k, v)), is_causal=True)
    assert torch.equal(hnd.transpose(1, 2).cpu(), out.cpu())


@pytest.mark.parametrize(
    ("variant", "d"),
    [
        ("qk_int8_pv_fp16", 40),
        ("qk_int8_pv_fp16", 72),
        ("qk_int8_pv_fp8", 96),
        ("qk_int8_pv_fp16", 256),
        ("qk_int8_pv_fp8", 200),
    ],
)
def test_padded_head_dims(variant, d):
    q, k, v = _qkv(d=d, nq=40, nk=48, seed=d)
    out = _run(variant, q, k, v)
    assert out.shape == q.shape
    _close(out.cpu(), golden_attention(q.cpu(), k.cpu(), v.cpu(), variant, config=CFG))


def test_bf16_inputs():
    q, k, v = _qkv(dtype=torch.bfloat16, seed=5)
    out = _run("qk_int8_pv_fp16", q, k, v, is_causal=True)
    assert out.dtype == torch.bfloat16
    _close(out.cpu(), golden_attention(q.cpu(), k.cpu(), v.cpu(), is_causal=True, config=CFG), rel_l1=6e-3)


@pytest.mark.parametrize(("gran", "smooth_k"), [("per_block", True), ("per_warp", False)])
def test_granularity_and_smoothing(gran, smooth_k):
    q, k, v = _qkv(seed=7)
    k = k + 4.0  # an offset that smoothing removes
    out = _run("qk_int8_pv_fp8", q, k, v, qk_quant_gran=gran, smooth_k=smooth_k)
    ref = golden_attention(
        q.cpu(), k.cpu(), v.cpu(), "qk_int8_pv_fp8", qk_quant_gran=gran, smooth_k=smooth_k, config=CFG
    )
    _close(out.cpu(), ref)


@pytest.mark.parametrize(("variant", "causal"), [("qk_int8_pv_fp16", True), ("qk_int8_pv_fp8", False)])
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
    ref = golden_varlen(
        q.cpu(), k.cpu(), v.cpu(), cuq.cpu(), cuk.cpu(), variant=variant, is_causal=causal, config=CFG
    )
    _close(out.cpu(), ref)


def _prequantized(q, k, v, dp: int, scale: float) -> tuple[QuantizedKV, int, QuantizedQ]:
    """K/V (FP16 V) and Q quantized by their own launches, as the extension's path has them."""
    kq, ks, km, _, _ = quant.quant_kv(layout.dense(k), layout.dense(v), dp, True, None, configs.K_BLK)
    kv = QuantizedKV(kq, ks, configs.K_BLK, km, layout.dense(v), None)
    q_blk = CFG.q_blk("per_warp")
    qq, qs, _, _ = quant.quant_blocks(layout.dense(q), None, q_blk, scale * quant.LOG2E, dp)
    return kv, q_blk, QuantizedQ(qq, qs, q_blk)


def _forward(q, kv, out, head_dim_pad: int, sm_scale: float, **kw):
    """``attention_forward`` of dense q into out with the module's small-tile CFG; returns out."""
    attention_forward(
        layout.dense(q), kv, layout.dense(out), CFG, head_dim_pad=head_dim_pad, sm_scale=sm_scale, **kw
    )
    return out


def test_prequantized_q_path_matches_fused():
    """Q quantized by its own launch (the extension's path) gives the fused kernel's result."""
    q, k, v = _qkv(seed=13)
    dp, scale = 64, 64**-0.5
    kv, q_blk, qi = _prequantized(q, k, v, dp, scale)
    outs = [
        _forward(q, kv, torch.empty_like(q), dp, scale, causal=True, pv_fp8=False, q_blk=q_blk, q_int8=q_int8)
        for q_int8 in (None, qi)
    ]
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("pv_fp8", [False, True])
@pytest.mark.parametrize(("d", "layout_"), [(64, "HND"), (96, "NHD"), (40, "HND"), (16, "HND")])
def test_q_read_back_from_the_output_rows_changes_nothing(pv_fp8, d, layout_):
    """Q's INT8 tile round-tripped through the program's own output rows (so that Hopper's wgmma
    reads it from shared memory: ``configs.use_wgmma_pipe``) gives the same output and LSE bit
    for bit, with causal ragged tiles, GQA, split (96) and padded (40) head dims and strided
    (NHD) output rows; a head dim whose output rows are too narrow (16) keeps the registers."""
    q, k, v = _qkv(hq=4, hk=2, nq=72, nk=88, d=d, seed=d, layout_=layout_)
    if layout_ == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    dp, scale = configs.padded_head_dim(d), d**-0.5
    assert q_tile_fits_out(d, dp) == (d >= 32)
    fp8 = torch.float8_e4m3fn if pv_fp8 else None
    kq, ks, km, vq, vs = quant.quant_kv(layout.dense(k), layout.dense(v), dp, True, fp8, configs.K_BLK)
    kv = QuantizedKV(kq, ks, configs.K_BLK, km, vq if pv_fp8 else layout.dense(v), vs)
    results = []
    for from_memory in (True, False):
        out = torch.full_like(q, float("nan"))  # the round trip must leave nothing behind
        lse = torch.empty(q.shape[:3], dtype=torch.float32)
        _forward(q, kv, out, dp, scale, causal=True, pv_fp8=pv_fp8, q_blk=CFG.q_blk("per_warp"),
                 fp8_max=448.0, fp8_dtype=fp8, lse=lse, q_from_memory=from_memory)  # fmt: skip
        results.append((out, lse))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert torch.isfinite(results[0][0]).all()


@pytest.mark.parametrize("pv_fp8", [False, True])
@pytest.mark.parametrize("d", [80, 96, 160, 192])
@pytest.mark.parametrize("prequantized_q", [False, True])
def test_split_head_dims_match_the_padded_tile(pv_fp8, d, prequantized_q, monkeypatch):
    """Head dims 65–96 and 129–192 run as two channel pieces (64 + 32, 128 + 64): the same
    attention and LSE as the padded tile (integer scores are exact, each output channel's P·V is
    its own), with GQA, causal ragged tiles, K smoothing and both Q paths."""
    q, k, v = _qkv(hq=4, hk=2, nq=72, nk=88, d=d, seed=d)
    dp, scale = configs.padded_head_dim(d), d**-0.5
    assert configs.split_head_dim(d, dp)
    fp8 = torch.float8_e4m3fn if pv_fp8 else None
    kq, ks, km, vq, vs = quant.quant_kv(layout.dense(k), layout.dense(v), dp, True, fp8, configs.K_BLK)
    kv = QuantizedKV(kq, ks, configs.K_BLK, km, vq if pv_fp8 else layout.dense(v), vs)
    q_blk = CFG.q_blk("per_warp")
    q_int8 = None
    if prequantized_q:
        qq, qs, _, _ = quant.quant_blocks(layout.dense(q), None, q_blk, scale * quant.LOG2E, dp)
        q_int8 = QuantizedQ(qq, qs, q_blk)
    results = []
    for split in (True, False):
        monkeypatch.setattr(configs, "split_head_dim", lambda hd, pad, split=split: split)
        lse = torch.empty(q.shape[:3], dtype=torch.float32)
        o = _forward(q, kv, torch.empty_like(q), dp, scale, causal=True, pv_fp8=pv_fp8, q_blk=q_blk,
                     fp8_dtype=fp8, q_int8=q_int8, lse=lse)  # fmt: skip
        results.append((o, lse))
    (o_split, lse_split), (o_pad, lse_pad) = results
    assert (o_split.float() - o_pad.float()).abs().max() <= 1e-3
    finite = torch.isfinite(lse_pad)
    assert torch.equal(torch.isfinite(lse_split), finite)
    assert torch.allclose(lse_split[finite], lse_pad[finite], atol=1e-5, rtol=1e-6)
    variant = "qk_int8_pv_fp8" if pv_fp8 else "qk_int8_pv_fp16"
    _close(o_split, golden_attention(q, k, v, variant, is_causal=True, config=CFG))


@pytest.mark.parametrize("heads", [1, 3, 5, 7, 16, 64])
@pytest.mark.parametrize("n", [100, 4096, 20000])
def test_statistics_parts_fill_one_wave(heads, n):
    """The statistics launch never asks for more programs than PART_WAVES per SM (4 SMs under
    the interpreter): a few programs past one wave would run as a second wave on their own
    (run 27); the parts cover every token, each at least PART_MIN_ROWS long unless there is one."""
    dp = 128
    rows = quant.part_rows(n, heads, torch.device(DEV), dp)
    parts = -(-n // rows)
    assert rows % quant.chunk_rows(dp) == 0 and parts * rows >= n
    assert parts * heads <= max(heads, quant.PART_WAVES * 4)
    assert parts == 1 or rows >= quant.PART_MIN_ROWS
    if n >= quant.PART_MIN_ROWS * (parts + 1):  # not too few either: one more part would not fit
        assert (parts + 1) * heads > quant.PART_WAVES * 4


@pytest.mark.parametrize("key_order", [False, True])
@pytest.mark.parametrize("stats", ["inline", "one_part", "parts"])
@pytest.mark.parametrize("d", [64, 40])
def test_quant_kernels_follow_the_contract(d, stats, key_order, monkeypatch):
    """INT8 blocks, K mean and FP8 V: bit-equal to the plain-torch statement of the layout,
    with the statistics computed in the quantization launch (short keys) or from one or several
    parts of column statistics (the last part shorter); FP8 V in plain or in wgmma key order
    (``layout.key_order``: 150 keys stored in 160 rows, the padding zeros)."""
    monkeypatch.setattr(quant, "INLINE_STATS_MAX_ELEMENTS", 1 << 20 if stats == "inline" else 0)
    if stats == "parts":
        monkeypatch.setattr(quant, "PART_MIN_ROWS", 64)
    seen = []
    real = quant.part_rows
    monkeypatch.setattr(quant, "part_rows", lambda *a: seen.append(real(*a)) or seen[-1])
    _, k, v = _qkv(d=d, nk=150, seed=17)
    k = k + torch.linspace(-3, 3, d, device=DEV, dtype=k.dtype)
    dp = configs.padded_head_dim(d)
    kq, ks, km, vq, vs = quant.quant_kv(
        layout.dense(k), layout.dense(v), dp, True, torch.float8_e4m3fn, configs.K_BLK, v_key_order=key_order
    )
    # 1 or 3 parts of 150 keys, in chunks of 4096 // 64 rows
    assert seen == {"inline": [], "one_part": [192], "parts": [64]}[stats]
    kf, vf = k.cpu().float(), v.cpu().float()
    ref_km = kf.mean(dim=2)
    assert torch.allclose(km.cpu()[..., :d], ref_km, atol=1e-6)
    assert torch.count_nonzero(km.cpu()[..., d:]) == 0
    ref_q, ref_s = quant_int8_blocks(kf - km.cpu()[:, :, None, :d], configs.K_BLK)
    assert kq.t.shape == (1, 2, 150, dp) and kq.t.dtype == torch.int8
    assert torch.equal(kq.t.cpu()[..., :d].float(), ref_q) and torch.count_nonzero(kq.t.cpu()[..., d:]) == 0
    assert torch.equal(ks.cpu(), ref_s)
    ref_v, ref_vs = quant_v_fp8(vf, torch.float8_e4m3fn)
    assert torch.equal(vs.cpu()[..., :d], ref_vs)
    if key_order:  # every stored row, padding included: row k holds key σ(k) (zeros past 150)
        rows = layout.key_rows(150, True)
        stored = torch.as_strided(vq.t, (1, 2, rows, dp), vq.t.stride()).cpu()[..., :d].float()
        padded = torch.cat([ref_v, torch.zeros(1, 2, rows - 150, d)], dim=2)
        assert rows == 160 and torch.equal(stored, padded[:, :, layout.key_order(rows)])
    else:
        assert torch.equal(vq.t.cpu()[..., :d].float(), ref_v)


@triton.jit
def _key_order_kernel(OUT, M: tl.constexpr, N: tl.constexpr):
    """OUT [M, N] ← each row's column indices put in wgmma key order."""
    cols = tl.arange(0, N)
    idx = tl.broadcast_to(cols[None, :], (M, N))
    tl.store(OUT + tl.arange(0, M)[:, None] * N + cols[None, :], layout.wgmma_key_order(idx))


def test_p_in_wgmma_key_order_is_v_stored_order():
    """The kernel's reordering of P's columns (``layout.wgmma_key_order``) is the order the
    quantization stores V's keys in (``layout.key_order``; the quantization applies the same
    function to its block's rows): a permutation within each group of 32 keys, the same for
    every row."""
    out = torch.empty(4, 128, dtype=torch.int32, device=DEV)
    _key_order_kernel[(1,)](out, 4, 128)
    order = layout.key_order(128)
    assert torch.equal(out.cpu(), order.to(torch.int32).expand(4, 128))
    assert torch.equal(order.sort().values, torch.arange(128)) and not torch.equal(order, torch.arange(128))
    assert torch.equal(order // 32, torch.arange(128) // 32)


@pytest.mark.parametrize(
    ("causal", "accum", "d", "nk", "tma"),
    [(False, "fp32", 64, 150, False), (True, "fp32+fp32", 64, 88, False), (True, "fp32", 96, 160, True),
     (False, "fp32+fp32", 64, 150, True)],
)  # fmt: skip
def test_v_in_wgmma_key_order_gives_the_same_attention(causal, accum, d, nk, tma, monkeypatch):
    """SAGEBUILD_V_KEY_ORDER=1 (Hopper's default): FP8 V stored in wgmma key order and P's columns
    put in the same order give the same attention up to the order of the P·V sums, and the same
    LSE bit for bit (it does not involve V): ragged last groups (150 keys in 160 rows, 88 in 96),
    causal, GQA, the split head dim 96, TMA (V's padded rows make 150 keys eligible), both FP8
    accumulations; the plan records it; recorded and replayed calls give the full call's bits."""
    from sagebuild.attention.api import launch_plan

    cfg = configs.LaunchConfig(32, 64, 4, 1)
    q, k, v = _qkv(hq=4, hk=2, nq=72, nk=nk, d=d, seed=nk + d)
    kw = dict(is_causal=causal, return_lse=True, config=cfg, quantization_backend="triton",
              pv_accum_dtype=accum)  # fmt: skip
    monkeypatch.setenv(configs.TMA_ENV_VAR, "1" if tma else "0")
    monkeypatch.setenv(configs.ENV_VAR, cfg.spec())  # the plan of the very launches below
    monkeypatch.setenv(configs.V_KEY_ORDER_ENV_VAR, "0")
    ref, ref_lse = sageattn_qk_int8_pv_fp8_triton(q, k, v, **kw)
    monkeypatch.setenv(configs.V_KEY_ORDER_ENV_VAR, "1")
    plan = launch_plan(q, k, v, is_causal=causal, variant="qk_int8_pv_fp8", pv_accum_dtype=accum,
                       quantization_backend="triton")  # fmt: skip
    assert plan["v_key_order"] and plan["kernel"] == ("portable_tma" if tma else "portable"), plan
    outs = [sageattn_qk_int8_pv_fp8_triton(q, k, v, **kw) for _ in range(3)]  # full, recorded, replayed
    for out, lse in outs:
        assert torch.equal(out, outs[0][0]) and torch.equal(lse, outs[0][1])
    out, lse = outs[0]
    assert torch.equal(lse, ref_lse)
    assert (out.float() - ref.float()).abs().max() < 2e-3
    gold = golden_attention(q.cpu(), k.cpu(), v.cpu(), "qk_int8_pv_fp8", is_causal=causal, config=cfg)
    _close(out.cpu(), gold)


def test_int8_codes_round_ties_away_from_zero():
    """A block whose amax is 127 has step 1, so the codes are the rounded inputs themselves:
    ties go away from zero, values just below a tie go down (0.49999997 + 0.5 rounds to 1 in
    float32: the kernels must not add 0.5), -0.0 and the clamp behave. The golden model agrees."""
    ties = [
        0.5,
        -0.5,
        1.5,
        -1.5,
        2.5,
        -2.5,
        126.5,
        -126.5,
        0.49999997,
        -0.49999997,
        -0.0,
        0.0,
        3.4999998,
        -3.4999998,
        127.0,
        -127.0,
    ]
    x = torch.zeros(1, 1, 16, 64)
    x[0, 0, :, 0] = torch.tensor(ties)
    x[0, 0, 0, 1] = 127.0  # amax of the block: step = 127 / 127 = 1
    q, s, _, _ = quant.quant_blocks(layout.dense(x.to(DEV)), None, 16, 1.0, 64)
    assert torch.equal(s.cpu(), torch.ones(1, 1, 1))
    expected = torch.tensor([1, -1, 2, -2, 3, -3, 127, -127, 0, 0, 0, 0, 3, -3, 127, -127], dtype=torch.int8)
    assert torch.equal(q.t.cpu()[0, 0, :, 0], expected)
    ref_q, ref_s = quant_int8_blocks(x, 16)
    assert torch.equal(ref_q[0, 0, :, 0], expected.float()) and torch.equal(ref_s, s.cpu())


def test_inputs_not_modified_and_strided_inputs_served():
    q, k, v = _qkv(seed=19, layout_="NHD")
    wide = torch.randn(1, 72, 2, 128, dtype=torch.float16, device=DEV)
    v_strided = wide[..., ::2]  # last-dim stride 2: the one case that is copied
    before = [t.clone() for t in (q, k, v_strided)]
    out = _run("qk_int8_pv_fp16", q, k, v_strided, tensor_layout="NHD")
    for t, b in zip((q, k, v_strided), before):
        assert torch.equal(t, b)
    ref = golden_attention(q.cpu(), k.cpu(), v_strided.cpu(), tensor_layout="NHD", config=CFG)
    _close(out.cpu(), ref)


def test_sageattn_dispatches_and_config_override(monkeypatch):
    q, k, v = _qkv(seed=23)
    variant = dispatch.variant_for_device(q.device)
    monkeypatch.setenv(configs.ENV_VAR, "64,32,4,1")
    out = sageattn(q, k, v, is_causal=True, quantization_backend="triton")
    ref = golden_attention(
        q.cpu(), k.cpu(), v.cpu(), variant, is_causal=True, config=configs.LaunchConfig(64, 32, 4, 1)
    )
    _close(out.cpu(), ref)
    assert torch.equal(sageattn(q, k, v, is_causal=True, attn_mask=None, dropout_p=0.0), out)  # ignored
    monkeypatch.setenv(configs.ENV_VAR, "64,30,4,1")
    with pytest.raises(AttentionInputError, match="power of two"):
        sageattn(q, k, v)


@pytest.mark.parametrize("variant", list(FNS))
def test_key_tiles_wider_than_k_scale_blocks(variant, monkeypatch):
    """BLOCK_N = 256 spans four 64-token K scale blocks: the per-column scale path (causal, ragged)."""
    monkeypatch.setenv(configs.FUSE_ENV_VAR, "0")  # pre-quantized K: the path under test
    cfg = configs.LaunchConfig(32, 256, 4, 1)
    assert cfg.k_blk == configs.K_BLK
    q, k, v = _qkv(hq=2, hk=1, nq=96, nk=200)
    out, lse = FNS[variant](
        q, k, v, is_causal=True, return_lse=True, config=cfg, quantization_backend="triton"
    )
    ref, ref_lse = golden_attention(
        q.cpu(), k.cpu(), v.cpu(), variant, is_causal=True, return_lse=True, config=cfg
    )
    _close(out.cpu(), ref)
    assert torch.allclose(lse.cpu(), ref_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("variant", list(FNS))
@pytest.mark.parametrize("backend", ["triton", "varlen"])
def test_wide_key_tiles_take_wide_k_scale_blocks(variant, backend, monkeypatch):
    """BLOCK_N = 128: K is quantized in 128-token blocks (one scale per tile), dense and packed;
    the kernel agrees with the golden model quantizing the same way (GQA, causal, ragged)."""
    monkeypatch.setenv(configs.FUSE_ENV_VAR, "0")
    cfg = configs.LaunchConfig(32, 128, 4, 1)
    assert cfg.k_blk == configs.K_BLK_WIDE == 128
    seen = []
    real = quant.quant_kv
    monkeypatch.setattr(quant, "quant_kv", lambda *a, **kw: seen.append(a[5]) or real(*a, **kw))
    q, k, v = _qkv(hq=2, hk=1, nq=96, nk=300, seed=5)
    if backend == "varlen":
        pv = "fp8" if variant.endswith("fp8") else "fp16"
        cu = torch.tensor([0, 300], dtype=torch.int32)
        cuq = torch.tensor([0, 96], dtype=torch.int32)
        q3, k3, v3 = (t[0].transpose(0, 1).contiguous() for t in (q, k, v))
        out = sageattn_varlen(q3, k3, v3, cuq, cu, 96, 300, is_causal=True, pv=pv, config=cfg)
        out = out.transpose(0, 1).unsqueeze(0)
    else:
        out = FNS[variant](q, k, v, is_causal=True, config=cfg, quantization_backend="triton")
    assert seen == [128]
    ref = golden_attention(q.cpu(), k.cpu(), v.cpu(), variant, is_causal=True, config=cfg)
    _close(out.cpu(), ref)


@pytest.mark.parametrize("variant", list(FNS))
@pytest.mark.parametrize(("block_n", "d", "causal"), [(64, 64, True), (128, 40, False), (64, 96, False)])
def test_kv_quantized_inside_the_kernel(variant, block_n, d, causal, monkeypatch):
    """Short sequences: K (and FP8 V) quantized in the attention kernel give the golden model's
    result (same 64-token K blocks, same rounding) with GQA, ragged tiles, padding and LSE."""
    monkeypatch.setenv(configs.FUSE_ENV_VAR, "1024")
    cfg = configs.LaunchConfig(32, block_n, 4, 1)
    assert configs.fuse_kv(cfg, 200, varlen=False)
    q, k, v = _qkv(hq=4, hk=2, nq=72, nk=200, d=d, seed=3)
    out, lse = FNS[variant](
        q, k, v, is_causal=causal, return_lse=True, config=cfg, quantization_backend="triton"
    )
    ref, ref_lse = golden_attention(
        q.cpu(), k.cpu(), v.cpu(), variant, is_causal=causal, return_lse=True, config=cfg
    )
    assert out.shape == q.shape
    _close(out.cpu(), ref)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.cpu()), finite)
    assert torch.allclose(lse.cpu()[finite], ref_lse[finite], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_pv_accumulated_by_the_mma(fused, causal, monkeypatch):
    """pv_accum_dtype="fp32": P·V accumulated across key tiles by the MMA (no per-tile FP32
    add) is the same attention: GQA, ragged tiles, the α rescale between tiles, LSE, and both
    K/V paths (pre-quantized and quantized inside the kernel)."""
    monkeypatch.setenv(configs.FUSE_ENV_VAR, "1024" if fused else "0")
    cfg = configs.LaunchConfig(32, 64, 4, 1)
    q, k, v = _qkv(hq=4, hk=2, nq=72, nk=200, d=64, seed=5)
    out, lse = sageattn_qk_int8_pv_fp8_triton(
        q,
        k,
        v,
        is_causal=causal,
        return_lse=True,
        config=cfg,
        quantization_backend="triton",
        pv_accum_dtype="fp32",
    )
    two_level = sageattn_qk_int8_pv_fp8_triton(
        q, k, v, is_causal=causal, config=cfg, quantization_backend="triton"
    )
    ref, ref_lse = golden_attention(
        q.cpu(), k.cpu(), v.cpu(), "qk_int8_pv_fp8", is_causal=causal, return_lse=True, config=cfg
    )
    _close(out.cpu(), ref)
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse.cpu()[finite], ref_lse[finite], atol=1e-4, rtol=1e-5)
    # a different accumulation order, so not bit-equal, yet the same result
    assert (out.float() - two_level.float()).abs().max() < 2e-3


@pytest.mark.parametrize(
    ("causal", "accum", "d"), [(False, "fp32", 64), (True, "fp32+fp32", 64), (True, "fp32", 96)]
)
def test_tma_tiles_match_pointer_tiles(causal, accum, d, monkeypatch):
    """SAGEBUILD_TMA=1: K/V tiles through host-built tensor descriptors (a ragged last K tile
    reads the next head's rows, masked; V's tile arrives with zeros past the keys) give
    bit-for-bit the pointer path's result: GQA, q_len ≠ kv_len, a ragged last key
    tile, LSE, the split head dim 96 (64 + 32 channels: a descriptor per piece). Key counts that
    are not a multiple of 16 (TMA's stride rule for the channel-major FP8 V) keep the pointer
    path, and the launch plan says which one runs."""
    from sagebuild.attention.api import launch_plan

    cfg = configs.LaunchConfig(32, 64, 4, 1)
    q, k, v = _qkv(hq=4, hk=2, nq=72, nk=160, d=d, seed=21)
    kw = dict(is_causal=causal, return_lse=True, config=cfg, quantization_backend="triton",
              pv_accum_dtype=accum)  # fmt: skip
    monkeypatch.setenv(configs.TMA_ENV_VAR, "0")
    ref, ref_lse = sageattn_qk_int8_pv_fp8_triton(q, k, v, **kw)
    monkeypatch.setenv(configs.TMA_ENV_VAR, "1")
    monkeypatch.setenv(configs.ENV_VAR, cfg.spec())  # the plan of the very launch below

    def kernel(k, v):
        return launch_plan(q, k, v, is_causal=causal, variant="qk_int8_pv_fp8", pv_accum_dtype=accum,
                           quantization_backend="triton")["kernel"]  # fmt: skip

    assert kernel(k, v) == "portable_tma"
    out, lse = sageattn_qk_int8_pv_fp8_triton(q, k, v, **kw)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
    gold = golden_attention(q.cpu(), k.cpu(), v.cpu(), "qk_int8_pv_fp8", is_causal=causal, config=cfg)
    _close(out.cpu(), gold)
    assert kernel(k[:, :, :150], v[:, :, :150]) == "portable"


def test_tma_needs_the_quantization_kernels_dense_layout():
    """The TMA descriptors span every head's rows (``attn_fwd._kv_descriptors``), so a launch
    takes them only for K/V laid out as ``quant.quant_kv`` lays out dense sequences: FP8 V
    channel-major and K contiguous. Strided K (a view of every other head), 16-bit V or
    packed sequences are refused, and ``attention_forward(tma=True)`` says so instead of
    reading the wrong rows."""
    from sagebuild.kernels.triton.attn_fwd import tma_eligible

    q, k, v = _qkv(hq=4, hk=4, nq=64, nk=64, seed=3)
    dp, fp8 = 64, torch.float8_e4m3fn
    kq, ks, km, vq, vs = quant.quant_kv(layout.dense(k), layout.dense(v), dp, True, fp8, configs.K_BLK)
    kv = QuantizedKV(kq, ks, configs.K_BLK, km, vq, vs)
    assert tma_eligible(kv, dp, True)
    assert not tma_eligible(kv, dp, False)  # FP16 P·V: no descriptors
    assert not tma_eligible(QuantizedKV(kq, ks, configs.K_BLK, km, layout.dense(v), vs), dp, True)
    every_other = layout.dense(kq.t[:, ::2])  # head stride twice a head's size
    assert not tma_eligible(QuantizedKV(every_other, ks, configs.K_BLK, km, vq, vs), dp, True)
    cu = torch.tensor([0, 64], dtype=torch.int32)
    packed = layout.packed(kq.t[0].transpose(0, 1).contiguous(), cu, 64)
    assert not tma_eligible(QuantizedKV(packed, ks, configs.K_BLK, km, vq, vs), dp, True)
    bad = QuantizedKV(every_other, ks, configs.K_BLK, km, vq, vs)
    with pytest.raises(ValueError, match="tma_eligible"):
        _forward(q, bad, torch.empty_like(q), dp, dp**-0.5, causal=False, pv_fp8=True,
                 q_blk=CFG.q_blk("per_warp"), tma=True)  # fmt: skip


def test_pdl_defaults_to_short_key_counts_on_nvidia_sm90_and_is_keyed(monkeypatch):
    """Programmatic dependent launch is on by default for Hopper and Blackwell up to
    PDL_DEFAULT_MAX_KEYS keys (run 18: it pays there, noise beyond), never for AMD or the
    interpreter, nor for an unknown key count; SAGEBUILD_PDL=1 turns it on for every length, 0
    off; the knob is part of every plan key, so a changed value is another signature; a launch
    that reads a pre-quantized Q refuses it (Q would be read before the wait)."""
    monkeypatch.delenv(configs.PDL_ENV_VAR, raising=False)
    top = configs.PDL_DEFAULT_MAX_KEYS
    assert configs.use_pdl("Hopper", 1024) and configs.use_pdl("Blackwell", top)
    assert not configs.use_pdl("Hopper", top + 1) and not configs.use_pdl("Hopper", 0)
    before = configs.knob_values()
    monkeypatch.setenv(configs.PDL_ENV_VAR, "1")
    assert configs.knob_values() != before
    assert configs.use_pdl("Hopper", 16384) and configs.use_pdl("Blackwell", 0)
    assert not any(configs.use_pdl(f, 1024) for f in ("CDNA3", "RDNA4", "Ampere", "Ada", "interpreter"))
    monkeypatch.setenv(configs.PDL_ENV_VAR, "0")
    assert not configs.use_pdl("Hopper", 1024)
    q, k, v = _qkv(seed=13)
    kv, q_blk, qi = _prequantized(q, k, v, 64, 64**-0.5)
    with pytest.raises(ValueError, match="pdl"):
        _forward(q, kv, torch.empty_like(q), 64, 64**-0.5, causal=False, pv_fp8=False, q_blk=q_blk,
                 q_int8=qi, pdl=True)  # fmt: skip


def test_fused_kv_threshold(monkeypatch):
    """Off by default (measured slower on an H200); when on, short sequences only, and key tiles
    made of whole K blocks."""
    cfg = configs.LaunchConfig(64, 64, 4, 3)
    monkeypatch.delenv(configs.FUSE_ENV_VAR, raising=False)
    assert not configs.fuse_kv(cfg, 128, varlen=False)
    monkeypatch.setenv(configs.FUSE_ENV_VAR, "1024")
    assert configs.fuse_kv(cfg, 1024, varlen=False)
    assert not configs.fuse_kv(cfg, 1025, varlen=False)
    assert not configs.fuse_kv(cfg, 128, varlen=True)
    assert not configs.fuse_kv(configs.LaunchConfig(64, 32, 4, 3), 128, varlen=False)


def test_plan_cache_reuses_decisions_and_never_caches_bad_input(monkeypatch):
    """A repeated call signature reuses its plan (one entry, same result); a changed config
    variable or layout is another signature; bad input raises every time, never cached."""
    from sagebuild.attention import api

    q, k, v = _qkv(nq=40, nk=40, seed=11)
    api._PLANS.clear()
    first = sageattn_qk_int8_pv_fp16_triton(q, k, v, quantization_backend="triton", config=CFG)
    assert len(api._PLANS) == 1
    again = sageattn_qk_int8_pv_fp16_triton(q, k, v, quantization_backend="triton", config=CFG)
    assert len(api._PLANS) == 1
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    monkeypatch.setenv(configs.ENV_VAR, "16,16,4,1")
    sageattn_qk_int8_pv_fp16_triton(q, k, v, quantization_backend="triton")
    assert len(api._PLANS) == 2
    plan = next(p for key, p in api._PLANS.items() if configs.knob_values() in key)
    assert (plan.cfg.block_m, plan.cfg.block_n) == (16, 16)
    for _ in range(2):
        with pytest.raises(AttentionInputError, match="float32"):
            sageattn_qk_int8_pv_fp16_triton(q.float(), k.float(), v.float())
        with pytest.raises(AttentionInputError, match="qk_quant_gran"):
            sageattn_qk_int8_pv_fp16_triton(q, k, v, qk_quant_gran="per_thread")
    assert len(api._PLANS) == 2
    assert api._plan_key("not a tensor", k, v) is None


def test_launcher_defers_to_triton_while_a_launch_hook_is_set():
    """Profilers hook Triton's launches; with a hook set the binder-free path must stand aside."""
    from triton import knobs

    from sagebuild.kernels.triton import launcher

    assert not launcher.hooks_installed()
    chain = knobs.runtime.launch_enter_hook
    hook = lambda metadata: None  # noqa: E731
    if hasattr(chain, "add"):
        chain.add(hook)
        try:
            assert launcher.hooks_installed()
        finally:
            chain.remove(hook)
    else:  # older Triton: a plain attribute
        knobs.runtime.launch_enter_hook = hook
        try:
            assert launcher.hooks_installed()
        finally:
            knobs.runtime.launch_enter_hook = chain
    assert not launcher.hooks_installed()


def test_launcher_caches_only_kernels_whose_constexprs_trail():
    """The binder-free call passes args then constexpr values positionally: that is only the
    kernel's signature when every constexpr parameter comes after every runtime argument."""
    from types import SimpleNamespace

    from sagebuild.kernels.triton import launcher

    trailing = SimpleNamespace(arg_names=["X", "n", "BLOCK", "FLAG"])
    assert launcher._constexprs_trailing(trailing, 2, {"BLOCK": 64, "FLAG": True})
    interleaved = SimpleNamespace(arg_names=["X", "BLOCK", "n", "FLAG"])
    assert not launcher._constexprs_trailing(interleaved, 2, {"BLOCK": 64, "FLAG": True})
    reordered = SimpleNamespace(arg_names=["X", "n", "FLAG", "BLOCK"])
    assert not launcher._constexprs_trailing(reordered, 2, {"BLOCK": 64, "FLAG": True})


def test_host_cdiv_is_the_ceiling_of_the_quotient():
    import math

    from sagebuild.kernels.triton import launcher

    assert all(launcher.cdiv(a, b) == math.ceil(a / b) for a in range(0, 600) for b in range(1, 70))


@pytest.mark.parametrize(
    ("variant", "causal", "nk", "block_n"),
    [("qk_int8_pv_fp16", True, 88, 16), ("qk_int8_pv_fp8", False, 150, 64), ("qk_int8_pv_fp8", True, 72, 32)],
)
def test_row_sum_parts_give_the_same_attention(variant, causal, nk, block_n, monkeypatch):
    """P's row sums kept as ``configs.ROW_SUM_PARTS`` partial sums per row (the default where
    ``configs.row_sum_parts`` allows it) give the attention and LSE of one sum per row up to the
    order of the additions, on ragged and causal tiles; the plan records the choice, and
    SAGEBUILD_ROW_SUM_PARTS=0 is one sum."""
    from sagebuild.attention.api import launch_plan

    cfg = configs.LaunchConfig(32, block_n, 4, 1)
    q, k, v = _qkv(hq=4, hk=2, nq=72, nk=nk, seed=nk)
    kw = dict(is_causal=causal, return_lse=True, config=cfg, quantization_backend="triton")
    monkeypatch.setenv(configs.ENV_VAR, cfg.spec())  # launch_plan sees the very config
    results = {}
    for knob in ("0", ""):
        monkeypatch.setenv(configs.ROW_SUM_PARTS_ENV_VAR, knob)
        plan = launch_plan(q, k, v, is_causal=causal, variant=variant, quantization_backend="triton")
        results[plan["row_sum_parts"]] = FNS[variant](q, k, v, **kw)
    assert sorted(results) == [1, configs.ROW_SUM_PARTS]
    (one, one_lse), (parts, parts_lse) = results[1], results[configs.ROW_SUM_PARTS]
    assert (parts.float() - one.float()).abs().max() < 2e-3
    finite = torch.isfinite(one_lse)
    assert torch.equal(torch.isfinite(parts_lse), finite)
    assert torch.allclose(parts_lse[finite], one_lse[finite], atol=1e-5, rtol=1e-6)
    _close(parts.cpu(), golden_attention(q.cpu(), k.cpu(), v.cpu(), variant, is_causal=causal, config=cfg))


def test_row_sum_parts_by_family_and_tile():
    """On by default on Hopper and in the interpreter only; never where the key tile is not a
    multiple of the parts; the knob turns it off (0) or on (1) where the family allows it."""
    cfg = configs.LaunchConfig(64, 128, 4, 2)
    assert configs.row_sum_parts("Hopper", cfg) == configs.ROW_SUM_PARTS == 8
    assert configs.row_sum_parts("RDNA4", cfg) == 1  # WMMA: Triton 3.6 does not compile the reshape
    assert configs.row_sum_parts("Hopper", configs.LaunchConfig(64, 4, 4, 2)) == 1
