// Prototype (not product code): one-pass K/V quantization with a thread-block cluster per head.
// K, V: fp16 [BH, N, 128] contiguous. Each of the C CTAs of a head's cluster holds T = N / C
// tokens of K and V in shared memory, computes its column partials (K sums, V amax), the cluster
// exchanges them through distributed shared memory, and each CTA quantizes its own tokens from
// shared memory: K and V are read from memory once. Outputs as quant.quant_kv (plain V order):
// kq int8 [BH, N, 128], ks fp32 [BH, N/128], km fp32 [BH, 128], vq fp8 e4m3 [BH, 128, N]
// (channel-major), vs fp32 [BH, 128].
#include <cooperative_groups.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>
namespace cg = cooperative_groups;

constexpr int D = 128;
constexpr int THREADS = 512;
constexpr int PITCH = 264;  // bytes per smem row: 256 + 8 (even word count, 8-byte aligned)
constexpr int KBLK = 128;

__device__ __forceinline__ int8_t to_int8(float r) {
  float a = fabsf(r);
  float t = fminf(__fadd_rn(a, 0.49999997f), 127.0f);
  int m = (int)t;  // truncation toward zero
  return (int8_t)(signbit(r) ? -m : m);
}

template <int T>
__global__ void __launch_bounds__(THREADS, 1)
kvq_kernel(const __half* __restrict__ K, const __half* __restrict__ V, int8_t* __restrict__ KQ,
           float* __restrict__ KS, float* __restrict__ KM, uint8_t* __restrict__ VQ,
           float* __restrict__ VS, int N) {
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* sk = smem;                       // T rows × PITCH
  unsigned char* sv = smem + T * PITCH;           // T rows × PITCH
  float* red = reinterpret_cast<float*>(smem + 2 * T * PITCH);  // [16 warps][256]
  float* part = red + 16 * 256;                   // [256]: this CTA's K sums, V amax
  float* mu = part + 256;                         // [128]
  float* vinv = mu + 128;                         // [128]
  float* bmax = vinv + 128;                       // [16]
  float* bstep = bmax + 16;                       // [2]

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = cluster.block_rank();
  const int bh = blockIdx.y;
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const long long tok0 = (long long)rank * T;
  const uint4* kg = reinterpret_cast<const uint4*>(K + ((long long)bh * N + tok0) * D);
  const uint4* vg = reinterpret_cast<const uint4*>(V + ((long long)bh * N + tok0) * D);
  constexpr int LOADS = T * D / 8 / THREADS;  // uint4 per thread per tensor
  uint4 kr[LOADS], vr[LOADS];
#pragma unroll
  for (int i = 0; i < LOADS; ++i) kr[i] = __ldg(kg + i * THREADS + t);
#pragma unroll
  for (int i = 0; i < LOADS; ++i) vr[i] = __ldg(vg + i * THREADS + t);
  // column group: 8 channels [8 * (t % 16), +8); rows i * 32 + t / 16
  float ks8[8], vm8[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) { ks8[j] = 0.f; vm8[j] = 0.f; }
#pragma unroll
  for (int i = 0; i < LOADS; ++i) {
    const int row = i * (THREADS / 16) + (t >> 4);
    const int col = (t & 15) * 16;  // byte offset in the row
    const __half* kh = reinterpret_cast<const __half*>(&kr[i]);
    const __half* vh = reinterpret_cast<const __half*>(&vr[i]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      ks8[j] += __half2float(kh[j]);
      vm8[j] = fmaxf(vm8[j], fabsf(__half2float(vh[j])));
    }
    uint2* dk = reinterpret_cast<uint2*>(sk + row * PITCH + col);
    uint2* dv = reinterpret_cast<uint2*>(sv + row * PITCH + col);
    const uint2* s2k = reinterpret_cast<const uint2*>(&kr[i]);
    const uint2* s2v = reinterpret_cast<const uint2*>(&vr[i]);
    dk[0] = s2k[0]; dk[1] = s2k[1];
    dv[0] = s2v[0]; dv[1] = s2v[1];
  }
  // lanes l and l ^ 16 share a column group
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    ks8[j] += __shfl_xor_sync(0xffffffffu, ks8[j], 16);
    vm8[j] = fmaxf(vm8[j], __shfl_xor_sync(0xffffffffu, vm8[j], 16));
  }
  if (lane < 16) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      red[warp * 256 + lane * 8 + j] = ks8[j];
      red[warp * 256 + 128 + lane * 8 + j] = vm8[j];
    }
  }
  __syncthreads();
  if (t < 256) {
    float acc = t < 128 ? 0.f : 0.f;
    for (int w = 0; w < THREADS / 32; ++w) {
      float x = red[w * 256 + t];
      acc = t < 128 ? acc + x : fmaxf(acc, x);
    }
    part[t] = acc;
  }
  cluster.sync();  // every CTA's partials written
  if (t < 256) {
    float acc = 0.f;
    for (int r = 0; r < (int)cluster.num_blocks(); ++r) {
      const float* rp = cluster.map_shared_rank(part, r);
      float x = rp[t];
      acc = t < 128 ? acc + x : fmaxf(acc, x);
    }
    if (t < 128) {
      mu[t] = __fdiv_rn(acc, (float)N);
      if (rank == 0) KM[(long long)bh * D + t] = mu[t];
    } else {
      const int c = t - 128;
      float s = __fdiv_rn(fmaxf(acc, 1e-8f), 448.0f);
      vinv[c] = __fdiv_rn(1.0f, s);
      if (rank == 0) VS[(long long)bh * D + c] = s;
    }
  }
  // done reading other CTAs' shared memory: arrive now, wait before exiting
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  __syncthreads();
  // K: T / KBLK blocks of KBLK rows; warp w takes rows [w * KBLK/16, +KBLK/16) of a block,
  // lane the channels [4 * lane, +4)
  constexpr int RPW = KBLK / (THREADS / 32);
  const float m0 = mu[4 * lane], m1 = mu[4 * lane + 1], m2 = mu[4 * lane + 2], m3 = mu[4 * lane + 3];
  for (int blk = 0; blk < T / KBLK; ++blk) {
    float amax = 0.f;
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int row = blk * KBLK + warp * RPW + i;
      const __half2* p = reinterpret_cast<const __half2*>(sk + row * PITCH + lane * 8);
      float2 a = __half22float2(p[0]), b = __half22float2(p[1]);
      amax = fmaxf(amax, fabsf(__fsub_rn(a.x, m0)));
      amax = fmaxf(amax, fabsf(__fsub_rn(a.y, m1)));
      amax = fmaxf(amax, fabsf(__fsub_rn(b.x, m2)));
      amax = fmaxf(amax, fabsf(__fsub_rn(b.y, m3)));
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    if (lane == 0) bmax[warp] = amax;
    __syncthreads();
    if (t == 0) {
      float m = 0.f;
      for (int w = 0; w < THREADS / 32; ++w) m = fmaxf(m, bmax[w]);
      float s = __fdiv_rn(fmaxf(m, 1e-8f), 127.0f);
      bstep[0] = s;
      bstep[1] = __fdiv_rn(1.0f, s);
      KS[(long long)bh * (N / KBLK) + (tok0 + blk * KBLK) / KBLK] = s;
    }
    __syncthreads();
    const float inv = bstep[1];
#pragma unroll
    for (int i = 0; i < RPW; ++i) {
      const int row = blk * KBLK + warp * RPW + i;
      const __half2* p = reinterpret_cast<const __half2*>(sk + row * PITCH + lane * 8);
      float2 a = __half22float2(p[0]), b = __half22float2(p[1]);
      uint32_t q = (uint32_t)(uint8_t)to_int8(__fmul_rn(__fsub_rn(a.x, m0), inv)) |
                   ((uint32_t)(uint8_t)to_int8(__fmul_rn(__fsub_rn(a.y, m1), inv)) << 8) |
                   ((uint32_t)(uint8_t)to_int8(__fmul_rn(__fsub_rn(b.x, m2), inv)) << 16) |
                   ((uint32_t)(uint8_t)to_int8(__fmul_rn(__fsub_rn(b.y, m3), inv)) << 24);
      reinterpret_cast<uint32_t*>(KQ + ((long long)bh * N + tok0 + row) * D)[lane] = q;
    }
    __syncthreads();
  }
  // V: lane = token within a group of 32 rows, warp → (row group, half of the channel pairs)
  constexpr int GROUPS = T / 32;
  for (int job = warp; job < GROUPS * 2; job += THREADS / 32) {
    const int g = job % GROUPS, half = job / GROUPS;
    const int row = g * 32 + lane;
    const long long tok = tok0 + row;
    for (int pp = 0; pp < 32; ++pp) {
      const int pair = half * 32 + pp;
      const int c = 2 * pair;
      float2 x = __half22float2(*reinterpret_cast<const __half2*>(sv + row * PITCH + c * 2));
      float a = fminf(fmaxf(__fmul_rn(x.x, vinv[c]), -448.f), 448.f);
      float b = fminf(fmaxf(__fmul_rn(x.y, vinv[c + 1]), -448.f), 448.f);
      __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
      VQ[((long long)bh * D + c) * N + tok] = (uint8_t)(q & 0xff);
      VQ[((long long)bh * D + c + 1) * N + tok] = (uint8_t)(q >> 8);
    }
  }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

