#!/usr/bin/env python3
"""Rerun under Nsight Compute to see where a kernel's time goes: steady-state `sageattn` calls at one shape.

Warm-up calls compile the kernels (and record the call for replay) first, so the profiled
launches are the ones a model's steady state makes:

    ncu --launch-skip 3 --launch-count 1 -k regex:_attn_fwd --section SpeedOfLight \\
        --section SchedulerStats --section WarpStateStats --section SourceCounters \\
        python scripts/ncu_attention.py --shape 2x32x4096x128 [--causal] [--kv-seq 77]

``--sdpa`` runs PyTorch's SDPA (default backend) instead, for comparison (its kernels:
``-k regex:"sdpa|fmha|flash|cudnn"``).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from sagebuild import sageattn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="2x32x4096x128", help="BxHxNxD")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--kv-seq", type=int, default=0, help="keys per call (cross-attention; default N)")
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--sdpa", action="store_true", help="PyTorch SDPA (default backend) instead")
    args = ap.parse_args()
    try:
        b, h, n, d = (int(x) for x in args.shape.split("x"))
    except ValueError:
        ap.error(f"--shape must be BxHxNxD, e.g. 2x32x4096x128; got {args.shape!r}")
    if not torch.cuda.is_available():
        ap.error("no GPU visible to torch: run this on the GPU machine, under ncu")
    dtype = getattr(torch, args.dtype)
    q = torch.randn(b, h, n, d, dtype=dtype, device="cuda")
    k, v = (torch.randn(b, h, args.kv_seq or n, d, dtype=dtype, device="cuda") for _ in range(2))
    fn = F.scaled_dot_product_attention if args.sdpa else sageattn
    for _ in range(args.calls):
        fn(q, k, v, is_causal=args.causal)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
