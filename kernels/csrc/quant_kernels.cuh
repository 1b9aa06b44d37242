// CUDA kernels of the fused pre-processing ops (hipify-clean, torch-free).
//
// Only portable CUDA is used: no inline PTX, no warp shuffles (CDNA runs 64-wide waves),
// reductions through shared memory. The per-element arithmetic comes from sb_numeric.h,
// the same code the CPU ops run, so both back-ends agree on the same float inputs.
// Inputs are read through their raw 16/32-bit storage (see the F16/BF16/F32 tags), which
// keeps this header free of cuda_fp16.h / cuda_bf16.h and their HIP counterparts.
//
// The column reductions over tokens (k_mean, V's per-channel amax) run in two deterministic
// steps, without float atomics: a partial kernel with one block per (32 channels, head, chunk
// of tokens) writes one value per chunk and channel to a float32 workspace, and a small
// finalize kernel combines the chunks of each channel in a fixed order. V's FP8 codes are
// written channel-major ([B, H, D, N], tokens contiguous) through a shared-memory transpose.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "sb_numeric.h"

namespace sagebuild {

// Tile of the column-wise reductions: 32 columns x 8 row lanes.
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
// Tokens per block of the partial reductions (doubled while the chunk count exceeds kMaxGridZ).
constexpr int kReduceChunk = 128;
constexpr int kMaxGridZ = 65535;
// Tokens per tile of V's transposing FP8 kernel (a multiple of 4: codes are stored 4 at a time).
constexpr int kVTileN = 64;
// Threads of one per-block INT8 quantization block; of the finalize kernels.
constexpr int kQuantThreads = 256;
constexpr int kFinalizeThreads = 256;

// ---- 16-byte vector path ----
// A warp reading one 2-byte element per thread moves 64 B per load: the scalar kernels below
// run at ~0.7 TB/s on an H200. When rows can be read 16 bytes at
// a time (unit channel stride, aligned rows, a power-of-two number of vectors per row) the
// *_vec kernels read 8 halfs (4 floats) per load and store INT8 codes 8 (4) at a time.
template <class T>
struct Vec {
  static constexpr int n = 16 / static_cast<int>(sizeof(typename T::storage));
};

// V INT8 codes stored at once: 8 as a uint2, 4 as a uint32_t.
template <int V>
using PackedI8 = typename std::conditional<V == 8, uint2, uint32_t>::type;

// Whether x (elements at the View4's strides) can take the vector kernels.
template <class T>
inline bool vec_ok(const typename T::storage* x, const View4& v) {
  constexpr int V = Vec<T>::n;
  const int tpr = v.D / V;  // threads per row
  return v.sd == 1 && v.D % V == 0 && v.sn % V == 0 && v.sh % V == 0 && v.sb % V == 0 &&
         (reinterpret_cast<uintptr_t>(x) % 16) == 0 && tpr > 0 && tpr <= kQuantThreads &&
         (kQuantThreads % tpr) == 0;
}

// V consecutive elements at p (16-byte aligned) as floats.
template <class T>
__device__ __forceinline__ void load_vec(const typename T::storage* p, float (&out)[Vec<T>::n]) {
  union {
    uint4 u;
    typename T::storage s[Vec<T>::n];
  } w;
  w.u = *reinterpret_cast<const uint4*>(p);
#pragma unroll
  for (int i = 0; i < Vec<T>::n; ++i) out[i] = T::load(w.s[i]);
}

// The column reductions: init/add/combine over tokens, then finish(total, arg) per channel.
struct SumOp {  // k_mean: arg = N
  static __device__ __forceinline__ float init() { return 0.0f; }
  static __device__ __forceinline__ float add(float acc, float x) { return acc + x; }
  static __device__ __forceinline__ float combine(float a, float b) { return a + b; }
  static __device__ __forceinline__ float finish(float sum, float n) { return finite_or_zero(sum / n); }
};

struct AbsMaxOp {  // V's per-channel scale: arg = the FP8 format's max
  static __device__ __forceinline__ float init() { return 0.0f; }
  static __device__ __forceinline__ float add(float acc, float x) { return max_keep_nan(acc, fabsf(x)); }
  static __device__ __forceinline__ float combine(float a, float b) { return max_keep_nan(a, b); }
  static __device__ __forceinline__ float finish(float amax, float fp8_max) { return scale_of(amax, fp8_max); }
};

// Partial column reduction: work[bh, c, d] = Op over tokens [c * chunk, (c + 1) * chunk) of x[bh, :, d].
// grid (cdiv(D, 32), B*H, nchunks), block (32, 8).
template <class T, class Op>
__global__ void col_partial_kernel(const typename T::storage* __restrict__ x, float* __restrict__ work,
                                   View4 v, int chunk, int nchunks) {
  __shared__ float part[kRowLanes][kColTile + 1];
  const int bh = blockIdx.y;
  const int c = blockIdx.z;
  const int d = blockIdx.x * kColTile + threadIdx.x;
  const int n0 = c * chunk;
  const int n1 = (v.N - n0 < chunk) ? v.N : n0 + chunk;
  float acc = Op::init();
  if (d < v.D) {
    const typename T::storage* xc = x + offset(v, bh, 0, 0) + d * v.sd;
    for (int n = n0 + threadIdx.y; n < n1; n += kRowLanes) acc = Op::add(acc, T::load(xc[n * v.sn]));
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && d < v.D) {
    float t = part[0][threadIdx.x];
    for (int r = 1; r < kRowLanes; ++r) t = Op::combine(t, part[r][threadIdx.x]);
    work[(static_cast<int64_t>(bh) * nchunks + c) * v.D + d] = t;
  }
}

// col_partial_kernel with 16-byte loads: grid (1, B*H, nchunks), block kQuantThreads. Thread t
// reads channels [(t % tpr) * V, +V) of rows lane, lane + lanes, ... (lane = t / tpr); the
// lanes are combined through shared memory in a fixed order (deterministic).
template <class T, class Op>
__global__ void col_partial_vec_kernel(const typename T::storage* __restrict__ x, float* __restrict__ work,
                                       View4 v, int chunk, int nchunks) {
  constexpr int V = Vec<T>::n;
  __shared__ float part[kQuantThreads * V];
  const int tpr = v.D / V;
  const int lanes = kQuantThreads / tpr;
  const int g = threadIdx.x % tpr;
  const int lane = threadIdx.x / tpr;
  const int bh = blockIdx.y;
  const int c = blockIdx.z;
  const int n0 = c * chunk;
  const int n1 = (v.N - n0 < chunk) ? v.N : n0 + chunk;
  float acc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) acc[i] = Op::init();
  const typename T::storage* xh = x + offset(v, bh, 0, 0) + g * V;
  for (int n = n0 + lane; n < n1; n += lanes) {
    float e[V];
    load_vec<T>(xh + static_cast<int64_t>(n) * v.sn, e);
#pragma unroll
    for (int i = 0; i < V; ++i) acc[i] = Op::add(acc[i], e[i]);
  }
#pragma unroll
  for (int i = 0; i < V; ++i) part[lane * v.D + g * V + i] = acc[i];
  __syncthreads();
  for (int d = threadIdx.x; d < v.D; d += kQuantThreads) {
    float t = part[d];
    for (int r = 1; r < lanes; ++r) t = Op::combine(t, part[r * v.D + d]);
    work[(static_cast<int64_t>(bh) * nchunks + c) * v.D + d] = t;
  }
}

