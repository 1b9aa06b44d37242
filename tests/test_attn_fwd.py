"""The attention kernel (``kernels/triton/attn_fwd.py``) under Triton's CPU interpreter at small
shapes, against the golden model, with (dtype, atol, rtol) triples.

The golden model does the same quantization and the same online softmax, so the kernel must
agree with it to accumulation order (``kernel_inputs.TOLERANCES``). Interpreter only: the tiny
tiles here (BLOCK_N 16) do not compile for a GPU's FP8 MMA, and a GPU's approximate exp2 needs
looser LSE bounds; ``test_attention_gpu.py`` checks the same agreement on a GPU.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from kernel_inputs import CFG, close, forward, plan, qkv, tol, triples, variant_triples

from sagebuild import knobs
from sagebuild.attention import (
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_qk_int8_pv_fp16_triton,
    sageattn_varlen,
)
from sagebuild.attention.api import clear_caches, launch_plan
from sagebuild.attention.reference import golden_attention
from sagebuild.kernels.triton import attn_fwd, configs, layout, quant
from sagebuild.kernels.triton.attn_fwd import QuantizedKV, tma_eligible

FNS = {"qk_int8_pv_fp16": sageattn_qk_int8_pv_fp16_triton, "qk_int8_pv_fp8": sageattn_qk_int8_pv_fp8_triton}
FP8 = "qk_int8_pv_fp8"

pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (a GPU is present)"),
]


def _run(variant, q, k, v, **kw):
    kw.setdefault("quantization_backend", "triton")
    kw.setdefault("config", CFG)
    return FNS[variant](q, k, v, **kw)


def _same_lse(lse: torch.Tensor, ref_lse: torch.Tensor, atol=1e-4, rtol=1e-5) -> None:
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite], ref_lse[finite], atol=atol, rtol=rtol)


def _force(monkeypatch, **values: str) -> None:
    """Set plan knobs by name (``SAGEBUILD_`` + upper-case) and re-read them."""
    for name, value in values.items():
        monkeypatch.setenv(f"SAGEBUILD_{name.upper()}", value)
    knobs.refresh()


@pytest.mark.parametrize(("variant", "dtype", "atol", "rtol"), variant_triples())
@pytest.mark.parametrize("causal", [False, True])
def test_kernel_matches_golden_gqa_lse(variant, dtype, atol, rtol, causal):
    """GQA (4 query heads on 2 KV heads), q_len ≠ kv_len, ragged tiles, LSE with K smoothing."""
    q, k, v = qkv(dtype=dtype)
    out, lse = _run(variant, q, k, v, is_causal=causal, return_lse=True)
    ref, ref_lse = golden_attention(q, k, v, variant, is_causal=causal, return_lse=True, config=CFG)
    assert out.shape == q.shape and out.dtype == q.dtype
    close(out, ref, atol, rtol)
    _same_lse(lse, ref_lse)


def test_causal_rows_without_keys_are_zero():
    """Bottom-right alignment: with 80 queries and 72 keys the first 8 queries see no key."""
    q, k, v = qkv(nq=80, nk=72)
    out, lse = _run("qk_int8_pv_fp16", q, k, v, is_causal=True, return_lse=True)
    assert torch.count_nonzero(out[:, :, :8]) == 0
    assert torch.isinf(lse[:, :, :8]).all() and torch.isfinite(lse[:, :, 8:]).all()
    assert torch.count_nonzero(out[:, :, 8]) > 0


@pytest.mark.parametrize(
    ("variant", "d"),
    [("qk_int8_pv_fp16", 40), ("qk_int8_pv_fp16", 72), (FP8, 96), ("qk_int8_pv_fp16", 256), (FP8, 200)],
)
def test_padded_head_dims(variant, d):
    q, k, v = qkv(d=d, nq=40, nk=48, seed=d)
    out = _run(variant, q, k, v)
    assert out.shape == q.shape
    close(out, golden_attention(q, k, v, variant, config=CFG), *tol(variant))


@pytest.mark.parametrize(("gran", "smooth_k"), [("per_block", True), ("per_warp", False)])
@pytest.mark.parametrize(("dtype", "atol", "rtol"), triples(FP8, (torch.float16,)))
def test_granularity_and_smoothing(gran, smooth_k, dtype, atol, rtol):
    q, k, v = qkv(seed=7, dtype=dtype)
    k = k + 4.0  # an offset that smoothing removes
    out = _run(FP8, q, k, v, qk_quant_gran=gran, smooth_k=smooth_k)
    ref = golden_attention(q, k, v, FP8, qk_quant_gran=gran, smooth_k=smooth_k, config=CFG)
    close(out, ref, atol, rtol)


@pytest.mark.parametrize("pv", ["fp16", "fp8"])
@pytest.mark.parametrize(("d", "layout_"), [(64, "HND"), (96, "NHD"), (40, "HND")])
def test_q_read_back_from_the_output_rows_changes_nothing(pv, d, layout_):
    """Q's INT8 tile round-tripped through the program's own output rows (so that Hopper's wgmma
    reads it from shared memory: ``LaunchPlan.q_from_memory``) gives the same output and LSE bit
    for bit, with causal ragged tiles, GQA, split (96) and padded (40) head dims and strided
    (NHD) output rows. (Which head dims may take it: ``test_plan.py``.)"""
    q, k, v = qkv(hq=4, hk=2, nq=72, nk=88, d=d, seed=d, layout_=layout_)
    if layout_ == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    p = plan(d, 88, pv=pv, causal=True, return_lse=True)
    assert not p.q_from_memory  # the interpreter's default: registers
    results = []
    for from_memory in (True, False):
        out = torch.full_like(q, float("nan"))  # the round trip must leave nothing behind
        results.append(forward(dataclasses.replace(p, q_from_memory=from_memory), q, k, v, out=out))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])
    assert torch.isfinite(results[0][0]).all()


@pytest.mark.parametrize("pv", ["fp16", "fp8"])
@pytest.mark.parametrize("d", [80, 96, 160, 192])
def test_split_head_dims_match_the_padded_tile(pv, d):
    """Head dims 65–96 and 129–192 run as two channel pieces (64 + 32, 128 + 64): the same
    attention and LSE as the padded tile (integer scores are exact, each output channel's P·V is
    its own), with GQA, causal ragged tiles and K smoothing."""
    q, k, v = qkv(hq=4, hk=2, nq=72, nk=88, d=d, seed=d)
    p = plan(d, 88, pv=pv, causal=True, return_lse=True)
    assert p.split_head_dim
    o_split, lse_split = forward(p, q, k, v)
    o_pad, lse_pad = forward(dataclasses.replace(p, split_head_dim=False), q, k, v)
    assert (o_split.float() - o_pad.float()).abs().max() <= 1e-3
    _same_lse(lse_split, lse_pad, atol=1e-5, rtol=1e-6)
    close(o_split, golden_attention(q, k, v, p.variant, is_causal=True, config=CFG), *tol(p.variant))


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
    cfg = configs.LaunchConfig(32, 64, 4, 1)
    q, k, v = qkv(hq=4, hk=2, nq=72, nk=nk, d=d, seed=nk + d)
    kw = dict(is_causal=causal, return_lse=True, config=cfg, pv_accum_dtype=accum)
    _force(monkeypatch, tma="1" if tma else "0", attn_config=cfg.spec(), v_key_order="0")
    ref, ref_lse = _run(FP8, q, k, v, **kw)
    _force(monkeypatch, v_key_order="1")
    record = launch_plan(
        q, k, v, is_causal=causal, variant=FP8, pv_accum_dtype=accum, quantization_backend="triton"
    )
    assert record["v_key_order"] and record["tma"] == tma, record
    outs = [_run(FP8, q, k, v, **kw) for _ in range(3)]  # full, recorded, replayed
    for out, lse in outs:
        assert torch.equal(out, outs[0][0]) and torch.equal(lse, outs[0][1])
    out, lse = outs[0]
    assert torch.equal(lse, ref_lse)
    assert (out.float() - ref.float()).abs().max() < 2e-3
    close(out, golden_attention(q, k, v, FP8, is_causal=causal, config=cfg), *tol(FP8))


@pytest.mark.parametrize("variant", list(FNS))
def test_key_tiles_wider_than_k_scale_blocks(variant):
    """BLOCK_N = 256 spans four 64-token K scale blocks: the per-column scale path (causal, ragged)."""
    cfg = configs.LaunchConfig(32, 256, 4, 1)
    assert cfg.k_blk == configs.K_BLK
    q, k, v = qkv(hq=2, hk=1, nq=96, nk=200)
    out, lse = _run(variant, q, k, v, is_causal=True, return_lse=True, config=cfg)
    ref, ref_lse = golden_attention(q, k, v, variant, is_causal=True, return_lse=True, config=cfg)
    close(out, ref, *tol(variant))
    assert torch.allclose(lse, ref_lse, atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("variant", list(FNS))
@pytest.mark.parametrize("backend", ["triton", "varlen"])
def test_wide_key_tiles_take_wide_k_scale_blocks(variant, backend, monkeypatch):
    """BLOCK_N = 128: K is quantized in 128-token blocks (one scale per tile), dense and packed;
    the kernel agrees with the golden model quantizing the same way (GQA, causal, ragged)."""
    cfg = configs.LaunchConfig(32, 128, 4, 1)
    assert cfg.k_blk == configs.K_BLK_WIDE == 128
    seen = []
    real = quant.quant_kv
    monkeypatch.setattr(quant, "quant_kv", lambda *a, **kw: seen.append(a[5]) or real(*a, **kw))
    q, k, v = qkv(hq=2, hk=1, nq=96, nk=300, seed=5)
    if backend == "varlen":
        pv = "fp8" if variant.endswith("fp8") else "fp16"
        cu = torch.tensor([0, 300], dtype=torch.int32)
        cuq = torch.tensor([0, 96], dtype=torch.int32)
        q3, k3, v3 = (t[0].transpose(0, 1).contiguous() for t in (q, k, v))
        out = sageattn_varlen(q3, k3, v3, cuq, cu, 96, 300, is_causal=True, pv=pv, config=cfg)
        out = out.transpose(0, 1).unsqueeze(0)
    else:
        out = _run(variant, q, k, v, is_causal=True, config=cfg)
    assert seen == [128]
    close(out, golden_attention(q, k, v, variant, is_causal=True, config=cfg), *tol(variant))


@pytest.mark.parametrize("causal", [False, True])
def test_fp8_pv_accumulated_by_the_mma(causal):
    """pv_accum_dtype="fp32": P·V accumulated across key tiles by the MMA (no per-tile FP32
    add) is the same attention: GQA, ragged tiles, the α rescale between tiles, LSE."""
    cfg = configs.LaunchConfig(32, 64, 4, 1)
    q, k, v = qkv(hq=4, hk=2, nq=72, nk=200, d=64, seed=5)
    out, lse = _run(FP8, q, k, v, is_causal=causal, return_lse=True, config=cfg, pv_accum_dtype="fp32")
    two_level = _run(FP8, q, k, v, is_causal=causal, config=cfg)
    ref, ref_lse = golden_attention(q, k, v, FP8, is_causal=causal, return_lse=True, config=cfg)
    close(out, ref, *tol(FP8))
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse[finite], ref_lse[finite], atol=1e-4, rtol=1e-5)
    # a different accumulation order, so not bit-equal, yet the same result
    assert (out.float() - two_level.float()).abs().max() < 2e-3


@pytest.mark.parametrize(
    ("causal", "accum", "d", "nk"),
    [
        (False, "fp32", 64, 160),
        (True, "fp32+fp32", 64, 160),
        (True, "fp32", 96, 160),
        (False, "fp32", 64, 150),
    ],
)
def test_tma_tiles_match_pointer_tiles(causal, accum, d, nk, monkeypatch):
    """SAGEBUILD_TMA=1: K/V tiles through host-built tensor descriptors (a ragged last K tile
    reads the next head's rows, masked; V's tile arrives with zeros past the keys) give
    bit-for-bit the pointer path's result: GQA, q_len ≠ kv_len, a ragged last key tile, LSE,
    the split head dim 96 (64 + 32 channels: a descriptor per piece), and a key count (150) whose
    FP8 V rows are padded to 16 bytes (``layout.v_row_stride``); the launch plan says TMA runs."""
    cfg = configs.LaunchConfig(32, 64, 4, 1)
    q, k, v = qkv(hq=4, hk=2, nq=72, nk=nk, d=d, seed=21)
    kw = dict(is_causal=causal, return_lse=True, config=cfg, pv_accum_dtype=accum)
    _force(monkeypatch, tma="0")
    ref, ref_lse = _run(FP8, q, k, v, **kw)
    _force(monkeypatch, tma="1", attn_config=cfg.spec())  # the plan of the very launch below
    record = launch_plan(
        q, k, v, is_causal=causal, variant=FP8, pv_accum_dtype=accum, quantization_backend="triton"
    )
    assert record["tma"] and record["config"] == cfg.spec() + ",tma", record
    out, lse = _run(FP8, q, k, v, **kw)
    assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
    close(out, golden_attention(q, k, v, FP8, is_causal=causal, config=cfg), *tol(FP8))


def test_tma_needs_the_quantization_kernels_dense_layout():
    """The TMA descriptors span every head's rows (``attn_fwd._kv_descriptors``), so a launch
    takes them only for K/V laid out as ``quant.quant_kv`` lays out dense sequences: FP8 V
    channel-major and K contiguous. Strided K (a view of every other head), 16-bit V or packed
    sequences are refused, and a plan with ``tma`` says so instead of reading the wrong rows."""
    q, k, v = qkv(hq=4, hk=4, nq=64, nk=64, seed=3)
    dp, fp8 = 64, torch.float8_e4m3fn
    kq, ks, km, vq, vs = quant.quant_kv(layout.dense(k), layout.dense(v), dp, True, fp8, configs.K_BLK)
    kv = QuantizedKV(kq, ks, configs.K_BLK, km, vq, vs)
    assert tma_eligible(kv, dp)
    assert not tma_eligible(QuantizedKV(kq, ks, configs.K_BLK, km, layout.dense(v), vs), dp)  # 16-bit V
    every_other = layout.dense(kq.t[:, ::2])  # head stride twice a head's size
    assert not tma_eligible(QuantizedKV(every_other, ks, configs.K_BLK, km, vq, vs), dp)
    cu = torch.tensor([0, 64], dtype=torch.int32)
    packed = layout.packed(kq.t[0].transpose(0, 1).contiguous(), cu, 64)
    assert not tma_eligible(QuantizedKV(packed, ks, configs.K_BLK, km, vq, vs), dp)
    p = dataclasses.replace(plan(64, 64, pv="fp8"), tma=True)
    bad = QuantizedKV(every_other, ks, configs.K_BLK, km, vq, vs)
    from sagebuild.kernels.triton.attn_fwd import attention_forward

    with pytest.raises(ValueError, match="tma_eligible"):
        attention_forward(layout.dense(q), bad, layout.dense(torch.empty_like(q)), p)
    with pytest.raises(ValueError, match="blocks of 64"):  # K quantized for another plan
        attention_forward(
            layout.dense(q), kv, layout.dense(torch.empty_like(q)), plan(64, 64, config="32,128,4,1")
        )
    with pytest.raises(ValueError, match="lse"):
        attention_forward(
            layout.dense(q), kv, layout.dense(torch.empty_like(q)), plan(64, 64, return_lse=True)
        )


@pytest.mark.parametrize(
    ("variant", "causal", "nk", "block_n"),
    [("qk_int8_pv_fp16", True, 88, 16), (FP8, False, 150, 64), (FP8, True, 72, 32)],
)
def test_row_sum_parts_give_the_same_attention(variant, causal, nk, block_n, monkeypatch):
    """P's row sums kept as ``features.ROW_SUM_PARTS`` partial sums per row (the interpreter's
    default) give the attention and LSE of one sum per row up to the order of the additions, on
    ragged and causal tiles; the plan records the choice, and SAGEBUILD_ROW_SUM_PARTS=0 is one sum."""
    from sagebuild.attention import features

    cfg = configs.LaunchConfig(32, block_n, 4, 1)
    q, k, v = qkv(hq=4, hk=2, nq=72, nk=nk, seed=nk)
    results = {}
    for knob in ("0", ""):
        _force(monkeypatch, attn_config=cfg.spec(), row_sum_parts=knob)  # launch_plan sees the config
        record = launch_plan(q, k, v, is_causal=causal, variant=variant, quantization_backend="triton")
        results[record["row_sum_parts"]] = _run(
            variant, q, k, v, is_causal=causal, return_lse=True, config=cfg
        )
    assert sorted(results) == [1, features.ROW_SUM_PARTS]
    (one, one_lse), (parts, parts_lse) = results[1], results[features.ROW_SUM_PARTS]
    assert (parts.float() - one.float()).abs().max() < 2e-3
    _same_lse(parts_lse, one_lse, atol=1e-5, rtol=1e-6)
    close(parts, golden_attention(q, k, v, variant, is_causal=causal, config=cfg), *tol(variant))


# 64-bit offsets: Q/K/V as views of a fused QKV buffer whose token stride (2^30 + 64 elements) puts
# the third token past 2^31 elements. The buffer is allocated, not touched: only the three rows
# become resident (a few hundred MB of RSS at most, the interpreter's own). A 32-bit row offset
# wraps to an address before the buffer, which crashes the process: hence a subprocess.
_OFFSETS_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import conftest  # the interpreter's exact FP8 casts and bf16 dots, as in the test process
import torch
from kernel_inputs import CFG
from sagebuild.attention import sageattn_qk_int8_pv_fp8_triton, sageattn_qk_int8_pv_fp16_triton
from sagebuild.attention.reference import golden_attention

D, N, S = 64, 3, 2**30 + 64
buf = torch.empty(2 * S + 3 * D, dtype=torch.float16)
qkv = torch.as_strided(buf, (1, N, 3, 1, D), (0, S, D, D, 1))
small = torch.randn(1, N, 3, 1, D, generator=torch.Generator().manual_seed(0)).half()
qkv.copy_(small)
q, k, v = qkv.permute(2, 0, 3, 1, 4)  # [B, H, N, D] views, tensor_layout="HND"
qc, kc, vc = small.permute(2, 0, 3, 1, 4).contiguous()
out = {"stride": q.stride(2), "last_row_offset": (N - 1) * q.stride(2) + 2 * D}
for name, fn in (("fp16", sageattn_qk_int8_pv_fp16_triton), ("fp8", sageattn_qk_int8_pv_fp8_triton)):
    for causal in (False, True):
        kw = dict(is_causal=causal, return_lse=True, config=CFG, quantization_backend="triton")
        o, lse = fn(q, k, v, **kw)
        oc, lsec = fn(qc, kc, vc, **kw)
        ref = golden_attention(qc, kc, vc, "qk_int8_pv_" + name, is_causal=causal, config=CFG)
        out[f"{name}/{causal}"] = {
            "equal": torch.equal(o, oc) and torch.equal(lse, lsec),
            "max_err": (o.float() - ref).abs().max().item(),
        }
print(json.dumps(out))
"""


