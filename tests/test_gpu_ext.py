"""On a GPU: build the bundled extension for the device's arch (CUDA, or HIP through hipify),
load it, and check the GPU ops against the plain-torch contract and the CPU ops.

Run on the GPU box with ``pytest -q -s tests/test_gpu_ext.py`` (prints build time and jobs).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gpu_build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A fresh build into the process's extension cache (tests/conftest.py isolates it, or the
    caller shares one: scripts/gpu_check.sh). Not a private directory: one process can load only
    one build (``ext`` refuses a second), so the tests that load the extension later must find
    this one; conftest runs this module first."""
    from sagebuild import probe, profiles
    from sagebuild.build.plan import make_plan
    from sagebuild.build.run import compile as run_compile

    facts = probe.collect()
    profile, why = profiles.resolve("auto", facts.gpu_archs())
    assert profile.vendor != "cpu", f"no bundled profile covers this GPU ({why})"
    plan = make_plan(profile, facts)
    plan = dataclasses.replace(plan, aot=[])  # the Triton AOT step is tested on its own
    res = run_compile(plan, tmp_path_factory.mktemp("gpu-ext") / "build.log", progress=False)
    assert res.ok, f"{res.error}\n" + "\n".join(res.key_lines) + f"\nlog: {res.log_path}"
    print(
        f"\n[gpu-ext] profile {profile.name}, archs {plan.archs}, MAX_JOBS={res.jobs} "
        f"({plan.jobs_reason}); build + verify {res.seconds:.1f} s"
    )
    return {"plan": plan, "result": res, "profile": profile}


@pytest.fixture(scope="module")
def ops(gpu_build: dict[str, Any]) -> Any:
    from sagebuild import ext

    q = ext.get_quant_ops("cuda")
    assert q is not None, ext.unavailable_reason("cuda")
    return q


def test_build_has_gpu_kernels_for_the_device(gpu_build: dict[str, Any]) -> None:
    info = gpu_build["result"].build_info
    assert info["dispatch_keys"] == ["CPU", "CUDA"]
    assert info["archs"] == gpu_build["plan"].archs and Path(gpu_build["result"].artefact).is_file()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_int8_ops_match_the_contract(ops: Any, dtype: torch.dtype) -> None:
    from test_ext_cpu import bhnd, ref_quant_int8

    k = bhnd(2, 8, 1000, 128, dtype, "NHD", seed=11)
    kd = k.cuda()
    km = ops.k_mean(kd)
    torch.testing.assert_close(km.cpu(), k.float().mean(dim=2, keepdim=True), atol=1e-5, rtol=1e-5)
    for x, m, blk, mul in [(kd, km, 64, 1.0), (kd, None, 32, 128**-0.5 * 1.4426950408889634)]:
        q, s = ops.quant_per_block_int8(x, m, blk, mul)
        rq, rs = ref_quant_int8(k, m.cpu() if m is not None else None, blk, mul)
        assert q.device.type == "cuda" and q.shape == k.shape and s.shape == (2, 8, math.ceil(1000 / blk))
        # the contract (IEEE quotient scales, products by the reciprocal rounded on their own)
        # leaves nothing to accumulation order: the same bits as the golden model's
        assert torch.equal(s.cpu(), rs)
        diff = (q.cpu().int() - rq.int()).abs()
        assert diff.count_nonzero() == 0, f"{diff.count_nonzero()} codes differ (max {diff.max()})"


# (B, H, N, D, dtype, layout): odd N (byte stores, a partial tile), N % 4 == 0 (packed stores,
# many chunks), D not a multiple of the 32-channel tile.
V_SHAPES = [
    (1, 8, 777, 64, torch.float16, "NHD"),
    (2, 4, 4096, 128, torch.bfloat16, "HND"),
    (1, 3, 130, 72, torch.float32, "NHD"),
]


@pytest.mark.parametrize("fnuz", [False, True])
@pytest.mark.parametrize("shape", V_SHAPES, ids=lambda s: "x".join(map(str, s[:4])) + f"-{s[5]}")
def test_gpu_v_fp8_matches_the_cpu_op(ops: Any, fnuz: bool, shape: tuple) -> None:
    from test_ext_cpu import bhnd

    from sagebuild import ext

    b, h, n, d, dtype, layout = shape
    v = bhnd(b, h, n, d, dtype, layout, seed=12) * 20
    v8, vs = ops.quant_v_fp8_per_channel(v.cuda(), fnuz)
    c8, cs = ext.get_quant_ops("cpu").quant_v_fp8_per_channel(v, fnuz)
    assert v8.shape == (b, h, n, d) and v8.stride() == (h * d * n, d * n, 1, n)  # channel-major
    torch.testing.assert_close(vs.cpu(), cs, rtol=0, atol=0)
    assert torch.equal(v8.cpu().view(torch.uint8), c8.view(torch.uint8))


@pytest.mark.parametrize("shape", V_SHAPES, ids=lambda s: "x".join(map(str, s[:4])) + f"-{s[5]}")
def test_gpu_k_mean_is_deterministic_and_matches(ops: Any, shape: tuple) -> None:
    from test_ext_cpu import bhnd

    b, h, n, d, dtype, layout = shape
    k = bhnd(b, h, n, d, dtype, layout, seed=13)
    kd = k.cuda()
    km = ops.k_mean(kd)
    assert torch.equal(km, ops.k_mean(kd))  # no float atomics: the same bits every run
    torch.testing.assert_close(km.cpu(), k.float().mean(dim=2, keepdim=True), atol=1e-5, rtol=1e-5)
