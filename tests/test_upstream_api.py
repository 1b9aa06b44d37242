"""Upstream SageAttention 2.2.0's API (``sagebuild.attention.functions``) as its callers use it.

Each caller test reproduces a real call site (repository and path in its docstring) with its
keywords, layouts, views and shapes scaled down for Triton's CPU interpreter, and compares to fp32
attention within the kernels' bounds: FP16 P·V cos >= 0.999 and rel-L1 <= 0.025, FP8 P·V cos >=
0.998 and rel-L1 <= 0.05 (random inputs at head dim 64: measured 0.012 and 0.033). Calls routed to
SDPA (a mask, dropout) must match fp32 attention to fp16 rounding.

On a GPU the same tests run on it (the interpreter is only switched on without one).
"""

from __future__ import annotations

import inspect
import math
import warnings

import pytest
import torch
from kernel_inputs import fp64_attention as _ref

from sagebuild.attention import functions, ops
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.validate import AttentionInputError

DEV = "cuda" if torch.cuda.is_available() else "cpu"
BOUNDS = {"fp16": (0.999, 0.025), "fp8": (0.998, 0.05), "sdpa": (0.99999, 2e-3)}


def _rand(*shape, seed=0, dtype=torch.float16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def _within(out, ref, kind):
    acc = accuracy(out.float(), ref)
    cos, rel = BOUNDS[kind]
    assert acc["finite"] and acc["cos"] >= cos and acc["rel_l1"] <= rel, (kind, acc)
    return acc


# ---------------------------------------------------------------------------------------------
# The signatures are upstream's


UPSTREAM = {
    "sageattn": "q k v tensor_layout=HND is_causal=False sm_scale=None return_lse=False **kwargs",
    "sageattn_varlen": "q k v cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k is_causal=False "
    "sm_scale=None smooth_k=True **kwargs",
    "sageattn_qk_int8_pv_fp16_triton": "q k v tensor_layout=HND quantization_backend=triton is_causal=False "
    "attn_mask=None sm_scale=None smooth_k=True return_lse=False **kwargs",
    "sageattn_qk_int8_pv_fp16_cuda": "q k v tensor_layout=HND is_causal=False qk_quant_gran=per_thread "
    "sm_scale=None pv_accum_dtype=fp32 smooth_k=True smooth_v=False return_lse=False **kwargs",
    "sageattn_qk_int8_pv_fp8_cuda": "q k v tensor_layout=HND is_causal=False qk_quant_gran=per_thread "
    "sm_scale=None pv_accum_dtype=fp32+fp16 smooth_k=True smooth_v=False return_lse=False **kwargs",
    "sageattn_qk_int8_pv_fp8_cuda_sm90": "q k v tensor_layout=HND is_causal=False qk_quant_gran=per_thread "
    "sm_scale=None pv_accum_dtype=fp32+fp32 smooth_k=True return_lse=False **kwargs",
}


def _sig(fn) -> str:
    """Upstream's part of a signature: the positional parameters and **kwargs (keyword-only
    parameters beyond upstream's are checked by ``test_keyword_only_extras``)."""
    parts = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind is p.KEYWORD_ONLY:
            continue
        if p.kind is p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
        elif p.default is p.empty:
            parts.append(p.name)
        else:
            parts.append(f"{p.name}={p.default}")
    return " ".join(parts)


@pytest.mark.parametrize("name", list(UPSTREAM))
def test_signatures_are_upstreams(name):
    """Positional order, defaults and trailing **kwargs exactly as upstream 2.2.0 (DESIGN.md §6)."""
    assert _sig(getattr(functions, name)) == UPSTREAM[name]
    import sagebuild
    import sagebuild.attention as pkg

    assert getattr(sagebuild, name) is getattr(functions, name) is getattr(pkg, name)


# the keyword-only parameters each public function adds to upstream's signature
KEYWORD_ONLY = {"sageattn": {"attn_mask": None}}


@pytest.mark.parametrize("name", list(UPSTREAM))
def test_keyword_only_extras(name):
    """ComfyUI (comfy/ldm/modules/attention.py) sends masked calls to ``sageattn`` only when
    ``"attn_mask" in inspect.signature(sageattn).parameters``: ours names it, keyword-only after
    upstream's positional parameters, so no positional call changes meaning."""
    params = inspect.signature(getattr(functions, name)).parameters.values()
    extras = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    assert extras == KEYWORD_ONLY.get(name, {})
    assert ("attn_mask" in inspect.signature(getattr(functions, name)).parameters) is (
        name in ("sageattn", "sageattn_qk_int8_pv_fp16_triton")
    )
    assert set(functions.UPSTREAM_NAMES) == set(UPSTREAM)


# ---------------------------------------------------------------------------------------------
# Upstream values accepted and mapped


def test_every_upstream_value_runs_and_unknown_keywords_are_ignored():
    q, k, v = _rand(1, 2, 48, 64), _rand(1, 2, 48, 64, seed=1), _rand(1, 2, 48, 64, seed=2)
    ref, _ = _ref(q, k, v)
    for gran in ("per_thread", "per_warp", "per_block"):
        for accum in ("fp32", "fp16+fp32", "fp16"):
            out = functions.sageattn_qk_int8_pv_fp16_cuda(
                q, k, v, qk_quant_gran=gran, pv_accum_dtype=accum, smooth_v=True, some_future_flag=1
            )
            _within(out, ref, "fp16")
        for accum in ("fp32+fp16", "fp32+fp32", "fp32"):
            out = functions.sageattn_qk_int8_pv_fp8_cuda(q, k, v, qk_quant_gran=gran, pv_accum_dtype=accum)
            _within(out, ref, "fp8")
    for backend in ("triton", "cuda"):
        _within(functions.sageattn_qk_int8_pv_fp16_triton(q, k, v, "HND", backend), ref, "fp16")
    _within(
        functions.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, "HND", False, "per_thread", None, "fp32"),
        ref,
        "fp8",
    )


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda q: functions.sageattn_qk_int8_pv_fp16_cuda(q, q, q, qk_quant_gran="per_row"),
            "qk_quant_gran",
        ),
        (lambda q: functions.sageattn_qk_int8_pv_fp8_cuda(q, q, q, pv_accum_dtype="fp64"), "pv_accum_dtype"),
        (lambda q: functions.sageattn_qk_int8_pv_fp16_triton(q, q, q, "HND", "rocm"), "quantization_backend"),
        (lambda q: functions.sageattn(q, q, q, config=3.5), "config"),
    ],
)
def test_values_upstream_never_took_get_clear_errors(call, match):
    with pytest.raises(AttentionInputError, match=match):
        call(_rand(1, 1, 16, 64))


