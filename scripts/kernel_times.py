#!/usr/bin/env python3
"""Rerun to refresh docs/performance.md's kernel times: each launch's device time, ours against SDPA's (GPU).

    python scripts/kernel_times.py [--shapes 1x16x1024x64,2x10x4096:77x64,2x8x256x160]
        [--varlen 4096:137,4096:512 --heads 24 --head-dim 128] [--dtype float16] [--calls 30]

Shapes are ``sagebuild bench``'s keys (BxHxNxD, Nq:Nk for cross-attention, H/Hk for GQA, a
trailing c for causal); ``--varlen`` adds one packed call (``sageattn_varlen``, each item N or
N:Nk as ``sagebuild bench --varlen`` takes it) against SDPA once per sequence. Each call runs
``--calls`` times back to back, after a warm-up, under ``torch.profiler``; the table gives every
kernel's device µs per call and launches per call, ours (`sageattn`, K/V quantization included)
and SDPA's default backend. Back to back, PDL overlaps our two launches only as far as the host
keeps ahead, so the sums can exceed a CUDA-graph replay's whole call (``ab_env.py --graph``): the
whole-call ratios are ``bench_workloads.py``'s; this says where a call's time goes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from sagebuild import bench, sageattn
from sagebuild.bench import packed_call, packed_segments, sdpa_call
from sagebuild.benchrecord import sequence_pairs
from sagebuild.errors import SagebuildError
from sagebuild.profiles import parse_shape_key

Fn = Callable[[], Any]


def kernel_times(fn: Fn, calls: int, warmup: int = 5) -> dict[str, tuple[float, float]]:
    """{kernel name: (device µs per call, launches per call)} over ``calls`` back-to-back calls."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):  # compile, plan and record before the profiled calls
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    out: dict[str, tuple[float, float]] = {}
    for e in prof.key_averages():
        device_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0.0)
        if e.count and device_us and e.device_type.name == "CUDA":
            out[e.key] = (device_us / calls, e.count / calls)
    return out


def dense_case(spec: str, dtype: torch.dtype) -> tuple[str, Fn, Fn]:
    """``sageattn`` and SDPA (bottom-right causal, GQA as the caller would run them) on one shape."""
    b, h, hk, n, nk, d, causal = parse_shape_key(spec)
    q = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(b, hk or h, nk or n, d, device="cuda", dtype=dtype) for _ in range(2))
    return spec, lambda: sageattn(q, k, v, is_causal=causal), sdpa_call(q, k, v, causal)


def packed_case(text: str, heads: int, head_dim: int, dtype: torch.dtype) -> tuple[str, Fn, Fn]:
    """``sageattn_varlen`` over packed sequences, SDPA once per sequence on its own keys."""
    lens, keys = bench.parse_varlen(text)
    segments = sequence_pairs(lens, keys)
    q = torch.randn(sum(lens), heads, head_dim, device="cuda", dtype=dtype)
    n_k = sum(mk for _, mk in segments)
    k, v = (torch.randn(n_k, heads, head_dim, device="cuda", dtype=dtype) for _ in range(2))
    ours, _ = packed_call(q, k, v, segments, causal=False)
    views = packed_segments(segments, q, k, v)
    label = bench.packed_key(lens, keys, heads, head_dim, causal=False)
    return label, ours, lambda: [F.scaled_dot_product_attention(*x) for x in views]


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x16x1024x64,2x10x4096:77x64,2x8x256x160,2x32x1024x128")
    ap.add_argument("--varlen", default="", help="a packed call: N or N:Nk each (4096:137,4096:512)")
    ap.add_argument("--heads", type=int, default=24, help="--varlen's heads")
    ap.add_argument("--head-dim", type=int, default=128, help="--varlen's head dim")
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--calls", type=int, default=30, help="profiled calls per provider")
    args = ap.parse_args(argv)
    try:
        shapes = [s for s in args.shapes.split(",") if s]
        for spec in shapes:
            parse_shape_key(spec)
        if args.varlen:
            bench.parse_varlen(args.varlen)
    except (ValueError, SagebuildError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.calls < 1:
        print(f"error: --calls must be at least 1, got {args.calls}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("kernel_times.py: no CUDA device visible to torch; it times GPU kernels and measured nothing")
        return 2
    dtype = getattr(torch, args.dtype)
    device = torch.cuda.get_device_name(0)
    print(f"{device}, torch {torch.__version__}: device µs per call, {args.calls} calls back to back")
    print("| call | provider | kernel | µs per call | launches per call |")
    print("| --- | --- | --- | --- | --- |")
    cases = [dense_case(spec, dtype) for spec in shapes]
    if args.varlen:
        cases.append(packed_case(args.varlen, args.heads, args.head_dim, dtype))
    for label, ours, sdpa in cases:
        for provider, fn in (("sageattn", ours), ("sdpa", sdpa)):
            rows = sorted(kernel_times(fn, args.calls).items(), key=lambda kv: -kv[1][0])
            for name, (us, launches) in rows:
                print(f"| {label} | {provider} | {name[:70]} | {us:.1f} | {launches:g} |", flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
