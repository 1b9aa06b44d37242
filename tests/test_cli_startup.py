"""``sagebuild --help``/``--version`` (and the light commands) must not import torch or triton."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sagebuild import __version__

HEAVY = ("torch", "triton")

# Runs the CLI in-process, then reports which heavy top-level modules got imported.
RUNNER = """
import sys
from sagebuild.cli.app import main
sys.argv = ["sagebuild", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"torch", "triton"})
sys.stderr.write("LOADED=" + ",".join(loaded) + " CODE=" + str(code) + "\\n")
"""


def _run(*args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *(["-X", "importtime"] if importtime else []), "-c", RUNNER, *args]
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(
    "args",
    [["--help"], ["--version"], ["doctor", "--help"], ["profiles", "--help"], ["profiles", "show", "cpu"]],
)
def test_light_commands_do_not_import_torch(args: list[str]) -> None:
    p = _run(*args)
    assert "LOADED= CODE=0" in p.stderr, p.stderr[-2000:]


def test_importtime_shows_no_torch() -> None:
    p = _run("--help", importtime=True)
    imported = {
        line.split("|")[-1].strip().split(".")[0]
        for line in p.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "typer" in imported  # the instrumentation works
    assert not imported & set(HEAVY)


def test_version_output() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "sagebuild", "--version"], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0 and p.stdout.strip() == f"sagebuild {__version__}"
