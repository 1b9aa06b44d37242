// Experiment (scripts/experiments/sm90_attn): warp-specialised ping-pong, one CTA per SM. Warpgroup 0
// loads (one thread, TMA, a ring of STAGES slots with full/empty mbarriers); warpgroups 1 and 2 own
// 64 query rows each and take turns on the tensor cores (named barriers 1 and 2): while one issues
// its Q.K^T(j) and P.V(j-1), the other runs its softmax. setmaxnreg: 40 / 232 registers.
#define STAGES 4
#include "common.cuh"

struct __align__(1024) Smem {
  int8_t q[2 * Q_BYTES];
  int8_t k[STAGES][K_BYTES];
  uint8_t v[STAGES][V_BYTES];
  float ks[1024];  // K's scales for this head's key tiles (n_k <= 128K)
  uint64_t q_full;
  uint64_t kv_full[STAGES];
  uint64_t kv_empty[STAGES];
};

// Warp-specialised, ping-pong: warpgroup 0 loads (one thread, TMA), warpgroups 1 and 2 each own
// 64 query rows of the CTA's 128 and take turns on the tensor cores (named barriers 1 and 2):
// while one issues its Q.K^T(j) and P.V(j-1), the other runs its softmax.
__global__ void __launch_bounds__(384, 1)
    attn_kernel(const __grid_constant__ CUtensorMap qmap, const __grid_constant__ CUtensorMap kmap,
                const __grid_constant__ CUtensorMap vmap, const Params prm) {
  extern __shared__ uint8_t smem_raw[];
  Smem& sm = *reinterpret_cast<Smem*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int m_blk = blockIdx.x, bh = blockIdx.y;
  const int b = bh / prm.heads, h = bh % prm.heads;
  const int bhk = b * (prm.heads / prm.group) + h / prm.group;
  const int nt = prm.n_k / BN;
  const int k_row0 = bhk * prm.n_k, v_row0 = bhk * HD;
  const int tid = threadIdx.x, wg = tid >> 7;

  if (tid == 0) {
    mbar_init(&sm.q_full, 1);
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&sm.kv_full[i], 1);
      mbar_init(&sm.kv_empty[i], 8);  // one arrival per consumer warp
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  }
  for (int i = tid; i < nt; i += blockDim.x) sm.ks[i] = prm.k_scale[(long long)bhk * prm.nks + i];
  __syncthreads();

  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      mbar_expect(&sm.q_full, 2 * Q_BYTES);
      tma_2d(sm.q, &qmap, 0, bh * prm.n_q + m_blk * 2 * BM, &sm.q_full);
      for (int t = 0; t < nt; ++t) {
        const int slot = t % STAGES;
        if (t >= STAGES) mbar_wait(&sm.kv_empty[slot], ((t / STAGES) - 1) & 1);
        mbar_expect(&sm.kv_full[slot], K_BYTES + V_BYTES);
        tma_2d(sm.k[slot], &kmap, 0, k_row0 + t * BN, &sm.kv_full[slot]);
        tma_2d(sm.v[slot], &vmap, t * BN, v_row0, &sm.kv_full[slot]);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int cw = wg - 1;  // consumer 0 or 1
  const int ctid = tid - 128 * wg, warp = ctid >> 5, lane = ctid & 31, g = lane >> 2, c = lane & 3;
  const int my_turn = 1 + cw, other_turn = 2 - cw;
  const int8_t* q = sm.q + cw * Q_BYTES;
  const int row0 = m_blk * 2 * BM + cw * BM;
  const float qs = prm.q_scale[(long long)bh * prm.nqs + (row0 + warp * 16) / 16];
  const float* ks = sm.ks;

  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  RowState st{-INFINITY, -INFINITY, 0.f, 0.f};
  uint32_t s[64];
  uint32_t a[16];
  if (cw == 1) named_arrive(1, 256);  // consumer 0 goes first
  mbar_wait(&sm.q_full, 0);
  for (int j = 0; j < nt; ++j) {
    const int slot = j % STAGES;
    mbar_wait(&sm.kv_full[slot], (j / STAGES) & 1);
#pragma unroll
    for (int i = 0; i < 64; ++i) s[i] = __float_as_uint(MAGIC);
    fence_regs(s);
    fence_regs(acc);
    named_sync(my_turn, 256);
    wg_fence();
    issue_qk(s, q, sm.k[slot]);
    if (j > 0) issue_pv(acc, a, sm.v[(j - 1) % STAGES]);
    wg_commit();
    named_arrive(other_turn, 256);
    wg_wait<0>();
    fence_regs(s);
    fence_regs(acc);
    if (j > 0 && lane == 0) mbar_arrive(&sm.kv_empty[(j - 1) % STAGES]);
    softmax_tile(s, acc, a, qs * ks[j], prm.p_shift, st);
  }
  fence_regs(acc);
  named_sync(my_turn, 256);
  wg_fence();
  issue_pv(acc, a, sm.v[(nt - 1) % STAGES]);
  wg_commit();
  named_arrive(other_turn, 256);
  wg_wait<0>();
  fence_regs(acc);
  if (cw == 0) named_sync(my_turn, 256);  // consumer 1's last arrival

  float l0 = st.l0, l1 = st.l1;
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float i0 = 1.f / l0, i1 = 1.f / l1;
  const float* vs = prm.v_scale + (long long)bhk * HD;
  const int r0 = row0 + warp * 16 + g;
  __half* o0 = prm.out + b * prm.so_b + h * prm.so_h + (long long)r0 * prm.so_n;
  __half* o1 = o0 + 8 * prm.so_n;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int ch = 8 * i + 2 * c;
    const float v0 = vs[ch], v1 = vs[ch + 1];
    *reinterpret_cast<__half2*>(o0 + ch) = __floats2half2_rn(acc[4 * i] * i0 * v0, acc[4 * i + 1] * i0 * v1);
    *reinterpret_cast<__half2*>(o1 + ch) = __floats2half2_rn(acc[4 * i + 2] * i1 * v0, acc[4 * i + 3] * i1 * v1);
  }
}

extern "C" int ws_attn(const void* q, const float* q_scale, const void* k, const float* k_scale, const void* v_t,
                       long long v_row_bytes, const float* v_scale, void* out, long long so_b, long long so_h,
                       long long so_n, int batch, int heads, int heads_kv, int n_q, int n_k, int nqs, int nks,
                       float p_shift, void* stream) {
  if (n_q % (2 * BM) || n_k % BN || heads % heads_kv || n_k / BN > 1024) return -1;
  CUtensorMap qm, km, vm;
  int r = make_map(&qm, q, uint64_t(batch) * heads * n_q, HD, HD, HD, 2 * BM, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  r |= make_map(&km, k, uint64_t(batch) * heads_kv * n_k, HD, HD, HD, BN, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  r |= make_map(&vm, v_t, uint64_t(batch) * heads_kv * HD, n_k, v_row_bytes, BN, HD, CU_TENSOR_MAP_DATA_TYPE_UINT8);
  if (r) return 1000 + r;
  Params p{q_scale, k_scale, v_scale, reinterpret_cast<__half*>(out), so_b, so_h, so_n, heads, heads / heads_kv,
           n_q, n_k, nqs, nks, p_shift};
  const size_t smem = sizeof(Smem) + 1024;
  static bool attr = false;
  if (!attr) {
    cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    attr = true;
  }
  dim3 grid(n_q / (2 * BM), batch * heads);
  attn_kernel<<<grid, 384, smem, reinterpret_cast<cudaStream_t>(stream)>>>(qm, km, vm, p);
  return int(cudaGetLastError());
}
