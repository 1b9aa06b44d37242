"""Launch configurations of the attention kernels: a versioned table, not a per-run autotune.

Autotuning at run time costs users seconds on every new shape; instead the winners of tuning
runs on real GPUs are kept here, keyed by (arch family, padded head dim, P·V variant, causal).
Rows are matched top to bottom and ``"*"`` matches anything, so the specific rows come first.

For tuning runs a config can be forced without editing this file: the keyword ``config=`` of
the attention functions, or the environment variable ``SAGEBUILD_ATTN_CONFIG="BLOCK_M,BLOCK_N,
num_warps,num_stages[,maxnreg][,tma]"`` (the keyword wins; ``LaunchConfig.spec`` writes a
config in that form, so any table row can be forced as it is).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

# Bump when a row changes, so benchmark records can say which table produced them.
CONFIG_TABLE_VERSION = "2026.12.01.5"

# Head dims the kernels run natively; smaller ones are padded up to the next entry. 256 is
# beyond upstream SageAttention (which refuses it); the INT8 scores still fit the kernels'
# exact int32→float32 trick (|q·k| ≤ 127²·256 < 2²²).
NATIVE_HEAD_DIMS = (64, 128, 256)

# K's INT8 scale block (tokens): this many, or the key tile itself when a config's BLOCK_N is
# 128 (``LaunchConfig.k_blk``). A key tile inside one block takes one scale per tile (a scalar
# folded into the row factor); a tile spanning several blocks gathers a scale per key column,
# one more FMA per score (sm90 SASS, run 12: 751 vs 630 instructions per 64×128 tile).
K_BLK = 64
K_BLK_WIDE = 128

ENV_VAR = "SAGEBUILD_ATTN_CONFIG"

# Up to this many keys, K (and V for FP8 P·V) can be quantized inside the attention kernel
# instead of by launches of their own. Off by default: on an H200 (docs/performance.md, run 5)
# it saved host time but the kernel got slower (K/V tiles go through registers instead of the
# pipelined copy into shared memory): at 1×16×1024×64 a CUDA-graph replay took 69.6 µs fused
# vs 40.2 µs separate (FP16 P·V), 124.6 vs 52.3 µs (FP8). Kept as a tuning knob for other
# GPUs: SAGEBUILD_FUSE_KV_MAX_TOKENS=1024 turns it on.
FUSED_KV_MAX_TOKENS = 0
FUSE_ENV_VAR = "SAGEBUILD_FUSE_KV_MAX_TOKENS"


def knob_values() -> tuple:
    """The raw values of the environment knobs a call's plan depends on (unset: None), as a
    part of the API's plan key, read on every call. ``os.environ.get`` raises and catches a
    KeyError for each unset name (~1.5 µs each, most of a replayed call's key); CPython's
    encoded mapping behind ``os.environ`` (updated in place by it) answers in ~0.1 µs. Values
    stay encoded: only their equality matters."""
    if _ENV_DATA is not None:
        return tuple(map(_ENV_DATA.get, _KNOB_KEYS))
    return tuple(os.environ.get(name) for name in _KNOB_VARS)


def fuse_kv_keys(n_k: int, varlen: bool) -> bool:
    """Whether a call's key count lets K/V be quantized inside the attention kernel (the part of
    ``fuse_kv`` that does not depend on the launch config, known before the config is chosen)."""
    limit = os.environ.get(FUSE_ENV_VAR)
    max_tokens = int(limit) if limit else FUSED_KV_MAX_TOKENS
    return not varlen and n_k <= max_tokens


def fuse_kv(cfg: LaunchConfig, n_k: int, varlen: bool) -> bool:
    """Whether K/V are quantized inside the attention kernel for this launch."""
    return fuse_kv_keys(n_k, varlen) and cfg.block_n % cfg.k_blk == 0


# K/V tiles by the tensor-memory accelerator (TMA: host-built descriptors, ``attn_fwd._kv_descriptors``,
# in the portable kernel) instead of per-thread asynchronous copies, for FP8 P·V with pre-quantized K/V. sm90
# SASS (docs/performance.md, run 14): no per-thread load addresses, so 64×128 tiles capped at 168
# registers spill 8 bytes instead of 152. On an H200 TMA pays where registers are that tight:
# run 16's 128-key tiles at 168 registers and two stages (three CTAs per SM by registers and
# shared memory) run 6–10 % faster than the table's other configs from 4K keys (the same config
# without TMA spills 240 bytes and is slower, run 8), and head dim 256's 64-key tiles 7–9 %
# faster. At head dim 128's 64-key tiles it changes nothing beyond noise (run 15), so
# it is a property of the configs that need it (``LaunchConfig.tma``); ``SAGEBUILD_TMA=1`` turns
# it on for every eligible call (tuning), ``0`` off (and the rows that need it are skipped).
TMA_CAPABLE = frozenset({"Hopper", "Blackwell", "interpreter"})
TMA_ENV_VAR = "SAGEBUILD_TMA"


def _env_switch(name: str) -> str:
    """An on/off environment knob's value, normalised ("1"/"on", "0"/"off", or "" unset)."""
    return (os.environ.get(name) or "").strip().lower()


