"""float32 → FP8 E4M3 in the attention kernel: Triton's cast, or the arch's packed conversion
instruction where Triton 3.6 writes that cast in software.

Triton 3.6 converts to OCP e4m3 with a compare-and-select ladder per value on RDNA4 (gfx1200,
gfx1201), although the ISA has ``V_CVT_PK_FP8_F32`` (two values per instruction, round to nearest
even); it uses the instruction itself for gfx942's fnuz format and gfx950's OCP one. ``to_fp8``
issues it through inline AMDGCN where the plan says so (``archs.Arch.fp8_cvt_asm``,
``LaunchPlan.fp8_cvt_asm``), with the software path's saturation made explicit first, so that
both give the same codes: round to nearest even, finite values beyond ±FP8_MAX and ±inf to
±FP8_MAX, NaN to NaN (``tests/test_fp8_convert.py`` holds both to one table of edge values).
The interpreter and every other arch keep Triton's cast.
"""

from __future__ import annotations

import triton
import triton.language as tl

# One value per asm block, its code in $0's low byte. (Four per block, two per instruction, would
# return <4 x i8>, for which Triton 3.6's LLVM finds no AMDGPU register: "couldn't allocate".)
_CVT_PK_FP8: tl.constexpr = tl.constexpr("v_cvt_pk_fp8_f32 $0, $1, 0")


@triton.jit
def saturate_fp8(x, FP8_MAX: tl.constexpr):
    """x clamped to [-FP8_MAX, FP8_MAX], NaN kept: the saturation Triton's software cast applies
    (±inf and finite values beyond the largest code become ±FP8_MAX)."""
    x = tl.maximum(x, -FP8_MAX, propagate_nan=tl.PropagateNan.ALL)
    return tl.minimum(x, FP8_MAX, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def to_fp8(x, dtype: tl.constexpr, FP8_MAX: tl.constexpr, CVT_ASM: tl.constexpr, SATURATE: tl.constexpr):
    """float32 ``x`` as ``dtype`` (an FP8 E4M3 type). ``CVT_ASM``: ``v_cvt_pk_fp8_f32`` per value
    through inline AMDGCN (AMD gfx12: OCP e4m3, round to nearest even), after ``saturate_fp8``
    where ``SATURATE`` (a caller whose values cannot leave [-FP8_MAX·(1 + 2⁻²³·16), FP8_MAX·(1 +
    2⁻²³·16)] needs none: round to nearest even maps the top of that range to ±FP8_MAX, and the
    conversion keeps NaN); otherwise Triton's own cast."""
    if CVT_ASM:
        if SATURATE:
            x = saturate_fp8(x, FP8_MAX)
        codes = tl.inline_asm_elementwise(_CVT_PK_FP8, "=v,v", [x], dtype=tl.int32, is_pure=True, pack=1)
        y = codes.to(tl.int8).to(dtype, bitcast=True)
    else:
        y = x.to(dtype)
    return y
