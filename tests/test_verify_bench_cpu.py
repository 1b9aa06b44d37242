"""verify and bench on a CPU-only machine: golden model, CPU-labelled timings, the gates and exit codes."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sagebuild import bench, verify
from sagebuild.attention import metrics
from sagebuild.cli.app import app
from sagebuild.errors import Exit, SagebuildError
from sagebuild.profiles import Accuracy, load_bundled

CPU = load_bundled("cpu")
SMALL = (1, 2, 128, 64)
runner = CliRunner()


def tight(profile):
    """The profile with accuracy bounds no quantized kernel can meet."""
    acc = {k: Accuracy(cos_min=0.99999999, rel_l1_max=1e-6) for k in profile.kernels}
    return dataclasses.replace(profile, accuracy=acc)


def test_verify_golden_passes_and_says_it_is_not_a_gpu():
    res = verify.run_verify(CPU, SMALL)
    assert res.ok
    assert res.mode == "golden" and res.device == "cpu"
    assert "not a GPU" in res.note
    by = {r.variant: r for r in res.results}
    for v in CPU.kernels:
        r = by[v]
        assert r.shape == list(SMALL)
        assert CPU.accuracy[v].cos_min <= r.accuracy["cos"] < 1.0  # quantized: close, never exact
        assert r.accuracy["rel_l1"] <= CPU.accuracy[v].rel_l1_max
    # FP8 P·V is coarser than FP16 P·V: the golden model must show it
    assert by["qk_int8_pv_fp8"].accuracy["rel_l1"] > by["qk_int8_pv_fp16"].accuracy["rel_l1"]


def test_verify_fails_outside_bounds_with_cause_and_fix():
    res = verify.run_verify(tight(CPU), SMALL)
    assert not res.ok
    for r in res.results:
        if r.variant in CPU.kernels:
            assert any("cosine similarity" in p for p in r.problems)
            assert r.cause and r.fix
    assert "qk_int8_pv_fp16" in res.failure_text()


def test_verify_refuses_fp32_naming_the_nan_trap():
    with pytest.raises(SagebuildError, match="float16 or bfloat16") as e:
        verify.run_verify(CPU, SMALL, dtype="float32")
    assert "NaN" in (e.value.fix or "")


def test_diagnose_invalid_device_function_names_the_arch():
    """From the compiled extension, a missing arch is fixed by rebuilding it for this GPU; from an
    attention call (Triton kernels compiled at run time for the GPU) the failure database's cause
    and fix stand: ``sagebuild compile`` would not change those kernels."""
    hip = "RuntimeError: HIP error: invalid device function"
    cause, fix = verify.diagnose(hip, "gfx1201", extension=True)
    assert "gfx1201" in cause and fix == "sagebuild compile --arch gfx1201"
    cuda = "CUDA error: no kernel image is available for execution on the device"
    cause, fix = verify.diagnose(cuda, "sm90", extension=True)
    assert fix == "sagebuild compile --arch sm90"
    line = "pip install torch --index-url https://download.pytorch.org/whl/rocm6.4"
    for text in (hip, cuda):
        cause, fix = verify.diagnose(text, "gfx1201", torch_install=line)
        assert "gfx1201" in cause, cause
        assert fix == f"install a torch build that supports gfx1201: {line}"


def test_cli_verify_exit_30_and_json(tmp_path: Path):
    data = yaml.safe_load((Path(__file__).parents[1] / "profiles" / "cpu.yaml").read_text())
    data["accuracy"]["qk_int8_pv_fp8"]["cos_min"] = 0.9999999
    prof = tmp_path / "strict.yaml"
    prof.write_text(yaml.safe_dump(data))
    r = runner.invoke(app, ["verify", "--profile", str(prof), "--shape", "1,2,128,64", "--json"])
    assert r.exit_code == 30, r.output
    doc = json.loads(r.stdout)
    status = {x["variant"]: x["ok"] for x in doc["results"]}
    assert status["qk_int8_pv_fp8"] is False and status["qk_int8_pv_fp16"] is True
    bad = runner.invoke(app, ["verify", "--profile", "cpu", "--shape", "1,2,128"])
    assert bad.exit_code == 2 and "B,H,N,D" in bad.output


def test_timing_quantiles_and_flops():
    t = bench.Timing.from_samples([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (t.median_ms, t.p20_ms, t.p80_ms, t.reps) == (3.0, 1.8, 4.2, 5)
    assert bench.attention_flops(1, 16, 1024, 64, False) == 4 * 16 * 1024 * 1024 * 64
    assert bench.attention_flops(1, 16, 1024, 64, True) == 2 * 16 * 1024 * 1024 * 64


def test_providers_are_timed_in_interleaved_rounds():
    """Every provider is timed in every round (a drifting machine hits all alike), each round in
    another order (with three providers: a rotation): warm-ups first, then
    reps split into rounds; a provider that raises keeps its exception and the others go on;
    rounds are capped by reps."""
    calls: list[str] = []

    def make(name, fail_at=None):
        def fn():
            calls.append(name)
            if fail_at is not None and calls.count(name) == fail_at:
                raise RuntimeError(f"{name} broke")

        return fn

    a, b, c = make("a"), make("b"), make("c", fail_at=6)
    ta, tb, tc = bench.time_interleaved([a, b, c], warmup=1, reps=7, rounds=3)
    assert calls[:3] == ["a", "b", "c"]  # warm-up
    # 7 = 3 + 2 + 2 calls per round; round 2 runs b, c, a and c fails on its 6th call overall
    # (warm-up, 3, then the 2nd of round 2); round 3 would start from c, which is not called again
    order = ["a"] * 3 + ["b"] * 3 + ["c"] * 3 + ["b"] * 2 + ["c"] * 2 + ["a"] * 2 + ["a"] * 2 + ["b"] * 2
    assert calls[3:] == order
    assert ta.reps == tb.reps == 7 and ta.back_to_back_ms is None
    assert isinstance(tc, RuntimeError) and "c broke" in str(tc)
    calls.clear()
    (t,) = bench.time_interleaved([make("a")], warmup=0, reps=2, rounds=5)
    assert t.reps == 2 and calls == ["a", "a"]
    with pytest.raises(SagebuildError, match="rounds"):
        bench.config_from_profile(CPU, rounds=0)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8])
def test_round_orders_vary_each_providers_predecessor(n):
    """Each round times every provider once; over n rounds (even n) every ordered pair of
    providers is adjacent exactly once, so no provider inherits one predecessor's power state
    in every round (a rotation gave the same pairs in nearly every round on the H200); for odd n,
    no pair more than twice in 2n rounds."""
    rounds = n if n % 2 == 0 else 2 * n
    orders = [bench.timing.round_order(n, r) for r in range(rounds)]
    assert all(sorted(o) == list(range(n)) for o in orders)
    pairs = Counter((a, b) for o in orders for a, b in zip(o, o[1:]))
    if n % 2 == 0:
        assert set(pairs.values()) <= {1} and len(pairs) == n * (n - 1)
    else:
        assert max(pairs.values(), default=0) <= 2
    if n >= 4:  # the second provider (the bench's first of ours) and its predecessors in n rounds
        preds = [o[o.index(1) - 1] for o in orders[:n] if o.index(1) > 0]
        assert max(Counter(preds).values()) == (1 if n % 2 == 0 else 2)


def test_parse_int_list():
    assert bench.parse_int_list("1024,4096, 16384", "seq") == (1024, 4096, 16384)
    for bad in ("", "10x", "0", "-5"):
        with pytest.raises(SagebuildError, match="--seq"):
            bench.parse_int_list(bad, "seq")


def _row(provider, speedup, cos=0.9999, kind="whole_call", seq=1024):
    acc = {
        "cos": cos,
        "rel_l1": 0.01,
        "rmse": 0.0,
        "max_abs": 0.0,
        "finite": True,
        "nan_count": 0,
        "inf_count": 0,
    }
    t = bench.Timing(1.0, 1.0, 1.0, 1)
    return bench.BenchRow(seq, provider, kind, t, 1.0, speedup, acc, {"cos_min": 0.9998, "rel_l1_max": 0.015})


def test_gate_speed_only_for_sageattn_on_gpu_accuracy_always():
    rows = [_row("sdpa", None, kind="baseline"), _row("sageattn", 0.8), _row("qk_int8_pv_fp8", 0.5, cos=0.99)]
    gpu = bench.gate(rows, 1.0, speed_gate=True)
    assert "sageattn speed-up 0.800× < 1× at seq=1024" in gpu
    assert "qk_int8_pv_fp8 cosine 0.990000 < 0.9998 at seq=1024" in gpu
    assert not any("qk_int8_pv_fp8 speed-up" in f for f in gpu)  # per-variant rows are informational
    cpu = bench.gate(rows, 1.0, speed_gate=False)
    assert cpu == ["qk_int8_pv_fp8 cosine 0.990000 < 0.9998 at seq=1024"]
    assert bench.gate([_row("sageattn", 1.2)], 1.0, speed_gate=True) == []


def test_gate_on_sustained_compares_the_sustained_speed_up():
    """--gate-on sustained: the gate compares the sustained speed-up (cold and sustained can
    disagree at the power limit: on the H200 a 4K row was 0.925× cold, 1.093× sustained); it needs
    --sustain, and a metric not in GATE_METRICS is a usage error before anything runs."""
    row = dataclasses.replace(_row("sageattn", 0.925), sustained_speedup=1.093)
    assert bench.gate([row], 1.0, speed_gate=True) == ["sageattn speed-up 0.925× < 1× at seq=1024"]
    assert bench.gate([row], 1.0, speed_gate=True, metric="sustained") == []
    slow = dataclasses.replace(_row("sageattn", 1.3), sustained_speedup=0.9)
    assert bench.gate([slow], 1.0, speed_gate=True, metric="sustained") == [
        "sageattn sustained speed-up 0.900× < 1× at seq=1024"
    ]
    assert bench.gate([slow], 1.0, speed_gate=False, metric="sustained") == []  # CPU: no speed gate
    cfg = bench.config_from_profile(CPU, gate_on="sustained", sustain_s=1.0)
    assert cfg.gate_on == "sustained"
    with pytest.raises(SagebuildError, match="--sustain") as exc:
        bench.config_from_profile(CPU, gate_on="sustained")
    assert "--sustain 1" in exc.value.fix
    with pytest.raises(SagebuildError, match="--gate-on warm"):
        bench.config_from_profile(CPU, gate_on="warm")


def test_the_report_schema_names_every_gate_metric():
    from sagebuild.report.schema import load_schema

    gate = load_schema()["definitions"]["bench"]["properties"]["gate"]["properties"]
    assert gate["metric"]["enum"] == list(bench.GATE_METRICS)


def test_report_chart_follows_the_gate_metric():
    """The report's chart plots the speed-up the gate compared, so its gate line fits the
    points; the Markdown names a sustained gate; a report without a metric reads as cold."""
    from sagebuild.report.render import chart_title, speedup_series

    rows = [
        {"kind": "baseline", "provider": "sdpa", "seq": 4096, "speedup": None, "sustained_speedup": None},
        {
            "kind": "whole_call",
            "provider": "sageattn",
            "seq": 4096,
            "speedup": 0.925,
            "sustained_speedup": 1.093,
        },
    ]
    cold = {"timing_kind": "gpu", "rows": rows, "gate": {"min_speedup": 1.0, "speed_gate_applied": True}}
    assert speedup_series(cold) == {"sageattn": [(4096, 0.925)]}
    sus = {**cold, "gate": {**cold["gate"], "metric": "sustained"}}
    assert speedup_series(sus) == {"sageattn": [(4096, 1.093)]}
    assert "sustained" in chart_title(sus) and "sustained" not in chart_title(cold)


def test_bench_cpu_labels_timings_and_applies_no_speed_gate():
    prof = dataclasses.replace(CPU, bench=dataclasses.replace(CPU.bench, min_speedup=100.0))
    cfg = bench.config_from_profile(prof, seq=(128, 256), heads=2, warmup=1, reps=3)
    res = bench.run_bench(prof, cfg)
    assert res.ok and res.timing_kind == "cpu" and not res.speed_gate_applied
    assert "not a GPU result" in res.note
    assert res.sdpa_backend["name"] in ("cpu-flash", "math") and res.sdpa_backend["ops"]
    rows = {(r.seq, r.provider): r for r in res.rows}
    assert set(rows) == {
        (n, p) for n in (128, 256) for p in ("sdpa", "golden:qk_int8_pv_fp16", "golden:qk_int8_pv_fp8")
    }
    for (n, p), r in rows.items():
        assert r.timing.reps == 3 and r.timing.p20_ms <= r.timing.median_ms <= r.timing.p80_ms
        assert r.tflops == pytest.approx(bench.attention_flops(1, 2, n, 64, False) / r.timing.median_ms / 1e9)
        assert (r.speedup is None) == (p == "sdpa")
    assert rows[(256, "sdpa")].accuracy["cos"] > 0.99999  # SDPA itself is near exact


def test_a_provider_failing_while_timed_keeps_its_row_and_place(monkeypatch):
    """A provider whose first call works (accuracy measured) but which fails while timed becomes
    an error row at its own place; the others are timed and their speed-ups still come from
    the SDPA baseline."""
    from sagebuild.attention import reference

    real = reference.golden_attention
    calls = {"n": 0}

    def flaky(*args, **kw):
        if kw.get("variant") == "qk_int8_pv_fp8":
            calls["n"] += 1
            if calls["n"] > 1:  # the accuracy call passes, the timed ones fail
                raise RuntimeError("device lost")
        return real(*args, **kw)

    monkeypatch.setattr(reference, "golden_attention", flaky)
    res = bench.run_bench(CPU, bench.config_from_profile(CPU, seq=(64,), heads=1, warmup=1, reps=4, rounds=2))
    names = [r.provider for r in res.rows]
    assert names == ["sdpa", *(f"golden:{v}" for v in CPU.kernels)]
    by = {r.provider: r for r in res.rows}
    bad = by["golden:qk_int8_pv_fp8"]
    assert bad.timing is None and bad.error == "RuntimeError: device lost"
    good = by["golden:qk_int8_pv_fp16"]
    assert good.timing.reps == 4 and good.error is None
    assert good.speedup == pytest.approx(by["sdpa"].timing.median_ms / good.timing.median_ms)


def test_bench_table_shows_the_kernel_only_when_rows_carry_a_plan(monkeypatch):
    """GPU rows carry a launch plan: the CLI table gains a kernel column; CPU rows do not."""
    from rich.console import Console

    from sagebuild.cli import bench_cmd

    prof = CPU
    cfg = bench.config_from_profile(prof, seq=(64,), heads=1, warmup=1, reps=2)
    res = bench.run_bench(prof, cfg)
    out = Console(record=True, width=200)
    monkeypatch.setattr(bench_cmd, "out", out)
    bench_cmd.render(res)

    def header(text: str) -> str:
        return next(line for line in text.splitlines() if "provider" in line)

    assert "kernel" not in header(out.export_text())
    from sagebuild.attention.plan import make_plan

    plan = make_plan("sm90", head_dim=64, n_k=16384, pv="fp8", pv_accum="fp32", config="64,128,4,3").record()
    res.rows[1] = dataclasses.replace(res.rows[1], plan=plan)
    out = Console(record=True, width=200)
    monkeypatch.setattr(bench_cmd, "out", out)
    bench_cmd.render(res)
    text = out.export_text()
    assert "kernel" in header(text) and "fp8 mma-acc 64,128,4,3 K128" in text


def test_bench_table_keeps_every_digit_in_a_narrow_terminal(monkeypatch):
    """At 80 columns the table drops the spread, max abs and TFLOPS columns (the JSON keeps them)
    rather than cut numbers short; at 200 all columns show. An error row's message follows."""
    from rich.console import Console

    from sagebuild.cli import bench_cmd

    res = bench.run_bench(CPU, bench.config_from_profile(CPU, seq=(1024,), heads=1, warmup=0, reps=1))
    res.rows[2] = dataclasses.replace(res.rows[2], timing=None, error="out of memory: try a shorter --seq")
    medians = [f"{r.timing.median_ms:.4f}" for r in res.rows if r.timing is not None]
    for width, dropped in ((80, True), (200, False)):
        out = Console(record=True, width=width)
        monkeypatch.setattr(bench_cmd, "out", out)
        bench_cmd.render(res)
        text = out.export_text()
        table = [line for line in text.splitlines() if "│" in line or "┃" in line]
        assert not any("…" in line for line in table), text
        assert all(any(m in line for line in table) for m in medians), text
        assert ("p20–p80" not in text) == dropped and ("TFLOPS" not in text) == dropped
        assert "out of memory: try a shorter --seq" in text.replace("\n", " ")


