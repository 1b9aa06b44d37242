"""The safe SDPA patch: exact signature, faithful pass-through, scoping, stats, threads."""

from __future__ import annotations

import inspect
import math
import threading
import warnings

import pytest
import torch
import torch.nn.functional as F

import sagebuild
from sagebuild import patch

ORIG = F.scaled_dot_product_attention
assert ORIG is not patch.scaled_dot_product_attention


@pytest.fixture(autouse=True)
def _clean_state():
    """Each test starts and must end unpatched with zeroed counters."""
    patch.reset_stats()
    yield
    leaked = F.scaled_dot_product_attention is not ORIG or patch.is_active()
    # put everything back so one failure does not cascade, then fail loudly
    patch._depth = 0
    patch._enabled = False
    F.scaled_dot_product_attention = ORIG
    patch._original = None
    assert not leaked, "a test left the SDPA patch installed"


def _fake_support(device):
    return patch.DeviceSupport(arch="fakearch", variant="fp16", head_dim_ok=lambda d: d <= 128)


class _FakeKernel:
    """Stands in for ``sageattn`` on CPU: records its arguments, computes exact attention in fp32."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[dict] = []
        self.lock = threading.Lock()

    def __call__(self, q, k, v, is_causal, sm_scale, support, attn_mask=None):
        with self.lock:
            call = {"q": tuple(q.shape), "k": tuple(k.shape), "causal": is_causal, "sm_scale": sm_scale}
            self.calls.append(
                {**call, "arch": support.arch, **({"mask": True} if attn_mask is not None else {})}
            )
        if self.fail:
            raise RuntimeError("boom")
        groups = q.shape[1] // k.shape[1]
        kf = k.float().repeat_interleave(groups, dim=1)
        vf = v.float().repeat_interleave(groups, dim=1)
        mask = attn_mask if attn_mask is None or attn_mask.dtype == torch.bool else attn_mask.float()
        return ORIG(
            q.float(), kf, vf, mask, is_causal=is_causal, scale=sm_scale
        )  # fp32: the wrapper casts back


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make CPU tensors count as 'GPU' with a fake arch table and kernel: exercises the accelerate path."""
    kernel = _FakeKernel()
    monkeypatch.setattr(patch, "_backend", patch._Backend(_fake_support, kernel, ("cpu",)))
    return kernel


