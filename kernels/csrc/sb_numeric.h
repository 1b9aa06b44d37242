// Portable scalar arithmetic shared by the CPU ops and the CUDA/HIP kernels.
//
// Everything here is plain C++ that also compiles as device code (nvcc, hipcc): the
// fp16/bf16 decoders, the software FP8 encoder and the rounding rule of the INT8
// quantization. Keeping one copy means the CPU and GPU ops agree bit for bit on the same
// float inputs. No torch and no CUDA/HIP headers are included here.
#pragma once

#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define SB_HD __host__ __device__ __forceinline__
#else
#define SB_HD inline
#endif

namespace sagebuild {

// Smallest amax used for a scale: an all-zero block quantizes to zeros instead of NaN.
constexpr float kAmaxEps = 1e-8f;
constexpr float kInt8Max = 127.0f;
constexpr float kFp8E4m3fnMax = 448.0f;
constexpr float kFp8E4m3fnuzMax = 240.0f;

SB_HD uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}

SB_HD float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}

// 2**e for -126 <= e <= 127, exactly.
SB_HD float pow2(int e) { return bits_float(static_cast<uint32_t>(e + 127) << 23); }

// IEEE half bits -> float (exact, subnormals and inf/nan included).
SB_HD float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    const float mag = static_cast<float>(man) * pow2(-24);
    return (sign != 0u) ? -mag : mag;
  }
  if (exp == 0x1fu) {
    return bits_float(sign | 0x7f800000u | (man << 13));
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// bfloat16 bits -> float: the upper half of a float.
SB_HD float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Storage tags: how one input element is stored and read as float.
struct F16 {
  typedef uint16_t storage;
  static SB_HD float load(storage v) { return half_bits_to_float(v); }
};
struct BF16 {
  typedef uint16_t storage;
  static SB_HD float load(storage v) { return bf16_bits_to_float(v); }
};
struct F32 {
  typedef float storage;
  static SB_HD float load(storage v) { return v; }
};

// y * r rounded once, never contracted into an FMA with the rounding that follows: the
// contract multiplies each element by a scale's IEEE reciprocal and rounds the product on its
// own, as the Triton kernels and torch do (host code is built with -ffp-contract=off).
SB_HD float mul_rn(float y, float r) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(y, r);
#else
  return y * r;
#endif
}

// The IEEE reciprocal of a scale (1 / step, 1 / v_scale): one division per block or channel.
SB_HD float recip(float s) { return 1.0f / s; }

// Non-finite inputs (as the Triton kernels, quant.py): an amax keeps NaN (fmaxf drops it), a
// block or channel whose amax is inf or NaN gets a NaN scale, so what it enters is NaN instead of
// a number quantized from it, and K's mean is 0 in a channel whose sum is not finite.
SB_HD float max_keep_nan(float a, float b) { return (a > b || a != a) ? a : b; }

SB_HD bool is_finite_value(float x) { return (float_bits(x) & 0x7f800000u) != 0x7f800000u; }

// max(amax, kAmaxEps) / top, or NaN when amax is not finite.
SB_HD float scale_of(float amax, float top) {
  return is_finite_value(amax) ? fmaxf(amax, kAmaxEps) / top : bits_float(0x7fc00000u);
}

SB_HD float finite_or_zero(float x) { return is_finite_value(x) ? x : 0.0f; }

// Symmetric INT8 of y given inv = recip(step): round half away from zero, clamp to [-127, 127].
SB_HD int8_t quant_int8(float y, float inv) {
  float q = roundf(mul_rn(y, inv));
  q = fminf(fmaxf(q, -kInt8Max), kInt8Max);
  return static_cast<int8_t>(q);
}

// float -> FP8 E4M3 bits, round to nearest even, saturating to the largest finite value.
//   fnuz == false: OCP e4m3fn (bias 7, max 448, NaN 0x7f, signed zero kept)
//   fnuz == true:  e4m3fnuz (bias 8, max 240, NaN 0x80, no negative zero)
SB_HD uint8_t float_to_e4m3(float x, bool fnuz) {
  const int bias = fnuz ? 8 : 7;
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN
    return fnuz ? 0x80u : 0x7fu;
  }
  const float a = bits_float(u & 0x7fffffffu);
  const float maxv = fnuz ? kFp8E4m3fnuzMax : kFp8E4m3fnMax;
  const uint8_t max_code = fnuz ? 0x7fu : 0x7eu;
  uint8_t code;
  if (!(a < maxv)) {  // >= max (and inf): saturate
    code = max_code;
  } else {
    const int e_min = 1 - bias;  // exponent of the smallest normal
    int e = static_cast<int>((float_bits(a) >> 23) & 0xffu) - 127;
    if (e < e_min) {
      // Subnormal range: units of 2**(e_min - 3); a count of 8 is the smallest normal.
      const float m = rintf(a * pow2(3 - e_min));
      code = static_cast<uint8_t>(m);
    } else {
      float m = rintf(a * pow2(3 - e));  // in [8, 16]
      if (m >= 16.0f) {
        m = 8.0f;
        e += 1;
      }
      code = static_cast<uint8_t>(((e + bias) << 3) | (static_cast<int>(m) - 8));
      if (code > max_code) code = max_code;
    }
  }
  if (fnuz && code == 0) return 0;  // fnuz has no negative zero (0x80 is NaN)
  return static_cast<uint8_t>(code | sign);
}

SB_HD int cdiv(int a, int b) { return (a + b - 1) / b; }

// Strided view of a logical [B, H, N, D] tensor.
struct View4 {
  int64_t sb, sh, sn, sd;
  int H, N, D;
};

SB_HD int64_t offset(const View4& v, int bh, int n, int d) {
  const int b = bh / v.H;
  const int h = bh % v.H;
  return b * v.sb + h * v.sh + n * v.sn + d * v.sd;
}

}  // namespace sagebuild
