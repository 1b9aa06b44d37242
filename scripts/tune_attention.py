#!/usr/bin/env python3
"""Rerun to retune the versioned attention launch-config table (kernels/triton/configs.py, GPU).

For each benchmark shape and P·V variant, time the whole call (quantization included) for a
grid of (BLOCK_M, BLOCK_N, num_warps, num_stages) against SDPA's default backend in the same
run, and print the winners. The winners go into the config table by hand (a new table version,
the numbers in docs/performance.md's table): users never pay for autotuning.

    python scripts/tune_attention.py [--shapes 1x16x1024x64,2x32x4096x128c,1x40x32760:512x128]
        [--variants fp8,fp16]
        [--graph]

``--graph`` times CUDA-graph replays (``bench.median_ms``): device time only. Small
shapes need it: there do_bench times the host (~60 µs per call on the H200's host against
~25 µs of device work), so a sweep without it cannot tell configs apart at 1×16×1024×64.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys

import torch
import torch.nn.functional as F

from sagebuild.attention import (
    dispatch,
    gate,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_qk_int8_pv_fp16_triton,
)
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.plan import VARIANTS
from sagebuild.bench import median_ms
from sagebuild.kernels.triton import configs
from sagebuild.profiles import parse_shape_key

DEFAULT_SHAPES = (
    "1x16x1024x64,1x16x4096x64,2x32x4096x128,2x32x4096x128c,1x32x16384x128,1x32x16384x128c,4x32x8192x64"
)
GRID = [
    (64, 128, 4, 3),
    (64, 128, 4, 2),
    (64, 128, 4, 4),
    (64, 256, 4, 2),
    (64, 64, 4, 3),
    (64, 64, 4, 4),
    (128, 64, 8, 3),
    (128, 64, 8, 4),
    (128, 128, 8, 3),
    (128, 64, 4, 3),
    (128, 32, 4, 4),
]
FN = {
    "fp16": sageattn_qk_int8_pv_fp16_triton,
    "fp8": sageattn_qk_int8_pv_fp8_triton,
    # FP8 P·V accumulated by the MMA across key tiles (pv_accum_dtype="fp32")
    "fp8acc": functools.partial(sageattn_qk_int8_pv_fp8_triton, pv_accum_dtype="fp32"),
}


def parse_shape(s: str) -> tuple[int, int, int, int, int, bool]:
    """``BxHxNxD``, ``BxHxNq:NkxD`` (cross-attention), ``c`` appended when causal: batch, heads,
    query tokens, head dim, key tokens, causal (``profiles.parse_shape_key``; no K/V heads here)."""
    b, h, hk, n, nk, d, causal = parse_shape_key(s)
    if hk:
        raise ValueError(f"shape {s!r}: tune_attention.py times equal Q and K/V heads (drop /{hk})")
    return b, h, n, d, nk or n, causal


def _tunable(var: str) -> bool:
    """A variant the tuner may choose on this GPU: one that waits for ``sagebuild verify``'s
    accuracy check here (``attention.gate``) is left out, with the reason, until it passed."""
    held = gate.why_not(dispatch.device_arch("cuda"), VARIANTS[var.removesuffix("acc")])  # fp8acc: FP8 P·V
    if held:
        print(f"  {var}: left out: {held} (run sagebuild verify first)", flush=True)
    return held is None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--variants", default="fp8,fp16", help="of: " + ",".join(FN))
    ap.add_argument(
        "--grid",
        default="",
        help="config strings 'M,N,W,S[,R][,tma][,pipe];...' (default: built-in)",
    )
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--backend", default="triton", help="quantization_backend: triton | ext | auto")
    ap.add_argument("--json", default="")
    ap.add_argument("--graph", action="store_true", help="time CUDA-graph replays (device time only)")
    ap.add_argument(
        "--padded-head-dim",
        action="store_true",
        help="run head dims 65-96 as the padded 128 tile (A/B against the 64+32 split)",
    )
    args = ap.parse_args()
    if args.padded_head_dim:
        configs.split_head_dim = lambda head_dim, head_dim_pad: False
    grid = [configs.parse_config(g).spec() for g in args.grid.split(";")] if args.grid else GRID
    unknown = [v for v in args.variants.split(",") if v not in FN]
    if unknown:
        ap.error(f"--variants: {', '.join(unknown)} not among {', '.join(FN)}")
    variants = [v for v in args.variants.split(",") if _tunable(v)]
    dtype = getattr(torch, args.dtype)
    rows = []
    for spec in args.shapes.split(","):
        b, h, n, d, nk, causal = parse_shape(spec)
        torch.manual_seed(0)
        q = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(b, h, nk, d, device="cuda", dtype=dtype) for _ in range(2))
        sdpa_call = functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal)
        sdpa = median_ms(sdpa_call, args.graph)
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        flops = 4 * b * h * n * nk * d / (2 if causal else 1)
        for var in variants:
            best = None
            for cfg in grid:
                fn = FN[var]
                try:
                    call = functools.partial(
                        fn, q, k, v, is_causal=causal, config=cfg, quantization_backend=args.backend
                    )
                    out = call()
                    torch.cuda.synchronize()
                    ms = median_ms(call, args.graph)
                except Exception as e:  # a config that does not fit (shared memory, registers)
                    print(f"  {spec} {var} {cfg}: failed: {str(e).splitlines()[0][:100]}", flush=True)
                    continue
                acc = accuracy(out, ref)
                row = {
                    "shape": spec,
                    "variant": var,
                    "config": cfg,
                    "ms": ms,
                    "sdpa_ms": sdpa,
                    "ratio": ms / sdpa,
                    "tflops": flops / ms / 1e9,
                    "cos": acc["cos"],
                    "rel_l1": acc["rel_l1"],
                }
                rows.append(row)
                print(
                    f"  {spec:>16} {var} {str(cfg):>18} {ms:8.4f} ms  ratio {ms / sdpa:5.3f}  "
                    f"{row['tflops']:6.0f} TFLOPS  cos {acc['cos']:.5f} l1 {acc['rel_l1']:.4f}",
                    flush=True,
                )
                if best is None or ms < best["ms"]:
                    best = row
            if best:
                best["best"] = True
    print("\n==== best config per shape/variant (whole call vs SDPA default, same run) ====")
    print(
        f"{'shape':>16} {'var':>4} {'config':>18} {'ms':>8} {'sdpa':>8} {'ratio':>6} {'TFLOPS':>6} "
        f"{'cos':>8} {'l1':>6}"
    )
    for r in rows:
        if r.get("best"):
            print(
                f"{r['shape']:>16} {r['variant']:>4} {str(r['config']):>18} {r['ms']:8.4f} "
                f"{r['sdpa_ms']:8.4f} "
                f"{r['ratio']:6.3f} {r['tflops']:6.0f} {r['cos']:8.5f} {r['rel_l1']:6.4f}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if not rows or any(math.isnan(r["cos"]) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
