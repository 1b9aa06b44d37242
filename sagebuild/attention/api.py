"""Public attention functions, with upstream SageAttention's names and keywords.

Each call: validate (views, no copies) → pick the variant and launch config (both cached per
call signature: a plan) → one launch quantizing K (and V for FP8 P·V) with their statistics
(computed in that launch for short sequences, by two small Triton launches beyond), or the C++
extension's ops when asked for → one attention launch that also quantizes Q in registers. Repeated signatures
launch the compiled kernels without Triton's argument binder (``launcher.launch``).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, NamedTuple, Optional

import torch

from sagebuild import archs
from sagebuild.attention import dispatch, replay
from sagebuild.attention.validate import (
    AttentionInputError,
    check_dense,
    check_sm_scale,
    check_varlen,
    unit_stride,
)
from sagebuild.kernels.triton import configs, launcher, layout, quant
from sagebuild.kernels.triton.attn_fwd import QuantizedKV, attention_forward, tma_layout_ok

try:  # Gluon (Triton ≥ 3.5): the warp-specialised Hopper kernel; without it, the portable one
    from sagebuild.kernels.triton import attn_hopper
except ImportError:  # pragma: no cover - depends on the installed Triton
    attn_hopper = None  # type: ignore[assignment]

GRANULARITIES = ("per_warp", "per_block")
BACKENDS = ("auto", "triton", "ext")
PV_ACCUM = ("fp32+fp32", "fp32")


def _ext_ops(device: torch.device, backend: str) -> Any:
    """The C++ extension's quantization ops when asked for by name ("ext"). "auto" takes Triton's
    path: on the H200 it pre-processes K and V in half the extension's time (0.125 vs 0.25 ms
    at 2×32×4096×128, docs/performance.md run 13)."""
    if backend not in BACKENDS:
        raise AttentionInputError(
            f"quantization_backend must be one of {BACKENDS}, got {backend!r}",
            "pass 'auto', 'triton' or 'ext'",
        )
    if backend != "ext":
        return None
    ops = _cached_ext_ops(device.type, device.index)
    if ops is None:
        raise AttentionInputError(
            "quantization_backend='ext' but the C++ extension is not built for this device",
            "run `sagebuild compile`, or pass quantization_backend='triton'",
        )
    return ops


@functools.cache
def _cached_ext_ops(device_type: str, index: Optional[int]) -> Any:
    """Looked up once per device and process: the lookup touches the file system, and an
    attention call at a small shape lasts only microseconds. A rebuilt extension is picked
    up by the next process."""
    from sagebuild import ext

    return ext.get_quant_ops(torch.device(device_type, index))


def _pad(x: torch.Tensor, dp: int) -> torch.Tensor:
    return x if x.shape[-1] == dp else torch.nn.functional.pad(x, (0, dp - x.shape[-1]))


def _quantize_kv_with_ext(
    ops: Any,
    k: torch.Tensor,
    v: torch.Tensor,
    dp: int,
    smooth_k: bool,
    fp8: Optional[torch.dtype],
    k_blk: int,
) -> QuantizedKV:
    """K (and V) pre-processed by the C++ extension in the contract's layout.

    Q is not quantized here: the attention kernel quantizes its Q tile in registers, which
    saves a launch and a pass over Q whichever backend prepares K and V.
    """
    kp, vp = _pad(k, dp), _pad(v, dp)
    km = ops.k_mean(kp) if smooth_k else None
    kq, ks = ops.quant_per_block_int8(kp, km, k_blk, 1.0)
    vq = vs = None
    if fp8 is not None:
        vq, vs = ops.quant_v_fp8_per_channel(vp, fp8 == torch.float8_e4m3fnuz)
        # The kernel wants V channel-major (see layout.empty_like_view); the op returns it so
        # (tokens contiguous). Only an older build's token-major output pays for a copy here.
        if vq.stride(-2) != 1:
            vq = vq.transpose(-1, -2).contiguous().transpose(-1, -2)
    km_flat = km.reshape(km.shape[0], km.shape[1], -1).float().contiguous() if km is not None else None
    return QuantizedKV(
        layout.dense(kq),
        ks,
        k_blk,
        km_flat,
        layout.dense(vq) if vq is not None else layout.dense(v),
        vs,
    )


def _resolve(
    arch: str,
    head_dim: int,
    pv: str,
    causal: bool,
    config: Any,
    n_k: int = 0,
    pv_accum: str = "fp32+fp32",
    tma_layout: bool = False,
) -> tuple[int, configs.LaunchConfig]:
    """The padded head dim and the launch config. ``tma_layout``: K/V will be quantized by our
    Triton kernels in their layout (not the extension, not packed sequences), so configs that
    load them by TMA may serve the call where ``tma_layout_ok`` and the family allow it."""
    dp = configs.padded_head_dim(head_dim)
    assert dp is not None  # validate.check_head_dim ran
    variant = configs.variant_key(pv, pv_accum)
    family = dispatch.family(arch)
    tma_ok = tma_layout and configs.tma_possible(family) and tma_layout_ok(pv == "fp8", False, n_k)
    try:
        split = configs.split_head_dim(head_dim, dp)
        cfg = configs.lookup(family, dp, variant, causal, config, split=split, n_k=n_k, tma_ok=tma_ok)
    except ValueError as exc:
        raise AttentionInputError(str(exc), f"fix the config keyword or ${configs.ENV_VAR}") from None
    if cfg.maxnreg is not None and arch != dispatch.INTERPRETER and archs.get(arch).vendor != "cuda":
        raise AttentionInputError(
            f"the launch config {cfg.as_tuple()} caps registers (maxnreg), an NVIDIA-only Triton option; "
            f"{arch} is not an NVIDIA GPU",
            f"drop the fifth number from the config keyword or ${configs.ENV_VAR}",
        )
    return dp, cfg


def _config_and_fusion(
    arch: str, head_dim: int, pv: str, causal: bool, config: Any, n_k: int, pv_accum: str, backend: str
) -> tuple[int, configs.LaunchConfig, bool]:
    """(padded head dim, launch config, K/V quantized inside the attention kernel).

    Short sequences may quantize K/V inside the attention kernel (``configs.fuse_kv``: no
    pre-processing launch at all) unless the extension is asked for by name; otherwise the
    extension when asked for, else Triton's quantization kernels. Rows that need TMA read K/V
    quantized beforehand by the Triton kernels, so a call that may fuse never takes them."""
    may_fuse = backend in ("auto", "triton") and configs.fuse_kv_keys(n_k, varlen=False)
    dp, cfg = _resolve(arch, head_dim, pv, causal, config, n_k, pv_accum, backend != "ext" and not may_fuse)
    return dp, cfg, may_fuse and configs.fuse_kv(cfg, n_k, varlen=False)


class _Plan(NamedTuple):
    """Everything an attention call decides from shapes, strides, dtypes and flags alone."""

    nhd: bool
    copies: bool  # some input's last dim is strided: validate.unit_stride copies it
    fp8: Optional[torch.dtype]
    scale: float
    dp: int
    cfg: configs.LaunchConfig
    q_blk: int
    fused: bool
    ops: Any
    ws: Optional[tuple[configs.LaunchConfig, int]]  # the Hopper kernel's config and Q block, or None
    k_blk: int  # tokens per K scale, for the kernel that will run (``LaunchConfig.k_blk``)
    tma: bool  # K/V tiles by tensor descriptors (``configs.use_tma``, eligible shapes)
    pdl: bool  # the attention launch overlaps the Triton K/V quantization launch (``configs.use_pdl``)
    wgmma_pipe: bool  # the portable kernel's wgmma pipelined (``configs.use_wgmma_pipe``)
    v_key_order: bool  # FP8 V quantized in wgmma key order (``configs.use_v_key_order``)
    row_sum_parts: int  # P's partial row sums per row in the portable kernel (``configs.row_sum_parts``)


# Replays by plan key and aliasing of q/k/v (``replay``): a repeated call issues its recorded
# launches on new buffers, nothing else; None marks a signature whose call cannot be replayed.
_REPLAYS: dict[tuple, Optional[replay.Replay]] = {}


def clear_caches() -> None:
    """Forget plans, replays and per-key constexprs: for module-level tuning knobs changed at run
    time (environment knobs are part of the keys and need nothing)."""
    _PLANS.clear()
    _REPLAYS.clear()
    launcher.forget_constexprs()


# Plans by call signature: a repeated call skips validation, dispatch and the config lookup, and
# its launches skip Triton's argument binder (``launcher.launch``). Bounded like the launcher.
_PLANS: dict[tuple, _Plan] = {}


def _plan_key(q: Any, k: Any, v: Any, *flags: Any) -> Optional[tuple]:
    """A key fixing every input property the plan and the kernels' specialisation depend on
    (shape, strides, dtype, device, 16-byte alignment); None when the inputs are not tensors or a
    flag is unhashable (such calls take the full path, which also reports bad input)."""
    try:
        key = (
            q.shape, q.stride(), q.dtype, q.device, q.data_ptr() & 15,
            k.shape, k.stride(), k.dtype, k.device, k.data_ptr() & 15,
            v.shape, v.stride(), v.dtype, v.device, v.data_ptr() & 15,
            configs.knob_values(), *flags,
        )  # fmt: skip
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


def _make_plan(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    qk_quant_gran: str,
    pv: str,
    quantization_backend: str,
    config: Any,
    return_lse: bool,
    pv_accum: str = "fp32+fp32",
) -> _Plan:
    """Validate the inputs (clear errors for every user mistake) and take every decision."""
    qv, kv, vv = check_dense(q, k, v, tensor_layout)
    if qk_quant_gran not in GRANULARITIES:
        raise AttentionInputError(
            f"qk_quant_gran must be one of {GRANULARITIES}, got {qk_quant_gran!r}",
            "pass 'per_warp' (finer, default) or 'per_block'",
        )
    arch = dispatch.device_arch(qv.device)
    family = dispatch.family(arch)
    fp8 = dispatch.fp8_dtype(arch) if pv == "fp8" else None
    d = qv.shape[-1]
    scale = check_sm_scale(sm_scale, d)
    n_k = kv.shape[2]
    dp, cfg, fused = _config_and_fusion(
        arch, d, pv, bool(is_causal), config, n_k, pv_accum, quantization_backend
    )
    ops = None if fused else _ext_ops(qv.device, quantization_backend)
    copies = any(t.stride(-1) != 1 for t in (q, k, v))
    ws = None
    n_q = qv.shape[2]
    if (
        attn_hopper is not None
        and config is None
        and not return_lse
        and not fused
        and pv_accum == "fp32+fp32"  # the Hopper kernel accumulates in two levels only
        and attn_hopper.takes(fp8, n_q, n_k, bool(is_causal))
    ):
        try:
            ws_cfg = configs.ws_lookup(family, dp, pv, bool(is_causal), n_k)
        except ValueError as exc:
            raise AttentionInputError(str(exc), f"fix ${configs.WS_ENV_VAR} or unset it") from None
        ws = (ws_cfg, ws_cfg.q_blk(qk_quant_gran)) if ws_cfg is not None else None
    # The Hopper kernel reads 64-token K scales; if its buffers turn out not to fit at call time
    # the portable kernel takes the same K (it reads the block size from QuantizedKV).
    k_blk = configs.K_BLK if ws is not None else cfg.k_blk
    # FP8 V in wgmma key order: our own Triton quantization for the portable kernel (not the
    # extension's ops, the in-kernel quantization or the Hopper kernel, which read V as is)
    v_key_order = (
        configs.use_v_key_order(family) and fp8 is not None and ops is None and not fused and ws is None
    )
    # from the shapes, before quantizing: our FP8 V rows hold n_k one-byte tokens, padded in key
    # order (the extension's ops lay K/V out otherwise)
    v_rows = layout.key_rows(n_k, v_key_order)
    tma = configs.use_tma(family, cfg) and ops is None and tma_layout_ok(fp8 is not None, fused, v_rows)
    q_blk = cfg.q_blk(qk_quant_gran)
    # PDL pairs the attention launch with the quantization launch right before it (our Triton
    # one: not the extension's ops, not the in-kernel quantization, not the Hopper kernel)
    pdl = configs.use_pdl(family, n_k) and ops is None and not fused and ws is None
    pipe = configs.use_wgmma_pipe(family, cfg) and ws is None
    parts = configs.row_sum_parts(family, cfg) if ws is None else 1
    return _Plan(
        tensor_layout == "NHD", copies, fp8, scale, dp, cfg, q_blk, fused, ops, ws, k_blk, tma, pdl, pipe,
        v_key_order, parts,
    )  # fmt: skip


def _on_input_device(fn: Any) -> Any:
    """Run fn with q's GPU as the current device. Triton launches on the current device, not on
    the tensors' (and our launcher keys its compiled kernels by it), so a model spread over
    several GPUs (``device_map="auto"``) would otherwise launch a layer's kernels on the wrong one."""

    @functools.wraps(fn)
    def wrapper(q: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(q, torch.Tensor) and q.is_cuda:
            index = q.get_device()
            if index != torch.cuda.current_device():
                with torch.cuda.device(index):
                    return fn(q, *args, **kwargs)
        return fn(q, *args, **kwargs)

    return wrapper


@_on_input_device
def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    tensor_layout: str,
    is_causal: bool,
    sm_scale: Optional[float],
    qk_quant_gran: str,
    smooth_k: bool,
    return_lse: bool,
    pv: str,
    quantization_backend: str,
    config: Any = None,
    pv_accum: str = "fp32+fp32",
) -> Any:
    flags = (
        tensor_layout,
        is_causal,
        sm_scale,
        qk_quant_gran,
        smooth_k,
        return_lse,
        pv,
        quantization_backend,
        config,
        pv_accum,
    )
    key = _plan_key(q, k, v, *flags)
    rkey = None
    if key is not None:  # a replayed signature first: one key hash, nothing else decided again
        rkey = (key, q.data_ptr() == k.data_ptr(), q.data_ptr() == v.data_ptr(), k.data_ptr() == v.data_ptr())
        rep = _REPLAYS.get(rkey)
        if rep is not None:
            return rep(q, k, v)
    plan = _PLANS.get(key) if key is not None else None
    fresh = plan is None
    if fresh:
        plan = _make_plan(
            q,
            k,
            v,
            tensor_layout,
            is_causal,
            sm_scale,
            qk_quant_gran,
            pv,
            quantization_backend,
            config,
            return_lse,
            pv_accum,
        )
        if key is not None:
            if len(_PLANS) >= launcher.MAX_ENTRIES:
                _PLANS.clear()
            _PLANS[key] = plan
    # Recording costs ~0.3 ms of host time once, so only a signature's second call records:
    # one-off shapes (prefills of varying length) never pay it. The Hopper kernel launches
    # outside launcher.launch: never replayed.
    if (
        not fresh
        and rkey is not None
        and plan.ws is None
        and rkey not in _REPLAYS
        and not (q.is_cuda and torch.cuda.is_current_stream_capturing())
    ):
        with replay.Recorder() as rec:
            result = _execute(plan, key, q, k, v, is_causal, smooth_k, return_lse, pv_accum)
        if len(_REPLAYS) >= launcher.MAX_ENTRIES:
            _REPLAYS.clear()
        _REPLAYS[rkey] = rec.build((q, k, v), result)  # None: this signature is never replayed
        return result
    return _execute(plan, key, q, k, v, is_causal, smooth_k, return_lse, pv_accum)


