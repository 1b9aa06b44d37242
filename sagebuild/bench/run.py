"""``run_bench``: every provider at every length of a config, timed together, with the gate applied.

Per length: seeded inputs and the float32 reference; each provider that can run the call makes
its first call (its accuracy; a failure is a row with its error); then all are timed together in
interleaved rounds (``timing.time_interleaved``). A shape below the regression floor is measured
once more, all providers anew, and the second measurement is the one reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from sagebuild.bench.config import BenchConfig
from sagebuild.bench.gate import compare_variants, expectation_for, gate, gate_key, ratio
from sagebuild.bench.peers import peers
from sagebuild.bench.providers import Case, Provider, Sdpa, ours, packed_segments, unpack
from sagebuild.bench.result import BenchResult, BenchRow
from sagebuild.bench.timing import Timing, rounds_used, time_interleaved
from sagebuild.benchrecord import AUTO, SDPA

if TYPE_CHECKING:
    from sagebuild.bench.memory import Estimate


def attention_flops(
    batch: int, heads: int, seq: int, head_dim: int, causal: bool, kv_seq: Optional[int] = None
) -> float:
    """4·B·H·N_q·N_k·D (two matmuls of 2·N_q·N_k·D each) over the score pairs computed: half when
    causal self-attention, the bottom-right triangle's pairs when causal with other key counts."""
    nk = kv_seq or seq
    if not causal:
        pairs = float(seq * nk)
    elif nk == seq:
        pairs = seq * seq / 2
    else:  # query i sees keys [0, nk - seq + i]: from max(nk - seq + 1, 1) keys per row up to nk
        lo = max(nk - seq + 1, 1)
        pairs = (lo + nk) * (nk - lo + 1) / 2
    return 4.0 * batch * heads * pairs * head_dim


def random_qkv(
    shape: tuple[int, ...],
    layout: str,
    dtype: str,
    seed: int,
    device: Any,
    kv_shape: Optional[tuple[int, ...]] = None,
) -> tuple[Any, ...]:
    """Seeded Q of B,H,N,D ``shape`` and K, V of ``kv_shape`` (default: the same) in ``layout``:
    normal draws, cast to ``dtype``, moved."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = getattr(torch, dtype)

    def draw(b: int, h: int, n: int, d: int) -> Any:
        full = (b, n, h, d) if layout == "NHD" else (b, h, n, d)
        return torch.randn(full, generator=gen, dtype=torch.float32).to(dt).to(device)

    return draw(*shape), draw(*(kv_shape or shape)), draw(*(kv_shape or shape))


def make_case(cfg: BenchConfig, n: int, dev: Any) -> tuple[Case, Any, float]:
    """Length n's inputs (packed: [total, H, D]), their float32 reference and the FLOPs of one call."""
    from sagebuild.attention import reference

    q_shape, segments = (cfg.batch, cfg.heads, n, cfg.head_dim), cfg.segments()
    if segments:
        drawn = random_qkv(q_shape, "NHD", cfg.dtype, cfg.seed + n, dev, cfg.kv_shape(n))
        case = Case(n, *(x[0] for x in drawn), layout="NHD", causal=cfg.causal, segments=segments)
        segs = packed_segments(segments, case.q, case.k, case.v)
        ref = unpack([reference.exact_attention(*seg, is_causal=cfg.causal) for seg in segs])
        flops = sum(attention_flops(1, cfg.heads, m, cfg.head_dim, cfg.causal, mk) for m, mk in segments)
        return case, ref, flops
    q, k, v = random_qkv(q_shape, cfg.layout, cfg.dtype, cfg.seed + n, dev, cfg.kv_shape(n))
    ref = reference.exact_attention(q, k, v, tensor_layout=cfg.layout, is_causal=cfg.causal)
    flops = attention_flops(cfg.batch, cfg.heads, n, cfg.head_dim, cfg.causal, cfg.kv_seq)
    return Case(n, q, k, v, cfg.layout, cfg.causal), ref, flops


