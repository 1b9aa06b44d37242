"""Report files: JSON valid against the bundled schema, JUnit parseable, HTML with the SVG chart, atomic."""

from __future__ import annotations

import copy
import errno
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sagebuild import fsio as atomic
from sagebuild.errors import Exit, SagebuildError
from sagebuild.report.schema import load_schema, validate
from sagebuild.report.write import environment_backup, write_report


def _acc(cos: float, rel: float) -> dict:
    return {
        "cos": cos,
        "rel_l1": rel,
        "rmse": 0.001,
        "max_abs": 0.01,
        "finite": True,
        "nan_count": 0,
        "inf_count": 0,
    }


def _plan_record(n_k: int) -> dict:
    """What the bench records for an sm90 call with ``n_k`` keys (``LaunchPlan.record``)."""
    from sagebuild.attention.plan import make_plan

    return make_plan("sm90", head_dim=64, n_k=n_k, pv="fp8", pv_accum="fp32", config=(
        "64,128,4,3" if n_k >= 8192 else "64,64,4,3,168")).record()  # fmt: skip


def sample_report(speedups=(0.9, 1.2, 1.5), failed_gate: bool = True) -> dict:
    seqs = [1024, 4096, 16384]
    rows = []
    for s, sp in zip(seqs, speedups):
        t = {"median_ms": 1.0, "p20_ms": 0.9, "p80_ms": 1.1, "reps": 20}
        rows.append(
            {
                "seq": s,
                "provider": "sdpa",
                "kind": "baseline",
                "timing": t,
                "tflops": 100.0,
                "speedup": None,
                "accuracy": _acc(0.99999, 0.001),
            }
        )
        rows.append(
            {
                "seq": s,
                "provider": "sageattn",
                "kind": "whole_call",
                "timing": t,
                "tflops": 90.0,
                "speedup": sp,
                "accuracy": _acc(0.9999, 0.012),
                "bounds": {"cos_min": 0.9998, "rel_l1_max": 0.015},
                "plan": _plan_record(s),
            }
        )
    failures = ["sageattn speed-up 0.900× < 1× at seq=1024"] if failed_gate else []
    return {
        "report": "sagebuild-report",
        "schema_version": 1,
        "sagebuild_version": "0.1.0",
        "created": "2025-01-01T00:00:00Z",
        "ok": not failed_gate,
        "exit_code": 40 if failed_gate else 0,
        "profile": {"name": "hopper-cu12", "why": "named on the command line"},
        "facts": {"system": {"os": "Linux"}},
        "checks": [
            {"id": "torch.build", "title": "torch build", "status": "ok", "detail": "cuda 13.0", "fix": None},
            {
                "id": "tools.ninja",
                "title": "ninja",
                "status": "warn",
                "detail": "missing",
                "fix": "pip i ninja",
            },
            {"id": "gpu.hsa", "title": "HSA override", "status": "skip", "detail": "n/a", "fix": None},
        ],
        "steps": [
            {
                "name": "doctor",
                "status": "ok",
                "exit_code": 0,
                "seconds": 1.5,
                "summary": "12 ok",
                "error": None,
                "explanation": [],
            },
            {
                "name": "bench",
                "status": "fail" if failed_gate else "ok",
                "exit_code": 40 if failed_gate else 0,
                "seconds": 9.0,
                "summary": "below gate",
                "error": "speed-up < 1" if failed_gate else None,
                "explanation": [
                    {"id": "x", "title": "slow", "cause": "c <b>", "fix": "f", "matched_line": None}
                ],
            },
        ],
        "compile": None,
        "verify": {
            "ok": True,
            "mode": "gpu",
            "device": "cuda:0",
            "note": "n",
            "shape": [1, 8, 512, 64],
            "dtype": "float16",
            "results": [
                {
                    "variant": "qk_int8_pv_fp8",
                    "ok": True,
                    "shape": [1, 8, 512, 64],
                    "dtype": "float16",
                    "device": "cuda:0",
                    "problems": [],
                    "accuracy": _acc(0.9993, 0.03),
                    "bounds": {"cos_min": 0.999, "rel_l1_max": 0.05},
                    "cause": None,
                    "fix": None,
                    "seconds": 0.2,
                }
            ],
        },
        "bench": {
            "ok": not failed_gate,
            "timing_kind": "gpu",
            "device": "cuda:0",
            "device_name": "NVIDIA H200",
            "method": "cuda events",
            "note": "",
            "sdpa_backend": {"name": "cudnn", "how": "profiler"},
            "config": {
                "batch": 1,
                "heads": 16,
                "seq": seqs,
                "head_dim": 64,
                "dtype": "float16",
                "causal": False,
                "layout": "HND",
                "warmup": 5,
                "reps": 20,
                "seed": 0,
            },
            "rows": rows,
            "gate": {"min_speedup": 1.0, "speed_gate_applied": True, "failures": failures},
        },
        "files": {"lockfile": "sagebuild.lock", "build_log": None},
    }


def test_sample_report_is_valid_and_violations_are_found():
    assert validate(sample_report()) == []
    bad = sample_report()
    del bad["steps"][0]["summary"]
    bad["bench"]["rows"][1]["kind"] = "fast"
    bad["exit_code"] = "40"
    bad["verify"]["results"][0]["accuracy"]["cos"] = "high"
    errs = validate(bad)
    assert any("steps[0]" in e and "summary" in e for e in errs)
    assert any("rows[1].kind" in e for e in errs)
    assert any(e.startswith("$.exit_code") for e in errs)
    assert any("results[0].accuracy" in e for e in errs)
    extra = sample_report()
    extra["surprise"] = 1
    assert any("surprise" in e for e in validate(extra))