def _switched(env_var: str, family: str, capable: frozenset, default: bool) -> bool:
    """An opt-in/opt-out feature: never on a family outside ``capable`` or with the knob off
    ("0"/"off"), always with it on ("1"/"on"), else ``default`` (the table's or the call's)."""
    knob = _env_switch(env_var)
    if family not in capable or knob in ("0", "off"):
        return False
    return knob in ("1", "on") or default


def tma_possible(family: str) -> bool:
    """Whether this family can load K/V tiles by TMA and the environment does not forbid it."""
    return family in TMA_CAPABLE and _env_switch(TMA_ENV_VAR) not in ("0", "off")


# Programmatic dependent launch (NVIDIA sm90+): the attention launch may start while the K/V
# quantization launch finishes (each of its programs signals at its start); it quantizes its Q
# tile, then waits (griddepcontrol.wait) before reading K/V. On an H200 (docs/performance.md,
# run 18; CUDA-graph replays, device time) it takes 1.2 µs off 1×16×1024×64 (27.7 → 26.5 µs)
# and 1.6 µs off 1×16×2048×64; from 4K keys it moved whole calls by −1.6 to +1.5 %, noise, so
# it is on by default up to PDL_DEFAULT_MAX_KEYS keys. SAGEBUILD_PDL=1 turns it on for every
# length, 0 off.
PDL_CAPABLE = frozenset({"Hopper", "Blackwell"})
PDL_ENV_VAR = "SAGEBUILD_PDL"
PDL_DEFAULT_MAX_KEYS = 2048


def use_pdl(family: str, n_k: int) -> bool:
    """Whether a call with ``n_k`` keys (0: unknown) on this family overlaps the attention launch
    with the K/V quantization launch (the API adds the conditions of the call: ``api._make_plan``)."""
    return _switched(PDL_ENV_VAR, family, PDL_CAPABLE, 0 < n_k <= PDL_DEFAULT_MAX_KEYS)


# Pipelined wgmma in the portable kernel (Hopper): ptxas serialises every wgmma of the kernel
# (C7513: a non-wgmma instruction defines a wgmma input while one is in flight; C7512: not enough
# registers for the pipeline) when the loop-invariant Q operand is reloaded into registers each
# key tile and Triton leaves the P·V wgmma in flight across the loop edge. sm90 SASS of the 4K
# row (docs/performance.md, run 19): each of a tile's eight wgmma waited on alone; with Q read
# from shared memory (``attn_fwd``: a round trip through the output rows makes it a loaded
# operand) and the P·V wgmma waited on inside its iteration, the four Q·Kᵀ and the four P·V
# wgmma issue back to back at the same 168 registers (602 instructions per tile instead of 632).
# Run 20 (H200, CUDA-graph replays): −5 to −9 % on that row, +2 % on head dim 64's 8K row and
# +43 % on head dim 256's TMA row (one wait more per tile where ptxas pipelined already), so
# the 128-key TMA rows (head dims 128, 96 and 192 from 4K keys) ask for it (``LaunchConfig.pipe``)
# and the others do not; SAGEBUILD_WGMMA_PIPE=1/0 forces it on or off for every config, a config
# string's ``,pipe`` asks for it in one.
WGMMA_PIPE_CAPABLE = frozenset({"Hopper"})
WGMMA_PIPE_ENV_VAR = "SAGEBUILD_WGMMA_PIPE"


def use_wgmma_pipe(family: str, cfg: LaunchConfig) -> bool:
    """Whether a launch with this config pipelines its wgmma on this family: the config's own
    choice (``LaunchConfig.pipe``: the 128-key TMA rows') unless SAGEBUILD_WGMMA_PIPE=1/0
    forces it on or off for every config (tuning)."""
    return _switched(WGMMA_PIPE_ENV_VAR, family, WGMMA_PIPE_CAPABLE, cfg.pipe)


# FP8 V stored in wgmma key order (``layout.KEY_GROUP``): P's conversion from the Q·Kᵀ wgmma's
# accumulator to the P·V wgmma's FP8 operand needs no shuffles (sm90 SASS, docs/performance.md
# run 21: 604 → 553 instructions per tile at the 4K row, 410 → 383 at head dim 128's 64-key
# row). On by default where the operand comes from registers after a wgmma (Hopper); the
# interpreter runs it when asked (tests); SAGEBUILD_V_KEY_ORDER=0 turns it off, 1 on.
V_KEY_ORDER_CAPABLE = frozenset({"Hopper", "interpreter"})
V_KEY_ORDER_ENV_VAR = "SAGEBUILD_V_KEY_ORDER"