def test_offsets_past_2_to_the_31_elements():
    """Views of one buffer past 2^31 elements (fused QKV of a long video): the quantization and
    attention kernels widen row indices to 64 bits before they meet a stride, so the result is
    the contiguous copies' result bit for bit, and the golden model's."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_OFFSETS_SCRIPT), str(Path(__file__).parent)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"exit {proc.returncode} (a negative one is a signal)\n{proc.stderr[-3000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res.pop("stride") < 2**31 <= res.pop("last_row_offset")  # each stride fits 32 bits, rows do not
    assert len(res) == 4
    for case, r in res.items():
        assert r["equal"], case
        assert r["max_err"] <= tol("qk_int8_pv_" + case.split("/")[0])[0], (case, r)


def test_row_unit_proves_16_byte_rows_only_where_triton_cannot():
    """``layout.row_unit``: 8 (16 bytes of a 16-bit tensor) when every stride is a multiple of 8
    elements but not all of 16 (head dim 40 rows); 1 when Triton's own specialisation proves
    it (multiples of 16), when a stride is not a multiple of 8 (no 16-byte rows to prove) and
    when one reaches 2³¹ (the kernel multiplies back in 32 bits)."""
    view = lambda *shape: layout.dense(torch.empty(shape, dtype=torch.float16))  # noqa: E731
    assert layout.row_unit([view(2, 8, 4096, 40)]) == layout.ROW_UNIT == 8
    assert layout.row_unit([view(2, 8, 4096, 64), view(2, 8, 77, 40)]) == 8
    assert layout.row_unit([view(2, 8, 4096, 64), view(1, 2, 77, 64)]) == 1
    assert layout.row_unit([view(2, 8, 4096, 40), view(1, 2, 3, 36)]) == 1  # 36: not 16-byte rows
    big = layout.SeqView(torch.empty(0), 2**31 + 8, 40, 40, 1, 1, 1)
    assert layout.row_unit([big]) == 1


@pytest.mark.parametrize("variant", ["qk_int8_pv_fp16", FP8])
@pytest.mark.parametrize("how", ["HND", "NHD", "varlen"])
def test_strides_in_16_byte_units_give_the_same_bits(variant, how, monkeypatch):
    """Head dim 40 (SD1.5): Q, O and a 16-bit V pass their strides divided
    by ROW_UNIT to the attention launch, K and V theirs to the quantization launch, and the
    kernels multiply them back (so Triton proves 16-byte rows and vectorises them, ``test_aot``);
    the result is bit for bit the plain strides' (``row_unit`` forced to 1), dense (HND, and NHD
    with 77 keys: odd head strides) and packed, causal, GQA, with LSE."""
    q, k, v = qkv(hq=4, hk=2, nq=72, nk=77, d=40, seed=40, layout_="NHD" if how == "NHD" else "HND")
    if how == "varlen":
        q, k, v = (t[0].transpose(0, 1).contiguous() for t in (q, k, v))
        cu_q, cu_k = torch.tensor([0, 72], dtype=torch.int32), torch.tensor([0, 77], dtype=torch.int32)
        pv = "fp8" if variant == FP8 else "fp16"
        call = lambda: sageattn_varlen(q, k, v, cu_q, cu_k, 72, 77, is_causal=True, pv=pv, config=CFG)  # noqa: E731
    else:
        call = lambda: _run(variant, q, k, v, tensor_layout=how, is_causal=True, return_lse=True)  # noqa: E731
    units = []
    real = layout.row_unit
    for module in (layout, quant):  # the attention launch's and the quantization launch's
        monkeypatch.setattr(module, "row_unit", lambda views: units.append(real(views)) or units[-1])
    wide = call()
    assert units == [8, 8], units
    clear_caches()  # the unit is decided once per plan key
    for module in (layout, quant):
        monkeypatch.setattr(module, "row_unit", lambda views: 1)
    plain = call()
    as_tuple = lambda r: r if isinstance(r, tuple) else (r,)  # noqa: E731
    assert all(torch.equal(a, b) for a, b in zip(as_tuple(wide), as_tuple(plain)))


@pytest.mark.parametrize(("d", "causal"), [(64, False), (96, True), (128, True)])
def test_tma_tiles_on_packed_sequences(d, causal, monkeypatch):
    """Packed sequences by tensor descriptors (K [T, H·Dp] at the head's columns, FP8 V [H·Dp,
    positions] from each sequence's 16-aligned position): bit for bit the pointer path, with
    ragged lengths, an empty sequence, GQA, causal and the split head dim 96 (a descriptor per
    channel piece). (A tile past a sequence's end reads the positions between sequences, which
    hold zeros: ``test_quant``; the interpreter's FP8 dot would not show a NaN there.)"""
    cfg = configs.LaunchConfig(32, 64, 4, 1)
    lens = [37, 0, 90, 16]
    cu = torch.tensor([0, 37, 37, 127, 143], dtype=torch.int32)
    g = torch.Generator().manual_seed(d)
    q = torch.randn(143, 4, d, generator=g).half()
    k, v = (torch.randn(143, 2, d, generator=g).half() for _ in range(2))
    n = max(lens)
    call = lambda: sageattn_varlen(q, k, v, cu, cu, n, n, is_causal=causal, pv="fp8", config=cfg)  # noqa: E731
    _force(monkeypatch, tma="0")
    ref = call()
    descriptors = []
    real_desc = attn_fwd._kv_descriptors
    monkeypatch.setattr(attn_fwd, "_kv_descriptors", lambda *a: descriptors.append(1) or real_desc(*a))
    _force(monkeypatch, tma="1", attn_config=cfg.spec())
    out = call()
    assert descriptors, "the packed call did not take the TMA path"
    assert torch.isfinite(out).all() and torch.equal(out, ref)


@pytest.mark.parametrize("packed", [False, True])
def test_heads_first_grid_gives_the_same_bits(packed, monkeypatch):
    """A causal call's grid (heads, batch, query blocks), longest rows first across heads,
    computes every tile exactly as the (query blocks, heads, batch) grid does: dense with two
    batch entries and GQA, and packed with ragged lengths and an empty sequence."""
    if packed:
        cu = torch.tensor([0, 37, 37, 197, 213], dtype=torch.int32)
        g = torch.Generator().manual_seed(5)
        q = torch.randn(213, 4, 64, generator=g).half()
        k, v = (torch.randn(213, 2, 64, generator=g).half() for _ in range(2))
        call = lambda: sageattn_varlen(q, k, v, cu, cu, 160, 160, is_causal=True, config=CFG)  # noqa: E731
    else:
        q, k, v = qkv(b=2, nq=160, nk=72)
        call = lambda: _run("qk_int8_pv_fp16", q, k, v, is_causal=True, return_lse=True)  # noqa: E731
    grids = []
    real_launch = attn_fwd.launcher.launch
    monkeypatch.setattr(
        attn_fwd.launcher,
        "launch",
        lambda fn, grid, *a, **kw: (
            (fn is attn_fwd._attn_fwd_kernel and grids.append(grid)) or real_launch(fn, grid, *a, **kw)
        ),
    )
    ref = call()
    monkeypatch.setitem(configs._HEADS_FIRST_MAX_KV_BYTES, "interpreter", 1 << 40)
    clear_caches()
    out = call()
    as_tuple = lambda r: r if isinstance(r, tuple) else (r,)  # noqa: E731
    assert all(torch.equal(a, b) for a, b in zip(as_tuple(out), as_tuple(ref)))
    batch, heads = (4, 4) if packed else (2, 4)
    blocks = grids[0][0]
    assert grids == [(blocks, heads, batch), (heads, batch, blocks)], grids
    assert blocks > 4
    monkeypatch.setattr(attn_fwd.launcher, "GRID_YZ_MAX", 4)  # the query blocks past a grid's third dim
    clear_caches()
    again = call()
    assert grids[-1] == (blocks, heads, batch), grids
    assert all(torch.equal(a, b) for a, b in zip(as_tuple(again), as_tuple(ref)))


@pytest.mark.parametrize(
    ("d", "causal", "layout_"), [(64, False, "HND"), (40, True, "HND"), (128, False, "NHD")]
)  # fmt: skip
def test_channel_major_v_gives_the_same_attention(d, causal, layout_, monkeypatch):
    """The ``vcm`` config (FP16 P·V from a channel-major copy of V): the same output bit for bit
    as reading the caller's V, dense (GQA, a padded head dim, NHD strides) and packed; FP8 plans
    ignore it (their V is channel-major already) and the plan records what ran."""
    calls = []
    copy = layout.channel_major
    monkeypatch.setattr(layout, "channel_major", lambda view: calls.append(view) or copy(view))
    q, k, v = qkv(hq=4, hk=2, nq=50, nk=70, d=d, seed=d, layout_=layout_)
    kw = dict(is_causal=causal, tensor_layout=layout_)
    ref = _run("qk_int8_pv_fp16", q, k, v, config="32,16,4,1", **kw)
    out = _run("qk_int8_pv_fp16", q, k, v, config="32,16,4,1,vcm", **kw)
    assert len(calls) == 1 and torch.equal(out, ref)
    assert plan(d, 70, config="32,16,4,1,vcm").record()["config"] == "32,16,4,1,vcm"
    fp8 = plan(d, 70, pv="fp8", config="32,16,4,1,vcm")
    assert not fp8.v_channel_major and fp8.record()["config"] == "32,16,4,1"
    cu = torch.tensor([0, 30, 77], dtype=torch.int32)
    qp, kp, vp = (torch.randn(77, h, d, dtype=torch.float16) for h in (4, 2, 2))
    args = (qp, kp, vp, cu, cu, 47, 47)
    packed = sageattn_varlen(*args, config="32,16,4,1,vcm", pv="fp16")
    assert len(calls) == 2 and torch.equal(packed, sageattn_varlen(*args, config="32,16,4,1", pv="fp16"))
