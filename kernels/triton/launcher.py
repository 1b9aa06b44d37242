"""Re-launching a compiled Triton kernel without Triton's per-call argument binding.

``fn[grid](*args)`` binds and specialises every argument on every call: with ~40 arguments
that is tens of microseconds of Python per launch, and at small attention shapes (a few µs of
GPU work) the host path is the whole call. The caller
knows when two launches specialise identically — same shapes, strides, dtypes and pointer
alignment give the same compiled kernel — and passes a key saying so. The first launch with a
key goes through Triton (compiling if needed) and keeps the compiled kernel; later launches call
its launcher directly with the same argument order Triton itself uses.

Not used under Triton's CPU interpreter, nor while a launch hook is installed (profilers such as
Proton rely on Triton's own path), nor for kernels whose constexpr parameters are not all
trailing: those take Triton's path every time.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Hashable, Optional, Sequence

import torch

try:  # Triton ≥ 3.4; without it the binder-free path stays off (see hooks_installed)
    from triton import knobs
except ImportError:  # pragma: no cover - older Triton
    knobs = None

# A CUDA/HIP launch grid's second and third dims hold at most this many programs each.
GRID_YZ_MAX = 65535

# Bounded: one entry per distinct (kernel, key, device); a process serving many shapes
# recompiles nothing after eviction (Triton's own cache still holds the kernel) — it only
# pays Triton's binder again for that key.
MAX_ENTRIES = 2048

_compiled: dict[tuple, Any] = {}
_constexprs: dict[tuple, dict] = {}
_trailing_constexprs: dict[int, bool] = {}


try:  # the current stream's handle as Triton's own driver reads it: no Stream object built
    from torch._C import _cuda_getCurrentRawStream as raw_stream
except ImportError:  # CPU-only torch builds (the fast path never runs there)

    def raw_stream(dev: int) -> int:
        return torch.cuda.current_stream(dev).cuda_stream


def hooks_installed() -> bool:
    """Whether a launch hook is set: Triton ≥ 3.5 keeps them in (possibly empty) HookChains,
    older releases in plain attributes that are None when unset. Without ``triton.knobs`` the
    hooks cannot be read, so they are assumed set (Triton's own path every time)."""
    if knobs is None:
        return True
    rt = knobs.runtime
    return any(
        h is not None and getattr(h, "calls", True) for h in (rt.launch_enter_hook, rt.launch_exit_hook)
    )


def _constexprs_trailing(fn: Any, n_args: int, constexprs: dict[str, Any]) -> bool:
    """Whether ``args + constexpr values`` (in the given order) is the kernel's full signature."""
    ok = _trailing_constexprs.get(id(fn))
    if ok is None:
        names = list(fn.arg_names)
        ok = len(names) == n_args + len(constexprs) and names[n_args:] == list(constexprs)
        _trailing_constexprs[id(fn)] = ok
    return ok


# ``start_recording``: this thread's launches are also appended to ``_tls.recording`` (per
# thread: another thread's launches must not land in a recorded call)
_tls = threading.local()


def start_recording(into: list) -> None:
    """Append every launch of this thread to ``into`` until
    ``stop_recording``, issuing them with torch's dispatch modes off (``attention.replay``
    watches the ops between them)."""
    _tls.recording = into


def stop_recording() -> None:
    _tls.recording = None


def watch_compiled(into: Optional[list]) -> None:
    """Append the compiled kernel of every launch of this thread that goes through Triton (a
    signature's first) to ``into`` (None stops): ``sagebuild tune`` reads their registers, spills
    and scratch before timing a candidate. Under the CPU interpreter Triton returns no kernel."""
    _tls.compiled = into


def _watched(kernel: Any) -> None:
    watch = getattr(_tls, "compiled", None)
    if watch is not None and kernel is not None:
        watch.append(kernel)


def launch(
    fn: Any,
    grid: tuple[int, ...],
    args: tuple,
    constexprs: dict[str, Any],
    *,
    key: Optional[Hashable] = None,
    **options: Any,
) -> None:
    """``fn[grid](*args, **constexprs, **options)``, Triton's binder skipped on a key hit.

    ``options`` are Triton's launch options (num_warps, num_stages, maxnreg). ``key`` must
    determine everything Triton specialises on apart from ``constexprs`` and ``options`` (which
    are part of the cache key here): argument dtypes, which integers equal 1 or are multiples
    of 16, and which pointers are 16-byte aligned. None launches through Triton every time.
    """
    recording = getattr(_tls, "recording", None)
    if recording is not None:
        from torch.utils._python_dispatch import _disable_current_modes

        recording.append(("launch", fn, grid, args, constexprs, key, options))
        with _disable_current_modes():
            _launch(fn, grid, args, constexprs, key, options)
        return
    _launch(fn, grid, args, constexprs, key, options)


def _launch(
    fn: Any, grid: tuple, args: tuple, constexprs: dict, key: Optional[Hashable], options: dict
) -> None:
    if key is not None and args and isinstance(args[0], torch.Tensor) and args[0].is_cuda:
        dev = torch.cuda.current_device()
        consts = tuple(constexprs.values())
        cache_key = _cache_key(fn, key, consts, options, dev)
        kernel = _compiled.get(cache_key)
        if kernel is not None and not hooks_installed():
            run_bound(_bound(kernel, grid, consts), args, raw_stream(dev))
            return
        kernel = fn[grid](*args, **constexprs, **options)
        _watched(kernel)
        if kernel is not None and _constexprs_trailing(fn, len(args), constexprs):
            if len(_compiled) >= MAX_ENTRIES:
                _compiled.clear()
            _compiled[cache_key] = kernel
        return
    _watched(fn[grid](*args, **constexprs, **options))


def bind(
    fn: Any, grid: tuple, constexprs: dict, key: Optional[Hashable], options: dict, device: int
) -> Optional[tuple]:
    """A launch that ran through ``launch`` with a key, bound to its compiled kernel for
    ``run_bound`` (``attention.replay``: no cache key to build and hash per launch), or None where
    the launch has no compiled kernel kept (no key, CPU interpreter, constexprs not trailing)."""
    if key is None:
        return None
    consts = tuple(constexprs.values())
    kernel = _compiled.get(_cache_key(fn, key, consts, options, device))
    return None if kernel is None else _bound(kernel, grid, consts)


def _cache_key(fn: Any, key: Hashable, consts: tuple, options: dict, device: int) -> tuple:
    """Which compiled kernel a keyed launch takes: the kernel, the caller's key, the constexpr
    values, the launch options and the device."""
    return (id(fn), key, consts, tuple(options.items()), device)


def _bound(kernel: Any, grid: tuple, consts: tuple) -> tuple:
    g0, g1, g2 = (*grid, 1, 1)[:3]  # a 1- or 2-D grid's missing dims are 1
    return (kernel.run, g0, g1, g2, kernel.function, kernel.packed_metadata, consts)


def run_bound(bound: tuple, args: Sequence[Any], stream: int) -> None:
    """Issue a bound launch on ``stream``: the compiled kernel's launcher with the argument order
    Triton itself uses (the caller checks ``hooks_installed``)."""
    run, g0, g1, g2, function, metadata, consts = bound
    run(g0, g1, g2, stream, function, metadata, None, None, None, *args, *consts)


def constexprs(fn: Any, key: Optional[Hashable], build: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A launch's constexpr dict, built once per (kernel, key): building ~20 entries is a visible
    part of a small call's host time. ``key`` must fix every argument they derive from (the API's
    plan key does; callers add what else decides them); None builds it every time."""
    if key is None:
        return build()
    cache_key = (id(fn), key)
    consts = _constexprs.get(cache_key)
    if consts is None:
        if len(_constexprs) >= MAX_ENTRIES:
            _constexprs.clear()
        consts = _constexprs[cache_key] = build()
    return consts


def forget_constexprs() -> None:
    """Drop the memoised constexpr dicts (module-level tuning knobs changed at run time)."""
    _constexprs.clear()


def cdiv(a: int, b: int) -> int:
    """Ceiling division for host code (grids, block counts): ``triton.cdiv`` is a
    ``constexpr_function`` in Triton 3.6, whose wrapper costs microseconds per call on the host
    path of every attention call."""
    return -(-a // b)


def cached_launches() -> int:
    """How many (kernel, key) pairs launch without the binder (for tests and diagnostics)."""
    return len(_compiled)


__all__ = [
    "GRID_YZ_MAX",
    "MAX_ENTRIES",
    "bind",
    "cached_launches",
    "cdiv",
    "constexprs",
    "forget_constexprs",
    "hooks_installed",
    "launch",
    "raw_stream",
    "run_bound",
    "start_recording",
    "stop_recording",
    "watch_compiled",
]
