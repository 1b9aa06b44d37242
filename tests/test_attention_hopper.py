"""The warp-specialised Hopper kernel (Gluon): routing, config checks, sm90 compile, GPU results.

CPU: the routing table and its refusals; an ahead-of-time sm90 compile (subprocess, without
TRITON_INTERPRET) that must keep ptxas from serialising the wgmma pipeline. GPU (marked, sm90
only): forced onto the kernel, results agree with the portable kernel and stay inside the FP8
accuracy bounds over causal, GQA, ragged and NHD inputs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from sagebuild.kernels.triton import attn_hopper, configs

from sagebuild.attention import AttentionInputError, sageattn_qk_int8_pv_fp8_triton
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.reference import exact_attention


@pytest.fixture
def ws_env(monkeypatch):
    def set_(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(configs.WS_ENV_VAR, raising=False)
        else:
            monkeypatch.setenv(configs.WS_ENV_VAR, value)

    set_(None)
    return set_


def test_routing_is_opt_in_as_measured(ws_env):
    # at parity with the portable kernel on an H200 (run 10): not routed unless asked for
    assert configs.ws_lookup("Hopper", 128, "fp8", False, 16384) is None
    ws_env("on")
    row = configs.ws_lookup("Hopper", 128, "fp8", True, 1024)
    assert row is not None and row.num_stages >= 3
    # rows it has no measurement for stay on the portable kernel even when asked
    assert configs.ws_lookup("Hopper", 64, "fp8", False, 16384) is None
    assert configs.ws_lookup("Hopper", 128, "fp16", False, 16384) is None
    assert configs.ws_lookup("Ampere", 128, "fp8", False, 16384) is None
    ws_env("off")
    assert configs.ws_lookup("Hopper", 128, "fp8", False, 16384) is None
    ws_env("64,64,4,5,128")  # a forced config, for tuning runs
    assert configs.ws_lookup("Hopper", 128, "fp8", False, 1024).as_tuple() == (64, 64, 4, 5, 128)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("64,64,4,2,128", "at least 3 K/V slots"),  # two slots deadlock: refused, not hung
        ("64,64,2,4,128", "num_warps must be 4 or 8"),
        ("32,64,4,4,128", "multiple of 16·num_warps"),
        ("64,32,4,4,128", "BLOCK_N must be 64 or 128"),
        ("64,64,4", "4 or 5 integers"),
    ],
)
def test_unusable_forced_configs_are_refused_with_the_variable_named(ws_env, value, message):
    ws_env(value)
    with pytest.raises(ValueError, match=message) as err:
        configs.ws_lookup("Hopper", 128, "fp8", False, 16384)
    assert configs.WS_ENV_VAR in str(err.value) or "integers" in message


def test_calls_the_kernel_cannot_take_go_to_the_portable_kernel():
    e4m3 = torch.float8_e4m3fn
    assert attn_hopper.takes(e4m3, 4096, 4096, causal=False)
    assert attn_hopper.takes(e4m3, 1000, 1008, causal=True)
    assert not attn_hopper.takes(e4m3, 1000, 1000, causal=False)  # V rows not 16-byte aligned
    assert not attn_hopper.takes(e4m3, 2048, 1024, causal=True)  # query blocks with no key
    assert not attn_hopper.takes(torch.float8_e4m3fnuz, 4096, 4096, causal=False)
    assert not attn_hopper.takes(None, 4096, 4096, causal=False)  # FP16 P·V


_AOT = """
import json, sys
from sagebuild.attention.aot import WGMMA_SERIALIZED, compile_hopper_ws
out = []
for hd, causal, cfg in json.loads(sys.argv[1]):
    r = compile_hopper_ws(hd, causal, cfg)
    out.append({"ptx": r["ptx"], "shared": r["shared"], "ptxas": r["ptxas"],
                "serialized": WGMMA_SERIALIZED.findall(r["ptxas"] or "")})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_sm90_compile_keeps_the_wgmma_pipeline():
    cases = [(128, False, None), (128, True, None), (80, True, None), (128, False, "128,64,8,4,168")]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", _AOT, json.dumps(cases)], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for (hd, causal, cfg), r in zip(cases, json.loads(proc.stdout.strip().splitlines()[-1])):
        ptx = r["ptx"]
        assert "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8" in ptx, (hd, causal, cfg)
        assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in ptx
        assert "cp.async.bulk.tensor" in ptx  # K/V arrive by TMA
        assert "setmaxnreg" in ptx  # the load warp gives its registers to the compute warps
        assert r["shared"] <= 227 * 1024
        if r["ptxas"] is not None:
            assert r["serialized"] == [], r["serialized"]


# ---- GPU -------------------------------------------------------------------------------------

needs_sm90 = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs an sm90 (Hopper) GPU",
)

GPU_CASES = [  # (B, H, Hkv, N_q, N_k, D, causal, layout)
    (1, 4, 4, 1024, 1024, 128, False, "HND"),
    (1, 4, 4, 1024, 1024, 128, True, "HND"),
    (2, 8, 2, 512, 1024, 128, True, "HND"),  # GQA, fewer queries than keys
    (1, 4, 4, 1000, 1008, 128, False, "HND"),  # ragged last tiles
    (1, 4, 4, 777, 1008, 128, True, "NHD"),
    (1, 4, 4, 1024, 1024, 80, True, "HND"),  # padded head dim
    (1, 2, 2, 8192, 8192, 128, False, "HND"),
]


@pytest.mark.gpu
@needs_sm90
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: "x".join(map(str, c)))
def test_gpu_matches_the_portable_kernel_and_the_bounds(ws_env, case):
    b, h, hk, nq, nk, d, causal, lay = case
    g = torch.Generator(device="cuda").manual_seed(0)

    def make(n: int, heads: int) -> torch.Tensor:
        shape = (b, n, heads, d) if lay == "NHD" else (b, heads, n, d)
        return torch.randn(shape, device="cuda", generator=g).half()

    q, k, v = make(nq, h), make(nk, hk), make(nk, hk)
    ws_env("off")
    portable = sageattn_qk_int8_pv_fp8_triton(q, k, v, tensor_layout=lay, is_causal=causal)
    ws_env("on")
    ws = sageattn_qk_int8_pv_fp8_triton(q, k, v, tensor_layout=lay, is_causal=causal)
    hnd = (lambda x: x.transpose(1, 2)) if lay == "NHD" else (lambda x: x)
    ref = exact_attention(hnd(q), hnd(k), hnd(v), is_causal=causal)
    acc = accuracy(hnd(ws), ref)
    assert acc["finite"] and acc["cos"] >= 0.999 and acc["rel_l1"] <= 0.05, acc
    # the same quantization: only accumulation order differs
    assert (ws.float() - portable.float()).abs().max().item() < 0.05
    assert abs(acc["rel_l1"] - accuracy(hnd(portable), ref)["rel_l1"]) < 2e-3


@pytest.mark.gpu
@needs_sm90
def test_gpu_a_deadlocking_config_is_refused_before_launch(ws_env):
    q = torch.randn(1, 2, 1024, 128, device="cuda", dtype=torch.float16)
    ws_env("64,64,4,2,128")
    with pytest.raises(AttentionInputError, match="at least 3"):
        sageattn_qk_int8_pv_fp8_triton(q, q, q)
