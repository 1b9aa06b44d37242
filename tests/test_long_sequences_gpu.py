"""MiniMax-H3 scale on the GPU (issue 60): 300,000 tokens × 56 heads × 128 in bf16, every tensor
past 2³¹ elements, in HND, NHD and fused-QKV views, causal and not, FP16 and the card's own
(``sageattn``: FP8 on Hopper) P·V, each against exact float32 attention on the first rows, the first
rows past 2³¹ elements in the last head and the last rows of every head (``long_sequences_run``).

About 22 GB of GPU memory per layout (skipped below 40 GiB free) and about two minutes in all on an
H100; scripts/gpu_check.sh runs this file alone, before the parallel GPU tests. Each layout runs in
its own process with synchronous launches: a fault kills only that process, and the test names the
case and the launch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_attention_gpu import BOUNDS

pytestmark = pytest.mark.gpu

SCRIPT = Path(__file__).with_name("long_sequences_run.py")


@pytest.mark.parametrize("layout", ["HND", "NHD", "fused"])
def test_300k_tokens_56_heads(layout):
    free, _ = torch.cuda.mem_get_info()
    if free < 40 * 2**30:
        pytest.skip(f"needs 40 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), layout], capture_output=True, text=True, env=env, timeout=540
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    started = [x["case"] for x in lines if x.get("started")]
    results = {x["case"]: x for x in lines if "groups" in x}
    assert proc.returncode == 0, (
        f"exit {proc.returncode} in case {started[-1] if started else '(setup)'}; "
        f"done: {sorted(results)}\n{proc.stderr[-4000:]}"
    )
    assert len(results) == 4 and lines[-1].get("done"), proc.stdout[-2000:]
    for case, r in results.items():
        cos_min, l1_max = BOUNDS[r["variant"]]
        for first, acc in r["groups"].items():  # rows from `first`, every head
            assert acc["finite"], (case, first, acc)
            assert acc["cos"] >= cos_min and acc["rel_l1"] <= l1_max, (case, first, acc)
