"""Launch configurations of the attention kernels: a versioned table, not a per-run autotune.

Autotuning at run time costs users seconds on every new shape; instead the winners of tuning
runs on real GPUs are kept here, keyed by (arch family, padded head dim, P·V variant, causal).
Rows are matched top to bottom and ``"*"`` matches anything, so the specific rows come first.

For tuning runs a config can be forced without editing this file: the keyword ``config=`` of
the attention functions, or the environment variable ``SAGEBUILD_ATTN_CONFIG="BLOCK_M,BLOCK_N,
num_warps,num_stages[,maxnreg][,tma][,pipe][,vcm][,waves_per_eu=N][,matrix_instr_nonkdim=N][,kpack=N]"``
(the keyword wins; ``LaunchConfig.spec`` writes a config in that form, so any table row can be
forced as it is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

from sagebuild import knobs

# Bump when a row changes, so benchmark records can say which table produced them.
CONFIG_TABLE_VERSION = "2026.12.07.1"

# Head dims the kernels run natively; smaller ones are padded up to the next entry. 256 is
# beyond upstream SageAttention (which refuses it); the INT8 scores still fit the kernels'
# exact int32→float32 trick (|q·k| ≤ 127²·256 < 2²²).
NATIVE_HEAD_DIMS = (64, 128, 256)

# K's INT8 scale block (tokens): this many, or the key tile itself when a config's BLOCK_N is
# 128 (``LaunchConfig.k_blk``): a tile inside one block takes one scale (no FMA per score).
K_BLK = 64
K_BLK_WIDE = 128

ENV_VAR = "SAGEBUILD_ATTN_CONFIG"

# Hopper, head dim 64: FP16 P·V up to this many keys, above it FP8 on the 128-key row (the
# measured crossover: the row's ``min_keys`` and the P·V preference below both follow it).
HD64_FP16_MAX_KEYS = 2048

# Hopper, head dims 129-192 (split 128 + 64, ``split_head_dim``): FP16 P·V on 64-row tiles up to
# this many keys (no V statistics to compute; SD1.5's deepest level), FP8 above.
SPLIT192_FP16_MAX_KEYS = 512

# FP8 V in wgmma key order pads its key rows to whole groups of this many (``layout``).
KEY_GROUP = 32


@dataclass(frozen=True)
class LaunchConfig:
    """Tile sizes and launch parameters of one attention kernel launch.

    ``maxnreg`` (NVIDIA only; None = ptxas's choice, which takes up to 255 registers) caps
    registers per thread so that more CTAs fit on an SM: at 168, three 4-warp CTAs do.
    ``tma``: K/V tiles by TMA; a table row with it serves only calls that can (``lookup``'s
    ``tma_ok``). Not part of ``as_tuple``: the plan records it (``tma``), ``spec`` writes ``,tma``.
    ``pipe``: the kernel's wgmma pipelined on Hopper (``features``, "config" mode); a row with
    it takes it by default, ``SAGEBUILD_WGMMA_PIPE`` overrides. Not part of ``as_tuple`` either.
    ``waves_per_eu``, ``matrix_instr_nonkdim``, ``kpack`` (AMD only; None = Triton's default, and
    then not passed at all): Triton's HIP launch options. ``waves_per_eu`` asks LLVM for that
    many waves per SIMD, so it budgets registers for them (CDNA's 512 unified registers per lane:
    at most 256 for 2 waves); ``matrix_instr_nonkdim`` picks the MFMA shape (16: 16x16, 32: 32x32);
    ``kpack`` packs that many K elements per MFMA operand load (CDNA3; ignored from gfx950).
    ``vcm`` (FP16 P·V): V copied channel-major before the launch (keys contiguous, ``api``), so the
    kernel reads V tiles as the P·V MMA's B operand wants them: on RDNA the token-major tile reaches
    the WMMA through two-byte LDS reads, one per element. A choice for the tuner and the table, not
    a default: the copy is one more pass over V per call. ``spec`` writes ``,vcm``.
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    maxnreg: Optional[int] = None
    tma: bool = False
    pipe: bool = False
    waves_per_eu: Optional[int] = None
    matrix_instr_nonkdim: Optional[int] = None
    kpack: Optional[int] = None
    vcm: bool = False

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
        """The config as ``parse_config`` reads it: ``"64,128,4,2,168,tma"``,
        ``"128,64,4,2,waves_per_eu=2"``."""
        flags = [f for f in _CONFIG_FLAGS if getattr(self, f)]
        return ",".join(
            [*map(str, self.as_tuple()), *flags, *(f"{k}={v}" for k, v in self.amd_options().items())]
        )

    def as_tuple(self) -> tuple[int, ...]:
        base = (self.block_m, self.block_n, self.num_warps, self.num_stages)
        return base if self.maxnreg is None else (*base, self.maxnreg)

    def amd_options(self) -> dict[str, int]:
        """The AMD-only launch options this config sets (``AMD_OPTIONS`` order), nothing unset."""
        return {k: getattr(self, k) for k in AMD_OPTIONS if getattr(self, k) is not None}

    def launch_options(self) -> dict[str, int]:
        """Triton launch options: num_warps, num_stages and, when set, maxnreg (NVIDIA) and the
        AMD options (``amd_options``). A config without them gives the same options as before they
        existed: NVIDIA launches never see an AMD option (``plan.make_plan`` refuses the mix)."""
        opts = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.maxnreg is not None:
            opts["maxnreg"] = self.maxnreg
        return opts | self.amd_options()


ConfigLike = Union[LaunchConfig, tuple, list, str]
_CONFIG_FLAGS = ("tma", "pipe", "vcm")  # a config string's trailing words (``LaunchConfig.spec``)
# Triton's HIP launch options a config can carry, as ``name=value`` entries of a config string,
# and the values each accepts (Triton 3.6's HIPOptions; waves per SIMD up to RDNA's 16).
AMD_OPTIONS: dict[str, tuple[int, ...]] = {
    "waves_per_eu": tuple(range(1, 17)),
    "matrix_instr_nonkdim": (4, 16, 32),
    "kpack": (1, 2),
}


class Row(NamedTuple):
    """(family, head_dim, variant, causal, from this many keys) -> config.

    variant: "fp16" | "fp8" (either FP8 accumulation) | "fp8acc" (FP8 P·V accumulated by the
    MMA, ``pv_accum_dtype="fp32"``) | "*"; causal: bool | "*"; ``min_keys``: the row serves calls
    with at least this many keys (longer sequences amortise wider key tiles' fewer CTAs);
    ``max_keys``: at most this many; ``min_programs``: calls whose grid has at least this many
    programs with the row's BLOCK_M (B·H·⌈N_q / BLOCK_M⌉), for occupancy that pays only beyond a wave.
    """

    family: str
    head_dim: Union[int, str]
    variant: str
    causal: Union[bool, str]
    config: LaunchConfig
    min_keys: int = 0
    max_keys: Optional[int] = None
    min_programs: int = 0


_TABLE: list[Row] = [
    # One line per row group says why it won; the measured numbers are in docs/performance.md.
    # Triton's CPU interpreter (tests): small tiles so that loops and masks are exercised.
    Row("interpreter", "*", "*", "*", LaunchConfig(32, 16, 4, 1)),
    # MMA-accumulated FP8: 128-key TMA tiles at 168 registers, three CTAs per SM (self-attention
    # from 1K keys and cross-attention to 512 text keys as well as long sequences).
    Row("Hopper", 128, "fp8acc", "*", LaunchConfig(64, 128, 4, 2, 168, tma=True, pipe=True)),
    # From 8K keys (head dim 64: above 2K): 128-key tiles with 128-token K scale blocks (one
    # scale per tile); at head dim 64 TMA tiles measured 5-10 % slower.
    Row("Hopper", 128, "fp8", "*", LaunchConfig(64, 128, 4, 3), min_keys=8192),
    Row("Hopper", 64, "fp8", "*", LaunchConfig(64, 128, 4, 3, 168), min_keys=HD64_FP16_MAX_KEYS + 1),
    # FP8 at 168 registers: three 4-warp CTAs per SM instead of two.
    Row("Hopper", 128, "fp8", "*", LaunchConfig(64, 64, 4, 3, 168)),
    Row("Hopper", 128, "fp16", "*", LaunchConfig(128, 64, 8, 3)),
    # Head dims 65-96 as 64 + 32 pieces (rows keyed 96, ``split_head_dim``); 128-key TMA tiles
    # from 1K keys (the 64-key row below).
    Row("Hopper", 96, "fp8acc", "*", LaunchConfig(64, 128, 4, 2, 168, tma=True, pipe=True), min_keys=1024),
    Row("Hopper", 96, "fp8", "*", LaunchConfig(64, 64, 4, 3, 168)),
    Row("Hopper", 96, "fp16", "*", LaunchConfig(64, 64, 4, 3, 168)),
    Row("Hopper", 64, "fp8", "*", LaunchConfig(64, 64, 4, 3)),
    # FP16 at head dim 64: 128-row tiles from 1.5K keys, 128-key tiles from 1K, 64-key tiles
    # for short key sequences (SDXL's 77 text keys up to 512).
    Row("Hopper", 64, "fp16", "*", LaunchConfig(128, 64, 4, 3), min_keys=1536),
    Row("Hopper", 64, "fp16", "*", LaunchConfig(64, 128, 4, 3), min_keys=1024),
    # Text keys (<= 128) and grids beyond one wave of the next row (4 CTAs per SM): 96 registers
    # fit five CTAs per SM (a few spills); a single wave runs slower so.
    Row("Hopper", 64, "fp16", "*", LaunchConfig(64, 64, 4, 2, 96), max_keys=128, min_programs=640),
    Row("Hopper", 64, "fp16", "*", LaunchConfig(64, 64, 4, 3)),
    # Head dim 256: two warpgroups split the columns; the MMA-accumulated FP8 needs no second
    # accumulator and takes TMA (no spill at 235 registers).
    Row("Hopper", 256, "fp16", "*", LaunchConfig(128, 64, 8, 3)),
    Row("Hopper", 256, "fp8acc", "*", LaunchConfig(64, 64, 4, 3, tma=True)),
    Row("Hopper", 256, "fp8acc", "*", LaunchConfig(64, 64, 4, 3)),
    Row("Hopper", 256, "fp8", "*", LaunchConfig(64, 128, 8, 2)),
    # Head dims 129-192 as 128 + 64 pieces (rows keyed 192); 128-key TMA tiles from 4K keys;
    # FP16 on 64-row tiles for short keys (2×8×256×160: 64 programs, 128-row tiles half as many).
    Row("Hopper", 192, "fp16", "*", LaunchConfig(64, 64, 4, 3), max_keys=SPLIT192_FP16_MAX_KEYS),
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
    # CDNA at 2 waves per SIMD (LLVM's budget of 256 registers per lane, AMD's own Triton attention
    # kernels' choice): head dims 64/128 keep the tiles without spill or scratch, and the key loop
    # is 20-40 % shorter than at 1 wave (AMDGCN, docs/kernels.md); gfx950's FP16 P·V would spill so.
    Row("CDNA3", "*", "*", "*", LaunchConfig(128, 64, 4, 2, waves_per_eu=2)),
    Row("CDNA4", "*", "fp8", "*", LaunchConfig(128, 64, 4, 2, waves_per_eu=2)),
    Row("CDNA4", "*", "*", "*", LaunchConfig(128, 64, 4, 2)),
    Row("CDNA2", "*", "*", "*", LaunchConfig(128, 64, 4, 1, waves_per_eu=2)),
    Row("RDNA4", "*", "*", "*", LaunchConfig(64, 32, 4, 1)),
    Row("RDNA3", "*", "*", "*", LaunchConfig(64, 32, 4, 1)),
    Row("*", "*", "*", "*", LaunchConfig(128, 64, 4, 2)),
]


# Where the arch table's P·V path (``archs.Arch.pv``) is measurably not the faster one,
# ``sageattn`` takes another: (family, padded head dim or "*", at most this many keys or None)
# -> "fp16" | "fp8" | "fp8acc" (MMA-accumulated FP8, ``pv_accum_dtype="fp32"``); first match,
# split head dims matching rows keyed with the split width first (as ``lookup``). Head dim 64 up to
# 2K keys and split 129-192 up to 512: FP16 (FP8 pays V's amax pass); elsewhere MMA-accumulated FP8.
_PV_PREFERENCE: list[tuple[str, Union[int, str], Union[int, None], str]] = [
    ("Hopper", 64, HD64_FP16_MAX_KEYS, "fp16"),
    ("Hopper", 192, SPLIT192_FP16_MAX_KEYS, "fp16"),
    ("Hopper", "*", None, "fp8acc"),
]


# Causal grids go (heads, batch, query blocks), every head's longest rows first, while the call's
# quantized K/V fit this many bytes (L2-resident); larger ones keep each head's blocks together.
_HEADS_FIRST_MAX_KV_BYTES = {"Hopper": 32 << 20}


def heads_first(family: str, causal: bool, kv_bytes: int) -> bool:
    """Whether a causal call's grid orders heads before query blocks (``attn_fwd``)."""
    return causal and kv_bytes <= _HEADS_FIRST_MAX_KV_BYTES.get(family, -1)


def preferred_pv(family: str, head_dim: int, n_k: int) -> str | None:
    """The P·V variant ("fp16" / "fp8" / "fp8acc") measured faster than the arch default for a
    call's (unpadded) head dim and key count, or None; split head dims (``split_head_dim``) match
    rows keyed with the split width first."""
    head_dim_pad = padded_head_dim(head_dim)
    if head_dim_pad is None:
        return None
    for keys in _head_dim_keys(head_dim_pad, split_head_dim(head_dim, head_dim_pad)):
        for fam, hd, max_keys, pv in _PV_PREFERENCE:
            if fam == family and hd in keys and (max_keys is None or n_k <= max_keys):
                return pv
    return None


def parse_config(value: ConfigLike) -> LaunchConfig:
    """A LaunchConfig from a config, a tuple or a string such as ``"128,64,8,3"``, validated:
    four integers, an optional register cap, optional words ``tma`` and ``pipe`` and optional
    AMD options ``name=value`` (``AMD_OPTIONS``) after them."""
    if isinstance(value, LaunchConfig):
        cfg = value
    else:
        parts = value.replace(" ", "").split(",") if isinstance(value, str) else list(value)
        options = _pop_amd_options(value, parts)
        flags = set()
        while parts and str(parts[-1]).lower() in _CONFIG_FLAGS and str(parts[-1]).lower() not in flags:
            flags.add(str(parts.pop()).lower())
        if len(parts) not in (4, 5):
            raise ValueError(
                f"attention config {value!r} must have 4 or 5 integers: "
                "BLOCK_M,BLOCK_N,num_warps,num_stages[,maxnreg][,tma][,pipe][,vcm][,waves_per_eu=N]..."
            )
        try:
            ints = [int(p) for p in parts]
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"attention config {value!r} must be integers (BLOCK_M,BLOCK_N,num_warps,num_stages"
                "[,maxnreg]), optionally followed by tma, pipe, vcm and AMD options such as waves_per_eu=2"
            ) from exc
        cfg = LaunchConfig(*ints, **{f: f in flags for f in _CONFIG_FLAGS}, **options)
    for name, v in (("BLOCK_M", cfg.block_m), ("BLOCK_N", cfg.block_n), ("num_warps", cfg.num_warps)):
        if v < 1 or v & (v - 1):
            raise ValueError(f"attention config {value!r}: {name} must be a power of two, got {v}")
    if cfg.block_m < 16 or cfg.block_n < 16:
        raise ValueError(f"attention config {value!r}: BLOCK_M and BLOCK_N must be at least 16")
    if cfg.num_stages < 1:
        raise ValueError(f"attention config {value!r}: num_stages must be at least 1")
    if cfg.maxnreg is not None and not 24 <= cfg.maxnreg <= 255:
        raise ValueError(f"attention config {value!r}: maxnreg must be within 24..255, got {cfg.maxnreg}")
    for name, v in cfg.amd_options().items():
        if v not in AMD_OPTIONS[name]:
            allowed = AMD_OPTIONS[name]
            shown = f"{allowed[0]}..{allowed[-1]}" if len(allowed) > 4 else ", ".join(map(str, allowed))
            raise ValueError(f"attention config {value!r}: {name} must be one of {shown}, got {v}")
    return cfg


