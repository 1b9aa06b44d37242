"""How the bench times calls, usable on its own (the tuner and the scripts time with it too).

API (every function takes zero-argument callables; nothing here knows about attention):

- ``time_interleaved(fns, warmup, reps, rounds, device=None, sustain_s=0.0)`` → one ``Timing`` (or
  the exception that stopped it) per callable. ``reps`` timed calls are split into ``rounds``;
  every round times every callable, each round in another order (``round_order``: a Williams
  design), so a drifting machine hits all alike. On a CUDA/HIP ``device`` each call is timed
  cold by device events with the L2 flushed before it and the GPU held busy while the host issues
  it (``lead_ms``: device time, not the host's; ``Timing.median_ms``, p20, p80), then per
  round a warm back-to-back burst (``back_to_back_ms``) and, with ``sustain_s`` > 0, the second
  half of ``sustain_s`` seconds of back-to-back calls, the GPU at its power limit
  (``sustained_ms``); back-to-back and sustained are medians over rounds. Elsewhere (``device``
  None or a CPU) each call is timed by the host's wall clock.
- ``time_named({"a": fn_a, ...}, ...)``: the same keyed by name, with ``graph=True`` timing each
  callable's CUDA-graph replay (device time only: what small calls need to tell configs apart).
- ``graph_replay(fn, device)``: the replay of ``fn`` captured once in a CUDA graph.
- ``one_of_each_ms(fns, device=None)``: one call of each callable (ms), what a round costs: how
  callers size their reps.
- ``median_ms(fn, graph=False, rep_ms=200)``: Triton's ``do_bench`` median of one callable on the
  current GPU (its CUDA-graph replay with ``graph``), the tuning scripts' quick timing.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Union

# A back-to-back burst shorter than this would weigh its first call's pipeline fill too much.
B2B_MIN_CALLS = 10
_FLUSH_BYTES = 256 * 1024 * 1024  # more than any GPU's L2


@dataclass
class Timing:
    """Cold per-call times (the device's: an L2 flush before each call hides the host) and, on
    GPUs, medians over rounds of the per-call time of warm back-to-back calls (what a loop of small
    calls sees) and of ``--sustain`` seconds of them (the GPU at its power limit)."""

    median_ms: float
    p20_ms: float
    p80_ms: float
    reps: int
    back_to_back_ms: Optional[float] = None
    sustained_ms: Optional[float] = None

    @classmethod
    def from_samples(cls, ms: list[float]) -> Timing:
        q = statistics.quantiles(ms, n=5, method="inclusive") if len(ms) > 1 else ms * 4
        return cls(statistics.median(ms), q[0], q[3], len(ms))


def _cpu_samples(fn: Callable[[], Any], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return samples


# A cold call's device time is clean only if the host had issued it before the GPU reached it: a
# spin kernel (``torch.cuda._sleep``) after the L2 flush holds the GPU for a lead of at least twice
# the host's time for the previous call (and LEAD_MIN_MS), at most LEAD_MAX_MS. Without it a call
# whose host part outlasts the flush (SDPA's Python and cuDNN path on a busy host) measured its host
# time: the tuner once timed SDPA at 2x10x4096:77x64 at 0.121 ms, bench 0.019 ms (H100).
LEAD_MIN_MS, LEAD_MAX_MS = 0.1, 5.0
_spin_cycles_per_ms: dict[Any, float] = {}


def _spin_rate(device: Any) -> float:
    """``torch.cuda._sleep`` cycles per millisecond on ``device``, measured once."""
    import torch

    key = str(device)
    if key not in _spin_cycles_per_ms:
        cycles = 2_000_000
        torch.cuda._sleep(cycles // 10)  # the spin kernel's first launch loads its module
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize(device)
        _spin_cycles_per_ms[key] = cycles / max(start.elapsed_time(end), 1e-3)
    return _spin_cycles_per_ms[key]


def one_of_each_ms(fns: list[Callable[[], Any]], device: Any = None) -> float:
    """One call of every callable, timed together by the host clock (ms, at least 0.001), the
    GPU drained before and after: what a round's calls cost, to size rounds and reps. A callable
    that raises is skipped here (the timing itself reports it)."""
    gpu = getattr(device, "type", None) == "cuda"
    if gpu:
        import torch

        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for fn in fns:
        with contextlib.suppress(Exception):
            fn()
    if gpu:
        torch.cuda.synchronize(device)
    return max((time.perf_counter() - t0) * 1e3, 1e-3)


def lead_ms(host_ms: float) -> float:
    """The GPU's head start before a timed call whose host part took ``host_ms`` last time."""
    return min(LEAD_MAX_MS, max(LEAD_MIN_MS, 2.0 * host_ms))


def _gpu_cold_samples(fn: Callable[[], Any], n: int, flush: Any, device: Any) -> list[float]:
    """Device-event time of each of n calls, the L2 cache flushed before each (cold, like do_bench)
    and the GPU held busy while the host issues the call (``lead_ms``). A sample whose host part
    outlasted its lead may hold host time: it is kept only when no sample is clean (a call that
    waits for the GPU itself is never clean)."""
    import torch

    rate = _spin_rate(device)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    clean, host = [False] * n, 0.0
    for i in range(n):
        lead = lead_ms(host)
        flush.zero_()
        torch.cuda._sleep(int(lead * rate))
        t0 = time.perf_counter()
        starts[i].record()
        fn()
        host = (time.perf_counter() - t0) * 1e3
        ends[i].record()
        clean[i] = host < lead
    torch.cuda.synchronize(device)
    ms = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return [m for m, ok in zip(ms, clean) if ok] or ms


def _gpu_back_to_back(fn: Callable[[], Any], n: int, device: Any, lead: int = 0) -> float:
    """Time per call of n calls issued back to back, warm (ms), after ``lead`` untimed ones."""
    import torch

    for _ in range(lead):
        fn()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    first.record()
    for _ in range(n):
        fn()
    last.record()
    torch.cuda.synchronize(device)
    return first.elapsed_time(last) / n


def rounds_used(reps: int, rounds: int) -> int:
    """How many rounds ``time_interleaved`` splits ``reps`` timed calls into (each has one or more)."""
    return max(1, min(rounds, reps))


def round_order(n: int, r: int) -> list[int]:
    """Round r's order of n functions, a Williams design (0, 1, n-1, 2, n-2, ... shifted by r,
    mirrored every other n rounds): a GPU runs a kernel at the clock its predecessor left."""
    seq = [0, *((j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n))]
    if (r // n) % 2:
        seq.reverse()
    return [(x + r) % n for x in seq]


class _Samples:
    """One callable's measurements so far: cold samples and, on a GPU, each round's bursts."""

    def __init__(self) -> None:
        self.cold: list[float] = []
        self.b2b: list[float] = []
        self.sustained: list[float] = []

    def timing(self) -> Timing:
        med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
        return replace(
            Timing.from_samples(self.cold), back_to_back_ms=med(self.b2b), sustained_ms=med(self.sustained)
        )


def _gpu_round(
    fn: Callable[[], Any], n: int, flush: Any, device: Any, sustain_s: float, into: _Samples
) -> None:
    """One round of one callable on a GPU: n cold calls, a back-to-back burst, the sustained run."""
    into.cold += _gpu_cold_samples(fn, n, flush, device)
    into.b2b.append(_gpu_back_to_back(fn, max(n, B2B_MIN_CALLS), device))
    if sustain_s > 0:
        # timed over the second half of sustain_s seconds of calls: the first half brings the GPU
        # to the clocks its power limit allows
        half = max(B2B_MIN_CALLS, int(sustain_s * 1e3 / max(into.b2b[-1], 1e-3) / 2))
        into.sustained.append(_gpu_back_to_back(fn, half, device, lead=half))


def time_interleaved(
    fns: list[Callable[[], Any]],
    warmup: int,
    reps: int,
    rounds: int,
    device: Any = None,
    sustain_s: float = 0.0,
) -> list[Union[Timing, Exception]]:
    """``Timing`` of each function, or the exception that stopped it (the module docstring says how)."""
    gpu = getattr(device, "type", None) == "cuda"
    flush = None
    if gpu:
        import torch

        flush = torch.empty(_FLUSH_BYTES // 4, dtype=torch.int32, device=device)
    failed: dict[int, Exception] = {}  # the exception that stopped a function: its result
    for i, fn in enumerate(fns):
        try:
            for _ in range(warmup):
                fn()
        except Exception as exc:  # noqa: BLE001
            failed[i] = exc
    if gpu:
        torch.cuda.synchronize(device)
    n_rounds = rounds_used(reps, rounds)
    counts = [reps // n_rounds + (r < reps % n_rounds) for r in range(n_rounds)]
    got = [_Samples() for _ in fns]
    for r, n in enumerate(counts):
        for i in round_order(len(fns), r):
            if i in failed:
                continue
            try:
                if gpu:
                    _gpu_round(fns[i], n, flush, device, sustain_s, got[i])
                else:
                    got[i].cold += _cpu_samples(fns[i], n)
            except Exception as exc:  # noqa: BLE001
                failed[i] = exc
    return [failed.get(i) or got[i].timing() for i in range(len(fns))]


def graph_replay(fn: Callable[[], Any], device: Any) -> Callable[[], Any]:
    """``fn`` captured once in a CUDA graph (after warm-up calls on a side stream): its replay."""
    from sagebuild.attention.graphed import capture

    graph, _ = capture(fn, device)
    return graph.replay


def time_named(
    fns: dict[str, Callable[[], Any]],
    warmup: int = 10,
    reps: int = 50,
    rounds: int = 5,
    device: Any = None,
    sustain_s: float = 0.0,
    graph: bool = False,
) -> dict[str, Union[Timing, Exception]]:
    """``time_interleaved`` keyed by name; with ``graph`` (GPU only) each callable's CUDA-graph replay."""
    calls = list(fns.values())
    if graph:
        calls = [graph_replay(fn, device) for fn in calls]
    return dict(zip(fns, time_interleaved(calls, warmup, reps, rounds, device, sustain_s)))


def median_ms(fn: Callable[[], Any], graph: bool = False, rep_ms: int = 200) -> float:
    """The tuning scripts' timing on the current GPU (median ms) of the whole call, or with ``graph``
    of its CUDA-graph replay: device time only, what small calls need to tell configs apart."""
    from triton.testing import do_bench

    if not graph:
        return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")
    import torch

    replay = graph_replay(fn, torch.device("cuda", torch.cuda.current_device()))
    return do_bench(replay, warmup=25, rep=rep_ms, return_mode="median")