// out[bh, d] = Op::finish(Op::combine over the chunks of work[bh, :, d] in order, arg).
template <class Op>
__global__ void col_finalize_kernel(const float* __restrict__ work, float* __restrict__ out, int64_t total, int D,
                                    int nchunks, float arg) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bh = i / D;
    const int d = static_cast<int>(i % D);
    const float* w = work + bh * nchunks * D + d;
    float acc = Op::init();
    for (int c = 0; c < nchunks; ++c) acc = Op::combine(acc, w[static_cast<int64_t>(c) * D]);
    out[i] = Op::finish(acc, arg);
  }
}

// The INT8 step of a block, max(amax over the block's kQuantThreads threads, eps) / 127, reduced
// through shared memory in a fixed order; every thread of the block must call it.
__device__ __forceinline__ float block_int8_step(float amax, float* red) {
  red[threadIdx.x] = amax;
  __syncthreads();
  for (int w = kQuantThreads / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) red[threadIdx.x] = max_keep_nan(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  return scale_of(red[0], kInt8Max);
}

// Per-block symmetric INT8 of y = x - km (km may be null): one CUDA block per (bh, token block).
// scale[bh, i] = max(amax, eps) / 127 * scale_mul;  out = round_half_away(y * (1 / step)).
// Thread t visits the flat indices t, t + 256, ... of the block as (row, column) pairs stepped
// without a division per element.
template <class T>
__global__ void quant_int8_kernel(const typename T::storage* __restrict__ x, const float* __restrict__ km,
                                  int8_t* __restrict__ out, float* __restrict__ scale, View4 v, int blk,
                                  int nblk, float scale_mul) {
  __shared__ float red[kQuantThreads];
  const int bh = blockIdx.x / nblk;
  const int ib = blockIdx.x % nblk;
  const int n0 = ib * blk;
  const int rows = (v.N - n0 < blk) ? (v.N - n0) : blk;
  const float* kmrow = km ? km + static_cast<int64_t>(bh) * v.D : nullptr;
  const typename T::storage* xb = x + offset(v, bh, 0, 0) + static_cast<int64_t>(n0) * v.sn;
  const int rstep = kQuantThreads / v.D;
  const int cstep = kQuantThreads % v.D;
  const int r_first = threadIdx.x / v.D;
  const int c_first = threadIdx.x % v.D;

  float amax = 0.0f;
  for (int r = r_first, c = c_first; r < rows;) {
    float y = T::load(xb[r * v.sn + c * v.sd]);
    if (kmrow) y -= kmrow[c];
    amax = max_keep_nan(amax, fabsf(y));
    r += rstep;
    c += cstep;
    if (c >= v.D) {
      c -= v.D;
      ++r;
    }
  }
  const float step = block_int8_step(amax, red);
  const float inv = recip(step);
  if (threadIdx.x == 0) scale[static_cast<int64_t>(bh) * nblk + ib] = step * scale_mul;

  int8_t* dst = out + (static_cast<int64_t>(bh) * v.N + n0) * v.D;
  for (int r = r_first, c = c_first; r < rows;) {
    float y = T::load(xb[r * v.sn + c * v.sd]);
    if (kmrow) y -= kmrow[c];
    dst[static_cast<int64_t>(r) * v.D + c] = quant_int8(y, inv);
    r += rstep;
    c += cstep;
    if (c >= v.D) {
      c -= v.D;
      ++r;
    }
  }
}

// quant_int8_kernel with 16-byte loads and V-code stores (see vec_ok). Same arithmetic, same
// grid and block; thread t handles channels [(t % tpr) * V, +V) of rows t / tpr, + lanes, ...
template <class T>
__global__ void quant_int8_vec_kernel(const typename T::storage* __restrict__ x, const float* __restrict__ km,
                                      int8_t* __restrict__ out, float* __restrict__ scale, View4 v, int blk,
                                      int nblk, float scale_mul) {
  constexpr int V = Vec<T>::n;
  __shared__ float red[kQuantThreads];
  const int bh = blockIdx.x / nblk;
  const int ib = blockIdx.x % nblk;
  const int n0 = ib * blk;
  const int rows = (v.N - n0 < blk) ? (v.N - n0) : blk;
  const int tpr = v.D / V;
  const int lanes = kQuantThreads / tpr;
  const int g = threadIdx.x % tpr;
  const int lane = threadIdx.x / tpr;
  float kmv[V];
#pragma unroll
  for (int i = 0; i < V; ++i) kmv[i] = km ? km[static_cast<int64_t>(bh) * v.D + g * V + i] : 0.0f;
  const typename T::storage* xb = x + offset(v, bh, 0, 0) + static_cast<int64_t>(n0) * v.sn + g * V;

  float amax = 0.0f;
  for (int r = lane; r < rows; r += lanes) {
    float e[V];
    load_vec<T>(xb + static_cast<int64_t>(r) * v.sn, e);
#pragma unroll
    for (int i = 0; i < V; ++i) amax = max_keep_nan(amax, fabsf(km ? e[i] - kmv[i] : e[i]));
  }
  const float step = block_int8_step(amax, red);
  const float inv = recip(step);
  if (threadIdx.x == 0) scale[static_cast<int64_t>(bh) * nblk + ib] = step * scale_mul;

  int8_t* dst = out + (static_cast<int64_t>(bh) * v.N + n0) * v.D + g * V;
  for (int r = lane; r < rows; r += lanes) {
    float e[V];
    load_vec<T>(xb + static_cast<int64_t>(r) * v.sn, e);
    union {
      PackedI8<V> u;
      int8_t b[V];
    } pk;
#pragma unroll
    for (int i = 0; i < V; ++i) pk.b[i] = quant_int8(km ? e[i] - kmv[i] : e[i], inv);
    *reinterpret_cast<PackedI8<V>*>(dst + static_cast<int64_t>(r) * v.D) = pk.u;
  }
}

// FP8 codes of V, channel-major: out[bh, d, n] = e4m3(x[bh, n, d] / scale[bh, d]).
// grid (cdiv(D, 32), B*H, <= kMaxGridZ tiles, striding over the token tiles), block (32, 8).
// A 64-token x 32-channel tile is loaded along D (coalesced), transposed in shared memory
// (rows padded to 33 floats: no bank conflicts on the loads, two-way on the reads) and
// stored along N, four codes per thread (one 32-bit store when N % 4 == 0).
// VEC: the tile is read 16 bytes per thread (vec_ok and D % 32 == 0: every column tile full).
template <class T, bool VEC>
__global__ void quant_v_fp8_kernel(const typename T::storage* __restrict__ x, const float* __restrict__ scale,
                                   uint8_t* __restrict__ out, View4 v, int ntiles, bool fnuz) {
  __shared__ float tile[kVTileN][kColTile + 1];
  __shared__ float sc[kColTile];
  constexpr int kQuads = kVTileN / 4;  // 4-token groups per channel of a tile
  const int bh = blockIdx.y;
  const int d0 = blockIdx.x * kColTile;
  const int tid = threadIdx.y * kColTile + threadIdx.x;
  if (tid < kColTile) sc[tid] = (d0 + tid < v.D) ? scale[static_cast<int64_t>(bh) * v.D + d0 + tid] : 1.0f;
  const typename T::storage* xh = x + offset(v, bh, 0, 0);
  uint8_t* oh = out + static_cast<int64_t>(bh) * v.D * v.N;
  const int dl = d0 + threadIdx.x;
  const bool packed_store = (v.N % 4) == 0;
  for (int t = blockIdx.z; t < ntiles; t += gridDim.z) {
    const int n0 = t * kVTileN;
    __syncthreads();  // the previous tile is consumed (and sc is visible on the first pass)
    if (VEC) {
      constexpr int V = Vec<T>::n;
      constexpr int kGroups = kColTile / V;  // vectors per tile row
      const int vg = tid % kGroups;
      for (int r = tid / kGroups; r < kVTileN; r += (kColTile * kRowLanes) / kGroups) {
        const int n = n0 + r;
        float e[V];
        if (n < v.N) {
          load_vec<T>(xh + static_cast<int64_t>(n) * v.sn + d0 + vg * V, e);
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) e[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < V; ++i) tile[r][vg * V + i] = e[i];
      }
    } else {
      for (int r = threadIdx.y; r < kVTileN; r += kRowLanes) {
        const int n = n0 + r;
        tile[r][threadIdx.x] = (n < v.N && dl < v.D) ? T::load(xh[n * v.sn + dl * v.sd]) : 0.0f;
      }
    }
    __syncthreads();
    for (int u = tid; u < kColTile * kQuads; u += kColTile * kRowLanes) {
      const int dc = u / kQuads;
      const int q = u % kQuads;
      const int d = d0 + dc;
      const int n = n0 + 4 * q;
      if (d >= v.D || n >= v.N) continue;
      const float inv = recip(sc[dc]);
      uint8_t* dst = oh + static_cast<int64_t>(d) * v.N + n;
      if (packed_store) {
        uint32_t codes = 0;
        for (int k = 0; k < 4; ++k)
          codes |= static_cast<uint32_t>(float_to_e4m3(mul_rn(tile[4 * q + k][dc], inv), fnuz)) << (8 * k);
        *reinterpret_cast<uint32_t*>(dst) = codes;
      } else {
        for (int k = 0; k < 4 && n + k < v.N; ++k) dst[k] = float_to_e4m3(mul_rn(tile[4 * q + k][dc], inv), fnuz);
      }
    }
  }
}

// ---- launchers: grids chosen here so the bindings only pass pointers and shapes ----

// Tokens per partial-reduction block: kReduceChunk, doubled until the chunks fit in grid.z.
inline int reduce_chunk(int N) {
  int chunk = kReduceChunk;
  while (cdiv(N, chunk) > kMaxGridZ) chunk *= 2;
  return chunk;
}

// Floats of workspace launch_k_mean and launch_quant_v_fp8 need: one per (bh, chunk, channel).
inline int64_t reduce_workspace_floats(int N, int D, int BH) {
  return static_cast<int64_t>(BH) * cdiv(N, reduce_chunk(N)) * D;
}

inline unsigned finalize_blocks(int64_t total) {
  const int64_t blocks = (total + kFinalizeThreads - 1) / kFinalizeThreads;
  return static_cast<unsigned>(blocks < 65535 ? blocks : 65535);
}

// out[bh, d] = Op::finish(Op over the tokens of x[bh, :, d], arg), in two deterministic steps (partial
// chunks, then finalize); work: reduce_workspace_floats(v.N, v.D, BH) floats.
template <class T, class Op>
void launch_col_reduce(const typename T::storage* x, float* out, float* work, View4 v, int BH, float arg,
                       cudaStream_t stream) {
  const int chunk = reduce_chunk(v.N);
  const int nchunks = cdiv(v.N, chunk);
  if (vec_ok<T>(x, v)) {
    col_partial_vec_kernel<T, Op><<<dim3(1, BH, nchunks), kQuantThreads, 0, stream>>>(x, work, v, chunk, nchunks);
  } else {
    dim3 grid(cdiv(v.D, kColTile), BH, nchunks);
    col_partial_kernel<T, Op><<<grid, dim3(kColTile, kRowLanes), 0, stream>>>(x, work, v, chunk, nchunks);
  }
  const int64_t total = static_cast<int64_t>(BH) * v.D;
  col_finalize_kernel<Op><<<finalize_blocks(total), kFinalizeThreads, 0, stream>>>(work, out, total, v.D, nchunks,
                                                                                    arg);
}

// work: reduce_workspace_floats(v.N, v.D, BH) floats.
template <class T>
void launch_k_mean(const typename T::storage* x, float* out, float* work, View4 v, int BH, cudaStream_t stream) {
  launch_col_reduce<T, SumOp>(x, out, work, v, BH, static_cast<float>(v.N), stream);
}

template <class T>
void launch_quant_int8(const typename T::storage* x, const float* km, int8_t* out, float* scale, View4 v,
                       int BH, int blk, float scale_mul, cudaStream_t stream) {
  const int nblk = cdiv(v.N, blk);
  dim3 grid(static_cast<unsigned>(BH) * static_cast<unsigned>(nblk));
  if (vec_ok<T>(x, v)) {
    quant_int8_vec_kernel<T><<<grid, kQuantThreads, 0, stream>>>(x, km, out, scale, v, blk, nblk, scale_mul);
  } else {
    quant_int8_kernel<T><<<grid, kQuantThreads, 0, stream>>>(x, km, out, scale, v, blk, nblk, scale_mul);
  }
}

// out: channel-major [B, H, D, N] codes; work: reduce_workspace_floats(v.N, v.D, BH) floats.
template <class T>
void launch_quant_v_fp8(const typename T::storage* x, uint8_t* out, float* scale, float* work, View4 v, int BH,
                        bool fnuz, cudaStream_t stream) {
  launch_col_reduce<T, AbsMaxOp>(x, scale, work, v, BH, fnuz ? kFp8E4m3fnuzMax : kFp8E4m3fnMax, stream);
  const int ntiles = cdiv(v.N, kVTileN);
  dim3 grid_q(cdiv(v.D, kColTile), BH, ntiles < kMaxGridZ ? ntiles : kMaxGridZ);
  dim3 block(kColTile, kRowLanes);
  if (vec_ok<T>(x, v) && v.D % kColTile == 0) {
    quant_v_fp8_kernel<T, true><<<grid_q, block, 0, stream>>>(x, scale, out, v, ntiles, fnuz);
  } else {
    quant_v_fp8_kernel<T, false><<<grid_q, block, 0, stream>>>(x, scale, out, v, ntiles, fnuz);
  }
}

}  // namespace sagebuild