def test_back_to_back_times_show_where_measured():
    """GPU rows carry the time per call of calls issued back to back (host-bound at small shapes):
    a column in the table, the report and the JSON; CPU runs measure none and show no column."""
    from sagebuild.report.render import bench_table

    res = bench.run_bench(CPU, bench.config_from_profile(CPU, seq=(64,), heads=1, warmup=0, reps=1))
    assert all(r.timing.back_to_back_ms is None for r in res.rows)
    head, _ = bench_table(res.to_dict())
    assert "back-to-back ms" not in head
    timed = dataclasses.replace(res.rows[0].timing, back_to_back_ms=0.0421)
    res.rows[0] = dataclasses.replace(res.rows[0], timing=timed)
    d = res.to_dict()
    assert d["rows"][0]["timing"]["back_to_back_ms"] == 0.0421
    head, cells = bench_table(d)
    col = head.index("back-to-back ms")
    assert [row[col] for row in cells] == ["0.0421"] + ["–"] * (len(cells) - 1)


def test_sustained_times_show_where_measured():
    """``--sustain``: GPU rows carry the sustained time per call and its ratio to SDPA's, shown
    as one column ("ms (ratio×)"); without it (and on CPU, where nothing is sustained) no column;
    a negative duration is a usage error."""
    from sagebuild.report.render import bench_table
    from sagebuild.report.schema import load_schema, validate_sub

    res = bench.run_bench(
        CPU, bench.config_from_profile(CPU, seq=(64,), heads=1, warmup=0, reps=1, sustain_s=0.5)
    )
    assert all(r.timing.sustained_ms is None and r.sustained_speedup is None for r in res.rows)
    assert "--sustain ignored" in res.method  # said, not silently dropped
    assert "sustained ms" not in bench_table(res.to_dict())[0]
    base = dataclasses.replace(res.rows[0].timing, sustained_ms=0.975)
    ours = dataclasses.replace(res.rows[1].timing, sustained_ms=0.8804)
    res.rows[0] = dataclasses.replace(res.rows[0], timing=base)
    res.rows[1] = dataclasses.replace(res.rows[1], timing=ours, sustained_speedup=0.975 / 0.8804)
    d = res.to_dict()
    root = load_schema()  # the report's schema takes both fields
    for row in d["rows"]:
        assert validate_sub(row, root["definitions"]["bench_row"], root, "row") == []
    head, cells = bench_table(d)
    col = head.index("sustained ms")
    assert [row[col] for row in cells[:2]] == ["0.9750", "0.8804 (1.107×)"]
    assert all(row[col] == "–" for row in cells[2:])
    with pytest.raises(SagebuildError, match="sustain"):
        bench.config_from_profile(CPU, sustain_s=-1.0)


