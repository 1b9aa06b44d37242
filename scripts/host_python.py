#!/usr/bin/env python3
"""Rerun for host-path changes: the host cost of one attention call, on the CPU box (launches
stubbed) or on a GPU (``--gpu``: real launches, Triton's launcher included).

    python scripts/host_python.py [--shape 1x16x1024x64] [--causal] [--profile] [--gpu]

Cross-attention gives the query and key lengths as Nq:Nk (``--shape 2x10x4096:77x64``), GQA the
heads as H/Hk (``1x32/8x4096x128``).

At small shapes the host path decides the whole call, and the GPU hosts' speed varies 2–3×
between machine starts, so host-side changes are compared in one process, interleaved. Without
``--gpu``, Triton's interpreter makes CPU tensors acceptable and both launchers (attention and
quantization) return at once, so only our Python (plan key, validation cache, allocations,
argument lists) is timed. With ``--gpu`` the launches are real: calls are timed in bursts of 50
(few enough that the launch queue never fills, so the time is the host's, not the device's),
synchronised between bursts, and SDPA's host time per call is timed the same way. Prints the
median µs per call for replayed calls (``attention.replay``) and for the full path;
``--profile`` adds the top functions by own time (replayed calls), which on a GPU shows what
Triton's launcher costs per launch.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import time
from typing import Callable


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1x16x1024x64", help="BxHxNxD, BxHxNq:NkxD or BxH/HkxNxD")
    ap.add_argument("--causal", action="store_true", help="time causal calls")
    ap.add_argument("--profile", action="store_true", help="top functions by own time (replayed calls)")
    ap.add_argument("--gpu", action="store_true", help="real launches on the GPU (host time per call)")
    return ap.parse_args()


def main() -> None:
    args = _parse()
    if not args.gpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: CPU tensors are accepted
    import torch

    from sagebuild.attention import api, replay, sageattn
    from sagebuild.kernels.triton import launcher
    from sagebuild.profiles import parse_shape_key

    if args.gpu and not torch.cuda.is_available():
        raise SystemExit("host_python.py --gpu: no GPU visible to torch")
    b, h, hk, n_q, n_k, d, _ = parse_shape_key(args.shape)
    dev = "cuda" if args.gpu else "cpu"
    if not args.gpu:
        launcher._launch = lambda *a, **k: None  # the launch itself: recording and replay still run
    q = torch.randn(b, h, n_q, d, dtype=torch.float16, device=dev)
    k, v = (torch.randn(b, hk or h, n_k or n_q, d, dtype=torch.float16, device=dev) for _ in range(2))
    burst, bursts = (50, 60) if args.gpu else (3000, 1)

    def ours() -> None:
        sageattn(q, k, v, is_causal=args.causal)

    def sdpa() -> None:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

    def per_call(fn: Callable[[], None]) -> float:
        """µs of host time per call: the median over bursts, synchronised between them."""
        times = []
        for _ in range(bursts):
            if args.gpu:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(burst):
                fn()
            times.append((time.perf_counter() - t0) / burst * 1e6)
        return statistics.median(times)

    build = replay.Recorder.build

    def mode(replayed: bool) -> None:
        """Replays on, or every call down the full path (the recorder finds nothing to replay)."""
        replay.Recorder.build = build if replayed else (lambda self, inputs, result: None)
        api.clear_caches()
        for _ in range(200):
            ours()

    samples: dict[str, list[float]] = {"replayed": [], "full": [], "sdpa": []}
    for _ in range(7):  # interleaved: the machine's drift hits all alike
        for replayed in (True, False):
            mode(replayed)
            samples["replayed" if replayed else "full"].append(per_call(ours))
        if args.gpu:
            samples["sdpa"].append(per_call(sdpa))
    mode(True)
    med = {key: statistics.median(vals) for key, vals in samples.items() if vals}
    where = "real launches, host time" if args.gpu else "launches stubbed"
    causal = " causal" if args.causal else ""
    line = (
        f"sageattn {args.shape}{causal}, µs per call ({where}, median of 7 rounds): "
        f"replayed {med['replayed']:.1f}, full path {med['full']:.1f}"
    )
    print(line + (f", SDPA {med['sdpa']:.1f}" if "sdpa" in med else ""))
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        per_call(ours)
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())


if __name__ == "__main__":
    main()