def test_sageattn_always_smooths_k_like_upstream_and_explicit_functions_honour_it():
    """K with a per-channel offset (video DiTs): smoothing removes it before quantizing."""
    q, k, v = _rand(1, 2, 64, 64), _rand(1, 2, 64, 64, seed=1), _rand(1, 2, 64, 64, seed=2)
    k = k + 8 * _rand(1, 2, 1, 64, seed=3)
    ref, _ = _ref(q, k, v)
    smoothed = accuracy(functions.sageattn(q, k, v), ref)
    assert accuracy(functions.sageattn(q, k, v, smooth_k=False), ref) == smoothed  # ignored, as upstream
    raw = accuracy(functions.sageattn_qk_int8_pv_fp16_triton(q, k, v, smooth_k=False), ref)
    assert raw["rel_l1"] > smoothed["rel_l1"]  # the explicit function honours it


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_lse_is_upstreams_natural_log_with_the_smoothing_shift(layout):
    q, k, v = _rand(1, 4, 40, 64), _rand(1, 2, 56, 64, seed=1), _rand(1, 2, 56, 64, seed=2)
    if layout == "NHD":
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out, lse = functions.sageattn(q, k, v, tensor_layout=layout, return_lse=True)
    ref, ref_lse = _ref(q, k, v, layout)
    _within(out, ref, "fp16")
    assert lse.shape == (1, 4, 40) and lse.dtype == torch.float32
    assert torch.allclose(lse.cpu(), ref_lse.cpu(), atol=0.05)


