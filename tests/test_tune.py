"""``sagebuild tune`` (issue 58): the whole mechanism under Triton's CPU interpreter with an
injected timer (a fake clock, so winners are deterministic): winners and SDPA routing choices,
failed candidates, Ctrl-C, the budget, the record it extends or replaces, the recording hook,
export; plus the CLI's refusals. The GPU run is ``test_tune_gpu.py``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from sagebuild.cli.app import app
from sagebuild.tuning import classes, record, session, share, space
from sagebuild.tuning.tuner import SDPA, resource_problem

CPU = torch.device("cpu")
BOUNDS = {
    "qk_int8_pv_fp16": {"cos_min": 0.9998, "rel_l1_max": 0.015},
    "qk_int8_pv_fp8": {"cos_min": 0.999, "rel_l1_max": 0.05},
}
SMALL = "1x2x48x32"  # one query/key tile and a partial one at the interpreter's 32x16 tiles
CROSS = "1x2x32:20x40"

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's own mechanism test")


class FakeClock:
    """Times per label (ms), and a clock that moves only when told: deterministic winners."""

    def __init__(self, ms: dict[str, float], default: float = 5.0) -> None:
        self.ms, self.default, self.calls, self.now = ms, default, [], 0.0

    def timer(self, calls, seconds):
        self.calls.append([label for label, _ in calls])
        out = []
        for label, fn in calls:
            fn()  # each path really runs
            value = self.ms.get(label, self.default)
            try:  # as bench.time_interleaved: the exception that stopped a path is its result
                out.append(value() if callable(value) else value)
            except Exception as exc:  # noqa: BLE001
                out.append(exc)
        return out

    def clock(self) -> float:
        return self.now


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    record.reload()
    yield tmp_path / "cache"
    record.uninstall()


def _tune(shapes: str, fake: FakeClock, **kw):
    kw.setdefault("variants", ("fp16",))
    budget_s, bounds = kw.pop("budget_s", 1e6), kw.pop("bounds", BOUNDS)
    workloads = list(classes.from_shapes(shapes))
    return session.tune(workloads, device=CPU, budget_s=budget_s, bounds=bounds, timer=fake.timer, **kw)


def test_winners_follow_the_clock_and_are_written_to_the_record(cache):
    fake = FakeClock({"sdpa": 1.0, "fp16 32,16,4,1": 0.9, "fp16 16,16,4,1": 0.5})
    outcome = _tune(f"{SMALL},{CROSS}", fake)
    assert outcome.path == record.record_path("interpreter") and outcome.path.is_file()
    for r in outcome.run.results:
        assert r.winner.label == "fp16 16,16,4,1" and r.winner.ms == 0.5
        assert r.runner_up.label == "fp16 32,16,4,1", r.to_dict()  # the shipped table's config, timed beside
        assert r.shipped.source == "table" and r.shipped.config == "32,16,4,1"
        assert fake.calls[0][0] == SDPA  # SDPA timed in the same rounds as the candidates
    rec = record.read(outcome.path)
    assert rec.fingerprint.arch == "interpreter"
    by = {c.shape.label(): c for c in rec.classes}
    cross = by["2x32:20x40"]
    assert (cross.winner.path, cross.winner.variant, cross.winner.config) == ("ours", "fp16", "16,16,4,1")
    assert cross.sdpa_ms == 1.0 and cross.runner_up.config == "32,16,4,1"
    # the record serves calls by the table's rules: a nearby call matches the measured class
    record.install("interpreter", rec)
    found = record.lookup("interpreter", record.ShapeClass(40, 48, 48, 4, False))
    assert found is not None and found.winner.config == "16,16,4,1"


def test_sdpa_wins_where_it_is_faster_and_the_table_keeps_ties(cache):
    fake = FakeClock({"sdpa": 0.5, "fp16 32,16,4,1": 0.9, "fp16 16,16,4,1": 0.89})
    outcome = _tune(SMALL, fake)
    (r,) = outcome.run.results
    assert r.winner.variant == SDPA and r.runner_up.label == "fp16 32,16,4,1"  # within 2 %: the table's
    (c,) = record.read(outcome.path).classes
    assert c.winner.sdpa and c.winner.ms == 0.5 and c.runner_up.config == "32,16,4,1"


def test_failed_candidates_are_recorded_and_never_chosen(cache):
    def boom():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    fake = FakeClock({"sdpa": 1.0, "fp16 32,16,4,1": 0.9, "fp16 16,16,4,1": boom, "fp8 32,16,4,1": 0.1})
    spilled = lambda cand, kernels: "spills: 8 registers" if cand.label == "fp8 16,16,4,1" else None  # noqa: E731
    tight = {**BOUNDS, "qk_int8_pv_fp8": {"cos_min": 0.9999999, "rel_l1_max": 1e-6}}
    outcome = _tune(SMALL, fake, variants=("fp16", "fp8"), inspect=spilled, bounds=tight)
    (r,) = outcome.run.results
    status = {p.label: (p.status, (p.reason or "").split(":")[0]) for p in r.paths}
    assert status["fp16 16,16,4,1"] == ("failed", "fault")  # the timer's failure
    assert status["fp8 32,16,4,1"] == ("failed", "accuracy")  # fastest on the clock, but inaccurate
    assert status["fp8 16,16,4,1"] == ("failed", "spills")  # dropped before timing
    assert "fp8 16,16,4,1" not in fake.calls[0] and "fp8 32,16,4,1" not in fake.calls[0]
    assert r.winner.label == "fp16 32,16,4,1"
    (c,) = record.read(outcome.path).classes
    assert {(f.variant, f.config) for f in c.failed} == {
        ("fp16", "16,16,4,1"),
        ("fp8", "32,16,4,1"),
        ("fp8", "16,16,4,1"),
    }


def test_a_candidate_past_the_time_limit_times_out(cache, monkeypatch):
    from sagebuild.tuning import tuner as tuner_mod
    from sagebuild.tuning.tuner import Tuner

    monkeypatch.setattr(tuner_mod, "TIMEOUT_FACTOR", 0.0)  # any call at all takes longer than the limit
    tuner = Tuner(CPU, BOUNDS, 1e6, FakeClock({"sdpa": 1.0}).timer, variants=("fp16",), min_timeout_s=0.0)
    tuner_run = tuner.run(list(classes.from_shapes(SMALL)), lambda _r: None)
    (r,) = tuner_run.results
    assert {p.status for p in r.paths if p.variant != SDPA} == {"failed"}
    assert all(p.reason.startswith("timeout: ") for p in r.paths if p.variant != SDPA)
    assert r.winner.variant == SDPA


def test_a_compile_error_fails_the_candidate_alone(cache, monkeypatch):
    monkeypatch.setattr(
        space, "_SPACE", [space.SpaceRow("interpreter", "*", "*", ("32,16,4,1", "16,24,4,1"))]
    )
    outcome = _tune(SMALL, FakeClock({"sdpa": 1.0}))
    bad = next(p for p in outcome.run.results[0].paths if p.config == "16,24,4,1")
    assert bad.status == "failed" and "power of two" in bad.reason


def test_resource_check_drops_spills_and_scratch_but_not_the_shipped_row():
    class K:
        def __init__(self, spills=0, scratch=0):
            self.n_spills, self.name = spills, "attn"
            self.metadata = type("M", (), {"global_scratch_size": scratch})()

    cand = space.Candidate("fp16", "64,64,4,3", "space")
    assert resource_problem(cand, [K(), K(spills=4)]).startswith("spills: 4")
    assert resource_problem(cand, [K(scratch=256)]).startswith("scratch: 256")
    assert resource_problem(cand, [K()]) is None
    assert resource_problem(space.Candidate("fp16", "64,64,4,2,96", "table"), [K(spills=4)]) is None


def test_ctrl_c_keeps_the_finished_classes(cache):
    state = {"n": 0}

    def interrupt_second_class():
        state["n"] += 1
        if state["n"] > 1:
            raise KeyboardInterrupt
        return 0.5

    fake = FakeClock({"sdpa": interrupt_second_class, "fp16 32,16,4,1": 0.9, "fp16 16,16,4,1": 0.7})
    outcome = _tune(f"{SMALL},{CROSS}", fake)
    assert outcome.run.interrupted and [r.cls.shape for r in outcome.run.results] == [SMALL]
    assert [(c.key, why) for c, why in outcome.run.skipped] == [(f"{CROSS} float16", "interrupted")]
    assert [c.shape.label() for c in record.read(outcome.path).classes] == ["2x48x32"]


def test_budget_skips_classes_and_candidates(cache):
    fake = FakeClock({"sdpa": 1.0})
    steps = iter([0.0, 0.0, 0.0, 100.0] + [1000.0] * 50)
    workloads = list(classes.from_shapes(f"{SMALL},{CROSS}"))
    outcome = session.tune(
        workloads, device=CPU, budget_s=10.0, bounds=BOUNDS, timer=fake.timer, variants=("fp16",),
        clock=lambda: next(steps),
    )  # fmt: skip
    (r,) = outcome.run.results
    skipped = [p for p in r.paths if p.status == "skipped"]
    assert [p.source for p in skipped] == ["space"] and skipped[0].reason == "budget spent"
    assert [why for _, why in outcome.run.skipped] == ["budget spent"]


def test_a_record_of_another_setup_is_replaced_with_a_note(cache):
    fp = session.fingerprint(CPU)
    other = record.Fingerprint(**{**fp.__dict__, "torch": "1.0.0"})
    old = record.TuningRecord(
        other, [record.TunedClass(record.ShapeClass(64, 9, 9, 1, True), record.Choice("sdpa"))]
    )
    record.save(old, record.record_path("interpreter"))
    outcome = _tune(SMALL, FakeClock({"sdpa": 1.0}))
    assert "tuned under another setup (torch 1.0.0 -> " in outcome.note
    rec = record.read(outcome.path)
    assert rec.fingerprint == fp and [c.shape.label() for c in rec.classes] == ["2x48x32"]
    # the same setup: a second run adds its classes to the record
    outcome = _tune(CROSS, FakeClock({"sdpa": 1.0}))
    assert outcome.note is None
    assert sorted(c.shape.label() for c in record.read(outcome.path).classes) == ["2x32:20x40", "2x48x32"]


def test_a_failed_write_leaves_the_previous_record_whole(cache, monkeypatch):
    first = _tune(SMALL, FakeClock({"sdpa": 1.0}))
    before = first.path.read_bytes()

    def refuse(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(Exception, match="cannot write"):
        _tune(CROSS, FakeClock({"sdpa": 1.0}))
    monkeypatch.undo()
    assert first.path.read_bytes() == before
    assert not [p for p in first.path.parent.iterdir() if p.name.endswith(".tmp")]


def test_no_gpu_memory_or_plans_kept(cache):
    from sagebuild.attention import api

    _tune(SMALL, FakeClock({"sdpa": 1.0}))
    assert not api._PLANS and not api._REPLAYS


# ---- classes, the space, recording -----------------------------------------------------------


def test_presets_cover_the_issue_s_classes():
    diffusion = {c.shape for c in classes.PRESETS["diffusion"]}
    assert {"2x10x4096:77x64", "1x40x32760:512x128", "2x8x4096x40", "2x8x1024x80", "2x8x256x160"} <= diffusion
    assert {c.shape for c in classes.PRESETS["mission"]} >= {"1x16x1024x64", "1x16x4096x64"}
    llm = classes.PRESETS["llm"]
    assert (
        all(c.causal for c in llm) and {c.head_dim for c in llm} >= {64, 128} and any(c.kv_heads for c in llm)
    )
    assert set(classes.PRESETS["all"]) == {
        c for n in ("mission", "diffusion", "llm") for c in classes.PRESETS[n]
    }


@pytest.mark.parametrize(
    "text, why",
    [("1x16x1024", "expected BxHxNxD"), ("1x6/4x64x64", "do not divide"), ("1x2x64:32x64c", "fewer keys")],
)
def test_bad_shapes_are_one_line_errors(text, why):
    with pytest.raises(Exception, match=why):
        classes.from_shapes(text)


def test_candidates_start_with_the_table_and_interleave_variants():
    table = {"fp16": "64,64,4,3", "fp8acc": "64,128,4,2,168,tma,pipe"}
    cands = space.candidates("Hopper", 64, table, fp8_ok=True)
    assert cands[0] == space.Candidate("fp16", "64,64,4,3", "table")
    assert cands[1] == space.Candidate("fp8acc", "64,128,4,2,168,tma,pipe", "table")
    assert len({c.label for c in cands}) == len(cands)  # the table's config is not tried twice
    assert {c.variant for c in space.candidates("Hopper", 64, table, fp8_ok=False)} == {"fp16"}
    assert {c.variant for c in space.candidates("RDNA3", 64, {"fp16": "64,32,4,1"}, fp8_ok=False)} == {"fp16"}
    assert space.space_configs("Hopper", 160, "fp16") == space.space_configs(
        "Hopper", 192, "fp16"
    )  # split 128 + 64


def test_every_space_config_parses():
    from sagebuild.kernels.triton import configs

    for row in space.all_rows():
        for spec in row.configs:
            configs.parse_config(spec)


def test_sageattn_records_each_new_signature_once(tmp_path, monkeypatch):
    from sagebuild import sageattn

    path = tmp_path / "calls.jsonl"
    monkeypatch.setenv(classes.RECORD_ENV_VAR, str(path))
    q = torch.randn(1, 2, 24, 32, dtype=torch.float16)
    k, v = torch.randn(1, 1, 40, 32, dtype=torch.float16), torch.randn(1, 1, 40, 32, dtype=torch.float16)
    for _ in range(3):
        sageattn(q, k, v, is_causal=True)
    sageattn(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), tensor_layout="NHD")
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert lines == [
        {"shape": "1x2/1x24:40x32c", "dtype": "float16", "layout": "HND"},
        {"shape": "1x2/1x24:40x32", "dtype": "float16", "layout": "NHD"},
    ]
    got = classes.from_record(path)
    assert [c.key for c in got] == ["1x2/1x24:40x32c float16", "1x2/1x24:40x32 float16"]


def test_from_record_errors_name_the_line(tmp_path):
    path = tmp_path / "calls.jsonl"
    path.write_text('{"shape": "1x2x64x64", "dtype": "float16"}\nnot json\n')
    with pytest.raises(Exception, match="line 2"):
        classes.from_record(path)
    path.write_text("\n")
    with pytest.raises(Exception, match="records no call"):
        classes.from_record(path)


def test_export_scrubs_paths(cache, tmp_path):
    fake = FakeClock({"sdpa": 1.0})
    outcome = _tune(SMALL, fake)
    rec = record.read(outcome.path)
    bad = record.Failure("fp16", "16,16,4,1", "compile: error in /home/alice/venv/lib/triton/x.py:12")
    rec.put(record.TunedClass(rec.classes[0].shape, rec.classes[0].winner, 1.0, None, (bad,)))
    record.save(rec, outcome.path)
    dest = share.export(outcome.path, tmp_path / "shared.json")
    text = dest.read_text()
    assert "alice" not in text and "<path>" in text and str(cache) not in text
    assert record.read(dest).classes[0].winner == rec.classes[0].winner  # still a record


# ---- the command line -------------------------------------------------------------------------


def test_tune_without_gpu_is_one_line_and_exit_3():
    res = CliRunner().invoke(app, ["tune", "--preset", "mission"])
    assert res.exit_code == 3
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "no CUDA or ROCm device" in lines[0]


@pytest.mark.parametrize(
    "args, why",
    [
        (["--preset", "video"], "unknown preset"),
        (["--shapes", "1x2x3"], "expected BxHxNxD"),
        (["--preset", "mission", "--shapes", "1x2x64x64"], "one of --preset"),
        (["--variants", "fp4"], "unknown"),
        (["--budget", "0"], "positive"),
    ],
)
def test_tune_bad_options_exit_2(args, why):
    res = CliRunner().invoke(app, ["tune", *args])
    assert res.exit_code == 2 and why in res.output


def test_export_alone_without_a_record_says_what_to_run(cache, tmp_path):
    res = CliRunner().invoke(app, ["tune", "--export", str(tmp_path / "x.json")])
    assert res.exit_code == 3 and "sagebuild tune --preset" in res.output


def test_export_alone_shares_the_only_record(cache, tmp_path):
    _tune(SMALL, FakeClock({"sdpa": 1.0}))
    res = CliRunner().invoke(app, ["tune", "--export", str(tmp_path / "x.json"), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["export"] == str(tmp_path / "x.json")
    assert Path(tmp_path / "x.json").is_file()


# ---- accept --tune ---------------------------------------------------------------------------


def test_accept_tune_reports_the_shipped_table_against_the_tuned_choice(cache, tmp_path, monkeypatch):
    """accept --tune tunes the bench's shapes and the mission preset before the bench (here the
    interpreter with a fake clock and tiny classes in their place), and the report's tune section,
    valid against the schema, shows each class's shipped and tuned choice in JSON, Markdown, HTML."""
    from sagebuild import accept
    from sagebuild.report.schema import validate

    fake = FakeClock({"sdpa": 1.0, "fp16 32,16,4,1": 0.9, "fp16 16,16,4,1": 0.5})
    real_tune = session.tune
    monkeypatch.setattr(accept, "_tune_device", lambda: CPU)
    monkeypatch.setitem(classes.PRESETS, "mission", classes.from_shapes(CROSS))
    monkeypatch.setattr(
        session, "tune", lambda w, **kw: real_tune(w, **{**kw, "timer": fake.timer, "variants": ("fp16",)})
    )
    from sagebuild.build import run
    from sagebuild.build.run import CompileResult

    def no_build(plan, log_path, progress=True):  # the CPU extension's build is not what this tests
        Path(log_path).write_text("skipped by the test\n")
        return CompileResult(False, "bundled", None, None, 0.1, str(log_path), 1, "skipped by the test", [])

    monkeypatch.setattr(run, "compile", no_build)
    opts = accept.AcceptOptions(
        profile="cpu", out=tmp_path / "out", verify_shape=(1, 1, 64, 64), tune=True, tune_budget=100.0,
        bench={"seq": (48,), "heads": 2, "head_dim": 32, "reps": 1, "warmup": 0}, keep_going=True,
    )  # fmt: skip
    res = accept.run_accept(opts)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert validate(report) == [], validate(report)
    tune = report["tune"]
    assert [c["class"] for c in tune["classes"]] == ["1x2x48x32 float16", f"{CROSS} float16"]
    assert (
        tune["classes"][0]["shipped"] == "ours fp16 32,16,4,1"
        and tune["classes"][0]["tuned"] == "ours fp16 16,16,4,1"
    )
    assert tune["classes"][0]["shipped_ms"] == 0.9 and tune["classes"][0]["tuned_ms"] == 0.5
    bench = next(s for s in report["steps"] if s["name"] == "bench")
    assert "tuned 2 classes" in bench["summary"], bench
    md = (tmp_path / "out" / "report.md").read_text()
    assert "### Tune" in md and "| ours fp16 32,16,4,1 |" in md and "1.80×" in md
    assert "ours fp16 16,16,4,1" in (tmp_path / "out" / "report.html").read_text()
    lock = json.loads((tmp_path / "out" / "sagebuild.lock").read_text())
    assert "tuning" in lock
    assert res.report["tune"] == tune


