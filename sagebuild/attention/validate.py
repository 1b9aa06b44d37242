"""Input checks for the attention API: one clear error per user mistake, never a traceback.

The checks never modify their inputs; they return views, and copy only a tensor whose last
dimension is not contiguous (the kernels need unit stride along the head dim), a mask whose key
stride would overflow the kernel's 32-bit offsets, and ``cu_seqlens`` (int32 on q's device).
"""

from __future__ import annotations

import os

import torch

from sagebuild.attention.plan import AttentionInputError
from sagebuild.kernels.triton import launcher

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
LAYOUTS = ("HND", "NHD")


def interpreter_enabled() -> bool:
    """True when Triton's CPU interpreter is on (CPU tensors are then accepted, for tests)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_tensors(named: dict[str, torch.Tensor], rank: int, rank_rule: str, fix: str) -> None:
    """dtype, device, rank and head dim rules shared by the dense and varlen entry points
    (``rank_rule`` completes "q must ..." in the error for a wrong rank)."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise AttentionInputError(
                f"{name} must be a torch.Tensor, got {type(t).__name__}", "pass torch tensors on the GPU"
            )
    dtypes = {t.dtype for t in named.values()}
    for name, t in named.items():
        if t.dtype == torch.float32:
            raise AttentionInputError(
                f"{name} is float32; the quantized kernels take float16 or bfloat16 only "
                "(float32 inputs are the known NaN trap of plugging SageAttention into fp32 models)",
                "cast q, k and v with .half() or .bfloat16(), or call torch's SDPA for float32",
            )
        if t.dtype not in SUPPORTED_DTYPES:
            raise AttentionInputError(
                f"{name} has dtype {t.dtype}; supported: float16, bfloat16",
                "cast q, k and v to torch.float16 or torch.bfloat16",
            )
    if len(dtypes) != 1:
        raise AttentionInputError(
            f"q, k and v must share one dtype, got {sorted(str(d) for d in dtypes)}",
            "cast them to the same dtype",
        )
    devices = {t.device for t in named.values()}
    if len(devices) != 1:
        raise AttentionInputError(
            f"q, k and v must be on one device, got {sorted(str(d) for d in devices)}",
            "move them to the same GPU with .to(device)",
        )
    device = next(iter(devices))
    if device.type == "cpu" and not interpreter_enabled():
        raise AttentionInputError(
            "the quantized attention kernels run on a GPU; the inputs are on the CPU",
            "move q, k and v to the GPU (.cuda()), or use torch's SDPA on the CPU",
        )
    if device.type not in ("cuda", "cpu"):
        raise AttentionInputError(
            f"unsupported device type {device.type!r}; the kernels run on CUDA and ROCm GPUs",
            "move q, k and v to a CUDA/ROCm device",
        )
    for name, t in named.items():
        if t.dim() != rank:
            raise AttentionInputError(f"{name} must {rank_rule}, got shape {tuple(t.shape)}", fix)
    dims = [t.shape[-1] for t in named.values()]
    if len(set(dims)) != 1:
        raise AttentionInputError(
            "head dims differ: q {}, k {}, v {}".format(*dims), "q, k and v must share the head dim"
        )


def unit_stride(t: torch.Tensor) -> torch.Tensor:
    """t itself when its last dim is contiguous; a contiguous copy otherwise (the only copy made)."""
    return t if t.stride(-1) == 1 else t.contiguous()


