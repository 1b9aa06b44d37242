"""How much memory and time a bench will take, worked out from its shape before anything is allocated.

The byte model (:func:`bytes_needed`) follows ``sagebuild.bench.run.run_bench``.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from sagebuild.errors import Exit, SagebuildError

if TYPE_CHECKING:
    from sagebuild.bench.config import BenchConfig

GIB = 1024**3
_HEADROOM = 0.85  # refuse above this share of what is free: allocators and the rest of the machine
_GPU_FIXED = 768 * 1024**2  # CUDA context, the 256 MiB L2-flush buffer, workspaces
_HOST_FIXED = 512 * 1024**2  # the interpreter, torch and Triton themselves
_EXACT_ROWS = 1024  # reference.exact_attention's query rows per step
_GOLDEN_PROVIDERS = 2  # both variants' golden models on the CPU
LONG_RUN_S = 30.0  # show an ETA above this


@dataclass(frozen=True)
class Estimate:
    """Peak bytes of the largest length on the device and in host RAM, what is free, the CPU time."""

    device: str
    seq: int  # the length that needs the most
    device_bytes: int
    host_bytes: int
    device_free: Optional[int]
    host_free: Optional[int]
    seconds: Optional[float] = None  # CPU runs only

    def problems(self) -> list[str]:
        out = []
        free = self.device_free  # measured on a GPU only
        if free is not None and self.device_bytes > _HEADROOM * free:
            out.append(f"needs about {_gib(self.device_bytes)} on {self.device}, which has {_gib(free)} free")
        if self.host_free is not None and self.host_bytes > _HEADROOM * self.host_free:
            out.append(f"needs about {_gib(self.host_bytes)} of RAM, {_gib(self.host_free)} is available")
        return out


def _gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB" if n >= 0.1 * GIB else f"{n / 1024**2:.0f} MiB"


def resolve_device(device: str = "auto") -> Any:
    """``auto`` / ``cpu`` / ``cuda`` / ``cuda:N`` → a torch device; a GPU that is not there is exit 3."""
    import torch

    try:
        dev = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device)
    except (RuntimeError, ValueError):
        raise SagebuildError(
            f"--device {device}: not a device name", fix="pass auto, cpu, cuda or cuda:N"
        ) from None
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise SagebuildError(
            f"--device {device}: sagebuild runs on cpu or cuda (ROCm GPUs are cuda devices in torch)",
            fix="pass auto, cpu, cuda or cuda:N",
        )
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise SagebuildError(
            f"--device {device}: this torch sees no GPU",
            fix="run `sagebuild doctor` to see why, or pass --device cpu",
            code=Exit.ENVIRONMENT,
        )
    if dev.index is not None and dev.index >= count:
        raise SagebuildError(
            f"--device {device}: this machine has {count} GPU(s) (cuda:0 to cuda:{count - 1})",
            fix="pass one of them, or set CUDA_VISIBLE_DEVICES",
            code=Exit.ENVIRONMENT,
        )
    return dev


def score_shape(cfg: BenchConfig, seq: int) -> tuple[int, int]:
    """The largest score matrix's rows and columns: one packed sequence's, else queries × keys."""
    segments = cfg.segments()
    return max(segments, key=lambda s: s[0] * s[1]) if segments else (seq, cfg.keys(seq))


def bytes_needed(cfg: BenchConfig, seq: int, on_gpu: bool) -> tuple[int, int]:
    """(device bytes, host bytes) at one sequence length; pure arithmetic, no allocation. K/V are
    counted at every query head (the references expand GQA's K/V heads)."""
    bh, nk = cfg.batch * cfg.heads, cfg.keys(seq)
    eq, ekv = bh * seq * cfg.head_dim, bh * nk * cfg.head_dim  # elements of Q, of K or V
    e = max(eq, ekv)
    s_rows, s_cols = score_shape(cfg, seq)
    rows = min(s_rows, _EXACT_ROWS)
    inputs = (eq + 2 * ekv) * 2
    draw = e * 4 + e * 2  # one float32 draw and its 16-bit copy, on the host
    exact = (eq + 2 * ekv) * 4 + 2 * eq * 4 + 3 * bh * rows * s_cols * 4  # copies, output + chunks, S/P/exp
    if on_gpu:
        providers = 6 * e * 4  # outputs (float32 for the accuracy diff), quantized K/V, scales
        providers += len(cfg.against) * inputs  # a peer may hold its own layout's copy of the inputs
        return inputs + exact + providers + _GPU_FIXED, draw + _HOST_FIXED
    # the golden model: float64 Q/K codes, the full score matrix (float64 dots, float32 scores and
    # the causal mask), one key tile's P and the accumulator
    golden = (eq + ekv) * 8 + bh * s_rows * s_cols * (8 + 4 + 4 + 1) + 4 * eq * 4
    host = draw + inputs + exact + golden + _GOLDEN_PROVIDERS * eq * 4 + _HOST_FIXED
    return host, host


def _rates() -> tuple[float, float]:
    """(float64 matmul flop/s, elementwise float32 ops/s) of this CPU, measured in ~50 ms."""
    import torch

    def per_s(fn: Callable[[], Any], work: float) -> float:
        t0 = time.perf_counter()
        for _ in range(8):
            fn()
        return 8 * work / max(time.perf_counter() - t0, 1e-6)

    a = torch.rand(256, 256, dtype=torch.float64)
    x = torch.rand(1 << 20)
    torch.matmul(a, a)
    return per_s(lambda: torch.matmul(a, a), 2 * 256**3), per_s(lambda: torch.exp2(x), x.numel())


def cpu_seconds(cfg: BenchConfig) -> float:
    """A rough duration of a CPU bench: golden models, SDPA and the exact reference at every length."""
    mm, ew = _rates()
    calls = 1 + cfg.warmup + cfg.reps
    total = 0.0
    segments = cfg.segments()
    for n in cfg.seq:
        scores = cfg.batch * cfg.heads * (sum(m * mk for m, mk in segments) if segments else n * cfg.keys(n))
        flops = 4.0 * scores * cfg.head_dim
        # per-element costs calibrated on the golden model's key-tile loop (many small tiles)
        golden = flops / mm + 250.0 * scores / ew
        sdpa = flops / mm + 4.0 * scores / ew
        exact = flops / (2 * mm) + 6.0 * scores / ew
        total += calls * (_GOLDEN_PROVIDERS * golden + sdpa) + exact
    return total


def estimate(cfg: BenchConfig, dev: Any) -> Estimate:
    import psutil

    on_gpu = dev.type == "cuda"
    per_seq = [(bytes_needed(cfg, n, on_gpu), n) for n in cfg.seq]
    (device_bytes, host_bytes), seq = max(per_seq, key=lambda t: t[0][0])
    host_bytes = max(h for (_, h), _ in per_seq)
    device_free = None
    if on_gpu:
        import torch

        with contextlib.suppress(RuntimeError):
            device_free = int(torch.cuda.mem_get_info(dev)[0])
    return Estimate(
        device=str(dev),
        seq=seq,
        device_bytes=int(device_bytes),
        host_bytes=int(host_bytes),
        device_free=device_free,
        host_free=int(psutil.virtual_memory().available),
        seconds=None if on_gpu else cpu_seconds(cfg),
    )


def check_fits(
    cfg: BenchConfig,
    device: str = "auto",
    what: str = "bench",
    options: str = "--seq, --batch, --heads or --head-dim",
) -> Estimate:
    """Resolve the device and refuse (exit 3) a run that would not fit it, naming ``what`` and the
    ``options`` that make it smaller; returns the estimate."""
    dev = resolve_device(device)
    est = estimate(cfg, dev)
    problems = est.problems()
    if problems:
        shape = f"batch {cfg.batch} × heads {cfg.heads} × seq {est.seq} × head dim {cfg.head_dim}"
        n_k = cfg.keys(est.seq)
        if n_k != est.seq:
            shape += f" ({n_k} keys)"
            options = f"--kv-seq, {options}"
        fix = f"pass smaller {options}"
        if est.device == "cpu":
            fix += " (the CPU golden model holds the whole queries × keys score matrix)"
        raise SagebuildError(
            f"{what} {shape} {' and '.join(problems)}: refused before allocating anything",
            fix=fix,
            code=Exit.ENVIRONMENT,
        )
    return est


def check_shape_fits(shape: tuple[int, ...], device: str = "auto", option: str = "--shape") -> Estimate:
    """:func:`check_fits` for one B,H,N,D call (verify's smoke test, its shape given by ``option``):
    one call per provider."""
    from sagebuild.bench.config import shape_config

    cfg = shape_config(*shape)
    return check_fits(cfg, device, what="verify shape", options=f"{option} values")


def Eta(cfg: BenchConfig, est: Estimate, say: Callable[[str], None]) -> Callable[[str], None]:
    """``say``, on a long CPU run with the elapsed time and an ETA added: from the estimate until one
    length has finished, then from the pace (work grows as queries × keys)."""
    if est.seconds is None or est.seconds < LONG_RUN_S:
        return say
    t0, seqs = time.monotonic(), list(cfg.seq)
    work = {n: n * cfg.keys(n) for n in seqs}
    total = sum(work.values())

    def with_eta(message: str) -> None:
        elapsed = time.monotonic() - t0
        m = re.search(r"seq=(\d+)", message)
        seq = int(m.group(1)) if m else None
        done = sum(work[n] for n in seqs[: seqs.index(seq)]) if seq in seqs else 0
        left = elapsed / done * (total - done) if done > 0 else max(0.0, est.seconds - elapsed)
        say(f"{message} (elapsed {_hms(elapsed)}, about {_hms(left)} left)")

    return with_eta


def _hms(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"