def test_accept_tune_without_gpu_says_so(cache, monkeypatch):
    from sagebuild import accept

    steps = accept._Steps(accept.AcceptOptions(tune=True), accept._Settings(), Path("."), lambda _m: None)
    monkeypatch.setattr(accept, "_tune_device", lambda: None)
    assert steps.tune() == "; --tune skipped: no GPU" and steps.docs["tune"] is None


def test_accept_tune_budget_must_be_positive():
    res = CliRunner().invoke(app, ["accept", "--tune-budget", "0"])
    assert res.exit_code == 2 and "--tune-budget 0: must be positive" in res.output


def test_default_timer_times_interleaved_on_the_host_clock():
    import time as _time

    from sagebuild.tuning.tuner import default_timer

    fast, slow = default_timer(CPU)([("fast", lambda: None), ("slow", lambda: _time.sleep(0.002))], 0.5)
    assert 0 <= fast < 1.0 < slow
    (failed,) = default_timer(CPU)([("bad", lambda: 1 / 0)], 0.1)
    assert isinstance(failed, ZeroDivisionError)


# ---- sharing: the maintainer's merge -----------------------------------------------------------


def _load_script(name: str):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rdna4_export(tmp_path: Path, name: str, winner: record.Choice) -> Path:
    fp = record.Fingerprint(
        "AMD Radeon RX 9070 XT", "gfx1201", "amdgpu 6.12.12", "hip 6.4.43482", "2.9.0+rocm6.4", "3.4.0",
        "0.1.0", "2026.12.06.3",
    )  # fmt: skip
    classes_ = [
        record.TunedClass(
            record.ShapeClass(64, 1024, 1024, 16, False), winner, 0.30, record.Choice("sdpa", ms=0.30)
        ),
        record.TunedClass(record.ShapeClass(40, 4096, 77, 20, False), record.Choice("sdpa", ms=0.05), 0.05),
    ]
    rec = record.TuningRecord(fp, classes_, created="2026-12-06T10:00:00+00:00")
    src = record.save(rec, tmp_path / f"{name}-record.json")
    return share.export(src, tmp_path / f"{name}.json")


