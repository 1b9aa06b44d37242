"""The K/V (and Q block) quantization kernels (``kernels/triton/quant.py``) under Triton's CPU
interpreter: bit-equal to the plain-torch statement of the contract (``reference``), with
(dtype, atol, rtol) triples: the INT8 codes and scales exact, the means to float32 rounding."""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import DEV, qkv

from sagebuild.attention.reference import quant_int8_blocks, quant_v_fp8
from sagebuild.kernels.triton import configs, layout, quant

pytestmark = [
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (a GPU is present)"),
]

# (dtype, atol, rtol) of K's mean against float32 torch: the kernels sum in float32 in another order
FP16 = pytest.param(torch.float16, 1e-6, 1e-5, id="fp16")
BF16 = pytest.param(torch.bfloat16, 1e-6, 1e-5, id="bf16")


@pytest.mark.parametrize("heads", [1, 3, 5, 7, 16, 64])
@pytest.mark.parametrize("n", [100, 4096, 20000])
def test_statistics_parts_fill_one_wave(heads, n):
    """The statistics launch never asks for more programs than PART_WAVES per SM (4 SMs under
    the interpreter): a few programs past one wave would run as a second wave on their own; the
    parts cover every token, each at least PART_MIN_ROWS long unless there is one."""
    dp = 128
    rows = quant.part_rows(n, heads, torch.device(DEV), dp)
    parts = -(-n // rows)
    assert rows % quant.chunk_rows(dp) == 0 and parts * rows >= n
    assert parts * heads <= max(heads, quant.PART_WAVES * 4)
    assert parts == 1 or rows >= quant.PART_MIN_ROWS
    if n >= quant.PART_MIN_ROWS * (parts + 1):  # not too few either: one more part would not fit
        assert (parts + 1) * heads > quant.PART_WAVES * 4


@pytest.mark.parametrize(
    ("d", "stats", "key_order", "dtype", "atol", "rtol"),
    [pytest.param(d, s, ko, *dt.values, id=f"{d}-{s}-{'keyorder' if ko else 'plain'}-{dt.id}")
     for d in (64, 40) for s in ("inline", "one_part", "parts") for ko in (False, True)
     for dt in ((FP16, BF16) if (d, ko) == (64, False) else (FP16,))],
)  # fmt: skip
def test_quant_kernels_follow_the_contract(d, stats, key_order, dtype, atol, rtol, monkeypatch):
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
    _, k, v = qkv(d=d, nk=150, seed=17, dtype=dtype)
    k = k + torch.linspace(-3, 3, d, device=DEV, dtype=k.dtype)
    dp = configs.padded_head_dim(d)
    kq, ks, km, vq, vs = quant.quant_kv(
        layout.dense(k), layout.dense(v), dp, True, torch.float8_e4m3fn, configs.K_BLK, v_key_order=key_order
    )
    # 1 or 3 parts of 150 keys, in chunks of 4096 // 64 rows
    assert seen == {"inline": [], "one_part": [192], "parts": [64]}[stats]
    kf, vf = k.float(), v.float()
    torch.testing.assert_close(km[..., :d], kf.mean(dim=2), atol=atol, rtol=rtol)
    assert torch.count_nonzero(km[..., d:]) == 0
    ref_q, ref_s = quant_int8_blocks(kf - km[:, :, None, :d], configs.K_BLK)
    assert kq.t.shape == (1, 2, 150, dp) and kq.t.dtype == torch.int8
    assert torch.equal(kq.t[..., :d].float(), ref_q) and torch.count_nonzero(kq.t[..., d:]) == 0
    assert torch.equal(ks, ref_s)
    ref_v, ref_vs = quant_v_fp8(vf, torch.float8_e4m3fn)
    assert torch.equal(vs[..., :d], ref_vs)
    if key_order:  # every stored row, padding included: row k holds key σ(k) (zeros past 150)
        rows = layout.key_rows(150, True)
        stored = torch.as_strided(vq.t, (1, 2, rows, dp), vq.t.stride())[..., :d].float()
        padded = torch.cat([ref_v, torch.zeros(1, 2, rows - 150, d)], dim=2)
        assert rows == 160 and torch.equal(stored, padded[:, :, layout.key_order(rows)])
    else:
        assert torch.equal(vq.t[..., :d].float(), ref_v)


@pytest.mark.parametrize("stats", ["inline", "parts"])
@pytest.mark.parametrize(("dtype", "atol", "rtol"), [FP16, BF16])
def test_packed_sequences_quantize_per_sequence(dtype, atol, rtol, stats, monkeypatch):
    """Packed (varlen) K/V: each sequence's mean, INT8 blocks (counted from its own first token)
    and FP8 V scales are its own, as if it were quantized alone; nothing crosses a boundary.
    Statistics in the quantization launch (short sequences) or by parts; an empty sequence has
    a zero mean, not NaN."""
    monkeypatch.setattr(quant, "INLINE_STATS_MAX_ELEMENTS", 1 << 30 if stats == "inline" else 0)
    lens = [23, 70, 0, 9]
    g = torch.Generator().manual_seed(5)
    k = (torch.randn(sum(lens), 2, 64, generator=g) + torch.linspace(-2, 2, 64)).to(dtype)
    v = torch.randn(sum(lens), 2, 64, generator=g).to(dtype)
    cu = torch.tensor([0, 23, 93, 93, 102], dtype=torch.int32)
    kv_, vv = layout.packed(k, cu, max(lens)), layout.packed(v, cu, max(lens))
    kq, ks, km, vq, vs = quant.quant_kv(kv_, vv, 64, True, torch.float8_e4m3fn, configs.K_BLK)
    assert km.shape == (4, 2, 64) and ks.shape == (4, 2, 2)
    assert torch.equal(km[2], torch.zeros(2, 64))
    for b, (lo, hi) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        if lo == hi:
            continue
        kf = k[lo:hi].transpose(0, 1).float()[None]  # [1, H, n, D]
        torch.testing.assert_close(km[b], kf.mean(dim=2)[0], atol=atol, rtol=rtol)
        ref_q, ref_s = quant_int8_blocks(kf - km[b][None, :, None, :], configs.K_BLK)
        assert torch.equal(kq.t[lo:hi].transpose(0, 1).float(), ref_q[0]), b
        assert torch.equal(ks[b, :, : ref_s.shape[-1]], ref_s[0]), b
        ref_v, ref_vs = quant_v_fp8(v[lo:hi].transpose(0, 1).float()[None], torch.float8_e4m3fn)
        at = layout.packed_v_start(lo, b)  # FP8 V's sequences start 16-byte aligned
        assert torch.equal(vs[b], ref_vs[0]) and torch.equal(
            vq.t[at : at + hi - lo].transpose(0, 1).float(), ref_v[0]
        ), b
        # rows up to the next multiple of 16 are written as zeros (16-byte stores), short of
        # the next sequence's start
        pad_end = at + -(-(hi - lo) // 16) * 16
        assert b + 1 == len(lens) or pad_end <= layout.packed_v_start(hi, b + 1)
        assert not vq.t[at + hi - lo : pad_end].float().any(), b


def test_int8_codes_round_ties_away_from_zero():
    """A block whose amax is 127 has step 1, so the codes are the rounded inputs themselves:
    ties go away from zero, values just below a tie go down (0.49999997 + 0.5 rounds to 1 in
    float32: the kernels must not add 0.5), -0.0 and the clamp behave. The golden model agrees."""
    ties = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 0.49999997, -0.49999997, -0.0, 0.0,
            3.4999998, -3.4999998, 127.0, -127.0]  # fmt: skip
    x = torch.zeros(1, 1, 16, 64)
    x[0, 0, :, 0] = torch.tensor(ties)
    x[0, 0, 0, 1] = 127.0  # amax of the block: step = 127 / 127 = 1
    q, s, _, _ = quant.quant_blocks(layout.dense(x.to(DEV)), None, 16, 1.0, 64)
    assert torch.equal(s, torch.ones(1, 1, 1))
    expected = torch.tensor([1, -1, 2, -2, 3, -3, 127, -127, 0, 0, 0, 0, 3, -3, 127, -127], dtype=torch.int8)
    assert torch.equal(q.t[0, 0, :, 0], expected)
    ref_q, ref_s = quant_int8_blocks(x, 16)
    assert torch.equal(ref_q[0, 0, :, 0], expected.float()) and torch.equal(ref_s, s)


def test_key_order_needs_dense_inputs_and_whole_groups():
    k = qkv(nk=64)[1]
    with pytest.raises(ValueError, match="v_key_order"):
        quant.quant_blocks(layout.dense(k), None, 16, 1.0, 64, v=layout.dense(k),
                           fp8_dtype=torch.float8_e4m3fn, inline_stats=True, v_key_order=True)  # fmt: skip
    assert quant.fp8_max(torch.float8_e4m3fn) == 448.0 and quant.fp8_max(torch.float8_e4m3fnuz) == 240.0


@pytest.mark.parametrize("n", [77, 2100])  # statistics inside the quantization launch, and by parts
@pytest.mark.parametrize("fp8", [None, torch.float8_e4m3fn])
def test_strides_in_16_byte_units_give_the_same_codes(n, fp8, monkeypatch):
    """Head dim 40 in contiguous tensors: K's and V's strides go to the statistics and
    quantization launches divided by ``layout.ROW_UNIT`` (so Triton proves 16-byte rows) and the
    kernels multiply them back: codes, scales, means and FP8 V are bit for bit those of the
    plain strides."""
    _, k, v = qkv(hq=2, hk=2, nq=8, nk=n, d=40, seed=n)
    kv = layout.dense(k), layout.dense(v)
    assert layout.row_unit(kv) == layout.ROW_UNIT
    wide = quant.quant_kv(*kv, 64, True, fp8, configs.K_BLK)
    monkeypatch.setattr(quant, "row_unit", lambda views: 1)
    plain = quant.quant_kv(*kv, 64, True, fp8, configs.K_BLK)
    for a, b in zip(wide, plain):
        if a is not None:
            assert torch.equal(*(x.t if isinstance(x, layout.SeqView) else x for x in (a, b)))


@pytest.mark.parametrize("blk", [configs.K_BLK, configs.K_BLK_WIDE])
def test_packed_fp8_v_holds_zeros_between_sequences(blk, monkeypatch):
    """Packed FP8 V: every position of the buffer outside the sequences' rows is written as
    zero by the quantization launch, whatever the allocation held (here NaN bytes), so that a
    key tile read past a sequence's end by a tensor descriptor meets finite values only: the
    gaps left by 16-aligned starts, an empty sequence's slot, and the buffer's tail (here also
    tokens past the last sequence). The sequences' own rows are the dense quantization of each
    sequence."""
    real_empty = quant.empty_like_view

    def nan_filled(view, *a, **kw):
        out = real_empty(view, *a, **kw)
        out.t.view(torch.uint8).fill_(0x7F)  # an FP8 e4m3 NaN in every byte
        return out

    monkeypatch.setattr(quant, "empty_like_view", nan_filled)
    lens = [37, 0, 90, 16, 1]
    cu = torch.tensor([0, 37, 37, 127, 143, 144], dtype=torch.int32)
    g = torch.Generator().manual_seed(blk)
    k, v = (torch.randn(200, 2, 64, generator=g).half() for _ in range(2))  # 56 tokens past the last
    kq, ks, km, vq, vs = quant.quant_kv(
        layout.packed(k, cu, max(lens)), layout.packed(v, cu, max(lens)), 64, True, torch.float8_e4m3fn, blk
    )
    storage = vq.t.permute(1, 2, 0)  # [H, Dp, positions] as allocated
    assert storage.shape[-1] == layout.packed_v_tokens(200, len(lens))
    assert not storage.float().isnan().any()
    written = torch.zeros(storage.shape[-1], dtype=torch.bool)
    for b, n in enumerate(lens):
        start = layout.packed_v_start(int(cu[b]), b)
        written[start : start + n] = True
        _, _, _, dense_v, _ = quant.quant_kv(
            *(layout.dense(t[cu[b] : cu[b + 1]].transpose(0, 1)[None]) for t in (k, v)),
            64, True, torch.float8_e4m3fn, blk,
        )  # fmt: skip
        assert torch.equal(storage[:, :, start : start + n].float(), dense_v.t[0].transpose(1, 2).float())
    assert (storage[:, :, ~written].float() == 0).all()
