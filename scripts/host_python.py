#!/usr/bin/env python3
"""Rerun for host-path changes: the Python cost of one attention call, without a GPU (launches stubbed).

    python scripts/host_python.py [--shape 1x16x1024x64] [--causal] [--profile]

Cross-attention gives the query and key lengths as Nq:Nk (``--shape 2x10x4096:77x64``).

At small shapes the host path decides the whole call, and the GPU hosts' speed varies 2–3×
between machine starts, so host-side changes are compared here, on one
CPU, in one process: Triton's interpreter makes CPU tensors acceptable, and both launchers
(attention and quantization) return at once, so only our Python (plan key, validation cache,
allocations, argument lists) is timed. Prints the median µs per call over 7 × 3000 calls, for
replayed calls (``attention.replay``) and for the full path, interleaved; ``--profile`` adds
the top functions by own time (replayed calls).
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

from sagebuild.attention import api, replay, sageattn  # noqa: E402
from sagebuild.kernels.triton import launcher  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1x16x1024x64", help="BxHxNxD or BxHxNq:NkxD")
    ap.add_argument("--causal", action="store_true", help="time causal calls")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    b, h, n, d = args.shape.split("x")
    n_q, _, n_k = n.partition(":")
    b, h, d, n_q, n_k = int(b), int(h), int(d), int(n_q), int(n_k or n_q)
    launcher._launch = lambda *a, **k: None  # the launch itself: recording and replay still run
    q = torch.randn(b, h, n_q, d, dtype=torch.float16)
    k, v = (torch.randn(b, h, n_k, d, dtype=torch.float16) for _ in range(2))

    def call() -> None:
        sageattn(q, k, v, is_causal=args.causal)

    build = replay.Recorder.build

    def mode(replayed: bool) -> None:
        """Replays on, or every call down the full path (the recorder finds nothing to replay)."""
        replay.Recorder.build = build if replayed else (lambda self, inputs, result: None)
        api.clear_caches()
        for _ in range(200):
            call()

    samples: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(7):  # interleaved: the machine's drift hits both alike
        for replayed in (True, False):
            mode(replayed)
            t0 = time.perf_counter()
            for _ in range(3000):
                call()
            samples[replayed].append((time.perf_counter() - t0) / 3000 * 1e6)
    mode(True)
    print(
        f"sageattn {args.shape}{' causal' if args.causal else ''}, µs of Python per call "
        "(launches stubbed, median of 7 × 3000): "
        f"replayed {statistics.median(samples[True]):.1f}, full path {statistics.median(samples[False]):.1f}"
    )
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
