"""verify and bench on a real GPU (skipped without one): every variant of the matched profile."""

from __future__ import annotations

import pytest

from sagebuild import bench, verify
from sagebuild.profiles import match

pytestmark = pytest.mark.gpu


def _profile():
    from sagebuild.attention import dispatch

    return match([dispatch.device_arch("cuda")])[0]


def test_verify_every_variant_on_the_gpu():
    from sagebuild.attention import dispatch

    prof = _profile()
    res = verify.run_verify(prof)
    assert res.mode == "gpu", res.note
    names = {r.variant for r in res.results}
    assert verify.AUTO in names
    assert {v for v in prof.kernels if v in dispatch.available_variants("cuda")} <= names
    assert res.ok, res.failure_text()
    for r in res.results:
        if r.variant != verify.EXT_CHECK:
            assert r.dtype == "float16" and r.device.startswith("cuda")


def test_bench_gpu_sustained_times():
    """``sustain_s``: every row gets a sustained time per call (seconds of back-to-back calls at
    the power limit) and every non-baseline row its ratio to SDPA's sustained time; with
    ``gate_on="sustained"`` the speed gate compares those ratios (a gate set just above
    ``sageattn``'s sustained speed-up fails on it, one just below passes)."""
    prof = _profile()
    cfg = bench.config_from_profile(
        prof, seq=(2048,), warmup=2, reps=4, rounds=2, sustain_s=0.2, gate_on="sustained"
    )
    res = bench.run_bench(prof, cfg)
    assert res.to_dict()["gate"]["metric"] == "sustained"
    auto = next(r for r in res.rows if r.provider == bench.AUTO and r.kind == "whole_call")
    above = bench.gate([auto], auto.sustained_speedup * 1.01, speed_gate=True, metric="sustained")
    assert any("sageattn sustained speed-up" in f for f in above), above
    assert bench.gate([auto], auto.sustained_speedup * 0.99, speed_gate=True, metric="sustained") == []
    base = next(r for r in res.rows if r.kind == "baseline")
    for r in res.rows:
        assert r.error is None, r.error
        assert r.timing.sustained_ms is not None and r.timing.sustained_ms > 0
        if r is not base:
            assert r.sustained_speedup == pytest.approx(base.timing.sustained_ms / r.timing.sustained_ms)
    assert "sustained" in res.method


def test_bench_gpu_rows_backend_and_timing():
    prof = _profile()
    cfg = bench.config_from_profile(prof, seq=(1024, 4096), warmup=5, reps=20)
    res = bench.run_bench(prof, cfg)
    from sagebuild.attention import dispatch

    # the speed gate: the explicit SDPA-relative one, or the regression check where this arch has
    # a recorded speed-up
    applied = prof.bench.min_speedup > 0 or dispatch.device_arch("cuda") in prof.bench.expected
    assert res.timing_kind == "gpu" and res.speed_gate_applied == applied
    assert res.to_dict()["gate"]["expectation"]["applied"] == (
        dispatch.device_arch("cuda") in prof.bench.expected
    )
    assert res.sdpa_backend["name"] in ("cudnn", "flash", "efficient", "math")
    kinds = {(r.provider, r.kind) for r in res.rows}
    assert ("sdpa", "baseline") in kinds and ("sageattn", "whole_call") in kinds
    assert any(k == "kernel_only" for _, k in kinds)
    for r in res.rows:
        assert r.error is None, r.error
        assert r.timing.p20_ms <= r.timing.median_ms <= r.timing.p80_ms
        assert r.timing.back_to_back_ms is not None and r.timing.back_to_back_ms > 0


@pytest.mark.parametrize(
    ("shape", "causal"),
    [
        ({"batch": 2, "heads": 10, "head_dim": 64, "seq": (4096,), "kv_seq": 77}, False),  # SDXL cross
        ({"batch": 1, "heads": 8, "head_dim": 128, "seq": (1024,), "kv_heads": 2}, True),  # GQA prefill
        ({"heads": 8, "kv_heads": 2, "head_dim": 128, "varlen": (1000, 600, 448)}, True),  # packed prefill
        ({"heads": 8, "head_dim": 128, "varlen": (1024, 1024), "varlen_keys": (137, 512)}, False),  # text
    ],
)
def test_bench_gpu_cross_attention_gqa_and_packed(shape, causal):
    """The workload classes beyond self-attention: every provider runs on K/V of their own shape
    (packed: ``sageattn_varlen`` against SDPA once per sequence), within the profile's accuracy
    bounds, against SDPA as the caller would run it, each row with the plan it ran, and each
    shape's key names what it is (no self-attention record applies)."""
    prof = _profile()
    cfg = bench.config_from_profile(prof, **shape, causal=causal, warmup=2, reps=6, rounds=2)
    res = bench.run_bench(prof, cfg)
    for r in res.rows:
        assert r.error is None, (r.provider, r.kind, r.error)
        assert (r.plan is None) == (r.kind == "baseline"), r
    assert not [f for f in res.failures if "speed-up" not in f], res.failures
    auto = next(r for r in res.rows if r.provider == bench.AUTO and r.kind == "whole_call")
    assert auto.speedup is not None and auto.speedup > 0 and auto.expected_speedup is None
    if "varlen" in shape:
        assert auto.plan["layout"] == "varlen" and {r.kind for r in res.rows} == {"baseline", "whole_call"}
        keys = shape.get("varlen_keys", shape["varlen"])
        flops = sum(bench.attention_flops(1, 8, n, 128, causal, nk) for n, nk in zip(shape["varlen"], keys))
    else:
        n, nk = shape["seq"][0], shape.get("kv_seq", shape["seq"][0])
        flops = bench.attention_flops(shape["batch"], shape["heads"], n, shape["head_dim"], causal, nk)
    assert auto.tflops == pytest.approx(flops / auto.timing.median_ms / 1e9)
