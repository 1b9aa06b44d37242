"""Upstream's internal names (``sagebuild.upstream_internals``) as KJNodes and LightX2V call them.

Layouts are checked against upstream's definitions (thu-ml/SageAttention sageattention/quant.py,
sageattention/triton/quant_per_thread.py, sageattention/triton/quant_per_block.py: shapes, dtypes,
which rows share a scale, V's FP8 transpose/pad/permutation) by an independent torch computation,
and every quantizer's output dequantizes back to its input. The raw kernels run the callers' call
sites (file named in each test) against exact attention with ``test_upstream_api``'s bounds. CPU
tests use Triton's interpreter; on a GPU they run there.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import triton
from kernel_inputs import fp64_attention

from sagebuild.attention.metrics import accuracy
from sagebuild.attention.validate import AttentionInputError
from sagebuild.kernels.triton.quant_per_thread import quant_query_per_thread_int8_kernel
from sagebuild.upstream_internals import device, raw
from sagebuild.upstream_internals import quant as uq

DEV = "cuda" if torch.cuda.is_available() else "cpu"
BOUNDS = {"fp16": (0.999, 0.025), "fp8": (0.998, 0.05)}


def _rand(*shape, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def _within(out_nhd, ref_hnd, kind):
    acc = accuracy(out_nhd.transpose(1, 2).float(), ref_hnd)
    cos, rel = BOUNDS[kind]
    assert acc["finite"] and acc["cos"] >= cos and acc["rel_l1"] <= rel, (kind, acc)


def _groups_max(x_hnd, index, entries):
    """Independent reference: each scale entry's amax over the rows mapped to it, / 127."""
    b, h, n, _ = x_hnd.shape
    amax = torch.zeros(b, h, entries, dtype=torch.float32, device=x_hnd.device)
    rows = x_hnd.float().abs().amax(-1)
    for e in range(entries):
        picked = rows[..., index == e]
        if picked.shape[-1]:
            amax[..., e] = picked.amax(-1)
    return amax.clamp_min(1e-8) / 127