def _execute(
    plan: _Plan,
    key: Optional[tuple],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    is_causal: bool,
    smooth_k: bool,
    return_lse: bool,
    pv_accum: str,
) -> Any:
    """One call's quantization and attention launches under its plan."""
    b, n, d = q.shape[0], q.shape[1 if plan.nhd else 2], q.shape[-1]
    h = q.shape[2 if plan.nhd else 1]
    if plan.nhd:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if plan.copies:
        q, k, v = unit_stride(q), unit_stride(k), unit_stride(v)
    kv = quantize_kv(plan, key, k, v, smooth_k)
    if plan.nhd:
        out = torch.empty((b, n, h, d), dtype=q.dtype, device=q.device)
        out_hnd = out.transpose(1, 2)
    else:
        out = out_hnd = torch.empty((b, h, n, d), dtype=q.dtype, device=q.device)
    lse = torch.empty((b, h, n), dtype=torch.float32, device=q.device) if return_lse else None
    launch_attention(plan, key, q, kv, out_hnd, lse, is_causal, pv_accum)
    return (out, lse) if return_lse else out


def quantize_kv(
    plan: _Plan, key: Optional[tuple], k: torch.Tensor, v: torch.Tensor, smooth_k: bool
) -> QuantizedKV:
    """K/V ([B, H, N, D] views) as the plan's attention kernel reads them: quantized by the
    extension's ops or our Triton launches, or only their statistics for the in-kernel path.
    ``key``: the launcher key (``_plan_key``), None for Triton's binder (``scripts/overlap_probe.py``)."""
    fp8, dp = plan.fp8, plan.dp
    if plan.ops is not None:
        return _quantize_kv_with_ext(plan.ops, k, v, dp, smooth_k, fp8, plan.k_blk)
    if plan.fused:
        kd, vd = layout.dense(k), layout.dense(v)
        km, va = quant.kv_stats(kd, vd, dp, smooth_k, fp8)
        stub = km if km is not None else va if va is not None else torch.empty(1, device=k.device)
        return QuantizedKV(kd, stub, plan.k_blk, km, vd, va, fused=True)
    vd = layout.dense(v)
    kq, ks, km, vq, vs = quant.quant_kv(
        layout.dense(k), vd, dp, smooth_k, fp8, plan.k_blk, launch_key=key, pdl_trigger=plan.pdl,
        v_key_order=plan.v_key_order,
    )  # fmt: skip
    return QuantizedKV(
        kq,
        ks,
        plan.k_blk,
        km,
        vq if vq is not None else vd,
        vs,
        v_key_order=plan.v_key_order,  # only with FP8 V (the plan's condition)
    )


