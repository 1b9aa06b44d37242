"""``sagebuild tune``'s measurement: for each shape class, SDPA beside every candidate launch config
of every P·V variant (``space``), in one process, with interleaved rounds, warm-up and device
time as ``sagebuild bench`` times; the fastest path that meets the accuracy bounds wins.

Each candidate runs once first: that call compiles it (Triton keeps the compiled kernel, so a
later class with the same specialisation pays nothing), and a candidate that fails to compile,
faults, runs past the time limit, spills registers, uses scratch memory or misses the accuracy
bounds is recorded as failed and never timed or chosen. A budget in seconds bounds the whole run:
each class gets an equal share of what is left, and candidates past it are skipped (the shipped
table's own choice is always tried). Classes are handed to ``on_class`` as they finish, so an
interrupted run (Ctrl-C) keeps them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from sagebuild.tuning import space
from sagebuild.tuning.classes import Workload

SDPA = "sdpa"
# A candidate replaces the shipped table's pick only when faster by more than this fraction
# (timing noise must not swap in a config that is really no faster).
TABLE_MARGIN = 0.02
# Of a class's share of the budget, the part its compiles may take (the rest times them).
COMPILE_SHARE = 0.7
# Timing rounds per class (fewer when a class's calls are long) and the most timed calls per path.
ROUNDS, MAX_REPS = 5, 40
# A candidate's second call longer than this many times SDPA's (and than MIN_TIMEOUT_S) times out.
TIMEOUT_FACTOR = 50.0
MIN_TIMEOUT_S = 2.0

# A timer: labelled calls -> each one's median milliseconds, or the exception that stopped it.
Timer = Callable[[list[tuple[str, Callable[[], Any]]], float], list[Any]]
# An inspector: a candidate and the kernels its first call compiled -> why it is dropped, or None.
Inspector = Callable[[space.Candidate, list[Any]], Optional[str]]


@dataclass
class Measured:
    """One timed path of a class: SDPA, or a candidate (variant + config) with its outcome."""

    variant: str  # "sdpa" or a table variant ("fp16", "fp8", "fp8acc")
    config: Optional[str]  # the config spec (None for SDPA)
    source: str  # "sdpa" | "table" | "space"
    status: str = "ok"  # ok | failed | skipped
    ms: Optional[float] = None
    reason: Optional[str] = None  # failed: "compile: ...", "accuracy: ...", "spills: ..."; skipped: why
    accuracy: Optional[dict[str, float]] = None

    @property
    def label(self) -> str:
        return SDPA if self.variant == SDPA else f"{self.variant} {self.config}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ClassResult:
    """A finished class: every path measured, the winner, the runner-up and the shipped pick."""

    cls: Workload
    paths: list[Measured]
    winner: Optional[Measured]
    runner_up: Optional[Measured]
    shipped: Optional[Measured]  # what ``sageattn`` ran before tuning (the table's default variant)
    seconds: float

    @property
    def sdpa(self) -> Optional[Measured]:
        return next((p for p in self.paths if p.variant == SDPA), None)

    def to_dict(self) -> dict[str, Any]:
        pick = lambda m: m.to_dict() if m else None  # noqa: E731
        return {
            "class": self.cls.key,
            **self.cls.to_dict(),
            "winner": pick(self.winner),
            "runner_up": pick(self.runner_up),
            "shipped": pick(self.shipped),
            "sdpa_ms": self.sdpa.ms if self.sdpa else None,
            "seconds": round(self.seconds, 2),
            "paths": [p.to_dict() for p in self.paths],
        }


@dataclass
class TuneRun:
    """A whole run: finished classes, the ones left (budget or interrupt) and the settings."""

    arch: str
    family: str
    device_name: str
    results: list[ClassResult] = field(default_factory=list)
    skipped: list[tuple[Workload, str]] = field(default_factory=list)
    interrupted: bool = False
    seconds: float = 0.0
    budget_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "arch": self.arch,
            "family": self.family,
            "device_name": self.device_name,
            "classes": [r.to_dict() for r in self.results],
            "skipped": [{"class": c.key, "why": why} for c, why in self.skipped],
            "interrupted": self.interrupted,
            "seconds": round(self.seconds, 2),
            "budget_s": self.budget_s,
        }


# ---- the pieces a test replaces -------------------------------------------------------------


def default_timer(device: Any, warmup: int = 3) -> Timer:
    """``bench.timing.time_interleaved`` on ``device``, as ``sagebuild bench`` times: on a GPU cold
    device times (L2 flushed before each call, the GPU held busy while the host issues it),
    elsewhere the host's wall clock; warm-up, rounds that time every path in turn, each in another
    order; reps sized so that one class's timing takes about ``seconds``."""
    from sagebuild.bench import timing

    gpu = getattr(device, "type", None) == "cuda"

    def timer(calls: list[tuple[str, Callable[[], Any]]], seconds: float) -> list[Any]:
        fns = [fn for _, fn in calls]
        per_round_ms = timing.one_of_each_ms(fns, device)
        bursts = timing.B2B_MIN_CALLS if gpu else 0  # each GPU round adds a back-to-back burst per path
        rounds = ROUNDS if per_round_ms * (bursts + 4) * ROUNDS < seconds * 1e3 else 2
        reps = int(seconds * 1e3 / per_round_ms) - rounds * bursts - warmup
        reps = max(rounds * 2, min(MAX_REPS, reps))
        timings = timing.time_interleaved(fns, warmup, reps, rounds, device if gpu else None)
        return [t.median_ms if isinstance(t, timing.Timing) else t for t in timings]

    return timer


