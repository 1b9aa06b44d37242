#!/usr/bin/env python3
"""Rerun to measure a change before and after (GPU): `sageattn` under each knob setting, SDPA in the same run.

    python scripts/ab_env.py "SAGEBUILD_ATTN_CONFIG=;64,128,4,3" [--shapes 2x32x4096x128,1x32x16384x128c]
        [--rounds 3] [--graph]

A shape is BxHxNxD, with a trailing c for causal; cross-attention gives the query and key
lengths as Nq:Nk (``2x10x4096:77x64``, SDXL's text keys), GQA the heads as H/Hk
(``1x32/8x4096x128c``): the keys of ``sagebuild bench``'s shapes (``profiles.parse_shape_key``).

Settings are separated by ";"; an empty one leaves the variable unset (the table's choice). A
name with a dot is a module knob of ``sagebuild.kernels.triton`` instead (``"quant.ONEPASS=True;False"``).

Settings are interleaved round by round (the machines are noisy: a drift hits every setting
alike); each round times every setting with do_bench medians, the table gives the median over
rounds, the ratio SDPA time / ours and the accuracy against fp32 attention on the same inputs.
`--graph` times CUDA-graph replays of each call instead (``bench.median_ms``: device time
only, what a host-bound small call hides; `sagebuild bench`'s kernel-only row times the attention
launch alone). Knobs are read once per process, so each setting calls ``knobs.refresh()``; a
module knob clears the API's caches.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import statistics

import torch

from sagebuild import knobs
from sagebuild.attention import api, sageattn
from sagebuild.attention.metrics import accuracy
from sagebuild.bench import median_ms, sdpa_call
from sagebuild.profiles import parse_shape_key

DEFAULT_SHAPES = "2x32x4096x128,2x32x4096x128c,1x32x16384x128,4x32x8192x64,1x16x1024x64"


_DEFAULTS: dict[str, object] = {}


def _set(name: str, value: str) -> None:
    """An environment variable, or with a dot a module knob of ``sagebuild.kernels.triton``
    (``quant.ONEPASS``: a Python literal, the module's own value when empty; the API's caches
    are cleared so that the plans see it)."""
    if "." not in name:
        if value:
            os.environ[name] = value
        else:
            os.environ.pop(name, None)
        knobs.refresh()
        return
    mod_name, attr = name.split(".", 1)
    mod = importlib.import_module(f"sagebuild.kernels.triton.{mod_name}")
    _DEFAULTS.setdefault(name, getattr(mod, attr))
    setattr(mod, attr, ast.literal_eval(value) if value else _DEFAULTS[name])
    api.clear_caches()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("knob", help="NAME=v1;v2;... (an environment variable and its settings)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    ap.add_argument("--graph", action="store_true", help="time CUDA-graph replays (device time only)")
    args = ap.parse_args()
    name, _, values = args.knob.partition("=")
    settings = values.split(";")
    dtype = getattr(torch, args.dtype)
    print(f"| shape | causal | {name} | median ms | SDPA ms | SDPA / ours | cos | rel L1 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for spec in args.shapes.split(","):
        b, h, hk, n, nk, d, causal = parse_shape_key(spec)
        shown = spec.rstrip("c").replace("x", "×")
        g = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=g)
        k, v = (
            torch.randn(b, hk or h, nk or n, d, device="cuda", dtype=dtype, generator=g) for _ in range(2)
        )
        ref = sdpa_call(q.float(), k.float(), v.float(), causal)()
        times: dict[str, list[float]] = {s: [] for s in settings}
        sdpa: list[float] = []
        acc: dict[str, dict] = {}
        for _ in range(args.rounds):
            sdpa.append(median_ms(sdpa_call(q, k, v, causal), args.graph, 100))
            for s in settings:
                _set(name, s)
                call = lambda q=q, k=k, v=v, c=causal: sageattn(q, k, v, is_causal=c)  # noqa: E731
                acc.setdefault(s, accuracy(call(), ref))
                times[s].append(median_ms(call, args.graph, 100))
        _set(name, "")
        t_sdpa = statistics.median(sdpa)
        for s in settings:
            t = statistics.median(times[s])
            a = acc[s]
            print(
                f"| {shown} | {causal} | {s or '(unset)'} | {t:.4f} | {t_sdpa:.4f} | "
                f"{t_sdpa / t:.3f} | {a['cos']:.5f} | {a['rel_l1']:.4f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
