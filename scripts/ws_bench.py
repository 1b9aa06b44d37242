#!/usr/bin/env python3
"""Hopper's warp-specialised kernel against the portable kernel and SDPA, in one run.

Not a test: checks accuracy on a few cases (against the fp32 reference and the portable
kernel), then times whole calls (quantization included; medians of do_bench) for the long
shapes and, with --sweep, a grid of launch configs (SAGEBUILD_WS_CONFIG). Ratios are
ours / SDPA (below 1: faster than SDPA).

    python scripts/ws_bench.py [--shapes 2x32x4096x128,1x32x16384x128] [--sweep]
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.nn.functional as F
import triton.testing
from sagebuild.kernels.triton import configs

from sagebuild.attention import sageattn_qk_int8_pv_fp8_triton as fp8_attn
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.reference import exact_attention

SHAPES = "2x32x4096x128,2x32x4096x128c,1x32x16384x128,1x32x16384x128c,4x32x8192x64,1x16x4096x64"
CASES = [  # (B, H, Hkv, N_q, N_k, D, causal, layout)
    (1, 4, 4, 1024, 1024, 128, False, "HND"),
    (1, 4, 4, 1024, 1024, 128, True, "HND"),
    (2, 8, 2, 512, 1024, 128, True, "HND"),
    (1, 4, 4, 1000, 1008, 128, False, "HND"),
    (1, 4, 4, 777, 1008, 128, True, "NHD"),
    (1, 4, 4, 1024, 1024, 64, False, "HND"),
    (1, 4, 4, 1024, 1024, 80, True, "HND"),
]
SWEEP = ["64,64,4,3,128", "64,64,4,5,128", "128,64,8,4,168"]


def _ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _with_ws(value: str | None):
    if value is None:
        os.environ.pop(configs.WS_ENV_VAR, None)
    else:
        os.environ[configs.WS_ENV_VAR] = value


def check_accuracy() -> None:
    torch.manual_seed(0)
    for b, h, hk, nq, nk, d, causal, lay in CASES:

        def make(n: int, heads: int, b=b, d=d, lay=lay) -> torch.Tensor:
            shape = (b, n, heads, d) if lay == "NHD" else (b, heads, n, d)
            return torch.randn(shape, device="cuda", dtype=torch.float16)

        q, k, v = make(nq, h), make(nk, hk), make(nk, hk)
        _with_ws("off")
        portable = fp8_attn(q, k, v, tensor_layout=lay, is_causal=causal)
        _with_ws("on")
        ws = fp8_attn(q, k, v, tensor_layout=lay, is_causal=causal)
        t = (lambda x: x.transpose(1, 2)) if lay == "NHD" else (lambda x: x)  # noqa: E731
        ref = exact_attention(t(q), t(k), t(v), is_causal=causal)
        acc_ws, acc_pt = accuracy(t(ws), ref), accuracy(t(portable), ref)
        diff = (ws.float() - portable.float()).abs().max().item()
        print(
            f"acc {b}x{h}/{hk}x{nq}/{nk}x{d} causal={causal} {lay}: ws cos {acc_ws['cos']:.6f} "
            f"l1 {acc_ws['rel_l1']:.4f} | portable cos {acc_pt['cos']:.6f} l1 {acc_pt['rel_l1']:.4f} "
            f"| max|ws-portable| {diff:.4f} finite={bool(torch.isfinite(ws).all())}"
        )


def bench(shapes: str, sweep: bool) -> None:
    print(f"{'shape':<18} {'SDPA ms':>8} {'portable':>9} {'ws':>8} {'ws/SDPA':>8} {'TFLOPS':>7}  config")
    for spec in shapes.split(","):
        causal = spec.endswith("c")
        b, h, n, d = (int(x) for x in spec.rstrip("c").split("x"))
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        sdpa = _ms(lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(q, k, v, is_causal=c))
        _with_ws("off")
        portable = _ms(lambda q=q, k=k, v=v, c=causal: fp8_attn(q, k, v, is_causal=c))
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        for cfg in ["on"] + (SWEEP if sweep else []):
            _with_ws(cfg)
            try:
                ws = _ms(lambda q=q, k=k, v=v, c=causal: fp8_attn(q, k, v, is_causal=c))
            except Exception as exc:  # a config that does not compile: say so, go on
                print(f"{spec:<18} config {cfg}: {type(exc).__name__}: {str(exc)[:200]}")
                continue
            tf = flops / ws / 1e9
            print(
                f"{spec:<18} {sdpa:8.3f} {portable:9.3f} {ws:8.3f} {ws / sdpa:8.3f} {tf:7.0f}  "
                f"{'table' if cfg == 'on' else cfg} (portable/SDPA {portable / sdpa:.3f})"
            )
        _with_ws(None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=SHAPES)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--no-accuracy", action="store_true")
    args = ap.parse_args()
    print("GPU:", torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    if not args.no_accuracy:
        check_accuracy()
    bench(args.shapes, args.sweep)


if __name__ == "__main__":
    main()
