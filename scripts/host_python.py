#!/usr/bin/env python3
"""The Python cost of one attention call, measured without a GPU (the launches replaced by no-ops).

    python scripts/host_python.py [--shape 1x16x1024x64] [--profile]

At small shapes the host path decides the whole call, and the GPU hosts' speed varies 2–3×
between machines (docs/performance.md, run 14), so host-side changes are compared here, on one
CPU, in one process: Triton's interpreter makes CPU tensors acceptable, and both launchers
(attention and quantization) return at once, so only our Python (plan key, validation cache,
allocations, argument lists) is timed. Prints the median µs per call over 7 × 3000 calls;
``--profile`` adds the top functions by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import time

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: CPU tensors are accepted

import torch  # noqa: E402
from sagebuild.kernels.triton import launcher  # noqa: E402

from sagebuild.attention import sageattn  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1x16x1024x64", help="BxHxNxD")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    b, h, n, d = (int(x) for x in args.shape.split("x"))
    launcher.launch = lambda *a, **k: None  # every kernel module calls it through the module
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.float16) for _ in range(3))

    def call() -> None:
        sageattn(q, k, v)

    for _ in range(200):
        call()
    samples = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(3000):
            call()
        samples.append((time.perf_counter() - t0) / 3000 * 1e6)
    print(f"sageattn {args.shape}: {statistics.median(samples):.1f} us of Python per call (launches stubbed)")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3000):
            call()
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(20)
        print(out.getvalue())


if __name__ == "__main__":
    main()