def check_dense(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tensor_layout: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validated logical [B, H, N, D] views of q, k, v (NHD inputs become transposed views)."""
    if tensor_layout not in LAYOUTS:
        raise AttentionInputError(
            f"tensor_layout must be 'HND' (batch, heads, seq, dim) or 'NHD' (batch, seq, heads, dim), "
            f"got {tensor_layout!r}",
            "pass tensor_layout='HND' or 'NHD'",
        )
    dims = "B, H, N, D" if tensor_layout == "HND" else "B, N, H, D"
    rule = f"have 4 dims ({dims} for tensor_layout={tensor_layout!r})"
    check_tensors(
        {"q": q, "k": k, "v": v}, 4, rule, "reshape to 4 dims, or use sageattn_varlen for packed sequences"
    )
    if tensor_layout == "NHD":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    (bq, hq, nq, _), (bk, hk, nk, _), (bv, hv, nv, _) = q.shape, k.shape, v.shape
    if not (bq == bk == bv):
        raise AttentionInputError(
            f"batch sizes differ: q {bq}, k {bk}, v {bv}", "pass q, k, v with the same batch size"
        )
    if nk != nv:
        raise AttentionInputError(
            f"k and v have different sequence lengths ({nk} vs {nv}) for tensor_layout={tensor_layout!r}",
            "check tensor_layout: 'HND' is (batch, heads, seq, dim), 'NHD' is (batch, seq, heads, dim)",
        )
    check_heads(hq, hk, hv, tensor_layout)
    check_grid(bq, hq, "batch entries")
    if nq == 0 or nk == 0 or bq == 0:
        raise AttentionInputError(
            f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)} (as B, H, N, D)",
            "pass at least one batch entry, one query and one key",
        )
    return unit_stride(q), unit_stride(k), unit_stride(v)


MASK_DTYPES = {  # uint8: a boolean mask's bytes, as the API hands it on (nonzero attends)
    torch.bool: "bool",
    torch.uint8: "bool",
    torch.float16: "additive",
    torch.bfloat16: "additive",
    torch.float32: "additive",
}


def check_mask(mask: torch.Tensor, q: torch.Tensor, nk: int) -> tuple[torch.Tensor, str, bool]:
    """The kernels' view of an ``attn_mask`` for q ([B, H, N_q, D] view) and nk keys: ([B, H, N_q,
    N_k] view with stride 0 on broadcast dims, uint8 for a boolean mask; "bool" | "additive";
    whether it varies along query rows). SDPA's rules: True attends, floats are added to the
    scaled scores, the mask broadcasts to [B, H, N_q, N_k]."""
    if not isinstance(mask, torch.Tensor) or mask.dtype not in MASK_DTYPES:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise AttentionInputError(
            f"attn_mask must be a boolean or float16/bfloat16/float32 tensor, got {kind}",
            "pass a boolean mask (True attends) or an additive float mask, as for torch's SDPA",
        )
    if mask.device != q.device:
        raise AttentionInputError(
            f"attn_mask is on {mask.device}, q on {q.device}",
            "move the mask to q's device with .to(q.device)",
        )
    b, h, nq = q.shape[:3]
    try:
        view = mask.expand(b, h, nq, nk) if mask.dim() <= 4 else None
    except RuntimeError:
        view = None
    if view is None:
        raise AttentionInputError(
            f"attn_mask of shape {tuple(mask.shape)} does not broadcast to [B, H, N_q, N_k] = "
            f"{[b, h, nq, nk]}",
            "pass a mask broadcastable to (batch, heads, queries, keys), e.g. [B, 1, 1, N_k] for key padding",
        )
    if view.stride(-1) * 256 >= 2**31:  # the kernel steps along keys at 32-bit offsets within a tile
        view = view.contiguous()
    if mask.dtype == torch.bool:
        view = view.view(torch.uint8)
    return view, MASK_DTYPES[mask.dtype], nq > 1 and view.stride(2) != 0


def check_grid(batch: int, heads: int, what: str) -> None:
    """The kernels launch one grid row per head and one grid layer per batch entry (sequence),
    and index each (batch, head) pair by an int32 (expanded views make huge counts cheap)."""
    top = launcher.GRID_YZ_MAX
    if batch > top or heads > top or batch * heads >= 2**31:
        raise AttentionInputError(
            f"{batch} {what} × {heads} heads: the kernels take at most {top} of each, and fewer "
            "than 2³¹ pairs, per call",
            f"split the call into chunks of at most {top} {what} (and heads)",
        )


def check_heads(hq: int, hk: int, hv: int, layout: str) -> None:
    """K and V head counts agree and divide Q's (GQA/MQA); ``layout`` is named in the error."""
    if hk != hv:
        raise AttentionInputError(
            f"k and v have different head counts ({hk} vs {hv})", "k and v must have the same number of heads"
        )
    if hk == 0 or hq % hk:
        raise AttentionInputError(
            f"q has {hq} heads and k/v {hk}: q's heads must be a multiple of k's (GQA/MQA)"
            + (f" — is tensor_layout={layout!r} right?" if layout else ""),
            "use as many KV heads as query heads, or a divisor of them",
        )


def check_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Validated packed [total, H, D] q, k, v and int32 cumulative lengths on the inputs' device.

    The lengths' values are checked when they are on the CPU. On a GPU they are not read here (that
    would synchronise every call): the kernels clamp each sequence to the packed tensor instead, so
    bad values cannot reach other memory."""
    rule = "be packed as (total_tokens, heads, dim) for sageattn_varlen"
    check_tensors({"q": q, "k": k, "v": v}, 3, rule, "concatenate the sequences along dim 0")
    if k.shape[0] != v.shape[0]:
        raise AttentionInputError(
            f"k and v hold different token counts ({k.shape[0]} vs {v.shape[0]})",
            "k and v must be packed from the same sequences",
        )
    check_heads(q.shape[1], k.shape[1], v.shape[1], "")
    cus = []
    for name, cu, total, max_len in (
        ("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q),
        ("cu_seqlens_k", cu_seqlens_k, k.shape[0], max_seqlen_k),
    ):
        if not isinstance(cu, torch.Tensor) or cu.dim() != 1 or cu.numel() < 2:
            raise AttentionInputError(
                f"{name} must be a 1-D tensor of batch+1 cumulative lengths starting at 0",
                "build it with torch.cumsum over the sequence lengths, prepended with 0",
            )
        if cu.dtype not in (torch.int32, torch.int64):
            raise AttentionInputError(f"{name} must be an integer tensor, got {cu.dtype}", "use torch.int32")
        if cu.device.type == "cpu":
            host = cu.detach().to(torch.int64)
            lens = host[1:] - host[:-1]
            if int(host[0]) != 0 or bool((lens < 0).any()) or int(host[-1]) != total:
                raise AttentionInputError(
                    f"{name} must start at 0, never decrease and end at the token count {total}, "
                    f"got {host.tolist()[:8]}{'...' if host.numel() > 8 else ''}",
                    "pass the cumulative sequence lengths of the packed tensor",
                )
            if int(max_len) < int(lens.max()):
                raise AttentionInputError(
                    f"max_seqlen for {name} is {max_len} but a sequence has {int(lens.max())} tokens",
                    "pass the longest sequence length",
                )
        cus.append(cu.to(q.device, torch.int32))  # cu itself when already so
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise AttentionInputError(
            "cu_seqlens_q and cu_seqlens_k describe different batch sizes",
            "pass one entry per sequence in both",
        )
    check_grid(cu_seqlens_q.numel() - 1, q.shape[1], "sequences")
    return unit_stride(q), unit_stride(k), unit_stride(v), cus[0], cus[1]
