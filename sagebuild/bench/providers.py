"""What the bench times: a ``Provider`` per attention implementation a user could call.

A provider has a ``name`` (the row's id), a ``label`` (how tables name it), ``what()`` (package and
version), ``available(shape, dtype, layout, causal, device)`` (None, or a one-line reason it cannot
run that call), ``build(case)`` (the timed callable, with the launch plan it runs for ours) and
``accuracy(out, ref)`` against the float32 reference. SDPA is the baseline; ours are
``sageattn`` as dispatched, each variant's whole call and kernel-only launch (GPU) or each
variant's golden model (CPU); the peers are in ``bench.peers``.
"""

from __future__ import annotations

import abc
import functools
import itertools
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, NamedTuple, Optional

from sagebuild.benchrecord import AUTO, AUTO_LABEL, SDPA

_SDPA_OPS = {  # the aten op SDPA dispatches to → backend name
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_flash_attention_for_cpu": "cpu-flash",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


class Shape(NamedTuple):
    """One call's sizes as a provider judges them (``packed``: sequences packed as [total, H, D])."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    kv_heads: int
    kv_seq: int
    packed: bool = False


@dataclass
class Case:
    """One length's inputs, handed to every provider: q, k, v in ``layout`` (packed: [total, H, D])."""

    seq: int
    q: Any
    k: Any
    v: Any
    layout: str
    causal: bool
    segments: list[tuple[int, int]] = field(default_factory=list)  # packed (queries, keys)

    @property
    def gpu(self) -> bool:
        return self.q.device.type == "cuda"

    def shape(self) -> Shape:
        if self.segments:
            (total, h, d), hk = self.q.shape, self.k.shape[1]
            return Shape(1, h, total, d, hk, self.k.shape[0], packed=True)
        dims = (1, 2) if self.layout == "NHD" else (2, 1)
        q, k = self.q, self.k
        return Shape(
            q.shape[0], q.shape[dims[1]], q.shape[dims[0]], q.shape[3], k.shape[dims[1]], k.shape[dims[0]]
        )


@dataclass
class Built:
    """A provider's timed callable, the launch plan it runs (ours) and what ran, in words."""

    call: Callable[[], Any]
    plan: Optional[dict[str, Any]] = None
    ran: Optional[str] = None


class Provider(abc.ABC):
    """One attention implementation the bench can time (the module docstring lists the parts)."""

    name = ""
    label = ""
    kind = "whole_call"  # baseline | whole_call | kernel_only | peer
    bounds: Optional[dict[str, float]] = None  # the profile's accuracy bounds (None: not gated)

    def what(self) -> str:
        """The package and version that provides it."""
        from sagebuild._version import __version__

        return f"sagebuild {__version__}"

    def available(self, shape: Shape, dtype: str, layout: str, causal: bool, device: Any) -> Optional[str]:
        """None when it can run this call, else a one-line reason."""
        return None

    @abc.abstractmethod
    def build(self, case: Case) -> Built:
        """The timed callable on this case's inputs, with the plan it runs and what ran."""

    def accuracy(self, out: Any, ref: Any) -> dict[str, Any]:
        """Its output (per-sequence outputs for packed calls) against the float32 reference."""
        from sagebuild.attention import metrics

        return metrics.accuracy(unpack(out) if isinstance(out, list) else out, ref)

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "label": self.label or self.name, "kind": self.kind, "what": self.what()}


def unpack(outs: list[Any]) -> Any:
    """Per-sequence [1, H, L, D] outputs as one packed [total, H, D] tensor."""
    import torch

    return torch.cat([o[0].transpose(0, 1) for o in outs])


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


# ---- SDPA -----------------------------------------------------------------------------------


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
    """The backend SDPA's dispatch picked for these HND inputs: a ``TorchDispatchMode`` recording
    one call sees the op the composite resolved to (math: plain matmuls)."""
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


class Sdpa(Provider):
    """PyTorch SDPA, the baseline; packed calls run once per sequence, as a caller without varlen
    attention would. ``backend`` holds what SDPA's dispatch ran (its first call's)."""

    name = label = SDPA
    kind = "baseline"

    def __init__(self) -> None:
        self.backend: dict[str, Any] = {}

    def what(self) -> str:
        import torch

        return f"torch {torch.__version__} scaled_dot_product_attention"

    def build(self, case: Case) -> Built:
        if case.segments:
            segs = packed_segments(case.segments, case.q, case.k, case.v)
            calls = [sdpa_call(*seg, case.causal) for seg in segs]
            probe, call = segs[0], lambda: [c() for c in calls]
        else:
            call = sdpa_call(case.q, case.k, case.v, case.causal, case.layout)
            nhd = case.layout == "NHD"
            probe = (
                tuple(x.transpose(1, 2) for x in (case.q, case.k, case.v))
                if nhd
                else (case.q, case.k, case.v)
            )
        backend = sdpa_backend(*probe, case.causal)
        self.backend = self.backend or backend
        return Built(call, ran=f"SDPA {backend['name']}")


# ---- ours -----------------------------------------------------------------------------------


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


