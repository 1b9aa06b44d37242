"""The bench's gate: accuracy bounds always, and on a GPU sageattn's speed-up against the profile's
record for this arch (a regression check) and any explicit minimum. Peers are reported, never gated.

Also the note saying whether the dispatch's pick was the fastest variant (``compare_variants``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable, Optional

from sagebuild.benchrecord import AUTO, GATE_METRICS, packed_lengths

ROUTED = "SDPA (routed)"  # compare_variants' name for sageattn's pick where it routed the call to SDPA

if TYPE_CHECKING:
    from sagebuild.bench.config import BenchConfig
    from sagebuild.bench.result import BenchRow
    from sagebuild.bench.timing import Timing


def packed_key(
    varlen: tuple[int, ...], varlen_keys: Optional[tuple[int, ...]], heads: int, head_dim: int, causal: bool
) -> str:
    """A packed call's name: ``packed 4096:137+4096:512 H24 D128`` (`` causal`` appended)."""
    causal_part = " causal" if causal else ""
    return f"packed {packed_lengths(varlen, varlen_keys)} H{heads} D{head_dim}{causal_part}"


def gate_key(cfg: BenchConfig) -> Callable[[int], str]:
    """The key a row's speed-up is gated under, by its seq: ``profiles.shape_key`` (a
    ``bench.expected`` record) for dense shapes. Packed sequences get ``packed_key``, which no
    record can match: a dense record of the same total tokens measured another call."""
    from sagebuild.profiles import shape_key

    if cfg.varlen:
        key = packed_key(cfg.varlen, cfg.varlen_keys, cfg.heads, cfg.head_dim, cfg.causal)
        return lambda _n: key
    return functools.partial(
        shape_key, cfg.batch, cfg.heads, head_dim=cfg.head_dim, causal=cfg.causal, kv_seq=cfg.kv_seq,
        kv_heads=cfg.kv_heads,
    )  # fmt: skip


def ratio(base: Optional[Timing], timing: Timing, field: str, kind: str) -> Optional[float]:
    """SDPA's time / a provider's in one ``Timing`` field; None for SDPA itself or if either is unmeasured."""
    ours, theirs = getattr(timing, field), getattr(base, field, None)
    return theirs / ours if kind != "baseline" and ours and theirs else None


def gate(
    rows: list[BenchRow],
    min_speedup: float,
    speed_gate: bool,
    metric: str = "cold",
    expected: Optional[dict[str, float]] = None,
    regression: float = 0.85,
    shape_of: Callable[[int], str] = str,
) -> list[str]:
    """Every threshold a row of ours misses: accuracy always; with ``speed_gate`` sageattn's ``metric``
    speed-up below ``regression`` × the ``expected`` one for ``shape_of(seq)``, or below a positive
    ``min_speedup``. Messages start with the provider and name ``seq=N`` (JUnit keys on that)."""
    out = []
    what = "speed-up" if metric == "cold" else f"{metric} speed-up"
    for r in rows:
        if r.kind in ("baseline", "peer"):
            continue
        where = f"seq={r.seq}" + (" kernel-only" if r.kind == "kernel_only" else "")
        if r.error:
            out.append(f"{r.provider} failed at {where}: {r.error.splitlines()[0][:200]}")
            continue
        a, b = r.accuracy, r.bounds
        if a is not None and not a["finite"]:
            out.append(
                f"{r.provider} non-finite output at {where} ({a['nan_count']} NaN, {a['inf_count']} Inf)"
            )
        elif a is not None and b is not None:
            if a["cos"] < b["cos_min"]:
                out.append(f"{r.provider} cosine {a['cos']:.6f} < {b['cos_min']} at {where}")
            if a["rel_l1"] > b["rel_l1_max"]:
                out.append(f"{r.provider} relative L1 {a['rel_l1']:.5f} > {b['rel_l1_max']} at {where}")
        speed = getattr(r, GATE_METRICS[metric])
        if not (speed_gate and r.provider == AUTO and r.kind == "whole_call" and speed is not None):
            continue
        exp = (expected or {}).get(shape_of(r.seq))
        if exp is not None:
            r.expected_speedup, r.vs_expected = exp, speed / exp
            if speed < regression * exp:
                out.append(
                    f"{r.provider} {what} {speed:.3f}× at {where} is {speed / exp:.2f} of the "
                    f"expected {exp:.3f}× (regression gate: ≥ {regression:g})"
                )
        if min_speedup > 0 and speed < min_speedup:
            out.append(f"{r.provider} {what} {speed:.3f}× < {min_speedup:g}× at {where}")
    return out