def test_bench_rows_carry_their_launch_plan():
    """Each row may say what ran (the launch plan's record); the Markdown table shows it in a few
    words, and a malformed plan is refused (an unknown key, a missing one, a wrong type)."""
    from sagebuild.report.render import plan_text

    report = sample_report()
    assert validate(report) == []
    assert plan_text(report["bench"]["rows"][-1]["plan"]) == "fp8 mma-acc 64,128,4,3 K128 v-key-order l/8"
    assert (
        plan_text(report["bench"]["rows"][1]["plan"]) == "fp8 mma-acc 64,64,4,3,168 K64 pdl v-key-order l/8"
    )
    assert plan_text(None) == "–"
    bad = sample_report()
    bad["bench"]["rows"][1]["plan"]["kernel"] = "portable"  # the old record's key
    del bad["bench"]["rows"][3]["plan"]["table_version"]
    bad["bench"]["rows"][5]["plan"]["row_sum_parts"] = "eight"
    errs = validate(bad)
    assert any("rows[1].plan" in e and "kernel" in e for e in errs), errs
    assert any("rows[3].plan" in e and "table_version" in e for e in errs), errs
    assert any("rows[5].plan" in e and "row_sum_parts" in e for e in errs), errs


def test_schema_file_is_versioned():
    schema = load_schema()
    assert schema["properties"]["schema_version"] == {"const": 1}
    assert schema["properties"]["report"] == {"const": "sagebuild-report"}


def test_write_report_files(tmp_path: Path):
    log = tmp_path / "build-src.log"
    log.write_text("compiling...\nok\n")
    paths = write_report(sample_report(), tmp_path / "out", build_log=log)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == [
        "build.log",
        "junit.xml",
        "report.html",
        "report.json",
        "report.md",
    ]
    assert (out / "build.log").read_text() == log.read_text()
    assert validate(json.loads(paths["json"].read_text())) == []

    suites = ET.parse(paths["junit"]).getroot()
    assert suites.tag == "testsuites"
    cases = {(c.get("classname"), c.get("name")): c for c in suites.iter("testcase")}
    assert cases[("sagebuild.steps", "bench")].find("failure") is not None
    assert cases[("sagebuild.steps", "doctor")].find("failure") is None
    assert cases[("sagebuild.doctor", "gpu.hsa")].find("skipped") is not None
    assert cases[("sagebuild.bench", "sageattn[whole_call] seq=1024")].find("failure") is not None
    assert cases[("sagebuild.bench", "sageattn[whole_call] seq=4096")].find("failure") is None
    assert int(suites.get("tests")) == len(cases) and int(suites.get("failures")) == 2

    html = paths["html"].read_text()
    svg_start = html.index("<svg")
    svg = ET.fromstring(html[svg_start : html.index("</svg>") + 6])
    ns = "{http://www.w3.org/2000/svg}"
    assert len(svg.findall(f"{ns}circle")) == 3  # one point per sequence length
    assert svg.find(f"{ns}polyline") is not None and svg.find(f"{ns}line[@class='gate']") is not None
    assert (
        "c &lt;b&gt;" in html
        and "<script" not in html
        and "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )

    md = paths["markdown"].read_text()
    assert md.startswith("## sagebuild accept: ❌ FAILED (exit 40)")
    assert "| 16384 | sageattn | whole_call | fp8 mma-acc 64,128,4,3 K128 v-key-order l/8 |" in md
    assert "| bench | ❌ fail | 40 |" in md and "below threshold" in md


def test_chart_points_move_with_the_data(tmp_path: Path):
    lo = write_report(sample_report((0.5, 0.5, 0.5), failed_gate=False), tmp_path / "a")["html"].read_text()
    hi = write_report(sample_report((0.5, 2.0, 0.5), failed_gate=False), tmp_path / "b")["html"].read_text()
    assert lo.count("<circle") == hi.count("<circle") == 3
    assert lo != hi


def test_invalid_report_is_refused_before_anything_is_written(tmp_path: Path):
    bad = copy.deepcopy(sample_report())
    bad["steps"][0]["status"] = "maybe"
    with pytest.raises(ValueError, match="schema"):
        write_report(bad, tmp_path)
    assert not (tmp_path / "report.json").exists()


def test_atomic_write_keeps_old_file_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    target = tmp_path / "report.json"
    atomic.write_text_atomic(target, "old")

    def boom(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(SagebuildError, match="disk is full") as info:
        atomic.write_text_atomic(target, "new")
    assert info.value.code == Exit.USAGE and str(target) in info.value.message
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left behind


def test_atomic_writes_get_the_umask_mode_like_build_log(tmp_path: Path):
    old = os.umask(0o022)
    try:
        a = atomic.write_text_atomic(tmp_path / "report.json", "{}")
        (tmp_path / "src.log").write_text("log")
        b = atomic.copy_atomic(tmp_path / "src.log", tmp_path / "build.log")
        os.umask(0o077)
        c = atomic.write_text_atomic(tmp_path / "private.json", "{}")
    finally:
        os.umask(old)
    assert a.stat().st_mode & 0o777 == 0o644
    assert b.stat().st_mode & 0o777 == 0o644
    assert c.stat().st_mode & 0o777 == 0o600


def test_environment_backup_is_pip_freeze(tmp_path: Path):
    path = environment_backup(tmp_path)
    text = path.read_text()
    assert path.name == "environment-backup.txt"
    assert "pip freeze of" in text
    assert any(line.lower().startswith(("pyyaml==", "typer==")) for line in text.splitlines())
