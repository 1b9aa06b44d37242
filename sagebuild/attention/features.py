"""Which kernel features each arch family gets: one table, one rule for environment overrides.

Modes: ``never`` (a knob does not turn it on), ``on``, ``config`` (as the launch config's row
says: ``LaunchConfig.tma`` / ``.pipe``), ``short`` (calls of at most ``PDL_MAX_KEYS`` keys),
``opt_in`` (off unless its knob turns it on). A knob set to 1/on turns a feature on wherever its
mode is not ``never``, 0/off turns it off. docs/kernels.md shows the table.
"""

from __future__ import annotations

from typing import NamedTuple

from sagebuild import knobs

# Up to this many keys the attention launch overlaps the K/V quantization launch by default
# (the gain is a fixed ~1 µs; from 4K keys it measured within noise).
PDL_MAX_KEYS = 2048
# P's partial row sums per row: in NVIDIA's MMA accumulator layouts a thread holds two adjacent
# columns of every eight, so eight parts keep a tile's row sum inside the thread.
ROW_SUM_PARTS = 8


class FamilyFeatures(NamedTuple):
    """Modes of every feature on one family (see the module docstring)."""

    tma: str
    pdl: str
    wgmma_pipe: str
    v_key_order: str
    row_sum_parts: str
    why: str


FEATURES = FamilyFeatures._fields[:-1]
KNOB = {feature: f"SAGEBUILD_{feature.upper()}" for feature in FEATURES}
_NONE = FamilyFeatures("never", "never", "never", "never", "never", "portable kernel only")

TABLE: dict[str, FamilyFeatures] = {
    # fmt: off
    "Hopper": FamilyFeatures(
        "config", "short", "config", "on", "on", "all measured on the H200 (docs/performance.md)"
    ),
    "Blackwell": FamilyFeatures(
        "config", "short", "never", "never", "never", "TMA and PDL exist; wgmma-specific ones do not apply"
    ),
    # the CPU interpreter runs TMA and row-sum parts so the tests cover them (key order when opted in)
    "interpreter": FamilyFeatures(
        "config", "never", "never", "opt_in", "on", "tests: the interpreter emulates descriptors and reshapes"
    ),
    # RDNA's WMMA layout does not compile the row-sum reshape (Triton 3.6); AMD has no TMA/PDL
    # fmt: on
}


def modes(family: str) -> FamilyFeatures:
    """The family's row; families without one run the portable kernel with every feature off."""
    return TABLE.get(family, _NONE)


def enabled(feature: str, family: str, *, config_choice: bool = False, n_k: int = 0) -> bool:
    """Whether ``feature`` is on for a call on ``family`` (``config_choice``: the config row's
    flag for ``config`` features; ``n_k``: the call's keys for ``short`` ones)."""
    mode = getattr(modes(family), feature)
    if mode == "never":
        return False
    forced = knobs.switch(KNOB[feature])
    if forced is not None:
        return forced
    return {"config": config_choice, "short": 0 < n_k <= PDL_MAX_KEYS}.get(mode, mode == "on")


def possible(feature: str, family: str) -> bool:
    """Whether the feature may be on for this family at all (not ``never``, not forced off)."""
    return getattr(modes(family), feature) != "never" and knobs.switch(KNOB[feature]) is not False


def markdown_table() -> str:
    """The table as docs/kernels.md shows it."""
    head = "| family | " + " | ".join(FEATURES) + " | why |"
    rows = [head, "|" + " --- |" * (len(FEATURES) + 2)]
    for fam, row in TABLE.items():
        rows.append(f"| {fam} | " + " | ".join(getattr(row, f) for f in FEATURES) + f" | {row.why} |")
    rows.append("| every other family | " + " | ".join("never" for _ in FEATURES) + " | portable kernel |")
    return "\n".join(rows)
