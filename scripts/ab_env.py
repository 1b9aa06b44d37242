#!/usr/bin/env python3
"""A/B a tuning knob read from the environment (GPU): `sageattn` under each setting, SDPA in the same run.

    python scripts/ab_env.py "SAGEBUILD_ATTN_CONFIG=;64,128,4,3" [--shapes 2x32x4096x128,1x32x16384x128c]
        [--rounds 3]

Settings are separated by ";"; an empty one leaves the variable unset (the table's choice).

Settings are interleaved round by round (the machines are noisy: a drift hits every setting
alike); each round times every setting with do_bench medians, the table gives the median over
rounds, the ratio SDPA time / ours and the accuracy against fp32 attention on the same inputs.
Knobs must be read at call time (``configs``' environment variables are, and the attention
plan key includes them).
"""

from __future__ import annotations

import argparse
import os
import statistics

import torch
import torch.nn.functional as F
import triton.testing
from torch.nn.functional import scaled_dot_product_attention as sdpa_fn

from sagebuild.attention import sageattn
from sagebuild.attention.metrics import accuracy

DEFAULT_SHAPES = "2x32x4096x128,2x32x4096x128c,1x32x16384x128,4x32x8192x64,1x16x1024x64"


def _ms(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("knob", help="NAME=v1;v2;... (an environment variable and its settings)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    args = ap.parse_args()
    name, _, values = args.knob.partition("=")
    settings = values.split(";")
    dtype = getattr(torch, args.dtype)
    print(f"| shape | causal | {name} | median ms | SDPA ms | SDPA / ours | cos | rel L1 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for spec in args.shapes.split(","):
        causal = spec.endswith("c")
        b, h, n, d = (int(x) for x in spec.rstrip("c").split("x"))
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        times: dict[str, list[float]] = {s: [] for s in settings}
        sdpa: list[float] = []
        acc: dict[str, dict] = {}
        for _ in range(args.rounds):
            sdpa.append(_ms(lambda q=q, k=k, v=v, c=causal: sdpa_fn(q, k, v, is_causal=c)))
            for s in settings:
                if s:
                    os.environ[name] = s
                else:
                    os.environ.pop(name, None)
                out = sageattn(q, k, v, is_causal=causal)
                acc.setdefault(s, accuracy(out, ref))
                times[s].append(_ms(lambda q=q, k=k, v=v, c=causal: sageattn(q, k, v, is_causal=c)))
        os.environ.pop(name, None)
        t_sdpa = statistics.median(sdpa)
        for s in settings:
            t = statistics.median(times[s])
            a = acc[s]
            print(
                f"| {b}×{h}×{n}×{d} | {causal} | {s or '(unset)'} | {t:.4f} | {t_sdpa:.4f} | "
                f"{t_sdpa / t:.3f} | {a['cos']:.5f} | {a['rel_l1']:.4f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