def resource_problem(candidate: space.Candidate, kernels: list[Any]) -> Optional[str]:
    """Why a candidate's compiled kernels are unfit to time: registers spilled to local memory
    (Triton's ``n_spills``), or global scratch memory used; None when fit. The shipped table's
    own config is exempt: it is what runs without a record, measured or not. (Shared memory beyond
    the device's is refused by Triton itself at the first launch: a failed compile.)"""
    if candidate.source == "table":
        return None
    for k in kernels:
        spills = getattr(k, "n_spills", 0) or 0
        if spills:
            return f"spills: {spills} registers spilled ({getattr(k, 'name', 'kernel')})"
        scratch = getattr(getattr(k, "metadata", None), "global_scratch_size", 0) or 0
        if scratch:
            return f"scratch: {scratch} bytes of global scratch ({getattr(k, 'name', 'kernel')})"
    return None


def _failure(exc: BaseException) -> str:
    """A failed first call's reason: the kind of failure, then the error's first line."""
    text = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    name = type(exc).__name__
    if name == "OutOfResources":
        kind = "resources"
    elif "Compil" in name or "compil" in text.lower():
        kind = "compile"
    elif any(s in text for s in ("CUDA error", "HIP error", "illegal", "misaligned", "hipError")):
        kind = "fault"
    else:
        kind = "error"
    return f"{kind}: {text}"


# ---- one class ------------------------------------------------------------------------------


@dataclass
class _Inputs:
    q: Any
    k: Any
    v: Any
    ref: Any


def _inputs(cls: Workload, device: Any, seed: int) -> _Inputs:
    """Seeded normal Q, K, V drawn on the device itself (a video class's are hundreds of MB: no
    host round trip), and exact attention on them in float32 (``reference.exact_attention``)."""
    import torch

    from sagebuild.attention import reference

    gen = torch.Generator(device=device).manual_seed(seed)
    dtype = getattr(torch, cls.dtype)
    draw = lambda *shape: torch.randn(shape, generator=gen, device=device, dtype=dtype)  # noqa: E731
    q = draw(cls.batch, cls.heads, cls.seq, cls.head_dim)
    k, v = (draw(cls.batch, cls.kv_heads or cls.heads, cls.keys, cls.head_dim) for _ in range(2))
    return _Inputs(q, k, v, reference.exact_attention(q, k, v, is_causal=cls.causal))


def _call(variant: str, config: Optional[str], x: _Inputs, causal: bool) -> Callable[[], Any]:
    """A path's whole call: SDPA as a caller runs it, or our explicit function with the config forced."""
    from sagebuild import bench
    from sagebuild.attention import functions as f

    if variant == SDPA:
        return bench.sdpa_call(x.q, x.k, x.v, causal)
    if variant == "fp16":
        return lambda: f.sageattn_qk_int8_pv_fp16_triton(x.q, x.k, x.v, is_causal=causal, config=config)
    accum = "fp32" if variant == "fp8acc" else "fp32+fp32"
    return lambda: f.sageattn_qk_int8_pv_fp8_triton(
        x.q, x.k, x.v, is_causal=causal, config=config, pv_accum_dtype=accum
    )


def table_configs(arch: str, cls: Workload, variants: tuple[str, ...]) -> dict[str, str]:
    """What the shipped table runs for this class, per variant: the config spec its plan forces."""
    from sagebuild.attention.plan import make_plan

    out = {}
    for variant in variants:
        pv = "fp16" if variant == "fp16" else "fp8"
        plan = make_plan(
            arch, head_dim=cls.head_dim, n_k=cls.keys, n_q=cls.seq, batch_heads=cls.batch * cls.heads,
            causal=cls.causal, pv=pv, pv_accum="fp32" if variant == "fp8acc" else "fp32+fp32",
        )  # fmt: skip
        out[variant] = plan.record()["config"]
    return out