def test_merge_script_ships_exports_as_a_new_table_version_citing_them(tmp_path):
    from sagebuild.tuning import defaults

    merge = _load_script("merge_tuning_records")
    data, cfg = tmp_path / "data", tmp_path / "configs.py"
    data.mkdir()
    cfg.write_text('"""table"""\nCONFIG_TABLE_VERSION = "2026.12.06.3"\n')
    first = _rdna4_export(tmp_path, "a", record.Choice("ours", "fp16", "64,64,4,1", 0.25))
    assert merge.main([str(first), "--cite", "issue 123", "--data", str(data), "--configs", str(cfg)]) == 0
    rdna4 = defaults.contributed(data)["RDNA4"]
    assert len(rdna4.classes) == 2
    ours = next(c for c in rdna4.classes if not c.winner.sdpa)
    assert ours.winner == record.Choice("ours", "fp16", "64,64,4,1", 0.25)
    assert ours.source.startswith(
        "issue 123: sagebuild tune --export on AMD Radeon RX 9070 XT (gfx1201), hip 6.4"
    )
    assert "export sha256 " in ours.source and "tuned 2026-12-06" in ours.source
    version = cfg.read_text().split('"')[-2]
    assert version != "2026.12.06.3" and version.count(".") == 3
    # a second export of the same shape replaces the class; the version moves on again
    second = _rdna4_export(tmp_path, "b", record.Choice("ours", "fp16", "64,32,4,1", 0.20))
    assert merge.main([str(second), "--cite", "issue 124", "--data", str(data), "--configs", str(cfg)]) == 0
    rdna4 = defaults.contributed(data)["RDNA4"]
    ours = next(c for c in rdna4.classes if not c.winner.sdpa)
    assert (
        len(rdna4.classes) == 2 and ours.winner.config == "64,32,4,1" and ours.source.startswith("issue 124")
    )
    assert cfg.read_text().split('"')[-2] == merge.next_version(version, __import__("datetime").date.today())
    # not an export: exit 2, nothing written
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert merge.main([str(bad), "--cite", "x", "--data", str(data), "--configs", str(cfg)]) == 2


