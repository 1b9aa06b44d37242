"""Replayed calls (``sagebuild.attention.replay``): a repeated call signature issues the recorded
launches on new buffers and must give exactly what the full path gives for the same inputs.

Runs on the GPU when there is one (the path users take) and under Triton's interpreter otherwise.
"""

from __future__ import annotations

import pytest
import torch

from sagebuild import knobs
from sagebuild.attention import (
    api,
    features,
    replay,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_qk_int8_pv_fp16_triton,
)
from sagebuild.kernels.triton import configs, quant

GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
CFG = None if GPU else configs.LaunchConfig(32, 64, 4, 1)
FP16, FP8 = sageattn_qk_int8_pv_fp16_triton, sageattn_qk_int8_pv_fp8_triton

pytestmark = pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")


def _qkv(seed: int, hq: int = 4, hk: int = 2, n: int = 200, d: int = 64, nhd: bool = False):
    g = torch.Generator().manual_seed(seed)
    shape = (lambda h: (1, n, h, d)) if nhd else (lambda h: (1, h, n, d))
    return tuple(torch.randn(shape(h), generator=g).half().to(DEV) for h in (hq, hk, hk))


def _same(a, b) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and a.stride() == b.stride() and torch.equal(a, b)


CASES = {
    "fp16": (FP16, {}),
    "fp8 two-level": (FP8, {}),
    "fp8 mma-accumulated, causal": (FP8, {"pv_accum_dtype": "fp32", "is_causal": True}),
    "fp16 causal lse": (FP16, {"is_causal": True, "return_lse": True}),
    "fp8 NHD lse": (FP8, {"tensor_layout": "NHD", "return_lse": True}),
    "fp16 unsmoothed per-block": (FP16, {"smooth_k": False, "qk_quant_gran": "per_block"}),
}


@pytest.mark.parametrize("stats", ["inline", "parts"])
@pytest.mark.parametrize("case", list(CASES))
def test_replayed_calls_equal_the_full_path(case, stats, monkeypatch):
    fn, kw = CASES[case]
    monkeypatch.setattr(quant, "INLINE_STATS_MAX_ELEMENTS", 1 << 30 if stats == "inline" else 0)
    api.clear_caches()
    nhd = kw.get("tensor_layout") == "NHD"
    kw = {**kw, "config": CFG, "quantization_backend": "triton"}
    a = _qkv(1, nhd=nhd)
    first = fn(*a, **kw)  # the full path (a signature's first call is not recorded)
    assert not api._REPLAYS
    assert _same(fn(*a, **kw), first)  # the full path again, recorded
    reps = [r for r in api._REPLAYS.values() if r is not None]
    assert reps, "the call was not recorded as replayable"
    # on a GPU every launch is bound to its compiled kernel (no launcher cache lookup per replay)
    bound = [item[-1] is not None for item in reps[0].launches]
    assert bound and all(bound) == GPU
    b, c = _qkv(2, nhd=nhd), _qkv(3, nhd=nhd)
    out_b, out_c = fn(*b, **kw), fn(*c, **kw)  # replayed
    api.clear_caches()
    assert _same(out_b, fn(*b, **kw)) and _same(out_c, fn(*c, **kw))
    o_b = out_b[0] if isinstance(out_b, tuple) else out_b
    o_c = out_c[0] if isinstance(out_c, tuple) else out_c
    assert o_b.data_ptr() != o_c.data_ptr() and not torch.equal(o_b, o_c)  # fresh buffers, new data
    assert not torch.equal(o_b, first[0] if isinstance(first, tuple) else first)