template <int T>
static int launch_t(const void* k, const void* v, void* kq, void* ks, void* km, void* vq, void* vs,
                    int bh, int n, int csize, cudaStream_t stream) {
  size_t smem = 2 * (size_t)T * PITCH + (16 * 256 + 256 + 128 + 128 + 16 + 2) * sizeof(float);
  auto kern = kvq_kernel<T>;
  cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  if (e != cudaSuccess) return (int)e;
  e = cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  if (e != cudaSuccess) return (int)e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(csize, bh, 1);
  cfg.blockDim = dim3(THREADS, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = csize;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  e = cudaLaunchKernelEx(&cfg, kern, (const __half*)k, (const __half*)v, (int8_t*)kq, (float*)ks,
                         (float*)km, (uint8_t*)vq, (float*)vs, n);
  return (int)e;
}

extern "C" int kvq_launch(const void* k, const void* v, void* kq, void* ks, void* km, void* vq,
                          void* vs, int bh, int n, int csize, void* stream) {
  if (n % csize) return -1;
  const int T = n / csize;
  cudaStream_t s = (cudaStream_t)stream;
  switch (T) {
    case 128: return launch_t<128>(k, v, kq, ks, km, vq, vs, bh, n, csize, s);
    case 256: return launch_t<256>(k, v, kq, ks, km, vq, vs, bh, n, csize, s);
    default: return -2;
  }
}

extern "C" int kvq_max_clusters(int n, int csize) {
  const int T = n / csize;
  size_t smem = 2 * (size_t)T * PITCH + (16 * 256 + 256 + 128 + 128 + 16 + 2) * sizeof(float);
  auto kern = T == 128 ? kvq_kernel<128> : kvq_kernel<256>;
  cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(csize, 64, 1);
  cfg.blockDim = dim3(THREADS, 1, 1);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = csize;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  int clusters = -1;
  cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kern, &cfg);
  return e == cudaSuccess ? clusters : -(int)e;
}