def use_v_key_order(family: str) -> bool:
    """Whether FP8 V is quantized in wgmma key order on this family (the API adds the call's
    conditions: its own Triton quantization, dense inputs, the portable kernel)."""
    return _switched(V_KEY_ORDER_ENV_VAR, family, V_KEY_ORDER_CAPABLE, family == "Hopper")


# P's row sums kept as ROW_SUM_PARTS partial sums per row (by key column mod ROW_SUM_PARTS)
# until the epilogue adds them. In NVIDIA's MMA accumulator layouts each thread holds two
# adjacent columns of every eight, so with eight parts a tile's row sum stays inside the thread:
# no warp shuffles per tile, one addition chain less. sm90 SASS (docs/performance.md run 31):
# 523 → 515 instructions per tile at the 4K row, 486 → 478 at head dim 64's 8K row, 450 → 442
# at head dim 256's row; H200, CUDA-graph replays: −0.5 % at 2×32×4096×128, −1.4 % causal,
# −4.0 % at 1×16×8192×256, even at 16K. On by default on Hopper (measured) and the interpreter
# (tests); sm80/sm89 SASS also drops 10–15 instructions but is not measured; RDNA's WMMA layout
# does not compile the reshape (Triton 3.6). SAGEBUILD_ROW_SUM_PARTS=0 turns it off, 1 on.
ROW_SUM_PARTS = 8
ROW_SUM_PARTS_CAPABLE = frozenset({"Hopper", "interpreter"})
ROW_SUM_PARTS_ENV_VAR = "SAGEBUILD_ROW_SUM_PARTS"


def row_sum_parts(family: str, cfg: LaunchConfig) -> int:
    """How many partial row sums of P a launch with this config keeps per row (1: one sum)."""
    on = _switched(ROW_SUM_PARTS_ENV_VAR, family, ROW_SUM_PARTS_CAPABLE, True)
    return ROW_SUM_PARTS if on and cfg.block_n % ROW_SUM_PARTS == 0 else 1