def test_tma_tiles_replay(monkeypatch):
    """K/V loaded by tensor descriptors replay like the rest: the recorded launch holds host-built
    descriptors over the call's K/V buffers; the replay keeps only their specs and builds them
    over each replay's new buffers, then matches a fresh call. On a GPU
    the table's TMA row at 4096 keys (Hopper) or any config with SAGEBUILD_TMA=1; in the
    interpreter the forced small config."""
    from sagebuild.attention.api import launch_plan

    monkeypatch.setenv(features.KNOB["tma"], "1")
    api.clear_caches()  # re-reads the knobs
    n, d = (4096, 128) if GPU else (256, 64)
    kw = {"config": CFG, "quantization_backend": "triton", "pv_accum_dtype": "fp32"}
    a = _qkv(1, n=n, d=d)
    plan = launch_plan(*a, variant="qk_int8_pv_fp8", pv_accum_dtype="fp32", quantization_backend="triton")
    if GPU and not plan["tma"]:
        pytest.skip(f"no TMA on this GPU ({plan['family']})")
    assert plan["tma"], plan
    FP8(*a, **kw)
    FP8(*a, **kw)  # recorded
    reps = [r for r in api._REPLAYS.values() if r is not None]
    assert reps
    descs = [d for item in reps[0].launches for d in item[4]]  # (position, tensor index, spec)
    assert len(descs) == 4  # K, V and their second channel pieces (the same boxes unsplit)
    assert [f for f in reps[0].desc_firsts if f] == [[0, 1, 0, 1]]  # unsplit: K's and V's built once each
    assert all(i >= reps[0].n_inputs for _, i, _ in descs)  # the call's own K/V buffers
    templates = [(pos, item[2]) for item in reps[0].launches for pos, _, _ in item[4]]
    assert all(t[pos] is None for pos, t in templates)  # no recorded descriptor is reused
    b = _qkv(2, n=n, d=d)
    out = FP8(*b, **kw)  # replayed
    api.clear_caches()
    assert _same(out, FP8(*b, **kw))


def test_aliased_inputs_get_their_own_replay():
    """Self-attention on one tensor (q is k is v) records a replay of its own: a later call with
    three distinct tensors of the same signature must not reuse it (it would read q thrice)."""
    api.clear_caches()
    kw = {"config": CFG, "quantization_backend": "triton"}
    x = _qkv(1, hk=4)[0]
    FP16(x, x, x, **kw)
    FP16(x, x, x, **kw)  # recorded
    y = _qkv(2, hk=4)[0]
    out_alias = FP16(y, y, y, **kw)
    q, k, v = _qkv(3, hk=4)
    FP16(q, k, v, **kw)  # recorded: another aliasing, another replay
    out = FP16(q, k, v, **kw)
    assert len([r for r in api._REPLAYS.values() if r is not None]) == 2
    api.clear_caches()
    assert _same(out_alias, FP16(y, y, y, **kw)) and _same(out, FP16(q, k, v, **kw))


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_masked_calls_replay_with_each_calls_mask(kind):
    """The mask is a replay input like q, k, v: a replayed call reads its own mask, not the
    recorded one (a new mask of the same layout must change the result)."""
    api.clear_caches()
    kw = {"config": CFG, "quantization_backend": "triton"}
    q, k, v = _qkv(4)

    def mask(valid: int):
        keep = torch.arange(200, device=DEV) < valid
        m = keep if kind == "bool" else torch.zeros(200, device=DEV).masked_fill(~keep, float("-inf"))
        return m[None, None, None, :]

    FP16(q, k, v, attn_mask=mask(150), **kw)
    FP16(q, k, v, attn_mask=mask(150), **kw)  # recorded
    replayed = FP16(q, k, v, attn_mask=mask(40), **kw)
    assert [r for r in api._REPLAYS.values() if r is not None]
    api.clear_caches()
    assert _same(replayed, FP16(q, k, v, attn_mask=mask(40), **kw))
    assert not torch.equal(replayed, FP16(q, k, v, attn_mask=mask(150), **kw))


def _packed(seed: int, lens: list[int], h: int = 2, d: int = 64):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(sum(lens), h, d, generator=g).half().to(DEV) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=DEV)
    return q, k, v, cu


