"""What one bench run measures: the profile's ``profiles.Bench`` with the command line's additions.

``BenchConfig`` extends ``profiles.Bench`` rather than declaring its fields again, so a field the
profile schema gains reaches the bench by itself. The parsers here turn the command line's text
into its fields and refuse impossible combinations with a usage error (exit 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Optional

from sagebuild.benchrecord import GATE_METRICS, sequence_pairs
from sagebuild.errors import SagebuildError
from sagebuild.profiles import RUN_LIMITS, Bench, check_run_limits

LAYOUTS = ("HND", "NHD")
DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class BenchConfig(Bench):
    """The profile's bench section plus what only a run chooses (layout, seed, rounds, peers)."""

    layout: str = "HND"
    seed: int = 0
    rounds: int = 5  # the timed calls' rounds, each timing every provider (``timing.time_interleaved``)
    # seconds of back-to-back calls per provider and round (0: off): the GPU at its power limit
    sustain_s: float = 0.0
    gate_on: str = "cold"  # the speed-up the gate compares (``GATE_METRICS``)
    # cross-attention / GQA: keys per call (None: as many as queries) and K/V heads (None: heads)
    kv_seq: Optional[int] = None
    kv_heads: Optional[int] = None
    # packed sequences (``sageattn_varlen``): their query lengths (``seq`` is then their total)
    # and key lengths (None: the same, self-attention)
    varlen: Optional[tuple[int, ...]] = None
    varlen_keys: Optional[tuple[int, ...]] = None
    against: tuple[str, ...] = ()  # peers timed beside SDPA and ours (``providers.PEERS``' names)

    def segments(self) -> list[tuple[int, int]]:
        """The packed sequences' (queries, keys); empty for a dense bench."""
        return sequence_pairs(self.varlen, self.varlen_keys) if self.varlen else []

    def keys(self, seq: int) -> int:
        """Keys per call at ``seq`` queries: ``kv_seq`` (cross-attention), the packed sequences'
        total keys, or ``seq``."""
        return self.kv_seq or sum(mk for _, mk in self.segments()) or seq

    def kv_shape(self, n: int) -> tuple[int, int, int, int]:
        """K's and V's B,H,N,D at ``n`` queries (packed: N is the keys' total)."""
        return (self.batch, self.kv_heads or self.heads, self.keys(n), self.head_dim)

    def record(self) -> dict[str, Any]:
        """The config as the report's JSON holds it (tuples as arrays; the profile's expected
        speed-ups are the gate's, reported there)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "expected"}
        for name in ("seq", "varlen", "varlen_keys", "against"):
            d[name] = list(d[name]) if d[name] else ([] if name == "against" else None)
        return d


def shape_config(batch: int, heads: int, seq: int, head_dim: int) -> BenchConfig:
    """A config of one B,H,N,D call (verify's smoke test: nothing timed)."""
    return BenchConfig(batch, heads, (seq,), head_dim, "float16", False, 0.0, warmup=0, reps=0)


def parse_int_list(text: str, what: str) -> tuple[int, ...]:
    """``"1024,4096"`` → (1024, 4096); a clear usage error for anything else."""
    try:
        vals = tuple(int(x) for x in str(text).replace(" ", "").split(",") if x)
    except ValueError:
        vals = ()
    if not vals or any(v <= 0 for v in vals):
        raise SagebuildError(
            f"--{what} {text!r}: expected positive integers separated by commas",
            fix=f"e.g. --{what} 1024,4096,16384",
        )
    return vals


def parse_varlen(text: str) -> tuple[tuple[int, ...], Optional[tuple[int, ...]]]:
    """``"4680,3120"`` → the packed sequences' lengths and None; ``"4096:137,4096:512"`` → their
    query and key lengths (cross-attention to padded text keys); a clear usage error otherwise."""
    pairs = []
    for item in str(text).replace(" ", "").split(","):
        q, sep, k = item.partition(":")
        try:
            pairs.append((int(q), int(k) if sep else int(q)))
        except ValueError:
            pairs = []
            break
    if not pairs or min(min(p) for p in pairs) < 1:
        raise SagebuildError(
            f"--varlen {text!r}: expected positive lengths separated by commas, each N or N:Nk "
            "(queries:keys)",
            fix="e.g. --varlen 4680,3120, or --varlen 4096:137,4096:512 for padded text keys",
        )
    qs, ks = tuple(q for q, _ in pairs), tuple(k for _, k in pairs)
    return qs, (ks if ks != qs else None)


def parse_against(text: str) -> tuple[str, ...]:
    """``--against``'s ``sdpa,ck,fa3`` or ``all`` → the peers' names (SDPA, the baseline, is always
    timed); a usage error naming the known ones for anything else."""
    from sagebuild.bench.peers import PEERS

    names = [x for x in str(text).replace(" ", "").lower().split(",") if x]
    if names == ["all"]:
        return tuple(PEERS)
    unknown = [n for n in names if n not in PEERS and n != "sdpa"]
    if unknown or not names:
        raise SagebuildError(
            f"--against {text!r}: unknown provider {', '.join(unknown) or '(none given)'}",
            fix=f"pass a comma-separated list of sdpa, {', '.join(PEERS)}, or all",
        )
    return tuple(dict.fromkeys(n for n in names if n != "sdpa"))


def check_inputs(dtype: str, layout: str) -> None:
    """The kernels' input dtypes and layouts, for bench's and verify's options (usage error, exit 2)."""
    if dtype not in DTYPES:
        raise SagebuildError(
            f"--dtype {dtype}: the kernels take float16 or bfloat16",
            fix="pass --dtype float16 or --dtype bfloat16 (float32 inputs are the NaN trap)",
        )
    if layout not in LAYOUTS:
        raise SagebuildError(f"--layout {layout}: expected HND or NHD", fix="pass --layout HND")


def config_from_profile(profile: Any, **overrides: Any) -> BenchConfig:
    """The profile's bench section with the command line's overrides (None = keep the profile's)."""
    cfg = BenchConfig(**{f.name: getattr(profile.bench, f.name) for f in fields(Bench)})
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    check_inputs(cfg.dtype, cfg.layout)
    text = cfg.against if isinstance(cfg.against, str) else ",".join(cfg.against)
    cfg = replace(cfg, against=parse_against(text or "sdpa"))
    if cfg.varlen:
        cfg = _packed(cfg, overrides)
    _check_sizes(cfg)
    return cfg


def _packed(cfg: BenchConfig, overrides: dict[str, Any]) -> BenchConfig:
    """A packed-sequences config checked and its ``seq`` set to their total (one batch)."""
    assert cfg.varlen
    if overrides.get("seq") or cfg.kv_seq or overrides.get("batch") not in (None, 1):
        raise SagebuildError(
            "--varlen gives the packed sequences' lengths (one batch, N or N:Nk each): it takes no "
            "--seq, --kv-seq or --batch",
            fix="pass the lengths alone, e.g. --varlen 4680,3120 --heads 12 --head-dim 128",
        )
    if cfg.varlen_keys and len(cfg.varlen_keys) != len(cfg.varlen):
        raise SagebuildError(
            f"{len(cfg.varlen_keys)} key lengths for {len(cfg.varlen)} packed sequences: each "
            "sequence takes one",
            fix="pass N:Nk per sequence, e.g. --varlen 4096:137,4096:512",
        )
    if cfg.varlen_keys and cfg.causal and cfg.varlen_keys != cfg.varlen:
        raise SagebuildError(
            "--varlen with N:Nk lengths is cross-attention: causal packed calls take each "
            "sequence's keys as its queries",
            fix="drop --causal, or pass the lengths alone",
        )
    return replace(cfg, batch=1, seq=(sum(cfg.varlen),))


def _check_sizes(cfg: BenchConfig) -> None:
    """Sizes, run-time bounds, GQA groups, causal key counts and the gate metric (usage errors)."""
    for option, value in (("--sustain", cfg.sustain_s), ("--min-speedup", cfg.min_speedup)):
        if not math.isfinite(value):
            raise SagebuildError(f"{option} {value}: expected a finite number", fix=f"e.g. {option} 1")
    check_run_limits({name: getattr(cfg, name) for name in RUN_LIMITS})
    sizes = [cfg.batch, cfg.heads, cfg.head_dim, cfg.reps, cfg.rounds]
    sizes += [x for x in (cfg.kv_seq, cfg.kv_heads) if x is not None]
    if min(sizes) < 1 or min(cfg.warmup, cfg.sustain_s) < 0:
        raise SagebuildError(
            "batch, heads, head-dim, kv-seq, kv-heads, reps and rounds must be ≥ 1 (warmup and sustain ≥ 0)",
            fix="e.g. --batch 1 --heads 16 --head-dim 64",
        )
    if cfg.kv_heads and cfg.heads % cfg.kv_heads:
        raise SagebuildError(
            f"--kv-heads {cfg.kv_heads} does not divide --heads {cfg.heads}: each K/V head serves a whole "
            "group of query heads (GQA)",
            fix=f"pass a divisor of {cfg.heads} (1: MQA)",
        )
    if cfg.causal and cfg.kv_seq and cfg.kv_seq < max(cfg.seq):
        raise SagebuildError(
            f"--causal with --kv-seq {cfg.kv_seq} below --seq {max(cfg.seq)}: causal attention is "
            "bottom-right aligned, so the first queries would see no key (SDPA returns NaN there)",
            fix=f"pass --kv-seq {max(cfg.seq)} or more, or drop --causal",
        )
    if cfg.gate_on not in GATE_METRICS:
        raise SagebuildError(
            f"--gate-on {cfg.gate_on}: expected one of {', '.join(GATE_METRICS)}",
            fix="pass --gate-on cold (the default) or --gate-on sustained --sustain 1",
        )
    if cfg.gate_on == "sustained" and cfg.sustain_s <= 0:
        raise SagebuildError(
            "--gate-on sustained gates on the sustained speed-up, which is measured only with --sustain",
            fix="add --sustain 1 (seconds of back-to-back calls per provider and round)",
        )
