// CUDA kernels of the fused pre-processing ops (hipify-clean, torch-free).
//
// Only portable CUDA is used: no inline PTX, no warp shuffles (CDNA runs 64-wide waves),
// reductions through shared memory. The per-element arithmetic comes from sb_numeric.h,
// the same code the CPU ops run, so both back-ends agree on the same float inputs.
// Inputs are read through their raw 16/32-bit storage (see the F16/BF16/F32 tags), which
// keeps this header free of cuda_fp16.h / cuda_bf16.h and their HIP counterparts.
#pragma once

#include <cuda_runtime.h>

#include "sb_numeric.h"

namespace sagebuild {

// Tile of the column-wise reductions (k_mean, V amax): 32 columns x 8 row lanes.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
// Threads of one per-block INT8 quantization block.
constexpr int kQuantThreads = 256;

// Mean over the token axis: out[bh, d] = sum_n x[bh, n, d] / N  (float32, [B, H, 1, D]).
template <class T>
__global__ void k_mean_kernel(const typename T::storage* __restrict__ x, float* __restrict__ out,
                              View4 v) {
  __shared__ float part[kRowLanes][kColTile + 1];
  const int bh = blockIdx.y;
  const int d = blockIdx.x * kColTile + threadIdx.x;
  float s = 0.0f;
  if (d < v.D) {
    for (int n = threadIdx.y; n < v.N; n += kRowLanes) s += T::load(x[offset(v, bh, n, d)]);
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && d < v.D) {
    float t = 0.0f;
    for (int r = 0; r < kRowLanes; ++r) t += part[r][threadIdx.x];
    out[static_cast<int64_t>(bh) * v.D + d] = t / static_cast<float>(v.N);
  }
}

// Per-block symmetric INT8 of y = x - km (km may be null): one CUDA block per (bh, token block).
// scale[bh, i] = max(amax, eps) / 127 * scale_mul;  out = round_half_away(y / (amax / 127)).
template <class T>
__global__ void quant_int8_kernel(const typename T::storage* __restrict__ x, const float* __restrict__ km,
                                  int8_t* __restrict__ out, float* __restrict__ scale, View4 v, int blk,
                                  int nblk, float scale_mul) {
  __shared__ float red[kQuantThreads];
  const int bh = blockIdx.x / nblk;
  const int ib = blockIdx.x % nblk;
  const int n0 = ib * blk;
  const int rows = (v.N - n0 < blk) ? (v.N - n0) : blk;
  const int count = rows * v.D;
  const float* kmrow = km ? km + static_cast<int64_t>(bh) * v.D : nullptr;

  float amax = 0.0f;
  for (int i = threadIdx.x; i < count; i += kQuantThreads) {
    const int r = i / v.D;
    const int c = i % v.D;
    float y = T::load(x[offset(v, bh, n0 + r, c)]);
    if (kmrow) y -= kmrow[c];
    amax = fmaxf(amax, fabsf(y));
  }
  red[threadIdx.x] = amax;
  __syncthreads();
  for (int w = kQuantThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  const float step = fmaxf(red[0], kAmaxEps) / kInt8Max;
  if (threadIdx.x == 0) scale[static_cast<int64_t>(bh) * nblk + ib] = step * scale_mul;

  int8_t* dst = out + (static_cast<int64_t>(bh) * v.N + n0) * v.D;
  for (int i = threadIdx.x; i < count; i += kQuantThreads) {
    const int r = i / v.D;
    const int c = i % v.D;
    float y = T::load(x[offset(v, bh, n0 + r, c)]);
    if (kmrow) y -= kmrow[c];
    dst[i] = quant_int8(y, step);
  }
}

// Per-channel FP8 of V: scale[bh, d] = max(amax_n |v|, eps) / fp8_max, out = e4m3(v / scale).
template <class T>
__global__ void quant_v_fp8_kernel(const typename T::storage* __restrict__ x, uint8_t* __restrict__ out,
                                   float* __restrict__ scale, View4 v, bool fnuz) {
  __shared__ float part[kRowLanes][kColTile + 1];
  const int bh = blockIdx.y;
  const int d = blockIdx.x * kColTile + threadIdx.x;
  float amax = 0.0f;
  if (d < v.D) {
    for (int n = threadIdx.y; n < v.N; n += kRowLanes) amax = fmaxf(amax, fabsf(T::load(x[offset(v, bh, n, d)])));
  }
  part[threadIdx.y][threadIdx.x] = amax;
  __syncthreads();
  if (threadIdx.y == 0) {
    float m = 0.0f;
    for (int r = 0; r < kRowLanes; ++r) m = fmaxf(m, part[r][threadIdx.x]);
    part[0][threadIdx.x] = fmaxf(m, kAmaxEps) / (fnuz ? kFp8E4m3fnuzMax : kFp8E4m3fnMax);
  }
  __syncthreads();
  if (d >= v.D) return;
  const float s = part[0][threadIdx.x];
  if (threadIdx.y == 0) scale[static_cast<int64_t>(bh) * v.D + d] = s;
  uint8_t* dst = out + static_cast<int64_t>(bh) * v.N * v.D + d;
  for (int n = threadIdx.y; n < v.N; n += kRowLanes) {
    dst[static_cast<int64_t>(n) * v.D] = float_to_e4m3(T::load(x[offset(v, bh, n, d)]) / s, fnuz);
  }
}

// ---- launchers: grids chosen here so the bindings only pass pointers and shapes ----

template <class T>
void launch_k_mean(const typename T::storage* x, float* out, View4 v, int BH, cudaStream_t stream) {
  dim3 grid(cdiv(v.D, kColTile), BH);
  dim3 block(kColTile, kRowLanes);
  k_mean_kernel<T><<<grid, block, 0, stream>>>(x, out, v);
}

template <class T>
void launch_quant_int8(const typename T::storage* x, const float* km, int8_t* out, float* scale, View4 v,
                       int BH, int blk, float scale_mul, cudaStream_t stream) {
  const int nblk = cdiv(v.N, blk);
  dim3 grid(static_cast<unsigned>(BH) * static_cast<unsigned>(nblk));
  quant_int8_kernel<T><<<grid, kQuantThreads, 0, stream>>>(x, km, out, scale, v, blk, nblk, scale_mul);
}

template <class T>
void launch_quant_v_fp8(const typename T::storage* x, uint8_t* out, float* scale, View4 v, int BH, bool fnuz,
                        cudaStream_t stream) {
  dim3 grid(cdiv(v.D, kColTile), BH);
  dim3 block(kColTile, kRowLanes);
  quant_v_fp8_kernel<T><<<grid, block, 0, stream>>>(x, out, scale, v, fnuz);
}

}  // namespace sagebuild