def test_varlen_calls_replay_with_each_calls_lengths():
    """Packed calls replay like dense ones (the host path of a small varlen call was ~5x a dense
    one's): q, k, v and both cu_seqlens are replay inputs, so a replayed call with other
    lengths of the same total reads its own; cu_seqlens_q is cu_seqlens_k gets its own replay."""
    from sagebuild.attention import sageattn_varlen

    api.clear_caches()
    kw = {"config": CFG}
    q, k, v, cu = _packed(1, [37, 90, 73])
    sageattn_varlen(q, k, v, cu, cu, 90, 90, **kw)
    sageattn_varlen(q, k, v, cu, cu, 90, 90, **kw)  # recorded
    reps = [r for r in api._REPLAYS.values() if r is not None]
    assert len(reps) == 1 and reps[0].n_inputs == 5
    q2, k2, v2, cu2 = _packed(2, [90, 50, 60])  # other lengths, same total and longest
    cuk = torch.tensor([0, 60, 150, 200], dtype=torch.int32, device=DEV)
    aliased = sageattn_varlen(q2, k2, v2, cu2, cu2, 90, 90, **kw)  # replayed
    sageattn_varlen(q2, k2, v2, cu2, cuk.clone(), 90, 90, **kw)  # distinct cu tensors: recorded
    distinct = sageattn_varlen(q2, k2, v2, cu2, cuk, 90, 90, **kw)  # replayed
    assert len([r for r in api._REPLAYS.values() if r is not None]) == 2
    api.clear_caches()
    assert _same(aliased, sageattn_varlen(q2, k2, v2, cu2, cu2, 90, 90, **kw))
    assert _same(distinct, sageattn_varlen(q2, k2, v2, cu2, cuk, 90, 90, **kw))
    assert not torch.equal(aliased, distinct)


def test_varlen_replays_still_check_host_lengths():
    """cu_seqlens on the host are checked on every call, replayed or not (on a GPU they stay on
    the device unread and the kernels clamp them)."""
    from sagebuild.attention import sageattn_varlen
    from sagebuild.attention.plan import AttentionInputError

    if GPU:
        pytest.skip("host cu_seqlens with GPU tensors are converted (a copy), so never replayed")
    api.clear_caches()
    q, k, v, cu = _packed(3, [37, 90, 73])
    for _ in range(3):
        sageattn_varlen(q, k, v, cu, cu, 90, 90, config=CFG)
    assert [r for r in api._REPLAYS.values() if r is not None]
    bad = torch.tensor([0, 100, 50, 200], dtype=torch.int32)
    with pytest.raises(AttentionInputError, match="never decrease"):
        sageattn_varlen(q, k, v, bad, bad, 90, 90, config=CFG)


def test_a_call_with_other_tensor_ops_is_never_replayed():
    """The recorder refuses what a replay would skip: any aten op besides allocations and views."""
    x = torch.randn(4, 4)
    with replay.Recorder() as rec:
        out = torch.empty(4, 4)
        out.copy_(x)
    assert rec.build((x, x, x), out) is None
    with replay.Recorder() as rec:  # no launch at all: nothing to replay either
        out = torch.empty(4, 4).t()
    assert rec.build((x, x, x), out) is None


def test_environment_knobs_are_part_of_the_key(monkeypatch):
    """The plan key holds the plan knobs' values, read once per process (``knobs.refresh`` re-reads
    them): a variable set, changed or removed gives another key (another plan, another replay)
    from the next refresh on, and never costs an environment read per call."""
    monkeypatch.delenv(configs.ENV_VAR, raising=False)
    knobs.refresh()
    unset = knobs.plan_values()
    monkeypatch.setenv(configs.ENV_VAR, "64,64,4,3")
    assert knobs.plan_values() == unset  # not re-read per call
    knobs.refresh()
    first = knobs.plan_values()
    monkeypatch.setenv(configs.ENV_VAR, "64,32,4,3")
    api.clear_caches()
    second = knobs.plan_values()
    monkeypatch.delenv(configs.ENV_VAR)
    knobs.refresh()
    assert len({unset, first, second}) == 3 and knobs.plan_values() == unset
    q, k, v = _qkv(1, n=40)
    assert api._plan_key(q, k, v) != (api._plan_key(q, k, v, "x"))
    monkeypatch.setenv(features.KNOB["pdl"], "1")
    before = api._plan_key(q, k, v)
    knobs.refresh()
    assert api._plan_key(q, k, v) != before


