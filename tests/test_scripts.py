"""The maintainers' rerun scripts parse what their docstrings promise (no GPU needed)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent.parent / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("1x16x1024x64", (1, 16, 1024, 64, 1024, False)),
        ("2x32x4096x128c", (2, 32, 4096, 128, 4096, True)),
        ("1x40x32760:512x128", (1, 40, 32760, 128, 512, False)),
        ("2x10x4096:77x64c", (2, 10, 4096, 64, 77, True)),
    ],
)
def test_tune_attention_shapes_name_query_and_key_tokens(spec, parsed):
    """The scripts take ``sagebuild bench``'s shape keys (``profiles.parse_shape_key``)."""
    assert _load("tune_attention").parse_shape(spec) == parsed


@pytest.mark.parametrize("bad", ["1x16x1024", "1x40x32760x128k512", "2x10x4096:x64", "1x32/8x4096x128"])
def test_tune_attention_refuses_other_shapes_naming_the_forms(bad):
    with pytest.raises(ValueError, match="shape"):
        _load("tune_attention").parse_shape(bad)


def test_bench_diffusers_refuses_honestly_without_a_gpu(capsys):
    """On a CPU box the end-to-end bench says why it times nothing and exits 2."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert _load("bench_diffusers").main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--shapes", "1x16x1024"], "N:Nk for keys"),  # the shape-key forms are named
        (["--varlen", "4096:x"], "--varlen"),
        (["--calls", "0"], "--calls"),
    ],
)
def test_kernel_times_refuses_bad_arguments_before_any_gpu_work(argv, says, capsys):
    assert _load("kernel_times").main(argv) == 2
    assert says in capsys.readouterr().err


def test_kernel_times_refuses_honestly_without_a_gpu(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert _load("kernel_times").main(["--varlen", "4096:137,4096:512"]) == 2
    assert "measured nothing" in capsys.readouterr().out


@pytest.mark.gpu
def test_kernel_times_names_our_two_launches_and_sdpas_kernel(capsys):
    """One row per kernel: our K/V quantization and attention launches, once per call each (dense
    and packed), and at least one kernel of SDPA's."""
    assert _load("kernel_times").main(["--shapes", "1x4x256x64", "--varlen", "128:40,64", "--heads", "2",
                                       "--head-dim", "64", "--calls", "3"]) == 0  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    rows = [r.split(" | ") for r in out if r.startswith("| ") and "---" not in r]
    for call in ("1x4x256x64", "packed 128:40+64 H2 D64"):
        ours = {r[2]: float(r[4].rstrip(" |")) for r in rows if r[0] == f"| {call}" and r[1] == "sageattn"}
        assert ours.get("_attn_fwd_kernel") == 1 and ours.get("_quant_blocks_kernel") == 1, (call, ours)
        assert any(r[0] == f"| {call}" and r[1] == "sdpa" for r in rows), call


def test_bench_workloads_times_a_peer_on_the_dense_rows_it_can_run(monkeypatch):
    """``--against ck``: a dense non-causal row gets Comfy Kitchen's call (a stand-in computing real
    attention here), a causal or packed row its reason; an unknown peer is a usage error."""
    import types

    import torch

    from sagebuild.bench import providers
    from sagebuild.bench.peers import peers

    ck = types.ModuleType("comfy_kitchen")
    ck.int8_attention = lambda q, k, v, *, scale=None, attn_mask=None: (
        torch.nn.functional.scaled_dot_product_attention(q, k, v)
    )
    ck.int8_attention_is_available = lambda device=None: True
    monkeypatch.setitem(sys.modules, "comfy_kitchen", ck)
    bw = _load("bench_workloads")
    q, k, v = (torch.randn(1, 2, 64, 64, dtype=torch.float16) for _ in range(3))

    def case(causal, dense=True):
        inputs = providers.Case(64, q, k, v, "HND", causal) if dense else None
        return bw.Case(
            ours=lambda: q, sdpa=lambda: q, dense=None, ours_out=bw._hnd, sdpa_out=bw._hnd, inputs=inputs
        )

    against = peers(("ck",))
    calls, reasons = bw.peer_calls(case(False), against)
    assert list(calls) == ["ck"] and reasons == {}
    assert torch.allclose(calls["ck"](), torch.nn.functional.scaled_dot_product_attention(q, k, v))
    assert "no causal mask" in bw.peer_calls(case(True), against)[1]["ck"]
    assert "dense calls" in bw.peer_calls(case(False, dense=False), against)[1]["ck"]
    res = {"peers": {"ck": {"ms": 0.5, "vs_ours": 1.56, "cos": 0.99987}}}
    assert bw.peer_cells(res, against) == " 0.5000 | 1.56× | 0.99987 |"
    assert bw.peer_cells({}, against) == "  |  |  |"
    monkeypatch.setattr(sys, "argv", ["bench_workloads.py", "--against", "ck,fa9"])
    assert bw.main() == 2