def _qkv(b=1, hq=4, hk=None, lq=16, lk=None, d=32, dtype=torch.float16, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    hk = hk or hq
    lk = lk or lq
    mk = lambda *s: torch.randn(*s, generator=g).to(dtype=dtype, device=device)
    return mk(b, hq, lq, d), mk(b, hk, lk, d), mk(b, hk, lk, d)


# ---------------------------------------------------------------------------------------------
# Signature


def _schema_signature() -> list[tuple[str, str, object]]:
    """(name, kind, default) of the installed torch's SDPA, read from its ATen schema."""
    schema = torch.ops.aten.scaled_dot_product_attention.default._schema
    out = []
    for arg in schema.arguments:
        kind = "KEYWORD_ONLY" if arg.kwarg_only else "POSITIONAL_OR_KEYWORD"
        default = arg.default_value if arg.has_default_value() else inspect.Parameter.empty
        out.append((arg.name, kind, default))
    return out


def test_signature_matches_installed_torch():
    params = inspect.signature(patch.scaled_dot_product_attention).parameters.values()
    ours = [(p.name, p.kind.name, p.default) for p in params]
    assert ours == _schema_signature()
    assert [n for n, _, _ in ours[:6]] == ["query", "key", "value", "attn_mask", "dropout_p", "is_causal"]


def test_positional_scale_is_rejected_like_the_original():
    q, k, v = _qkv(dtype=torch.float32)
    with pytest.raises(TypeError):
        ORIG(q, k, v, None, 0.0, False, 0.5)
    with patch.patch_sdpa(), pytest.raises(TypeError):
        F.scaled_dot_product_attention(q, k, v, None, 0.0, False, 0.5)


# ---------------------------------------------------------------------------------------------
# Pass-through is the original, bit for bit


@pytest.mark.parametrize("mask_kind", ["bool", "float"])
def test_positional_attn_mask_passes_through_identically(mask_kind):
    q, k, v = _qkv(dtype=torch.float32)
    mask = torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3
    mask[:, 0] = True
    if mask_kind == "float":
        mask = torch.zeros(16, 16).masked_fill(~mask, float("-inf"))
    want = ORIG(q, k, v, mask)
    with patch.patch_sdpa():
        got = F.scaled_dot_product_attention(q, k, v, mask)
        got_kw = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
    assert torch.equal(got, want) and torch.equal(got_kw, want)
    assert patch.patch_stats().passed_through == 2


def test_cpu_nothing_is_accelerated():
    """On this CPU-only machine every call, even a perfect fp16 one, goes to the original."""
    q, k, v = _qkv(dtype=torch.float16)
    with patch.patch_sdpa():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.equal(out, ORIG(q, k, v, is_causal=True))
    stats = patch.patch_stats()
    assert stats.accelerated == 0 and stats.passed_through == 1
    assert stats.reasons == {"cpu tensors (needs CUDA/HIP)": 1}


def test_pass_through_reasons_are_recorded(fake_gpu):
    """With CPU treated as a GPU, each unfaithful call is still passed through, for its own reason."""
    q16, k16, v16 = _qkv()
    q32, k32, v32 = _qkv(dtype=torch.float32)
    mask = torch.ones(16, 16, dtype=torch.bool)
    qo, ko, vo = _qkv(d=160)
    with patch.patch_sdpa():
        F.scaled_dot_product_attention(q32, k32, v32)
        F.scaled_dot_product_attention(q16, k16, v16, mask)
        torch.manual_seed(0)
        dropped = F.scaled_dot_product_attention(q32, k32, v32, dropout_p=0.5)
        F.scaled_dot_product_attention(qo, ko, vo)
        F.scaled_dot_product_attention(q16[0], k16[0], v16[0])
    torch.manual_seed(0)
    assert torch.equal(dropped, ORIG(q32, k32, v32, dropout_p=0.5))
    stats = patch.patch_stats()
    assert stats.accelerated == 0 and fake_gpu.calls == []
    assert stats.reasons == {
        "dtype float32 (needs float16/bfloat16)": 2,
        "attn_mask varies along queries (key-padding masks only)": 1,
        "head dim 160 not supported on fakearch": 1,
        "3-D inputs (needs 4-D B,H,N,D)": 1,
    }


def test_heads_differ_without_enable_gqa_raises_like_the_original(fake_gpu):
    q, k, v = _qkv(hq=8, hk=2)
    with pytest.raises(RuntimeError) as want:
        ORIG(q, k, v)
    with patch.patch_sdpa(), pytest.raises(RuntimeError) as got:
        F.scaled_dot_product_attention(q, k, v)
    assert str(got.value) == str(want.value)
    assert patch.patch_stats().reasons == {"heads differ without enable_gqa": 1}


# ---------------------------------------------------------------------------------------------
# The decision, as a pure function of metadata (meta tensors: no data, no device)


def _meta(*shape, dtype=torch.float16, requires_grad=False):
    return torch.empty(*shape, dtype=dtype, device="meta", requires_grad=requires_grad)


def _decide(
    q,
    k=None,
    v=None,
    mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    gqa=False,
    support=_fake_support,
    grad_enabled=False,
):
    k = q if k is None else k
    v = k if v is None else v
    return patch.decide(
        q,
        k,
        v,
        mask,
        dropout_p,
        is_causal,
        scale,
        gqa,
        support_for=support,
        gpu_device_types=("meta",),
        grad_enabled=grad_enabled,
    )


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (lambda: _decide(_meta(2, 8, 128, 64)), None),
        (lambda: _decide(_meta(2, 8, 128, 64, dtype=torch.bfloat16), is_causal=True, scale=0.1), None),
        (lambda: _decide(_meta(1, 32, 16, 128), _meta(1, 8, 77, 128), gqa=True), None),
        (lambda: _decide(_meta(1, 32, 1, 128), _meta(1, 8, 77, 128), gqa=True), "q_len 1 < 16 (decode"),
        (lambda: _decide(_meta(2, 8, 128, 64, dtype=torch.float32)), "dtype float32"),
        (lambda: _decide(_meta(2, 8, 128, 64, dtype=torch.float64)), "dtype float64"),
        (lambda: _decide(_meta(2, 8, 128, 64), _meta(2, 8, 128, 64, dtype=torch.bfloat16)), "dtypes differ"),
        (lambda: _decide(_meta(8, 128, 64)), "3-D inputs"),
        (lambda: _decide(_meta(1, 2, 8, 128, 64)), "5-D inputs"),
        (
            lambda: _decide(_meta(2, 8, 128, 64), mask=_meta(128, 128, dtype=torch.bool)),
            "varies along queries",
        ),
        (lambda: _decide(_meta(2, 8, 128, 64), mask=_meta(2, 1, 1, 128, dtype=torch.bool)), None),
        (lambda: _decide(_meta(2, 8, 128, 64), mask=_meta(128, dtype=torch.float16)), None),
        (lambda: _decide(_meta(2, 8, 128, 64), mask=_meta(1, 128, dtype=torch.float32)), "dtype float32"),
        (lambda: _decide(_meta(2, 8, 128, 64), mask=_meta(3, 1, 1, 128, dtype=torch.bool)), "broadcast"),
        (
            lambda: _decide(_meta(2, 8, 128, 64), mask=_meta(2, 1, 1, 128, dtype=torch.bool), is_causal=True),
            "is_causal",
        ),
        (lambda: _decide(_meta(2, 8, 128, 64), dropout_p=0.1), "dropout_p > 0"),
        (lambda: _decide(_meta(2, 8, 128, 64, requires_grad=True), grad_enabled=True), "require grad"),
        (lambda: _decide(_meta(2, 8, 128, 64, requires_grad=True), grad_enabled=False), None),
        (lambda: _decide(_meta(2, 8, 128, 64), _meta(2, 8, 128, 32)), "head dim differs"),
        (
            lambda: _decide(_meta(2, 8, 128, 64), _meta(2, 8, 128, 64), _meta(2, 8, 128, 32)),
            "head dim differs",
        ),
        (lambda: _decide(_meta(2, 8, 128, 64), _meta(1, 8, 128, 64)), "batch or length mismatch"),
        (lambda: _decide(_meta(2, 8, 128, 64), _meta(2, 2, 128, 64)), "heads differ without enable_gqa"),
        (lambda: _decide(_meta(2, 8, 128, 64), _meta(2, 3, 128, 64), gqa=True), "not a multiple"),
        (lambda: _decide(_meta(2, 8, 1, 64), _meta(2, 8, 9, 64), is_causal=True), "q_len != kv_len"),
        (lambda: _decide(_meta(2, 8, 16, 64), _meta(2, 8, 9, 64), is_causal=False), None),
        (lambda: _decide(_meta(2, 8, 15, 64), _meta(2, 8, 9, 64), is_causal=False), "q_len 15 < 16"),
        (lambda: _decide(_meta(2, 8, 0, 64)), "empty tensor"),
        (lambda: _decide(_meta(2, 8, 128, 64), scale=-1.0), "non-positive"),
        (lambda: _decide(_meta(2, 8, 128, 64), scale=math.nan), "non-finite"),
        (lambda: _decide(_meta(2, 8, 128, 256)), "head dim 256 not supported on fakearch"),
        (lambda: _decide(_meta(2, 8, 128, 64), support=lambda dev: "arch not supported: sm70"), "sm70"),
    ],
)
def test_decide(case, expected):
    verdict = case()
    if expected is None:
        assert isinstance(verdict, patch.DeviceSupport), verdict
    else:
        assert isinstance(verdict, str) and expected in verdict, verdict