def test_next_table_version():
    import datetime

    merge = _load_script("merge_tuning_records")
    day = datetime.date(2026, 12, 7)
    assert merge.next_version("2026.12.06.3", day) == "2026.12.07.1"
    assert merge.next_version("2026.12.07.1", day) == "2026.12.07.2"


def test_a_class_that_cannot_run_is_reported_and_the_rest_tuned(cache):
    outcome = _tune(f"1x2x48x300,{SMALL}", FakeClock({"sdpa": 1.0}))
    assert [r.cls.shape for r in outcome.run.results] == [SMALL]
    ((cls, why),) = outcome.run.skipped
    assert cls.head_dim == 300 and why.startswith("error: ") and "head dim 300" in why


def test_tune_command_end_to_end_under_the_interpreter(cache, monkeypatch):
    """The command as a user runs it (its real timer on the host clock, the interpreter standing in
    for the GPU): the table of classes, the record, --json's document and --export."""
    from sagebuild.cli import tune_cmd

    monkeypatch.setattr(tune_cmd, "_device", lambda: CPU)
    args = ["tune", "--shapes", SMALL, "--budget", "5", "--variants", "fp16"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    said = " ".join(res.stdout.split())
    assert "sagebuild tune — Triton CPU interpreter (interpreter)" in said and f"{SMALL} float16" in said
    squeezed = "".join(res.stdout.split())  # rich wraps a long path wherever the terminal ends
    assert f"record:{record.record_path('interpreter')}" in squeezed
    res = CliRunner().invoke(app, [*args, "--json", "--export", str(cache / "shared.json")])
    doc = json.loads(res.stdout)
    assert res.exit_code == 0 and doc["command"] == "tune" and doc["profile"] == "cpu"
    (c,) = doc["classes"]
    assert c["shape"] == SMALL and c["winner"]["ms"] > 0 and c["sdpa_ms"] > 0
    assert doc["export"] == str(cache / "shared.json") and record.read(cache / "shared.json").classes