def _pop_amd_options(value: ConfigLike, parts: list) -> dict[str, int]:
    """Remove a config's trailing ``name=value`` entries from ``parts`` and return them."""
    options: dict[str, int] = {}
    while parts and "=" in str(parts[-1]):
        name, _, raw = str(parts.pop()).partition("=")
        name = name.strip().lower()
        if name not in AMD_OPTIONS or name in options:
            known = ", ".join(AMD_OPTIONS)
            raise ValueError(f"attention config {value!r}: {name!r} is not a launch option (known: {known})")
        try:
            options[name] = int(raw)
        except ValueError:
            raise ValueError(f"attention config {value!r}: {name} must be an integer, got {raw!r}") from None
    return options


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
    n_q: int = 0,
    batch_heads: int = 0,
) -> LaunchConfig:
    """The config for one launch: the keyword override, else the env var, else the table.

    ``head_dim`` is the padded one; ``split`` (``split_head_dim``) first tries the rows keyed
    with the split width (3/4 of it: 96 for 64 + 32 pieces), then the padded head dim's rows.
    ``variant``: "fp16", "fp8" or "fp8acc" (see ``Row``); ``n_k``: keys per sequence (the
    longest, for packed sequences), for rows with ``min_keys`` / ``max_keys``; ``tma_ok``: the
    call can load K/V by TMA (the features table and its buffers' layout), for rows whose config
    needs it; ``n_q`` (the longest query sequence) and ``batch_heads`` (sequences × query heads)
    size the grid for rows with ``min_programs`` (0: unknown, such rows do not serve).
    """
    if override is not None:
        return parse_config(override)
    env = knobs.raw(ENV_VAR)
    if env:
        return parse_config(env)
    call = (family, variant, causal, n_k, tma_ok, n_q, batch_heads)
    for keys in _head_dim_keys(head_dim, split):
        for row in _TABLE:
            if row.head_dim in keys and _matches(row, *call):
                return row.config
    raise AssertionError("the config table ends with a catch-all row")


