"""The shipped tuning data: measured shape classes for families we measured, in the record's own
type (``record.TunedClass``), used where this machine has no tuned class for a call.

This is the one home of the SDPA crossovers: ``sageattn`` routes a call to PyTorch SDPA, and
``patch_sdpa`` passes it through, where its class's winner is SDPA (``tuning.route``). Every
class cites where it was measured; add a family with ``sagebuild tune --export`` records
(``scripts/`` merges them). The Hopper classes are docs/performance.md's workload table (H100,
``scripts/bench_workloads.py``: whole calls beside SDPA's default backend in one process,
device time, L2 flushed) and the patch's crossover sweeps (docs/plug-and-play.md, "Speed
routing": eager calls through the patch, host time included). Where both measured a shape, the
workload table's later run stands. A class's winner "ours" without a variant or config runs the
shipped config table's choice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sagebuild.tuning.record import Choice, Fingerprint, ShapeClass, TunedClass, TuningRecord

PERF = "docs/performance.md, Current numbers (H100, table 2026.12.05.1-.3, bench_workloads.py)"
PATCH = "docs/plug-and-play.md, Speed routing (H200 run 26 / H100 2026-12-05, patch_crossover.py, B·H 16-64)"
SMALL_BH = "docs/plug-and-play.md, Speed routing (H200 run 28, B·H below 16, sustained)"

OURS = Choice("ours")
SDPA = Choice("sdpa")


def _measured(b: int, h: int, nq: int, nk: int, d: int, causal: bool, ours_ms: float, sdpa_ms: float,
              masked: bool = False) -> TunedClass:  # fmt: skip
    """A workload-table class: the faster of the two measured paths wins, the other is runner-up."""
    ours, sdpa = Choice("ours", ms=ours_ms), Choice("sdpa", ms=sdpa_ms)
    win, other = (ours, sdpa) if ours_ms <= sdpa_ms else (sdpa, ours)
    return TunedClass(ShapeClass(d, nq, nk, b * h, causal, masked), win, sdpa_ms, other, source=PERF)


def _crossover(bh: int, n: int, d: int, causal: bool, winner: Choice, source: str = PATCH) -> TunedClass:
    """A patch sweep's point (q_len = kv_len): the winner only, ratios cited in ``source``."""
    return TunedClass(ShapeClass(d, n, n, bh, causal), winner, source=source)


