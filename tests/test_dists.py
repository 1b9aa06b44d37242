"""sagebuild/dists.py: whose distributions a ``--python`` lists (issue 60)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sagebuild import dists


def test_another_venv_of_the_same_python_is_not_this_one(tmp_path: Path):
    """A venv made from the same base Python links to the same binary: its packages are still its
    own, so the lockfile and the requirements must list them, not the running venv's."""
    other = tmp_path / "other-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    py = other / "bin" / "python"
    assert dists.is_this_interpreter(sys.executable) and dists.is_this_interpreter(None)
    assert not dists.is_this_interpreter(str(py))
    assert "torch" in dists.installed_distributions() and "torch" not in dists.installed_distributions(
        str(py)
    )


def test_environment_of_names_the_venv_folder(tmp_path: Path):
    other = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other)], check=True)
    assert dists.environment_of(str(other / "bin" / "python")) == str(other.resolve())
    assert dists.environment_of(sys.executable) == str(Path(sys.prefix).resolve())
