"""``accept`` when things go wrong: every failure still writes its report, the output folder never
mixes two runs, and a bad ``--out`` is one clear line (exit 2), never a traceback."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from sagebuild.accept import AcceptOptions, run_accept
from sagebuild.errors import Exit, SagebuildError
from sagebuild.report.schema import validate

REPORT_FILES = ("report.json", "report.md", "report.html", "junit.xml")


def _failing_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    from sagebuild.build import run
    from sagebuild.build.run import CompileResult

    def fake(plan, log_path, progress=True):
        Path(log_path).write_text("c++: fatal error: Killed signal terminated program cc1plus\n")
        return CompileResult(
            ok=False, mode="bundled", artefact=None, sha256=None, seconds=0.1, log_path=str(log_path),
            jobs=2, error="the compiler was killed", key_lines=[],
        )  # fmt: skip

    monkeypatch.setattr(run, "compile", fake)


def _opts(out: Path, **kw) -> AcceptOptions:
    base = dict(
        profile="cpu",
        out=out,
        verify_shape=(1, 1, 64, 64),
        bench={"seq": (64,), "heads": 1, "reps": 1, "warmup": 0},
    )
    return AcceptOptions(**{**base, **kw})


def _report(out: Path) -> dict:
    doc = json.loads((out / "report.json").read_text())
    assert validate(doc) == []
    assert all((out / f).is_file() for f in REPORT_FILES)
    return doc


def test_an_internal_error_in_a_step_still_writes_the_report(tmp_path, monkeypatch):
    from sagebuild import checks

    def boom(*_a, **_k):
        raise RuntimeError("checks exploded")

    monkeypatch.setattr(checks, "run_checks", boom)
    res = run_accept(_opts(tmp_path / "out"))
    assert res.exit_code == Exit.INTERNAL
    doc = _report(tmp_path / "out")
    doctor = doc["steps"][0]
    assert (
        doctor["status"] == "fail"
        and "internal error" in doctor["summary"]
        and "checks exploded" in doctor["summary"]
    )
    assert "Traceback" in doctor["error"]  # kept in the report for the bug report, not printed
    assert [s["status"] for s in doc["steps"][1:]] == ["skip"] * 3
    junit = (tmp_path / "out" / "junit.xml").read_text()
    assert "checks exploded" in junit


def test_a_record_that_breaks_the_schema_fails_its_step_not_the_report(tmp_path, monkeypatch):
    from sagebuild import bench

    _failing_compile(monkeypatch)
    original = bench.BenchResult.to_dict

    def bad(self):
        d = original(self)
        d["rows"][0]["unexpected_key"] = 1
        return d

    monkeypatch.setattr(bench.BenchResult, "to_dict", bad)
    res = run_accept(_opts(tmp_path / "out", keep_going=True))
    doc = _report(tmp_path / "out")
    assert res.exit_code == Exit.COMPILE_FAILED  # still the first failure's code
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["bench"]["status"] == "fail" and steps["bench"]["exit_code"] == Exit.INTERNAL
    assert "unexpected_key" in steps["bench"]["error"] and doc["bench"] is None


def test_a_refused_setting_names_its_step_and_keeps_its_code(tmp_path):
    res = run_accept(_opts(tmp_path / "out", profile="no-such-profile"))
    assert res.exit_code == Exit.USAGE
    doc = _report(tmp_path / "out")
    assert doc["steps"][0]["status"] == "fail" and "no-such-profile" in doc["steps"][0]["summary"]
    res = run_accept(_opts(tmp_path / "out2", bench={"seq": (10_000_000,), "heads": 1}))
    assert res.exit_code == Exit.ENVIRONMENT
    steps = {s["name"]: s for s in _report(tmp_path / "out2")["steps"]}
    assert steps["bench"]["status"] == "fail" and "refused" in steps["bench"]["summary"]
    assert steps["doctor"]["status"] == "skip"


def test_a_new_run_replaces_the_old_one_whole(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _failing_compile(monkeypatch)
    run_accept(_opts(out))
    assert (out / "build.log").is_file()
    (out / "notes.txt").write_text("mine")
    old_created = json.loads((out / "report.json").read_text())["created"]

    def no_compile(plan, log_path, progress=True):
        raise SagebuildError("no compiler today")

    from sagebuild.build import run

    monkeypatch.setattr(run, "compile", no_compile)
    run_accept(_opts(out))
    assert not (out / "build.log").exists()  # the old run's log is not left beside the new report
    assert (out / "notes.txt").read_text() == "mine"
    assert "no compiler today" in (out / "report.md").read_text() + (out / "junit.xml").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging left
    assert old_created  # (timestamps may coincide; the content check above is the proof)


def test_a_full_disk_leaves_the_previous_run_untouched(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _failing_compile(monkeypatch)
    run_accept(_opts(out))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    from sagebuild import fsio

    real = fsio.write_bytes_atomic

    def full(path, data):
        if Path(path).name == "report.html":
            raise fsio.write_error(path, OSError(errno.ENOSPC, "No space left on device"))
        return real(path, data)

    monkeypatch.setattr(fsio, "write_bytes_atomic", full)
    with pytest.raises(SagebuildError, match="disk is full") as info:
        run_accept(_opts(out))
    assert info.value.code == Exit.USAGE
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]


@pytest.mark.parametrize(
    "where",
    ["a file", "below a file", "/proc", "read-only"],
)
def test_unusable_out_is_one_clear_error(tmp_path, where):
    if where == "a file":
        out = tmp_path / "f"
        out.write_text("keep")
    elif where == "below a file":
        (tmp_path / "f").write_text("keep")
        out = tmp_path / "f" / "run"
    elif where == "/proc":
        out = Path("/proc/sagebuild-out")
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        out = ro / "run"
    with pytest.raises(SagebuildError) as info:
        run_accept(_opts(out))
    assert info.value.code == Exit.USAGE
    assert str(out) in info.value.message or str(out.parent) in info.value.message
    if where in ("a file", "below a file"):
        assert (tmp_path / "f").read_text() == "keep"