_HOPPER: list[TunedClass] = [
    # docs/performance.md's workload classes (ours ms, SDPA ms as the table gives them)
    _measured(1, 40, 32760, 512, 128, False, 0.6495, 0.6650),  # cross-attention to text, 1.02x
    _measured(2, 10, 4096, 77, 64, False, 0.0243, 0.0184),  # SDXL cross-attention, 0.76x
    _measured(2, 8, 4096, 4096, 40, False, 0.1568, 0.1765),  # SD1.5 head dim 40, 1.13x
    _measured(2, 8, 256, 256, 160, False, 0.0223, 0.0138),  # SD1.5 head dim 160, 0.62x
    _measured(1, 16, 1024, 1024, 64, False, 0.0236, 0.0182),  # small, 0.77x
    _measured(2, 32, 1024, 1024, 128, False, 0.1052, 0.0652),  # short, 0.62x
    _measured(1, 16, 4096, 4096, 64, False, 0.1614, 0.1551),  # medium, 0.96x
    _measured(2, 32, 2048, 2048, 128, False, 0.2700, 0.2367),  # medium, 0.88x
    _measured(1, 32, 4096, 4096, 80, True, 0.2537, 0.2657),  # LLM prefill head dim 80, 1.05x
    _measured(1, 32, 4096, 4096, 96, True, 0.2611, 0.2726),  # LLM prefill head dim 96, 1.04x
    _measured(2, 32, 4096, 4096, 128, False, 0.8055, 0.9435),  # long, 1.17x
    _measured(2, 32, 4096, 4096, 128, True, 0.5260, 0.5541),  # long causal, 1.05x
    _measured(1, 32, 16384, 16384, 128, False, 5.3141, 7.5793),  # long 16K, 1.43x
    _measured(1, 32, 16384, 16384, 128, True, 2.8999, 4.2373),  # long 16K causal, 1.46x
    _measured(4, 32, 8192, 8192, 64, False, 3.9336, 5.0247),  # long head dim 64, 1.28x
    _measured(1, 40, 32760, 32760, 128, False, 25.6570, 38.3578),  # Wan 14B 480p, 1.50x
    _measured(1, 16, 8192, 8192, 256, False, 1.3683, 1.7514),  # head dim 256, 1.28x
    _measured(2, 24, 4096, 512, 128, False, 0.1206, 0.1636, masked=True),  # key-padding mask, 1.36x
    # the patch's crossover sweeps where the workload table has no class
    _crossover(16, 3072, 40, False, SDPA),  # 0.81x at 3072 (4096: the workload class above)
    _crossover(16, 4096, 40, True, SDPA),  # causal 0.86-0.94x at 4096
    _crossover(16, 6144, 64, False, SDPA),  # head dims 41-64: 0.93-1.04x at 6144
    _crossover(16, 6144, 64, True, SDPA),  # causal 0.93-0.94x at 6144
    _crossover(16, 8192, 64, True, OURS),  # 1.05-1.20x at 8192
    _crossover(16, 3072, 128, False, SDPA),  # head dims 65-128: 0.80-1.01x at 3072
    _crossover(16, 256, 128, False, SDPA),  # the row's "every length below 4096" for short self-attention
    _crossover(16, 3072, 128, True, SDPA),
    _crossover(16, 5120, 128, True, OURS),  # causal 1.08-1.19x at 5120
    _crossover(16, 2048, 96, True, SDPA),  # the 65-128 row for split head dims 65-96 (their own key)
    _crossover(16, 2048, 256, False, SDPA),  # head dims 129-256: 0.43-0.82x at 2048
    _crossover(16, 2048, 256, True, SDPA),
    _crossover(16, 4096, 256, False, OURS),  # 1.06-1.14x at 4096
    _crossover(16, 4096, 256, True, OURS),
    _crossover(16, 2048, 192, False, SDPA),  # the 129-256 row for split head dims 129-192
    _crossover(16, 4096, 192, False, OURS),
    _crossover(16, 2048, 192, True, SDPA),
    _crossover(16, 4096, 192, True, OURS),
    # B·H below 16 (run 28, sustained): 0.35-0.80x at head dim 128, 4096 tokens; 0.55-0.97x at
    # head dim 64, 8192 tokens, B·H 1 and 4 (B·H 8 ran 1.05x)
    _crossover(1, 4096, 128, False, SDPA, SMALL_BH),
    _crossover(4, 4096, 128, False, SDPA, SMALL_BH),
    _crossover(8, 4096, 128, False, SDPA, SMALL_BH),
    _crossover(1, 8192, 64, False, SDPA, SMALL_BH),
    _crossover(4, 8192, 64, False, SDPA, SMALL_BH),
    _crossover(8, 8192, 64, False, OURS, SMALL_BH),
]

_SHIPPED = Fingerprint(
    gpu="shipped", arch="*", driver="", runtime="", torch="", triton="", sagebuild="", table=""
)
# Users' exported records (``sagebuild tune --export``) merged by ``scripts/merge_tuning_records.py``:
# one file per family, every class citing the record it came from.
CONTRIBUTED_GLOB = "tuned-*.json"


def contributed(folder: Optional[Path] = None) -> dict[str, TuningRecord]:
    """The merged contributions, by family (the file name's part after ``tuned-``), from the
    package's data folder (or ``folder``)."""
    from importlib import resources

    from sagebuild.tuning.record import read

    base = Path(folder) if folder is not None else Path(str(resources.files("sagebuild.data")))
    return {p.stem.removeprefix("tuned-"): read(p) for p in sorted(base.glob(CONTRIBUTED_GLOB))}


def _by_family() -> dict[str, TuningRecord]:
    """Hopper's measured classes and the contributions, a contribution replacing a class of the
    same shape."""
    out = {"Hopper": TuningRecord(_SHIPPED, list(_HOPPER), created="shipped")}
    for family, rec in contributed().items():
        merged = out.setdefault(family, TuningRecord(_SHIPPED, [], created="shipped"))
        for c in rec.classes:
            merged.put(c)
    return out


_BY_FAMILY: dict[str, TuningRecord] = _by_family()


def record_for(arch: str) -> Optional[TuningRecord]:
    """The shipped classes of an arch's family, or None (a family nobody measured)."""
    from sagebuild.attention.plan import family_of

    try:
        return _BY_FAMILY.get(family_of(arch))
    except Exception:  # an arch the arch table does not know: nothing shipped for it
        return None


def families() -> list[str]:
    """The families with shipped classes (doctor: a family without them is worth tuning)."""
    return sorted(_BY_FAMILY)
