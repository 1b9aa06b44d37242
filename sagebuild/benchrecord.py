"""The bench's result record in words: the names and phrasings that the bench (which writes the
record) and the report (which renders it) share, so that neither imports the other.

Pure data and string formatting: no torch, nothing from ``sagebuild.bench``.
"""

from __future__ import annotations

from typing import Any, Optional

AUTO = "sageattn"  # the auto-dispatch entry point (a bench provider, a verified variant)
AUTO_LABEL = "sageattn (dispatched)"  # how tables name it: the call a user makes, whatever it runs
SDPA = "sdpa"
# gate metric -> the row's speed-up field; "cold": L2 flushed before each call, "sustained": the
# GPU at its power limit (``--sustain``), where a long job runs
GATE_METRICS = {"cold": "speedup", "sustained": "sustained_speedup"}


def sequence_pairs(varlen: tuple[int, ...], varlen_keys: Optional[tuple[int, ...]]) -> list[tuple[int, int]]:
    """Packed sequences' (queries, keys) from ``--varlen``'s lengths: each sequence's own keys
    when given, else as many keys as queries."""
    return list(zip(varlen, varlen_keys or varlen))


def packed_lengths(varlen: tuple[int, ...], varlen_keys: Optional[tuple[int, ...]]) -> str:
    """Packed sequences as ``--varlen`` takes them, joined by ``+``: ``4096:137+4096:512``."""
    return "+".join(str(m) if m == mk else f"{m}:{mk}" for m, mk in sequence_pairs(varlen, varlen_keys))


def describe(config: dict[str, Any]) -> str:
    """A bench config (``BenchConfig`` as a dict) in words for tables and reports:
    ``1×16×N×64 float16 HND, causal, 77 keys, 8 K/V heads`` (N: each row's seq)."""
    c = config
    if c.get("varlen"):
        lens = packed_lengths(c["varlen"], c.get("varlen_keys"))
        parts = [f"packed sequences {lens} (N: their total), H {c['heads']}, D {c['head_dim']} {c['dtype']}"]
    else:
        parts = [f"B×H×N×D {c['batch']}×{c['heads']}×N×{c['head_dim']} {c['dtype']} {c['layout']}"]
    parts += ["causal"] if c["causal"] else []
    parts += [f"{c['kv_seq']} keys"] if c.get("kv_seq") else []
    parts += [f"{c['kv_heads']} K/V head" + "s" * (c["kv_heads"] > 1)] if c.get("kv_heads") else []
    return ", ".join(parts)


def provider_notes(bench: dict[str, Any]) -> list[str]:
    """A line per peer (what it is and, if it did not run everywhere, why) and per provider of ours
    that did not run somewhere: a peer that is not installed or refuses the shape is listed with its
    reason, never an error."""
    lines = []
    n_seq = len(bench["config"]["seq"])
    for p in bench.get("providers") or []:
        reasons = p.get("reasons") or {}
        if not reasons and p["kind"] != "peer":
            continue
        head = p["label"] if p["label"] == p["name"] else f"{p['name']} ({p['label']})"
        distinct = set(reasons.values())
        if not reasons:
            lines.append(f"{head}: {p['what']}")
        elif len(distinct) == 1 and len(reasons) == n_seq:
            lines.append(f"{head}: not run: {distinct.pop()}")
        else:
            lines += [f"{head}: not run at seq={n}: {why}" for n, why in reasons.items()]
    return lines
