#!/usr/bin/env python3
"""Probe: Triton's automatic warp specialisation (``tl.range(..., warp_specialize=True)``) on our
key loop, to re-check with each Triton upgrade (docs/performance.md run 25, next steps item 3).

    python scripts/ws_auto_probe.py --compile-only          # no GPU: sm90 compile of each config
    python scripts/ws_auto_probe.py [--shapes 2x32x4096x128,1x32x16384x128]   # GPU timings

The kernel here is the portable kernel's unmasked key loop alone (INT8 Q·Kᵀ with the INT32→FP32
bit trick, one K scale per 128-key tile, online softmax, FP8 P·V accumulated by the MMA), Q read
by a tensor descriptor (Triton 3.6's Hopper pass asserts on a Q tile from ``tl.load``), on Q, K
and V quantized beforehand (``quant.quant_blocks``, ``quant.quant_kv`` in plain key order). Each
config is timed by CUDA-graph replay against ``attention_forward`` on the same quantized inputs
(the table's config, Q given) and compared with it element-wise. Run 25 (Triton 3.6.0, H200):
the specialised BM=64 kernel compiled to 12 warps and ran 2.2× slower at 2×32×4096×128 (1560.7
against 710.8 µs; with 3 stages it differed from ours by up to 0.037); BM=128 at 4 warps did not
compile.
"""

from __future__ import annotations

import argparse
import math

import torch
import triton
import triton.language as tl
from sagebuild.kernels.triton import configs, quant
from sagebuild.kernels.triton import layout as lay
from sagebuild.kernels.triton.attn_fwd import (
    MAGIC_F,
    MAGIC_I,
    QuantizedKV,
    QuantizedQ,
    attention_forward,
    tma_eligible,
)
from triton.tools.tensor_descriptor import TensorDescriptor

from sagebuild import bench
from sagebuild.attention import api, dispatch
from sagebuild.attention.metrics import accuracy
from sagebuild.attention.validate import check_sm_scale

P_SHIFT = math.log2(quant.fp8_max(torch.float8_e4m3fn))  # P scaled to FP8's range, as attn_fwd
CONFIGS = [  # (BLOCK_M, warps, stages, warp_specialize)
    (64, 4, 2, True), (128, 4, 2, True), (128, 8, 2, True), (64, 4, 3, True), (128, 4, 3, True),
    (128, 8, 2, False), (64, 4, 2, False),
]