def launch_attention(
    plan: _Plan,
    key: Optional[tuple],
    q: torch.Tensor,
    kv: QuantizedKV,
    out_hnd: torch.Tensor,
    lse: Optional[torch.Tensor],
    is_causal: bool,
    pv_accum: str,
) -> None:
    """The plan's attention launch on Q ([B, H, N, D] view) and ``quantize_kv``'s K/V: writes
    ``out_hnd`` (and ``lse`` [B, H, N] contiguous, when given)."""
    fp8, dp = plan.fp8, plan.dp
    qv = layout.dense(q)
    if plan.ws is not None and attn_hopper.buffers_fit(kv):
        attn_hopper.attention_forward_hopper(
            qv,
            kv,
            layout.dense(out_hnd),
            plan.ws[0],
            head_dim_pad=dp,
            sm_scale=plan.scale,
            causal=bool(is_causal),
            q_blk=plan.ws[1],
            fp8_max=quant.fp8_max(fp8),
        )
        return
    attention_forward(
        qv,
        kv,
        layout.dense(out_hnd),
        plan.cfg,
        head_dim_pad=dp,
        sm_scale=plan.scale,
        causal=bool(is_causal),
        pv_fp8=fp8 is not None,
        q_blk=plan.q_blk,
        fp8_max=quant.fp8_max(fp8) if fp8 is not None else 448.0,
        fp8_dtype=fp8,
        lse=lse,
        launch_key=key,
        pv_direct=pv_accum == "fp32",
        tma=plan.tma,
        pdl=plan.pdl,
        wgmma_pipe=plan.wgmma_pipe,
        row_sum_parts=plan.row_sum_parts,
    )


