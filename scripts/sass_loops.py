#!/usr/bin/env python3
"""Predict before measuring: the attention kernel's SASS for launch configs, without a GPU.

    python scripts/sass_loops.py "64,128,4,2,168,tma;64,64,4,3,168" [--head-dim 128] [--keys 16384]
        [--causal] [--accum fp32|fp32+fp32] [--variant qk_int8_pv_fp8] [--arch sm90]

Each config is compiled ahead of time (``tests/kernel_asm.py``'s ``sass_report``: Triton, then the bundled
``cuobjdump``) and one line printed per config: registers, stack frame (spills), shared memory
per CTA (which, with the registers, sets CTAs per SM), and each innermost key loop's counts
(``kernel_asm._LOOP_CLASSES`` says what each class shows). An empty config is the table's choice for
the keys; SAGEBUILD_V_KEY_ORDER=0 shows the kernel with FP8 V in plain key order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sagebuild.attention import aot

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # kernel_asm: test evidence
import kernel_asm  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", help='configs separated by ";" ("" = the table\'s)')
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--keys", type=int, default=16384, help="key count, for the table's rows")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--accum", default="fp32", choices=["fp32", "fp32+fp32"])
    ap.add_argument("--variant", default="qk_int8_pv_fp8", choices=list(aot.VARIANTS))
    ap.add_argument("--arch", default="sm90")
    args = ap.parse_args()
    print(
        "| config | TMA | registers | stack B | shared KB "
        "| key loops: instructions/MMA/MMA waits/MUFU/FSEL/LDL+STL/SHFL+PRMT/LDGSTS/FMNMX/VIMNMX3 "
        "| wgmma serialised |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for cfg in args.configs.split(";"):
        r = kernel_asm.sass_report(
            args.variant, args.arch, args.head_dim, args.causal, args.keys, args.accum, cfg or None
        )
        # each loop's counts in sass_loops' order: the instructions, then kernel_asm._LOOP_CLASSES
        loops = "; ".join("/".join(str(n) for n in lp.values()) for lp in r["loops"])
        serial = (r["wgmma_serialized"] or "no")[:5]
        print(f"| {r['config']} | {r['tma']} | {r['registers']} | {r['stack_bytes']} | "
              f"{r['shared_bytes'] / 1024:.1f} | {loops} | {serial} |")  # fmt: skip


if __name__ == "__main__":
    main()
