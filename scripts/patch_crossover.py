#!/usr/bin/env python3
"""Where a call through ``sagebuild.patch_sdpa()`` beats the original SDPA (GPU): the sweeps behind
the shipped shape classes of ``sagebuild/tuning/defaults.py`` (the patch's and ``sageattn``'s
routing data; ``sagebuild tune`` measures a machine's own).

    python scripts/patch_crossover.py [--dims 128:3072,4096,5120,6144,8192] [--dims 64:6144,8192,12288]
        [--bh 1x16,1x32,2x32] [--sustain 0.25] [--rounds 4]

Eager calls (host time included, as a model makes them) through the patch against the original
SDPA on the same random fp16 inputs, q_len = kv_len, causal and not, timed by
``bench.time_interleaved`` (interleaved rounds, cold medians and the sustained time per call
after ``--sustain`` seconds of back-to-back calls per round). The routing is switched off for
the run (``SAGEBUILD_ROUTE=0``), so every call is accelerated; a call the patch still
passes through is reported with its reason. One table row per shape: SDPA and patched ms, and
SDPA time / patched time cold and sustained (above 1: the patch is faster). Docs:
docs/plug-and-play.md ("Speed routing"); small grids with ``--bh 1x1,1x4,1x8``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

DEFAULT_DIMS = ["128:3072,4096,5120,6144,8192", "64:6144,8192,12288,16384", "256:2048,4096,8192"]


def _dims(specs: list[str]) -> list[tuple[int, list[int]]]:
    """Each "D:N1,N2,..." as (D, [N1, N2, ...]); a usage error for anything else."""
    out = []
    for spec in specs:
        try:
            d, lens = spec.split(":")
            out.append((int(d), [int(n) for n in lens.split(",")]))
        except ValueError:
            raise SystemExit(f"--dims {spec!r}: expected HEAD_DIM:LEN[,LEN...], e.g. 128:4096,8192") from None
    return out


def _row(orig: Any, q: Any, k: Any, v: Any, causal: bool, args: argparse.Namespace) -> str:
    """One shape's cells: SDPA and patched ms (cold / sustained), and SDPA time / patched time."""
    import torch.nn.functional as F

    import sagebuild.patch as patch
    from sagebuild import bench

    patch.reset_stats()
    with patch.patch_sdpa():
        patched = F.scaled_dot_product_attention
        fns = [lambda: orig(q, k, v, is_causal=causal), lambda: patched(q, k, v, is_causal=causal)]
        s, o = bench.time_interleaved(
            fns, warmup=5, reps=args.reps, rounds=args.rounds, device=q.device, sustain_s=args.sustain
        )
    st = patch.patch_stats()
    if isinstance(s, Exception) or isinstance(o, Exception) or st.passed_through:
        what = s if isinstance(s, Exception) else o if isinstance(o, Exception) else dict(st.reasons)
        return f"not measured: {what} | | | "
    sus = f"{s.sustained_ms / o.sustained_ms:.3f}" if s.sustained_ms and o.sustained_ms else "—"
    return (
        f"{s.median_ms:.4f} / {s.sustained_ms or 0:.4f} | {o.median_ms:.4f} / {o.sustained_ms or 0:.4f} | "
        f"{s.median_ms / o.median_ms:.3f} | {sus}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", action="append", help="HEAD_DIM:LEN,... (repeatable)")
    ap.add_argument("--bh", default="1x16,1x32,2x32", help="batch x heads, comma-separated")
    ap.add_argument("--sustain", type=float, default=0.25, help="seconds of back-to-back calls per round")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=16, help="cold calls per provider")
    args = ap.parse_args()
    dims = _dims(args.dims or DEFAULT_DIMS)
    try:
        bhs = [tuple(int(x) for x in s.split("x")) for s in args.bh.split(",")]
    except ValueError:
        raise SystemExit(f"--bh {args.bh!r}: expected BxH[,BxH...], e.g. 1x16,2x32") from None

    import torch
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("patch_crossover.py: needs a CUDA or ROCm GPU (on a CPU the patch passes every call through)")
        return 2
    os.environ["SAGEBUILD_ROUTE"] = "0"  # measure every shape: routing off (the patch's and sageattn's)
    os.environ.pop("SAGEBUILD_PATCH_MIN_LEN", None)
    orig = F.scaled_dot_product_attention
    dev = torch.device("cuda")
    t0 = time.time()
    print(f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, fp16")
    print("| B×H×N×D | causal | SDPA cold / sustained ms | patched cold / sustained ms | cold | sustained |")
    print("| --- | --- | --- | --- | --- | --- |")
    for d, lens in dims:
        for n in lens:
            for b, h in bhs:
                for causal in (False, True):
                    q, k, v = (torch.randn(b, h, n, d, device=dev, dtype=torch.float16) for _ in range(3))
                    print(f"| {b}×{h}×{n}×{d} | {causal} | {_row(orig, q, k, v, causal, args)} |", flush=True)
    print(f"elapsed {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
