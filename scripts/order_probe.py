"""Per-call cold times, in issue order, of SDPA and our calls timed in interleaved rounds.

Why: `sagebuild bench`'s interleaved rounds measured the TMA row 10 % slower than rounds of one
provider each; this prints each cold sample (L2 flushed before it) with the SM clock and power
between rounds, so an order effect (clocks, a stale descriptor, the allocator) shows itself.
It was the power limit (docs/performance.md, run 17), which ``--sustained`` shows directly: each
call 6 × 500 times back to back after 2 s idle, the clock and power sampled every 250 ms.
`--bench ARGS...` runs `sagebuild bench ARGS` instead, printing its cold samples in issue order;
`--run-bench SHAPE KERNELS` calls ``bench.run_bench`` directly with only those kernel variants.
`--cold-variants` times each call 30 times in a row under three patterns (L2 flush before each
call as the bench does; an idle gap of the flush's length instead; the flush plus 1 ms idle after
each call), to tell a cold cache from the duty cycle (power) as the cause of a cold-time gap.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import time
from typing import Callable

import torch
import torch.nn.functional as F

import sagebuild
from sagebuild.attention import sageattn_qk_int8_pv_fp8_triton

_SMI = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active",
        "--format=csv,noheader"]  # fmt: skip


def smi() -> str:
    return subprocess.run(_SMI, capture_output=True, text=True).stdout.strip()


def sustained(name: str, fn: Callable[[], object], chunks: int = 6, calls: int = 500) -> None:
    """Per-call times of ``chunks`` × ``calls`` back-to-back calls after 2 s idle, and the SM
    clock, power and throttle reasons nvidia-smi sampled meanwhile (every 250 ms)."""
    time.sleep(2)
    mon = subprocess.Popen([*_SMI, "-lms", "250"], stdout=subprocess.PIPE, text=True)
    events = []
    for _ in range(chunks):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(calls):
            fn()
        e.record()
        events.append((s, e))
    torch.cuda.synchronize()
    mon.terminate()
    samples = mon.communicate()[0].splitlines()
    print(
        f"{name}: ms per call, {chunks} chunks of {calls}: "
        + " ".join(f"{s.elapsed_time(e) / calls:.3f}" for s, e in events)
    )
    print("   nvidia-smi: " + " | ".join(samples[::3][:12]))


def bench_mode(argv: list[str]) -> None:
    """Run `sagebuild bench ARGV` with every cold sample printed in issue order (per provider
    index and round), to see which calls make a median."""
    import sys

    import sagebuild.bench as bench
    from sagebuild.cli.app import main as cli

    orig = bench._gpu_cold_samples
    seen: dict[int, int] = {}

    def logged(fn, n, flush, device):  # noqa: ANN001, ANN202
        host: list[float] = []

        def timed() -> None:
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e6)

        torch.cuda.set_sync_debug_mode("warn")
        s = orig(timed, n, flush, device)
        torch.cuda.set_sync_debug_mode("default")
        i = seen.setdefault(id(fn), len(seen))
        print(
            f"provider {i} [{smi()}]: host µs median {statistics.median(host):.0f} max {max(host):.0f}; "
            "device ms " + " ".join(f"{x:.3f}" for x in s),
            file=sys.stderr,
        )
        return s

    bench._gpu_cold_samples = logged
    sys.argv = ["sagebuild", "bench", *argv]
    with contextlib.suppress(SystemExit):
        cli()


def run_bench_mode(shape: str, kernels: str) -> None:
    """``bench.run_bench`` called directly (no CLI, no profile probe), the profile's kernels
    replaced by ``kernels`` ("" = sageattn and SDPA only): which part of the bench matters."""
    import dataclasses

    from sagebuild import bench, profiles

    prof, _ = profiles.resolve("hopper-cu12", ["sm90"])
    prof = dataclasses.replace(prof, kernels=tuple(k for k in kernels.split(",") if k))
    b, h, n, d = (int(x) for x in shape.split("x"))
    cfg = bench.config_from_profile(prof, batch=b, heads=h, seq=(n,), head_dim=d, causal=False)
    res = bench.run_bench(prof, cfg)
    for r in res.rows:
        print(
            f"{r.provider:16s} {r.kind:12s} {r.timing.median_ms:.4f} b2b {r.timing.back_to_back_ms or 0:.4f}"
        )


def cold_variants(fns: dict[str, Callable[[], object]], order: list[str], calls: int = 30) -> None:
    """Per provider: median (first 5 / last 5) device ms of ``calls`` calls in a row, after 1 s
    idle, under each pattern: "flush" (256 MB zeroed before each call, the bench's cold timing),
    "gap" (no flush; the GPU idles ~60 µs instead: torch.cuda._sleep) and "flush+1ms" (the flush,
    and 1 ms of GPU idle after each call: a lower duty cycle)."""
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    clock_hz = torch.cuda.clock_rate() * 1e6 if hasattr(torch.cuda, "clock_rate") else 1.98e9
    gap_cycles, cool_cycles = int(60e-6 * clock_hz), int(1e-3 * clock_hz)
    for name in order:
        fns[name]()
    torch.cuda.synchronize()
    for pattern in ("flush", "gap", "flush+1ms"):
        for name in order:
            time.sleep(1)
            ev = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(calls)
            ]
            for s, e in ev:
                if pattern == "gap":
                    torch.cuda._sleep(gap_cycles)
                else:
                    flush.zero_()
                s.record()
                fns[name]()
                e.record()
                if pattern == "flush+1ms":
                    torch.cuda._sleep(cool_cycles)
            torch.cuda.synchronize()
            t = [s.elapsed_time(e) for s, e in ev]
            print(
                f"{pattern:10s} {name:5s} median {statistics.median(t):.4f} "
                f"(first 5 {statistics.median(t[:5]):.4f}, last 5 {statistics.median(t[-5:]):.4f}) [{smi()}]"
            )


def main() -> None:
    import sys

    if sys.argv[1:2] == ["--bench"]:
        bench_mode(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--run-bench"]:
        run_bench_mode(*sys.argv[2:4])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="2x32x4096x128")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--order", default="sdpa,sage,fp8")
    ap.add_argument("--cpu-inputs", action="store_true", help="inputs made as the bench makes them")
    ap.add_argument("--plan-first", action="store_true", help="launch_plan before the first call")
    ap.add_argument("--ref", action="store_true", help="the bench's reference and backend probe first")
    ap.add_argument("--interleaved", action="store_true", help="time with bench.time_interleaved")
    ap.add_argument("--sustained", action="store_true", help="500-call chunks with clocks and power")
    ap.add_argument("--shift", action="store_true", help="hold a buffer of another size each round")
    ap.add_argument("--cold-variants", action="store_true", help="flush / idle gap / flush+1 ms idle")
    a = ap.parse_args()
    b, h, n, d = (int(x) for x in a.shape.split("x"))
    if a.cpu_inputs:
        gc = torch.Generator(device="cpu").manual_seed(n)
        q, k, v = (
            torch.randn(b, h, n, d, generator=gc, dtype=torch.float32).to(torch.float16).to("cuda")
            for _ in range(3)
        )
    else:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16, generator=g) for _ in range(3))
    if a.plan_first:
        from sagebuild.attention.api import launch_plan

        print(launch_plan(q, k, v))
    fns = {
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        "sage": lambda: sagebuild.sageattn(q, k, v),
        "fp8": lambda: sageattn_qk_int8_pv_fp8_triton(q, k, v),
        "fp16": lambda: sagebuild.sageattn_qk_int8_pv_fp16_triton(q, k, v),
    }
    if a.ref:  # what the bench does first: the exact fp32 reference and SDPA's backend
        from sagebuild.attention import reference
        from sagebuild.bench import sdpa_backend

        ref = reference.exact_attention(q, k, v)
        print(sdpa_backend(q, k, v, False)["name"], ref.dtype)
    order = a.order.split(",")
    if a.cold_variants:
        cold_variants(fns, order)
        return
    if a.sustained:
        for name in order:
            fns[name]()
        torch.cuda.synchronize()
        for name in order:
            sustained(name, fns[name])
        return
    if a.interleaved:  # the bench's own timing of these calls
        from sagebuild.bench import time_interleaved

        for warm, reps in ((25, 100), (5, 30), (25, 100)):
            ts = time_interleaved([fns[x] for x in order], warm, reps, 5, torch.device("cuda"))
            print(
                f"time_interleaved warmup {warm} reps {reps}: "
                + ", ".join(
                    f"{x} {t.median_ms:.4f} (p20 {t.p20_ms:.4f} p80 {t.p80_ms:.4f})"
                    for x, t in zip(order, ts)
                )
            )
        return
    flush = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    for name in order:
        for _ in range(5):
            fns[name]()
    torch.cuda.synchronize()
    held = []
    for r in range(a.rounds):
        if a.shift:  # moves where the caching allocator places the calls' buffers this round
            held.append(torch.empty(int(torch.randint(1, 64, ()).item()) * 2**20 + 512 * r, device="cuda"))
        print(f"round {r}: {smi()}")
        for name in order:
            ev = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(a.n)
            ]
            for s, e in ev:
                flush.zero_()
                s.record()
                fns[name]()
                e.record()
            torch.cuda.synchronize()
            t = [s.elapsed_time(e) for s, e in ev]
            b0, b1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            b0.record()
            for _ in range(10):
                fns[name]()
            b1.record()
            torch.cuda.synchronize()
            print(
                f"  {name:5s} cold "
                + " ".join(f"{x:.3f}" for x in t)
                + f" | b2b {b0.elapsed_time(b1) / 10:.3f}"
            )


if __name__ == "__main__":
    main()
