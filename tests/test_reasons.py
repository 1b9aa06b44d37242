"""One ordered list of reasons decides whether the kernels run a call: ``sageattn``'s input errors
and the SDPA patch's pass-through reasons both come from ``attention.reasons``."""

from __future__ import annotations

import pytest
import torch

from sagebuild import patch
from sagebuild.attention import AttentionInputError, reasons, sageattn
from sagebuild.attention.validate import check_dense, check_varlen, kernel_devices

H = torch.float16
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter (tests/conftest.py) admits it
HERE = kernel_devices()


def _t(*shape, dtype=H):
    return torch.zeros(*shape, dtype=dtype, device=DEV)


def _support(device):
    return patch.DeviceSupport(arch="fakearch", variant="fp16", head_dim_ok=lambda d: True)


def _decide(q, k, v, mask=None, dropout_p=0.0, is_causal=False, scale=None, gqa=True, grad=False):
    return patch.decide(
        q, k, v, mask, dropout_p, is_causal, scale, gqa,
        support_for=_support, gpu_device_types=(DEV,), grad_enabled=grad,
    )  # fmt: skip


BAD = [  # (q, k, v, the first reason's code): each a mistake the kernels refuse
    (_t(1, 2, 32, 64, dtype=torch.float32), None, None, "dtype"),
    (_t(1, 2, 32, 64, dtype=torch.int8), None, None, "dtype"),
    (_t(1, 2, 32, 64), _t(1, 2, 32, 64, dtype=torch.bfloat16), None, "same_dtype"),
    (_t(2, 32, 64), None, None, "rank"),
    (_t(1, 2, 32, 64), _t(1, 2, 32, 32), None, "head_dims"),
    (_t(1, 2, 32, 320), None, None, "head_dim"),
    (_t(1, 2, 32, 64), _t(2, 2, 32, 64), None, "batch"),
    (_t(1, 2, 32, 64), _t(1, 2, 32, 64), _t(1, 2, 33, 64), "kv_len"),
    (_t(1, 2, 32, 64), _t(1, 2, 32, 64), _t(1, 1, 32, 64), "heads"),
    (_t(1, 3, 32, 64), _t(1, 2, 32, 64), _t(1, 2, 32, 64), "heads"),
    (_t(1, 1, 32, 64).expand(65536, 1, 32, 64), None, None, "grid"),
    (_t(1, 2, 0, 64), None, None, "empty"),
]


@pytest.mark.parametrize(("q", "k", "v", "code"), BAD)
def test_validate_raises_and_decide_counts_the_same_first_reason(q, k, v, code):
    k = q if k is None else k
    v = k if v is None else v
    why = reasons.first_reason(reasons.Call(q, k, v, devices=HERE))
    assert why is not None and why.code == code
    assert "\n" not in why.message and why.fix and why.label
    with pytest.raises(AttentionInputError) as err:
        check_dense(q, k, v, "HND")
    assert (err.value.message, err.value.fix) == (why.message, why.fix)
    with pytest.raises(AttentionInputError, match="fix: "):
        sageattn(q, k, v)
    assert _decide(q, k, v) == why.label  # the patch passes it to SDPA, counted by the same rule


def test_reasons_are_ordered_and_stop_at_the_first_failing_stage():
    q = _t(1, 2, 32, 64, dtype=torch.float32)
    k = _t(1, 2, 32, 32, dtype=torch.float32)
    found = reasons.not_supported_reasons(reasons.Call(q, k, k, devices=HERE))
    assert [r.code for r in found] == ["dtype", "head_dims"]  # inputs only: shapes read what they check
    assert found[0] == reasons.first_reason(reasons.Call(q, k, k, devices=HERE))
    q, k = _t(2, 2, 8, 64), _t(1, 2, 8, 64)
    call = reasons.Call(q, k, k, devices=HERE, dropout_p=0.1, grad_enabled=True, enable_gqa=False)
    assert [r.code for r in reasons.not_supported_reasons(call)] == ["batch"]
    q = _t(1, 2, 8, 64).requires_grad_()
    call = reasons.Call(q, q, q, devices=HERE, dropout_p=0.1, grad_enabled=True)
    assert reasons.not_supported_reasons(call) == []  # what the kernels run
    sdpa = [r.code for r in reasons.not_supported_reasons(call, sdpa=True)]
    assert sdpa == ["dropout", "grad", "decode"]  # what the patch leaves to SDPA, in order


