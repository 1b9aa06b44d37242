"""Routing and tuned plans (issue 58): where a call's shape class was measured faster on SDPA,
``sageattn`` runs SDPA for it, exactly; a tuned class's config and variant come before the table's.
Records are injected (``record.install``) for the interpreter (the GPU's arch on a GPU)."""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import fp64_attention, host_us

from sagebuild.attention import api, dispatch, functions, route
from sagebuild.tuning import record
from sagebuild.tuning.record import Choice, Fingerprint, ShapeClass, TunedClass, TuningRecord

DEV = "cuda" if torch.cuda.is_available() else "cpu"
ARCH = dispatch.device_arch(DEV)
FP = Fingerprint("test", ARCH, "", "", "", "", "", "")
SDPA = Choice("sdpa", ms=1.0)
EXPLICIT = [
    functions.sageattn_qk_int8_pv_fp16_triton,
    functions.sageattn_qk_int8_pv_fp8_triton,
    functions.sageattn_qk_int8_pv_fp16_cuda,
    functions.sageattn_qk_int8_pv_fp8_cuda,
    functions.sageattn_qk_int8_pv_fp8_cuda_sm90,
]


@pytest.fixture(autouse=True)
def routing_on(monkeypatch):
    monkeypatch.setenv("SAGEBUILD_ROUTE", "1")
    api.clear_caches()
    route.reset()
    yield
    record.uninstall()
    route.reset()


def _install(*classes: TunedClass) -> None:
    record.install(ARCH, TuningRecord(FP, list(classes)))