def test_bench_accuracy_gate_exit_40():
    prof = tight(CPU)
    res = bench.run_bench(prof, bench.config_from_profile(prof, seq=(128,), heads=1, warmup=0, reps=1))
    assert not res.ok and res.exit_code == Exit.BENCH_BELOW_THRESHOLD
    assert any(f.startswith("golden:qk_int8_pv_fp16 cosine") for f in res.failures)


def test_cli_bench_json():
    r = runner.invoke(
        app,
        [
            "bench",
            "--profile",
            "cpu",
            "--seq",
            "64",
            "--heads",
            "1",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["timing_kind"] == "cpu" and doc["config"]["seq"] == [64]
    bad = runner.invoke(app, ["bench", "--profile", "cpu", "--seq", "abc"])
    assert bad.exit_code == 2 and "--seq" in bad.output
    # --gate-on sustained without --sustain: a usage error naming the fix, no traceback
    bad = runner.invoke(app, ["bench", "--profile", "cpu", "--gate-on", "sustained"])
    assert bad.exit_code == 2 and "--sustain 1" in bad.output and "Traceback" not in bad.output
    r = runner.invoke(
        app,
        ["bench", "--profile", "cpu", "--seq", "64", "--heads", "1", "--reps", "1", "--warmup", "0"]
        + ["--gate-on", "sustained", "--sustain", "0.1", "--json"],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["gate"]["metric"] == "sustained" and doc["config"]["gate_on"] == "sustained"


def test_cli_bench_estimates_its_memory_once(monkeypatch):
    """``sagebuild bench`` checks the shape fits (and measures the CPU's rate) once: the estimate it
    made before showing progress is the one the run takes."""
    from sagebuild.bench import memory as benchmem

    calls = []
    real = benchmem.estimate
    monkeypatch.setattr(benchmem, "estimate", lambda cfg, dev: calls.append(dev) or real(cfg, dev))
    args = ["bench", "--profile", "cpu", "--seq", "64", "--heads", "1", "--reps", "1", "--warmup", "0"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    assert len(calls) == 1, calls


def test_kernel_only_adapter_matches_the_whole_call():
    """bench's kernel-only timing runs B's attention launch on pre-quantized inputs: same output.

    Runs in Triton's interpreter here (conftest), on the GPU in the lead's run.
    """
    import torch

    from sagebuild import attention

    gen = torch.Generator().manual_seed(0)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v = (torch.randn(1, 1, 64, 64, generator=gen).half().to(dev) for _ in range(3))
    for var, whole in (
        ("qk_int8_pv_fp16", attention.sageattn_qk_int8_pv_fp16_triton),
        ("qk_int8_pv_fp8", attention.sageattn_qk_int8_pv_fp8_triton),
    ):
        run, plan = bench.providers.kernel_only(var, q, k, v, "HND", False)
        assert torch.equal(run(), whole(q, k, v, quantization_backend="triton")), var
        assert plan["variant"] == var and plan["quantization"] == "triton" and plan["layout"] == "HND"
    # NHD inputs: the launch transposes them as the call does
    qn, kn, vn = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    run, plan = bench.providers.kernel_only("qk_int8_pv_fp16", qn, kn, vn, "NHD", True)
    whole = attention.sageattn_qk_int8_pv_fp16_triton(qn, kn, vn, tensor_layout="NHD", is_causal=True)
    assert plan["layout"] == "NHD" and plan["causal"] and torch.equal(run().transpose(1, 2), whole)


def test_launch_plan_says_what_a_call_runs(monkeypatch):
    """The plan record is decided as the call decides it: variant and FP8 accumulation, config
    and K block (from the config keyword's env var here), quantization path, table version."""
    import torch

    from sagebuild.attention import AttentionInputError
    from sagebuild.attention.api import launch_plan
    from sagebuild.kernels.triton import configs

    q, k, v = (torch.randn(1, 2, 64, 80).half() for _ in range(3))
    auto = launch_plan(q, k, v)
    assert auto["variant"] == "qk_int8_pv_fp16" and auto["pv_accum"] is None  # interpreter: FP16
    assert auto["table_version"] == configs.CONFIG_TABLE_VERSION and auto["split_head_dim"] is True
    from sagebuild import knobs
    from sagebuild.attention import features

    monkeypatch.setenv(configs.ENV_VAR, "32,128,4,1")
    knobs.refresh()
    fp8 = launch_plan(q, k, v, is_causal=True, variant="qk_int8_pv_fp8", pv_accum_dtype="fp32")
    assert fp8["pv_accum"] == "fp32" and fp8["config"] == "32,128,4,1" and fp8["k_blk"] == 128
    assert (
        fp8["arch"] == "interpreter" and fp8["quantization"] == "triton" and fp8["causal"] and not fp8["tma"]
    )
    assert launch_plan(q, k, v, quantization_backend="ext")["quantization"] == "extension"
    monkeypatch.setenv(features.KNOB["tma"], "1")  # 64 keys: FP8 V rows of 64 bytes, TMA-eligible
    knobs.refresh()
    tma = launch_plan(q, k, v, variant="qk_int8_pv_fp8", quantization_backend="triton")
    assert tma["tma"] and tma["config"] == "32,128,4,1,tma"
    assert not launch_plan(q, k, v, variant="qk_int8_pv_fp16")["tma"]  # FP16 V: no descriptors
    with pytest.raises(AttentionInputError, match="unknown variant"):
        launch_plan(q, k, v, variant="fp4")
    with pytest.raises(AttentionInputError):
        launch_plan(q.float(), k, v)  # the call's own validation: fp32 is refused


@pytest.mark.parametrize("graph", [False, True])
def test_median_ms_times_for_the_requested_duration(monkeypatch, graph):
    """The tuning scripts' ``rep_ms`` reaches do_bench on both paths (the graph replay ignored it)."""
    import torch
    import triton.testing

    from sagebuild.attention import graphed

    seen = []
    monkeypatch.setattr(
        triton.testing, "do_bench", lambda fn, warmup, rep, return_mode: seen.append(rep) or 1.5
    )
    monkeypatch.setattr(graphed, "capture", lambda fn, device: (type("G", (), {"replay": fn})(), None))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert bench.median_ms(lambda: None, graph=graph, rep_ms=100) == 1.5
    assert seen == [100]


def test_attention_flops_for_cross_attention_and_bottom_right_causal():
    """FLOPs count the score pairs computed: N_q·N_k, bottom-right causal's visible pairs."""
    assert bench.attention_flops(2, 10, 4096, 64, False, kv_seq=77) == 4 * 2 * 10 * 4096 * 77 * 64
    # 4 queries over 6 keys, bottom-right: the rows see 3, 4, 5 and 6 keys
    assert bench.attention_flops(1, 1, 4, 1, True, kv_seq=6) == 4 * (3 + 4 + 5 + 6)
    # more queries than keys: the first two rows see none, then 1, 2, 3
    assert bench.attention_flops(1, 1, 5, 1, True, kv_seq=3) == 4 * (1 + 2 + 3)
    assert bench.attention_flops(1, 1, 8, 1, True, kv_seq=8) == bench.attention_flops(1, 1, 8, 1, True)


@pytest.mark.parametrize(
    ("overrides", "message", "fix"),
    [
        ({"kv_heads": 3}, "--kv-heads 3 does not divide --heads 4", "divisor of 4"),
        ({"kv_seq": 0}, "kv-seq", "--batch 1"),
        ({"kv_heads": 0}, "kv-heads", "--batch 1"),
        ({"causal": True, "kv_seq": 32, "seq": (64,)}, "bottom-right", "--kv-seq 64 or more"),
    ],
)
def test_bench_refuses_impossible_cross_attention_and_gqa_shapes(overrides, message, fix):
    with pytest.raises(SagebuildError, match=message) as e:
        bench.config_from_profile(CPU, **{"heads": 4, **overrides})
    assert fix in (e.value.fix or "")


def test_sdpa_baseline_is_what_the_caller_runs_for_gqa_and_causal_cross_attention():
    """GQA goes to SDPA with ``enable_gqa``; causal with fewer queries than keys uses the bottom-right
    mask, as our kernels do (SDPA's ``is_causal`` alone would be top-left there)."""
    import torch

    from sagebuild.attention import reference

    q, k, v = bench.random_qkv((1, 4, 16, 32), "NHD", "float16", 0, "cpu", kv_shape=(1, 2, 40, 32))
    assert q.shape == (1, 16, 4, 32) and k.shape == v.shape == (1, 40, 2, 32)
    for causal in (False, True):
        got = bench.sdpa_call(q, k, v, causal, "NHD")()
        want = reference.exact_attention(q, k, v, tensor_layout="NHD", is_causal=causal)
        assert got.shape == q.shape
        assert torch.allclose(got.float(), want.float(), atol=2e-3), causal
    top_left = torch.nn.functional.scaled_dot_product_attention(
        *(x.transpose(1, 2) for x in (q, k, v)), is_causal=True, enable_gqa=True
    )
    assert not torch.allclose(top_left.transpose(1, 2).float(), want.float(), atol=1e-2)


def test_bench_cpu_cross_attention_with_gqa():
    """``kv_seq`` and ``kv_heads``: K/V of their own shape, FLOPs over N_q·N_k, the golden models'
    accuracy against the exact reference, a shape key of its own and the shape in the report."""
    from sagebuild.report.render import to_markdown

    cfg = bench.config_from_profile(CPU, seq=(96,), heads=4, kv_heads=2, kv_seq=40, warmup=0, reps=2)
    res = bench.run_bench(CPU, cfg)
    assert res.ok, res.failures
    for r in res.rows:
        assert r.error is None, r.error
        assert r.tflops == pytest.approx(4 * 4 * 96 * 40 * 64 / r.timing.median_ms / 1e9)
        if r.provider != "sdpa":
            assert CPU.accuracy[r.provider.split(":")[1]].cos_min <= r.accuracy["cos"] < 1.0
    doc = res.to_dict()
    assert doc["config"]["kv_seq"] == 40 and doc["config"]["kv_heads"] == 2
    text = bench.describe(doc["config"])
    assert "1×4×N×64" in text and "40 keys" in text and "2 K/V heads" in text
    report = {"ok": True, "exit_code": 0, "profile": {"name": "cpu", "why": "test"}, "steps": [],
              "checks": [], "files": {}, "bench": doc, "sagebuild_version": "0",
              "created": "now"}  # fmt: skip
    assert text in to_markdown(report)


def test_shape_keys_name_keys_and_kv_heads_and_profiles_accept_them():
    from sagebuild import profiles

    assert profiles.shape_key(1, 16, 1024, 64, False) == "1x16x1024x64"
    assert profiles.shape_key(2, 10, 4096, 64, False, kv_seq=77) == "2x10x4096:77x64"
    assert profiles.shape_key(1, 32, 4096, 128, True, kv_heads=8) == "1x32/8x4096x128c"
    for key in ("1x32/8x4096x128c", "2x10x4096:77x64"):
        assert profiles._SHAPE_KEY.fullmatch(key)
    assert not profiles._SHAPE_KEY.fullmatch("2x10x4096:x64")
    # and back: the maintainers' scripts take their shapes in this syntax
    for args in (
        (1, 16, 1024, 64, False, None, None),
        (2, 10, 4096, 64, True, 77, None),
        (1, 32, 4096, 128, True, None, 8),
    ):
        b, h, n, d, causal, nk, hk = args
        key = profiles.shape_key(b, h, n, d, causal, kv_seq=nk, kv_heads=hk)
        assert tuple(profiles.parse_shape_key(key)) == (b, h, hk, n, nk, d, causal)
    with pytest.raises(ValueError, match="N:Nk for keys"):
        profiles.parse_shape_key("2x10x4096x64k77")


def test_memory_estimate_counts_keys_not_queries_squared():
    """A cross-attention bench's score matrices are N_q × N_k: 77 keys need far less than 4096²
    (the golden model's full score matrix is most of a CPU run's 7.6 GB at 2×10×4096×64)."""
    from sagebuild.bench import memory as benchmem
    from sagebuild.bench.config import BenchConfig

    base = dict(batch=2, heads=10, seq=(4096,), head_dim=64, dtype="float16", causal=False, min_speedup=0.0)
    base.update(warmup=0, reps=1)
    self_attn = benchmem.bytes_needed(BenchConfig(**base), 4096, on_gpu=False)[0]
    cross = benchmem.bytes_needed(BenchConfig(**base, kv_seq=77), 4096, on_gpu=False)[0]
    assert cross < self_attn / 5
    assert BenchConfig(**base, kv_seq=77).keys(4096) == 77
    assert BenchConfig(**base).keys(4096) == 4096
    # packed sequences: the largest score matrix is one sequence's, not the total's
    packed = BenchConfig(**base, varlen=(1024, 3072))
    assert benchmem.score_shape(packed, 4096) == (3072, 3072)
    assert benchmem.bytes_needed(packed, 4096, on_gpu=False)[0] < self_attn
    # packed cross-attention: the keys are the key lengths' total, the largest matrix one sequence's
    text = BenchConfig(**base, varlen=(2048, 2048), varlen_keys=(137, 512))
    assert text.keys(4096) == 649 and benchmem.score_shape(text, 4096) == (2048, 512)
    assert benchmem.cpu_seconds(text) < benchmem.cpu_seconds(packed)
    # a cross-attention shape too large is refused naming the keys and --kv-seq
    cfg = bench.config_from_profile(CPU, seq=(64,), heads=1, kv_seq=10**11, warmup=0, reps=1)
    with pytest.raises(SagebuildError, match=r"\(100000000000 keys\)") as e:
        benchmem.check_fits(cfg, "cpu")
    assert "--kv-seq" in (e.value.fix or "")


def test_bench_cpu_packed_sequences():
    """``varlen``: one batch of packed sequences ([total, H, D]), SDPA and the golden models once per
    sequence against the exact reference per sequence, FLOPs summed per sequence; the rows' seq
    is the total and the shape line names the lengths."""
    cfg = bench.config_from_profile(CPU, varlen=(48, 80), heads=4, kv_heads=2, causal=True, warmup=0, reps=2)
    assert cfg.seq == (128,) and cfg.batch == 1
    res = bench.run_bench(CPU, cfg)
    assert res.ok, res.failures
    flops = sum(bench.attention_flops(1, 4, n, 64, True) for n in (48, 80))
    for r in res.rows:
        assert r.error is None and r.seq == 128, r
        assert r.tflops == pytest.approx(flops / r.timing.median_ms / 1e9)
        if r.provider == "sdpa":
            assert r.accuracy["cos"] > 0.99999  # per sequence, as the reference
        else:
            assert CPU.accuracy[r.provider.split(":")[1]].cos_min <= r.accuracy["cos"] < 1.0
    doc = res.to_dict()
    assert doc["config"]["varlen"] == [48, 80]
    assert bench.describe(doc["config"]).startswith("packed sequences 48+80")
    # a packed batch is one batch of its own lengths
    for bad in ({"seq": (64,)}, {"kv_seq": 8}, {"batch": 2}):
        with pytest.raises(SagebuildError, match="--varlen") as e:
            bench.config_from_profile(CPU, varlen=(48, 80), **bad)
        assert "--varlen 4680,3120" in (e.value.fix or "")


def test_bench_cpu_packed_cross_attention():
    """Packed sequences with their own key lengths (diffusers' text key padding as varlen): K/V
    packed by the key lengths, FLOPs by each sequence's queries × keys, the reference per sequence;
    causal is refused (each causal sequence's keys are its queries)."""
    cfg = bench.config_from_profile(CPU, varlen=(64, 32), varlen_keys=(9, 40), heads=2, warmup=0, reps=2)
    assert cfg.seq == (96,) and cfg.kv_shape(96) == (1, 2, 49, 64)
    res = bench.run_bench(CPU, cfg)
    assert res.ok, res.failures
    flops = bench.attention_flops(1, 2, 64, 64, False, 9) + bench.attention_flops(1, 2, 32, 64, False, 40)
    for r in res.rows:
        assert r.error is None and r.tflops == pytest.approx(flops / r.timing.median_ms / 1e9), r
        if r.provider != "sdpa":
            assert CPU.accuracy[r.provider.split(":")[1]].cos_min <= r.accuracy["cos"] < 1.0
    doc = res.to_dict()
    assert doc["config"]["varlen_keys"] == [9, 40]
    assert bench.describe(doc["config"]).startswith("packed sequences 64:9+32:40")
    with pytest.raises(SagebuildError, match="causal") as e:
        bench.config_from_profile(CPU, varlen=(64, 32), varlen_keys=(9, 40), causal=True)
    assert "--causal" in (e.value.fix or "")


def test_packed_bench_is_not_gated_by_a_dense_record_of_its_total():
    """A packed bench's rows carry the total as seq, but a dense ``bench.expected`` record of that
    total measured another call: ``--varlen 2048,2048 --heads 16 --head-dim 64`` is not held to
    1x16x4096x64's speed-up, while the dense bench is; a key count per sequence is required."""
    record = {"1x16x4096x64": 2.0}
    dense = bench.config_from_profile(CPU, seq=(4096,), heads=16, head_dim=64, batch=1)
    packed = bench.config_from_profile(CPU, varlen=(2048, 2048), heads=16, head_dim=64)
    assert packed.seq == dense.seq == (4096,)
    slow = [_row("sdpa", None, kind="baseline", seq=4096), _row("sageattn", 1.1, seq=4096)]
    assert bench.gate_key(dense)(4096) == "1x16x4096x64"
    failed = bench.gate(slow, 0.0, speed_gate=True, expected=record, shape_of=bench.gate_key(dense))
    assert failed and "expected 2.000×" in failed[0]
    key = bench.gate_key(packed)(4096)
    assert key == "packed 2048+2048 H16 D64" and key not in record
    assert bench.gate(slow, 0.0, speed_gate=True, expected=record, shape_of=bench.gate_key(packed)) == []
    text = bench.config_from_profile(CPU, varlen=(4096, 4096), varlen_keys=(137, 512), heads=24, head_dim=128)
    assert bench.gate_key(text)(8192) == "packed 4096:137+4096:512 H24 D128"
    with pytest.raises(SagebuildError, match="1 key lengths for 2 packed sequences") as e:
        bench.config_from_profile(CPU, varlen=(64, 32), varlen_keys=(9,))
    assert "N:Nk" in (e.value.fix or "")


def test_parse_varlen():
    assert bench.parse_varlen("4680,3120") == ((4680, 3120), None)
    assert bench.parse_varlen("4096:137, 4096:512") == ((4096, 4096), (137, 512))
    assert bench.parse_varlen("100,50:7") == ((100, 50), (100, 7))
    assert bench.parse_varlen("8:8,4") == ((8, 4), None)
    for bad in ("", "32,x", "32:", ":8", "32:0", "0,4", "4:2:1"):
        with pytest.raises(SagebuildError, match="--varlen") as e:
            bench.parse_varlen(bad)
        assert "4096:137" in (e.value.fix or ""), bad


def test_packed_segments_are_views_of_each_sequence():
    import torch

    q = torch.arange(5 * 2 * 3).reshape(5, 2, 3)
    kv = -torch.arange(4 * 2 * 3).reshape(4, 2, 3)
    (a, ka, _), (b, kb, vb) = bench.packed_segments([(2, 1), (3, 3)], q, kv, kv)
    assert a.shape == (1, 2, 2, 3) and b.shape == (1, 2, 3, 3)
    assert torch.equal(a[0].transpose(0, 1), q[:2]) and torch.equal(b[0].transpose(0, 1), q[2:])
    assert ka.shape == (1, 2, 1, 3) and torch.equal(kb[0].transpose(0, 1), kv[1:]) and vb.shape == kb.shape
    assert a.data_ptr() == q.data_ptr()  # views: no copy before the timed calls
    assert torch.equal(bench.providers.unpack([a, b]), q)


def test_cli_bench_varlen_json():
    args = ["bench", "--profile", "cpu", "--varlen", "32,48", "--heads", "2", "--reps", "1", "--warmup", "0"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["config"]["varlen"] == [32, 48] and doc["config"]["seq"] == [80]
    assert doc["config"]["varlen_keys"] is None
    r = runner.invoke(app, [*args[:4], "32:8,48:16", *args[5:], "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["config"]["varlen_keys"] == [8, 16]
    for arg in ("32,x", "32:x"):
        bad = runner.invoke(app, ["bench", "--profile", "cpu", "--varlen", arg])
        assert bad.exit_code == 2 and "--varlen" in bad.output and "Traceback" not in bad.output


@pytest.mark.parametrize(
    ("variant", "segments", "causal"),
    [
        ("auto", [(40, 40), (24, 24)], True),
        ("qk_int8_pv_fp16", [(40, 40), (24, 24)], True),
        ("qk_int8_pv_fp8", [(40, 40), (24, 24)], True),
        ("auto", [(40, 9), (24, 55)], False),  # text key padding: keys of their own lengths
    ],
)
def test_packed_call_runs_sageattn_varlen_with_the_variant(variant, segments, causal):
    """The GPU bench's packed provider: ``sageattn_varlen`` with the variant's P·V (Triton's
    interpreter here, the GPU in gpu_check), within the variant's bounds of the exact reference per
    sequence, and the plan it ran (packed layout, the variant's kernel)."""
    import torch

    from sagebuild.attention import reference

    n_k = sum(mk for _, mk in segments)
    q, k, v = (x[0] for x in bench.random_qkv((1, 2, 64, 64), "NHD", "float16", 0, "cpu", (1, 1, n_k, 64)))
    call, plan = bench.packed_call(q, k, v, segments, causal, variant)
    assert plan["layout"] == "varlen" and plan["causal"] == causal
    if variant != "auto":
        assert plan["variant"] == variant
    ref = bench.providers.unpack(
        [reference.exact_attention(*s, is_causal=causal) for s in bench.packed_segments(segments, q, k, v)]
    )
    acc = metrics.accuracy(call(), ref)
    assert (
        acc["cos"] >= CPU.accuracy[plan["variant"]].cos_min
        and acc["rel_l1"] <= CPU.accuracy[plan["variant"]].rel_l1_max
    )
    assert torch.equal(call(), call())  # deterministic: the timed calls are the measured ones
