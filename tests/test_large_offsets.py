"""Offsets past 2³¹ elements in every kernel at full scale (issue 60): token-major tensors that
are themselves larger than 2³¹ elements (NHD, fused-QKV views, packed sequences), a contiguous HND
one, GQA, causal, FP16 and FP8 P·V, and the features sm90's plan runs (K/V by tensor descriptors,
Q read back from memory, V in wgmma key order). The tensors are allocated, not touched but for one
head's rows; the quantization and attention launches run on Triton's CPU interpreter for that head's
programs only (``interp_subset``), every load and store bounds-checked against the launch's
tensors, and the first and last query blocks of the last head, whose rows lie past 2³¹ elements,
match exact attention (``large_offsets_run``). A row offset computed in 32 bits fails the bounds
check (tried: Q's row offsets without the widening)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from large_offsets_run import CASES

SCRIPT = Path(__file__).with_name("large_offsets_run.py")

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter tests (a GPU is present)")


@pytest.mark.parametrize("case", sorted(CASES))
def test_offsets_past_2_to_the_31_elements_at_full_scale(case):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), case], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, f"exit {proc.returncode} (a negative one is a signal)\n{proc.stderr[-3000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["elements"] > 2**31 and res["last_q_offset"] > 2**31, res  # the case is past 2³¹
    assert res["accesses"] > 10**6, res  # the bounds checker saw the launches' loads and stores
    kernels = {name for name, _, _ in res["launches"]}
    assert {"_quant_blocks_kernel", "_attn_fwd_kernel", "_kv_partials_kernel"} <= kernels, res
    assert res["finite"] and res["cos"] >= 0.999, res
