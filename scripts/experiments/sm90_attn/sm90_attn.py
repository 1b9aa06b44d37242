#!/usr/bin/env python3
"""Hand-written Hopper (sm_90a) attention kernels in CUDA: an experiment, not wired into the dispatch.

    python scripts/experiments/sm90_attn/sm90_attn.py --compile-only      # any machine with nvcc 12.3+
    python scripts/experiments/sm90_attn/sm90_attn.py [VARIANT ...] [--rounds N]  # on an H100/H200

Why: Triton 3.6 cannot build the warp-specialised loop that issue 3's 4K clause needs (runs 10,
11, 25). These kernels do what Triton cannot express, on the same quantized inputs as
``sageattn``'s FP8 path (``quant.quant_kv`` with V in wgmma key order, ``quant.quant_blocks`` for
Q): INT8 Q·Kᵀ and FP8 P·V by wgmma with P from registers, TMA loads, explicit wgmma waits.

- ``single_wg.cu``: one warpgroup per CTA, two CTAs per SM; Q·Kᵀ of the next tile runs under
  the current tile's softmax.
- ``pingpong.cu``: a load warpgroup and two compute warpgroups (setmaxnreg 40/232) that take
  turns on the tensor cores (FA3's inter-warpgroup ping-pong).
- ``three_cta.cu``: the Triton kernel's schedule (three CTAs per SM, every MMA waited on at once)
  with one CTA barrier per key tile (156 registers, 530 instructions per tile).
- ``three_cta_q.cu``: ``three_cta`` with Q quantized inside the kernel from fp16 (the contract of
  ``quant.quant_blocks`` at 16 rows), as the Triton prologue does.

All match ``sageattn`` to ~0.003 at 2×32×4096×128 (the same quantization) and run within a few
per cent of the Triton attention launch, not clearly faster (docs/performance.md, runs 28 and 29:
``three_cta_q`` 0.9 % faster at 4K and 2.7 % at 16K, kernel alone).
Limits: head dim 128, dense inputs, non-causal, no LSE, N_q a multiple of 64 (128 for ping-pong)
and N_k of 128 (at most 16K keys for ``three_cta``; ``three_cta_q`` takes dense fp16 Q).

``--compile-only`` builds each kernel with nvcc and prints ptxas's report: registers, spills and
any wgmma serialisation (C7510–C7515, "... are serialized due to ..."), the first thing to
check after a change. The GPU run checks accuracy against fp32 attention and ``sageattn``, then
times the kernels against SDPA and ``sageattn`` (``triton.testing.do_bench``, L2 flushed, medians
of interleaved rounds).
"""

from __future__ import annotations

import argparse
import ctypes
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
VARIANTS = ("single_wg", "pingpong", "three_cta", "three_cta_q")
Q_INSIDE = ("three_cta_q",)  # quantize Q themselves from fp16 (dense)
SM_SCALE = 1.0 / math.sqrt(128)  # the default softmax scale at the kernels' only head dim
SERIALISED = re.compile(r"\(C751\d\)[^\n]*serialized[^\n]*")


def _regs(n: int, start: int = 0) -> str:
    return ",".join(f"%{i}" for i in range(start, start + n))


def wgmma_wrappers() -> str:
    """The two wgmma wrappers (64 accumulator operands each), written out for ``common.cuh``."""
    s_outs = ", ".join(f'"+r"(s[{i}])' for i in range(64))
    d_outs = ", ".join(f'"+f"(d[{i}])' for i in range(64))
    return f"""
__device__ __forceinline__ void wgmma_qk(uint32_t (&s)[64], uint64_t da, uint64_t db) {{
  asm volatile(
    "{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {{{_regs(64)}}}, %64, %65, p;\\n}}\\n"
    : {s_outs}
    : "l"(da), "l"(db));
}}
__device__ __forceinline__ void wgmma_pv(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint64_t db) {{
  asm volatile(
    "{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {{{_regs(64)}}}, "
    "{{%64,%65,%66,%67}}, %68, p, 1, 1;\\n}}\\n"
    : {d_outs}
    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
}}
"""


def nvcc() -> str | None:
    """nvcc where the doctor looks for it (``sagebuild.probe.tools``: PATH, CUDA_HOME, CUDA_PATH,
    /usr/local/cuda), or None."""
    from sagebuild.probe import tools
    from sagebuild.probe.system import Root

    spec = next(t for t in tools.TOOLS if t.name == "nvcc")
    return tools.find(Root(), spec.candidates, os.environ, spec.extra_dirs(os.environ))


