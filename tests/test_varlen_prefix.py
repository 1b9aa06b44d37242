"""SGLang's prefix-cached prefill through ``sageattn_varlen``, checked against exact attention.

sgl-project/sglang python/sglang/srt/layers/attention/sage_attention_backend.py
(``SageAttnBackend.forward_extend``): each request's new tokens are the queries (``cu_seqlens_q``
from ``extend_seq_lens``) and its cached prefix plus new tokens the keys (``cu_seqlens_k`` from
``seq_lens``, gathered by ``_gather_kv_for_extend``), so ``cu_seqlens_q`` ≠ ``cu_seqlens_k``; the
call is ``sageattn_varlen(q, k_full, v_full, cu_seqlens_q=, cu_seqlens_k=, max_seqlen_q=,
max_seqlen_k=, is_causal=True, sm_scale=layer.scaling)`` on ``.contiguous()`` packed tensors with
GQA, and V's head dim may differ from Q's (``layer.v_head_dim``: the output is viewed as
``(-1, heads * v_head_dim)``). Causal is bottom-right: new token i sees the prefix and new tokens
0..i. Upstream's kernels mask top-left, which hides the prefix from the first new tokens.
"""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import fp64_attention

from sagebuild.attention import functions
from sagebuild.attention.metrics import accuracy

DEV = "cuda" if torch.cuda.is_available() else "cpu"
# test_upstream_api's bounds (random inputs): FP16 P·V, and any P·V (the plan may pick FP8)
BOUNDS = {"fp16": (0.999, 0.025), "auto": (0.998, 0.05)}


def _prefill(prefix, extend, heads_q, heads_kv, dqk, dv, seed=0):
    """SGLang's packed extend batch: (q, k_full, v_full, cu_q, cu_k, max_q, max_k)."""
    g = torch.Generator().manual_seed(seed)
    seq = [p + e for p, e in zip(prefix, extend)]

    def rand(*shape):
        return torch.randn(*shape, generator=g).to(torch.float16).to(DEV)

    q = rand(sum(extend), heads_q, dqk)
    k, v = rand(sum(seq), heads_kv, dqk), rand(sum(seq), heads_kv, dv)
    pad = (1, 0)
    cu_q = torch.nn.functional.pad(torch.cumsum(torch.tensor(extend, device=DEV), 0, dtype=torch.int32), pad)
    cu_k = torch.nn.functional.pad(torch.cumsum(torch.tensor(seq, device=DEV), 0, dtype=torch.int32), pad)
    return q, k, v, cu_q, cu_k, max(extend), max(seq)


def _check(prefix, extend, heads_q, heads_kv, dqk, dv, pv="auto"):
    q, k, v, cu_q, cu_k, max_q, max_k = _prefill(prefix, extend, heads_q, heads_kv, dqk, dv)
    scaling = dqk**-0.5 * 0.9  # a model's own layer.scaling
    out = functions.sageattn_varlen(
        q.contiguous(), k.contiguous(), v.contiguous(), cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
        max_seqlen_q=max_q, max_seqlen_k=max_k, is_causal=True, sm_scale=scaling, pv=pv,
    )  # fmt: skip
    assert out.shape == (q.shape[0], heads_q, dv) and out.is_contiguous()
    out.view(-1, heads_q * dv)  # what SGLang does with it
    for i in range(len(extend)):
        qs = slice(int(cu_q[i]), int(cu_q[i + 1]))
        ks = slice(int(cu_k[i]), int(cu_k[i + 1]))
        ref, _ = fp64_attention(q[None, qs], k[None, ks], v[None, ks], "NHD", causal=True, scale=scaling)
        acc = accuracy(out[qs].float(), ref[0])
        cos, rel = BOUNDS[pv]
        assert acc["finite"] and acc["cos"] >= cos and acc["rel_l1"] <= rel, (i, acc)
    # the first new token of a cached request attends to its whole prefix, not to itself alone
    first = int(cu_q[0])
    alone = v[int(cu_k[0]) + prefix[0]].float().repeat_interleave(heads_q // heads_kv, 0)
    assert prefix[0] == 0 or not torch.allclose(out[first].float(), alone, atol=1e-2)


@pytest.mark.parametrize(
    ("dqk", "dv"),
    [(64, 64), (64, 32), (32, 64)],
    ids=["same-head-dim", "v-narrower", "v-wider"],
)
def test_sglang_prefix_cached_causal_prefill(dqk, dv):
    """Two requests, one with a 40-token cached prefix, one fresh (prefix 0); GQA 4:2."""
    _check([40, 0], [24, 33], 4, 2, dqk, dv, pv="fp16")


@pytest.mark.gpu
@pytest.mark.parametrize(("dqk", "dv"), [(128, 128), (192, 128)], ids=["llama", "mla-shaped"])
def test_sglang_prefix_cached_causal_prefill_gpu(dqk, dv):
    """Llama-3.1-8B's shape on one GPU (32 query heads, 8 KV heads, head dim 128; the MLA-shaped
    case has Q/K 192, V 128): prefixes of 0 to 3000 tokens, the plan's own P·V."""
    _check([0, 1000, 3000, 17], [512, 700, 129, 2048], 32, 8, dqk, dv)
