"""Where the K/V pre-processing time goes (GPU): each piece of ``quant.quant_kv`` timed alone.

    python scripts/quant_breakdown.py [--shapes 2x32x4096x128,1x32x16384x128] [--stats-sweep | --inline-sweep]

Prints, per shape, do_bench medians (ms) of K's mean and V's amax by torch reductions, the
same statistics by ``quant.kv_stats`` (column statistics per part of the tokens, then a small
combining launch), the Triton quantization launch with the statistics given (also K alone), the
whole ``quant_kv`` call, the extension's ops when built, and the bandwidth floor (read K and V once,
write them quantized) at the device's measured copy rate passed with --copy-tbps. (On the H200 a
read-only pass reaches less than a copy: 3.14 TB/s at best against 3.75 read + write in the same
process, docs/performance.md run 27; the statistics' floor printed here is optimistic.)
``--stats-sweep`` times ``kv_stats`` over its launch knobs (``quant.PART_*``, warps included) instead;
``--inline-sweep`` times short sequences' ``quant_kv`` (statistics inside the quantization
launch) over ``quant.INLINE_*`` (rows per load, stages, warps) as CUDA-graph replays (device time only).
"""

from __future__ import annotations

import argparse
import itertools

import torch
from sagebuild.kernels.triton import configs, launcher, layout, quant
from triton.testing import do_bench

from sagebuild.attention.api import launch_plan
from sagebuild.bench import graph_replay_us

DEFAULT_SHAPES = "2x32x4096x128,1x32x16384x128,4x32x8192x64"
INLINE_SHAPES = "1x16x1024x64,1x16x2048x64,1x16x1024x128,2x32x1024x128"


def _ms(fn) -> float:
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def _row(spec: str, ops, copy_tbps: float) -> str:
    fp8 = torch.float8_e4m3fn
    b, h, n, d = (int(x) for x in spec.split("x"))
    k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(2))
    kd, vd = layout.dense(k), layout.dense(v)
    dp = configs.padded_head_dim(d)
    # K's scale block as the MMA-accumulated FP8 call would quantize it
    blk = launch_plan(
        k, k, v, variant="qk_int8_pv_fp8", pv_accum_dtype="fp32", quantization_backend="triton"
    )["k_blk"]
    key = ("breakdown", spec)  # the launcher's fast path, as attention calls take it
    km, va = quant.kv_stats(kd, vd, dp, True, fp8, key)
    t_mean = _ms(lambda: torch.mean(k, dim=2, dtype=torch.float32))
    t_amax = _ms(lambda: torch.linalg.vector_norm(v, ord=float("inf"), dim=2, dtype=torch.float32))
    t_quant = _ms(
        lambda: quant.quant_blocks(kd, km, blk, 1.0, dp, v=vd, v_amax=va, fp8_dtype=fp8, launch_key=key)
    )
    t_k_only = _ms(lambda: quant.quant_blocks(kd, km, blk, 1.0, dp))
    t_stats = _ms(lambda: quant.kv_stats(kd, vd, dp, True, fp8, key))
    parts = launcher.cdiv(n, quant.part_rows(n, b * h, k.device, dp))
    t_all = _ms(lambda: quant.quant_kv(kd, vd, dp, True, fp8, blk, launch_key=key))
    t_ext = float("nan")
    if ops is not None:

        def ext_call() -> None:
            m = ops.k_mean(k)
            ops.quant_per_block_int8(k, m, blk, 1.0)
            ops.quant_v_fp8_per_channel(v, False)

        t_ext = _ms(ext_call)
    floor = 6 * k.numel() / (copy_tbps * 1e12) * 1e3  # bytes: read K and V (2 + 2), write 1 + 1
    return (
        f"| {b}×{h}×{n}×{d} | {blk} | {t_mean:.4f} | {t_amax:.4f} | {t_stats:.4f} ({parts}) | "
        f"{t_quant:.4f} | {t_k_only:.4f} | {t_all:.4f} | {t_ext:.4f} | {floor:.4f} |"
    )


