"""One ``sagebuild tune`` run end to end: this device's fingerprint, the record it extends, the
tuner, and each finished class written to the record at once (atomically), so an interrupted run
keeps what it finished. ``accept --tune`` runs the same."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from sagebuild.tuning import record
from sagebuild.tuning.classes import Workload
from sagebuild.tuning.tuner import (
    SDPA,
    ClassResult,
    Inspector,
    Measured,
    Timer,
    Tuner,
    TuneRun,
    resource_problem,
)

# Default budgets (seconds, compiles included) per preset; other class lists get BASE + PER_CLASS
# per class. On an H100 mission takes about a minute and diffusion about three.
PRESET_BUDGET_S = {"mission": 60.0, "diffusion": 180.0, "llm": 120.0, "all": 360.0}
BASE_BUDGET_S, PER_CLASS_BUDGET_S, MAX_DEFAULT_BUDGET_S = 15.0, 15.0, 600.0


def default_budget(preset: Optional[str], n_classes: int) -> float:
    if preset in PRESET_BUDGET_S:
        return PRESET_BUDGET_S[preset]
    return min(MAX_DEFAULT_BUDGET_S, BASE_BUDGET_S + PER_CLASS_BUDGET_S * n_classes)


def bounds_of(profile: Any) -> dict[str, dict[str, float]]:
    """A profile's accuracy bounds per kernel variant, as the tuner checks candidates against them."""
    return {name: {"cos_min": b.cos_min, "rel_l1_max": b.rel_l1_max} for name, b in profile.accuracy.items()}


def fingerprint(device: Any) -> record.Fingerprint:
    """The device's fingerprint; Triton's CPU interpreter gets one of its own (tests)."""
    if getattr(device, "type", None) == "cuda":
        return record.Fingerprint.current(device)
    import torch
    import triton

    from sagebuild._version import __version__
    from sagebuild.kernels.triton import configs

    return record.Fingerprint(
        gpu="Triton CPU interpreter",
        arch="interpreter",
        driver="",
        runtime="cpu",
        torch=str(torch.__version__),
        triton=triton.__version__,
        sagebuild=__version__,
        table=configs.CONFIG_TABLE_VERSION,
    )


def _choice(m: Optional[Measured]) -> Optional[record.Choice]:
    if m is None:
        return None
    if m.variant == SDPA:
        return record.Choice("sdpa", ms=m.ms)
    return record.Choice("ours", m.variant, m.config, m.ms)


def to_tuned(result: ClassResult) -> Optional[record.TunedClass]:
    """A finished class in the record's type (None: nothing ran, so nothing to replay)."""
    if result.winner is None:
        return None
    c = result.cls
    shape = record.ShapeClass(c.head_dim, c.seq, c.keys, c.batch * c.heads, c.causal)
    failed = tuple(
        record.Failure(p.variant, p.config or "", p.reason or "")
        for p in result.paths
        if p.status == "failed"
    )
    sdpa_ms = result.sdpa.ms if result.sdpa else None
    return record.TunedClass(shape, _choice(result.winner), sdpa_ms, _choice(result.runner_up), failed)


def _start(path: Path, fp: record.Fingerprint) -> tuple[record.TuningRecord, Optional[str]]:
    """The record this run extends: the file's when tuned on this very setup, else a new one
    (and a note saying what the old one was tuned under)."""
    if not path.exists():
        return record.TuningRecord(fp), None
    try:
        old = record.read(path)
    except record.TuningRecordError as exc:
        return record.TuningRecord(fp), f"replacing {path}: {exc.message}"
    diff = old.fingerprint.differences(fp)
    if diff:
        return record.TuningRecord(fp), f"replacing {path}, tuned under another setup ({'; '.join(diff)})"
    return old, None


@dataclass
class Outcome:
    run: TuneRun
    path: Path
    note: Optional[str]
    fingerprint: record.Fingerprint

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "record": str(self.path),
            "note": self.note,
            "fingerprint": asdict(self.fingerprint),
            **self.run.to_dict(),
        }


def tune(
    workloads: list[Workload],
    *,
    device: Any,
    budget_s: float,
    bounds: dict[str, dict[str, float]],
    path: Optional[Path] = None,
    timer: Optional[Timer] = None,
    inspect: Inspector = resource_problem,
    variants: tuple[str, ...] = (),
    progress: Callable[[str], None] = lambda _msg: None,
    on_class: Callable[[ClassResult], None] = lambda _r: None,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Tune ``workloads`` on ``device`` and write each finished class to the record at ``path``
    (default: this arch's file in the cache dir). While tuning, this process runs the shipped table
    alone (no tuned record: the candidates are compared with what ships); afterwards it replays the
    new record."""
    fp = fingerprint(device)
    target = Path(path) if path is not None else record.record_path(fp.arch)
    rec, note = _start(target, fp)

    def finished(result: ClassResult) -> None:
        tuned = to_tuned(result)
        if tuned is not None:
            rec.put(tuned)
            record.save(rec, target)
        on_class(result)

    tuner = Tuner(device, bounds, budget_s, timer, inspect, variants, clock=clock, progress=progress)
    record.install(fp.arch, None)  # the shipped table alone while measuring
    try:
        run = tuner.run(workloads, finished)
    finally:
        record.uninstall(fp.arch)
    return Outcome(run, target, note, fp)


def _label(m: Optional[Measured]) -> Optional[str]:
    return None if m is None else ("sdpa" if m.variant == SDPA else f"ours {m.label}")


def comparison(outcome: Outcome) -> dict[str, Any]:
    """The run as ``accept --tune``'s report shows it: per class, the shipped table's pick and time
    against the tuned winner's, beside SDPA's."""
    run = outcome.run
    rows = [
        {
            "class": r.cls.key,
            "label": r.cls.label,
            "shipped": _label(r.shipped),
            "shipped_ms": r.shipped.ms if r.shipped else None,
            "tuned": _label(r.winner),
            "tuned_ms": r.winner.ms if r.winner else None,
            "sdpa_ms": r.sdpa.ms if r.sdpa else None,
            "failed": sum(p.status == "failed" for p in r.paths),
        }
        for r in run.results
    ]
    return {
        "device_name": run.device_name,
        "arch": run.arch,
        "record": str(outcome.path),
        "note": outcome.note,
        "seconds": round(run.seconds, 2),
        "budget_s": run.budget_s,
        "interrupted": run.interrupted,
        "skipped": [{"class": c.key, "why": why} for c, why in run.skipped],
        "classes": rows,
    }