def test_bound_launches_take_device_pointers_as_ints(monkeypatch):
    """A replayed launch bound to its compiled kernel passes each tensor as its device pointer,
    an int (Triton's launcher uses it as is; for a tensor it would call data_ptr() and query the
    driver per pointer), views at their offsets; Triton's own path (a launch hook installed)
    still gets the tensors."""
    from sagebuild.kernels.triton import launcher

    seen, launched = [], []
    bound = (lambda *a: seen.append(a), 2, 1, 1, "function", "metadata", ("CONST",))
    f32 = torch.float32
    groups = [((0, (f32, (8,), (1,), 0)), [(1, (f32, (4,), (1,), 2))])]  # a buffer and a view of it
    launch = ("fn", (2,), [None, None, None, 7], ((0, 0), (1, 1), (2, 2)), (), {"C": 1}, "key", {}, bound)
    rep = replay.Replay(torch.device("cpu"), groups, [launch], 1, views=2, n_inputs=1)
    rep.index = 0  # as a CUDA replay: the bound launch is taken
    monkeypatch.setattr(launcher, "raw_stream", lambda index: 1234)
    monkeypatch.setattr(launcher, "hooks_installed", lambda: False)
    q = torch.zeros(3)
    out = rep(q)
    (args,) = seen
    assert args[:9] == (2, 1, 1, 1234, "function", "metadata", None, None, None)
    ptrs = args[9:12]
    assert all(type(p) is int for p in ptrs) and args[12:] == (7, "CONST")
    assert ptrs[0] == q.data_ptr() and ptrs[1] == out.data_ptr() and ptrs[2] == out.data_ptr() + 2 * 4
    monkeypatch.setattr(launcher, "hooks_installed", lambda: True)
    monkeypatch.setattr(launcher, "launch", lambda fn, grid, args, c, key, **o: launched.append(args))
    rep(q)
    assert len(seen) == 1 and all(isinstance(a, torch.Tensor) for a in launched[0][:3]), launched


def test_buffers_only_launches_use_share_one_allocation(monkeypatch):
    """With every launch bound, the buffers no output or descriptor needs as a tensor (a call's
    quantized K/V and their scales) are laid out in one allocation, each at its own 512-byte
    aligned offset and views at theirs; the output stays a tensor of its own. Triton's path (a
    hook installed) still allocates each buffer as a tensor."""
    from sagebuild.kernels.triton import launcher

    seen, launched = [], []
    bound = (lambda *a: seen.append(a), 1, 1, 1, "function", "metadata", ())
    f32, i8 = torch.float32, torch.int8
    groups = [
        ((0, (f32, (4, 6), (6, 1), 0)), []),  # the output
        ((1, (i8, (2, 100), (100, 1), 0)), [(2, (i8, (50,), (1,), 150))]),  # a buffer and a view of it
        ((-1, (f32, (700,), (1,), 0)), [(3, (f32, (10, 10), (10, 1), 600))]),  # used only in part
    ]
    slots = tuple((pos, i) for pos, i in enumerate(range(5)))
    launch = ("fn", (1,), [None] * 5, slots, (), {}, "key", {}, bound)
    rep = replay.Replay(torch.device("cpu"), groups, [launch], 1, views=4, n_inputs=1)
    assert rep.packed_bytes == 512 + 3072 and dict(rep.packed) == {1: 0, 2: 150, 3: 512 + 2400}
    rep.index = 0
    monkeypatch.setattr(launcher, "raw_stream", lambda index: 0)
    monkeypatch.setattr(launcher, "hooks_installed", lambda: False)
    q = torch.zeros(3)
    out = rep(q)
    ptrs = seen[0][9:]
    assert ptrs[0] == q.data_ptr() and ptrs[1] == out.data_ptr() and out.shape == (4, 6)
    assert ptrs[3] - ptrs[2] == 150 and ptrs[4] - ptrs[2] == 512 + 2400
    assert out.data_ptr() not in range(ptrs[2], ptrs[2] + rep.packed_bytes)
    monkeypatch.setattr(launcher, "hooks_installed", lambda: True)
    monkeypatch.setattr(launcher, "launch", lambda fn, grid, args, c, key, **o: launched.append(args))
    rep(q)
    assert [tuple(a.shape) for a in launched[0]] == [(3,), (4, 6), (2, 100), (50,), (10, 10)]


