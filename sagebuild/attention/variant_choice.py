"""Which P·V variant ``sageattn`` picked against which one a benchmark found fastest: the
dispatch table is decided without every GPU at hand, so ``sagebuild bench`` says whether it won.
"""

from __future__ import annotations

from typing import Any, Optional

VARIANTS = ("qk_int8_pv_fp16", "qk_int8_pv_fp8")
AUTO = "sageattn"  # the bench's provider name of the auto-dispatch call


def compare_variants(rows: list[Any], picked: Optional[str] = None) -> str:
    """One line per sequence length: "seq=N: dispatch picks X; fastest: Y (times)".

    ``rows``: the bench's rows (``BenchRow`` or its ``to_dict()``); the variants' whole-call rows
    are compared by their median time. What the dispatch picks is the variant the ``sageattn``
    row's launch plan ran at that length, else ``picked``. A length where fewer than two variants
    have a time says so."""
    rows = [r if isinstance(r, dict) else r.to_dict() for r in rows]
    lines = []
    for seq in sorted({r["seq"] for r in rows}):
        here = [r for r in rows if r["seq"] == seq]
        timed = {
            r["provider"]: r["timing"]["median_ms"]
            for r in here
            if r["kind"] == "whole_call" and r["provider"] in VARIANTS and r["timing"]
        }
        plan = next((r["plan"] for r in here if r["provider"] == AUTO), None)
        choice = (plan or {}).get("variant") or picked or "unknown"
        if len(timed) < 2:
            failed = [v for v in VARIANTS if v not in timed]
            lines.append(
                f"seq={seq}: dispatch picks {choice}; fastest: not compared "
                f"({', '.join(failed)} did not run or has no time)"
            )
            continue
        fastest = min(timed, key=lambda v: timed[v])
        times = ", ".join(f"{v} {ms:.3f} ms" for v, ms in sorted(timed.items(), key=lambda kv: kv[1]))
        if choice not in timed:
            verdict = "the pick was not timed"
        elif fastest == choice:
            verdict = "the pick won"
        else:
            verdict = f"{fastest} is {timed[choice] / timed[fastest]:.2f}x faster than the pick"
        lines.append(f"seq={seq}: dispatch picks {choice}; fastest: {fastest} ({times}; {verdict})")
    return "\n".join(lines)