@dataclass
class Setting:
    """What the run's result says about where and how it timed."""

    gpu: bool
    arch: Optional[str]
    device_name: Optional[str]
    method: str
    note: str
    auto_variant: Optional[str] = None


def setting(cfg: BenchConfig, dev: Any) -> Setting:
    rounds = (  # how both methods time, after how each call is timed
        f"{cfg.warmup} warm-up calls, {cfg.reps} timed in {rounds_used(cfg.reps, cfg.rounds)} rounds that "
        "time every provider in turn, each round in another order; median"
    )
    if dev.type != "cuda":
        method = f"CPU wall clock (perf_counter) per call; {rounds}"
        method += "; --sustain ignored (it times a GPU at its power limit)" if cfg.sustain_s > 0 else ""
        note = (
            "CPU timings — not a GPU result. The golden model is a plain-torch emulation of the kernels' "
            "arithmetic; its accuracy is meaningful, its speed is not. No speed gate on CPU."
        )
        return Setting(False, None, None, method, note)
    import torch

    from sagebuild.attention import dispatch
    from sagebuild.kernels.triton import configs

    arch, auto_variant = dispatch.device_arch(dev), dispatch.variant_for_device(dev)
    method = (
        "CUDA/HIP events per call, L2 flushed before each and the GPU held busy while the host "
        f"issues it (device time); {rounds} and p20/p80; back-to-back: "
        "each round's calls in a row, warm, per call (includes the host's time where it exceeds "
        "the device's), median over rounds"
    )
    if cfg.sustain_s > 0:
        method += (
            f"; sustained: per call over the second half of {cfg.sustain_s:g} s of back-to-back "
            "calls per round (the GPU at its power limit), median over rounds"
        )
    note = (
        f"sageattn dispatches to {auto_variant} on {arch} by default (per-shape preferences: "
        "kernels/triton/configs.py); each row's plan names the kernel, launch config, K scale "
        f"block and config table ({configs.CONFIG_TABLE_VERSION}) it ran; kernel-only rows exclude "
        "the K/V quantization launches (Q is quantized inside the attention launch)"
    )
    return Setting(True, arch, f"{torch.cuda.get_device_name(dev)} ({arch})", method, note, auto_variant)


def first_calls(
    roster: list[Provider],
    case: Case,
    ref: Any,
    cfg: BenchConfig,
    dev: Any,
    refused: dict[str, dict[str, str]],
) -> tuple[list[BenchRow], list[tuple[BenchRow, Callable[[], Any]]]]:
    """Each provider's row at this length and its first call (its accuracy; a failure is its row's
    error); a provider that cannot run the call gets no row, its reason goes to ``refused``."""
    here, ready = [], []
    shape = case.shape()
    for p in roster:
        reason = p.available(shape, cfg.dtype, case.layout, case.causal, dev)
        if reason:
            refused[p.label or p.name][str(case.seq)] = reason
            continue
        row = BenchRow(case.seq, p.name, p.kind, bounds=p.bounds, label=p.label or p.name)
        here.append(row)
        try:
            built = p.build(case)
            row.plan, row.ran = built.plan, built.ran
            row.accuracy = p.accuracy(built.call(), ref)
            ready.append((row, built.call))
        except Exception as e:  # noqa: BLE001
            row.error = f"{type(e).__name__}: {e}"
    return here, ready


def measure(
    ready: list[tuple[BenchRow, Callable[[], Any]]], cfg: BenchConfig, dev: Any, floor: float
) -> tuple[list[Any], bool]:
    """The timings of the ready providers, interleaved; measured twice when sageattn's speed-up is
    below the regression ``floor`` on a GPU (a regression must reproduce). Also: whether it was."""
    field_ = "sustained_ms" if cfg.gate_on == "sustained" else "median_ms"
    for attempt in range(2):
        timings = time_interleaved(
            [fn for _, fn in ready], cfg.warmup, cfg.reps, cfg.rounds, dev, cfg.sustain_s
        )
        by = {(r.provider, r.kind): t for (r, _), t in zip(ready, timings) if isinstance(t, Timing)}
        base, auto = by.get((SDPA, "baseline")), by.get((AUTO, "whole_call"))
        speedup = ratio(base, auto, field_, "whole_call") if auto else None
        if attempt or dev.type != "cuda" or speedup is None or speedup >= floor:
            return timings, bool(attempt)
    raise AssertionError("unreachable")


