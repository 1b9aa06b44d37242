"""Bad inputs get one clear AttentionInputError (a SagebuildError with a fix), never a traceback."""

from __future__ import annotations

import pytest
import torch

from sagebuild.attention import (
    AttentionInputError,
    sageattn,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_varlen,
)
from sagebuild.errors import SagebuildError

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _t(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype, device=DEV)


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [
        ((_t(1, 2, 8, 64, dtype=torch.float32),) * 3, {}, "NaN trap"),
        ((_t(1, 2, 8, 64, dtype=torch.int8),) * 3, {}, "supported: float16, bfloat16"),
        ((_t(1, 2, 8, 64), _t(1, 2, 8, 64, dtype=torch.bfloat16), _t(1, 2, 8, 64)), {}, "share one dtype"),
        ((_t(2, 8, 64),) * 3, {}, "must have 4 dims"),
        ((_t(1, 2, 8, 64),) * 3, {"tensor_layout": "BHND"}, "tensor_layout must be"),
        ((_t(1, 3, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 8, 64)), {}, "multiple of k's"),
        ((_t(1, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 1, 8, 64)), {}, "different head counts"),
        ((_t(1, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 9, 64)), {}, "different sequence lengths"),
        ((_t(1, 2, 8, 64), _t(2, 2, 8, 64), _t(2, 2, 8, 64)), {}, "batch sizes differ"),
        ((_t(1, 2, 8, 320),) * 3, {}, "head dim 320 is not supported.*64, 128, 256"),
        ((_t(1, 2, 8, 64),) * 3, {"sm_scale": -1.0}, "positive and finite"),
        ((_t(1, 2, 8, 64),) * 3, {"qk_quant_gran": "per_lane"}, "qk_quant_gran"),
        ((_t(1, 2, 8, 64),) * 3, {"quantization_backend": "opencl"}, "quantization_backend"),
        ((_t(1, 1, 8, 64).expand(65536, 1, 8, 64),) * 3, {}, "65536 batch entries × 1 heads.*at most 65535"),
        ((_t(1, 1, 8, 64).expand(1, 65536, 8, 64),) * 3, {}, "1 batch entries × 65536 heads"),
        ((_t(1, 1, 1, 1).expand(40000, 60000, 1, 1),) * 3, {}, "fewer than 2³¹ pairs"),
        ((_t(1, 1, 8, 64).expand(2, 40000, 8, 64),) * 3, {"quantization_backend": "ext"}, "65535 batch × KV"),
        ((_t(1, 1, 1, 64).expand(1, 1, 2**31, 64),) * 3, {}, "2,147,483,648 tokens per sequence.*32-bit"),
    ],
)
def test_bad_inputs_raise_clear_errors(args, kw, match):
    with pytest.raises(AttentionInputError, match=match) as info:
        sageattn(*args, **kw)
    assert isinstance(info.value, SagebuildError) and isinstance(info.value, ValueError)
    assert info.value.fix
    # one line: ComfyUI logs "Error running sage attention: {e}, ..." once per failing call
    assert "\n" not in str(info.value) and info.value.fix in str(info.value)


def test_more_packed_tokens_than_int32_indices_is_a_clear_error():
    """Offsets are 64-bit, token indices int32 (issue 60): a packed batch past them is refused
    before any launch (expanded views: no memory)."""
    x = _t(1, 1, 64).expand(2**31, 1, 64)
    cu = torch.tensor([0, 2**30, 2**31])
    with pytest.raises(AttentionInputError, match="2,147,483,648 packed tokens.*at most 2,145,386,496"):
        sageattn_varlen(x, x, x, cu, cu, 2**30, 2**30)


def test_layout_mixup_names_the_layout():
    q = _t(1, 8, 4, 64)  # NHD tensors (q: seq 8, 4 heads; k/v: seq 6, 2 heads) passed as HND
    k = v = _t(1, 6, 2, 64)
    with pytest.raises(AttentionInputError, match="tensor_layout"):
        sageattn(q, k, v, tensor_layout="HND")


def test_pv_accum_dtype_and_cpu_without_interpreter(monkeypatch):
    q = _t(1, 2, 8, 64)
    with pytest.raises(AttentionInputError, match="pv_accum_dtype"):
        sageattn_qk_int8_pv_fp8_triton(q, q, q, pv_accum_dtype="fp64")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    cpu = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(AttentionInputError, match="GPU"):
        sageattn(cpu, cpu, cpu)


def test_varlen_checks_cumulative_lengths():
    q = _t(10, 2, 64)
    good = torch.tensor([0, 4, 10], dtype=torch.int32, device=DEV)
    with pytest.raises(AttentionInputError, match="end at the token count"):
        sageattn_varlen(q, q, q, torch.tensor([0, 4, 9], dtype=torch.int32, device=DEV), good, 6, 6)
    with pytest.raises(AttentionInputError, match="max_seqlen"):
        sageattn_varlen(q, q, q, good, good, 5, 6)
    with pytest.raises(AttentionInputError, match="packed"):
        sageattn_varlen(_t(1, 10, 2, 64), q, q, good, good, 6, 6)
    many = torch.arange(65537, dtype=torch.int32, device=DEV)  # 65536 one-token sequences
    one = _t(1, 2, 64).expand(65536, 2, 64)
    with pytest.raises(AttentionInputError, match="65536 sequences × 2 heads"):
        sageattn_varlen(one, one, one, many, many, 1, 1)


def test_graphed_attention_needs_gpu_tensors_and_says_so():
    """The CUDA-graph wrapper refuses CPU tensors with a fix, before touching any CUDA API."""
    from sagebuild.attention import AttentionInputError, GraphedAttention

    q = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(AttentionInputError, match="CUDA/ROCm tensor") as err:
        GraphedAttention(q, q, q)
    assert "sageattn directly" in err.value.fix
    with pytest.raises(AttentionInputError, match="CUDA/ROCm tensor"):
        GraphedAttention(q, "not a tensor", q)