def compare_variants(rows: list[Any], picked: Optional[str] = None) -> str:
    """One line per sequence length, "seq=N: dispatch picks X; fastest: Y (times)": the dispatch
    table is decided without every GPU at hand, so the bench says whether its pick won (issue 38).
    ``rows``: ``BenchRow``s or their ``to_dict()``, compared by the variants' whole-call medians;
    the pick is what the ``sageattn`` row's launch plan ran at that length, else ``picked``."""
    from sagebuild.profiles import VARIANTS

    rows = [r if isinstance(r, dict) else r.to_dict() for r in rows]
    lines = []
    for seq in sorted({r["seq"] for r in rows}):
        here = [r for r in rows if r["seq"] == seq]
        timed = {
            r["provider"]: r["timing"]["median_ms"]
            for r in here
            if r["kind"] == "whole_call" and r["provider"] in VARIANTS and r["timing"]
        }
        choice = _pick(here, picked, timed)
        if len(timed) < 2:
            failed = ", ".join(v for v in VARIANTS if v not in timed)
            lines.append(
                f"seq={seq}: dispatch picks {choice}; fastest: not compared "
                f"({failed} did not run or has no time)"
            )
            continue
        fastest = min(timed, key=timed.get)
        times = ", ".join(f"{v} {ms:.3f} ms" for v, ms in sorted(timed.items(), key=lambda kv: kv[1]))
        if choice not in timed:
            verdict = "the pick was not timed"
        elif fastest == choice:
            verdict = "the pick won"
        else:
            verdict = f"{fastest} is {timed[choice] / timed[fastest]:.2f}x faster than the pick"
        lines.append(f"seq={seq}: dispatch picks {choice}; fastest: {fastest} ({times}; {verdict})")
    return "\n".join(lines)


def _pick(here: list[dict[str, Any]], picked: Optional[str], timed: dict[str, float]) -> str:
    """What ``sageattn`` ran at this length: its plan's variant, or SDPA where it routed the call
    there (then SDPA's time joins ``timed``, so the line says whether routing won)."""
    plan = next((r["plan"] for r in here if r["provider"] == AUTO), None) or {}
    if not plan.get("sdpa"):
        return plan.get("variant") or picked or "unknown"
    base = next((r["timing"] for r in here if r["kind"] == "baseline" and r["timing"]), None)
    if base:
        timed[ROUTED] = base["median_ms"]
    return ROUTED


def expectation_for(profile: Any, arch: Optional[str], gpu: bool) -> tuple[dict[str, float], dict[str, Any]]:
    """The profile's expected speed-ups for this arch and the report's account of them."""
    exp = profile.bench.expected.get(arch) if arch else None
    doc: dict[str, Any] = {
        "arch": arch,
        "measured": exp.measured if exp else None,
        "regression": profile.bench.regression,
        "applied": bool(gpu and exp),
    }
    if not gpu:
        doc["note"] = "CPU timings: no speed gate"
    elif exp is None:
        doc["note"] = (
            f"no expected speed-up is recorded for {arch} in profile {profile.name}: "
            "no regression gate, only accuracy and any explicit minimum speed-up (docs/kernels.md says "
            "how to report a measurement)"
        )
    else:
        doc["note"] = (
            f"regression gate: sageattn's speed-up ≥ {profile.bench.regression:g} of the recorded one "
            f"({exp.measured}); shapes without a record are not regression-gated"
        )
    return (exp.speedup if exp else {}), doc
