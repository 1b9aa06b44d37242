// Experiment (scripts/experiments/sm90_attn): one warpgroup per CTA (64 query rows), three CTAs per
// SM (at most 168 registers, two K/V slots), each MMA waited on at once: the Triton kernel's
// schedule, with one CTA barrier per key tile instead of Triton's three and K's scales in shared
// memory.
#define STAGES 2
#include "common.cuh"

#ifdef Q_IN_KERNEL  // three_cta_q.cu: Q quantized in start_one_wg, under the first K/V loads
constexpr bool Q_BY_TMA = false;
#else
constexpr bool Q_BY_TMA = true;
#endif

using Smem = Ring<1, 128>;  // n_k <= 16K: three CTAs' shared memory fill the SM

// Key tile j: Q.K^T, softmax, P.V, each waited on; then tile j's slot is refilled with j+STAGES.
__device__ __forceinline__ void tile(uint32_t (&s)[64], float (&acc)[64], Smem& sm, int j, const CUtensorMap* kmap,
                                     const CUtensorMap* vmap, const Coords& cd, float qs, float p_shift,
                                     RowState& st) {
  const int slot = j % STAGES;
  mbar_wait(&sm.kv_full[slot], (j / STAGES) & 1);
  issue_qk_tile(s, sm, slot);
  const float cs = qs * k_scale(sm, j);  // read while the MMA runs
  wg_wait<0>();
  fence_regs(s);
  uint32_t a[16];
  softmax_tile(s, acc, a, cs, p_shift, st);
  pv_and_refill(acc, a, sm, j, kmap, vmap, cd);
}

ATTN_KERNEL(128, 3) {
  extern __shared__ uint8_t smem_raw[];
  Smem& sm = smem_of<Smem>(smem_raw);
  const auto [cd, row0, qs] = start_one_wg(sm, prm, Q_BY_TMA ? &qmap : nullptr, &kmap, &vmap);
  uint32_t s[64];  // one Q.K^T tile at a time
  RowState st = FRESH_ROWS;
  float acc[64];
  zero(acc);
  if (Q_BY_TMA) mbar_wait(&sm.q_full, 0);
  for (int j = 0; j < cd.nt; ++j) tile(s, acc, sm, j, &kmap, &vmap, cd, qs, prm.p_shift, st);
  store_out(acc, st, prm, cd, row0);
}

WS_ATTN_ENTRY(Smem, 128)
