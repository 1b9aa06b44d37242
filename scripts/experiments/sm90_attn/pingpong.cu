// Experiment (scripts/experiments/sm90_attn): warp-specialised ping-pong, one CTA per SM. Warpgroup 0
// loads (one thread, TMA, a ring of STAGES slots with full/empty mbarriers); warpgroups 1 and 2 own
// 64 query rows each and take turns on the tensor cores (named barriers 1 and 2): while one issues
// its Q.K^T(j) and P.V(j-1), the other runs its softmax. setmaxnreg: 40 / 232 registers.
#define STAGES 4
#include "common.cuh"

using Smem = Ring<2, 1024>;  // n_k <= 128K

// Warp-specialised, ping-pong: warpgroup 0 loads (one thread, TMA), warpgroups 1 and 2 each own
// 64 query rows of the CTA's 128 and take turns on the tensor cores (named barriers 1 and 2):
// while one issues its Q.K^T(j) and P.V(j-1), the other runs its softmax.
ATTN_KERNEL(384, 1) {
  extern __shared__ uint8_t smem_raw[];
  Smem& sm = smem_of<Smem>(smem_raw);
  const int m_blk = blockIdx.x, bh = blockIdx.y;
  const Coords cd = coords(prm, bh);
  const int tid = threadIdx.x, wg = tid >> 7;
  init_smem(sm, prm, cd, sm.kv_empty, 8);  // one arrival per consumer warp
  __syncthreads();

  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      mbar_expect(&sm.q_full, 2 * Q_BYTES);
      tma_2d(sm.q, &qmap, 0, bh * prm.n_q + m_blk * 2 * BM, &sm.q_full);
      for (int t = 0; t < cd.nt; ++t) {
        if (t >= STAGES) mbar_wait(&sm.kv_empty[t % STAGES], ((t / STAGES) - 1) & 1);
        load_tile(sm, t, &kmap, &vmap, cd);
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int cw = wg - 1;  // consumer 0 or 1
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int my_turn = 1 + cw, other_turn = 2 - cw;
  const int8_t* q = sm.q + cw * Q_BYTES;
  const int row0 = m_blk * 2 * BM + cw * BM + warp * 16;
  const float qs = prm.q_scale[(long long)bh * prm.nqs + row0 / 16];

  float acc[64];
  zero(acc);
  RowState st = FRESH_ROWS;
  uint32_t s[64];
  uint32_t a[16];
  if (cw == 1) named_arrive(1, 256);  // consumer 0 goes first
  mbar_wait(&sm.q_full, 0);
  for (int j = 0; j < cd.nt; ++j) {
    const int slot = j % STAGES;
    mbar_wait(&sm.kv_full[slot], (j / STAGES) & 1);
    set_magic(s);
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
    softmax_tile(s, acc, a, qs * k_scale(sm, j), prm.p_shift, st);
  }
  fence_regs(acc);
  named_sync(my_turn, 256);
  wg_fence();
  issue_pv(acc, a, sm.v[(cd.nt - 1) % STAGES]);
  wg_commit();
  named_arrive(other_turn, 256);
  wg_wait<0>();
  fence_regs(acc);
  if (cw == 0) named_sync(my_turn, 256);  // consumer 1's last arrival
  store_out(acc, st, prm, cd, row0);
}

WS_ATTN_ENTRY(Smem, 384)