def build(variant: str, out_dir: Path) -> tuple[Path, str]:
    """Compile one variant into a shared library (sm_90a); returns (library, ptxas's report)."""
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    tool = nvcc()
    if tool is None:
        raise SystemExit(
            "nvcc not found (PATH, CUDA_HOME, CUDA_PATH, /usr/local/cuda): install the CUDA toolkit 12.3+"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    common = (HERE / "common.cuh.in").read_text().replace("//@WGMMA@", wgmma_wrappers())
    (out_dir / "common.cuh").write_text(common)
    lib = out_dir / f"{variant}.so"
    cmd = [tool, "-gencode", "arch=compute_90a,code=sm_90a", "-O3", "-shared", "-Xcompiler", "-fPIC",
           "-Xptxas", "-v", "-I", str(out_dir), "-I", str(HERE), "-o", str(lib), str(HERE / f"{variant}.cu")]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"nvcc failed for {variant}:\n{res.stderr[-3000:]}")
    report = "\n".join(line for line in res.stderr.splitlines() if "ptxas" in line or "spill" in line)
    return lib, report


def summary(report: str) -> dict[str, Any]:
    """Registers, spill bytes and wgmma serialisation notes from ptxas's report."""
    regs = [int(m) for m in re.findall(r"Used (\d+) registers", report)]
    spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    return {
        "registers": max(regs, default=None),
        "spill_bytes": sum(int(a) + int(b) for a, b in spill),
        "serialised": SERIALISED.findall(report),
    }


# ---------------------------------------------------------------------------------------------
# GPU side: the same inputs as sageattn's FP8 path.


def load(lib_path: Path) -> Any:
    lib = ctypes.CDLL(str(lib_path))
    lib.q_inside = lib_path.stem in Q_INSIDE
    lib.ws_attn.restype = ctypes.c_int
    ptr, i64 = ctypes.c_void_p, ctypes.c_longlong
    f32 = ctypes.c_float
    args = [ptr] * 5 + [i64, ptr, ptr] + [i64] * 3 + [ctypes.c_int] * 7 + [f32, f32, ptr]
    lib.ws_attn.argtypes = args
    return lib


def quantize(q: Any, k: Any, v: Any, q_inside: bool = False) -> tuple:
    """Q INT8 per 16 rows (``q_inside``: left in fp16 for the kernel), K INT8 per 128 keys
    (smoothed), V FP8 per channel in wgmma key order."""
    import torch
    from sagebuild.kernels.triton import layout, quant

    kq, ks, _, vq, vs = quant.quant_kv(
        layout.dense(k), layout.dense(v), 128, True, torch.float8_e4m3fn, 128, v_key_order=True
    )
    if q_inside:
        return q.contiguous(), None, kq.t, ks, vq.t.transpose(-1, -2), vs
    qi, qs, _, _ = quant.quant_blocks(layout.dense(q), None, 16, SM_SCALE * quant.LOG2E, 128)
    return qi.t, qs, kq.t, ks, vq.t.transpose(-1, -2), vs


def attend(lib: Any, q_shape: tuple, heads_kv: int, inputs: tuple, out: Any) -> Any:
    import torch
    from sagebuild.kernels.triton import quant

    qi, qs, kq, ks, vt, vs = inputs
    b, h, n, _ = q_shape
    rc = lib.ws_attn(
        qi.data_ptr(), None if qs is None else qs.data_ptr(), kq.data_ptr(), ks.data_ptr(), vt.data_ptr(),
        vt.stride(2),
        vs.data_ptr(), out.data_ptr(), out.stride(0), out.stride(1), out.stride(2), b, h, heads_kv, n,
        kq.shape[2], qs.shape[-1] if qs is not None else 0, ks.shape[-1], math.log2(448.0),
        SM_SCALE * quant.LOG2E, torch.cuda.current_stream().cuda_stream,
    )
    if rc:
        raise RuntimeError(f"ws_attn returned {rc} (-1: a shape it does not take, 1000+: TMA descriptor)")
    return out


def whole_call(lib: Any, q: Any, k: Any, v: Any) -> Any:
    import torch

    out = torch.empty_like(q)
    inputs = quantize(q, k, v, lib.q_inside)
    return attend(lib, q.shape, k.shape[1], inputs, out)


