"""One case of ``test_large_offsets``, in its own process: ``python large_offsets_run.py CASE``
prints a JSON line. The tensors are past 2³¹ elements (allocated, never touched but for one head's
rows: a few hundred MB resident), the launches run on Triton's CPU interpreter for one head's
programs only, every access bounds-checked (``interp_subset``); the outputs of the first and last
query blocks of that head are compared with exact attention."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import conftest  # noqa: F401,E402  (the interpreter and its exact FP8 casts, as in the test process)
import torch  # noqa: E402
from interp_subset import bounds_checked, only_programs  # noqa: E402
from kernel_inputs import forward, plan  # noqa: E402

from sagebuild.attention import sageattn_varlen  # noqa: E402
from sagebuild.attention.metrics import accuracy  # noqa: E402
from sagebuild.kernels.triton import configs  # noqa: E402

D = 128
CFG = configs.LaunchConfig(32, 64, 4, 1)
# name: (layout, tokens, query heads, KV heads, P·V, causal, the GPU's plan features)
CASES = {
    "nhd-fp16-causal": ("NHD", 16_400, 1024, 1024, "fp16", True, False),
    "nhd-fp8-gqa-hopper": ("NHD", 16_400, 1024, 256, "fp8", False, True),
    "hnd-fp8": ("HND", 16_400, 1024, 1024, "fp8", False, False),
    "fused-fp8-causal-hopper": ("fused", 16_400, 352, 352, "fp8", True, True),
    "varlen-fp8": ("varlen", 16_400, 1024, 1024, "fp8", False, False),
}


def _views(how: str, n: int, hq: int, hk: int) -> tuple[torch.Tensor, ...]:
    """Untouched q, k, v: [B, H, N, D] views (dense) or packed [T, H, D] tensors (varlen)."""
    if how == "fused":
        q, k, v = torch.empty(1, n, 3, hq, D, dtype=torch.bfloat16).permute(2, 0, 3, 1, 4)
        return q, k, v
    if how == "varlen":
        return tuple(torch.empty(n, h, D, dtype=torch.bfloat16) for h in (hq, hk, hk))
    shape = (lambda h: (1, n, h, D)) if how == "NHD" else (lambda h: (1, h, n, D))
    q, k, v = (torch.empty(shape(h), dtype=torch.bfloat16) for h in (hq, hk, hk))
    return (q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)) if how == "NHD" else (q, k, v)


def main(name: str) -> dict:
    how, n, hq, hk, pv, causal, hopper = CASES[name]
    q, k, v = _views(how, n, hq, hk)
    g = torch.Generator().manual_seed(60)
    h, b = hq - 1, 0  # the last head: its rows are the furthest from the buffers' starts
    kvh = h // (hq // hk)
    seq = slice(0, n)
    if how == "varlen":  # two sequences; the second one's rows
        cu = torch.tensor([0, n // 2, n], dtype=torch.int32)
        b, seq = 1, slice(n // 2, n)
        qh, kh, vh = q[seq, h], k[seq, kvh], v[seq, kvh]
    else:
        qh, kh, vh = q[0, h], k[0, kvh], v[0, kvh]
    length = seq.stop - seq.start
    m = math.ceil(length / CFG.block_m)
    rows = [*range(CFG.block_m), *range((m - 1) * CFG.block_m, length)]  # the two programs' rows
    kh.copy_(torch.randn(kh.shape, generator=g))
    vh.copy_(torch.randn(vh.shape, generator=g))
    qh[rows] = torch.randn(len(rows), D, generator=g).bfloat16()
    big = max(t.untyped_storage().nbytes() // 2 for t in (q, k, v))
    last = int(q.storage_offset()) + sum((s - 1) * st for s, st in zip(q.shape, q.stride()))

    def pick(kernel: str, grid: tuple, consts: dict):
        if kernel in ("_kv_partials_kernel", "_quant_blocks_kernel"):  # grid (parts or blocks, H_kv, B)
            return [(x, kvh, b) for x in range(grid[0])]
        if kernel == "_kv_finalize_kernel":  # grid (B·H_kv,)
            return [(b * hk + kvh, 0, 0)]
        if kernel == "_attn_fwd_kernel":
            if consts.get("HEADS_FIRST"):  # grid (H, B, query blocks)
                return [(h, b, 0), (h, b, grid[2] - 1)]
            return [(0, h, b), (grid[0] - 1, h, b)]  # grid (query blocks, H, B)
        raise AssertionError(f"unexpected launch {kernel}")

    with bounds_checked() as checked, only_programs(pick) as launched:
        if how == "varlen":
            longest = n - n // 2
            out = sageattn_varlen(q, k, v, cu, cu, longest, longest, is_causal=causal, pv=pv, config=CFG)
            oh = out[seq, h]
        else:
            p = plan(D, n, pv=pv, config=CFG, causal=causal)
            if hopper:  # the features sm90's plan runs: K/V by descriptors, Q read back, V in key order
                p = dataclasses.replace(p, tma=True, q_from_memory=True, v_key_order=True)
            out, _ = forward(p, q, k, v)
            oh = out[0, h]
    qf, kf, vf = (t.double() for t in (qh[rows], kh, vh))
    s = qf @ kf.T * D**-0.5
    if causal:
        s = s.masked_fill(torch.arange(length)[None, :] > torch.tensor(rows)[:, None], -math.inf)
    ref = torch.softmax(s, -1) @ vf
    acc = accuracy(oh[rows].float(), ref.float())
    return {
        "elements": big,
        "last_q_offset": last,
        "accesses": checked.accesses,
        "launches": [(name, list(grid), len(p) if isinstance(p, list) else p) for name, grid, p in launched],
        "finite": acc["finite"],
        "cos": acc["cos"],
        "max_abs": acc["max_abs"],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
