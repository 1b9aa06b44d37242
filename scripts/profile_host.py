"""Where the time of one small attention call goes: host (Python, launches) versus device.

At 1×16×1024×64 the device work is a few microseconds, so the host path decides the whole
call. Prints host µs per call (no sync inside the loop), device ms per call, the same call
replayed from a CUDA graph, and the top host functions by cumulative time.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from sagebuild.attention import sageattn, sageattn_qk_int8_pv_fp8_triton, sageattn_qk_int8_pv_fp16_triton


def _measure(name: str, fn) -> None:
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    reps = 2000
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    host = (time.perf_counter() - t0) / reps * 1e6
    torch.cuda.synchronize()
    dev = do_bench(fn, warmup=25, rep=200, return_mode="median")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        fn()
    graph = do_bench(g.replay, warmup=25, rep=200, return_mode="median")
    print(f"host-profile {name}: host {host:.1f} us/call (loop, no sync), do_bench {dev * 1e3:.1f} us, "
          f"graph replay {graph * 1e3:.1f} us", flush=True)


def main(b: int = 1, h: int = 16, n: int = 1024, d: int = 64) -> None:
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    _measure("sdpa", lambda: F.scaled_dot_product_attention(q, k, v))
    for name, fn in (("fp16", sageattn_qk_int8_pv_fp16_triton), ("fp8", sageattn_qk_int8_pv_fp8_triton)):
        _measure(name, lambda fn=fn: fn(q, k, v, quantization_backend="triton"))
    try:  # sageattention 1.0.6 (PyPI), when installed next to us for the comparison
        from sageattention import sageattn as sageattn_106

        _measure("sageattention-1.0.6", lambda: sageattn_106(q, k, v))
    except ImportError:
        pass
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(500):
        sageattn(q, k, v)
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
    print("\n".join(out.getvalue().splitlines()[:45]))


if __name__ == "__main__":
    main()