def check_accuracy(libs: dict[str, Any]) -> bool:
    import torch
    import torch.nn.functional as F

    from sagebuild.attention import sageattn
    from sagebuild.attention.metrics import accuracy

    ok = True
    for b, h, n, hk in [(1, 4, 384, 4), (2, 8, 1024, 2), (2, 32, 4096, 8)]:
        q = torch.randn(b, h, n, 128, device="cuda", dtype=torch.float16)
        k, v = (torch.randn(b, hk, n, 128, device="cuda", dtype=torch.float16) for _ in range(2))
        rep = h // hk
        ref = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(rep, 1),
                                             v.float().repeat_interleave(rep, 1))
        theirs = sageattn(q, k, v)
        base = accuracy(theirs, ref)
        for name, lib in libs.items():
            out = whole_call(lib, q, k, v)
            a = accuracy(out, ref)
            diff = (out.float() - theirs.float()).abs().max().item()
            print(f"{name} {b}×{h}×{n}×128 (KV heads {hk}): cos {a['cos']:.5f} rel L1 {a['rel_l1']:.4f} "
                  f"(sageattn {base['cos']:.5f} / {base['rel_l1']:.4f}), max |ours − sageattn| {diff:.4f}")
            ok &= a["finite"] and a["cos"] >= 0.999 and a["rel_l1"] <= 0.05
    return ok


def _sageattn_kernel_only(q: Any, k: Any, v: Any) -> Callable[[], Any]:
    """``sageattn``'s attention launch alone on K/V quantized beforehand (its variant and
    accumulation; Q is quantized inside that launch): what "<variant> kernel" compares with."""
    from sagebuild import bench
    from sagebuild.attention import dispatch

    variant, accum = dispatch.choice_for_call(q.device, q.shape[-1], k.shape[2])
    call, _ = bench._kernel_only(variant, q, k, v, "HND", False, pv_accum=accum or "fp32+fp32")
    return call


def bench_shape(libs: dict[str, Any], b: int, h: int, n: int, rounds: int = 3) -> None:
    """One shape: whole calls and kernel-only times against SDPA and ``sageattn``."""
    import torch
    import torch.nn.functional as F
    import triton

    from sagebuild.attention import sageattn

    q, k, v = (torch.randn(b, h, n, 128, device="cuda", dtype=torch.float16) for _ in range(3))
    inputs = {inside: quantize(q, k, v, inside) for inside in {lib.q_inside for lib in libs.values()}}
    out = torch.empty_like(q)
    fns: dict[str, Callable[[], Any]] = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "sageattn": lambda: sageattn(q, k, v),
        "sageattn kernel": _sageattn_kernel_only(q, k, v),
        "quantize": lambda: quantize(q, k, v),  # what "whole" adds to "kernel"
    }
    for name, lib in libs.items():
        fns[name] = lambda lib=lib: whole_call(lib, q, k, v)
        fns[f"{name} kernel"] = lambda lib=lib: attend(lib, q.shape, h, inputs[lib.q_inside], out)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name].append(triton.testing.do_bench(fn, warmup=50, rep=300))
    med = {name: statistics.median(t) for name, t in times.items()}
    flops = 4 * b * h * n * n * 128
    print(f"{b}×{h}×{n}×128, ms (TFLOPS, SDPA time / this):")
    for name, ms in med.items():
        print(f"  {name:18s} {ms:.4f} ({flops / ms / 1e9:.0f}, {med['sdpa'] / ms:.3f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--compile-only", action="store_true", help="build and print ptxas's report (no GPU)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (medians)")
    ap.add_argument("--out", type=Path, default=None, help="build directory (default: a temporary one)")
    args = ap.parse_args()
    out_dir = args.out or Path(tempfile.mkdtemp(prefix="sm90_attn-"))
    libs = {}
    for variant in args.variants:
        path, report = build(variant, out_dir)
        info = summary(report)
        print(f"{variant}: {info['registers']} registers, {info['spill_bytes']} bytes spilled, "
              f"wgmma serialised: {info['serialised'] or 'no'}")
        libs[variant] = path
    if args.compile_only:
        return 0
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("sm90_attn.py: the kernels need an sm_90 GPU (H100/H200); --compile-only builds them anywhere")
        return 2
    loaded = {name: load(path) for name, path in libs.items()}
    ok = check_accuracy(loaded)
    for b, h, n in [(2, 32, 4096), (1, 32, 16384)]:
        bench_shape(loaded, b, h, n, args.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
