"""A bench run's result: a row per (length, provider) that ran, the roster of providers with the
reasons any did not run, and the gate's verdict. ``to_dict`` is the record the report renders."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from sagebuild.bench.config import BenchConfig
from sagebuild.bench.timing import Timing
from sagebuild.errors import Exit


@dataclass
class BenchRow:
    seq: int
    provider: str
    kind: str  # baseline | whole_call | kernel_only | peer
    timing: Optional[Timing] = None
    tflops: Optional[float] = None
    speedup: Optional[float] = None
    accuracy: Optional[dict[str, Any]] = None
    bounds: Optional[dict[str, float]] = None
    error: Optional[str] = None
    plan: Optional[dict[str, Any]] = None  # what ran: ``sagebuild.attention.api.launch_plan``
    sustained_speedup: Optional[float] = None  # SDPA's sustained time / this one's (``--sustain``)
    expected_speedup: Optional[float] = None  # the profile's measured speed-up for this arch and shape
    vs_expected: Optional[float] = None  # speed-up / expected_speedup (the regression gate's ratio)
    label: Optional[str] = None  # how tables name the provider ("sageattn (dispatched)")
    ran: Optional[str] = None  # what ran, in words: SDPA's backend, our plan's kernel, a peer's package

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # the timing too: asdict recurses


@dataclass
class BenchResult:
    ok: bool
    timing_kind: str  # "gpu" | "cpu"
    device: str
    device_name: Optional[str]
    method: str
    note: str
    sdpa_backend: dict[str, Any]
    config: BenchConfig
    rows: list[BenchRow]
    min_speedup: float
    speed_gate_applied: bool
    failures: list[str] = field(default_factory=list)
    gate_on: str = "cold"  # the speed-up the gate compared (``GATE_METRICS``)
    # the regression gate: {"arch", "measured", "regression", "applied", "note"}
    expectation: dict[str, Any] = field(default_factory=dict)
    # every provider asked for: {name, label, kind, what, reasons: {seq: why it did not run there}}
    providers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exit_code(self) -> Exit:
        return Exit.OK if self.ok else Exit.BENCH_BELOW_THRESHOLD

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in asdict(self).items() if k not in ("config", "rows")}
        d["config"] = self.config.record()
        d["rows"] = [r.to_dict() for r in self.rows]
        gate_fields = ("min_speedup", "speed_gate_applied", "gate_on", "failures", "expectation")
        d["gate"] = {("metric" if k == "gate_on" else k): d.pop(k) for k in gate_fields}
        return d
