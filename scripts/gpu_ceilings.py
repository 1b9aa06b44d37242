#!/usr/bin/env python3
"""Rerun on a new GPU for docs/performance.md's roofline: copy bandwidth and matrix rates.

Copy: a large device-to-device copy (bytes read + written). Matrix: 8192³ products in bf16,
int8 (torch._int_mm) and fp8 (torch._scaled_mm) where the build supports them; random data.
"""

from __future__ import annotations

import torch
from triton.testing import do_bench


def _ms(fn) -> float:
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def main() -> None:
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(dev)
    n = 1 << 30  # 1 GiB per buffer
    src = torch.empty(n, dtype=torch.uint8, device=dev).random_()
    dst = torch.empty_like(src)
    print(f"ceiling gpu={name} copy_TBps={2 * n / _ms(lambda: dst.copy_(src)) / 1e9:.2f}")

    m = 8192
    a = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    b = torch.randn(m, m, device=dev, dtype=torch.bfloat16)
    print(f"ceiling bf16_TFLOPS={2 * m**3 / _ms(lambda: a @ b) / 1e9:.0f}")
    ai = torch.randint(-127, 127, (m, m), device=dev, dtype=torch.int8)
    bi = torch.randint(-127, 127, (m, m), device=dev, dtype=torch.int8).t()
    try:
        print(f"ceiling int8_TOPS={2 * m**3 / _ms(lambda: torch._int_mm(ai, bi)) / 1e9:.0f}")
    except RuntimeError as e:  # not every build has an int8 GEMM for this arch
        print(f"ceiling int8_TOPS=n/a ({str(e)[:80]})")
    try:
        af = a.to(torch.float8_e4m3fn)
        bf = b.to(torch.float8_e4m3fn).t().contiguous().t()
        one = torch.tensor(1.0, device=dev)
        ms = _ms(lambda: torch._scaled_mm(af, bf, one, one, out_dtype=torch.bfloat16))
        print(f"ceiling fp8_TFLOPS={2 * m**3 / ms / 1e9:.0f}")
    except (RuntimeError, TypeError) as e:
        print(f"ceiling fp8_TFLOPS=n/a ({str(e)[:80]})")


if __name__ == "__main__":
    main()
