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
from sagebuild.kernels.triton import configs
from triton.testing import do_bench

from sagebuild.attention import sageattn, sageattn_qk_int8_pv_fp8_triton, sageattn_qk_int8_pv_fp16_triton
from sagebuild.bench import graph_replay_us


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
    graph = graph_replay_us(fn)
    print(
        f"host-profile {name}: host {host:.1f} us/call (loop, no sync), do_bench {dev * 1e3:.1f} us, "
        f"graph replay {graph:.1f} us",
        flush=True,
    )


def device_breakdown(q, k, v) -> None:
    """Where the ~40 µs of device time go at a small shape, and which tile config is best there."""
    from sagebuild.kernels.triton import layout, quant
    from sagebuild.kernels.triton.attn_fwd import QuantizedKV, attention_forward

    d = q.shape[-1]
    kd, vd = layout.dense(k), layout.dense(v)
    t_mean = graph_replay_us(lambda: torch.mean(k, dim=2, dtype=torch.float32))
    t_amax = graph_replay_us(lambda: torch.linalg.vector_norm(v, float("inf"), 2))
    print(f"device K mean (torch): {t_mean:.1f} us")
    print(f"device V amax (torch): {t_amax:.1f} us")
    for pv, fp8 in (("fp16", None), ("fp8", torch.float8_e4m3fn)):
        t_quant = graph_replay_us(lambda fp8=fp8: quant.quant_kv(kd, vd, d, True, fp8, 64))
        print(f"device quant_kv {pv}: {t_quant:.1f} us")
        kq, ks, km, vq, vs = quant.quant_kv(kd, vd, d, True, fp8, 64)
        kv = QuantizedKV(kq, ks, 64, km, vq if vq is not None else vd, vs)
        out = torch.empty_like(q)
        for cfg in (
            "128,64,4,3",
            "64,64,4,3",
            "64,32,4,3",
            "32,64,4,2",
            "64,128,4,3",
            "128,128,8,3",
            "32,32,4,2",
        ):
            c = configs.parse_config(cfg)

            def attn(c=c, kv=kv, out=out, fp8=fp8):
                attention_forward(
                    layout.dense(q),
                    kv,
                    layout.dense(out),
                    c,
                    head_dim_pad=d,
                    sm_scale=d**-0.5,
                    causal=False,
                    pv_fp8=fp8 is not None,
                    q_blk=c.q_blk("per_warp"),
                )

            try:
                print(f"device attention {pv} {cfg}: {graph_replay_us(attn):.1f} us")
            except Exception as exc:  # a config that does not fit is a result too
                print(f"device attention {pv} {cfg}: failed ({type(exc).__name__})")
    from sagebuild.attention import GraphedAttention

    for pv, fn in (("fp16", sageattn_qk_int8_pv_fp16_triton), ("fp8", sageattn_qk_int8_pv_fp8_triton)):
        g = GraphedAttention(q, k, v, fn=fn, quantization_backend="triton")
        call = do_bench(lambda g=g: g(q, k, v), return_mode="median") * 1e3
        replay = do_bench(g.replay, return_mode="median") * 1e3
        print(f"GraphedAttention {pv}: call(q, k, v) {call:.1f} us, replay() {replay:.1f} us")


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
    device_breakdown(q, k, v)
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
