"""The hand-written Hopper kernels of ``scripts/experiments/sm90_attn`` (run 28): they must keep
compiling for sm_90a without spills and without ptxas serialising their wgmma, which is what
makes them worth measuring; ptxas's report is read the same way the script reads it."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "experiments" / "sm90_attn" / "sm90_attn.py"


def _module():
    spec = importlib.util.spec_from_file_location("sm90_attn", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ptxas_report_is_read_for_registers_spills_and_serialisation():
    mod = _module()
    report = "\n".join([
        "ptxas info    : Used 235 registers, used 2 barriers",
        "    8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads",
        "ptxas info    : (C7519) warpgroup.arrive is injected in around line 717 by compiler",
        "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized "
        "due to non wgmma instructions defining accumulator registers",
    ])
    info = mod.summary(report)
    assert info["registers"] == 235 and info["spill_bytes"] == 16
    assert len(info["serialised"]) == 1 and "C7515" in info["serialised"][0]  # C7519 is not a serialisation
    assert mod.summary("ptxas info    : Used 168 registers")["serialised"] == []


def test_unknown_variant_is_refused_by_name():
    cmd = [sys.executable, str(SCRIPT), "bogus", "--compile-only"]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 1
    assert "unknown variant 'bogus': expected one of single_wg, pingpong, three_cta" in res.stderr


def test_kernels_compile_for_sm90a_without_spills_or_serialised_wgmma(tmp_path):
    if _module().nvcc() is None:
        pytest.skip("needs nvcc (CUDA toolkit 12.3+)")
    cmd = [sys.executable, str(SCRIPT), "--compile-only", "--out", str(tmp_path)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    lines = {line.split(":")[0]: line for line in res.stdout.splitlines()}
    for variant in _module().VARIANTS:
        assert "0 bytes spilled, wgmma serialised: no" in lines[variant], res.stdout
        assert (tmp_path / f"{variant}.so").is_file()
