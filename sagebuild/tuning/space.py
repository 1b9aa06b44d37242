"""The tuner's search space: which P·V variants and launch configs ``sagebuild tune`` tries, per
arch family and head dim, in this one place.

Kept small on purpose: every candidate costs a compile (about a second) and its timing rounds, and
``sagebuild tune --preset mission`` must finish in about a minute. Each list starts from what won
on the GPUs we measured (the shipped table's rows, docs/performance.md) and adds the neighbours
worth a try on a card nobody measured. The shipped table's own config for a class is always
tried first (``candidates``), so a tuned class is never worse than the table it replaces.
No torch import: the doctor and ``--help`` read it.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple, Union

from sagebuild.kernels.triton import configs

# The table variants tuned per family (``configs.variant_key``): "fp16", "fp8" (two-level FP32
# accumulation) or "fp8acc" (MMA-accumulated FP8, Hopper's default). FP8 variants are dropped on
# archs without FP8 matrix units (``candidates``'s ``fp8_ok``).
_VARIANTS: dict[str, tuple[str, ...]] = {
    "Hopper": ("fp16", "fp8acc"),
    "Ada": ("fp16", "fp8"),
    "Blackwell": ("fp16", "fp8"),
    "CDNA3": ("fp16", "fp8"),
    "CDNA4": ("fp16", "fp8"),
    "RDNA4": ("fp16", "fp8"),
    "interpreter": ("fp16", "fp8"),
}
_DEFAULT_VARIANTS = ("fp16",)


class SpaceRow(NamedTuple):
    """(family, head-dim key, variant) -> configs tried, in order of promise. The head-dim key is
    the padded head dim, or the split width for split head dims (96: 65-96, 192: 129-192), or
    "*"; variant "*" matches any. First matching row wins, so specific rows come first."""

    family: str
    head_dim: Union[int, str]
    variant: str
    configs: tuple[str, ...]


# fmt: off
_SPACE: list[SpaceRow] = [
    # Triton's CPU interpreter (tests): two small tiles, so that winners can differ.
    SpaceRow("interpreter", "*", "*", ("32,16,4,1", "16,16,4,1")),
    # Hopper: the table's winners per head dim and their measured runners-up.
    SpaceRow("Hopper", 64, "fp16", ("64,64,4,3", "128,64,4,3", "64,128,4,3", "128,64,8,3")),
    SpaceRow("Hopper", 64, "fp8acc", ("64,128,4,2,168,tma,pipe", "64,64,4,3,168", "64,128,4,3,168")),
    SpaceRow("Hopper", 96, "fp16", ("64,64,4,3,168", "128,64,8,3")),
    SpaceRow("Hopper", 96, "fp8acc", ("64,128,4,2,168,tma,pipe", "64,64,4,3,168")),
    SpaceRow("Hopper", 128, "fp16", ("128,64,8,3", "64,64,4,3,168", "64,128,4,2,168")),
    SpaceRow("Hopper", 128, "fp8acc", ("64,128,4,2,168,tma,pipe", "64,64,4,3,168", "64,128,4,3")),
    SpaceRow("Hopper", 192, "fp16", ("64,64,4,3", "128,64,8,2")),
    SpaceRow("Hopper", 192, "fp8acc", ("64,128,4,2,tma,pipe", "64,64,4,3")),
    SpaceRow("Hopper", 256, "fp16", ("128,64,8,3", "64,64,8,2")),
    SpaceRow("Hopper", 256, "fp8acc", ("64,64,4,3,tma", "64,64,4,3")),
    # Ampere / Ada / Blackwell: mma.sync tiles; smaller shared memory drops the big ones at compile.
    SpaceRow("*", 256, "*", ("64,64,8,2", "64,32,4,2", "128,32,8,2")),
    SpaceRow("Ampere", "*", "*", ("128,64,4,3", "128,64,8,2", "64,64,4,3", "64,64,4,2")),
    SpaceRow("Ada", "*", "*", ("128,64,4,3", "128,64,8,2", "64,64,4,3", "64,64,4,2")),
    SpaceRow("Blackwell", "*", "*", ("128,64,8,3", "128,64,4,3", "64,64,4,3", "64,64,4,2")),
    # AMD: the pipeliner prefers one or two stages; CDNA is wave64 (MFMA), RDNA wave32 (WMMA).
    # Triton's HIP options (``configs.AMD_OPTIONS``): waves_per_eu budgets registers for that many
    # waves per SIMD, matrix_instr_nonkdim picks the MFMA shape, kpack packs K per operand load.
    SpaceRow("CDNA2", "*", "*", ("128,64,4,1,waves_per_eu=2", "128,64,4,1", "64,64,4,1,waves_per_eu=2",
                                 "128,64,4,2,waves_per_eu=2,matrix_instr_nonkdim=16")),
    SpaceRow("CDNA3", "*", "*", ("128,64,4,2,waves_per_eu=2", "128,64,4,1,waves_per_eu=2",
                                 "128,64,4,2,waves_per_eu=2,matrix_instr_nonkdim=16,kpack=2",
                                 "64,64,4,2,waves_per_eu=3", "128,128,8,1,waves_per_eu=1")),
    SpaceRow("CDNA4", "*", "*", ("128,64,4,2,waves_per_eu=2", "128,64,4,2", "128,64,4,1,waves_per_eu=2",
                                 "128,64,4,2,waves_per_eu=2,matrix_instr_nonkdim=16",
                                 "64,64,4,2,waves_per_eu=3")),
    SpaceRow("RDNA4", "*", "*", ("64,32,4,1", "64,64,4,1", "32,32,2,1", "64,32,4,1,waves_per_eu=2",
                                 "128,32,8,1", "64,32,2,2")),
    SpaceRow("RDNA3", "*", "*", ("64,32,4,1", "64,64,4,1", "32,32,2,1", "64,32,4,1,waves_per_eu=2",
                                 "128,32,8,1", "64,32,2,2")),
    SpaceRow("*", "*", "*", ("128,64,4,2", "64,64,4,2", "64,32,4,1")),
]
# fmt: on


class Candidate(NamedTuple):
    """One thing to time for a class: a table variant and a config string (``LaunchConfig.spec``
    form); ``source`` is "table" for the shipped table's own choice, else "space"."""

    variant: str
    config: str
    source: str

    @property
    def label(self) -> str:
        return f"{self.variant} {self.config}"