def _support_from(sdpa_faster):
    return lambda dev: patch.DeviceSupport("fakearch", "fp16", lambda d: d <= 128, sdpa_faster)


@pytest.mark.parametrize(
    ("lq", "lk", "causal", "mask", "expected"),
    [
        (4096, 4096, False, False, None),
        (1024, 1024, False, False, "SDPA measured faster (fake)"),
        (4096, 4096, True, False, "SDPA measured faster (fake)"),
        (4096, 512, False, True, None),  # a key-padding mask: the rule is told
        (1, 8192, False, False, "q_len 1 < 16 (decode"),  # the decode rule still comes first
    ],
)
def test_decide_asks_the_device_which_calls_sdpa_runs_faster(lq, lk, causal, mask, expected):
    """A device's speed rule (``DeviceSupport.sdpa_faster``: head dim, q_len, kv_len, batch ×
    query heads, causal, masked -> a reason or None) keeps the calls it names with SDPA."""
    seen = []

    def sdpa_faster(d, q_len, kv_len, bh, c, m):
        seen.append((d, q_len, kv_len, bh, c, m))
        return "SDPA measured faster (fake)" if (c or q_len < 2048) and not m else None

    q = _meta(1, 2, lq, 128)
    kv = _meta(1, 2, lk, 128)
    pad = torch.ones(1, 1, 1, lk, dtype=torch.bool, device="meta") if mask else None
    verdict = _decide(q, kv, kv, mask=pad, is_causal=causal and lq == lk, support=_support_from(sdpa_faster))
    if expected is None:
        assert isinstance(verdict, patch.DeviceSupport), verdict
    else:
        assert isinstance(verdict, str) and expected in verdict, verdict
    if lq >= patch.MIN_Q_LEN:
        assert seen == [(128, lq, lk, 2, causal and lq == lk, mask)]