def _pointer_launches(rep: replay.Replay, memory: dict) -> None:
    """Bind every recorded launch to a stand-in for Triton's launcher that takes device pointers
    (ints) as the real one does: it finds each pointer's tensor again (an input, or a view of the
    call's allocations at that address with the recorded view's dtype and strides) and runs the
    kernel on the interpreter, so a replay's pointer path runs the real kernels on CPU memory."""
    import ctypes

    specs = {}
    for (pid, spec), others in rep.groups:
        if pid >= 0:
            specs[rep.n_inputs + pid] = spec
        specs.update((rep.n_inputs + vid, s) for vid, s in others)

    def at(ptr: int, spec: tuple) -> torch.Tensor:
        dtype, size, stride, _ = spec
        span = (1 + sum((n - 1) * st for n, st in zip(size, stride) if n > 0)) * dtype.itemsize
        raw = torch.frombuffer((ctypes.c_byte * span).from_address(ptr), dtype=torch.uint8)
        memory.setdefault("views", []).append(raw)
        return raw.view(dtype).as_strided(size, stride)

    def bound_for(fn, grid, slots, constexprs, options):
        def run(*a):
            args = list(a[9 : 9 + len(a) - 9 - len(constexprs)])
            for pos, i in slots:
                x = args[pos]
                if i < rep.n_inputs:
                    assert x == memory["inputs"][i].data_ptr()
                    args[pos] = memory["inputs"][i]
                elif type(x) is int:
                    args[pos] = at(x, specs[i])
            fn[grid](*args, **constexprs, **options)

        return (run, 1, 1, 1, None, None, tuple(constexprs.values()))

    rep.launches = [
        (fn, grid, t, slots, descs, c, key, o, bound_for(fn, grid, slots, c, o))
        for fn, grid, t, slots, descs, c, key, o, _ in rep.launches
    ]
    rep.all_bound, rep.index = True, 0


@pytest.mark.skipif(GPU, reason="runs the pointer path on the interpreter (a GPU runs it for real above)")
@pytest.mark.parametrize("case", ["fp16", "fp8 mma-accumulated, causal", "fp16 causal lse"])
def test_pointer_path_with_shared_allocation_equals_the_full_path(case, monkeypatch):
    """A replay's GPU path, launches by pointer with the internal buffers in one allocation, run on
    the interpreter: its output equals the full path's bit for bit."""
    from sagebuild.kernels.triton import launcher

    fn, kw = CASES[case]
    api.clear_caches()
    kw = {**kw, "config": CFG, "quantization_backend": "triton"}
    a = _qkv(1)
    fn(*a, **kw)
    fn(*a, **kw)  # recorded
    (rep,) = [r for r in api._REPLAYS.values() if r is not None]
    assert rep.packed, "nothing to pack: the test would not exercise the shared allocation"
    memory: dict = {}
    _pointer_launches(rep, memory)
    monkeypatch.setattr(launcher, "raw_stream", lambda index: 0)
    monkeypatch.setattr(launcher, "hooks_installed", lambda: False)
    b = _qkv(2)
    memory["inputs"] = b
    out = rep(*b)
    assert memory["views"], "no launch read the shared allocation"
    api.clear_caches()
    assert _same(out, fn(*b, **kw))