# ---------------------------------------------------------------------------------------------
# Masks and dropout: never dropped


def test_masks_run_in_the_kernels_unwarned_and_are_honoured():
    """Upstream drops ``attn_mask``; here SDPA's boolean and additive masks run in the kernels
    (tests/test_attention_mask.py has the kernel cases)."""
    q, k, v = _rand(2, 2, 32, 64), _rand(2, 2, 48, 64, seed=1), _rand(2, 2, 48, 64, seed=2)
    pad = torch.ones(2, 1, 1, 48, dtype=torch.bool, device=DEV)
    pad[1, ..., 40:] = False  # key padding of the second sequence
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="sagebuild")
        out = functions.sageattn(q, k, v, attn_mask=pad, dropout_p=0.0)
        out2, lse = functions.sageattn(q, k, v, attn_mask=pad, return_lse=True)
    ref, ref_lse = _ref(q, k, v, mask=pad)
    _within(out, ref, "fp16")
    _within(out2, ref, "fp16")
    assert (lse - ref_lse).abs().max() < 0.05
    additive = torch.zeros(1, 1, 32, 48, device=DEV).masked_fill(~pad[1], -math.inf)
    _within(
        functions.sageattn(q, k, v, attn_mask=additive, is_causal=True),
        _ref(q, k, v, causal=True, mask=additive)[0],
        "fp16",
    )


def test_dropout_goes_to_sdpa_with_a_warning(monkeypatch):
    monkeypatch.setattr(ops, "_warned", set())
    q = _rand(1, 2, 32, 64)
    with pytest.warns(RuntimeWarning, match="dropout_p=0.5"):
        out = functions.sageattn(q, q, q, dropout_p=0.5)
    assert out.shape == q.shape and torch.isfinite(out).all()
    with pytest.warns(RuntimeWarning, match="dropout_p"):
        cu = torch.tensor([0, 16, 32], dtype=torch.int32, device=DEV)
        functions.sageattn_varlen(
            q[0].transpose(0, 1), q[0].transpose(0, 1), q[0].transpose(0, 1), cu, cu, 16, 16, dropout_p=0.3
        )
    with pytest.raises(AttentionInputError, match="attn_mask"):
        functions.sageattn_varlen(q, q, q, cu, cu, 16, 16, attn_mask=torch.ones(1))
    with pytest.raises(AttentionInputError, match="multiple of k's"):  # validate's GQA rule, here too
        functions.sageattn(_rand(1, 3, 32, 64), q, q, dropout_p=0.5)


# ---------------------------------------------------------------------------------------------
# Callers' call sites


def test_comfyui_attention_sage():
    """comfyanonymous/ComfyUI comfy/ldm/modules/attention.py ``attention_sage``: (b, n, heads·d)
    viewed as NHD, ``sageattn(q, k, v, attn_mask=mask, is_causal=False, tensor_layout=...)``; with
    ``skip_reshape`` the inputs are HND, as Flux's fused qkv ``permute(2, 0, 3, 1, 4)`` views
    (comfy/ldm/flux/layers.py); a 2-D mask gets batch and head dims."""
    b, n, heads, d = 2, 48, 2, 64
    q, k, v = (_rand(b, n, heads * d, seed=i) for i in range(3))
    qv, kv, vv = (t.view(b, -1, heads, d) for t in (q, k, v))
    out = functions.sageattn(qv, kv, vv, attn_mask=None, is_causal=False, tensor_layout="NHD")
    _within(out.reshape(b, -1, heads * d), _ref(qv, kv, vv, "NHD")[0].reshape(b, -1, heads * d), "fp16")
    qkv = _rand(b, n, 3 * heads * d, seed=4).view(b, n, 3, heads, d).permute(2, 0, 3, 1, 4)
    fq, fk, fv = qkv[0], qkv[1], qkv[2]  # strided HND views into one buffer
    out = functions.sageattn(fq, fk, fv, attn_mask=None, is_causal=False, tensor_layout="HND")
    _within(
        out.transpose(1, 2).reshape(b, -1, heads * d),
        _ref(fq, fk, fv)[0].transpose(1, 2).reshape(b, -1, heads * d),
        "fp16",
    )
    mask = torch.ones(n, n, dtype=torch.bool, device=DEV).tril()[None, None]  # ndim 2 -> 4, as Comfy does
    out = functions.sageattn(qv, kv, vv, attn_mask=mask, is_causal=False, tensor_layout="NHD")
    _within(out, _ref(qv, kv, vv, "NHD", mask=mask)[0], "fp16")