def fill(ready: list[tuple[BenchRow, Callable[[], Any]]], timings: list[Any], flops: float) -> None:
    """Each timed row's timing, TFLOPS and speed-ups over SDPA (a provider stopped while timed: its error)."""
    base = next(
        (t for (r, _), t in zip(ready, timings) if r.kind == "baseline" and isinstance(t, Timing)), None
    )
    for (row, _), timing in zip(ready, timings):
        if isinstance(timing, Exception):
            row.accuracy, row.error = None, f"{type(timing).__name__}: {timing}"
            continue
        row.timing, row.tflops = timing, flops / (timing.median_ms * 1e-3) / 1e12
        row.speedup, row.sustained_speedup = (
            ratio(base, timing, f, row.kind) for f in ("median_ms", "sustained_ms")
        )


def run_bench(
    profile: Any,
    cfg: BenchConfig,
    device: str = "auto",
    progress: Optional[Callable[[str], None]] = None,
    fits: Optional[Estimate] = None,
) -> BenchResult:
    """Benchmark every provider at every length of ``cfg`` and apply the profile's gate; ``fits``:
    the caller's ``memory.check_fits(cfg, device)`` (its CPU rate measurement is not repeated)."""
    import torch

    from sagebuild.bench import memory

    # resolves the device; an absent GPU or a shape that will not fit is refused before allocating
    dev = torch.device((fits if fits is not None else memory.check_fits(cfg, device)).device)
    say = progress or (lambda _msg: None)
    where = setting(cfg, dev)
    sdpa = Sdpa()
    roster: list[Provider] = [sdpa, *ours(profile, dev, packed=bool(cfg.varlen)), *peers(cfg.against)]
    refused: dict[str, dict[str, str]] = {p.label or p.name: {} for p in roster}
    expected, expectation = expectation_for(profile, where.arch, where.gpu)
    shape_of, rows, remeasured = gate_key(cfg), [], []
    for n in cfg.seq:
        say(f"seq={n}: inputs, reference and each provider's first call")
        case, ref, flops = make_case(cfg, n, dev)
        here, ready = first_calls(roster, case, ref, cfg, dev, refused)
        say(f"seq={n}: timing {len(ready)} providers in {rounds_used(cfg.reps, cfg.rounds)} rounds")
        timings, again = measure(ready, cfg, dev, expected.get(shape_of(n), 0.0) * cfg.regression)
        remeasured += [n] if again else []
        fill(ready, timings, flops)
        rows += here
        del case, ref, here, ready, timings  # each length's buffers go before the next
    if remeasured:
        expectation["remeasured"] = remeasured
    failures = gate(
        rows, cfg.min_speedup, speed_gate=where.gpu, metric=cfg.gate_on, expected=expected,
        regression=cfg.regression, shape_of=shape_of,
    )  # fmt: skip
    note = where.note
    if where.gpu:  # the dispatch's pick against the fastest variant, per length (issue 38)
        note = f"{note}\n{compare_variants(rows, where.auto_variant)}"
    return BenchResult(
        ok=not failures,
        timing_kind="gpu" if where.gpu else "cpu",
        device=str(dev),
        device_name=where.device_name,
        method=where.method,
        note=note,
        sdpa_backend=sdpa.backend or {"name": "unknown", "how": "not run", "ops": []},
        config=cfg,
        rows=rows,
        min_speedup=float(cfg.min_speedup),
        speed_gate_applied=where.gpu and (cfg.min_speedup > 0 or expectation["applied"]),
        failures=failures,
        gate_on=cfg.gate_on,
        expectation=expectation,
        providers=[{**p.summary(), "reasons": refused[p.label or p.name]} for p in roster],
    )
