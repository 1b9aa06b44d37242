"""``sagebuild bench``: PyTorch SDPA against the quantized kernels, timing and accuracy, with a gate.

On a CPU the golden model is timed, labelled so and not speed-gated; accuracy bounds apply everywhere.
"""

from __future__ import annotations

import functools
import itertools
import statistics
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from sagebuild.errors import Exit, SagebuildError

if TYPE_CHECKING:
    from sagebuild.benchmem import Estimate

LAYOUTS = ("HND", "NHD")
DTYPES = ("float16", "bfloat16")
AUTO = "sageattn"  # the auto-dispatch entry point (a bench provider, a verified variant)
SDPA = "sdpa"
# gate metric -> the row's speed-up field; "cold": L2 flushed before each call, "sustained": the
# GPU at its power limit (``--sustain``), where a long job runs
GATE_METRICS = {"cold": "speedup", "sustained": "sustained_speedup"}
_SDPA_OPS = {  # the aten op SDPA dispatches to → backend name
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_flash_attention_for_cpu": "cpu-flash",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


@dataclass(frozen=True)
class BenchConfig:
    batch: int
    heads: int
    seq: tuple[int, ...]
    head_dim: int
    dtype: str
    causal: bool
    layout: str = "HND"
    warmup: int = 10
    reps: int = 50
    seed: int = 0
    rounds: int = 5  # the timed calls' rounds, each timing every provider (``time_interleaved``)
    # seconds of back-to-back calls per provider and round (0: off): the GPU at its power limit
    sustain_s: float = 0.0
    gate_on: str = "cold"  # the speed-up the gate compares (``GATE_METRICS``)
    # explicit SDPA-relative gate (``--min-speedup``): None takes the profile's (0 there: off)
    min_speedup: Optional[float] = None
    # cross-attention / GQA: keys per call (None: as many as queries) and K/V heads (None: heads)
    kv_seq: Optional[int] = None
    kv_heads: Optional[int] = None
    # packed sequences (``sageattn_varlen``): their query lengths (``seq`` is then their total)
    # and key lengths (None: the same, self-attention)
    varlen: Optional[tuple[int, ...]] = None
    varlen_keys: Optional[tuple[int, ...]] = None

    def kv_shape(self, n: int) -> tuple[int, int, int, int]:
        """K's and V's B,H,N,D at ``n`` queries (packed: N is the keys' total)."""
        from sagebuild import benchmem

        return (self.batch, self.kv_heads or self.heads, benchmem.keys(self, n), self.head_dim)


def packed_lengths(varlen: tuple[int, ...], varlen_keys: Optional[tuple[int, ...]]) -> str:
    """Packed sequences as ``--varlen`` takes them, joined by ``+``: ``4096:137+4096:512``."""
    from sagebuild.benchmem import sequence_pairs

    return "+".join(str(m) if m == mk else f"{m}:{mk}" for m, mk in sequence_pairs(varlen, varlen_keys))


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
    """The profile's bench defaults with the command line's overrides (None = keep the default)."""
    shared = ("batch", "heads", "seq", "head_dim", "dtype", "causal", "warmup", "reps")  # profiles.Bench's
    cfg = BenchConfig(**{f: getattr(profile.bench, f) for f in shared})
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    check_inputs(cfg.dtype, cfg.layout)
    if cfg.varlen:
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
        cfg = replace(cfg, batch=1, seq=(sum(cfg.varlen),))
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
    return cfg


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


# ---- timing ---------------------------------------------------------------------------------


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


def _gpu_cold_samples(fn: Callable[[], Any], n: int, flush: Any, device: Any) -> list[float]:
    """Device-event time of each of n calls, the L2 cache flushed before each (cold, like do_bench)."""
    import torch

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


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


# A back-to-back burst shorter than this would weigh its first call's pipeline fill too much.
B2B_MIN_CALLS = 10


def rounds_used(reps: int, rounds: int) -> int:
    """How many rounds ``time_interleaved`` splits ``reps`` timed calls into (each has one or more)."""
    return max(1, min(rounds, reps))


def _round_order(n: int, r: int) -> list[int]:
    """Round r's order of n functions, a Williams design (0, 1, n-1, 2, n-2, ... shifted by r,
    mirrored every other n rounds): a GPU runs a kernel at the clock its predecessor left."""
    seq = [0, *((j + 1) // 2 if j % 2 else n - j // 2 for j in range(1, n))]
    if (r // n) % 2:
        seq.reverse()
    return [(x + r) % n for x in seq]


def time_interleaved(
    fns: list[Callable[[], Any]],
    warmup: int,
    reps: int,
    rounds: int,
    device: Any = None,
    sustain_s: float = 0.0,
) -> list[Timing | Exception]:
    """``Timing`` of each function, or the exception that stopped it: ``reps`` timed calls split
    into rounds that each time every function, so the machine's drift hits all alike. On a CUDA/HIP
    ``device`` cold device times plus per-round bursts; elsewhere CPU wall clock."""
    gpu = getattr(device, "type", None) == "cuda"
    flush = None
    if gpu:
        import torch

        flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=device)  # > any GPU's L2
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
    # per function: cold samples (ms) and, on a GPU, each round's back-to-back and sustained time
    samples, b2b, sustained = ([[] for _ in fns] for _ in range(3))
    for r, n in enumerate(counts):
        for i in _round_order(len(fns), r):
            fn = fns[i]
            if i in failed:
                continue
            try:
                if gpu:
                    samples[i] += _gpu_cold_samples(fn, n, flush, device)
                    b2b[i].append(_gpu_back_to_back(fn, max(n, B2B_MIN_CALLS), device))
                    if sustain_s > 0:
                        # timed over the second half of sustain_s seconds of calls: the first half
                        # brings the GPU to the clocks its power limit allows
                        half = max(B2B_MIN_CALLS, int(sustain_s * 1e3 / max(b2b[i][-1], 1e-3) / 2))
                        sustained[i].append(_gpu_back_to_back(fn, half, device, lead=half))
                else:
                    samples[i] += _cpu_samples(fn, n)
            except Exception as exc:  # noqa: BLE001
                failed[i] = exc
    med = lambda xs: statistics.median(xs) if xs else None
    return [
        failed.get(i)
        or replace(
            Timing.from_samples(samples[i]), back_to_back_ms=med(b2b[i]), sustained_ms=med(sustained[i])
        )
        for i in range(len(fns))
    ]


def median_ms(fn: Callable[[], Any], graph: bool = False, rep_ms: int = 200) -> float:
    """The tuning scripts' timing on the current GPU (median ms) of the whole call, or with ``graph``
    of its CUDA-graph replay: device time only, what small calls need to tell configs apart."""
    from triton.testing import do_bench

    if not graph:
        return do_bench(fn, warmup=25, rep=rep_ms, return_mode="median")
    import torch

    from sagebuild.attention.graphed import capture

    g, _ = capture(fn, torch.device("cuda", torch.cuda.current_device()))
    return do_bench(g.replay, warmup=25, rep=rep_ms, return_mode="median")


# ---- what SDPA runs -------------------------------------------------------------------------


def sdpa_call(q: Any, k: Any, v: Any, causal: bool, layout: str = "HND") -> Callable[[], Any]:
    """What a caller runs instead of ours: SDPA on these tensors, with ``enable_gqa`` for fewer K/V
    heads and, for causal calls with other key counts, the bottom-right mask our kernels apply
    (``is_causal`` alone is top-left there)."""
    import torch.nn.functional as F

    t = (lambda x: x.transpose(1, 2)) if layout == "NHD" else (lambda x: x)
    qh, kh, vh = t(q), t(k), t(v)
    kw: dict[str, Any] = {"enable_gqa": True} if kh.shape[1] != qh.shape[1] else {}
    if causal and kh.shape[2] != qh.shape[2]:
        from torch.nn.attention.bias import causal_lower_right

        kw["attn_mask"] = causal_lower_right(qh.shape[2], kh.shape[2])
    else:
        kw["is_causal"] = causal
    return lambda: t(F.scaled_dot_product_attention(qh, kh, vh, **kw))


def sdpa_backend(q: Any, k: Any, v: Any, causal: bool) -> dict[str, Any]:
    """The backend SDPA's dispatch picked for these inputs: a ``TorchDispatchMode`` recording one
    call sees the op the composite resolved to (math: plain matmuls)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ops: list[str] = []

    class _Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            ops.append(str(func.overloadpacket).removeprefix("aten."))
            return func(*args, **(kwargs or {}))

    call = sdpa_call(q, k, v, causal)
    with _Recorder():
        call()
    math = any(o in ("bmm", "matmul", "_softmax", "softmax", "baddbmm") for o in ops)
    name = next((_SDPA_OPS[o] for o in ops if o in _SDPA_OPS), "math" if math else "unknown")
    return {
        "name": name,
        "how": "the aten op SDPA dispatched to on one call with these inputs (TorchDispatchMode)",
        "ops": sorted(set(ops)),
    }


# ---- results --------------------------------------------------------------------------------


@dataclass
class BenchRow:
    seq: int
    provider: str
    kind: str  # baseline | whole_call | kernel_only
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

    @property
    def exit_code(self) -> Exit:
        return Exit.OK if self.ok else Exit.BENCH_BELOW_THRESHOLD

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # the config and rows too: asdict recurses
        for name in ("seq", "varlen", "varlen_keys"):  # tuples as the schema's arrays
            lens = getattr(self.config, name)
            d["config"][name] = list(lens) if lens else None
        gate_fields = ("min_speedup", "speed_gate_applied", "gate_on", "failures", "expectation")
        d["gate"] = {("metric" if k == "gate_on" else k): d.pop(k) for k in gate_fields}
        return d


def gate(
    rows: list[BenchRow],
    min_speedup: float,
    speed_gate: bool,
    metric: str = "cold",
    expected: Optional[dict[str, float]] = None,
    regression: float = 0.85,
    shape_of: Callable[[int], str] = str,
) -> list[str]:
    """Every threshold a row misses: accuracy always; with ``speed_gate`` sageattn's ``metric``
    speed-up below ``regression`` × the ``expected`` one for ``shape_of(seq)``, or below a positive
    ``min_speedup``. Messages start with the provider and name ``seq=N`` (JUnit keys on that)."""
    out = []
    what = "speed-up" if metric == "cold" else f"{metric} speed-up"
    for r in rows:
        if r.kind == "baseline":
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
        plan = next((r["plan"] for r in here if r["provider"] == AUTO), None)
        choice = (plan or {}).get("variant") or picked or "unknown"
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


# ---- running --------------------------------------------------------------------------------


def _kernel_only(
    variant: str,
    q: Any,
    k: Any,
    v: Any,
    layout: str,
    causal: bool,
) -> tuple[Callable[[], Any], dict[str, Any]]:
    """The variant's attention launch alone on K/V quantized beforehand, and its plan's record."""
    from sagebuild.attention import api

    pv = "fp8" if variant == "qk_int8_pv_fp8" else "fp16"
    plan = api.plan_dense(q, k, v, tensor_layout=layout, is_causal=causal, pv=pv)
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v)) if layout == "NHD" else (q, k, v)
    return api.kernel_only(plan, qh, kh, vh), plan.record()


def _ratio(base: Optional[Timing], timing: Timing, field: str, kind: str) -> Optional[float]:
    """SDPA's time / a provider's in one ``Timing`` field; None for SDPA itself or if either is unmeasured."""
    ours, theirs = getattr(timing, field), getattr(base, field, None)
    return theirs / ours if kind != "baseline" and ours and theirs else None


def _error_text(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"


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


def packed_segments(segments: list[tuple[int, int]], q: Any, k: Any, v: Any) -> list[tuple[Any, Any, Any]]:
    """Per sequence of (queries, keys), [1, H, L, D] views of packed [total, H, D] q, k, v (for SDPA
    and the references)."""
    q_ends = itertools.accumulate(m for m, _ in segments)
    k_ends = itertools.accumulate(mk for _, mk in segments)
    view = lambda t, n, e: t[e - n : e].transpose(0, 1)[None]  # noqa: E731
    return [
        (view(q, m, qe), view(k, mk, ke), view(v, mk, ke))
        for (m, mk), qe, ke in zip(segments, q_ends, k_ends)
    ]


def packed_call(
    q: Any, k: Any, v: Any, segments: list[tuple[int, int]], causal: bool, variant: str = "auto"
) -> tuple[Callable[[], Any], dict[str, Any]]:
    """``sageattn_varlen`` over packed [total, H, D] q, k, v of these (queries, keys) sequences with
    the variant's P·V ("auto": what it picks), and the record of the plan it runs."""
    import torch

    from sagebuild.attention import api, functions

    def cu(lens: Any) -> Any:
        return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device=q.device)

    cu_q, cu_k = cu(m for m, _ in segments), cu(mk for _, mk in segments)
    top_q, top_k = max(m for m, _ in segments), max(mk for _, mk in segments)
    pv = variant.rsplit("_", 1)[-1]  # "auto", or qk_int8_pv_fp16's "fp16"
    plan = api.plan_varlen(q, cu_q, top_q, top_k, is_causal=causal, pv=pv).record()
    call = lambda: functions.sageattn_varlen(q, k, v, cu_q, cu_k, top_q, top_k, is_causal=causal, pv=pv)  # noqa: E731
    return call, plan


def _unpack(outs: list[Any]) -> Any:
    """Per-sequence [1, H, L, D] outputs as one packed [total, H, D] tensor."""
    import torch

    return torch.cat([o[0].transpose(0, 1) for o in outs])


def run_bench(
    profile: Any,
    cfg: BenchConfig,
    device: str = "auto",
    progress: Optional[Callable[[str], None]] = None,
    fits: Optional[Estimate] = None,
) -> BenchResult:
    """Benchmark every provider at every length of ``cfg`` and apply the profile's gate; ``fits``:
    the caller's ``benchmem.check_fits(cfg, device)`` (its CPU rate measurement is not repeated)."""
    import torch

    from sagebuild import benchmem
    from sagebuild.attention import metrics, reference

    # resolves the device; an absent GPU or a shape that will not fit is refused before allocating
    dev = torch.device((fits if fits is not None else benchmem.check_fits(cfg, device)).device)
    say = progress or (lambda _msg: None)
    gpu = dev.type == "cuda"
    n_rounds = rounds_used(cfg.reps, cfg.rounds)
    layout, causal = cfg.layout, cfg.causal
    rounds = (  # how both methods time, after how each call is timed
        f"{cfg.warmup} warm-up calls, {cfg.reps} timed in {n_rounds} rounds that time every provider "
        "in turn, each round in another order; median"
    )

    limits = {variant: asdict(b) for variant, b in profile.accuracy.items()}  # absent: not gated

    segments = benchmem.packed_sequences(cfg)  # packed sequences' (queries, keys), if any

    def sdpa(q: Any, k: Any, v: Any) -> tuple[Callable[[], Any], None]:
        if segments:  # once per sequence, as a caller without varlen attention would (outputs unpacked)
            calls = [sdpa_call(*seg, causal) for seg in packed_segments(segments, q, k, v)]
            return lambda: [c() for c in calls], None
        return sdpa_call(q, k, v, causal, layout), None

    def whole_call(fn: Callable[..., Any], variant: str = "auto") -> Callable[..., Any]:
        def make(q: Any, k: Any, v: Any) -> tuple[Callable[[], Any], Any]:
            if segments and gpu:
                return packed_call(q, k, v, segments, causal, variant)
            if segments:  # the golden model, once per sequence
                segs = packed_segments(segments, q, k, v)
                return lambda: [fn(*seg, is_causal=causal) for seg in segs], None
            call = lambda: fn(q, k, v, tensor_layout=layout, is_causal=causal)
            return call, launch_plan(q, k, v, layout, causal, variant=variant) if gpu else None

        return make

    # (name, kind, make(q, k, v) -> (callable, launch-plan record or None), accuracy bounds)
    providers: list[tuple[str, str, Callable[..., tuple[Callable[[], Any], Any]], Any]] = [
        (SDPA, "baseline", sdpa, None)
    ]
    if gpu:
        from sagebuild import attention
        from sagebuild.attention import dispatch
        from sagebuild.attention.api import launch_plan
        from sagebuild.kernels.triton import configs

        arch = dispatch.device_arch(dev)
        auto_variant = dispatch.variant_for_device(dev)
        providers.append((AUTO, "whole_call", whole_call(attention.sageattn), limits.get(auto_variant)))
        # every variant this GPU runs, so the note can say which one won (issue 38)
        for var in dispatch.available_variants(dev):
            fn = getattr(attention, f"sageattn_{var}_triton")
            providers.append((var, "whole_call", whole_call(fn, var), limits.get(var)))
            if not segments:  # the kernel-only adapter is dense
                kernel_only = functools.partial(_kernel_only, var, layout=layout, causal=causal)
                providers.append((var, "kernel_only", kernel_only, limits.get(var)))
        device_name = f"{torch.cuda.get_device_name(dev)} ({arch})"
        method = (
            f"CUDA/HIP events per call, L2 flushed before each; {rounds} and p20/p80; back-to-back: "
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
    else:
        for var in profile.kernels:
            golden = functools.partial(reference.golden_attention, variant=var)
            providers.append((f"golden:{var}", "whole_call", whole_call(golden), limits.get(var)))
        arch = device_name = None
        method = f"CPU wall clock (perf_counter) per call; {rounds}"
        if cfg.sustain_s > 0:
            method += "; --sustain ignored (it times a GPU at its power limit)"
        note = (
            "CPU timings — not a GPU result. The golden model is a plain-torch emulation of the kernels' "
            "arithmetic; its accuracy is meaningful, its speed is not. No speed gate on CPU."
        )

    rows: list[BenchRow] = []
    backend: dict[str, Any] = {}
    expected, expectation = expectation_for(profile, arch, gpu)
    remeasured: list[int] = []  # shapes measured twice (the first time below the regression floor)
    field_ = "sustained_ms" if cfg.gate_on == "sustained" else "median_ms"

    shape_of = gate_key(cfg)
    for n in cfg.seq:
        q_shape = (cfg.batch, cfg.heads, n, cfg.head_dim)
        if segments:  # packed [total, H, D]
            drawn = random_qkv(q_shape, "NHD", cfg.dtype, cfg.seed + n, dev, cfg.kv_shape(n))
            q, k, v = (x[0] for x in drawn)
            segs = packed_segments(segments, q, k, v)
            ref = _unpack([reference.exact_attention(*seg, is_causal=causal) for seg in segs])
            flops = sum(attention_flops(1, cfg.heads, m, cfg.head_dim, causal, mk) for m, mk in segments)
            probe = segs[0]  # SDPA's backend as the first sequence's call picks it
        else:
            q, k, v = random_qkv(q_shape, layout, cfg.dtype, cfg.seed + n, dev, cfg.kv_shape(n))
            ref = reference.exact_attention(q, k, v, tensor_layout=layout, is_causal=causal)
            flops = attention_flops(cfg.batch, cfg.heads, n, cfg.head_dim, causal, cfg.kv_seq)
            probe = tuple(x.transpose(1, 2) for x in (q, k, v)) if layout == "NHD" else (q, k, v)
        if not backend:
            backend = sdpa_backend(*probe, causal)
        # each provider's first call gives its accuracy (a failure is a row with its error); then
        # the others are timed together, interleaved
        here: list[BenchRow] = []
        ready: list[tuple[BenchRow, Callable[[], Any]]] = []
        for name, kind, make, bounds in providers:
            say(f"seq={n} {name} {kind}: first call")
            row = BenchRow(n, name, kind, bounds=bounds)
            here.append(row)
            try:
                fn, row.plan = make(q, k, v)
                out = fn()
                row.accuracy = metrics.accuracy(_unpack(out) if isinstance(out, list) else out, ref)
                ready.append((row, fn))
            except Exception as e:  # noqa: BLE001
                row.error = _error_text(e)
        say(f"seq={n}: timing {len(ready)} providers in {n_rounds} rounds")
        floor = expected.get(shape_of(n), 0.0) * profile.bench.regression
        for attempt in range(2):
            # a regression must reproduce: a shape below the recorded speed-up's floor is measured
            # once more, all providers anew, and the second measurement is the one reported
            timings = time_interleaved(
                [fn for _, fn in ready], cfg.warmup, cfg.reps, cfg.rounds, dev, cfg.sustain_s
            )
            by = {(r.provider, r.kind): t for (r, _), t in zip(ready, timings) if isinstance(t, Timing)}
            base, auto = by.get((SDPA, "baseline")), by.get((AUTO, "whole_call"))
            ratio = _ratio(base, auto, field_, "whole_call") if auto else None
            if attempt or not gpu or ratio is None or ratio >= floor:
                break
            remeasured.append(n)
            say(f"seq={n}: speed-up {ratio:.3f}× below the regression floor {floor:.3f}×: measuring again")
        for (row, _), timing in zip(ready, timings):
            if isinstance(timing, Exception):
                row.accuracy, row.error = None, _error_text(timing)
                continue
            row.timing, row.tflops = timing, flops / (timing.median_ms * 1e-3) / 1e12
            row.speedup, row.sustained_speedup = (
                _ratio(base, timing, f, row.kind) for f in ("median_ms", "sustained_ms")
            )
        rows += here
        del q, k, v, ref, here, ready, timings  # each length's buffers go before the next
    min_speedup = profile.bench.min_speedup if cfg.min_speedup is None else cfg.min_speedup
    if remeasured:
        expectation["remeasured"] = remeasured
    failures = gate(
        rows, min_speedup, speed_gate=gpu, metric=cfg.gate_on, expected=expected,
        regression=profile.bench.regression,
        shape_of=shape_of,
    )  # fmt: skip
    if gpu:  # the dispatch's pick against the fastest variant, per length (issue 38)
        note = f"{note}\n{compare_variants(rows, auto_variant)}"
    return BenchResult(
        ok=not failures,
        timing_kind="gpu" if gpu else "cpu",
        device=str(dev),
        device_name=device_name,
        method=method,
        note=note,
        sdpa_backend=backend or {"name": "unknown", "how": "not run", "ops": []},
        config=cfg,
        rows=rows,
        min_speedup=float(min_speedup),
        speed_gate_applied=gpu and (min_speedup > 0 or expectation["applied"]),
        failures=failures,
        gate_on=cfg.gate_on,
        expectation=expectation,
    )