def sageattn_qk_int8_pv_fp16_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    qk_quant_gran: str = "per_warp",
    smooth_k: bool = True,
    return_lse: bool = False,
    quantization_backend: str = "auto",
    config: Any = None,
) -> Any:
    """INT8 Q·Kᵀ, FP16 (or BF16) P·V with FP32 accumulation. Returns out, or (out, lse [B, H, N_q])."""
    return attend(
        q,
        k,
        v,
        tensor_layout=tensor_layout,
        is_causal=is_causal,
        sm_scale=sm_scale,
        qk_quant_gran=qk_quant_gran,
        smooth_k=smooth_k,
        return_lse=return_lse,
        pv="fp16",
        quantization_backend=quantization_backend,
        config=config,
    )


def sageattn_qk_int8_pv_fp8_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    qk_quant_gran: str = "per_warp",
    smooth_k: bool = True,
    return_lse: bool = False,
    quantization_backend: str = "auto",
    pv_accum_dtype: str = "fp32+fp32",
    config: Any = None,
) -> Any:
    """INT8 Q·Kᵀ, FP8 E4M3 P·V. Returns out, or (out, lse).

    ``pv_accum_dtype``: "fp32+fp32" (default) adds each key tile's P·V, from a fresh MMA
    accumulator, into an FP32 buffer; "fp32" lets the FP8 MMA accumulate across all key tiles
    (fewer instructions and registers; the Hopper FP8 MMA keeps fewer than 32 bits while it
    accumulates, so long sequences lose some accuracy: docs/kernels.md has the measured bounds).
    """
    if pv_accum_dtype not in PV_ACCUM:
        raise AttentionInputError(
            f"pv_accum_dtype {pv_accum_dtype!r} is not offered; supported: {PV_ACCUM}",
            "pass pv_accum_dtype='fp32+fp32' (two-level, the accurate default) or 'fp32' (MMA-accumulated)",
        )
    return attend(
        q,
        k,
        v,
        tensor_layout=tensor_layout,
        is_causal=is_causal,
        sm_scale=sm_scale,
        qk_quant_gran=qk_quant_gran,
        smooth_k=smooth_k,
        return_lse=return_lse,
        pv="fp8",
        quantization_backend=quantization_backend,
        config=config,
        pv_accum=pv_accum_dtype,
    )


