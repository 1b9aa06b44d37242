"""The GPU cases of ``test_long_sequences_gpu`` for one layout, in their own process (a GPU fault
kills the CUDA context: the other layouts still run): ``python long_sequences_run.py LAYOUT``.

300,000 tokens × 56 heads × 128 in bf16 (MiniMax-H3), each tensor 2,150,400,000 elements: HND
contiguous, NHD, or fused-QKV views ``qkv.view(1, L, 3, 56, 128).permute(2, 0, 3, 1, 4)``. Four
calls, causal or not × FP16 or FP8 P·V (``sageattn``'s own choice on the card). Each call is
checked against exact float32 attention on three groups of 64 query rows of every head: the
first rows, the first rows whose offset in the last head passes 2³¹ elements, and the last rows.
Prints one JSON line as each case starts (so a fault names its case) and one with its result;
launches are synchronous (CUDA_LAUNCH_BLOCKING, set by the test), so a fault's traceback names
the launch."""

from __future__ import annotations

import json
import sys
import time

import torch

from sagebuild.attention import api, sageattn, sageattn_qk_int8_pv_fp16_triton
from sagebuild.attention.metrics import accuracy

N, H, D = 300_000, 56, 128
GROUP = 64
CHUNK = 10_000  # tokens filled per random draw (each well under 2³¹ elements)


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def inputs(how: str) -> tuple[torch.Tensor, ...]:
    """q, k, v in the layout, random bf16 (drawn in chunks along the storage's outer dim)."""
    g = torch.Generator(device="cuda").manual_seed(60)
    if how == "fused":
        buf = torch.empty(1, N, 3, H, D, device="cuda", dtype=torch.bfloat16)
        for i in range(0, N, CHUNK):
            buf[0, i : i + CHUNK].normal_(generator=g)
        return tuple(buf.permute(2, 0, 3, 1, 4))  # [B, H, N, D] views, token stride 3·H·D
    shape = (1, H, N, D) if how == "HND" else (1, N, H, D)
    out = []
    for _ in range(3):
        t = torch.empty(shape, device="cuda", dtype=torch.bfloat16)
        for i in range(0, shape[1], 1 if how == "HND" else CHUNK):
            t[0, i : i + (1 if how == "HND" else CHUNK)].normal_(generator=g)
        out.append(t)
    return tuple(out)


def rows_past_2_31(view: torch.Tensor) -> int:
    """The first token whose row in the last head starts past 2³¹ elements of the storage."""
    base = view.storage_offset() + (view.shape[1] - 1) * view.stride(1)
    return max(0, -(-(2**31 - base) // view.stride(2)))


def exact_rows(q, k, v, rows: torch.Tensor, causal: bool) -> torch.Tensor:
    """Exact float32 attention [H, len(rows), D] of the given query rows over every key, a head
    at a time ([rows, N] scores); q, k, v as [B, H, N, D] views, causal bottom-right (N_q = N_k)."""
    out = torch.empty(H, rows.numel(), D, device="cuda")
    keys = torch.arange(N, device="cuda")[None, :]
    for h in range(H):
        s = (q[0, h, rows].float() @ k[0, h].float().T) * D**-0.5
        if causal:
            s = s.masked_fill(keys > rows[:, None], float("-inf"))
        out[h] = torch.softmax(s, dim=-1) @ v[0, h].float()
    return out


def main(how: str) -> None:
    t0 = time.perf_counter()
    q, k, v = inputs(how)
    layout = "NHD" if how == "NHD" else "HND"
    hnd = tuple(t.transpose(1, 2) for t in (q, k, v)) if layout == "NHD" else (q, k, v)
    late = min(rows_past_2_31(hnd[0]), N - GROUP)
    starts = (0, late, N - GROUP)
    rows = torch.cat([torch.arange(s, s + GROUP) for s in starts]).cuda()
    setup = round(time.perf_counter() - t0, 1)
    say(layout=how, q_stride=list(hnd[0].stride()), rows_from=list(starts), setup_s=setup)
    for causal in (False, True):
        ref = exact_rows(*hnd, rows, causal)
        for pv, fn in (("fp16", sageattn_qk_int8_pv_fp16_triton), ("auto", sageattn)):
            case = f"{how}/{'causal' if causal else 'full'}/{pv}"
            plan = api.launch_plan(q, k, v, tensor_layout=layout, is_causal=causal,
                                   variant="qk_int8_pv_fp16" if pv == "fp16" else "auto")  # fmt: skip
            say(case=case, started=True, variant=plan["variant"], config=plan["config"])
            t1 = time.perf_counter()
            out = fn(q, k, v, tensor_layout=layout, is_causal=causal)
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t1
            o = (out.transpose(1, 2) if layout == "NHD" else out)[0][:, rows].float()
            groups = {}
            for i, s in enumerate(starts):
                part = slice(i * GROUP, (i + 1) * GROUP)
                groups[str(s)] = accuracy(o[:, part], ref[:, part])
            say(case=case, variant=plan["variant"], seconds=round(seconds, 2), groups=groups)
            del out, o
        del ref
    say(layout=how, done=True, total_s=round(time.perf_counter() - t0, 1))


if __name__ == "__main__":
    main(sys.argv[1])