def test_bench_workloads_shipped_column_ignores_the_tuning_record(monkeypatch, tmp_path):
    """``--shipped``: inside ``shipped_table`` the same ``sageattn`` call plans without this
    machine's record file (a class the record routes to SDPA runs our kernels), and the knob is
    restored afterwards."""
    import torch

    from sagebuild import knobs
    from sagebuild.attention import api, dispatch, functions
    from sagebuild.bench import providers
    from sagebuild.tuning import record
    from sagebuild.tuning.record import Choice, Fingerprint, ShapeClass, TunedClass, TuningRecord

    bw = _load("bench_workloads")
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SAGEBUILD_ROUTE", "1")
    monkeypatch.setenv("SAGEBUILD_TUNING", "1")
    knobs.refresh()
    arch = dispatch.device_arch("cpu")
    here = Fingerprint("test", arch, "", "", "", "", "", "")
    monkeypatch.setattr(record, "_machine_fingerprint", lambda a: here if a == arch else None)
    routed = TunedClass(
        ShapeClass(64, 40, 72, 8, False, False), Choice("sdpa", ms=1.0), 1.0, Choice("ours", ms=2.0)
    )
    record.save(TuningRecord(here, [routed]))
    record.reload()
    api.clear_caches()
    try:
        q, k, v = (torch.randn(2, 4, n, 64, dtype=torch.float16) for n in (40, 72, 72))
        call = lambda: functions.sageattn(q, k, v)  # noqa: E731
        assert bw._ran(call) == "SDPA (routed)"
        with bw.shipped_table():
            assert knobs.switch("SAGEBUILD_TUNING") is False
            assert bw._ran(call) == "kernels"
        assert knobs.switch("SAGEBUILD_TUNING") is True and bw._ran(call) == "SDPA (routed)"
        # the record changes this call's plan (it routes), not a head dim it has no class for; packed: ""
        case = lambda q, k, v: bw.Case(  # noqa: E731
            ours=call, sdpa=call, dense=None, ours_out=bw._hnd, sdpa_out=bw._hnd,
            inputs=providers.Case(q.shape[2], q, k, v, "HND", False),
        )  # fmt: skip
        assert bw.tuned_plan(case(q, k, v)) == "tuned"
        other = [torch.randn(1, 2, 256, 128, dtype=torch.float16) for _ in range(3)]  # no class
        assert bw.tuned_plan(case(*other)) == "same"
        assert bw.tuned_plan(bw.Case(call, call, None, bw._hnd, bw._hnd)) == ""
    finally:
        monkeypatch.undo()
        knobs.refresh()
        record.reload()
        api.clear_caches()
    cells = {"shipped": {"ms": 0.25, "vs_tuned": 1.02, "ran": "kernels", "plan": "same"}}
    assert bw.shipped_cells(cells) == " 0.2500 | 1.02× | kernels | same |"
    assert bw.shipped_cells({}) == ""


def test_tune_attention_holds_back_gated_variants_by_their_plan_name(monkeypatch, tmp_path):
    """Each of tune_attention's variants maps to the plan's name: on RDNA4 without a verify record
    both FP8 ones (fp8, fp8acc) wait for the accuracy check, FP16 does not; on Hopper none waits."""
    from sagebuild.attention import dispatch, gate

    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))
    gate.reset()
    ta = _load("tune_attention")
    for arch, held in (("gfx1201", {"fp8", "fp8acc"}), ("sm_90", set())):
        monkeypatch.setattr(dispatch, "device_arch", lambda _dev, a=arch: a)
        assert {v for v in ta.FN if not ta._tunable(v)} == held, arch
    gate.reset()
