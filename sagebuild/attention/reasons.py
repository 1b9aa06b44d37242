"""Whether the quantized kernels can run an attention call: one ordered list of rules, each giving
the reason it cannot (the idea of xformers' ``not_supported_reasons``).

Every rule has a scope. ``kernel`` rules are what the kernels can run: ``validate`` raises the first
such reason as an ``AttentionInputError`` (its message and fix). ``sdpa`` rules are what a faithful
stand-in for torch's SDPA must also leave to SDPA (dropout, gradients, decode steps, SDPA's own mask
and GQA rules): ``patch.decide`` applies both scopes and counts the first reason's ``label``.

Rules run in stages (inputs, then a dense call's shapes, then the call's options); a stage that fails
ends the list, since later rules read what it checked. The rules read only metadata (meta tensors
do), and Dynamo traces them under ``torch.compile`` (``Reason`` and ``Call`` are named tuples for it).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import torch

from sagebuild.attention import plan
from sagebuild.attention.plan import AttentionInputError
from sagebuild.kernels.triton import launcher

KERNEL, SDPA = "kernel", "sdpa"
DENSE_LAYOUTS = ("HND", "NHD")
DTYPES = ("float16", "bfloat16")
_TORCH_DTYPES = tuple(getattr(torch, name) for name in DTYPES)
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not subclasses: their own semantics stay with SDPA
_SDPA_RUNS = "no change needed: SDPA runs this call"  # the fix of an SDPA rule's reason
MASK_KINDS = {  # uint8: a boolean mask's bytes, as the API hands it on (nonzero attends)
    "bool": "bool",
    "uint8": "bool",
    "float16": "additive",
    "bfloat16": "additive",
    "float32": "additive",
}


class Reason(NamedTuple):
    """Why the kernels do not run a call."""

    code: str  # the rule's name
    label: str  # short and stable: ``patch_stats`` counts passed-through calls by it
    message: str  # one line: what is wrong, with the values
    fix: str  # what to do

    def error(self) -> AttentionInputError:
        return AttentionInputError(self.message, self.fix)


class Call(NamedTuple):
    """One call as the rules read it. ``layout``: the dense tensors' "HND" or "NHD"; ``packed``:
    ``sageattn_varlen``'s [total, H, D] tensors; ``devices``: the device types the kernels may run on
    here. The defaults are ``sageattn``'s: GQA is native, no gradients, no dropout."""

    q: Any
    k: Any
    v: Any
    layout: Any = "HND"
    packed: bool = False
    attn_mask: Any = None
    is_causal: bool = False
    scale: Any = None
    devices: tuple[str, ...] = ("cuda",)
    dropout_p: float = 0.0
    enable_gqa: bool = True
    grad_enabled: bool = False
    shapes: Any = None  # q's, k's and v's (B, H, N, D), read once the inputs pass (``_measured``)


Rule = Callable[[Call], Optional[Reason]]
_RULES: list[tuple[str, str, Rule]] = []  # (stage, scope, rule), in order
STAGES = ("inputs", "shapes", "options")


def _rule(stage: str, scope: str = KERNEL) -> Callable[[Rule], Rule]:
    def add(fn: Rule) -> Rule:
        _RULES.append((stage, scope, fn))
        return fn

    return add


def _stages(call: Call, sdpa: bool) -> tuple[tuple[Rule, ...], ...]:
    """The rules that apply to ``call``, stage by stage (``_BY_CALL``, indexed once at import)."""
    return _BY_CALL[(call.packed, sdpa)]


def _select(packed: bool, sdpa: bool) -> tuple[tuple[Rule, ...], ...]:
    """The rules of a kind of call, stage by stage (a packed call has no dense shapes)."""
    scopes = (KERNEL, SDPA) if sdpa else (KERNEL,)
    stages = [s for s in STAGES if not (s == "shapes" and packed)]
    return tuple(tuple(fn for st, sc, fn in _RULES if st == s and sc in scopes) for s in stages)


def first_reason(call: Call, sdpa: bool = False) -> Optional[Reason]:
    """The first reason the kernels (``sdpa``: the SDPA patch) do not run ``call``; None if they do."""
    for rules in _stages(call, sdpa):
        for rule in rules:
            why = rule(call)
            if why is not None:
                return why
        call = _measured(call)
    return None