_SAGEATTN_KW = ("qk_quant_gran", "smooth_k", "quantization_backend", "pv_accum_dtype", "config")


def sageattn(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    return_lse: bool = False,
    **kwargs: Any,
) -> Any:
    """Quantized attention with the variant the GPU's arch gets from the dispatch table, or the
    one measured faster for this head dim and key count (``configs._PV_PREFERENCE``), which also
    picks the FP8 accumulation unless ``pv_accum_dtype`` is given."""
    unknown = sorted(set(kwargs) - set(_SAGEATTN_KW)) if kwargs else None
    if unknown:
        raise AttentionInputError(
            f"sageattn got unexpected keyword(s) {unknown}; accepted: {list(_SAGEATTN_KW)}",
            "drop them (attn_mask and dropout are not supported: use SDPA for those)",
        )
    device = q.device if isinstance(q, torch.Tensor) else None
    if device is None:
        raise AttentionInputError(f"q must be a torch.Tensor, got {type(q).__name__}", "pass torch tensors")
    try:
        d, n_k = q.shape[-1], k.shape[1 if tensor_layout == "NHD" else 2]
    except (AttributeError, IndexError):  # malformed input: the variant's own checks say what is wrong
        d, n_k = 0, 0
    variant, accum = dispatch.choice_for_call(device, d, n_k)
    if variant == dispatch.VARIANTS["fp8"]:
        kwargs.setdefault("pv_accum_dtype", accum)
        return sageattn_qk_int8_pv_fp8_triton(
            q, k, v, tensor_layout, is_causal, sm_scale, return_lse=return_lse, **kwargs
        )
    kwargs.pop("pv_accum_dtype", None)
    return sageattn_qk_int8_pv_fp16_triton(
        q, k, v, tensor_layout, is_causal, sm_scale, return_lse=return_lse, **kwargs
    )