@pytest.fixture
def routing(monkeypatch):
    """The real speed rule on the shipped data (no tuning record): routing on, no override."""
    from sagebuild import knobs
    from sagebuild.tuning import record

    monkeypatch.setenv("SAGEBUILD_ROUTE", "1")
    monkeypatch.delenv(patch.MIN_LEN_ENV_VAR, raising=False)
    knobs.refresh()
    record.uninstall()
    yield
    record.uninstall()


@pytest.mark.parametrize(
    ("shape", "faster"),
    [
        ((64, 1024, 1024, 16, False, False), "shipped class 16x1024x64"),  # the mission's small shape, 0.77x
        ((64, 4096, 77, 20, False, False), "shipped class 20x4096:77x64"),  # SDXL cross-attention, 0.76x
        ((160, 256, 256, 16, False, False), "shipped class 16x256x160"),  # SD1.5 head dim 160, 0.62x
        ((128, 2048, 2048, 64, False, False), "shipped class 64x2048x128"),  # medium, 0.88x
        ((128, 3072, 3072, 32, False, False), "shipped class 16x3072x128"),  # the sweep's 3072 point
        ((128, 4096, 4096, 4, False, False), "shipped class 4x4096x128"),  # B·H 4 (run 28)
        ((128, 4096, 4096, 64, False, False), None),  # long, 1.17x
        ((128, 4096, 4096, 64, True, False), None),  # long causal, 1.05x
        ((128, 16384, 16384, 32, True, False), None),
        ((40, 4096, 4096, 16, False, False), None),  # SD1.5 head dim 40, 1.13x
        ((64, 8192, 8192, 16, False, False), None),  # the sweep's 8192 crossover
        ((128, 4096, 512, 48, False, True), None),  # key padding in the kernels, 1.36x
        ((64, 4096, 77, 20, False, True), "shipped class 20x4096:77x64"),  # no masked class: unmasked verdict
    ],
)
def test_speed_rule_reads_the_shipped_hopper_classes(routing, shape, faster):
    """``patch.sdpa_faster`` on Hopper: the shipped shape classes (docs/performance.md's workload
    table and the patch's sweeps, ``sagebuild.tuning.defaults``), the same data ``sageattn``
    routes by."""
    why = patch.sdpa_faster("sm90", *shape)
    if faster is None:
        assert why is None
    else:
        assert why == f"SDPA measured faster on sm90 ({faster})"
    assert patch.sdpa_faster("gfx1201", *shape) is None  # RDNA4: nothing measured, nothing tuned


def test_speed_rule_overrides(routing, monkeypatch):
    """``SAGEBUILD_PATCH_MIN_LEN`` replaces the classes by a length (any family), ``SAGEBUILD_ROUTE=0``
    accelerates every call, and a tuned record's class comes before the shipped one."""
    from sagebuild import knobs
    from sagebuild.tuning import record

    small = (64, 1024, 1024, 16, False, False)
    monkeypatch.setenv(patch.MIN_LEN_ENV_VAR, "0")
    assert patch.sdpa_faster("sm90", *small) is None
    monkeypatch.setenv(patch.MIN_LEN_ENV_VAR, "2048")
    assert patch.sdpa_faster("gfx1201", *small) == "shorter than 2048 tokens (SAGEBUILD_PATCH_MIN_LEN)"
    assert patch.sdpa_faster("sm90", 64, 4096, 1024, 16, False, False) == (
        "shorter than 2048 tokens (SAGEBUILD_PATCH_MIN_LEN)"
    )  # the shorter of q and kv
    assert patch.sdpa_faster("sm90", 64, 2048, 2048, 16, False, False) is None
    monkeypatch.delenv(patch.MIN_LEN_ENV_VAR)
    fp = record.Fingerprint("H100", "sm90", "", "", "", "", "", "")
    tuned = record.TunedClass(
        record.ShapeClass(64, 1024, 1024, 16, False), record.Choice("ours", ms=0.01), 0.02
    )
    record.install("sm90", record.TuningRecord(fp, [tuned]))
    assert patch.sdpa_faster("sm90", *small) is None
    record.uninstall("sm90")
    monkeypatch.setenv("SAGEBUILD_ROUTE", "0")
    knobs.refresh()
    assert patch.sdpa_faster("sm90", *small) is None


