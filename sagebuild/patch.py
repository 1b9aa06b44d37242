"""Safe plug-and-play: route ``torch.nn.functional.scaled_dot_product_attention`` to our kernels.

The wrapper keeps SDPA's signature and uses the quantized kernels only where they are faithful;
every other call goes to the original SDPA, its reason counted (:func:`patch_stats`). Scoped by
``patch_sdpa`` (nesting counted, the outermost exit restores) or process-wide by :func:`enable`.
Under ``torch.compile`` a call passing :func:`decide`'s static checks becomes the custom op
``sagebuild::patched_sdpa``, which decides the rest at run time. docs/plug-and-play.md has details.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sagebuild.attention import plan

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class DeviceSupport:
    """What the quantized kernels can do on one device (from the attention dispatch)."""

    arch: str
    variant: str
    head_dim_ok: Callable[[int], bool]
    # (head dim, q_len, kv_len, batch × query heads, causal, masked) -> why SDPA runs this call
    # (measured faster here), or None: our kernels
    sdpa_faster: Callable[[int, int, int, int, bool, bool], str | None] = lambda d, lq, lk, bh, c, m: None


SupportFn = Callable[[Any], "DeviceSupport | str"]

MIN_Q_LEN = plan.MIN_Q_LEN  # fewer queries go to SDPA (plan.MIN_Q_LEN says why)


def decide(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any,
    dropout_p: float,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
    *,
    support_for: SupportFn,
    gpu_device_types: tuple[str, ...] = ("cuda",),
    grad_enabled: bool = False,
) -> DeviceSupport | str:
    """The device support to accelerate with, or the reason (a short sentence) to pass through: a
    pure function of the arguments' metadata and ``support_for(device)`` (testable on meta tensors).
    The reason is the first of ``attention.reasons``' kernel and SDPA rules, then the device's."""
    from sagebuild.attention import reasons

    call = reasons.Call(
        query,
        key,
        value,
        attn_mask=attn_mask,
        is_causal=bool(is_causal),
        scale=scale,
        devices=gpu_device_types,
        dropout_p=dropout_p,
        enable_gqa=enable_gqa,
        grad_enabled=grad_enabled,
    )
    why = reasons.first_reason(call, sdpa=True)
    if why is not None:
        return why.label
    return _device_verdict(query, key, bool(is_causal), attn_mask is not None, support_for)


def _device_verdict(
    query: Any, key: Any, is_causal: bool, masked: bool, support_for: SupportFn
) -> DeviceSupport | str:
    """The device's support for a call the rules admit, or why not: its arch, its head dims, and
    whether SDPA measured faster there. A key-padding mask (the only one the rules admit) costs our
    kernels at most the unmasked call and SDPA at least, so an unmasked class's verdict holds for
    it where no masked class was measured."""
    support = support_for(query.device)
    if isinstance(support, str):
        return support
    b, hq, lq, d = query.shape
    if not support.head_dim_ok(d):
        return f"head dim {d} not supported on {support.arch}"
    return support.sdpa_faster(d, lq, key.shape[2], b * hq, is_causal, masked) or support


def _dispatch_support(device: Any) -> DeviceSupport | str:
    import torch

    if device.index is None and device.type == "cuda":  # cached per card: "cuda" is the current one
        device = torch.device("cuda", torch.cuda.current_device())
    return _dispatch_support_cached(device)


@functools.lru_cache(maxsize=64)
def _dispatch_support_cached(device: Any) -> DeviceSupport | str:
    try:
        from sagebuild.attention import dispatch, plan
    except Exception as err:  # a broken install must not break the user's model
        return f"attention kernels not importable ({type(err).__name__})"
    try:
        arch = dispatch.device_arch(device)
        variant = dispatch.variant_for_device(device)
    except Exception as err:
        first = str(err).split(";")[0].strip()
        return f"arch not supported: {first[:120]}"
    return DeviceSupport(
        arch=arch,
        variant=variant,
        head_dim_ok=plan.head_dim_ok,
        sdpa_faster=functools.partial(sdpa_faster, arch),
    )


MIN_LEN_ENV_VAR = "SAGEBUILD_PATCH_MIN_LEN"


def sdpa_faster(
    arch: str, d: int, lq: int, lk: int, batch_heads: int, causal: bool, masked: bool
) -> str | None:
    """Why a faithful call stays with SDPA for speed on ``arch``, or None. The call's shape class in
    the tuning record (this machine's and the shipped data: ``sagebuild.tuning``, the data
    ``sageattn`` routes by) measured SDPA faster; a key-padding masked call without a masked class
    takes its unmasked class's verdict (conservative: see ``_device_verdict``). ``SAGEBUILD_ROUTE=0``
    accelerates every call; ``SAGEBUILD_PATCH_MIN_LEN=N`` replaces the record by a length (the
    shorter of q and kv below N stays with SDPA; 0 accelerates every call; not a number: said once,
    the record used)."""
    from sagebuild import knobs
    from sagebuild.attention import plan
    from sagebuild.tuning import record

    env = knobs.raw(MIN_LEN_ENV_VAR)
    if env:
        try:
            need = max(0, int(env))
        except ValueError:
            _warn_once(
                MIN_LEN_ENV_VAR,
                f"{MIN_LEN_ENV_VAR}={env!r} is not a whole number of tokens; using the measured classes",
            )
        else:
            return f"shorter than {need} tokens ({MIN_LEN_ENV_VAR})" if min(lq, lk) < need else None
    if not plan.routing():
        return None
    shape = record.ShapeClass(d, lq, lk, batch_heads, causal, masked)
    found = record.find(arch, shape)
    if found is None and masked:
        found = record.find(arch, record.ShapeClass(d, lq, lk, batch_heads, causal))
    if found is None or not found[1].winner.sdpa:
        return None
    return f"SDPA measured faster on {arch} ({found[0]} class {found[1].shape.label()})"


def _dispatch_kernel(
    q: Any, k: Any, v: Any, is_causal: bool, sm_scale: float, support: DeviceSupport, attn_mask: Any = None
) -> Any:
    """``sageattn`` on HND views (any strides); GQA is native, as every backend's kernel must be."""
    from sagebuild.attention import sageattn

    return sageattn(q, k, v, tensor_layout="HND", is_causal=is_causal, sm_scale=sm_scale, attn_mask=attn_mask)