@pytest.mark.parametrize(
    ("mode", "kind"),
    [
        ("auto", "fp16"),
        ("sageattn_qk_int8_pv_fp16_cuda", "fp16"),
        ("sageattn_qk_int8_pv_fp16_triton", "fp16"),
        ("sageattn_qk_int8_pv_fp8_cuda", "fp8"),
        ("sageattn_qk_int8_pv_fp8_cuda++", "fp8"),
    ],
)
def test_kjnodes_patch_sage_attention(mode, kind):
    """kijai/ComfyUI-KJNodes nodes/model_optimization_nodes.py ``get_sage_func``: every mode's call,
    ``attn_mask=None`` and ``tensor_layout="NHD"`` passed by keyword, ``pv_accum_dtype`` "fp32"
    (fp16_cuda), "fp32+fp32" (fp8_cuda) and "fp32+fp16" (fp8_cuda++); output ``.to(in_dtype)``."""
    b, n, heads, d = 1, 48, 2, 64
    q, k, v = (_rand(b, n, heads * d, seed=i, dtype=torch.bfloat16).view(b, -1, heads, d) for i in range(3))
    kw = {"is_causal": False, "attn_mask": None, "tensor_layout": "NHD"}
    if mode == "auto":
        out = functions.sageattn(q, k, v, **kw)
    elif mode == "sageattn_qk_int8_pv_fp16_cuda":
        out = functions.sageattn_qk_int8_pv_fp16_cuda(q, k, v, pv_accum_dtype="fp32", **kw)
    elif mode == "sageattn_qk_int8_pv_fp16_triton":
        out = functions.sageattn_qk_int8_pv_fp16_triton(q, k, v, **kw)
    elif mode == "sageattn_qk_int8_pv_fp8_cuda":
        out = functions.sageattn_qk_int8_pv_fp8_cuda(q, k, v, pv_accum_dtype="fp32+fp32", **kw)
    else:
        out = functions.sageattn_qk_int8_pv_fp8_cuda(q, k, v, pv_accum_dtype="fp32+fp16", **kw)
    out = out.to(v.dtype)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    _within(out, _ref(q, k, v, "NHD")[0], kind)


def test_wanvideowrapper_custom_ops():
    """kijai/ComfyUI-WanVideoWrapper wanvideo/modules/attention.py: ``sageattn`` inside its own
    custom op ``wanvideo::sageattn`` with ``attn_mask``/``dropout_p``/``is_causal``/``tensor_layout``
    by keyword on NHD inputs, then ``.contiguous()``; ``sageattn_varlen`` with cu_seqlens built
    from ``q_lens``/``k_lens`` and ``dropout_p=0.0`` by keyword."""
    b, n, heads, d = 1, 40, 2, 64
    q, k, v = (_rand(b, n, heads, d, seed=i) for i in range(3))
    out = functions.sageattn(
        q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, tensor_layout="NHD"
    ).contiguous()
    _within(out, _ref(q, k, v, "NHD")[0], "fp16")
    q_lens, k_lens = [24, 40], [32, 16]
    qp, kp, vp = _rand(64, heads, d, seed=5), _rand(48, heads, d, seed=6), _rand(48, heads, d, seed=7)
    cu_q = torch.tensor([0] + list(torch.cumsum(torch.tensor(q_lens), dim=0)), device=DEV, dtype=torch.int32)
    cu_k = torch.tensor([0] + list(torch.cumsum(torch.tensor(k_lens), dim=0)), device=DEV, dtype=torch.int32)
    out = functions.sageattn_varlen(
        qp, kp, vp, cu_q, cu_k, max(q_lens), max(k_lens), dropout_p=0.0, is_causal=False, pv="fp16"
    )
    for i in range(2):
        qs, ks = slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))
        _within(out[qs], _ref(qp[None, qs], kp[None, ks], vp[None, ks], "NHD")[0][0], "fp16")