def test_dispatch_support_takes_the_device_arch_and_a_mistyped_override_once(routing, monkeypatch):
    """The real backend's support for an sm90 device asks the speed rule with its arch; a
    mistyped ``SAGEBUILD_PATCH_MIN_LEN`` is one warning and the measured classes (a model must
    not break on it)."""
    from sagebuild.attention import dispatch

    monkeypatch.setattr(dispatch, "device_arch", lambda dev: "sm90")
    monkeypatch.setattr(dispatch, "variant_for_device", lambda dev: "qk_int8_pv_fp8")
    patch._dispatch_support_cached.cache_clear()
    try:
        support = patch._dispatch_support(torch.device("cuda", 0))
        assert isinstance(support, patch.DeviceSupport) and support.arch == "sm90"
        assert "16x1024x64" in support.sdpa_faster(64, 1024, 1024, 16, False, False)
        assert support.sdpa_faster(128, 4096, 4096, 64, False, False) is None
        monkeypatch.setenv(patch.MIN_LEN_ENV_VAR, "lots")
        patch._warned.discard(patch.MIN_LEN_ENV_VAR)
        with pytest.warns(RuntimeWarning, match="SAGEBUILD_PATCH_MIN_LEN='lots'.*measured classes"):
            assert "16x1024x64" in support.sdpa_faster(64, 1024, 1024, 16, False, False)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert support.sdpa_faster(128, 4096, 4096, 64, False, False) is None  # said once
    finally:
        patch._dispatch_support_cached.cache_clear()
        patch._warned.discard(patch.MIN_LEN_ENV_VAR)


class _Sub(torch.Tensor):
    pass


def test_decide_rejects_non_gpu_devices_and_subclasses():
    q = torch.empty(1, 2, 4, 8, dtype=torch.float16)
    assert patch.decide(q, q, q, None, 0.0, False, None, False, support_for=_fake_support) == (
        "cpu tensors (needs CUDA/HIP)"
    )
    sub = q.as_subclass(_Sub)
    verdict = patch.decide(
        sub, sub, sub, None, 0.0, False, None, False, support_for=_fake_support, gpu_device_types=("cpu",)
    )
    assert verdict == "tensor subclass (not a plain torch.Tensor)"


# ---------------------------------------------------------------------------------------------
# The accelerate branch, end to end through the wrapper (fake kernel on CPU)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_causal", [False, True])
def test_accelerated_call_matches_original(fake_gpu, dtype, is_causal):
    q, k, v = _qkv(b=2, hq=4, lq=24, d=32, dtype=dtype)
    want = ORIG(q, k, v, is_causal=is_causal)
    with patch.patch_sdpa():
        got = F.scaled_dot_product_attention(q, k, v, None, 0.0, is_causal)
    assert got.dtype == dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    assert fake_gpu.calls == [
        {
            "q": (2, 4, 24, 32),
            "k": (2, 4, 24, 32),
            "causal": is_causal,
            "sm_scale": 32**-0.5,
            "arch": "fakearch",
        }
    ]
    stats = patch.patch_stats()
    assert (stats.accelerated, stats.passed_through) == (1, 0)
    assert stats.accelerated_by == {"fakearch/fp16": 1}


def test_key_padding_masks_are_accelerated_and_others_pass_through(fake_gpu):
    """A mask constant along queries (key padding) goes to the kernel with the call; one that
    varies along queries stays with SDPA, bit for bit."""
    q, k, v = _qkv(b=2, hq=4, lq=24, d=32)
    pad = torch.ones(2, 1, 1, 24, dtype=torch.bool)
    pad[1, ..., 10:] = False
    rows = torch.ones(24, 24, dtype=torch.bool).tril()
    with patch.patch_sdpa():
        got = F.scaled_dot_product_attention(q, k, v, pad)
        kept = F.scaled_dot_product_attention(q, k, v, rows)
    torch.testing.assert_close(got, ORIG(q, k, v, pad), atol=2e-2, rtol=2e-2)
    assert torch.equal(kept, ORIG(q, k, v, rows))
    assert [c.get("mask") for c in fake_gpu.calls] == [True]
    stats = patch.patch_stats()
    assert (stats.accelerated, stats.passed_through) == (1, 1)


def test_scale_is_honoured(fake_gpu):
    q, k, v = _qkv()
    with patch.patch_sdpa():
        got = F.scaled_dot_product_attention(q, k, v, scale=0.05)
    assert fake_gpu.calls[0]["sm_scale"] == 0.05
    torch.testing.assert_close(got, ORIG(q, k, v, scale=0.05), atol=2e-3, rtol=2e-3)


