"""The CI gate: the WHOLE ``sagebuild accept --profile cpu`` (real CPU build, golden verify, CPU bench).

Runs the installed CLI in a fresh interpreter, then checks every artefact in the output
directory. The orchestration (stop at first failure, --keep-going, explanations) is checked
in-process with a build that fails on purpose.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sagebuild.report.schema import validate

SMALL = ["--verify-shape", "1,2,128,64", "--seq", "128,256", "--heads", "2", "--reps", "3", "--warmup", "1",
         "--sustain", "0.5"]  # fmt: skip


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sagebuild", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.slow
def test_accept_cpu_end_to_end(tmp_path: Path):
    out = tmp_path / "out"
    env = {**os.environ, "SAGEBUILD_EXT_DIR": str(tmp_path / "ext"), "CI": "1"}
    env.pop("TRITON_INTERPRET", None)
    r = _cli(["accept", "--profile", "cpu", "--out", str(out), "--json", *SMALL], env)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["ok"] is True and summary["exit_code"] == 0
    assert [s["name"] for s in summary["steps"]] == ["doctor", "compile", "verify", "bench"]
    assert all(s["status"] == "ok" for s in summary["steps"])

    names = {p.name for p in out.iterdir()}
    assert {
        "report.json",
        "report.md",
        "report.html",
        "junit.xml",
        "build.log",
        "environment-backup.txt",
        "sagebuild.lock",
        "sagebuild.lock.requirements.txt",
    } <= names
    assert not [n for n in names if n.endswith(".tmp")]

    report = json.loads((out / "report.json").read_text())
    assert validate(report) == []
    assert report["verify"]["mode"] == "golden"
    variants = {x["variant"]: x for x in report["verify"]["results"]}
    assert variants["ext:quant_ops"]["ok"]  # the .so built by this run, checked against the contract
    assert report["bench"]["timing_kind"] == "cpu" and not report["bench"]["gate"]["speed_gate_applied"]
    assert report["bench"]["config"]["sustain_s"] == 0.5  # passed through (nothing sustained on CPU)
    sha = report["compile"]["result"]["sha256"]
    assert len(sha) == 64

    suites = ET.parse(out / "junit.xml").getroot()
    cases = {(c.get("classname"), c.get("name")) for c in suites.iter("testcase")}
    assert {("sagebuild.steps", s) for s in ("doctor", "compile", "verify", "bench")} <= cases
    assert len([c for c in cases if c[0] == "sagebuild.doctor"]) == len(report["checks"]) > 0
    assert suites.get("failures") == "0"

    html = (out / "report.html").read_text()
    svg = ET.fromstring(html[html.index("<svg") : html.index("</svg>") + 6])
    assert len(svg.findall("{http://www.w3.org/2000/svg}circle")) == 4  # 2 golden variants × 2 lengths
    assert "not a GPU result" in html
    assert "## sagebuild accept: ✅ passed" in (out / "report.md").read_text()
    assert "[sagebuild]" in (out / "build.log").read_text()
    backup = (out / "environment-backup.txt").read_text()
    assert "torch==" in backup

    lock = json.loads((out / "sagebuild.lock").read_text())
    assert lock["artefacts"][0]["sha256"] == sha
    assert lock["profile"]["name"] == "cpu"
    ok = _cli(["lock", "--check", str(out / "sagebuild.lock")], env)
    assert ok.returncode == 0, ok.stderr
    lock["distributions"]["typer"]["version"] = "0.0.0"
    lock["artefacts"][0]["sha256"] = "0" * 64
    drifted = tmp_path / "drifted.lock"
    drifted.write_text(json.dumps(lock))
    bad = _cli(["lock", "--check", str(drifted)], env)
    assert bad.returncode == 50
    assert "package typer: 0.0.0 →" in bad.stdout and "sha256" in bad.stdout  # a report: stdout


def _failing_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    from sagebuild.build import run
    from sagebuild.build.run import CompileResult

    def fake(plan, log_path, progress=True):
        Path(log_path).write_text("g++: fatal error: Killed signal terminated program cc1plus\n")
        return CompileResult(
            ok=False,
            mode="bundled",
            artefact=None,
            sha256=None,
            seconds=0.1,
            log_path=str(log_path),
            jobs=2,
            error="the compiler was killed",
            key_lines=["g++: fatal error: Killed signal terminated program cc1plus"],
        )

    monkeypatch.setattr(run, "compile", fake)


def _opts(tmp_path: Path, keep_going: bool):
    from sagebuild.accept import AcceptOptions

    return AcceptOptions(
        profile="cpu",
        out=tmp_path / "out",
        keep_going=keep_going,
        verify_shape=(1, 1, 64, 64),
        bench={"seq": (64,), "heads": 1, "reps": 1, "warmup": 0},
    )


def test_accept_stops_at_first_failure_and_explains_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from sagebuild.accept import run_accept

    _failing_compile(monkeypatch)
    res = run_accept(_opts(tmp_path, keep_going=False))
    assert res.exit_code == 20
    steps = {s["name"]: s for s in res.report["steps"]}
    assert steps["doctor"]["status"] == "ok" and steps["compile"]["status"] == "fail"
    assert steps["verify"]["status"] == steps["bench"]["status"] == "skip"
    assert res.report["verify"] is None and res.report["bench"] is None
    assert steps["compile"]["explanation"], "explain found nothing for an OOM-killed compiler"
    assert validate(json.loads((tmp_path / "out" / "report.json").read_text())) == []
    junit = ET.parse(tmp_path / "out" / "junit.xml").getroot()
    failed = [c.get("name") for c in junit.iter("testcase") if c.find("failure") is not None]
    assert failed == ["compile"]
    assert (tmp_path / "out" / "sagebuild.lock").is_file()


def test_accept_keep_going_runs_everything_but_keeps_the_first_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from sagebuild.accept import run_accept

    _failing_compile(monkeypatch)
    res = run_accept(_opts(tmp_path, keep_going=True))
    assert res.exit_code == 20
    assert [s["status"] for s in res.report["steps"]] == ["ok", "fail", "ok", "ok"]
    assert res.summary()["steps"][2]["name"] == "verify"


def _fake_compile(monkeypatch: pytest.MonkeyPatch, ok: bool) -> None:
    """A compile step that passes (a built library recorded, nothing compiled) or fails for memory."""
    if not ok:
        _failing_compile(monkeypatch)
        return
    from sagebuild.build import run
    from sagebuild.build.run import CompileResult

    def fake(plan, log_path, progress=True):
        Path(log_path).write_text("[sagebuild] built\n")
        return CompileResult(True, "bundled", str(log_path), "0" * 64, 0.1, str(log_path), 1)

    monkeypatch.setattr(run, "compile", fake)


@pytest.mark.parametrize("passes", [True, False], ids=["passing-run", "failing-run"])
def test_accept_compat_installs_sageattention_only_after_a_passing_run(
    passes: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """``accept --compat --python X`` installs the `sageattention` distribution into X's
    site-packages when every step passed, and leaves it alone when a step failed."""
    import sysconfig

    from typer.testing import CliRunner

    from sagebuild.cli.app import app

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([py, "-c", code], text=True).strip())
    here = sysconfig.get_paths()["purelib"]  # the venv sees sagebuild and torch through this .pth
    (site / "sagebuild-parent.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SAGEBUILD_EXT_DIR", str(tmp_path / "ext"))
    monkeypatch.chdir(tmp_path)
    _fake_compile(monkeypatch, ok=passes)

    args = ["accept", "--profile", "cpu", "--out", str(tmp_path / "out"), "--python", str(py), "--compat"]
    args += ["--verify-shape", "1,1,64,64", "--seq", "64", "--heads", "1", "--reps", "1", "--warmup", "0"]
    r = CliRunner().invoke(app, [*args, "--json"])
    summary = json.loads(r.stdout)
    installed = sorted(p.name for p in site.iterdir() if p.name.startswith("sageattention"))
    if passes:
        assert r.exit_code == 0, r.output
        assert summary["compat"]["site_packages"] == str(site)
        assert installed == ["sageattention", f"sageattention-{summary['compat']['installed']}.dist-info"]
        status = subprocess.run([py, "-c", "import sageattention; print(sageattention.__provider__)"],
                                capture_output=True, text=True)  # fmt: skip
        assert status.stdout.strip() == "sagebuild", status.stderr
    else:
        assert r.exit_code == 20 and summary["compat"] is None
        assert installed == []
