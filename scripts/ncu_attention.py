#!/usr/bin/env python3
"""One attention call at a shape, for Nsight Compute: where does a kernel's time go?

Warm-up calls compile the kernels first, so the profiled launches are steady-state ones:

    ncu --launch-skip 3 --launch-count 1 -k regex:_attn_fwd --section SpeedOfLight \\
        --section SchedulerStats --section WarpStateStats \\
        python scripts/ncu_attention.py --shape 2x32x4096x128 [--causal]

``SAGEBUILD_WS_CONFIG`` picks the Hopper kernel (``on``) or the portable one (``off``);
``--sdpa`` runs PyTorch's SDPA instead (its kernels: ``-k regex:"sdpa|fmha|flash"``); ``--auto``
runs ``sageattn`` (the dispatch's variant and accumulation: on Hopper the MMA-accumulated FP8 P·V)
instead of the explicit FP8 function with its two-level default.
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from sagebuild.attention import sageattn, sageattn_qk_int8_pv_fp8_triton


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="2x32x4096x128", help="BxHxNxD")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--sdpa", action="store_true", help="PyTorch SDPA (default backend) instead")
    ap.add_argument("--auto", action="store_true", help="sageattn (what the dispatch runs) instead")
    args = ap.parse_args()
    b, h, n, d = (int(x) for x in args.shape.split("x"))
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float16, device="cuda") for _ in range(3))
    fn = sageattn if args.auto else sageattn_qk_int8_pv_fp8_triton
    if args.sdpa:
        fn = F.scaled_dot_product_attention
    for _ in range(args.calls):
        fn(q, k, v, is_causal=args.causal)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