def _stats_sweep(spec: str, copy_tbps: float) -> None:
    """kv_stats medians over its launch knobs (quant.PART_*), each checked against the defaults'
    result (V's amax exactly, K's mean within summation-order rounding)."""
    b, h, n, d = (int(x) for x in spec.split("x"))
    k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(2))
    kd, vd = layout.dense(k), layout.dense(v)
    fp8 = torch.float8_e4m3fn
    ref = quant.kv_stats(kd, vd, d, True, fp8)
    floor = 4 * k.numel() / (copy_tbps * 1e12) * 1e6
    knobs = ("PART_CHUNK_ELEMS", "PART_STAGES", "PART_WAVES", "PART_WARPS")
    defaults = {name: getattr(quant, name) for name in knobs}
    try:
        for combo in itertools.product((2048, 4096, 8192), (2, 3, 4), (4, 8), (4, 8)):
            chunk, stages, waves, warps = combo
            for name, value in zip(knobs, combo):
                setattr(quant, name, value)
            key = ("sweep", spec, *combo)
            km, va = quant.kv_stats(kd, vd, d, True, fp8, key)
            same = torch.equal(va, ref[1]) and torch.allclose(km, ref[0], atol=1e-5)
            t = _ms(lambda key=key: quant.kv_stats(kd, vd, d, True, fp8, key)) * 1e3
            print(f"{spec} chunk={chunk} stages={stages} waves={waves} warps={warps}: {t:.1f} us "
                  f"(floor {floor:.1f}){'' if same else ' MISMATCH'}", flush=True)  # fmt: skip
    finally:
        for name, value in defaults.items():
            setattr(quant, name, value)


def _inline_sweep(spec: str) -> None:
    """quant_kv with the statistics inside the quantization launch (short sequences), device time
    over its knobs (quant.INLINE_*), each checked against the defaults' result."""
    b, h, n, d = (int(x) for x in spec.split("x"))
    k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(2))
    kd, vd = layout.dense(k), layout.dense(v)
    dp = configs.padded_head_dim(d)
    assert n * dp <= quant.INLINE_STATS_MAX_ELEMENTS, f"{spec} takes kv_stats, not the inline path"
    defaults = {name: getattr(quant, name) for name in ("INLINE_CHUNK_ROWS", "INLINE_STAGES", "INLINE_WARPS")}
    try:
        for fp8 in (None, torch.float8_e4m3fn):
            for name, value in defaults.items():
                setattr(quant, name, value)
            ref = quant.quant_kv(kd, vd, dp, True, fp8, configs.K_BLK)
            for rows, stages, warps in itertools.product((16, 32, 64, 128, 256), (1, 2, 3), (4, 8)):
                quant.INLINE_CHUNK_ROWS, quant.INLINE_STAGES, quant.INLINE_WARPS = {dp: rows}, stages, warps
                got = quant.quant_kv(kd, vd, dp, True, fp8, configs.K_BLK)
                # another chunk size sums K in another order: codes may move by one step
                flips = int((got[0].t.int() - ref[0].t.int()).abs().gt(0).sum())
                same = torch.allclose(got[2], ref[2], atol=1e-5) and flips <= got[0].t.numel() // 10000
                t = graph_replay_us(lambda fp8=fp8: quant.quant_kv(kd, vd, dp, True, fp8, configs.K_BLK))
                label = f"{'fp8' if fp8 else 'fp16'} rows={rows} stages={stages} warps={warps}"
                print(f"{spec} {label}: {t:.1f} us{'' if same else ' MISMATCH'}", flush=True)
    finally:
        for name, value in defaults.items():
            setattr(quant, name, value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--copy-tbps", type=float, default=4.22, help="measured copy bandwidth (run 1)")
    ap.add_argument("--stats-sweep", action="store_true", help="sweep kv_stats' launch knobs instead")
    ap.add_argument("--inline-sweep", action="store_true", help="sweep the in-launch statistics' knobs")
    args = ap.parse_args()
    if args.inline_sweep:
        for spec in (args.shapes if args.shapes != DEFAULT_SHAPES else INLINE_SHAPES).split(","):
            _inline_sweep(spec)
        return
    if args.stats_sweep:
        for spec in args.shapes.split(","):
            _stats_sweep(spec, args.copy_tbps)
        return
    try:
        from sagebuild import ext

        ops = ext.get_quant_ops(torch.device("cuda"))
    except ImportError:
        ops = None
    print(
        "| B×H×N×D | K block | torch K mean | torch V amax | kv_stats (parts) | quant launch | K only "
        "| quant_kv | ext ops | floor |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for spec in args.shapes.split(","):
        print(_row(spec, ops, args.copy_tbps), flush=True)


if __name__ == "__main__":
    main()