def launch_plan(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    tensor_layout: str = "HND",
    is_causal: bool = False,
    variant: str = "auto",
    pv_accum_dtype: Optional[str] = None,
    quantization_backend: str = "auto",
) -> dict[str, Any]:
    """What a call with these inputs would run, decided exactly as the call decides it, without
    launching anything: for benchmark records and reports, so a number says which kernel,
    launch config and table produced it.

    ``variant``: "auto" (what ``sageattn`` picks, FP8 accumulation included), or
    "qk_int8_pv_fp16" / "qk_int8_pv_fp8" (the explicit functions, with their defaults unless
    ``pv_accum_dtype`` is given). Bad input raises ``AttentionInputError`` as the call would.
    """
    d = q.shape[-1]
    n_k = k.shape[1 if tensor_layout == "NHD" else 2]
    if variant == "auto":
        variant, accum = dispatch.choice_for_call(q.device, d, n_k)
        pv_accum_dtype = pv_accum_dtype or accum
    if variant not in dispatch.VARIANTS.values():
        raise AttentionInputError(
            f"unknown variant {variant!r}", f"pass 'auto' or one of {sorted(dispatch.VARIANTS.values())}"
        )
    pv = "fp8" if variant == dispatch.VARIANTS["fp8"] else "fp16"
    accum = (pv_accum_dtype or "fp32+fp32") if pv == "fp8" else "fp32+fp32"
    plan = _make_plan(
        q, k, v, tensor_layout, is_causal, None, "per_warp", pv, quantization_backend, None, False, accum
    )
    return plan_record(
        variant,
        accum,
        "hopper_ws" if plan.ws is not None else "portable_tma" if plan.tma else "portable",
        plan.ws[0] if plan.ws is not None else plan.cfg,
        plan.k_blk,
        configs.split_head_dim(d, plan.dp),
        "in_kernel" if plan.fused else ("extension" if plan.ops is not None else "triton"),
        plan.pdl,
        plan.wgmma_pipe,
        plan.v_key_order,
        plan.row_sum_parts,
    )


