"""The attention calls as ``torch.library`` custom ops, so ``torch.compile`` traces them whole.

Dynamo cannot trace our host code (plan keys hash pointers); as custom ops with fake
implementations each call is one graph node, and device-dependent decisions are taken inside, at
run time. Ops: ``attention`` (dense), ``attention_lse`` (dense, with the LSE), ``attention_ref``
(dropout: exact attention) and ``attention_varlen`` (packed sequences).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from sagebuild.attention import api, masked

# The calls themselves: what the ops run, and the public functions eagerly (by these names, which
# scripts wrap to count calls).
run_dense = api.attend
run_varlen = api.attend_varlen

_DENSE = (
    "Tensor q, Tensor k, Tensor v, str tensor_layout, bool is_causal, float? sm_scale, str qk_quant_gran, "
    "bool smooth_k, str pv, str pv_accum, str quantization_backend, str? config, Tensor? attn_mask=None"
)


def _op(name: str, schema: str, run: Callable[..., Any], fake: Callable[..., Any]) -> Any:
    op = torch.library.custom_op(f"sagebuild::{name}", run, mutates_args=(), schema=schema)
    op.register_fake(fake)
    return op


# The fakes read only what shapes the outputs: q (and the layout for the LSE).
def _out_like(q: torch.Tensor, *_: Any) -> torch.Tensor:
    """The kernels' output: q's shape and dtype, contiguous (``api._execute`` allocates it so)."""
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def _lse_like(q: torch.Tensor, tensor_layout: str, return_lse: bool = True) -> torch.Tensor:
    if not return_lse:  # an op returns tensors: an empty one stands for "no LSE"
        return q.new_empty((0,), dtype=torch.float32)
    b, h, n = (q.shape[0], q.shape[2], q.shape[1]) if tensor_layout == "NHD" else q.shape[:3]
    return torch.empty((b, h, n), dtype=torch.float32, device=q.device)


def run_reference(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """A call with dropout on ``attention_ref``'s arguments: warned once, then exact attention
    (``masked.reference`` on all but the last, ``where``: the public function's name)."""
    masked.warn_dropout(args[4], args[-1])
    out, lse = masked.reference(*args[:-1])
    return out, (lse if lse is not None else _lse_like(out, "", False))


attention = _op(
    "attention", f"({_DENSE}) -> Tensor", lambda *a: run_dense(*a[:12], False, *a[12:]), _out_like
)
attention_lse = _op(
    "attention_lse",
    f"({_DENSE}) -> (Tensor, Tensor)",
    lambda *a: run_dense(*a[:12], True, *a[12:]),
    lambda q, k, v, tensor_layout, *_: (_out_like(q), _lse_like(q, tensor_layout)),
)
attention_ref = _op(
    "attention_ref",
    "(Tensor q, Tensor k, Tensor v, Tensor? attn_mask, float dropout_p, str tensor_layout, bool is_causal, "
    "float? sm_scale, bool return_lse, str where) -> (Tensor, Tensor)",
    run_reference,
    lambda q, k, v, m, p, tensor_layout, c, s, return_lse, w: (
        _out_like(q),
        _lse_like(q, tensor_layout, return_lse),
    ),
)
attention_varlen = _op(
    "attention_varlen",
    "(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seqlen_q, "
    "int max_seqlen_k, bool is_causal, float? sm_scale, bool smooth_k, str qk_quant_gran, str pv, "
    "str? config) -> Tensor",
    lambda *a: run_varlen(*a),
    _out_like,
)

__all__ = [
    "attention",
    "attention_lse",
    "attention_ref",
    "attention_varlen",
    "run_dense",
    "run_reference",
    "run_varlen",
]