@triton.jit
def ws_attn(q_desc, QS, KS, k_desc, v_desc, VS, Out, N, QS_NBLK, KS_NBLK, stride_o,
            BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, Q_BLK: tl.constexpr,
            P_SHIFT: tl.constexpr, WS: tl.constexpr, STAGES: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    start_m = pid_m * BM
    offs_m = start_m + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    q = q_desc.load([(bh * N + start_m).to(tl.int32), 0])
    qs = tl.load(QS + bh * QS_NBLK + offs_m // Q_BLK)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    acc = tl.zeros([BM, D], tl.float32)
    k_row0 = (bh * N).to(tl.int32)
    v_row0 = (bh * D).to(tl.int32)
    for start_n in tl.range(0, N, BN, num_stages=STAGES, warp_specialize=WS):
        kt = k_desc.load([k_row0 + start_n, 0])
        si = tl.dot(q, tl.trans(kt)) + MAGIC_I
        s = si.to(tl.float32, bitcast=True)
        c = qs * tl.load(KS + bh * KS_NBLK + start_n // BN)
        off = c * MAGIC_F
        m_new = tl.maximum(m_i, tl.max(s, axis=1) * c - off)
        p = tl.math.exp2(s * c[:, None] - (m_new + off - P_SHIFT)[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.trans(v_desc.load([v_row0, start_n]))
        acc = tl.dot(p.to(tl.float8e4nv), v, acc * alpha[:, None])
        m_i = m_new
    vs = tl.load(VS + bh * D + offs_d)
    out = acc * vs[None, :] / l_i[:, None]
    tl.store(Out + bh * N * stride_o + offs_m[:, None] * stride_o + offs_d[None, :], out.to(tl.float16))


def compile_only() -> None:
    """Each config compiled for sm90 without a GPU: warps after specialisation, registers, or the error."""
    from triton.backends.compiler import GPUTarget

    from sagebuild import archs
    from sagebuild.attention import aot

    target = GPUTarget(*archs.get("sm90").triton_target)

    for bm, warps, stages, ws in CONFIGS:
        sig = {"q_desc": f"tensordesc<i8[{bm},128]>", "QS": "*fp32", "KS": "*fp32",
               "k_desc": "tensordesc<i8[128,128]>", "v_desc": "tensordesc<fp8e4nv[128,128]>", "VS": "*fp32",
               "Out": "*fp16", "N": "i32", "QS_NBLK": "i32", "KS_NBLK": "i32", "stride_o": "i32"}  # fmt: skip
        consts = dict(BM=bm, BN=128, D=128, Q_BLK=16, P_SHIFT=P_SHIFT, WS=ws, STAGES=stages)
        sig.update({name: "constexpr" for name in consts})
        name = f"ws={ws} BM={bm} warps={warps} stages={stages}"
        try:
            kernel = triton.compile(
                triton.compiler.ASTSource(ws_attn, sig, constexprs=consts),
                target=target,
                options={"num_warps": warps},
            )
        except Exception as e:  # noqa: BLE001 (Triton raises RuntimeError or its own errors)
            print(f"{name}: does not compile ({type(e).__name__})")
            continue
        report = aot.ptxas_verbose(kernel.asm["ptx"], target.arch).splitlines()
        regs = [ln.strip() for ln in report if "registers" in ln]
        print(f"{name}: {kernel.metadata.num_warps} warps, {kernel.metadata.shared} B shared, {regs[:1]}")


def _shape(spec: str) -> None:
    """One shape on the GPU: ours (Q given), then each config, timed by CUDA-graph replay."""
    b, h, n, d = (int(x) for x in spec.split("x"))
    if d != 128 or n % 128:
        raise SystemExit(f"{spec}: the probe's loop takes head dim 128 and whole 128-key tiles")
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(3))
    arch = dispatch.device_arch(q.device)
    fp8 = dispatch.fp8_dtype(arch)
    scale = check_sm_scale(None, d)
    dp, cfg = api._resolve(arch, d, "fp8", False, None, n, "fp32", tma_layout=True)
    family = dispatch.family(arch)
    kq, ks, km, vq, vs = quant.quant_kv(lay.dense(k), lay.dense(v), dp, True, fp8, 128, v_key_order=False)
    kv = QuantizedKV(kq, ks, 128, km, vq, vs, v_key_order=False)
    q_blk = cfg.q_blk("per_warp")
    qi, qsc, _, _ = quant.quant_blocks(lay.dense(q), None, q_blk, scale * quant.LOG2E, dp)
    ours_out = torch.empty_like(q)

    def ours() -> None:
        attention_forward(
            lay.dense(q), kv, lay.dense(ours_out), cfg, head_dim_pad=dp, sm_scale=scale, causal=False,
            pv_fp8=True, q_blk=q_blk, fp8_max=quant.fp8_max(fp8),
            tma=configs.use_tma(family, cfg) and tma_eligible(kv, dp, True),
            wgmma_pipe=configs.use_wgmma_pipe(family, cfg), pv_direct=True,
            q_int8=QuantizedQ(qi, qsc, q_blk),
        )  # fmt: skip

    ours()
    t_ours = bench.graph_replay_us(ours)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    print(f"{spec} ours ({cfg}, plain key order, Q given): {t_ours:.1f} us, "
          f"cos {accuracy(ours_out.float(), ref)['cos']:.5f}", flush=True)  # fmt: skip
    kd = TensorDescriptor(kq.t, [b * h * n, dp], [dp, 1], [128, dp])
    vd = TensorDescriptor(vq.t, [b * h * dp, n], [n, 1], [dp, 128])
    for bm, warps, stages, ws in CONFIGS:
        out = torch.empty_like(q)
        qd = TensorDescriptor(qi.t.reshape(b * h * n, dp), [b * h * n, dp], [dp, 1], [bm, dp])
        args = (qd, qsc, ks, kd, vd, vs, out, n, qsc.shape[-1], ks.shape[-1], d)
        consts = dict(BM=bm, BN=128, D=dp, Q_BLK=q_blk, P_SHIFT=P_SHIFT, WS=ws, STAGES=stages)
        name = f"  ws={ws} BM={bm} warps={warps} stages={stages}"
        grid = (n // bm, b * h)

        def run(grid=grid, args=args, consts=consts, warps=warps) -> None:
            ws_attn[grid](*args, **consts, num_warps=warps)

        try:
            run()  # compiled outside the graph capture
            torch.cuda.synchronize()
            t = bench.graph_replay_us(run)
        except Exception as e:  # noqa: BLE001 (a config Triton cannot compile)
            print(f"{name}: does not compile ({type(e).__name__})", flush=True)
            continue
        diff = (out.float() - ours_out.float()).abs().max().item()
        print(f"{name}: {t:.1f} us ({t_ours / t:.3f}x ours), cos {accuracy(out.float(), ref)['cos']:.5f}, "
              f"max |diff| against ours {diff:.4f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--shapes", default="2x32x4096x128,1x32x16384x128")
    ap.add_argument("--compile-only", action="store_true")
    args = ap.parse_args()
    if args.compile_only:
        compile_only()
        return
    torch.manual_seed(0)
    for spec in args.shapes.split(","):
        _shape(spec)


if __name__ == "__main__":
    main()