def test_diffusers_sage_backends():
    """huggingface/diffusers src/diffusers/models/attention_dispatch.py: ``_sage_attention``
    (``sageattn(q=, k=, v=, tensor_layout="NHD", is_causal=, sm_scale=, return_lse=)`` and
    ``out, lse, *_ = out``), the ``_sage_qk_int8_pv_*`` backends (same keywords), and
    ``_sage_varlen_attention`` (query ``flatten(0, 1)``, keys cut to each sequence's valid length
    and concatenated, ``sageattn_varlen(q=, k=, ..., max_seqlen_k=, is_causal=, sm_scale=)``)."""
    b, n, heads, d = 2, 32, 2, 64
    query, key, value = (_rand(b, n, heads, d, seed=i) for i in range(3))
    res = functions.sageattn(
        q=query, k=key, v=value, tensor_layout="NHD", is_causal=False, sm_scale=0.1, return_lse=True
    )
    out, lse, *_ = res
    lse = lse.permute(0, 2, 1)  # the context-parallel forward op does this
    ref, ref_lse = _ref(query, key, value, "NHD", scale=0.1)
    _within(out, ref, "fp16")
    assert lse.shape == (b, n, heads) and torch.allclose(lse.cpu(), ref_lse.permute(0, 2, 1).cpu(), atol=0.05)
    for fn, kind in (
        (functions.sageattn_qk_int8_pv_fp8_cuda, "fp8"),
        (functions.sageattn_qk_int8_pv_fp8_cuda_sm90, "fp8"),
        (functions.sageattn_qk_int8_pv_fp16_cuda, "fp16"),
        (functions.sageattn_qk_int8_pv_fp16_triton, "fp16"),
    ):
        got = fn(
            q=query, k=key, v=value, tensor_layout="NHD", is_causal=True, sm_scale=None, return_lse=False
        )
        _within(got, _ref(query, key, value, "NHD", causal=True)[0], kind)
    seqlens_k = torch.tensor([32, 20], dtype=torch.int32, device=DEV)  # from a key-padding mask
    cu_q = torch.arange(0, b + 1, dtype=torch.int32, device=DEV) * n
    cu_k = torch.zeros(b + 1, dtype=torch.int32, device=DEV)
    cu_k[1:] = torch.cumsum(seqlens_k, dim=0)
    key_packed = torch.cat([key[i, : seqlens_k[i]] for i in range(b)], dim=0)
    value_packed = torch.cat([value[i, : seqlens_k[i]] for i in range(b)], dim=0)
    out = functions.sageattn_varlen(
        q=query.flatten(0, 1),
        k=key_packed,
        v=value_packed,
        cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k,
        max_seqlen_q=n,
        max_seqlen_k=int(seqlens_k.max()),
        is_causal=False,
        sm_scale=None,
    ).unflatten(0, (b, -1))
    for i in range(b):
        L = int(seqlens_k[i])
        _within(out[i], _ref(query[i : i + 1], key[i : i + 1, :L], value[i : i + 1, :L], "NHD")[0][0], "fp16")


