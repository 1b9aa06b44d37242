#!/usr/bin/env python3
"""Benchmark the attention kernels against SDPA (and sageattention 1.0.6 when importable).

Not a test: prints a compact table over DESIGN.md section 7's shapes. Medians from
triton.testing.do_bench; "call" times the whole public call (quantization included), "kernel"
the attention launch alone on pre-quantized K/V. Ratios are SDPA time / our time (> 1: faster).

    python scripts/bench_kernels.py [--shapes 1x16x1024x64,2x32x4096x128] [--config 128,64,8,3]
"""

from __future__ import annotations

import argparse
import math

import torch
import triton
import triton.testing
from sagebuild.kernels.triton import configs

from sagebuild import bench
from sagebuild.attention import (
    dispatch,
    sageattn,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_qk_int8_pv_fp16_triton,
)
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.reference import exact_attention

SHAPES = [  # (B, H, N, D, causal): DESIGN.md section 7
    (1, 16, 1024, 64, False),
    (1, 16, 4096, 64, False),
    (2, 32, 4096, 128, False),
    (2, 32, 4096, 128, True),
    (1, 32, 16384, 128, False),
    (1, 32, 16384, 128, True),
    (4, 32, 8192, 64, False),
]
FNS = {"fp16": sageattn_qk_int8_pv_fp16_triton, "fp8": sageattn_qk_int8_pv_fp8_triton}


def _ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def _kernel_only(q, k, v, pv: str, causal: bool, cfg_override) -> float:
    """The attention launch alone on K/V quantized beforehand (``sagebuild.bench``'s adapter)."""
    run, _ = bench._kernel_only(dispatch.VARIANTS[pv], q, k, v, "HND", causal, config=cfg_override)
    return _ms(run)


def _bench_shape(
    b: int,
    h: int,
    n: int,
    d: int,
    causal: bool,
    dtype: torch.dtype,
    variants: list[str],
    sage106,
    config,
    backend: str = "triton",
) -> list[str]:
    """Table rows for one shape: SDPA, each of our variants, sageattention 1.0.6 if present."""
    dev = torch.device("cuda")
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, device=dev, dtype=dtype) for _ in range(3))
    flops = 4 * b * h * n * n * d * (0.5 if causal else 1.0)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    t_sdpa = _ms(lambda: sdpa(q, k, v, is_causal=causal))
    # accuracy on the first 4 heads against exact fp32 attention (chunked: fits at every shape)
    ref = exact_attention(q[:1, :4], k[:1, :4], v[:1, :4], is_causal=causal)
    rows = [("sdpa", t_sdpa, math.nan, sdpa(q, k, v, is_causal=causal))]
    for pv in variants:
        fn = FNS[pv]

        def call(fn=fn):
            return fn(q, k, v, is_causal=causal, quantization_backend=backend, config=config)

        rows.append((f"sage-{pv}", _ms(call), _kernel_only(q, k, v, pv, causal, config), call()))

    def auto() -> torch.Tensor:  # what users call: the dispatch table's variant and accumulation
        return sageattn(q, k, v, is_causal=causal, quantization_backend=backend, config=config)

    rows.append(("sageattn (auto)", _ms(auto), math.nan, auto()))
    if sage106 is not None:
        try:
            rows.append(
                (
                    "sageattention-1.0.6",
                    _ms(lambda: sage106(q, k, v, is_causal=causal)),
                    math.nan,
                    sage106(q, k, v, is_causal=causal),
                )
            )
        except Exception as exc:  # e.g. head dims it refuses (256): say so in the table
            print(f"# sageattention-1.0.6 at {b}x{h}x{n}x{d}: {type(exc).__name__}: {exc}"[:200])
    lines = []
    for name, t, tk, out in rows:
        acc = accuracy(out[:1, :4], ref)
        lines.append(
            f"| {b}×{h}×{n}×{d} | {'yes' if causal else 'no'} | {name} | {t:.4f} | {tk:.4f} | "
            f"{flops / t / 1e9:.0f} | {t_sdpa / t:.2f} | {acc['cos']:.5f} | {acc['rel_l1']:.4f} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", help="comma list of BxHxNxD[c] (c: causal)")
    ap.add_argument("--config", help="force BLOCK_M,BLOCK_N,num_warps,num_stages for our kernels")
    ap.add_argument("--dtype", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument(
        "--backend",
        default="triton",
        choices=["triton", "ext", "auto"],
        help="quantization_backend of the whole-call rows",
    )
    args = ap.parse_args()
    shapes = SHAPES
    if args.shapes:
        shapes = []
        for s in args.shapes.split(","):
            causal = s.endswith("c")
            b, h, n, d = (int(x) for x in s.rstrip("c").split("x"))
            shapes.append((b, h, n, d, causal))
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    dev = torch.device("cuda")
    variants = [v.rsplit("_", 1)[1] for v in dispatch.available_variants(dev)]
    try:
        import sageattention  # 1.0.6 from PyPI, when carried along

        sage106 = getattr(sageattention, "sageattn", None)
    except ImportError:
        sage106 = None
    print(
        f"# {torch.cuda.get_device_name(dev)} arch={dispatch.device_arch(dev)} torch {torch.__version__} "
        f"triton {triton.__version__} config table {configs.CONFIG_TABLE_VERSION} override={args.config} "
        f"dtype={args.dtype} backend={args.backend} sageattention={'yes' if sage106 else 'no'}"
    )
    print("| B×H×N×D | causal | impl | call ms | kernel ms | TFLOPS (call) | SDPA/impl | cos | rel L1 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for b, h, n, d, causal in shapes:
        for line in _bench_shape(b, h, n, d, causal, dtype, variants, sage106, args.config, args.backend):
            print(line, flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
