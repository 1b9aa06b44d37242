"""scripts/ncu_source.py reads Nsight Compute's source-page export (SASS rows with warp-state
samples by reason) and attributes the samples to reasons, opcodes and instructions."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ncu_source.py"

# The export's shape: a kernel-name line, then the header, then one row per SASS instruction.
EXPORT = (
    '"Kernel Name","_attn_fwd_kernel",\n'
    '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)",'
    '"# Samples","stall_barrier","stall_long_sb","stall_wait","stall_barrier (Not Issued)"\n'
    '"0x7f0010","SYNCS.PHASECHK.TRANS64.TRYWAIT P1, [UR49+0x10000], R0","1","0","1","0","0","1","0"\n'
    '"0x7f0020","@!P1  BRA 0x7f0400","30","30","30","0","29","1","0"\n'
    '"0x7f0030","WARPGROUP.DEPBAR.LE gsb0, 0x0","50","48","50","48","0","2","40"\n'
    '"0x7f0040","MUFU.EX2 R25, R25","9","5","9","0","0","9","0"\n'
    '"0x7f0050","MUFU.EX2 R26, R26","10","6","10","0","0","10","0"\n'
)


def _module():
    spec = importlib.util.spec_from_file_location("ncu_source", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


def test_samples_are_attributed_to_reasons_opcodes_and_instructions():
    mod = _module()
    instrs = mod.parse_source_csv(EXPORT)
    assert [i.opcode for i in instrs] == ["SYNCS.PHASECHK.TRANS64.TRYWAIT", "BRA", "WARPGROUP.DEPBAR.LE",
                                          "MUFU.EX2", "MUFU.EX2"]  # fmt: skip
    assert instrs[1].reasons == {"barrier": 0.0, "long_sb": 29.0, "wait": 1.0}  # "(Not Issued)" left out
    s = mod.summarize(instrs, top=2)
    assert s["samples"] == 100
    assert s["reasons"] == [("barrier", 48.0), ("long_sb", 29.0), ("wait", 23.0)]
    assert s["opcodes"][0][:2] == ("WARPGROUP.DEPBAR.LE", 50.0)
    assert s["opcodes"][1][:2] == ("BRA", 30.0)  # the predicate is not part of the opcode
    assert [row[2] for row in s["instructions"]] == [50.0, 30.0]
    assert s["instructions"][1][3][0] == ("long_sb", 29.0)
    text = mod.render(s)
    assert "WARPGROUP.DEPBAR.LE" in text and "long_sb 29.0" in text


def test_a_file_that_is_not_an_export_gets_a_clear_error(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text('"a","b"\n"1","2"\n')
    res = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(bad)], capture_output=True, text=True)
    assert res.returncode == 1
    assert "not an ncu source-page export" in res.stderr and "Traceback" not in res.stderr
    empty = tmp_path / "empty.csv"  # the header and one instruction without samples
    empty.write_text("\n".join(EXPORT.split("\n")[:2]) + '\n"0x7f0010","NOP","0","0","0","0","0","0","0"\n')
    res = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(empty)], capture_output=True, text=True)
    assert res.returncode == 1 and "no warp-state samples" in res.stderr


def test_a_missing_file_is_named(tmp_path):
    cmd = [sys.executable, str(SCRIPT), "--csv", str(tmp_path / "nope.csv")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 1 and "nope.csv" in res.stderr and "Traceback" not in res.stderr


def test_profiling_without_ncu_says_what_to_install(tmp_path):
    cmd = [sys.executable, str(SCRIPT), "--ncu", str(tmp_path / "no-ncu"), "--out", str(tmp_path / "x.csv")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert "not found: install Nsight Compute or pass --ncu PATH" in res.stderr