def kernel_only(
    variant: str, q: Any, k: Any, v: Any, layout: str, causal: bool
) -> tuple[Callable[[], Any], dict[str, Any]]:
    """The variant's attention launch alone on K/V quantized beforehand, and its plan's record."""
    from sagebuild.attention import api

    pv = "fp8" if variant == "qk_int8_pv_fp8" else "fp16"
    plan = api.plan_dense(q, k, v, tensor_layout=layout, is_causal=causal, pv=pv)
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v)) if layout == "NHD" else (q, k, v)
    return api.kernel_only(plan, qh, kh, vh), plan.record()


def plan_ran(plan: Optional[dict[str, Any]]) -> Optional[str]:
    """A launch plan's record in a few words: the variant and launch config that ran, or PyTorch
    SDPA where ``sageattn`` routed the call there (and the tuned shape class that decided)."""
    if not plan:
        return None
    if plan.get("sdpa"):
        return f"PyTorch SDPA (routed: {plan.get('tuned') or 'tuned'})"
    tuned = f"; {plan['tuned']}" if plan.get("tuned") else ""
    return f"{plan['variant']} {plan['config']}{tuned}"


class Ours(Provider):
    """One of our entry points, the whole call (quantization and attention launches): ``fn`` is
    ``sageattn`` or a variant's ``sageattn_qk_int8_pv_*_triton``; ``variant`` "auto" for sageattn."""

    def __init__(self, name: str, fn: Callable[..., Any], variant: str, bounds: Optional[dict[str, float]]):
        self.name, self.label, self.fn, self.variant, self.bounds = name, name, fn, variant, bounds

    def build(self, case: Case) -> Built:
        if case.segments and case.gpu:
            call, plan = packed_call(case.q, case.k, case.v, case.segments, case.causal, self.variant)
            return Built(call, plan, plan_ran(plan))
        if case.segments:  # the golden model, once per sequence
            segs = packed_segments(case.segments, case.q, case.k, case.v)
            return Built(lambda: [self.fn(*seg, is_causal=case.causal) for seg in segs])
        q, k, v, layout, causal = case.q, case.k, case.v, case.layout, case.causal
        call = lambda: self.fn(q, k, v, tensor_layout=layout, is_causal=causal)  # noqa: E731
        return Built(call, *(self.plan(case) if case.gpu else (None, None)))

    def plan(self, case: Case) -> tuple[dict[str, Any], Optional[str]]:
        """The launch plan this call runs, and that in words."""
        from sagebuild.attention.api import launch_plan

        plan = launch_plan(case.q, case.k, case.v, case.layout, case.causal, variant=self.variant)
        return plan, plan_ran(plan)


class Dispatched(Ours):
    """``sageattn`` as a user calls it: whatever its dispatch picks for the call. ``plan`` is the
    hook that says what ran: a dispatch that routes some calls elsewhere (to SDPA, say) reports
    it there (the plan's record and the words in the row's ``ran``)."""

    def __init__(self, fn: Callable[..., Any], bounds: Optional[dict[str, float]]):
        super().__init__(AUTO, fn, "auto", bounds)
        self.label = AUTO_LABEL


class KernelOnly(Provider):
    """A variant's attention launch alone, K/V quantized beforehand (dense GPU calls)."""

    kind = "kernel_only"

    def __init__(self, variant: str, bounds: Optional[dict[str, float]]):
        self.name, self.bounds = variant, bounds
        self.label = f"{variant} (kernel only)"

    def build(self, case: Case) -> Built:
        call, plan = kernel_only(self.name, case.q, case.k, case.v, case.layout, case.causal)
        return Built(call, plan, plan_ran(plan))


class Golden(Ours):
    """A variant's golden model (plain torch, the kernels' arithmetic) on a CPU: accurate, not fast."""

    def __init__(self, variant: str, bounds: Optional[dict[str, float]]):
        from sagebuild.attention import reference

        super().__init__(
            f"golden:{variant}",
            functools.partial(reference.golden_attention, variant=variant),
            variant,
            bounds,
        )

    def what(self) -> str:
        return f"{super().what()} golden model (plain torch)"


def ours(profile: Any, device: Any, packed: bool = False) -> list[Provider]:
    """Our providers on this device: on a GPU sageattn as dispatched, then each variant's whole call
    and (dense calls) kernel-only launch; on a CPU each of the profile's variants' golden model."""
    limits = {variant: asdict(b) for variant, b in profile.accuracy.items()}  # absent: not gated
    if device.type != "cuda":
        return [Golden(var, limits.get(var)) for var in profile.kernels]
    from sagebuild import attention
    from sagebuild.attention import dispatch

    out: list[Provider] = [Dispatched(attention.sageattn, limits.get(dispatch.variant_for_device(device)))]
    for var in dispatch.available_variants(device):  # every variant, so the note says which won
        out.append(Ours(var, getattr(attention, f"sageattn_{var}_triton"), var, limits.get(var)))
        if not packed:  # the kernel-only adapter is dense
            out.append(KernelOnly(var, limits.get(var)))
    return out