def shipped_variant(arch: str, cls: Workload) -> str:
    """The variant ``sageattn`` runs for this class without a record (the arch's and table's pick)."""
    from sagebuild.attention.plan import default_pv
    from sagebuild.kernels.triton import configs

    pv, accum = default_pv(arch, cls.head_dim, cls.keys)
    return configs.variant_key(pv, accum)


def _pick(
    paths: list[Measured], shipped: Optional[Measured]
) -> tuple[Optional[Measured], Optional[Measured]]:
    """Winner and runner-up among the timed paths: the fastest, except that the shipped pick stays
    unless another of ours beats it by more than TABLE_MARGIN (SDPA wins whenever it is faster)."""
    timed = sorted((p for p in paths if p.status == "ok" and p.ms is not None), key=lambda p: p.ms)
    if not timed:
        return None, None
    ours = [p for p in timed if p.variant != SDPA]
    best = ours[0] if ours else None
    if best is not None and any(p is shipped for p in ours) and shipped.ms <= best.ms * (1 + TABLE_MARGIN):
        best = shipped
    sdpa = next((p for p in timed if p.variant == SDPA), None)
    if best is None or (sdpa is not None and sdpa.ms < best.ms):
        return sdpa, best  # our best pick is the runner-up
    rest = [p for p in timed if p is not best]
    return best, rest[0] if rest else None


