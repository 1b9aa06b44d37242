"""float32 → OCP e4m3 in the attention kernel (``kernels/triton/fp8.py``): the inline
``v_cvt_pk_fp8_f32`` path gfx12 takes gives the codes of Triton's software cast, which it replaces.

No AMD GPU runs here, so both paths are modelled and held to one table of edge values:

* Triton 3.6's software cast for gfx1201, transcribed from its LLVM IR (``asm["llir"]`` of a
  kernel that casts float32 to ``tl.float8e4nv`` for gfx1201): round to nearest even by adding
  0x7FFFF plus the kept mantissa's lowest bit, subnormals by a ladder of compares on |x|'s bits
  whose ties go to the even code, |x| above 0x43E7FFFF (464 and up, ±inf) saturated to ±448, NaN
  to 0x7F with x's sign.
* The hardware path: ``saturate_fp8`` (run here in Triton's interpreter, so Triton's own min/max
  NaN semantics) followed by ``V_CVT_PK_FP8_F32``, which AMD's ISA guides define as round to
  nearest even onto the OCP grid, subnormals included, NaN kept; AMD's own libraries (CK's and HIP's
  OCP fast paths for gfx12) clamp to ±448 before it exactly so. The attention kernel passes
  ``SATURATE=False`` for P, whose values lie in [0, 448·(1 + 2⁻²⁰)]: the table's rows in that range
  give the same code without the clamp.
"""

from __future__ import annotations

import math
import struct

import pytest
import torch
import triton
import triton.language as tl

from sagebuild.kernels.triton.fp8 import saturate_fp8, to_fp8

NAN = float("nan")
INF = float("inf")
# (value, OCP e4m3 code): ±max, beyond it, subnormals, ties between codes (to the even one), NaN
EDGE = [
    (0.0, 0x00), (-0.0, 0x80),
    (448.0, 0x7E), (-448.0, 0xFE),  # the largest finite codes
    (448.0 * (1 + 2**-20), 0x7E),  # P's largest value (exp2's error above 448)
    (463.99, 0x7E),  # below the 448/480 midpoint: rounds down
    (464.0, 0x7E), (500.0, 0x7E), (1e6, 0x7E), (-1e6, 0xFE), (INF, 0x7E), (-INF, 0xFE),  # saturated
    (240.0, 0x77), (248.0, 0x78),  # 248: tie between 240 (odd mantissa) and 256 (even)
    (1.0625, 0x38), (-1.0625, 0xB8),  # tie between 1 and 1.125: the even code
    (1.0625 + 2**-20, 0x39),  # just above the tie
    (1.1875, 0x3A),  # tie between 1.125 (odd) and 1.25 (even)
    (2**-6, 0x08),  # the smallest normal
    (0.9375 * 2**-6, 0x08),  # tie between the largest subnormal (7·2⁻⁹, odd) and 2⁻⁶
    (7 * 2**-9, 0x07), (2**-9, 0x01), (-(2**-9), 0x81),  # subnormals
    (3 * 2**-10, 0x02), (-3 * 2**-10, 0x82),  # tie between subnormals 1 and 2: 2
    (2**-10, 0x00),  # tie between 0 and the smallest subnormal: 0
    (2**-10 * (1 + 2**-20), 0x01), (2**-11, 0x00), (1e-30, 0x00),
    (NAN, 0x7F),
]  # fmt: skip
P_RANGE = (0.0, 448.0 * (1 + 2**-20))  # what the attention kernel's P can be (besides NaN)


def _bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _float(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# Triton 3.6's gfx1201 ladder: |x|'s bits below each bound give the subnormal code (the last match wins)
_SUBNORMAL_LADDER = [(0x3C700000, 7), (0x3C500001, 6), (0x3C300000, 5), (0x3C100001, 4),
                     (0x3BE00000, 3), (0x3BA00001, 2), (0x3B400000, 1), (0x3A800001, 0)]  # fmt: skip


def software_e4m3(x: float) -> int:
    """Triton 3.6's float32 → e4m3 cast for gfx1201, as its LLVM IR computes it."""
    bits = _bits(x)
    sign, a = (bits >> 24) & 0x80, bits & 0x7FFFFFFF
    if a > 0x7F800000:  # NaN
        return 0x7F | sign
    rounded = (a + 0x7FFFF + ((a >> 20) & 1)) & 0xFFF00000  # nearest even at 3 mantissa bits
    code = ((max(rounded, 0x3C800000) + 0x04000000) >> 20) & 0xFF  # rebias 127 → 7
    if a > 0x43E7FFFF:
        code = 0x7E
    for bound, sub in _SUBNORMAL_LADDER:
        if a < bound:
            code = sub
    return code | sign


def cvt_pk_fp8_rne(x: float) -> int:
    """``V_CVT_PK_FP8_F32`` on one in-range value: the nearest OCP e4m3 code, ties to the even
    code; NaN stays NaN (0x7F with x's sign)."""
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x):
        return 0x7F | sign
    v = abs(x)
    assert v <= 464, "beyond the table's in-range values the instruction needs the clamp"
    # the spacing of the codes around v: 2⁻⁹ below the smallest normal, else 2^(exponent - 3)
    step = 2.0**-9 if v < 2**-6 else 2.0 ** (math.frexp(v)[1] - 4)
    q = round(v / step)  # exact quotient (a power-of-two step); round() ties to even
    value = q * step
    if value < 2**-6:  # subnormal (or zero): the code is the multiple of 2⁻⁹
        return q | sign
    e = math.frexp(value)[1] - 1
    return ((e + 7) << 3 | int(value / 2.0**e * 8) - 8) | sign


