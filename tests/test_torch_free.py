"""The torch-free modules stay torch-free: the planner, profiles, checks, report and accept import
with torch and Triton blocked, and ``accept`` without torch fails at its doctor step (exit 10, the
torch-import fix) and still writes its whole report.

torch is blocked in a fresh interpreter by a ``sitecustomize`` on ``PYTHONPATH`` whose import hook
raises what a missing package raises; the environment passes it on to the interpreters the probe
starts, so they cannot import torch either — as in an environment without it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BLOCKER = """
import importlib.abc, sys

class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in ("torch", "triton"):
            raise ModuleNotFoundError(f"No module named {top!r}", name=top)
        return None

sys.meta_path.insert(0, _NoTorch())
"""

TORCH_FREE = (
    "sagebuild.attention",
    "sagebuild.attention.plan",
    "sagebuild.attention.features",
    "sagebuild.profiles",
    "sagebuild.checks",
    "sagebuild.doctor",
    "sagebuild.report.write",
    "sagebuild.report.schema",
    "sagebuild.lock",
    "sagebuild.accept",
    "sagebuild.patch",
    "sagebuild.cli.app",
)


def _env(tmp_path: Path) -> dict[str, str]:
    block = tmp_path / "notorch"
    block.mkdir(exist_ok=True)
    (block / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(block), os.environ.get("PYTHONPATH", "")])}
    env.pop("TRITON_INTERPRET", None)
    return env


def _python(code: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_blocker_blocks(tmp_path: Path):
    p = _python("import torch", _env(tmp_path))
    assert p.returncode == 1 and "No module named 'torch'" in p.stderr


def test_torch_free_modules_import_without_torch(tmp_path: Path):
    code = (
        "import importlib, sys\n"
        f"for m in {TORCH_FREE!r}: importlib.import_module(m)\n"
        "from sagebuild.attention.plan import make_plan, record_schema\n"
        "from sagebuild.report.schema import load_schema\n"
        "assert load_schema()['definitions']['plan'] == record_schema()\n"
        "import sagebuild.attention as a\n"
        "assert 'sageattn' in dir(a)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton'}))\n"
    )
    p = _python(code, _env(tmp_path))
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr[-3000:]


def test_the_api_without_torch_says_what_is_missing(tmp_path: Path):
    p = _python("from sagebuild.attention import sageattn", _env(tmp_path))
    assert p.returncode == 1 and "No module named 'torch'" in p.stderr


def test_help_without_torch(tmp_path: Path):
    p = subprocess.run(
        [sys.executable, "-m", "sagebuild", "--help"],
        capture_output=True,
        text=True,
        env=_env(tmp_path),
        timeout=120,
    )
    assert p.returncode == 0 and "accept" in p.stdout, p.stderr[-2000:]


@pytest.mark.parametrize("keep_going", [False, True])
def test_accept_without_torch_fails_its_doctor_step_and_writes_the_report(tmp_path: Path, keep_going: bool):
    out = tmp_path / "out"
    args = [
        "accept",
        "--profile",
        "cpu",
        "--out",
        str(out),
        "--json",
        *(["--keep-going"] if keep_going else []),
    ]
    env = {**_env(tmp_path), "SAGEBUILD_EXT_DIR": str(tmp_path / "ext"), "CI": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "sagebuild", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert p.returncode == 10, p.stderr[-3000:]
    assert {"report.json", "report.md", "report.html", "junit.xml"} <= {f.name for f in out.iterdir()}
    ET.parse(out / "junit.xml")
    report = json.loads((out / "report.json").read_text())
    assert report["exit_code"] == 10 and report["ok"] is False
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["doctor"]["status"] == "fail" and steps["doctor"]["exit_code"] == 10
    torch_import = next(c for c in report["checks"] if c["id"] == "torch-import")
    assert torch_import["status"] == "fail" and "No module named 'torch'" in torch_import["detail"]
    assert "pip install" in torch_import["fix"] and "torch" in torch_import["fix"]
    assert "torch" in (out / "report.md").read_text()
    later = [steps[n] for n in ("compile", "verify", "bench")]
    if not keep_going:
        assert all(s["status"] == "skip" for s in later)
    else:  # each fails on the missing torch, never as "a sagebuild bug"
        assert all(s["status"] == "fail" and "torch" in s["summary"] for s in later)
        assert not any("internal error" in s["summary"] for s in later), later