@dataclass
class Tuner:
    """Tunes classes on one device. ``timer`` and ``inspect`` are replaceable (tests inject a fake
    clock so that winners are deterministic); ``bounds``: accuracy bounds per kernel variant name
    ("qk_int8_pv_fp16" / "qk_int8_pv_fp8": {cos_min, rel_l1_max}), from the profile."""

    device: Any
    bounds: dict[str, dict[str, float]]
    budget_s: float
    timer: Optional[Timer] = None
    inspect: Inspector = resource_problem
    variants: tuple[str, ...] = ()  # restrict the variants tuned (empty: the family's)
    seed: int = 0
    clock: Callable[[], float] = time.monotonic
    # a candidate's call longer than max(this, TIMEOUT_FACTOR x SDPA's) fails as timed out (None:
    # MIN_TIMEOUT_S on a GPU; none under the CPU interpreter, whose calls take seconds)
    min_timeout_s: Optional[float] = None
    progress: Callable[[str], None] = lambda _msg: None

    def run(self, classes: list[Workload], on_class: Callable[[ClassResult], None]) -> TuneRun:
        """Tune every class in order within the budget; ``on_class`` gets each finished class
        (the caller saves it). Ctrl-C ends the run: finished classes stay, the rest are skipped."""
        from sagebuild.attention import dispatch, plan

        arch = dispatch.device_arch(self.device)
        family = plan.family_of(arch)
        run = TuneRun(arch, family, _device_name(self.device), budget_s=self.budget_s)
        t0 = self.clock()
        deadline = t0 + self.budget_s
        timer = self.timer or default_timer(self.device)
        try:
            for i, cls in enumerate(classes):
                left = deadline - self.clock()
                if left <= 0:
                    run.skipped += [(c, "budget spent") for c in classes[i:]]
                    break
                self.progress(f"{cls.key}: compiling candidates")
                try:
                    result = self._tune_class(cls, arch, family, timer, left / (len(classes) - i))
                except Exception as exc:  # noqa: BLE001 - a class that cannot run is reported, not fatal
                    run.skipped.append((cls, _failure(exc)))
                    continue
                run.results.append(result)
                on_class(result)
        except KeyboardInterrupt:
            run.interrupted = True
            done = {r.cls for r in run.results}
            run.skipped += [(c, "interrupted") for c in classes if c not in done]
        finally:
            run.seconds = self.clock() - t0
            _release_memory(self.device)
        return run

    def _tune_class(self, cls: Workload, arch: str, family: str, timer: Timer, share: float) -> ClassResult:
        t0 = self.clock()
        from sagebuild.attention import dispatch, gate
        from sagebuild.attention.plan import VARIANTS

        # FP8 where the arch runs it and, where it waits for verify's accuracy check, passed it
        fp8_ok = VARIANTS["fp8"] in dispatch.available_variants(self.device) and gate.allowed(
            arch, VARIANTS["fp8"]
        )
        variants = space.variants(family, fp8_ok)
        x = _inputs(cls, self.device, self.seed)
        try:
            table = table_configs(arch, cls, variants)
            cands = space.candidates(family, cls.head_dim, table, fp8_ok, self.variants)
            shipped_key = (shipped_variant(arch, cls), table.get(shipped_variant(arch, cls)))
            sdpa = Measured(SDPA, None, SDPA)
            sdpa_call = _call(SDPA, None, x, cls.causal)
            sdpa_s = self._wall(sdpa_call)
            ready: list[tuple[Measured, Callable[[], Any]]] = [(sdpa, sdpa_call)]
            paths = [sdpa]
            for cand in cands:
                m = Measured(cand.variant, cand.config, cand.source)
                paths.append(m)
                if cand.source != "table" and self.clock() - t0 > share * COMPILE_SHARE:
                    m.status, m.reason = "skipped", "budget spent"
                    continue
                call = self._first_call(cand, m, x, cls, sdpa_s)
                if call is not None:
                    ready.append((m, call))
            self.progress(f"{cls.key}: timing {len(ready)} paths")
            remaining = max(share - (self.clock() - t0), share * (1 - COMPILE_SHARE))
            for (m, _), ms in zip(ready, timer([(m.label, fn) for m, fn in ready], remaining)):
                if isinstance(ms, BaseException):
                    m.status, m.reason = "failed", _failure(ms)
                else:
                    m.ms = float(ms)
            shipped = next((p for p in paths if (p.variant, p.config) == shipped_key), None)
            winner, runner_up = _pick(paths, shipped)
            return ClassResult(cls, paths, winner, runner_up, shipped, self.clock() - t0)
        finally:
            del x

    def _wall(self, call: Callable[[], Any]) -> float:
        """One call's wall time (s), the device synchronised (after a first, untimed call)."""
        call()
        _sync(self.device)
        t = time.perf_counter()
        call()
        _sync(self.device)
        return time.perf_counter() - t

    def _first_call(
        self, cand: space.Candidate, m: Measured, x: _Inputs, cls: Workload, sdpa_s: float
    ) -> Optional[Callable[[], Any]]:
        """Compile and run a candidate once, check it, and return its call to time (None: failed)."""
        from sagebuild.attention import metrics
        from sagebuild.kernels.triton import launcher

        call = _call(cand.variant, cand.config, x, cls.causal)
        kernels: list[Any] = []
        launcher.watch_compiled(kernels)
        try:
            out = call()
            _sync(self.device)
        except Exception as exc:  # noqa: BLE001 - any failure of a candidate is its verdict
            m.status, m.reason = "failed", _failure(exc)
            return None
        finally:
            launcher.watch_compiled(None)
        problem = self.inspect(cand, kernels)
        if problem is None:
            acc = metrics.accuracy(out, x.ref)
            m.accuracy = {k: acc[k] for k in ("cos", "rel_l1")}
            problem = _accuracy_problem(acc, self.bounds.get(_kernel_variant(cand.variant)))
        if problem is None:
            floor = self.min_timeout_s
            if floor is None:
                floor = MIN_TIMEOUT_S if getattr(self.device, "type", None) == "cuda" else float("inf")
            limit = max(floor, TIMEOUT_FACTOR * sdpa_s)
            seconds = self._wall(call)
            if seconds > limit:
                problem = f"timeout: a call took {seconds:.2f} s (limit {limit:.2f} s)"
        if problem is not None:
            m.status, m.reason = "failed", problem
            return None
        return call


def _kernel_variant(variant: str) -> str:
    return "qk_int8_pv_fp16" if variant == "fp16" else "qk_int8_pv_fp8"


def _accuracy_problem(acc: dict[str, Any], bounds: Optional[dict[str, float]]) -> Optional[str]:
    if not acc.get("finite", True):
        return f"accuracy: {acc['nan_count']} NaN and {acc['inf_count']} Inf in the output"
    if bounds and acc["cos"] < bounds["cos_min"]:
        return f"accuracy: cosine {acc['cos']:.6f} < {bounds['cos_min']}"
    if bounds and acc["rel_l1"] > bounds["rel_l1_max"]:
        return f"accuracy: relative L1 {acc['rel_l1']:.5f} > {bounds['rel_l1_max']}"
    return None


def _sync(device: Any) -> None:
    if getattr(device, "type", None) == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _device_name(device: Any) -> str:
    if getattr(device, "type", None) == "cuda":
        import torch

        return torch.cuda.get_device_name(device)
    return "Triton CPU interpreter"


def _release_memory(device: Any) -> None:
    """Nothing of the run stays on the GPU: plans, replays (which keep buffers) and torch's cache."""
    from sagebuild.attention import api

    api.clear_caches()
    if getattr(device, "type", None) == "cuda":
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