def test_enable_gqa_is_honoured(fake_gpu):
    q, k, v = _qkv(hq=8, hk=2, lq=16, lk=20)
    want = ORIG(q, k, v, enable_gqa=True)
    with patch.patch_sdpa():
        got = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    assert fake_gpu.calls[0]["k"] == (1, 2, 20, 32)  # the kernel gets the KV heads unexpanded


def test_kernel_failure_falls_back_with_one_warning(fake_gpu):
    fake_gpu.fail = True
    q, k, v = _qkv()
    with patch.patch_sdpa(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        patch._warned.clear()
        a = F.scaled_dot_product_attention(q, k, v)
        b = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(a, ORIG(q, k, v)) and torch.equal(b, a)
    assert len([w for w in caught if "quantized kernel failed" in str(w.message)]) == 1
    assert patch.patch_stats().reasons == {"kernel raised RuntimeError": 2}


def test_tracing_goes_to_the_original(fake_gpu):
    q, k, v = _qkv()
    with patch.patch_sdpa(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        fn = lambda a, b, c: F.scaled_dot_product_attention(a, b, c)
        traced = torch.jit.trace(fn, (q, k, v), check_trace=False)
    assert fake_gpu.calls == [] and patch.patch_stats().total == 0
    assert torch.equal(traced(q, k, v), ORIG(q, k, v))


# ---------------------------------------------------------------------------------------------
# Scoping: nesting, decorator, exceptions, enable/disable


def test_nesting_only_outermost_exit_restores():
    with patch.patch_sdpa():
        assert F.scaled_dot_product_attention is patch.scaled_dot_product_attention
        with patch.patch_sdpa():
            assert patch.is_active()
        assert F.scaled_dot_product_attention is patch.scaled_dot_product_attention
    assert F.scaled_dot_product_attention is ORIG and not patch.is_active()


def test_one_scope_object_is_reusable_and_re_entrant():
    scope = patch.patch_sdpa()
    for _ in range(2):
        with scope, scope:
            assert F.scaled_dot_product_attention is patch.scaled_dot_product_attention
        assert F.scaled_dot_product_attention is ORIG


def test_decorator_bare_and_called():
    @sagebuild.patch_sdpa
    def bare(x):
        return F.scaled_dot_product_attention is patch.scaled_dot_product_attention, x

    @sagebuild.patch_sdpa()
    def called():
        return F.scaled_dot_product_attention is patch.scaled_dot_product_attention

    assert bare(7) == (True, 7) and called()
    assert F.scaled_dot_product_attention is ORIG


def test_exception_restores_also_when_nested():
    with pytest.raises(ValueError), patch.patch_sdpa(), patch.patch_sdpa():
        raise ValueError("inner")
    assert F.scaled_dot_product_attention is ORIG

    @patch.patch_sdpa
    def failing():
        raise KeyError("x")

    with pytest.raises(KeyError):
        failing()
    assert F.scaled_dot_product_attention is ORIG


def test_enable_disable_and_blocks():
    sagebuild.enable()
    sagebuild.enable()  # idempotent
    assert patch.is_active()
    with patch.patch_sdpa():
        pass
    assert F.scaled_dot_product_attention is patch.scaled_dot_product_attention  # enable still holds it
    sagebuild.disable()
    assert F.scaled_dot_product_attention is ORIG
    with patch.patch_sdpa():
        sagebuild.enable()
        sagebuild.disable()  # the block still holds it
        assert patch.is_active()
    assert F.scaled_dot_product_attention is ORIG


def test_someone_else_replacing_sdpa_is_left_alone():
    def theirs(*a, **kw):
        return ORIG(*a, **kw)

    with pytest.warns(RuntimeWarning, match="replaced by someone else"), patch.patch_sdpa():
        F.scaled_dot_product_attention = theirs
    assert F.scaled_dot_product_attention is theirs and not patch.is_active()
    F.scaled_dot_product_attention = ORIG


# ---------------------------------------------------------------------------------------------
# Threads and stats


def test_threads_counts_add_up(fake_gpu):
    q16, k16, v16 = _qkv(hq=2, lq=16, d=16)
    q32, k32, v32 = _qkv(hq=2, lq=16, d=16, dtype=torch.float32)
    n_threads, n_calls = 8, 25
    errors: list[BaseException] = []
    start = threading.Barrier(n_threads)

    def work(i: int) -> None:
        try:
            start.wait()
            for j in range(n_calls):
                with patch.patch_sdpa():  # threads enter and leave while others are mid-call
                    if (i + j) % 2:
                        F.scaled_dot_product_attention(q16, k16, v16)
                    else:
                        F.scaled_dot_product_attention(q32, k32, v32)
        except BaseException as err:  # pragma: no cover - surfaced below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    stats = patch.patch_stats()
    total = n_threads * n_calls
    expected_fast = sum((i + j) % 2 for i in range(n_threads) for j in range(n_calls))
    assert stats.total == total
    assert stats.accelerated == expected_fast == len(fake_gpu.calls)
    assert stats.reasons == {"dtype float32 (needs float16/bfloat16)": total - expected_fast}
    assert F.scaled_dot_product_attention is ORIG


def test_stats_snapshot_and_reset(fake_gpu):
    q, k, v = _qkv()
    with patch.patch_sdpa():
        F.scaled_dot_product_attention(q, k, v)
        snap = patch.patch_stats()
        F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert snap.accelerated == 1 and snap.passed_through == 0 and snap.active
    d = patch.patch_stats().to_dict()
    assert d == {
        "accelerated": 1,
        "passed_through": 1,
        "total": 2,
        "reasons": {"dtype float32 (needs float16/bfloat16)": 1},
        "accelerated_by": {"fakearch/fp16": 1},
        "active": False,
    }
    patch.reset_stats()
    assert patch.patch_stats().total == 0


def test_lazy_reexports():
    assert sagebuild.patch_stats is patch.patch_stats
    assert sagebuild.enable is patch.enable and sagebuild.disable is patch.disable


# ---------------------------------------------------------------------------------------------
# The real dispatch and kernels through the patch: on the GPU, or under Triton's CPU interpreter
# (tests/conftest.py turns it on without a GPU) with CPU tensors admitted for the test


def _interpreter_on() -> bool:
    from sagebuild.attention.validate import interpreter_enabled

    return interpreter_enabled()


@pytest.mark.skipif(
    not (torch.cuda.is_available() or _interpreter_on()), reason="needs a GPU or TRITON_INTERPRET=1"
)
def test_real_kernels_through_patch(monkeypatch):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    monkeypatch.setattr(
        patch, "_backend", patch._Backend(patch._dispatch_support, patch._dispatch_kernel, ("cuda", "cpu"))
    )
    patch._dispatch_support_cached.cache_clear()
    q, k, v = _qkv(b=1, hq=4, hk=2, lq=40, d=32, device=dev, seed=5)
    qo, ko, vo = _qkv(b=1, hq=2, lq=16, d=320, device=dev)
    try:
        with patch.patch_sdpa():
            got = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=0.2)
            F.scaled_dot_product_attention(qo, ko, vo)
    finally:
        patch._dispatch_support_cached.cache_clear()
    want = ORIG(q.float(), k.float(), v.float(), is_causal=True, enable_gqa=True, scale=0.2)
    stats = patch.patch_stats()
    assert stats.accelerated == 1, stats.to_dict()
    assert len(stats.reasons) == 1 and next(iter(stats.reasons)).startswith("head dim 320 not supported")
    assert got.dtype == torch.float16 and got.shape == want.shape
    cos = F.cosine_similarity(got.float().flatten(), want.flatten(), dim=0).item()
    assert cos > 0.999, cos


# ---------------------------------------------------------------------------------------------
# GPU: the real kernels through the patch


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")
@pytest.mark.parametrize(
    ("dtype", "hq", "hk", "n", "d", "causal"),
    [
        (torch.float16, 8, 8, 512, 64, False),
        (torch.float16, 8, 8, 512, 128, True),
        (torch.bfloat16, 16, 4, 300, 64, True),
        (torch.float16, 8, 8, 200, 80, False),
    ],
)
def test_gpu_patched_matches_original(dtype, hq, hk, n, d, causal, monkeypatch):
    monkeypatch.setenv("SAGEBUILD_PATCH_MIN_LEN", "0")  # these short calls would go to SDPA on Hopper
    q, k, v = _qkv(b=2, hq=hq, hk=hk, lq=n, d=d, dtype=dtype, device="cuda", seed=3)
    gqa = hq != hk
    want = ORIG(q, k, v, is_causal=causal, enable_gqa=gqa)
    with patch.patch_sdpa():
        got = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)
        fp32 = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=gqa
        )
    stats = patch.patch_stats()
    assert stats.accelerated == 1, stats.to_dict()
    assert stats.reasons == {"dtype float32 (needs float16/bfloat16)": 1}
    assert got.dtype == dtype and got.shape == want.shape and torch.isfinite(got).all()
    cos = F.cosine_similarity(got.float().flatten(), want.float().flatten(), dim=0).item()
    assert cos > 0.998, cos
    assert torch.equal(fp32, ORIG(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=gqa))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm GPU")
