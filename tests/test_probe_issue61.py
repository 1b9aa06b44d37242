"""The probe's facts behind issue 61's doctor checks, read from a real interpreter: pip's build
isolation as pip itself would read its configuration, the headers Triton's launcher compiles
against, and the torch record of ./sagebuild.lock."""

from __future__ import annotations

import os
import sys

from sagebuild import lock
from sagebuild.doctor import locked_torch as _locked_torch
from sagebuild.probe import torch_probe


def _env(tmp_path, **extra):
    """This environment with pip's user and global config pointed into tmp_path (empty)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "cfg"), XDG_CONFIG_DIRS=str(tmp_path / "etc")
    )
    env.update(extra)
    return env


def test_pip_build_isolation_is_read_as_pip_reads_it(tmp_path):
    """pip/_internal/cli/parser.py keeps a no- option's value as the setting: "false" turns isolation
    off, "1"/"yes" on; [install] overrides [global]; the env var overrides the files."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nno-build-isolation = true\n\n[install]\nno-build-isolation = false\n")
    py, _, _ = torch_probe.probe(sys.executable, _env(tmp_path, PIP_CONFIG_FILE=str(conf)), 120)
    assert py.pip_isolation is False and "[install] no-build-isolation = false" in py.pip_isolation_source
    py, _, _ = torch_probe.probe(
        sys.executable, _env(tmp_path, PIP_CONFIG_FILE=str(conf), PIP_NO_BUILD_ISOLATION="yes"), 120
    )
    assert py.pip_isolation is True and py.pip_isolation_source == "PIP_NO_BUILD_ISOLATION = yes"
    py, _, _ = torch_probe.probe(sys.executable, _env(tmp_path, PIP_CONFIG_FILE=os.devnull), 120)
    assert py.pip_isolation is None and py.pip_isolation_source is None
    assert py.include_dir and py.python_h == os.path.isfile(os.path.join(py.include_dir, "Python.h"))
    assert py.python_libs is None  # only Windows links a python3*.lib


def test_locked_torch_record(tmp_path):
    assert _locked_torch(tmp_path) is None
    facts = {"torch": {"version": "2.8.0+rocm6.4", "build": "rocm", "hip": "6.4", "cuda": None}}
    lock.write(lock.snapshot(facts, distributions={}), tmp_path / lock.DEFAULT_NAME)
    got = _locked_torch(tmp_path)
    assert got["build"] == "rocm" and got["index_url"] == "https://download.pytorch.org/whl/rocm6.4"
    assert got["path"] == str(tmp_path / lock.DEFAULT_NAME)
    (tmp_path / lock.DEFAULT_NAME).write_text("not json")
    assert "error" in _locked_torch(tmp_path)