def plan_record(
    variant: str,
    pv_accum: str,
    kernel: str,
    cfg: configs.LaunchConfig,
    k_blk: int,
    split: bool,
    quantization: str,
    pdl: bool = False,
    wgmma_pipe: bool = False,
    v_key_order: bool = False,
    row_sum_parts: int = 1,
) -> dict[str, Any]:
    """The one shape of a launch-plan record (``launch_plan``, ``sagebuild bench`` rows).
    ``config_spec`` is the config as ``config=`` / ``SAGEBUILD_ATTN_CONFIG`` take it to force
    this very launch (with ``,tma`` where the K/V tiles come by TMA, ``,pipe`` where the wgmma
    is pipelined); ``pdl``: the attention
    launch overlaps the quantization launch (``SAGEBUILD_PDL``); ``wgmma_pipe``: the portable
    kernel's wgmma pipelined (``SAGEBUILD_WGMMA_PIPE``); ``v_key_order``: FP8 V quantized in
    wgmma key order (``SAGEBUILD_V_KEY_ORDER``); ``row_sum_parts``: P's partial row sums per row
    (``SAGEBUILD_ROW_SUM_PARTS``)."""
    return {
        "variant": variant,
        "pv_accum": pv_accum if variant == dispatch.VARIANTS["fp8"] else None,
        "kernel": kernel,
        "config": list(cfg.as_tuple()),
        "config_spec": replace(cfg, tma=kernel == "portable_tma", pipe=wgmma_pipe).spec(),
        "k_blk": k_blk,
        "split_head_dim": split,
        "quantization": quantization,
        "pdl": pdl,
        "wgmma_pipe": wgmma_pipe,
        "v_key_order": v_key_order,
        "row_sum_parts": row_sum_parts,
        "table_version": configs.CONFIG_TABLE_VERSION,
    }