def test_gpu_calls_go_to_sdpa_where_their_class_measured_faster(routing):
    """On a device whose family has shipped classes (Hopper), the mission's small call
    (1×16×1024×64, measured 0.77×) goes to SDPA unchanged with the speed reason and a long one
    (2×32×4096×128, 1.17×) is accelerated; families without classes accelerate both."""
    from sagebuild.attention import dispatch

    patch._dispatch_support_cached.cache_clear()
    arch = dispatch.device_arch(torch.device("cuda"))
    q, k, v = _qkv(b=1, hq=16, lq=1024, d=64, device="cuda", seed=4)
    ql, kl, vl = _qkv(b=2, hq=32, lq=4096, d=128, device="cuda", seed=5)
    with patch.patch_sdpa():
        small = F.scaled_dot_product_attention(q, k, v)
        long = F.scaled_dot_product_attention(ql, kl, vl)
    stats = patch.patch_stats()
    if dispatch.family(arch) == "Hopper":
        assert stats.accelerated == 1 and stats.reasons == {
            f"SDPA measured faster on {arch} (shipped class 16x1024x64)": 1
        }, stats.to_dict()
        assert torch.equal(small, ORIG(q, k, v))
    else:
        assert stats.accelerated == 2, stats.to_dict()
    cos = F.cosine_similarity(long.float().flatten(), ORIG(ql, kl, vl).float().flatten(), dim=0).item()
    assert cos > 0.998, cos


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU refusal")
def test_patch_crossover_script_refuses_clearly_without_a_gpu():
    """``scripts/patch_crossover.py`` (the crossover table's measurement) names a malformed
    argument, and on a CPU says it needs a GPU instead of timing pass-through calls."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parent.parent / "scripts" / "patch_crossover.py"
    bad = subprocess.run([sys.executable, str(script), "--dims", "128:4k"], capture_output=True, text=True)
    assert bad.returncode == 1 and "--dims '128:4k': expected HEAD_DIM:LEN" in bad.stderr
    cpu = subprocess.run([sys.executable, str(script), "--dims", "128:4096"], capture_output=True, text=True)
    assert cpu.returncode == 2 and "needs a CUDA or ROCm GPU" in cpu.stdout


# ---------------------------------------------------------------------------------------------
# torch.compile: traced calls become the ``sagebuild::patched_sdpa`` op and are accelerated


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_calls_are_accelerated_through_the_op(fake_gpu, backend):
    """fullgraph=True traces with no graph break; calls that pass the static checks run the
    kernel (counted), a masked call stays the traced original SDPA; results match eager."""
    q, k, v = _qkv(hq=4, hk=2, lq=32)
    mask = torch.ones(32, 32, dtype=torch.bool).tril()

    def fn(a, b, c):
        fast = F.scaled_dot_product_attention(a, b, c, is_causal=True, enable_gqa=True)
        masked = F.scaled_dot_product_attention(a, b.repeat_interleave(2, 1), c.repeat_interleave(2, 1), mask)
        return fast, masked

    torch._dynamo.reset()
    with patch.patch_sdpa(), torch.no_grad():
        eager = fn(q, k, v)
        patch.reset_stats()
        compiled = torch.compile(fn, fullgraph=True, backend=backend)(q, k, v)
        stats = patch.patch_stats()
    torch._dynamo.reset()
    assert stats.accelerated == 1 and stats.passed_through == 0, stats.to_dict()
    assert len(fake_gpu.calls) == 2 and fake_gpu.calls[-1]["causal"] is True
    for got, want in zip(compiled, eager):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.allclose(got.float(), want.float(), atol=2e-3)


def test_compiled_calls_needing_grad_stay_with_the_original(fake_gpu):
    q, k, v = (t.requires_grad_() for t in _qkv(lq=32, dtype=torch.float32))
    q16, k16, v16 = (t.detach().half().requires_grad_() for t in (q, k, v))
    torch._dynamo.reset()
    with patch.patch_sdpa():
        out = torch.compile(lambda a, b, c: F.scaled_dot_product_attention(a, b, c), fullgraph=True,
                            backend="aot_eager")(q16, k16, v16)  # fmt: skip
    torch._dynamo.reset()
    out.float().sum().backward()  # the original's autograd: gradients flow
    assert fake_gpu.calls == [] and q16.grad is not None