@dataclass
class _Backend:  # tests swap ``_backend`` for a fake
    support_for: SupportFn
    kernel: Callable[..., Any]
    gpu_device_types: tuple[str, ...] = ("cuda",)


_backend = _Backend(support_for=_dispatch_support, kernel=_dispatch_kernel)


@dataclass(frozen=True)
class PatchStats:
    """A snapshot of what the wrapper did since the last reset."""

    accelerated: int
    passed_through: int
    reasons: Counter[str] = field(default_factory=Counter)
    accelerated_by: Counter[str] = field(default_factory=Counter)  # "arch/variant" → calls
    active: bool = False

    @property
    def total(self) -> int:
        return self.accelerated + self.passed_through

    def to_dict(self) -> dict[str, Any]:
        return {
            "accelerated": self.accelerated,
            "passed_through": self.passed_through,
            "total": self.total,
            "reasons": dict(self.reasons.most_common()),
            "accelerated_by": dict(self.accelerated_by.most_common()),
            "active": self.active,
        }


_stats_lock = threading.Lock()
_reasons: Counter[str] = Counter()  # passed-through calls by reason
_accelerated_by: Counter[str] = Counter()  # accelerated calls by "arch/variant"
_warned: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    with _stats_lock:
        first = key not in _warned
        _warned.add(key)
    if first:
        warnings.warn(f"sagebuild.patch_sdpa: {message}", RuntimeWarning, stacklevel=3)


def _count(verdict: DeviceSupport | str) -> None:
    """One call: passed through for the reason ``verdict``, or accelerated with its support."""
    with _stats_lock:
        if isinstance(verdict, str):
            _reasons[verdict] += 1
        else:
            _accelerated_by[f"{verdict.arch}/{verdict.variant}"] += 1


def patch_stats() -> PatchStats:
    """Calls accelerated vs passed through (with the reasons) since the last :func:`reset_stats`."""
    with _stats_lock:
        accelerated, passed = sum(_accelerated_by.values()), sum(_reasons.values())
        return PatchStats(accelerated, passed, Counter(_reasons), Counter(_accelerated_by), is_active())


def reset_stats() -> None:
    """Zero the counters (e.g. between a baseline and a patched run)."""
    with _stats_lock:
        _reasons.clear()
        _accelerated_by.clear()


_original: Callable[..., Any] | None = None


def _call_original(*args: Any) -> Any:
    """The original SDPA on the wrapper's eight arguments (query ... enable_gqa), as passed."""
    query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa = args
    original = _original
    if original is None:  # called after restore through a stale reference
        import torch

        original = torch.nn.functional.scaled_dot_product_attention
        if original is scaled_dot_product_attention:
            raise RuntimeError("sagebuild.patch: the original scaled_dot_product_attention was lost")
    kwargs: dict[str, Any] = {} if scale is None else {"scale": scale}
    if enable_gqa:
        kwargs["enable_gqa"] = enable_gqa
    return original(query, key, value, attn_mask, dropout_p, is_causal, **kwargs)


# Trace-time support for any device: Dynamo cannot trace the device's arch, so the op decides it
_DEFERRED = DeviceSupport(arch="deferred", variant="deferred", head_dim_ok=lambda d: True)


def _verdict(args: tuple, support_for: SupportFn) -> DeviceSupport | str:
    """``decide`` for one call's arguments with the installed backend's device types."""
    import torch

    return decide(
        *args,
        support_for=support_for,
        gpu_device_types=_backend.gpu_device_types,
        grad_enabled=torch.is_grad_enabled(),
    )


# ``sagebuild::patched_sdpa``: defined by ``_install`` (eagerly: never while Dynamo traces)
_op: Callable[..., Any] | None = None