def sageattn_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    smooth_k: bool = True,
    qk_quant_gran: str = "per_warp",
    pv: str = "auto",
    config: Any = None,
) -> torch.Tensor:
    """Attention over packed sequences ([total, H, D]; causal is bottom-right per sequence)."""
    return attend_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, is_causal=is_causal,
        sm_scale=sm_scale, smooth_k=smooth_k, qk_quant_gran=qk_quant_gran, pv=pv, config=config,
    )  # fmt: skip


@_on_input_device
def attend_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    is_causal: bool = False,
    sm_scale: Optional[float] = None,
    smooth_k: bool = True,
    qk_quant_gran: str = "per_warp",
    pv: str = "auto",
    config: Any = None,
) -> torch.Tensor:
    """The varlen implementation entry point (custom ops and the public functions call it)."""
    q, k, v, cuq, cuk = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    if qk_quant_gran not in GRANULARITIES:
        raise AttentionInputError(
            f"qk_quant_gran must be one of {GRANULARITIES}, got {qk_quant_gran!r}",
            "pass 'per_warp' or 'per_block'",
        )
    if pv not in ("auto", "fp16", "fp8"):
        raise AttentionInputError(f"pv must be 'auto', 'fp16' or 'fp8', got {pv!r}", "pass pv='auto'")
    arch = dispatch.device_arch(q.device)
    if pv == "auto":
        pv = "fp8" if dispatch.variant_for_device(q.device) == dispatch.VARIANTS["fp8"] else "fp16"
    fp8 = dispatch.fp8_dtype(arch) if pv == "fp8" else None
    d = q.shape[-1]
    scale = check_sm_scale(sm_scale, d)
    dp, cfg = _resolve(arch, d, pv, bool(is_causal), config, int(max_seqlen_k))
    family = dispatch.family(arch)
    qv = layout.packed(q, cuq, int(max_seqlen_q))
    kvw, vvw = layout.packed(k, cuk, int(max_seqlen_k)), layout.packed(v, cuk, int(max_seqlen_k))
    kq, ks, km, vq, vs = quant.quant_kv(kvw, vvw, dp, smooth_k, fp8, cfg.k_blk)
    kv = QuantizedKV(kq, ks, cfg.k_blk, km, vq if vq is not None else vvw, vs)
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    attention_forward(
        qv,
        kv,
        layout.packed(out, cuq, int(max_seqlen_q)),
        cfg,
        head_dim_pad=dp,
        sm_scale=scale,
        causal=bool(is_causal),
        pv_fp8=fp8 is not None,
        q_blk=cfg.q_blk(qk_quant_gran),
        fp8_max=quant.fp8_max(fp8) if fp8 is not None else 448.0,
        fp8_dtype=fp8,
        wgmma_pipe=configs.use_wgmma_pipe(family, cfg),
        row_sum_parts=configs.row_sum_parts(family, cfg),
    )
    return out