def use_tma(family: str, cfg: LaunchConfig) -> bool:
    """Whether a launch with this config loads K/V tiles by TMA on this family (when the call's
    buffers allow it): the config's own choice unless the environment forces it."""
    return _switched(TMA_ENV_VAR, family, TMA_CAPABLE, cfg.tma)


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and launch parameters of one attention kernel launch.

    ``maxnreg`` (NVIDIA only; None = ptxas's choice, which takes up to 255 registers) caps
    registers per thread so that more CTAs fit on an SM: at 168, three 4-warp CTAs do.
    ``tma``: K/V tiles by TMA; a table row with it serves only calls that can (``lookup``'s
    ``tma_ok``). Not part of ``as_tuple``: launch records name the kernel ``portable_tma``.
    ``pipe``: the kernel's wgmma pipelined on Hopper (``use_wgmma_pipe``); a row with it takes it
    by default, ``SAGEBUILD_WGMMA_PIPE`` overrides. Not part of ``as_tuple`` either.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    maxnreg: Optional[int] = None
    tma: bool = False
    pipe: bool = False

    def q_blk(self, qk_quant_gran: str) -> int:
        """Rows of Q sharing one INT8 scale: the whole tile, or one warp's slice of it."""
        if qk_quant_gran == "per_block":
            return self.block_m
        return min(self.block_m, max(16, self.block_m // self.num_warps))

    @property
    def k_blk(self) -> int:
        """Tokens per K scale: the key tile when it is K_BLK_WIDE wide (as upstream's Hopper
        kernels), else K_BLK. Quantization and kernel must agree: ``QuantizedKV.k_blk`` carries it."""
        return K_BLK_WIDE if self.block_n == K_BLK_WIDE else K_BLK

    def spec(self) -> str:
        """The config as ``parse_config`` reads it: ``"64,128,4,2,168,tma"``."""
        return (
            ",".join(map(str, self.as_tuple()))
            + (",tma" if self.tma else "")
            + (",pipe" if self.pipe else "")
        )

    def as_tuple(self) -> tuple[int, ...]:
        base = (self.block_m, self.block_n, self.num_warps, self.num_stages)
        return base if self.maxnreg is None else (*base, self.maxnreg)

    def launch_options(self) -> dict[str, int]:
        """Triton launch options: num_warps, num_stages and, when set, maxnreg."""
        opts = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.maxnreg is not None:
            opts["maxnreg"] = self.maxnreg
        return opts


ConfigLike = Union[LaunchConfig, tuple, list, str]
_CONFIG_FLAGS = ("tma", "pipe")  # a config string's trailing words (``LaunchConfig.spec``)


class Row(NamedTuple):
    """(family, head_dim, variant, causal, from this many keys) -> config.

    variant: "fp16" | "fp8" (either FP8 accumulation) | "fp8acc" (FP8 P·V accumulated by the
    MMA, ``pv_accum_dtype="fp32"``) | "*"; causal: bool | "*"; ``min_keys``: the row serves calls
    with at least this many keys (longer sequences amortise wider key tiles' fewer CTAs).
    """

    family: str
    head_dim: Union[int, str]
    variant: str
    causal: Union[bool, str]
    config: LaunchConfig
    min_keys: int = 0


_TABLE: list[Row] = [
    # Triton's CPU interpreter (tests): small tiles so that loops and masks are exercised.
    Row("interpreter", "*", "*", "*", LaunchConfig(32, 16, 4, 1)),
    # FP8 P·V accumulated by the MMA, from 4K keys: 128-key tiles by TMA, capped at 168 registers
    # with two stages, so three CTAs share an SM (by registers and by shared memory: 3 × 64 KB).
    # Run 16 (H200, whole call, ms, against the rows below with TMA on): 2×32×4096×128 0.881 vs
    # 0.971, causal 0.568 vs 0.573; 1×32×16384×128 5.995 vs 6.680, causal 3.224 vs 3.492; at
    # 2048 keys 0.2985 vs 0.2917 (hence from 4K). The two-level FP8 P·V's second accumulator
    # does not fit 168 registers. With its wgmma pipelined (``use_wgmma_pipe``; 8 → 2 MMA waits
    # per tile), run 20, ms by CUDA-graph replay off → on: 2×32×4096×128 0.871 → 0.830, causal
    # 0.570 → 0.519; 1×32×16384×128 6.084 → 5.765, causal 3.306 → 3.041.
    Row("Hopper", 128, "fp8acc", "*", LaunchConfig(64, 128, 4, 2, 168, tma=True, pipe=True), min_keys=4096),
    # Hopper, tuned on an H200 (2026-11-30, Triton 3.6, docs/performance.md "run 3"): FP8 P·V
    # wins with one warpgroup per 64 query rows and wide key tiles (several CTAs per SM overlap
    # each other's softmax and MMA); FP16 P·V prefers two warpgroups over 128 rows.
    # From 8K keys FP8 takes 128-key tiles with 128-token K scale blocks (``LaunchConfig.k_blk``):
    # 630 instead of 2·425 instructions per 64×128 scores (sm90 SASS) at two CTAs per SM (255
    # registers). Run 12, whole call: 1×32×16384×128 6.55 vs 6.99 ms (causal 3.47 vs 3.76);
    # 4×32×8192×64 4.38 vs 4.76 (capped at 168: 173 registers otherwise). At 4K keys the 64-key
    # tiles stay faster (2×32×4096×128 1.026 vs 1.043 ms, causal 0.665 vs 0.704) unless TMA lets
    # three 128-key CTAs share an SM (the row above).
    Row("Hopper", 128, "fp8", "*", LaunchConfig(64, 128, 4, 3), min_keys=8192),
    Row("Hopper", 64, "fp8", "*", LaunchConfig(64, 128, 4, 3, 168), min_keys=8192),
    # FP8 hd128 with registers capped at 168: three 4-warp CTAs per SM instead of two (ptxas
    # otherwise takes 255); run 7: 2×32×4096×128 1.032 vs 1.104 ms, 1×32×16384×128 7.03 vs 7.17.
    Row("Hopper", 128, "fp8", "*", LaunchConfig(64, 64, 4, 3, 168)),
    Row("Hopper", 128, "fp16", "*", LaunchConfig(128, 64, 8, 3)),
    # Head dims 65–96 as 64 + 32 pieces (``split_head_dim``; rows keyed 96): FP16 P·V prefers
    # one warpgroup per 64 rows like FP8 (run 11: 2×16×4096×96 0.622 ms vs 0.767 with 128,64,8,3).
    # From 4K keys the MMA-accumulated FP8 P·V takes the 128-key TMA row with pipelined wgmma
    # here too. Run 20 (CUDA-graph replays, ms, against 64,64,4,3,168): 2×16×4096×96 0.419 vs
    # 0.459, causal 0.278 vs 0.290; 1×16×16384×96 2.774 vs 3.150, causal 1.474 vs 1.653;
    # 2×16×8192×80 1.403 vs 1.601. At 2K keys it is even (0.141 vs 0.144, causal 0.070 vs 0.068).
    Row("Hopper", 96, "fp8acc", "*", LaunchConfig(64, 128, 4, 2, 168, tma=True, pipe=True), min_keys=4096),
    Row("Hopper", 96, "fp8", "*", LaunchConfig(64, 64, 4, 3, 168)),
    Row("Hopper", 96, "fp16", "*", LaunchConfig(64, 64, 4, 3, 168)),
    Row("Hopper", 64, "fp8", "*", LaunchConfig(64, 64, 4, 3)),
    # FP16 P·V at head dim 64 below 1.5K keys: 128-key tiles (and 128-token K blocks, half the
    # quantization programs). By CUDA-graph replay (device time; run 19), 128,64,4,3 against
    # 64,128,4,3, µs: 1×16×1536×64 47.0 vs 51.8, 1×16×2048×64 61.8 vs 66.5, 2×32×2048×64 221.1 vs
    # 243.3, 1×32×2048×64 115.6 vs 130.0 (run 14's do_bench had the last the other way); at
    # 1×16×1024×64 26.2 vs 27.3 (run 18), so below 1536 keys the 128-key tiles stay.
    Row("Hopper", 64, "fp16", "*", LaunchConfig(128, 64, 4, 3), min_keys=1536),
    Row("Hopper", 64, "fp16", "*", LaunchConfig(64, 128, 4, 3)),
    # Head dim 256: a 64×256 FP32 accumulator is 128 registers per thread at 4 warps, and FP8
    # P·V's fresh per-tile accumulator doubles that (spills, seen in the sm90 SASS); 8 warps split
    # the 256 columns between two warpgroups. The MMA-accumulated FP8 P·V has no second
    # accumulator and runs one warpgroup per 64 rows. H200, 1×16×8192×256 (docs/performance.md
    # run 12): FP8 accumulated by the MMA 64,64,4,3 1.60 ms (two-level 64,128,8,2 2.96); FP16 P·V
    # 128,64,8,3 1.85 ms (128,64,8,2 2.12, run 7's winner).
    # With TMA (sm90 ptxas: 235 registers and no spill, against 255 and 12 bytes of spill with
    # per-thread copies; one CTA per SM either way, 115 KB of shared memory), run 16:
    # 1×16×8192×256 1.425 vs 1.538 ms, causal 0.812 vs 0.894.
    Row("Hopper", 256, "fp16", "*", LaunchConfig(128, 64, 8, 3)),
    Row("Hopper", 256, "fp8acc", "*", LaunchConfig(64, 64, 4, 3, tma=True)),
    Row("Hopper", 256, "fp8acc", "*", LaunchConfig(64, 64, 4, 3)),
    Row("Hopper", 256, "fp8", "*", LaunchConfig(64, 128, 8, 2)),
    # Head dims 129–192 as 128 + 64 pieces (rows keyed 192): two-level FP8 P·V then prefers 128
    # rows of 8 warps (run 11: 1×16×8192×192 2.06 ms vs 2.85 with the 256 row; padded 3.36); the
    # MMA-accumulated one 64,64,4,3 (run 12: 1.53 ms vs 1.92 with 128,64,8,2). FP16 P·V takes
    # the 256 row (run 12: 1.69 ms with 128,64,8,3).
    # From 4K keys: 128-key tiles by TMA with pipelined wgmma at ptxas's register count (two CTAs
    # per SM; capped at 168 it is 45 % slower). Run 20 (CUDA-graph replays, ms, against 64,64,4,3):
    # 1×16×8192×192 1.119 vs 1.295, causal 0.702 vs 0.768; 2×16×4096×192 0.664 vs 0.719;
    # 2×16×4096×160 0.649 vs 0.684; at 1×16×2048×192 0.132 vs 0.123, hence from 4K.
    Row("Hopper", 192, "fp8acc", "*", LaunchConfig(64, 128, 4, 2, tma=True, pipe=True), min_keys=4096),
    Row("Hopper", 192, "fp8acc", "*", LaunchConfig(64, 64, 4, 3)),
    Row("Hopper", 192, "fp8", "*", LaunchConfig(128, 64, 8, 2)),
    Row("*", 256, "*", "*", LaunchConfig(64, 64, 8, 2)),
    # Ampere / Ada / consumer Blackwell: mma.sync, smaller shared memory.
    Row("Ampere", 128, "*", "*", LaunchConfig(128, 64, 8, 2)),
    Row("Ampere", 64, "*", "*", LaunchConfig(128, 64, 4, 3)),
    Row("Ada", 128, "*", "*", LaunchConfig(128, 64, 8, 2)),
    Row("Ada", 64, "*", "*", LaunchConfig(128, 64, 4, 3)),
    Row("Blackwell", "*", "*", "*", LaunchConfig(128, 64, 8, 3)),
    # AMD: CDNA (wave64 MFMA) and RDNA (wave32 WMMA); AMD's Triton pipeliner prefers few stages.
    Row("CDNA3", "*", "*", "*", LaunchConfig(128, 64, 4, 2)),
    Row("CDNA4", "*", "*", "*", LaunchConfig(128, 64, 4, 2)),
    Row("CDNA2", "*", "*", "*", LaunchConfig(128, 64, 4, 1)),
    Row("RDNA4", "*", "*", "*", LaunchConfig(64, 32, 4, 1)),
    Row("RDNA3", "*", "*", "*", LaunchConfig(64, 32, 4, 1)),
    Row("*", "*", "*", "*", LaunchConfig(128, 64, 4, 2)),
]


# Where the arch table's P·V path (``archs.Arch.pv``) is measurably not the faster one for a
# call, ``sageattn`` takes another: (family, padded head dim or "*", at most this many keys or
# None for any) -> "fp16" | "fp8" | "fp8acc" (FP8 P·V accumulated by the MMA,
# ``pv_accum_dtype="fp32"``). First match wins. Measured on an H200 (docs/performance.md), whole call:
# head dim 64 up to 4096 keys, FP16 P·V 0.141 / 0.200 ms vs FP8 0.189 / 0.214 ms at
# 1×16×{1024, 4096}×64 (run 7: FP8 costs V's amax reduction and a heavier quantization launch);
# elsewhere the MMA-accumulated FP8 P·V: 1–3 % faster than the two-level one at head dims 64
# and 128 with the accuracy bounds held to 32K keys (runs 11, 12), and at head dim 256 faster
# than FP16 P·V (run 12, 1×16×8192×256: 1.60 vs 1.85 ms; causal 0.98 vs 1.11), where the
# two-level FP8 path was the slowest (run 7: its second accumulator costs registers).
_PV_PREFERENCE: list[tuple[str, Union[int, str], Union[int, None], str]] = [
    ("Hopper", 64, 4096, "fp16"),
    ("Hopper", "*", None, "fp8acc"),
]


# ``sagebuild.patch_sdpa``'s speed routing: (family, largest padded head dim or "*", causal or
# "*") -> the shortest query and key length from which a patched call (host time included) is at
# least as fast as SDPA's default backend; shorter calls go to SDPA. First match wins; a family
# without a row is routed by the patch's faithfulness rules alone. Measured on an H200
# (docs/performance.md, run 26: eager calls through the patch against cuDNN, B·H 16 to 64,
# sustained at the 700 W limit, where long jobs run): head dim 128 at 4096 keys 1.07–1.22×
# (3072: 0.80–1.01×), causal at 5120 1.08–1.19× (4096: 0.72–1.11×); head dim 64 at 8192 keys
# 1.05–1.20× (6144: 0.93–1.04×); head dim 256 at 4096 keys 1.06–1.14× (2048: 0.43–0.82×).
# Cold calls (the GPU below its power limit) favour cuDNN: there these lengths measured
# 0.58–1.03× and the crossover lies near 8K keys. Below SDPA_CROSSOVER_BH (batch × query heads)
# a row's length L becomes the length of equal work, L·sqrt(SDPA_CROSSOVER_BH / (B·H)) rounded
# up: a small grid leaves SMs idle and the fixed per-call cost weighs more (run 28, B·H 1, 4
# and 8, sustained: head dim 128 at 4096 keys 0.35–0.80× SDPA's speed, head dim 64 at 8192
# 0.55–0.97× at B·H 1 and 4 (1.05× at 8, which this rule gives up); at the scaled lengths
# 0.98–1.36×).
_SDPA_CROSSOVER: list[tuple[str, Union[int, str], Union[bool, str], int]] = [
    ("Hopper", 64, "*", 8192),
    ("Hopper", 128, False, 4096),
    ("Hopper", 128, True, 5120),
    ("Hopper", "*", "*", 4096),
]
SDPA_CROSSOVER_BH = 16
SDPA_CROSSOVER_ENV_VAR = "SAGEBUILD_PATCH_MIN_LEN"


def sdpa_crossover(
    family: str, head_dim_pad: int, causal: bool, use_env: bool = True, batch_heads: int | None = None
) -> int | None:
    """The query/key length from which ``patch_sdpa`` sends a call of ``batch_heads`` (batch ×
    query heads; None: at least SDPA_CROSSOVER_BH) to our kernels on this family
    (``SAGEBUILD_PATCH_MIN_LEN`` overrides every row and every B·H, 0 sends every length;
    ValueError when it is not a number), or None: no row."""
    env = os.environ.get(SDPA_CROSSOVER_ENV_VAR) if use_env else None
    if env:
        try:
            return max(0, int(env))
        except ValueError:
            raise ValueError(
                f"{SDPA_CROSSOVER_ENV_VAR}={env!r}: expected a whole number of tokens (0 sends every "
                "length to the quantized kernels)"
            ) from None
    for fam, hd, cau, min_len in _SDPA_CROSSOVER:
        if fam == family and (hd == "*" or head_dim_pad <= hd) and cau in ("*", causal):
            if batch_heads is None or batch_heads >= SDPA_CROSSOVER_BH:
                return min_len
            return math.ceil(min_len * math.sqrt(SDPA_CROSSOVER_BH / max(1, batch_heads)))
    return None


# Hopper's warp-specialised Gluon kernel (``attn_hopper.py``): (family, padded head dim, P·V
# variant, causal, routed from this many keys or None: only when forced) -> config (BLOCK_M,
# BLOCK_N, compute warps, K/V ring slots, maxnreg). A call it cannot take (LSE, varlen, keys not
# a multiple of 16, more queries than keys under causal, an explicit ``config=``) runs the
# portable kernel. ``SAGEBUILD_WS_CONFIG=on`` forces the row's config, a config string forces
# that one (tuning runs), ``off`` turns it off.
# Not routed by default: on an H200 (docs/performance.md, run 10) it is at parity with the
# portable kernel, not faster (1×32×16384×128 whole call, three runs: −1.3 %, −0.8 %, +0.8 %;
# 2×32×4096×128 +2–4 %; head dim 64 up to +19 %).
_WS_TABLE: list[tuple[str, int, str, Union[bool, str], Optional[int], LaunchConfig]] = [
    ("Hopper", 128, "fp8", "*", None, LaunchConfig(64, 64, 4, 4, 128)),
]
WS_ENV_VAR = "SAGEBUILD_WS_CONFIG"


def ws_row(
    family: str, head_dim: int, variant: str, causal: bool
) -> tuple[Optional[int], LaunchConfig] | None:
    """The warp-specialised kernel's table row for a call: (routed from this many keys or None,
    config), or None where it has no row."""
    for fam, hd, var, cau, min_keys, cfg in _WS_TABLE:
        if fam == family and hd == head_dim and var in ("*", variant) and cau in ("*", causal):
            return min_keys, cfg
    return None


def ws_lookup(family: str, head_dim: int, variant: str, causal: bool, n_k: int) -> LaunchConfig | None:
    """The warp-specialised kernel's config for this call, or None (the portable kernel)."""
    env = (os.environ.get(WS_ENV_VAR) or "").strip()
    row = ws_row(family, head_dim, variant, causal)
    if row is None or env.lower() in ("off", "0", "none"):
        return None
    min_keys, cfg = row
    if env.lower() in ("on", "1"):
        return check_ws_config(cfg)
    if env:
        return check_ws_config(parse_config(env), env)
    return check_ws_config(cfg) if min_keys is not None and n_k >= min_keys else None


def check_ws_config(cfg: LaunchConfig, source: object = None) -> LaunchConfig:
    """Refuse a warp-specialised config that cannot run (rather than hang or fail to compile).

    The compute warps release tile j−1's slot only after waiting for tile j+1, so two slots
    would deadlock: at least three. One or two warpgroups of 16-row MMA tiles across BLOCK_M.
    """
    what = f"{WS_ENV_VAR}={source!r}" if source else f"config {cfg.as_tuple()}"
    if cfg.num_stages < 3:
        raise ValueError(f"{what}: the warp-specialised kernel needs at least 3 K/V slots (num_stages)")
    if cfg.num_warps not in (4, 8) or cfg.block_m % (16 * cfg.num_warps):
        raise ValueError(f"{what}: num_warps must be 4 or 8 and BLOCK_M a multiple of 16·num_warps")
    if cfg.block_n not in (64, 128):
        raise ValueError(f"{what}: BLOCK_N must be 64 or 128 (the INT8 MMA's N and the K block)")
    return cfg


def preferred_pv(family: str, head_dim_pad: int, n_k: int) -> str | None:
    """The P·V variant ("fp16" / "fp8" / "fp8acc") measured faster than the arch default here, or None."""
    for fam, hd, max_keys, pv in _PV_PREFERENCE:
        if fam == family and hd in ("*", head_dim_pad) and (max_keys is None or n_k <= max_keys):
            return pv
    return None


def parse_config(value: ConfigLike) -> LaunchConfig:
    """A LaunchConfig from a config, a tuple or a string such as ``"128,64,8,3"``, validated:
    four integers, an optional register cap, and optional last entries ``tma`` and ``pipe``."""
    if isinstance(value, LaunchConfig):
        cfg = value
    else:
        parts = value.replace(" ", "").split(",") if isinstance(value, str) else list(value)
        flags = set()
        while parts and str(parts[-1]).lower() in _CONFIG_FLAGS and str(parts[-1]).lower() not in flags:
            flags.add(str(parts.pop()).lower())
        if len(parts) not in (4, 5):
            raise ValueError(
                f"attention config {value!r} must have 4 or 5 integers: "
                "BLOCK_M,BLOCK_N,num_warps,num_stages[,maxnreg][,tma][,pipe]"
            )
        try:
            cfg = LaunchConfig(*(int(p) for p in parts), tma="tma" in flags, pipe="pipe" in flags)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"attention config {value!r} must be integers (BLOCK_M,BLOCK_N,num_warps,num_stages"
                "[,maxnreg]), optionally followed by tma and pipe"
            ) from exc
    for name, v in (("BLOCK_M", cfg.block_m), ("BLOCK_N", cfg.block_n), ("num_warps", cfg.num_warps)):
        if v < 1 or v & (v - 1):
            raise ValueError(f"attention config {value!r}: {name} must be a power of two, got {v}")
    if cfg.block_m < 16 or cfg.block_n < 16:
        raise ValueError(f"attention config {value!r}: BLOCK_M and BLOCK_N must be at least 16")
    if cfg.num_stages < 1:
        raise ValueError(f"attention config {value!r}: num_stages must be at least 1")
    if cfg.maxnreg is not None and not 24 <= cfg.maxnreg <= 255:
        raise ValueError(f"attention config {value!r}: maxnreg must be within 24..255, got {cfg.maxnreg}")
    return cfg


def lookup(
    family: str,
    head_dim: int,
    variant: str,
    causal: bool,
    override: ConfigLike | None = None,
    *,
    split: bool = False,
    n_k: int = 0,
    tma_ok: bool = False,
) -> LaunchConfig:
    """The config for one launch: the keyword override, else the env var, else the table.

    ``head_dim`` is the padded one; ``split`` (``split_head_dim``) first tries the rows keyed
    with the split width (3/4 of it: 96 for 64 + 32 pieces), then the padded head dim's rows.
    ``variant``: "fp16", "fp8" or "fp8acc" (see ``Row``); ``n_k``: keys per sequence (the
    longest, for packed sequences), for rows with ``min_keys``; ``tma_ok``: the call can load
    K/V by TMA (``tma_possible`` and its buffers' layout), for rows whose config needs it.
    """
    if override is not None:
        return parse_config(override)
    env = os.environ.get(ENV_VAR)
    if env:
        return parse_config(env)
    if split:  # only rows keyed with the split width itself, never a wildcard
        for row in _TABLE:
            if row.head_dim == split_width(head_dim) and _matches(row, family, variant, causal, n_k, tma_ok):
                return row.config
    for row in _TABLE:
        if row.head_dim in ("*", head_dim) and _matches(row, family, variant, causal, n_k, tma_ok):
            return row.config
    raise AssertionError("the config table ends with a catch-all row")


def variant_key(pv: str, pv_accum: str) -> str:
    """The table's variant for a call: "fp16", "fp8", or "fp8acc" for FP8 P·V with
    ``pv_accum_dtype="fp32"`` (the MMA accumulates)."""
    return "fp8acc" if pv == "fp8" and pv_accum == "fp32" else pv


def _matches(row: Row, family: str, variant: str, causal: bool, n_k: int, tma_ok: bool) -> bool:
    var_ok = row.variant in ("*", variant) or (row.variant == "fp8" and variant == "fp8acc")
    return (
        row.family in ("*", family)
        and var_ok
        and row.causal in ("*", causal)
        and n_k >= row.min_keys
        and (tma_ok or not row.config.tma)
    )


def split_width(head_dim_pad: int) -> int:
    """The channels a split head dim covers: half plus a quarter of the padded width."""
    return 3 * head_dim_pad // 4


def split_head_dim(head_dim: int, head_dim_pad: int) -> bool:
    """Whether a padded head dim runs as two channel pieces, half and a quarter of the padded
    width, instead of the whole tile: 65–96 as 64 + 32, 129–192 as 128 + 64. The padded quarter
    of the MMA and P·V accumulation work is skipped; pieces stay powers of two of at least 32
    channels (the INT8 MMA's K), so 80 runs as 96. The K/V buffers keep the padded width."""
    return head_dim_pad in (128, 256) and head_dim_pad // 2 < head_dim <= split_width(head_dim_pad)


def padded_head_dim(head_dim: int) -> int | None:
    """The native head dim a head dim is padded to, or None when it is too large."""
    for native in NATIVE_HEAD_DIMS:
        if head_dim <= native:
            return native
    return None


def table_rows() -> list[dict]:
    """The table as plain data (for docs and ``bench`` records)."""
    return [
        {
            "family": r.family,
            "head_dim": r.head_dim,
            "variant": r.variant,
            "causal": r.causal,
            "min_keys": r.min_keys,
            "config": r.config.as_tuple(),
            "tma": r.config.tma,
            "pipe": r.config.pipe,
        }
        for r in _TABLE
    ]


_KNOB_VARS = (
    ENV_VAR, FUSE_ENV_VAR, WS_ENV_VAR, TMA_ENV_VAR, PDL_ENV_VAR, WGMMA_PIPE_ENV_VAR, V_KEY_ORDER_ENV_VAR,
    ROW_SUM_PARTS_ENV_VAR,
)  # fmt: skip
try:  # CPython: os.environ's own mapping and key encoding
    _ENV_DATA: Optional[dict] = os.environ._data  # type: ignore[attr-defined]
    _KNOB_KEYS = tuple(os.environ.encodekey(name) for name in _KNOB_VARS)  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - other Pythons
    _ENV_DATA = None