def _qkv(b=2, hq=4, hk=2, nq=40, nk=72, d=64, nhd=False, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (lambda h, n: (b, n, h, d)) if nhd else (lambda h, n: (b, h, n, d))
    return tuple(
        torch.randn(shape(h, n), generator=g).to(dtype).to(DEV) for h, n in ((hq, nq), (hk, nk), (hk, nk))
    )


def _sdpa_class(b=2, hq=4, nq=40, nk=72, d=64, causal=False, masked=False) -> TunedClass:
    return TunedClass(ShapeClass(d, nq, nk, b * hq, causal, masked), SDPA, 1.0, Choice("ours", ms=2.0))


def _exact(out, ref):
    """SDPA in fp16 against float64: a quantized kernel's error (~1e-2) would fail this."""
    assert out.dtype == torch.float16 and torch.isfinite(out).all()
    assert (out.float() - ref).abs().max().item() < 4e-3


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("nhd", [False, True])
def test_routed_call_is_exact_attention_gqa_causal_bottom_right(causal, nhd):
    _install(_sdpa_class(causal=causal))
    q, k, v = _qkv(nhd=nhd)  # 40 queries, 72 keys: causal is bottom-right, as in our kernels
    out = functions.sageattn(q, k, v, tensor_layout="NHD" if nhd else "HND", is_causal=causal)
    ref, _ = fp64_attention(q, k, v, "NHD" if nhd else "HND", causal=causal)
    assert out.shape == q.shape and out.is_contiguous()
    _exact(out, ref)
    assert route.routed() == {f"8x40:72x64{'c' if causal else ''}": 1}


def test_causal_rows_that_see_no_key_are_zero():
    """More queries than keys, causal bottom-right: the first N_q - N_k rows attend to nothing."""
    _install(_sdpa_class(nq=72, nk=40, causal=True))
    q, k, v = _qkv(nq=72, nk=40)
    out = functions.sageattn(q, k, v, is_causal=True)
    ref, _ = fp64_attention(q, k, v, causal=True)
    _exact(out, ref)
    assert out[:, :, :32].abs().max() == 0


@pytest.mark.parametrize("kind", ["bool", "additive"])
@pytest.mark.parametrize("causal", [False, True])
def test_routed_masks_as_sdpa_takes_them(kind, causal):
    """A masked call routes only by a class measured with a mask; the mask (and causal) reach SDPA."""
    _install(_sdpa_class(causal=causal, masked=True))
    q, k, v = _qkv()
    g = torch.Generator().manual_seed(7)
    if kind == "bool":
        mask = torch.ones(2, 1, 1, 72, dtype=torch.bool)
        mask[1, ..., 30:] = False  # key padding
    else:
        mask = torch.randn(40, 72, generator=g) * 2  # additive, float32, [N_q, N_k]
    mask = mask.to(DEV)
    out = functions.sageattn(q, k, v, is_causal=causal, attn_mask=mask)
    ref, _ = fp64_attention(q, k, v, causal=causal, mask=mask)
    _exact(out, ref)
    assert sum(route.routed().values()) == 1
    route.reset()
    functions.sageattn(q, k, v, is_causal=causal)  # unmasked: the record has no unmasked class
    assert not route.routed()


def test_only_the_matching_class_routes():
    _install(_sdpa_class(nq=40, nk=72), TunedClass(ShapeClass(64, 4096, 4096, 8, False), Choice("ours")))
    q, k, v = _qkv()
    functions.sageattn(q, k, v)
    q2, k2, v2 = _qkv(nq=64, nk=64)  # 64 keys: the 72-key class's bucket (below sqrt(72 * 4096))
    functions.sageattn(q2, k2, v2)
    assert route.routed() == {"8x40:72x64": 1, "8x64x64": 1}
    plan = api.launch_plan(q, k, v)
    assert plan["sdpa"] is True and plan["tuned"] == "tuned 8x40:72x64: sdpa"


@pytest.mark.parametrize("fn", EXPLICIT, ids=lambda f: f.__name__)
def test_explicit_functions_never_route(fn):
    _install(_sdpa_class())
    q, k, v = _qkv()
    fn(q, k, v)
    assert not route.routed()


def test_config_keyword_return_lse_and_varlen_never_route():
    _install(_sdpa_class(), _sdpa_class(b=1, hq=4, nq=80, nk=80))
    q, k, v = _qkv()
    functions.sageattn(q, k, v, config="32,16,4,1")
    out, lse = functions.sageattn(q, k, v, return_lse=True)
    assert lse.shape == (2, 4, 40)
    qp, kp, vp = (t[0].transpose(0, 1)[:40].contiguous() for t in _qkv(b=1, nq=80, nk=80, hk=4))
    cu = torch.tensor([0, 40], dtype=torch.int32, device=DEV)
    functions.sageattn_varlen(qp, kp, vp, cu, cu, 40, 40)
    assert not route.routed()


def test_route_knob_off_keeps_the_kernels(monkeypatch):
    _install(_sdpa_class())
    q, k, v = _qkv()
    monkeypatch.setenv("SAGEBUILD_ROUTE", "0")
    api.clear_caches()
    functions.sageattn(q, k, v)
    assert not route.routed() and api.launch_plan(q, k, v)["sdpa"] is False
    monkeypatch.setenv("SAGEBUILD_ROUTE", "1")
    api.clear_caches()
    functions.sageattn(q, k, v)
    assert route.routed() == {"8x40:72x64": 1}


def test_a_reloaded_record_replaces_cached_plans():
    q, k, v = _qkv()
    functions.sageattn(q, k, v)
    functions.sageattn(q, k, v)  # recorded for replay
    assert not route.routed()
    _install(_sdpa_class())  # reload: cached plans and replays dropped
    functions.sageattn(q, k, v)
    assert route.routed() == {"8x40:72x64": 1}
    record.uninstall(ARCH)
    functions.sageattn(q, k, v)
    assert route.routed() == {"8x40:72x64": 1}


def test_tuned_config_and_variant_come_before_the_table():
    ours = Choice("ours", "fp8acc", "32,32,4,1", 0.5)
    runner = Choice("ours", "fp16", "64,32,4,1", 0.6)
    _install(TunedClass(ShapeClass(64, 40, 72, 8, False), ours, 1.0, runner))
    q, k, v = _qkv()
    plan = api.launch_plan(q, k, v)
    assert (plan["variant"], plan["pv_accum"], plan["config"]) == ("qk_int8_pv_fp8", "fp32", "32,32,4,1")
    assert plan["tuned"] == "tuned 8x40:72x64: ours fp8acc 32,32,4,1" and plan["sdpa"] is False
    fp16 = api.launch_plan(q, k, v, variant="qk_int8_pv_fp16")  # an explicit variant: its own measured config
    assert fp16["config"] == "64,32,4,1"
    fp8 = api.launch_plan(q, k, v, variant="qk_int8_pv_fp8")  # two-level FP8 not measured: the table
    assert fp8["config"] == "32,16,4,1" if ARCH == "interpreter" else fp8["config"] != "32,32,4,1"
    out = functions.sageattn(q, k, v)
    ref, _ = fp64_attention(q, k, v)
    assert (out.float() - ref).abs().mean() < 0.02
    forced = api.plan_dense(q, k, v, pv="auto", config="32,16,4,1")  # config= wins over the record
    assert forced.config.spec() == "32,16,4,1"


def test_compiled_sageattn_routes_fullgraph():
    """Under torch.compile (fullgraph) the call is one custom op that routes at run time: the
    same exact output, counted once per call, with static and with dynamic shapes."""
    _install(_sdpa_class(causal=True), _sdpa_class(nq=48, nk=80, causal=True))
    fn = torch.compile(
        lambda a, b, c: functions.sageattn(a, b, c, is_causal=True), fullgraph=True, backend="aot_eager"
    )
    torch._dynamo.reset()
    try:
        for nq, nk in ((40, 72), (48, 80)):
            q, k, v = _qkv(nq=nq, nk=nk)
            out = fn(q, k, v)
            _exact(out, fp64_attention(q, k, v, causal=True)[0])
    finally:
        torch._dynamo.reset()
    assert route.routed() == {"8x40:72x64c": 1, "8x48:80x64c": 1}


def test_shipped_hopper_data_routes_the_slow_classes():
    """On Hopper, without a tuned record, the shipped classes send the workload classes measured
    slower than SDPA (docs/performance.md) to SDPA and keep the faster ones on the kernels."""
    from sagebuild.attention.plan import make_plan

    def plan(d, nq, nk, bh, causal=False, mask="none"):
        return make_plan("sm90", head_dim=d, n_q=nq, n_k=nk, batch_heads=bh, causal=causal, mask=mask)

    slow = [(64, 4096, 77, 20), (160, 256, 256, 16), (64, 1024, 1024, 16), (128, 1024, 1024, 64),
            (64, 4096, 4096, 16), (128, 2048, 2048, 64)]  # fmt: skip
    fast = [(128, 32760, 512, 40), (40, 4096, 4096, 16), (128, 4096, 4096, 64), (128, 16384, 16384, 32),
            (64, 8192, 8192, 128), (128, 32760, 32760, 40), (256, 8192, 8192, 16)]  # fmt: skip
    assert all(plan(*s).sdpa for s in slow)
    assert not any(plan(*s).sdpa for s in fast)
    assert not plan(80, 4096, 4096, 32, causal=True).sdpa and not plan(128, 4096, 4096, 64, causal=True).sdpa
    assert not plan(128, 4096, 512, 48, mask="bool").sdpa  # text key padding in the kernel: 1.36x


# ---------------------------------------------------------------------------------------------
# GPU: the shipped data on the device, what a routed call costs, inductor


def _hopper() -> None:
    if not torch.cuda.is_available() or dispatch.family(ARCH) != "Hopper":
        pytest.skip("the shipped classes are Hopper's")


@pytest.mark.gpu
def test_gpu_shipped_classes_route_the_small_call_to_sdpa_exactly():
    """On Hopper without a tuning record the mission's 1×16×1024×64 (measured 0.77×) runs SDPA,
    bit-equal to calling it (both layouts), and 2×32×4096×128 (1.17×) the kernels."""
    _hopper()
    q, k, v = (torch.randn(1, 16, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out = functions.sageattn(q, k, v)
    assert torch.equal(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))
    qn, kn, vn = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out_nhd = functions.sageattn(qn, kn, vn, tensor_layout="NHD")
    assert out_nhd.shape == qn.shape and out_nhd.is_contiguous()
    torch.testing.assert_close(out_nhd.transpose(1, 2), out, rtol=0, atol=2e-3)  # SDPA on strided views
    big = [torch.randn(2, 32, 4096, 128, device="cuda", dtype=torch.float16) for _ in range(3)]
    functions.sageattn(*big)
    assert route.routed() == {"16x1024x64": 2}
    assert api.launch_plan(*big)["sdpa"] is False


@pytest.mark.gpu
def test_gpu_compiled_routing_inductor():
    """torch.compile (inductor, fullgraph) of a routed call: the op runs SDPA at run time."""
    _hopper()
    q, k, v = (torch.randn(1, 16, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    torch._dynamo.reset()
    try:
        fn = torch.compile(lambda a, b, c: functions.sageattn(a, b, c), fullgraph=True)
        got = fn(q, k, v)
    finally:
        torch._dynamo.reset()
    torch.testing.assert_close(got, torch.nn.functional.scaled_dot_product_attention(q, k, v), rtol=0, atol=0)
    assert route.routed() == {"16x1024x64": 1}


@pytest.mark.gpu
@pytest.mark.timing
def test_gpu_routed_call_costs_a_cached_lookup():
    """A routed call's host time over calling SDPA directly, back to back at 1×16×1024×64 (host
    bound): the plan-cache lookup and the layers above it, printed (~10 µs expected; device time,
    what scripts/bench_workloads.py measures, is SDPA's)."""
    _hopper()
    q, k, v = (torch.randn(1, 16, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))

    sdpa = torch.nn.functional.scaled_dot_product_attention
    rounds = [
        (host_us(lambda: functions.sageattn(q, k, v)), host_us(lambda: sdpa(q, k, v))) for _ in range(3)
    ]
    routed, direct = min(r for r, _ in rounds), min(d for _, d in rounds)
    print(f"\nrouted sageattn {routed:.1f} us per call, SDPA {direct:.1f} us: +{routed - direct:.1f} us")
    assert routed - direct < 25, rounds
