#!/usr/bin/env python3
"""Probe (GPU): hide the K/V quantization behind the attention kernel by splitting a call's heads.

    python scripts/overlap_probe.py [--shapes 2x32x4096x128,2x32x4096x128c] [--chunks 2,4,8]
        [--rounds 5] [--graph]

A call's heads are split into chunks, timed three ways against ``sageattn`` as it is and SDPA
(rows interleaved round by round, do_bench medians): ``seq`` runs the chunks one after the other
on one stream (the cost of splitting alone); ``overlap`` quantizes chunk i+1 on a second stream
of higher priority while chunk i's attention runs, so that the memory-bound launch takes SM
slots as attention programs retire; ``dual`` alternates whole chunks (quantization, then
attention) between two streams, so one chunk's launches can also fill the other's tail.
``--graph`` times CUDA-graph replays (device time: the chunks' extra launches cost the host
more than the device). Accuracy against fp32 attention; every mode must equal ``seq`` bit for
bit (the same launches on the same data). Run 19 (docs/performance.md): dual ×2 −2.8 % at
2×32×4096×128, slower at 16K keys; not adopted. Run 24 measured the same here, but built into
the API (batch halves on two streams) it saved 0.4 % of device time and cost the whole call.
"""

from __future__ import annotations

import argparse
import functools
import statistics

import torch
import torch.nn.functional as F
import triton.testing
from sagebuild.kernels.triton.attn_fwd import QuantizedKV

from sagebuild.attention import api, sageattn
from sagebuild.attention.graphed import capture
from sagebuild.attention.metrics import accuracy


def _parse(spec: str) -> tuple[int, int, int, int, bool]:
    causal = spec.endswith("c")
    b, h, n, d = (int(x) for x in spec.rstrip("c").split("x"))
    return b, h, n, d, causal


class Chunked:
    """``sageattn``'s launches for FP8 P·V (the table's plan, through the API's own
    ``quantize_kv`` and ``launch_attention``), per chunk of heads."""

    def __init__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, chunks: int) -> None:
        self.q, self.k, self.v, self.causal = q, k, v, causal
        self.plan = api._make_plan(
            q, k, v, "HND", causal, None, "per_warp", "fp8", "auto", None, False, "fp32"
        )
        h = q.shape[1]
        step = -(-h // chunks)
        self.bounds = [(h0, min(h, h0 + step)) for h0 in range(0, h, step)]
        self.side = torch.cuda.Stream(priority=-1)

    def _quant(self, h0: int, h1: int) -> QuantizedKV:
        return api.quantize_kv(self.plan, None, self.k[:, h0:h1], self.v[:, h0:h1], True)

    def _attn(self, out: torch.Tensor, h0: int, h1: int, kv: QuantizedKV) -> None:
        api.launch_attention(self.plan, None, self.q[:, h0:h1], kv, out[:, h0:h1], None, self.causal, "fp32")

    def sequential(self) -> torch.Tensor:
        out = torch.empty_like(self.q)
        for h0, h1 in self.bounds:
            self._attn(out, h0, h1, self._quant(h0, h1))
        return out

    def overlapped(self) -> torch.Tensor:
        main = torch.cuda.current_stream()
        out = torch.empty_like(self.q)
        first = self._quant(*self.bounds[0])
        start = torch.cuda.Event()
        start.record(main)
        self.side.wait_stream(main)
        kvs, ready = [first], [None]
        with torch.cuda.stream(self.side):
            for h0, h1 in self.bounds[1:]:
                kv = self._quant(h0, h1)
                ev = torch.cuda.Event()
                ev.record(self.side)
                kvs.append(kv)
                ready.append(ev)
        capturing = torch.cuda.is_current_stream_capturing()
        for (h0, h1), kv, ev in zip(self.bounds, kvs, ready):
            if ev is not None:
                main.wait_event(ev)
                if not capturing:  # a graph's pool keeps its buffers
                    for t in (kv.k.t, kv.k_scale, kv.km, kv.v.t, kv.v_scale):
                        t.record_stream(main)
            self._attn(out, h0, h1, kv)
        return out

    def dual(self) -> torch.Tensor:
        """Chunks alternate between the current stream and the side stream, each quantizing then
        attending: one chunk's launches can fill the other's tail."""
        main = torch.cuda.current_stream()
        out = torch.empty_like(self.q)
        self.side.wait_stream(main)
        capturing = torch.cuda.is_current_stream_capturing()
        for i, (h0, h1) in enumerate(self.bounds):
            stream = self.side if i % 2 else main
            with torch.cuda.stream(stream):
                kv = self._quant(h0, h1)
                self._attn(out, h0, h1, kv)
        main.wait_stream(self.side)
        if not capturing:
            out.record_stream(self.side)
        return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="2x32x4096x128,2x32x4096x128c,1x32x16384x128,4x32x8192x64")
    ap.add_argument("--chunks", default="2,4,8")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--graph", action="store_true", help="time CUDA-graph replays (device time only)")
    args = ap.parse_args()
    torch.manual_seed(0)
    timing = "CUDA-graph replays" if args.graph else "whole calls"
    print(f"{torch.cuda.get_device_name()}  torch {torch.__version__}  ({timing}, ms, median over rounds)")
    for spec in args.shapes.split(","):
        b, h, n, d, causal = _parse(spec)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
        ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        rows = {
            "sdpa": functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
            "sageattn": functools.partial(sageattn, q, k, v, is_causal=causal),
        }
        for c in (int(x) for x in args.chunks.split(",")):
            ch = Chunked(q, k, v, causal, c)
            same = torch.equal(ch.sequential(), ch.overlapped()) and torch.equal(ch.sequential(), ch.dual())
            rows[f"seq x{c}"] = ch.sequential
            rows[f"overlap x{c}"] = ch.overlapped
            rows[f"dual x{c}"] = ch.dual
            acc = accuracy(ch.overlapped().float(), ref)
            print(f"  {spec} x{c}: overlapped, dual == sequential: {same}; ", end="")
            print(f"cos {acc['cos']:.5f} rel L1 {acc['rel_l1']:.4f}")
        if args.graph:  # each row captured once, its replays timed
            dev = torch.device("cuda", torch.cuda.current_device())
            rows = {name: capture(fn, dev)[0].replay for name, fn in rows.items()}
        times: dict[str, list[float]] = {name: [] for name in rows}
        for r in range(args.rounds):
            names = list(rows)[r % len(rows) :] + list(rows)[: r % len(rows)]
            for name in names:
                times[name].append(
                    triton.testing.do_bench(rows[name], warmup=25, rep=100, return_mode="median")
                )
        sdpa = statistics.median(times["sdpa"])
        for name, ts in times.items():
            ms = statistics.median(ts)
            print(f"{spec:>18} {name:>12} {ms:8.4f} ms  SDPA/ours {sdpa / ms:6.3f}")


if __name__ == "__main__":
    main()