def _head_dim_keys(head_dim_pad: int, split: bool) -> list[tuple[Union[int, str], ...]]:
    """The head-dim keys a call's rows are searched by, pass after pass (``lookup`` and
    ``preferred_pv``): a split head dim first by its split width alone (never a wildcard), then
    every call by its padded head dim or "*"."""
    return ([(split_width(head_dim_pad),)] if split else []) + [("*", head_dim_pad)]


def variant_key(pv: str, pv_accum: str) -> str:
    """The table's variant for a call: "fp16", "fp8", or "fp8acc" for FP8 P·V with
    ``pv_accum_dtype="fp32"`` (the MMA accumulates)."""
    return "fp8acc" if pv == "fp8" and pv_accum == "fp32" else pv


def _matches(
    row: Row, family: str, variant: str, causal: bool, n_k: int, tma_ok: bool, n_q: int, batch_heads: int
) -> bool:
    var_ok = row.variant in ("*", variant) or (row.variant == "fp8" and variant == "fp8acc")
    programs = batch_heads * math.ceil(n_q / row.config.block_m)
    return (
        row.family in ("*", family)
        and var_ok
        and row.causal in ("*", causal)
        and row.min_keys <= n_k
        and (row.max_keys is None or n_k <= row.max_keys)
        and programs >= row.min_programs
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
    return next((native for native in NATIVE_HEAD_DIMS if head_dim <= native), None)