def test_sdpa_rules_never_refuse_a_sageattn_call():
    """Decode steps, masks that vary along queries and cross-length causal calls run in the kernels
    when called directly; only the patch leaves them to SDPA."""
    q, kv = _t(1, 2, 4, 64), _t(1, 2, 9, 64)
    mask = torch.ones(4, 9, dtype=torch.bool, device=DEV).tril(5)
    check_dense(q, kv, kv, "HND", mask)
    assert _decide(q, kv, kv).startswith("q_len 4 < 16")
    q = _t(1, 2, 16, 64)
    mask = torch.ones(16, 9, dtype=torch.bool, device=DEV).tril(5)
    check_dense(q, kv, kv, "HND", mask)
    assert _decide(q, kv, kv, mask) == "attn_mask varies along queries (key-padding masks only)"
    assert _decide(q, kv, kv, is_causal=True) == "is_causal with q_len != kv_len"


def test_mask_and_scale_reasons_come_from_their_one_rule():
    q = _t(1, 2, 16, 64)
    bad = _t(3, 1, 1, 16)
    why = reasons.first_reason(reasons.Call(q, q, q, attn_mask=bad, devices=HERE))
    assert why.code == "mask" and "does not broadcast" in why.message
    with pytest.raises(AttentionInputError, match="does not broadcast"):
        sageattn(q, q, q, attn_mask=bad)
    assert _decide(q, q, q, bad) == why.label
    assert _decide(q, q, q, scale=-1.0) == "non-positive or non-finite scale"
    with pytest.raises(AttentionInputError, match="positive and finite"):
        sageattn(q, q, q, sm_scale=-1.0)


def test_packed_calls_share_the_input_rules():
    cu = torch.tensor([0, 8], dtype=torch.int32, device=DEV)
    q32 = _t(8, 2, 64, dtype=torch.float32)
    why = reasons.first_reason(reasons.Call(q32, q32, q32, packed=True, devices=HERE))
    with pytest.raises(AttentionInputError) as err:
        check_varlen(q32, q32, q32, cu, cu, 8, 8)
    assert why is not None and err.value.message == why.message
    four = _t(1, 8, 2, 64)
    with pytest.raises(AttentionInputError, match="packed as"):
        check_varlen(four, four, four, cu, cu, 8, 8)


def test_the_grid_limit_now_passes_through_instead_of_raising_in_the_kernel(monkeypatch):
    """A call beyond the kernels' grid used to reach the kernel, raise, and be counted as
    "kernel raised"; the patch now leaves it to SDPA by the grid rule, before any launch."""
    kernel_calls = []
    monkeypatch.setattr(
        patch, "_backend", patch._Backend(_support, lambda *a, **k: kernel_calls.append(a), (DEV,))
    )
    patch.reset_stats()
    q = _t(1, 1, 1, 64).expand(65536, 1, 1, 64)  # the grid comes first, before the decode rule
    with patch.patch_sdpa():
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert kernel_calls == []
    assert patch.patch_stats().reasons == {"batch entries × heads beyond the kernels' grid": 1}
    patch.reset_stats()


def test_nested_tensors_get_a_clear_error_and_pass_through():
    nt = torch.nested.nested_tensor([_t(2, 16, 64), _t(2, 24, 64)])
    with pytest.raises(AttentionInputError, match="nested tensor.*sageattn_varlen"):
        sageattn(nt, nt, nt)
    assert _decide(nt, nt, nt) == "nested tensor"