def not_supported_reasons(call: Call, sdpa: bool = False) -> list[Reason]:
    """Every reason, in order, up to the first stage that fails (later stages read what it checks)."""
    for rules in _stages(call, sdpa):
        found = [why for why in [rule(call) for rule in rules] if why is not None]
        if found:
            return found
        call = _measured(call)
    return []


def _measured(call: Call) -> Call:
    """``call`` with its tensors' shapes read once, as (B, H, N, D) for a dense call (the later
    stages' rules read them on every patched SDPA call)."""
    if call.shapes is not None:
        return call
    if call.packed:
        shapes = (tuple(call.q.shape), tuple(call.k.shape), tuple(call.v.shape))
    else:
        shapes = (bhnd(call, call.q), bhnd(call, call.k), bhnd(call, call.v))
    return Call(*call[:-1], shapes)  # not ``_replace``: Dynamo traces a plain construction


def raise_first(call: Call) -> None:
    """Raise the first kernel reason as an ``AttentionInputError`` (validate's errors)."""
    why = first_reason(call)
    if why is not None:
        raise why.error()


def _named(call: Call) -> tuple[tuple[str, Any], ...]:
    return (("q", call.q), ("k", call.k), ("v", call.v))


def _dtype(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def bhnd(call: Call, t: Any) -> tuple[int, int, int, int]:
    """A dense tensor's (batch, heads, tokens, head dim), whatever its layout."""
    b, x, y, d = t.shape
    return (b, y, x, d) if call.layout == "NHD" else (b, x, y, d)


# --- inputs: what every call's tensors must be -------------------------------------------------


@_rule("inputs")
def _layout(c: Call) -> Optional[Reason]:
    if c.packed or c.layout in DENSE_LAYOUTS:
        return None
    return Reason(
        "layout",
        f"tensor_layout {c.layout!r}",
        "tensor_layout must be 'HND' (batch, heads, seq, dim) or 'NHD' (batch, seq, heads, dim), "
        f"got {c.layout!r}",
        "pass tensor_layout='HND' or 'NHD'",
    )


@_rule("inputs")
def _tensor(c: Call) -> Optional[Reason]:
    if isinstance(c.q, torch.Tensor) and isinstance(c.k, torch.Tensor) and isinstance(c.v, torch.Tensor):
        return None  # the common case first: these rules run on every patched SDPA call
    for name, t in _named(c):
        if not isinstance(t, torch.Tensor):
            fix = "pass torch tensors on the GPU"
            return Reason(
                "tensor", "non-tensor q/k/v", f"{name} must be a torch.Tensor, got {type(t).__name__}", fix
            )
    return None


@_rule("inputs", SDPA)
def _plain(c: Call) -> Optional[Reason]:
    if type(c.q) in _PLAIN and type(c.k) in _PLAIN and type(c.v) in _PLAIN:
        return None
    for name, t in _named(c):
        if type(t) not in _PLAIN:
            return Reason(
                "plain",
                "tensor subclass (not a plain torch.Tensor)",
                f"{name} is a {type(t).__name__}, a torch.Tensor subclass: its semantics stay with SDPA",
                "pass plain tensors to accelerate the call",
            )
    return None


@_rule("inputs")
def _nested(c: Call) -> Optional[Reason]:
    if not (c.q.is_nested or c.k.is_nested or c.v.is_nested):
        return None
    for name, t in _named(c):
        if t.is_nested:
            fix = "pass padded (B, H, N, D) tensors, or packed ones to sageattn_varlen"
            return Reason(
                "nested", "nested tensor", f"{name} is a nested tensor; the kernels take dense tensors", fix
            )
    return None


@_rule("inputs")
def _device(c: Call) -> Optional[Reason]:
    kind = c.q.device.type
    if kind in c.devices:
        return None
    label = f"{kind} tensors (needs CUDA/HIP)"
    if kind == "cpu":
        return Reason(
            "device",
            label,
            "the quantized attention kernels run on a GPU; the inputs are on the CPU",
            "move q, k and v to the GPU (.cuda()), or use torch's SDPA on the CPU",
        )
    return Reason(
        "device",
        label,
        f"unsupported device type {kind!r}; the kernels run on CUDA and ROCm GPUs",
        "move q, k and v to a CUDA/ROCm device",
    )


@_rule("inputs")
def _same_device(c: Call) -> Optional[Reason]:
    if c.k.device == c.q.device and c.v.device == c.q.device:
        return None
    return Reason(
        "same_device",
        "q/k/v on different devices",
        f"q, k and v must be on one device, got {sorted({str(t.device) for _, t in _named(c)})}",
        "move them to the same GPU with .to(device)",
    )


@_rule("inputs")
def _dtypes(c: Call) -> Optional[Reason]:
    if c.q.dtype in _TORCH_DTYPES and c.k.dtype in _TORCH_DTYPES and c.v.dtype in _TORCH_DTYPES:
        return None
    for name, t in _named(c):
        if t.dtype in _TORCH_DTYPES:
            continue
        dtype = _dtype(t)
        label = f"dtype {dtype} (needs float16/bfloat16)"
        if dtype == "float32":
            return Reason(
                "dtype",
                label,
                f"{name} is float32; the quantized kernels take float16 or bfloat16 only (float32 inputs "
                "are the known NaN trap of plugging SageAttention into fp32 models)",
                "cast q, k and v with .half() or .bfloat16(), or call torch's SDPA for float32",
            )
        return Reason(
            "dtype",
            label,
            f"{name} has dtype torch.{dtype}; supported: float16, bfloat16",
            "cast q, k and v to torch.float16 or torch.bfloat16",
        )
    return None


@_rule("inputs")
def _same_dtype(c: Call) -> Optional[Reason]:
    if c.k.dtype == c.q.dtype and c.v.dtype == c.q.dtype:
        return None
    return Reason(
        "same_dtype",
        "q/k/v dtypes differ",
        f"q, k and v must share one dtype, got {sorted({str(t.dtype) for _, t in _named(c)})}",
        "cast them to the same dtype",
    )


@_rule("inputs")
def _rank(c: Call) -> Optional[Reason]:
    rank = 3 if c.packed else 4
    if c.q.dim() == rank and c.k.dim() == rank and c.v.dim() == rank:
        return None
    for name, t in _named(c):
        if t.dim() == rank:
            continue
        if c.packed:
            label = f"{t.dim()}-D inputs (needs 3-D total,H,D)"
            rule, fix = (
                "be packed as (total_tokens, heads, dim) for sageattn_varlen",
                "concatenate the sequences along dim 0",
            )
        else:
            label = f"{t.dim()}-D inputs (needs 4-D B,H,N,D)"
            dims = "B, H, N, D" if c.layout == "HND" else "B, N, H, D"
            rule = f"have 4 dims ({dims} for tensor_layout={c.layout!r})"
            fix = "reshape to 4 dims, or use sageattn_varlen for packed sequences"
        return Reason("rank", label, f"{name} must {rule}, got shape {tuple(t.shape)}", fix)
    return None


@_rule("inputs")
def _head_dims(c: Call) -> Optional[Reason]:
    dims = (c.q.shape[-1], c.k.shape[-1], c.v.shape[-1])
    if dims[0] == dims[1] == dims[2]:
        return None
    return Reason(
        "head_dims",
        "k/v head dim differs from q's",
        "head dims differ: q {}, k {}, v {}".format(*dims),
        "q, k and v must share the head dim",
    )


@_rule("inputs")
def _head_dim(c: Call) -> Optional[Reason]:
    d = c.q.shape[-1]
    if plan.head_dim_ok(d):
        return None
    err = plan.head_dim_error(d)
    return Reason("head_dim", f"head dim {d} not supported", err.message, err.fix or "")


# --- shapes: a dense call's [B, H, N, D] views agree -------------------------------------------


@_rule("shapes")
def _batch(c: Call) -> Optional[Reason]:
    bq, bk, bv = c.shapes[0][0], c.shapes[1][0], c.shapes[2][0]
    if bq == bk == bv:
        return None
    return Reason(
        "batch",
        "q/k/v batch or length mismatch",
        f"batch sizes differ: q {bq}, k {bk}, v {bv}",
        "pass q, k, v with the same batch size",
    )


@_rule("shapes")
def _kv_len(c: Call) -> Optional[Reason]:
    nk, nv = c.shapes[1][2], c.shapes[2][2]
    if nk == nv:
        return None
    return Reason(
        "kv_len",
        "q/k/v batch or length mismatch",
        f"k and v have different sequence lengths ({nk} vs {nv}) for tensor_layout={c.layout!r}",
        "check tensor_layout: 'HND' is (batch, heads, seq, dim), 'NHD' is (batch, seq, heads, dim)",
    )


@_rule("shapes", SDPA)
def _gqa_flag(c: Call) -> Optional[Reason]:
    hq, hk = c.shapes[0][1], c.shapes[1][1]
    if c.enable_gqa or hq == hk:
        return None
    return Reason(
        "gqa_flag",
        "heads differ without enable_gqa",
        f"q has {hq} heads and k {hk}, and enable_gqa is False (SDPA refuses that)",
        "pass enable_gqa=True for grouped-query attention",
    )


@_rule("shapes")
def _heads(c: Call) -> Optional[Reason]:
    return heads_reason(c.shapes[0][1], c.shapes[1][1], c.shapes[2][1], c.layout)


def heads_reason(hq: int, hk: int, hv: int, layout: str) -> Optional[Reason]:
    """K and V head counts agree and divide Q's (GQA/MQA); ``layout`` ("" for packed calls) is
    named in the message, since a swapped layout is the usual cause."""
    if hk != hv:
        return Reason(
            "heads",
            "k/v head counts differ",
            f"k and v have different head counts ({hk} vs {hv})",
            "k and v must have the same number of heads",
        )
    if hk == 0 or hq % hk:
        hint = f" — is tensor_layout={layout!r} right?" if layout else ""
        return Reason(
            "heads",
            "heads_q not a multiple of heads_kv",
            f"q has {hq} heads and k/v {hk}: q's heads must be a multiple of k's (GQA/MQA){hint}",
            "use as many KV heads as query heads, or a divisor of them",
        )
    return None


@_rule("shapes")
def _grid(c: Call) -> Optional[Reason]:
    b, h = c.shapes[0][:2]
    return grid_reason(b, h, "batch entries")


def grid_reason(batch: int, heads: int, what: str) -> Optional[Reason]:
    """The kernels launch one grid row per head and one grid layer per batch entry (sequence),
    and index each (batch, head) pair by an int32 (expanded views make huge counts cheap)."""
    top = launcher.GRID_YZ_MAX
    if batch <= top and heads <= top and batch * heads < 2**31:
        return None
    return Reason(
        "grid",
        f"{what} × heads beyond the kernels' grid",
        f"{batch} {what} × {heads} heads: the kernels take at most {top} of each, and fewer than 2³¹ "
        "pairs, per call",
        f"split the call into chunks of at most {top} {what} (and heads)",
    )


@_rule("shapes")
def _empty(c: Call) -> Optional[Reason]:
    (b, _, nq, _), nk = c.shapes[0], c.shapes[1][2]
    if b and nq and nk:
        return None
    return Reason(
        "empty",
        "empty tensor",
        f"empty input: q {c.shapes[0]}, k {c.shapes[1]} (as B, H, N, D)",
        "pass at least one batch entry, one query and one key",
    )


# --- options: the mask, dropout, gradients, causality, length and scale ------------------------

# Tokens per sequence (dense) or packed in all (varlen): the kernels index tokens by int32, packed
# FP8 V's positions add up to 16 per sequence (``layout.packed_v_tokens``), and tiles run past the
# end by a block. Element offsets are 64-bit: any tensor size that fits in memory is served.
MAX_TOKENS = 2**31 - 2**21


@_rule("options")
def _tokens(c: Call) -> Optional[Reason]:
    """At most ``MAX_TOKENS`` tokens (an options rule: packed calls have no shapes stage)."""
    if c.packed:
        count, what = max(c.shapes[0][0], c.shapes[1][0]), "packed tokens"
    else:
        count, what = max(c.shapes[0][2], c.shapes[1][2]), "tokens per sequence"
    if count <= MAX_TOKENS:
        return None
    return Reason(
        "tokens",
        f"{what} beyond int32 token indices",
        f"{count:,} {what}: the kernels index tokens by 32-bit integers and take at most {MAX_TOKENS:,}",
        "split the sequences (or the packed batch) into calls of fewer tokens",
    )


@_rule("options")
def _mask(c: Call) -> Optional[Reason]:
    if c.attn_mask is None:
        return None
    b, h, nq, _ = c.shapes[0]
    return mask_reason(c.attn_mask, (b, h, nq, c.shapes[1][2]), c.q.device)


def mask_reason(mask: Any, bhqk: tuple[int, int, int, int], device: Any) -> Optional[Reason]:
    """What the kernels take as an ``attn_mask`` (SDPA's rules: True attends, floats are added to
    the scaled scores): a boolean or float tensor on q's device, broadcastable to [B, H, N_q, N_k]."""
    kind = _dtype(mask) if isinstance(mask, torch.Tensor) else None
    if kind not in MASK_KINDS:
        return Reason(
            "mask",
            f"attn_mask dtype {kind} (needs bool or a float dtype)" if kind else "attn_mask not a tensor",
            "attn_mask must be a boolean or float16/bfloat16/float32 tensor, got "
            + (kind or type(mask).__name__),
            "pass a boolean mask (True attends) or an additive float mask, as for torch's SDPA",
        )
    if mask.device != device:
        fix = "move the mask to q's device with .to(q.device)"
        return Reason(
            "mask", "attn_mask on another device", f"attn_mask is on {mask.device}, q on {device}", fix
        )
    if mask.dim() > 4 or any(n not in (1, want) for n, want in zip(mask.shape[::-1], bhqk[::-1])):
        return Reason(
            "mask",
            "attn_mask does not broadcast to [B, H, N_q, N_k]",
            f"attn_mask of shape {tuple(mask.shape)} does not broadcast to [B, H, N_q, N_k] = {list(bhqk)}",
            "pass a mask broadcastable to (batch, heads, queries, keys), e.g. [B, 1, 1, N_k] for key padding",
        )
    return None


@_rule("options", SDPA)
def _sdpa_mask(c: Call) -> Optional[Reason]:
    """SDPA's own mask rules, and the patch's measured case: the same key-padding row for every query
    (it costs at most the unmasked call, so the unmasked crossover holds)."""
    mask = c.attn_mask
    if mask is None:
        return None
    fix = _SDPA_RUNS
    if type(mask) is not torch.Tensor:
        return Reason("sdpa_mask", "attn_mask not a plain tensor", "attn_mask is a tensor subclass", fix)
    if c.is_causal:
        return Reason(
            "sdpa_mask", "attn_mask with is_causal (SDPA refuses both)", "attn_mask with is_causal", fix
        )
    if mask.dtype != torch.bool and mask.dtype != c.q.dtype:
        label = f"attn_mask dtype {_dtype(mask)} (needs bool or q's dtype)"
        return Reason("sdpa_mask", label, label, fix)
    if mask.dim() >= 2 and mask.shape[-2] > 1 and mask.stride(-2) != 0:
        label = "attn_mask varies along queries (key-padding masks only)"
        return Reason(
            "sdpa_mask", label, label, "pass a [B, 1, 1, N_k] key-padding mask to accelerate the call"
        )
    return None


@_rule("options", SDPA)
def _dropout(c: Call) -> Optional[Reason]:
    if c.dropout_p == 0.0:
        return None
    return Reason(
        "dropout",
        "dropout_p > 0",
        f"dropout_p={c.dropout_p}: the kernels take no dropout",
        "pass dropout_p=0",
    )


@_rule("options", SDPA)
def _grad(c: Call) -> Optional[Reason]:
    if not (c.grad_enabled and (c.q.requires_grad or c.k.requires_grad or c.v.requires_grad)):
        return None
    label = "inputs require grad (kernels are inference-only)"
    return Reason("grad", label, label, "run inference under torch.no_grad() or torch.inference_mode()")


@_rule("options", SDPA)
def _causal_square(c: Call) -> Optional[Reason]:
    nq, nk = c.shapes[0][2], c.shapes[1][2]
    if not c.is_causal or nq == nk:
        return None
    return Reason(
        "causal_square",
        "is_causal with q_len != kv_len",
        f"is_causal with {nq} queries and {nk} keys: SDPA aligns the causal mask top-left, the kernels "
        "bottom-right",
        _SDPA_RUNS,
    )


@_rule("options", SDPA)
def _decode(c: Call) -> Optional[Reason]:
    nq, least = c.shapes[0][2], plan.MIN_Q_LEN
    if nq >= least:
        return None
    label = f"q_len {nq} < {least} (decode: quantizing all keys for a few queries is slower than SDPA)"
    return Reason("decode", label, label, _SDPA_RUNS)


@_rule("options")
def _scale(c: Call) -> Optional[Reason]:
    if c.scale is None:
        return None
    try:
        plan.check_sm_scale(c.scale, c.q.shape[-1])
    except AttentionInputError as err:
        return Reason("scale", "non-positive or non-finite scale", err.message, err.fix or "")
    return None


# every kind of call's rules, selected once: decide runs them on every patched SDPA call, and a
# plain lookup is what Dynamo traces best
_BY_CALL = {(packed, sdpa): _select(packed, sdpa) for packed in (False, True) for sdpa in (False, True)}