def _define_op() -> None:
    global _op
    if _op is not None:
        return
    import torch

    # the schema spelled out: this module's annotations are strings (no torch at import)
    schema = (
        "(Tensor query, Tensor key, Tensor value, Tensor? attn_mask, bool is_causal, float? scale, "
        "bool enable_gqa) -> Tensor"
    )

    def run(query, key, value, attn_mask, is_causal, scale, enable_gqa):  # type: ignore[no-untyped-def]
        out = _eager_sdpa((query, key, value, attn_mask, 0.0, is_causal, scale, enable_gqa))
        return out.contiguous()  # the fake's layout; a fresh tensor, never an input

    _op = torch.library.custom_op("sagebuild::patched_sdpa", run, mutates_args=(), schema=schema)
    _op.register_fake(lambda query, key, value, *_: query.new_empty((*query.shape[:-1], value.shape[-1])))


def scaled_dot_product_attention(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Any:
    """SDPA with the same signature; quantized kernels when faithful, the original otherwise."""
    import torch

    args = (query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if torch.compiler.is_compiling():
        # traced: the static half of ``decide`` now, the device-dependent rest in the op at run time
        if isinstance(_verdict(args, lambda device: _DEFERRED), str) or _op is None:
            return _call_original(*args)
        return _op(query, key, value, attn_mask, bool(is_causal), scale, bool(enable_gqa))
    if torch.jit.is_tracing() or torch.jit.is_scripting():
        return _call_original(*args)
    return _eager_sdpa(args)


def _eager_sdpa(args: tuple) -> Any:
    """The decision and the call, eagerly (the wrapper's body, and the op's at run time)."""
    verdict = _verdict(args, _backend.support_for)
    if isinstance(verdict, str):
        _count(verdict)
        return _call_original(*args)
    query, key, value, attn_mask, _, is_causal, scale, _ = args
    sm_scale = scale if scale is not None else query.shape[-1] ** -0.5
    masked = {} if attn_mask is None else {"attn_mask": attn_mask}  # a kernel may take no mask
    try:
        out = _backend.kernel(query, key, value, bool(is_causal), float(sm_scale), verdict, **masked)
    except Exception as err:  # never break the user's model: fall back, say why once
        reason = f"kernel raised {type(err).__name__}"
        _warn_once(
            reason,
            f"the quantized kernel failed ({type(err).__name__}: {err}); "
            "falling back to PyTorch SDPA for such calls",
        )
        _count(reason)
        return _call_original(*args)
    _count(verdict)
    return out if out.dtype == query.dtype else out.to(query.dtype)


_state_lock = threading.RLock()
_depth = 0
_enabled = False


def is_active() -> bool:
    """True while the wrapper is installed (inside a ``patch_sdpa`` block or after :func:`enable`)."""
    with _state_lock:
        return _original is not None


def _install() -> None:
    global _original
    import torch

    fn = torch.nn.functional
    _define_op()
    if _original is None:
        current = fn.scaled_dot_product_attention
        _original = current if current is not scaled_dot_product_attention else None
        fn.scaled_dot_product_attention = scaled_dot_product_attention


def _restore() -> None:
    global _original
    if _original is None:
        return
    import torch

    fn = torch.nn.functional
    if fn.scaled_dot_product_attention is scaled_dot_product_attention:
        fn.scaled_dot_product_attention = _original
    else:
        warnings.warn(
            "sagebuild.patch_sdpa: torch.nn.functional.scaled_dot_product_attention was replaced by "
            "someone else while the patch was active; leaving their function in place",
            RuntimeWarning,
            stacklevel=4,
        )
    _original = None


def _update(depth: int = 0, enabled: bool | None = None) -> None:
    """Change the scope depth or the enable flag; the wrapper is installed while either holds."""
    global _depth, _enabled
    with _state_lock:
        _depth += depth
        _enabled = _enabled if enabled is None else enabled
        if _depth or _enabled:
            _install()
        else:
            _restore()


def enable() -> None:
    """Install the wrapper for the rest of the process (idempotent); undo with :func:`disable`."""
    _update(enabled=True)


def disable() -> None:
    """Undo :func:`enable`. Active ``patch_sdpa`` blocks keep the wrapper until they exit."""
    _update(enabled=False)


class _Scope(contextlib.ContextDecorator):
    """One ``patch_sdpa()`` scope: reusable and re-entrant (the depth is process-wide; a generator
    context manager is neither), and its ``__exit__`` is the frame ``_restore``'s warning skips."""

    def __enter__(self) -> _Scope:
        _update(+1)
        return self

    def __exit__(self, *exc: object) -> None:
        _update(-1)


def patch_sdpa(func: F | None = None) -> Any:
    """Context manager and decorator routing SDPA through the safe wrapper (``with patch_sdpa():``,
    ``@patch_sdpa()``, bare ``@patch_sdpa``); the outermost exit restores, also on exceptions."""
    return _Scope()(func) if func is not None else _Scope()