# ---------------------------------------------------------------------------------------------
# Quantizers: upstream's shapes, dtypes, scale layouts; dequantization


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize(("blkq", "warpq", "blkk", "warpk"), [(128, 32, 64, 64), (64, 16, 128, 128)])
def test_per_thread_layout_and_dequantization(layout, blkq, warpq, blkk, warpk):
    """Q row r shares scale (r // WARPQ)·8 + r % 8, K row r (r // WARPK)·4 + (r % 8) // 2; scales
    [B, H, cdiv(N, BLK)·BLK/WARP·{8, 4}] float32, codes int8 in the input's shape and layout."""
    q, k = _rand(2, 3, 100, 64), _rand(2, 1, 70, 64, seed=1)
    qi, qs, ki, ks = uq.per_thread_int8(
        *((t if layout == "HND" else t.transpose(1, 2).contiguous()) for t in (q, k)),
        BLKQ=blkq, WARPQ=warpq, BLKK=blkk, WARPK=warpk, tensor_layout=layout,
    )  # fmt: skip
    shape = (lambda t: t.shape) if layout == "HND" else (lambda t: t.transpose(1, 2).shape)
    assert qi.dtype == ki.dtype == torch.int8 and qi.shape == shape(q) and ki.shape == shape(k)
    assert qs.dtype == ks.dtype == torch.float32
    assert qs.shape == (2, 3, triton.cdiv(100, blkq) * (blkq // warpq) * 8)
    assert ks.shape == (2, 1, triton.cdiv(70, blkk) * (blkk // warpk) * 4)
    q_index, k_index = (
        uq.thread_index(100, warpq, True, q.device),
        uq.thread_index(70, warpk, False, k.device),
    )
    assert torch.allclose(
        qs[..., : int(q_index.max()) + 1],
        _groups_max(q, q_index, qs.shape[-1])[..., : int(q_index.max()) + 1],
    )
    assert torch.allclose(
        ks[..., : int(k_index.max()) + 1],
        _groups_max(k, k_index, ks.shape[-1])[..., : int(k_index.max()) + 1],
    )
    for x, codes, scale, index in ((q, qi, qs, q_index), (k, ki, ks, k_index)):
        back = uq.dequantize_int8(codes, scale, index, layout)
        assert (back - x.float()).abs().max() <= 0.5001 * uq.row_scales(scale, x.shape[2], index).max()


def test_per_thread_kernel_with_upstreams_argument_order():
    """lightx2v/common/ops/attn/sage_attn.py (ModelTC/LightX2V) ``quant_query_per_thread_int8``:
    the kernel launched by name with grid (cdiv(L, BLKQ)·BLKQ/WARPQ·8, heads, batch), NHD strides
    in (batch, head, token) order, ``C=head_dim, BLK=WARPQ``; BLKQ=64, WARPQ=16 (its sm90 path)."""
    q = _rand(1, 75, 4, 128)
    b, n, h, d = q.shape
    q_int8 = torch.empty(q.shape, dtype=torch.int8, device=DEV)
    q_scale = torch.empty((b, h, triton.cdiv(n, 64) * (64 // 16) * 8), device=DEV, dtype=torch.float32)
    quant_query_per_thread_int8_kernel[(q_scale.shape[-1], h, b)](
        q, q_int8, q_scale, n, q.stride(0), q.stride(2), q.stride(1), q_int8.stride(0), q_int8.stride(2),
        q_int8.stride(1), q_scale.stride(0), q_scale.stride(1), C=d, BLK=16,
    )  # fmt: skip
    index = uq.thread_index(n, 16, True, q.device)
    back = uq.dequantize_int8(q_int8, q_scale, index, "NHD")
    assert (back - q.transpose(1, 2).float()).abs().max() <= 0.5001 * q_scale.max()


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_per_block_and_per_warp_layouts(layout):
    """per_block: Q scales [B, H, cdiv(N, BLKQ)] times sm_scale·log2 e, K [B, H, cdiv(N, BLKK)] of
    K minus km; per_warp: Q [B, H, cdiv(N, BLKQ)·BLKQ/WARPQ] unscaled, the slices past N padded."""
    q, k = _rand(1, 2, 200, 64), _rand(1, 2, 90, 64, seed=1) + 3.0
    km = k.mean(dim=2, keepdim=True)
    to = (lambda t: t) if layout == "HND" else (lambda t: t.transpose(1, 2).contiguous())
    qi, qs, ki, ks = uq.per_block_int8(to(q), to(k), km=to(km), sm_scale=0.1, tensor_layout=layout)
    assert qs.shape == (1, 2, 2) and ks.shape == (1, 2, 2) and qi.shape == to(q).shape
    back_q = uq.dequantize_int8(qi, qs, uq.block_index(200, 128, q.device), layout)
    assert torch.allclose(back_q, q.float() * 0.1 * 1.44269504, atol=float(qs.max()))
    back_k = uq.dequantize_int8(ki, ks, uq.block_index(90, 64, k.device), layout)
    assert torch.allclose(back_k, (k - km).float(), atol=float(ks.max()))
    qi, qs, ki, ks = uq.per_warp_int8(to(q), to(k), km=to(km), BLKQ=128, WARPQ=32, tensor_layout=layout)
    assert qs.shape == (1, 2, 8) and ks.shape == (1, 2, 2)
    assert torch.all(qs[..., 7] == uq.ZERO_BLOCK_SCALE)  # rows 224-255 do not exist
    back_q = uq.dequantize_int8(qi, qs, uq.block_index(200, 32, q.device), layout)
    assert torch.allclose(back_q, q.float(), atol=float(qs.max()))


@pytest.mark.parametrize("layout", ["HND", "NHD"])
@pytest.mark.parametrize("smooth_v", [True, False])
def test_per_channel_fp8_layout(layout, smooth_v):
    """float8_e4m3fn [B, H, D, P] (HND) or [B, D, H, P] (NHD), P = tokens padded to 64; within
    each 16 tokens position j holds token [0,1,8,9,2,3,10,11,4,5,12,13,6,7,14,15][j]; scale
    [B, H, D] = amax / scale_max (of V minus its mean when smoothing)."""
    n = 70
    v = (torch.arange(n, device=DEV).float()[None, None, :, None] + 1).expand(1, 2, n, 8) / n
    v = v.half().contiguous()
    vin = v if layout == "HND" else v.transpose(1, 2).contiguous()
    v8, vs, vm = uq.per_channel_fp8(vin, layout, scale_max=448.0, smooth_v=smooth_v)
    assert v8.dtype == torch.float8_e4m3fn and vs.shape == (1, 2, 8) and vs.dtype == torch.float32
    assert v8.shape == ((1, 2, 8, 128) if layout == "HND" else (1, 8, 2, 128))
    assert (vm is not None) is smooth_v
    hnd8 = v8 if layout == "HND" else v8.permute(0, 2, 1, 3)
    mean = float(vm[0, 0, 0]) if smooth_v else 0.0
    stored = hnd8.float()[0, 0, 0] * vs[0, 0, 0] + mean
    expect_tokens = torch.tensor(uq.V_PERM, device=DEV)
    for group in range(hnd8.shape[-1] // 16):
        for j, t in enumerate(expect_tokens.tolist()):
            token = group * 16 + t
            want = float(v[0, 0, token, 0]) if token < n else (0.0 if not smooth_v else None)
            if want is not None:
                # e4m3 keeps 3 mantissa bits: within 1/16 of the stored (smoothed) value
                assert abs(float(stored[group * 16 + j]) - want) <= abs(want - mean) / 16 + 1e-3, (group, j)
    back = uq.dequantize_fp8_v(v8, vs, vm, n, layout)
    assert (back - v.float()).abs().max() <= 0.07 * v.float().abs().max()


def test_sub_mean_and_bad_layout():
    v = _rand(1, 2, 40, 64, dtype=torch.bfloat16)
    smoothed, vm = uq.sub_mean(v)
    assert smoothed.dtype == torch.float16 and vm.dtype == torch.bfloat16 and vm.shape == (1, 2, 64)
    assert smoothed.float().mean(2).abs().max() < 1e-2
    with pytest.raises(AttentionInputError, match="Unknown tensor layout"):
        uq.per_thread_int8(v, v, tensor_layout="BHSD")
    with pytest.raises(AttentionInputError, match="warp slices"):
        uq.per_thread_int8(v, v, WARPQ=24)


# ---------------------------------------------------------------------------------------------
# The raw kernels and attn_false at the callers' call sites


def _kjnodes_inputs(n=96, nk=80, heads=2, d=64):
    """KJNodes' NHD q/k/v (``_sageattn_int8_fp8_nhd``'s qkv list) and exact attention (HND)."""
    q, k, v = _rand(1, heads, n, d), _rand(1, heads, nk, d, seed=1), _rand(1, heads, nk, d, seed=2)
    ref, _ = fp64_attention(q, k, v)
    return (t.transpose(1, 2).contiguous() for t in (q, k, v)), ref


@pytest.mark.parametrize("arch", ["sm80", "sm75", "sm89", "sm90", "sm120"])
def test_kjnodes_memory_efficient_patch(arch):
    """kijai/ComfyUI-KJNodes nodes/ltxv_nodes.py ``_sageattn_int8_fp8_nhd`` (LTX2, WanVideo and
    MiniMax H3 patches), each arch branch: K smoothed in place, Q/K quantized (per thread on
    sm80/89/90 by its own int64 copy of upstream's per-thread kernels, reproduced here with ours;
    per block + ``attn_false`` on sm75; ``per_warp_int8_cuda`` on sm120), V as FP16 or through
    ``per_channel_fp8`` (sm90: V padded to 128 tokens first; sm120: ``scale_max=2.25`` for the
    FP16-accumulating kernel), then the raw kernel by position into a preallocated ``o``."""
    (q, k, v), ref = _kjnodes_inputs()
    sm_scale, dtype = q.shape[-1] ** -0.5, q.dtype
    k = k - k.mean(dim=1, keepdim=True)
    if arch == "sm75":
        qi, qs, ki, ks = uq.per_block_int8(q, k, sm_scale=sm_scale, tensor_layout="NHD")
        o, _ = raw.attn_false(
            qi, ki, v, qs, ks, tensor_layout="NHD", output_dtype=dtype, attn_mask=None, return_lse=False
        )
        return _within(o, ref, "fp16")
    if arch == "sm120":
        qi, qs, ki, ks = uq.per_warp_int8(
            q, k, km=k.mean(dim=1, keepdim=True), tensor_layout="NHD", BLKQ=128, WARPQ=32, BLKK=64
        )
        v8, vs, _ = uq.per_channel_fp8(v, tensor_layout="NHD", scale_max=2.25, smooth_v=False)
        o = torch.empty(qi.size(), dtype=dtype, device=DEV)
        raw.sm89.qk_int8_sv_f8_accum_f16_fuse_v_scale_attn_inst_buf(
            qi, ki, v8, o, qs, ks, vs, 0, 0, 2, sm_scale, 0
        )
        return _within(o, ref, "fp8")
    blk = dict(BLKQ=64, WARPQ=16, BLKK=128, WARPK=128) if arch == "sm90" else {}
    qi, qs, ki, ks = uq.per_thread_int8(q, k, tensor_layout="NHD", **blk)
    o = torch.empty(qi.size(), dtype=dtype, device=DEV)
    if arch == "sm80":
        raw.sm80.qk_int8_sv_f16_accum_f32_attn(qi, ki, v.to(torch.float16), o, qs, ks, 0, 0, 3, sm_scale, 0)
        return _within(o, ref, "fp16")
    if arch == "sm90":
        pad = 128 - v.size(1) % 128
        v = torch.cat(
            [v, torch.zeros(v.size(0), pad, v.size(2), v.size(3), dtype=v.dtype, device=DEV)], dim=1
        )
    v8, vs, _ = uq.per_channel_fp8(v, tensor_layout="NHD", smooth_v=False)
    kernels = raw.sm90 if arch == "sm90" else raw.sm89
    kernels.qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf(
        qi, ki, v8, o, qs, ks, vs, 0, 0, 3, sm_scale, 0
    )
    _within(o, ref, "fp8")


def test_lightx2v_k_int8_v_fp8_weight():
    """lightx2v/common/ops/attn/sage_attn.py (ModelTC/LightX2V) ``SageAttn2KInt8VFP8Weight.apply``:
    K and V quantized ahead (per-thread INT8 K with its scales, FP8 V with its scales), Q by
    ``quant_query_per_thread_int8_kernel`` (BLKQ=64, WARPQ=16), then ``_qattn_sm90``'s
    ``qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf(q_int8, k_int8, v_fp8, o, q_scale,
    k_scale, v_scale, 0, 0, 3, sm_scale, 0)`` on NHD tensors; the LSE when asked, base 2."""
    (q, k, v), ref = _kjnodes_inputs(n=64, nk=64)
    _, _, k_int8, k_scale = uq.per_thread_int8(
        q, k, BLKQ=64, WARPQ=16, BLKK=128, WARPK=128, tensor_layout="NHD"
    )
    v_fp8, v_scale, _ = uq.per_channel_fp8(v, tensor_layout="NHD", smooth_v=False)
    q_int8, q_scale, _, _ = uq.per_thread_int8(
        q, k, BLKQ=64, WARPQ=16, BLKK=128, WARPK=128, tensor_layout="NHD"
    )
    o = torch.empty(q.size(), dtype=q.dtype, device=DEV)
    lse = raw.sm90.qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf(
        q_int8, k_int8, v_fp8, o, q_scale, k_scale, v_scale, 0, 0, 3, q.shape[-1] ** -0.5, 1
    )
    _within(o, ref, "fp8")
    ref_lse = fp64_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))[1]
    assert lse.shape == (1, 2, 64) and torch.allclose(lse / 1.44269504, ref_lse, atol=0.05)


def test_raw_kernels_refuse_what_they_cannot_read():
    (q, k, v), _ = _kjnodes_inputs()
    qi, qs, ki, ks = uq.per_thread_int8(q, k, tensor_layout="NHD")
    o = torch.empty(qi.size(), dtype=q.dtype, device=DEV)
    with pytest.raises(AttentionInputError, match="takes 11 arguments"):
        raw.sm80.qk_int8_sv_f16_accum_f32_attn(qi, ki, v, o, qs, ks, 0, 0, 3, 0.1)
    with pytest.raises(AttentionInputError, match="qk_quant_gran 1"):
        raw.sm80.qk_int8_sv_f16_accum_f32_attn(qi, ki, v, o, qs, ks, 0, 0, 1, 0.1, 0)
    with pytest.raises(AttentionInputError, match="no warp size"):
        raw.sm80.qk_int8_sv_f16_accum_f32_attn(qi, ki, v, o, qs[..., :7], ks, 0, 0, 3, 0.1, 0)
    with pytest.raises(AttentionInputError, match="attn_false reads one per 128"):
        raw.attn_false(qi, ki, v, qs, ks, tensor_layout="NHD")


# ---------------------------------------------------------------------------------------------
# Device queries


def test_device_queries_name_amd_gpus_by_their_gfx_arch(monkeypatch):
    """KJNodes applies its patches only when ``get_cuda_arch_versions()`` answers; upstream's
    answers "sm115" for a gfx1151 on ROCm. Ours: the gfx arch, and HIP's version."""
    props = SimpleNamespace(gcnArchName="gfx1151:sramecc-:xnack-", major=11, minor=5)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.version, "hip", "7.2.41134")
    monkeypatch.setattr(torch.version, "cuda", None)
    assert device.get_cuda_arch_versions() == ["gfx1151", "gfx1151"]
    assert device.get_cuda_version() == (7, 2)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(major=9, minor=0))
    assert device.get_cuda_arch_versions() == ["sm90", "sm90"] and device.get_cuda_version() == (12, 8)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert device.get_cuda_arch_versions() == [] and device.get_cuda_version() == (None, None)
