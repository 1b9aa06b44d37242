// Experiment (scripts/experiments/sm90_attn): one warpgroup per CTA (64 query rows), two CTAs per SM
// (224 registers). Q.K^T(j+1) is issued before tile j's softmax and runs under it; P.V(j) is waited
// on in its iteration (a P.V left in flight across the loop edge makes ptxas serialise every wgmma).
#define STAGES 3
#include "common.cuh"

using Smem = Ring<1, 1024>;  // n_k <= 128K

// One iteration for key tile j: s_cur holds the finished Q.K^T(j); s_next receives Q.K^T(j+1),
// which runs on the tensor cores under tile j's softmax. P.V(j) is waited on in its iteration
// (a P.V left in flight across the loop edge makes ptxas serialise every wgmma: C7515), and
// the slot of tile j is refilled with tile j+STAGES once every warp is done with it.
__device__ __forceinline__ void step(uint32_t (&s_cur)[64], uint32_t (&s_next)[64], float (&acc)[64], Smem& sm,
                                     int j, const CUtensorMap* kmap, const CUtensorMap* vmap, const Coords& cd,
                                     float qs, float p_shift, RowState& st) {
  if (j + 1 < cd.nt) {
    const int slot = (j + 1) % STAGES;
    mbar_wait(&sm.kv_full[slot], ((j + 1) / STAGES) & 1);
    issue_qk_tile(s_next, sm, slot);
  }
  uint32_t a[16];
  softmax_tile(s_cur, acc, a, qs * k_scale(sm, j), p_shift, st);
  pv_and_refill(acc, a, sm, j, kmap, vmap, cd);
  fence_regs(s_next);
}

ATTN_KERNEL(128, 2) {
  extern __shared__ uint8_t smem_raw[];
  Smem& sm = smem_of<Smem>(smem_raw);
  const auto [cd, row0, qs] = start_one_wg(sm, prm, &qmap, &kmap, &vmap);
  float acc[64];
  zero(acc);
  RowState st = FRESH_ROWS;
  uint32_t sa[64], sb[64];
  mbar_wait(&sm.q_full, 0);
  mbar_wait(&sm.kv_full[0], 0);
  issue_qk_tile(sa, sm, 0);
  wg_wait<0>();
  fence_regs(sa);
  int j = 0;
  for (; j + 1 < cd.nt; j += 2) {
    step(sa, sb, acc, sm, j, &kmap, &vmap, cd, qs, prm.p_shift, st);
    step(sb, sa, acc, sm, j + 1, &kmap, &vmap, cd, qs, prm.p_shift, st);
  }
  if (j < cd.nt) step(sa, sb, acc, sm, j, &kmap, &vmap, cd, qs, prm.p_shift, st);
  store_out(acc, st, prm, cd, row0);
}

WS_ATTN_ENTRY(Smem, 128)
