"""``sagebuild doctor`` end to end: fake roots, this interpreter's real (CPU) torch, JSON and table output."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import pytest
from fakeroots import ENV, make_cpu_only, make_rdna4_native, make_wsl2_dxg
from typer.testing import CliRunner

from sagebuild import profiles
from sagebuild.cli.app import app
from sagebuild.probe import torch_probe

runner = CliRunner()


def flat(text: str) -> str:
    """Rich wraps long lines on the console; compare with whitespace collapsed."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def real_probe() -> tuple:
    """This interpreter probed once for real (a subprocess importing torch)."""
    return torch_probe.probe(sys.executable, timeout=120)


@pytest.fixture
def cached_probe(real_probe: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reuse the real probe result so each CLI test does not pay for another torch import."""
    monkeypatch.setattr(torch_probe, "probe", lambda *a, **k: copy.deepcopy(real_probe))


def _json(stdout: str) -> dict:
    return json.loads(stdout)  # must be the only thing on stdout


def test_wsl2_root_cpu_torch_rdna4_profile_fails_torch_build(tmp_path: Path) -> None:
    """The acceptance case: real subprocess probe of this (CPU) torch, WSL2 fake root, ROCm profile."""
    root = make_wsl2_dxg(tmp_path)
    r = runner.invoke(app, ["doctor", "--root", str(root), "--profile", "rdna4-rocm6", "--json"], env=ENV)
    assert r.exit_code == 10, r.output
    doc = _json(r.stdout)
    assert doc["schema_version"] == 1 and doc["command"] == "doctor"
    assert doc["verdict"] == "fail" and doc["profile"]["name"] == "rdna4-rocm6"
    assert doc["facts"]["system"]["wsl"] == "2" and doc["facts"]["devices"]["dxg"] is True
    assert doc["facts"]["torch"]["build"] == "cpu"
    by_id = {c["id"]: c for c in doc["checks"]}
    assert by_id["torch-build"]["status"] == "fail"
    assert by_id["torch-build"]["fix"] == profiles.load_bundled("rdna4-rocm6").torch_install
    assert "--index-url https://download.pytorch.org/whl/rocm" in by_id["torch-build"]["fix"]
    assert doc["counts"]["fail"] == sum(1 for c in doc["checks"] if c["status"] == "fail")


def test_doctor_on_this_machine_is_honest(cached_probe: None, real_probe: tuple) -> None:
    r = runner.invoke(app, ["doctor", "--json"])
    doc = _json(r.stdout)
    assert r.exit_code == (10 if doc["verdict"] == "fail" else 0)
    archs = doc["facts"]["gpu_archs"]
    if not archs:
        assert doc["profile"]["name"] == "cpu" and "no GPU detected" in doc["profile"]["why"]
        assert "No GPU found" in doc["summary"]
    assert doc["facts"]["torch"]["version"] == real_probe[1].version


def test_auto_profile_from_kfd_and_why(tmp_path: Path, cached_probe: None) -> None:
    r = runner.invoke(app, ["doctor", "--root", str(make_rdna4_native(tmp_path)), "--json"], env=ENV)
    doc = _json(r.stdout)
    assert doc["profile"]["name"] == "rdna4-rocm6"
    assert "gfx1201" in doc["profile"]["why"] and doc["profile"]["why"].startswith("auto")
    by_id = {c["id"]: c for c in doc["checks"]}
    assert by_id["device-nodes"]["status"] == "ok" and by_id["arch-supported"]["status"] == "ok"


def test_table_on_stdout_and_exit_code(tmp_path: Path, cached_probe: None) -> None:
    """The report is data (``doctor > d.txt`` keeps it); stderr carries no part of it."""
    root = make_wsl2_dxg(tmp_path)
    r = runner.invoke(app, ["doctor", "--root", str(root), "--profile", "rdna4-rocm6"], env=ENV)
    assert r.exit_code == 10
    assert "torch-build" in flat(r.stdout) and "FAIL" in flat(r.stdout) and "rocm6.4" in flat(r.stdout)
    assert "torch-build" not in r.stderr
    r = runner.invoke(app, ["doctor", "--root", str(make_cpu_only(tmp_path)), "--profile", "cpu"], env=ENV)
    assert "No GPU found" in flat(r.stdout) and "No GPU found" not in r.stderr
    assert r.exit_code == (10 if "FAIL " in flat(r.stdout) else 0)


@pytest.mark.parametrize("timeout", ["0", "-1", "nan"])
def test_timeout_must_be_positive(timeout: str, tmp_path: Path) -> None:
    """A zero or negative probe timeout is a usage error, not a torch-import failure."""
    r = runner.invoke(app, ["doctor", "--root", str(make_cpu_only(tmp_path)), "--timeout", timeout])
    assert r.exit_code == 2, r.output
    assert "--timeout" in flat(r.stderr) and "more than 0 seconds" in flat(r.stderr)
    assert "torch-import" not in r.output and "Traceback" not in r.output


def test_profile_from_a_yaml_path(tmp_path: Path, cached_probe: None) -> None:
    from sagebuild.cli.profiles_cmd import show_yaml

    path = tmp_path / "mine.yaml"
    path.write_text(show_yaml(profiles.load_bundled("cpu")).replace("name: cpu", "name: my-cpu"))
    r = runner.invoke(
        app, ["doctor", "--root", str(make_cpu_only(tmp_path)), "--profile", str(path), "--json"], env=ENV
    )
    doc = _json(r.stdout)
    assert doc["profile"]["name"] == "my-cpu" and doc["profile"]["source"] == str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--python", "/nonexistent/python"], "no such file"),
        (["--root", "/nonexistent/root"], "not a directory"),
        (["--profile", "no-such-profile"], "no bundled profile"),
    ],
)
def test_user_errors_are_clear(args: list[str], message: str, cached_probe: None) -> None:
    r = runner.invoke(app, ["doctor", *args, "--json"])
    assert r.exit_code == 2
    assert message in flat(r.stderr) and "fix:" in flat(r.stderr)
    assert json.loads(r.stdout)["error"]["exit_code"] == 2 and "Traceback" not in r.output  # --json: JSON


def test_crashing_interpreter_fails_torch_import(tmp_path: Path) -> None:
    from fakeroots import fake_python, python_line

    python = fake_python(tmp_path, f"echo '{python_line()}'\nkill -SEGV $$")
    r = runner.invoke(
        app,
        ["doctor", "--root", str(make_cpu_only(tmp_path)), "--python", python, "--profile", "cpu", "--json"],
        env=ENV,
    )
    assert r.exit_code == 10
    c = {c["id"]: c for c in _json(r.stdout)["checks"]}["torch-import"]
    assert c["status"] == "fail" and "SIGSEGV" in c["detail"] and "reinstall torch" in c["fix"]


def test_shadowing_accepts_the_installed_package_folder(
    cached_probe: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from the checkout of an editable install: ./sagebuild/ exists and is the package itself."""
    import sagebuild

    repo = Path(__file__).resolve().parents[1]
    if Path(sagebuild.__file__).resolve().parent != repo / "sagebuild":
        pytest.skip("sagebuild is not installed from this checkout")
    monkeypatch.chdir(repo)
    c = {c["id"]: c for c in _json(runner.invoke(app, ["doctor", "--json"]).stdout)["checks"]}["shadowing"]
    assert c["status"] == "ok" and "./sagebuild/" in c["detail"] and "installed package itself" in c["detail"]


def test_profile_errors_keep_their_brackets(tmp_path: Path) -> None:
    """Error text is not rich markup: "[gfx1201, gfx1200]" once printed as "such as , got 5"."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nvendor: rocm\narchs: 5\n")
    r = runner.invoke(app, ["doctor", "--root", str(make_cpu_only(tmp_path)), "--profile", str(bad)], env=ENV)
    assert r.exit_code == 2
    assert "such as [gfx1201, gfx1200], got 5" in flat(r.stderr) and "Traceback" not in r.output
