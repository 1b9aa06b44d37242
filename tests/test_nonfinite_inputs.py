"""Inf and NaN in Q, K or V reach the output as SDPA's do (issue 60): every output element that
torch's SDPA makes NaN (or, for an inf, not finite) among the rows that attend the bad value is
NaN (not finite) in ours, never a number quantized from it. The quantization's granularity bounds
the spread: a bad Q row stays in its row (the other rows of its scale block are exact), a bad V
value in its channel, and a bad K value in the rows that attend its quantization block of keys.

Runs on Triton's CPU interpreter, and on the GPU (marked ``gpu``), where a float max drops NaN
(maxnum) and the kernels must keep it by other means (``quant.abs_bits``)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sagebuild.attention import sageattn_qk_int8_pv_fp8_cuda, sageattn_qk_int8_pv_fp16_triton
from sagebuild.attention.metrics import accuracy

pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
]

INTERPRETER_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter run (a GPU is present)")
DEVICES = [pytest.param("cpu", marks=INTERPRETER_ONLY), pytest.param("cuda", marks=pytest.mark.gpu)]
FUNCS = {"fp16": sageattn_qk_int8_pv_fp16_triton, "fp8": sageattn_qk_int8_pv_fp8_cuda}
B, H, N, D = 1, 2, 80, 64
ROW, CH = 37, 5  # the bad element: token 37, channel 5 of head 0


def _inputs(where: str, value: float, device: str) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(60)
    q, k, v = (torch.randn(B, H, N, D, generator=g).half() for _ in range(3))
    {"q": q, "k": k, "v": v}[where][0, 0, ROW, CH] = value
    return tuple(t.to(device) for t in (q, k, v))


def _sdpa(q, k, v, causal: bool) -> torch.Tensor:
    """torch's SDPA in float32 on the CPU (its math backend)."""
    return F.scaled_dot_product_attention(*(t.cpu().float() for t in (q, k, v)), is_causal=causal)


def _attending_rows(where: str, causal: bool) -> torch.Tensor:
    """[N, 1] rows that attend the bad element (a bad Q row attends for itself)."""
    rows = torch.ones(N, 1, dtype=torch.bool)
    if causal and where != "q":
        rows[:ROW] = False  # N_q = N_k: query i sees keys j <= i
    return rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    ("where", "value", "causal"),
    [
        ("q", float("nan"), False),
        ("q", float("nan"), True),
        ("q", float("inf"), False),
        ("q", float("-inf"), True),
        ("k", float("nan"), False),
        ("k", float("nan"), True),
        ("k", float("inf"), False),
        ("v", float("nan"), False),
        ("v", float("nan"), True),
        ("v", float("inf"), False),
    ],
)
@pytest.mark.parametrize("pv", ["fp16", "fp8"])
def test_nonfinite_inputs_reach_the_output_as_in_sdpa(where, value, causal, pv, device):
    q, k, v = _inputs(where, value, device)
    out = FUNCS[pv](q, k, v, is_causal=causal).cpu().float()
    ref = _sdpa(q, k, v, causal)
    must = _attending_rows(where, causal)[None, None] & ~ref.isfinite()
    assert must.any()  # the case is not vacuous
    if value != value:  # NaN in: NaN out wherever SDPA's is NaN
        assert out[must & ref.isnan()].isnan().all(), where
    assert not out[must].isfinite().any(), where
    # the spread stops at the quantization's granularity; what stays finite is exact
    bad = ~out.isfinite()
    if where == "q" or (where == "v" and not causal):
        # only the bad row (its scale block's other rows are quantized without it), or only V's channel
        assert torch.equal(bad, ~ref.isfinite())
    ok = ~(bad | ~ref.isfinite()).any(-1, keepdim=True).expand_as(bad)  # rows finite in both
    assert ok[:, 1:].all()  # the other head is untouched
    acc = accuracy(out[ok].reshape(-1, D), ref[ok].reshape(-1, D))
    assert acc["finite"] and acc["cos"] >= 0.999, acc


@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_query_row_has_a_nan_lse(device):
    """The log-sum-exp of a NaN row is NaN (it was -inf: the kernel took NaN for a row without keys)."""
    q, k, v = _inputs("q", float("nan"), device)
    out, lse = sageattn_qk_int8_pv_fp16_triton(q, k, v, return_lse=True)
    lse = lse.cpu()
    assert lse[0, 0, ROW].isnan() and out[0, 0, ROW].isnan().all()
    rest = torch.ones_like(lse, dtype=torch.bool)
    rest[0, 0, ROW] = False
    assert lse[rest].isfinite().all()