def variants(family: str, fp8_ok: bool) -> tuple[str, ...]:
    """The table variants tuned on a family, FP8 ones only where the arch has FP8 matrix units."""
    found = _VARIANTS.get(family, _DEFAULT_VARIANTS)
    return tuple(v for v in found if fp8_ok or not v.startswith("fp8"))


def head_dim_key(head_dim: int) -> Union[int, None]:
    """The key a call's head dim is searched by (the record's and the table's rule): its split
    width when it runs split, else its padded head dim (None: too large for the kernels)."""
    from sagebuild.tuning.record import ShapeClass

    return ShapeClass(head_dim, 1, 1, 1, False).head_dim_key


def space_configs(family: str, head_dim: int, variant: str) -> tuple[str, ...]:
    """The search space's configs for one family, head dim and variant (first matching row)."""
    key = head_dim_key(head_dim)
    for row in _SPACE:
        if row.family in ("*", family) and row.head_dim in ("*", key) and row.variant in ("*", variant):
            return row.configs
    return ()


def candidates(
    family: str,
    head_dim: int,
    table_configs: dict[str, str],
    fp8_ok: bool,
    only: tuple[str, ...] = (),
) -> list[Candidate]:
    """Every candidate of a class, in the order to try them: per variant the shipped table's config
    (``table_configs``: variant -> its config spec for this class) first, then the space's, without
    repeats; variants interleaved so that a budget cut short still tries every variant. ``only``
    restricts the variants (empty: all the family tunes)."""
    per_variant = []
    for variant in variants(family, fp8_ok):
        if only and variant not in only:
            continue
        seen: list[Candidate] = []
        table = table_configs.get(variant)
        if table:
            seen.append(Candidate(variant, table, "table"))
        for spec in space_configs(family, head_dim, variant):
            # canonical ("64,128,4,2,168,tma,pipe"); a bad one is kept as written: its first call
            # fails with the reason, a failed candidate
            with contextlib.suppress(ValueError):
                spec = configs.parse_config(spec).spec()
            if all(c.config != spec for c in seen):
                seen.append(Candidate(variant, spec, "space"))
        per_variant.append(seen)
    out = []
    for i in range(max((len(s) for s in per_variant), default=0)):
        out += [s[i] for s in per_variant if i < len(s)]
    return out


def all_rows() -> list[SpaceRow]:
    """The space as data (docs and tests read it)."""
    return list(_SPACE)
