# ruff: noqa: B023, E501  (a throwaway probe, reverted in the next commit)
# Build: nvcc -O3 -arch=sm_90a -std=c++17 -shared -Xcompiler -fPIC -cudart static -o libkvq.so scripts/kvq_cluster_probe.cu
"""Temporary: the cluster one-pass K/V quantization prototype against quant.quant_kv."""
import ctypes
import os
import sys

import torch
from sagebuild.kernels.triton import layout as lay
from sagebuild.kernels.triton import quant

from sagebuild import bench

lib = ctypes.CDLL(os.environ.get("KVQ_LIB", "libkvq.so"))
lib.kvq_launch.restype = ctypes.c_int
lib.kvq_launch.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
lib.kvq_max_clusters.restype = ctypes.c_int
lib.kvq_max_clusters.argtypes = [ctypes.c_int, ctypes.c_int]
fp8 = torch.float8_e4m3fn
CS = int(os.environ.get("CSIZE", "16"))
for spec in sys.argv[1].split(","):
    b, h, n, d = (int(x) for x in spec.split("x"))
    print(spec, "max active clusters of", CS, ":", lib.kvq_max_clusters(n, CS), flush=True)
    k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.float16) for _ in range(2))
    k += 4 * torch.randn(1, 1, 1, d, device="cuda", dtype=torch.float16)  # channel offsets
    kq = torch.empty(b * h, n, d, dtype=torch.int8, device="cuda")
    ks = torch.empty(b * h, n // 128, dtype=torch.float32, device="cuda")
    km = torch.empty(b * h, d, dtype=torch.float32, device="cuda")
    vq = torch.empty(b * h, d, n, dtype=torch.uint8, device="cuda")
    vs = torch.empty(b * h, d, dtype=torch.float32, device="cuda")

    def proto():
        rc = lib.kvq_launch(k.data_ptr(), v.data_ptr(), kq.data_ptr(), ks.data_ptr(), km.data_ptr(), vq.data_ptr(),
                            vs.data_ptr(), b * h, n, CS, torch.cuda.current_stream().cuda_stream)
        if rc:
            raise RuntimeError(f"kvq_launch: {rc}")

    proto()
    torch.cuda.synchronize()
    kd, vd = lay.dense(k), lay.dense(v)
    rkq, rks, rkm, rvq, rvs = quant.quant_kv(kd, vd, d, True, fp8, 128, v_key_order=False)
    torch.cuda.synchronize()
    r_k = rkq.t.reshape(b * h, n, d)
    r_v = rvq.t.reshape(b * h, d, n).view(torch.uint8)
    print("  km max|diff|", (km - rkm.reshape(b * h, d)).abs().max().item(),
          " ks rel max", ((ks - rks.reshape(b * h, -1)).abs() / rks.reshape(b * h, -1)).max().item(),
          " vs equal", torch.equal(vs, rvs.reshape(b * h, d)), flush=True)
    print("  K int8 equal fraction", (kq == r_k).float().mean().item(), " max |diff|", (kq.int() - r_k.int()).abs().max().item(),
          " V fp8 equal fraction", (vq == r_v).float().mean().item(), flush=True)
    t_p = bench.graph_replay_us(proto)
    t_q = bench.graph_replay_us(lambda: quant.quant_kv(kd, vd, d, True, fp8, 128, v_key_order=False))
    t_q2 = bench.graph_replay_us(lambda: quant.quant_kv(kd, vd, d, True, fp8, 128, v_key_order=True))
    print(f"  prototype {t_p:.1f} us | quant_kv {t_q:.1f} us (key order {t_q2:.1f})", flush=True)