@triton.jit
def _saturate_kernel(X, Y, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(Y + offs, saturate_fp8(tl.load(X + offs), 448.0))


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter without a GPU


def _saturated(values: list[float]) -> list[float]:
    n = triton.next_power_of_2(len(values))
    x = torch.tensor(values + [0.0] * (n - len(values)), dtype=torch.float32, device=DEVICE)
    y = torch.empty_like(x)
    _saturate_kernel[(1,)](x, y, n)
    return y[: len(values)].tolist()


@triton.jit
def _convert_kernel(X, Y, Z, BLOCK: tl.constexpr, SATURATE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs)
    tl.store(Y + offs, to_fp8(x, tl.float8e4nv, 448.0, True, SATURATE))  # the inline conversion
    tl.store(Z + offs, x.to(tl.float8e4nv))  # Triton's own cast on this GPU


@pytest.mark.gpu
@pytest.mark.parametrize("saturate", [True, False])
def test_the_inline_conversion_on_an_rdna4_gpu(saturate):
    """On a GPU whose P converts by inline ``v_cvt_pk_fp8_f32`` (gfx12): the table's codes (with
    the clamp: all of them; without: those in P's range and NaN), and Triton's own cast's codes for
    a million random values of P's range, bit for bit."""
    from sagebuild import archs
    from sagebuild.attention import dispatch

    row = archs.ARCHS.get(dispatch.device_arch("cuda"))
    if row is None or not row.fp8_cvt_asm:
        pytest.skip("needs a GPU whose arch converts P by inline asm (gfx1200, gfx1201)")
    n = 1 << 20
    table = [v for v, _ in EDGE]
    x = torch.rand(n, device="cuda") * 460.0 * torch.rand(n, device="cuda") ** 8  # dense near 0 too
    x[: len(table)] = torch.tensor(table, device="cuda")
    y, z = (torch.empty(n, dtype=torch.float8_e4m3fn, device="cuda") for _ in range(2))
    _convert_kernel[(n // 1024,)](x, y, z, 1024, saturate)
    codes, triton_codes = y.view(torch.uint8).tolist(), z.view(torch.uint8).tolist()
    for i, (value, code) in enumerate(EDGE):
        if saturate or math.isnan(value) or P_RANGE[0] <= value <= P_RANGE[1]:
            assert codes[i] == code, (value, hex(codes[i]), hex(code))
    assert codes[len(table) :] == triton_codes[len(table) :]


def test_edge_table_is_the_software_cast_and_torchs():
    """The table is what Triton 3.6's software cast gives on gfx1201, and what torch's CPU cast to
    float8_e4m3fn gives (the golden model's): round to nearest even, saturating, NaN kept."""
    values = [v for v, _ in EDGE]
    torch_codes = torch.tensor(values, dtype=torch.float32).to(torch.float8_e4m3fn).view(torch.uint8).tolist()
    for (value, code), from_torch in zip(EDGE, torch_codes):
        assert software_e4m3(value) == code, (value, hex(software_e4m3(value)), hex(code))
        assert from_torch == code, (value, hex(from_torch), hex(code))


def test_hardware_path_gives_the_software_codes():
    """``saturate_fp8`` then the packed conversion's round to nearest even give every code of the
    table; without the clamp (the attention kernel's P) every value in P's range and NaN do too."""
    values = [v for v, _ in EDGE]
    for (value, code), clamped in zip(EDGE, _saturated(values)):
        assert cvt_pk_fp8_rne(clamped) == code, (value, clamped, hex(code))
        if math.isnan(value) or P_RANGE[0] <= value <= P_RANGE[1]:
            assert cvt_pk_fp8_rne(value) == code, (value, hex(code))


def test_saturation_keeps_nan_and_clamps_infinities():
    out = _saturated([NAN, INF, -INF, 1e30, -1e30, 447.5, -0.0])
    assert math.isnan(out[0]) and out[1:5] == [448.0, -448.0, 448.0, -448.0] and out[5] == 447.5
    assert math.copysign(1.0, out[6]) == -1.0


def test_software_cast_and_round_to_nearest_even_agree_on_a_dense_sweep():
    """Between the edges: 256 values per binade from 2⁻¹² to 2⁹ (every tie of the e4m3 grid, and
    values a float32 ulp either side of each) give the same code from Triton's software cast and
    from the packed conversion's rounding."""
    for exponent in range(-12, 9):
        for i in range(256):
            bits = _bits(2.0**exponent * (1 + i / 256))
            for value in (_float(bits - 1), _float(bits), _float(bits + 1)):  # float32 neighbours
                for signed in (value, -value):
                    if abs(signed) <= 464:
                        assert software_e4m3(signed) == cvt_pk_fp8_rne(signed), signed
