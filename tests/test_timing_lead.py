"""bench.timing's cold GPU samples measure device time even when the host is slow to issue a
call: a simulated stream (host clock, GPU queue) stands in for CUDA, so the rule is checked on CPU."""

from __future__ import annotations

import types

import pytest
import torch

from sagebuild.bench import timing

FLUSH_MS, SPIN_CYCLES_PER_MS = 0.05, 1_000_000.0


class _Stream:
    """One GPU queue: each op starts when the previous one ended or when the host enqueued it."""

    def __init__(self) -> None:
        self.host_ms = 0.0
        self.gpu_free_ms = 0.0

    def enqueue(self, ms: float) -> None:
        self.gpu_free_ms = max(self.gpu_free_ms, self.host_ms) + ms

    def host_work(self, ms: float) -> None:
        self.host_ms += ms

    def synchronize(self, *_: object) -> None:
        self.host_ms = max(self.host_ms, self.gpu_free_ms)


@pytest.fixture
def stream(monkeypatch):
    s = _Stream()

    class Event:
        def __init__(self, enable_timing: bool = False) -> None:
            self.at = 0.0

        def record(self) -> None:
            self.at = max(s.gpu_free_ms, s.host_ms)
            s.gpu_free_ms = self.at

        def elapsed_time(self, end: Event) -> float:
            return end.at - self.at

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: s.enqueue(cycles / SPIN_CYCLES_PER_MS))
    monkeypatch.setattr(torch.cuda, "synchronize", s.synchronize)
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: s.host_ms / 1e3))
    monkeypatch.setattr(timing, "_spin_cycles_per_ms", {})
    return s


def _flush(s: _Stream) -> object:
    return types.SimpleNamespace(zero_=lambda: s.enqueue(FLUSH_MS))


def test_a_slow_host_does_not_reach_the_device_time(stream):
    """A call whose host part (0.3 ms) outlasts the flush: its first sample, with the minimum lead,
    holds host time and is dropped; the lead then grows to twice the host time and every later
    sample is the kernel's 0.02 ms. Timed as before (no lead), every sample was 0.3 ms or more."""
    kernel_ms, host_ms = 0.02, 0.3

    def call() -> None:
        stream.host_work(host_ms)
        stream.enqueue(kernel_ms)

    samples = timing._gpu_cold_samples(call, 6, _flush(stream), "cuda:0")
    assert timing._spin_rate("cuda:0") == pytest.approx(SPIN_CYCLES_PER_MS)
    assert len(samples) == 5
    assert samples == pytest.approx([kernel_ms] * 5)


def test_a_call_that_waits_for_the_gpu_keeps_its_samples(stream):
    """A call that synchronizes inside is never clean: its samples are all kept (host time
    included, as it is for the caller), and the lead stops at LEAD_MAX_MS."""

    def call() -> None:
        stream.synchronize()
        stream.host_work(0.01)
        stream.enqueue(0.02)

    samples = timing._gpu_cold_samples(call, 4, _flush(stream), "cuda:0")
    assert len(samples) == 4 and all(s > 0.02 for s in samples)
    assert timing.lead_ms(1e3) == timing.LEAD_MAX_MS and timing.lead_ms(0.0) == timing.LEAD_MIN_MS


def test_one_of_each_calls_every_callable_once_and_skips_a_failing_one():
    """What sizes the tuner's and bench_workloads' rounds: one call of each (a raising one is left
    to the timing to report), never less than a microsecond."""
    calls: list[str] = []

    def boom() -> None:
        calls.append("boom")
        raise RuntimeError("broke")

    ms = timing.one_of_each_ms([lambda: calls.append("a"), boom, lambda: calls.append("b")])
    assert calls == ["a", "boom", "b"] and ms >= 1e-3