def test_upstream_example_wan_processor():
    """thu-ml/SageAttention example/modify_model/modify_wan.py ``SageWanAttnProcessor``: NHD
    projections ``unflatten`` then ``transpose(1, 2)`` (strided HND views), self- and image
    cross-attention (257 image tokens scaled to 24) with ``attn_mask=None, dropout_p=0.0,
    is_causal=False`` by keyword, then ``transpose(1, 2).flatten(2, 3)``."""
    b, n, heads, d = 1, 48, 2, 64
    hid = [_rand(b, n, heads * d, seed=i) for i in range(3)]
    query, key, value = (t.unflatten(2, (heads, -1)).transpose(1, 2) for t in hid)
    img = [_rand(b, 24, heads * d, seed=10 + i).unflatten(2, (heads, -1)).transpose(1, 2) for i in range(2)]
    out_img = functions.sageattn(query, img[0], img[1], attn_mask=None, dropout_p=0.0, is_causal=False)
    out = functions.sageattn(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False)
    _within(out_img.transpose(1, 2).flatten(2, 3), _ref(query, *img)[0].transpose(1, 2).flatten(2, 3), "fp16")
    _within(
        out.transpose(1, 2).flatten(2, 3), _ref(query, key, value)[0].transpose(1, 2).flatten(2, 3), "fp16"
    )


# ---------------------------------------------------------------------------------------------
# torch.compile: one custom op per call, no graph break


class _Block(torch.nn.Module):
    """A transformer-ish block calling the public API the ways callers do."""

    def forward(self, x, mask):
        b, n, c = x.shape
        qkv = x.view(b, n, 3, 2, c // 6).permute(2, 0, 3, 1, 4)
        out, lse = functions.sageattn(qkv[0], qkv[1], qkv[2], is_causal=True, return_lse=True)
        nhd = functions.sageattn_qk_int8_pv_fp8_cuda(
            qkv[0].transpose(1, 2),
            qkv[1].transpose(1, 2),
            qkv[2].transpose(1, 2),
            "NHD",
            pv_accum_dtype="fp32+fp16",
        )
        masked_out = functions.sageattn_qk_int8_pv_fp16_triton(qkv[0], qkv[1], qkv[2], attn_mask=mask)
        cu = torch.tensor([0, n], dtype=torch.int32, device=x.device)
        var = functions.sageattn_varlen(nhd[0], nhd[0], nhd[0], cu, cu, n, n, pv="fp16")
        return out + nhd.transpose(1, 2) + masked_out, lse, var


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_fullgraph_matches_eager(backend, monkeypatch):
    monkeypatch.setattr(ops, "_warned", set())
    x = _rand(1, 32, 6 * 64)
    mask = torch.ones(32, 32, dtype=torch.bool, device=DEV).tril()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        eager = _Block()(x, mask)
        torch._dynamo.reset()
        try:
            compiled = torch.compile(_Block(), fullgraph=True, backend=backend)(x, mask)
        finally:
            torch._dynamo.reset()
    for got, want in zip(compiled, eager):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.equal(got, want)


def test_ops_fake_implementations_agree_with_the_kernels():
    """torch.library.opcheck: schemas, fake (meta) outputs and real outputs agree (shapes, dtypes,
    strides), for the dense ops in both layouts and the varlen op."""
    from sagebuild.attention import ops

    q, k, v = _rand(1, 2, 32, 64), _rand(1, 2, 32, 64, seed=1), _rand(1, 2, 32, 64, seed=2)
    tests = ("test_schema", "test_faketensor")
    for layout in ("HND", "NHD"):
        args = (q, k, v, layout, False, None, "per_warp", True, "auto", "auto", "auto", None)
        torch.library.opcheck(ops.attention, args, test_utils=tests)
        torch.library.opcheck(ops.attention_lse, args, test_utils=tests)
    pad = torch.ones(1, 1, 1, 32, dtype=torch.bool, device=DEV)
    hnd = (q, k, v, "HND", False, None, "per_warp", True, "auto", "auto", "auto", None, pad)
    torch.library.opcheck(ops.attention, hnd, test_utils=tests)
    torch.library.opcheck(
        ops.attention_ref, (q, k, v, None, 0.0, "HND", True, None, True, "t"), test_utils=tests
    )
    cu = torch.tensor([0, 32], dtype=torch.int32, device=DEV)
    qp = q[0].transpose(0, 1).contiguous()
    torch.library.opcheck(
        ops.attention_varlen,
        (qp, qp, qp, cu, cu, 32, 32, False, None, True, "per_warp", "fp16", None),
        test_utils=tests,
    )
