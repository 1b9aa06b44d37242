"""Every ``SAGEBUILD_*`` environment variable, registered once; code reads them through ``raw`` and
``switch``, and docs/knobs.md is generated from the table (``python -m sagebuild.knobs``; a test
compares). Plan knobs are cached per process (a call's plan key holds ``plan_values()``, which must
cost nothing); ``refresh()`` re-reads them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Knob:
    """One environment variable. ``kind``: "switch" (1/on, 0/off, unset: the default),
    "int", "config" (a launch config string) or "path". ``plan``: part of an attention call's
    plan key (it changes which kernel a call runs)."""

    name: str
    kind: str
    default: str
    meaning: str
    plan: bool = False


KNOBS: tuple[Knob, ...] = (
    Knob(
        "SAGEBUILD_ATTN_CONFIG",
        "config",
        "unset (the versioned table)",
        "Force one attention launch config for every call: `BLOCK_M,BLOCK_N,num_warps,num_stages"
        "[,maxnreg][,tma][,pipe]` (tuning runs; the `config=` keyword wins).",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_TMA",
        "switch",
        "the config row's choice",
        "K/V tiles by tensor descriptors (TMA) where the family can (features table): 1 for every "
        "eligible call, 0 never (rows that need it are then skipped).",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_PDL",
        "switch",
        "on up to 2048 keys",
        "Programmatic dependent launch: the attention launch overlaps the K/V quantization "
        "launch (NVIDIA sm90+). 1 for every length, 0 never.",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_WGMMA_PIPE",
        "switch",
        "the config row's choice",
        "Hopper: Q read back from memory and the P·V wgmma waited on in its iteration, so ptxas "
        "pipelines the kernel's wgmma. 1 for every config, 0 never.",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_V_KEY_ORDER",
        "switch",
        "on (Hopper)",
        "FP8 V stored in wgmma key order, so P needs no shuffles before the P·V wgmma. 1 on "
        "(Hopper, interpreter), 0 off.",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_ROW_SUM_PARTS",
        "switch",
        "on (Hopper, interpreter)",
        "P's row sums kept as 8 partial sums per row until the epilogue (no warp shuffles per "
        "tile). 1 on where the family can, 0 off.",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_ROUTE",
        "switch",
        "on",
        "`sageattn` runs PyTorch SDPA for calls whose shape class was measured faster there (this "
        "machine's tuning record and the shipped data: `sagebuild.tuning`), and `patch_sdpa` passes "
        "them through; 0 keeps every call on the quantized kernels. The explicit variant functions "
        "and `config=` never route.",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_TUNING",
        "switch",
        "on",
        "Use this machine's tuning record (`sagebuild tune`, `<cache dir>/tuning/<arch>.json`); 0 "
        "ignores it, so the shipped config table and shipped shape classes decide (compare the two "
        "in one process with this knob).",
        plan=True,
    ),
    Knob(
        "SAGEBUILD_PATCH_MIN_LEN",
        "int",
        "the measured shape classes",
        "`patch_sdpa` sends calls with at least this many query and key tokens to `sageattn` (0: every "
        "length), instead of asking the tuning record's shape classes which calls SDPA runs faster.",
    ),
    Knob(
        "SAGEBUILD_RECORD",
        "path",
        "unset (nothing recorded)",
        "`sageattn` appends each new call signature (shape key, dtype, layout; one JSON line) to this "
        "file, for `sagebuild tune --from-record FILE` to tune what the program really runs.",
    ),
    Knob(
        "SAGEBUILD_CACHE_DIR",
        "path",
        "the platform cache dir (~/.cache/sagebuild)",
        "Where built extensions and build state are kept.",
    ),
    Knob(
        "SAGEBUILD_EXT_DIR",
        "path",
        "<cache dir>/ext/<environment key>",
        "Where this environment's compiled extension is written and looked up.",
    ),
    Knob(
        "SAGEBUILD_TEST_SHARED_CACHE",
        "switch",
        "off (each test run gets a fresh temporary cache)",
        "The test suite keeps a set `SAGEBUILD_CACHE_DIR` instead of a temporary cache of its own "
        "(`scripts/gpu_check.sh` sets it, so the GPU tests use the build its compile stage made).",
    ),
    Knob(
        "SAGEBUILD_OUT",
        "path",
        "sagebuild-out",
        "Where `scripts/quickstart.sh` has `sagebuild accept` write its report and lockfile (read by "
        "that script only).",
    ),
)

_BY_NAME = {k.name: k for k in KNOBS}
_values: dict[str, Optional[str]] = {}  # filled on first use
_plan_values: tuple = ()


class UnknownKnobError(KeyError):
    """A name that is not in the registry: a typo in the code, caught by the tests."""


def refresh() -> None:
    """Re-read every knob from the environment (values are cached per process otherwise)."""
    global _values, _plan_values
    _values = {k.name: os.environ.get(k.name) for k in KNOBS}
    _plan_values = tuple(_values[k.name] for k in KNOBS if k.plan)


def raw(name: str) -> Optional[str]:
    """The knob's value as set (stripped; None or "" when unset). Plan knobs come from the per-process
    cache; the others are read live (a process may be re-pointed at another cache folder)."""
    knob = _BY_NAME.get(name)
    if knob is None:
        raise UnknownKnobError(name)
    if knob.plan and not _values:
        refresh()
    value = _values[name] if knob.plan else os.environ.get(name)
    return value.strip() if value is not None else None


_SWITCH = {
    **dict.fromkeys(("1", "on", "true", "yes"), True),
    **dict.fromkeys(("0", "off", "false", "no"), False),
}


def switch(name: str) -> Optional[bool]:
    """A switch knob: True (1/on/true/yes), False (0/off/false/no) or None (unset or other)."""
    return _SWITCH.get((raw(name) or "").lower())


def plan_values() -> tuple:
    """The values of the knobs that change an attention call's plan (part of its cache key)."""
    if not _values:
        refresh()
    return _plan_values


def markdown() -> str:
    """docs/knobs.md, generated from ``KNOBS``."""
    lines = [
        "# Environment knobs",
        "",
        "Generated from `sagebuild/knobs.py` (`python -m sagebuild.knobs > docs/knobs.md`); a test fails",
        "when this file and the registry differ. Knobs marked *plan* change which kernel an attention call",
        "runs; they are read once per process (`sagebuild.knobs.refresh()` re-reads them).",
        "",
        "| name | kind | default | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for k in KNOBS:
        kind = f"{k.kind}, plan" if k.plan else k.kind
        lines.append(f"| `{k.name}` | {kind} | {k.default} | {k.meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
