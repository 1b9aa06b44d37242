"""Variants that ``sageattn`` and the tuner may pick on an arch only after ``sagebuild verify`` has
checked their accuracy on this machine.

A kernel path that no GPU of ours has run, but that the ISA counts make the faster one, is gated:
the arch table names it (``archs.Arch.fp8_cvt_asm``: FP8 P through our inline ``v_cvt_pk_fp8_f32``
on RDNA4), ``sagebuild verify`` on such a GPU records whether the variant met the profile's
accuracy bounds, and until a passing record exists for this Triton and these kernel sources the
dispatch (``plan.default_pv``) takes the other P·V path and the tuner leaves the variant out
(``allowed``). The explicit functions (``sageattn_qk_int8_pv_fp8_triton``) always run what they
name: verify itself calls them.

The records live in ``<cache root>/verified.json`` (``build.paths.cache_root``), keyed by arch and
variant, each with the Triton version and the kernel sources' hash it was made under: an upgrade
or an edited kernel needs a new check.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
from pathlib import Path
from typing import Any, Optional

from sagebuild import archs

RECORD_FILE = "verified.json"


def needs_check(arch: str, variant: str) -> bool:
    """Whether ``variant`` on ``arch`` waits for a passing ``sagebuild verify`` before the
    dispatch or the tuner may choose it."""
    row = archs.ARCHS.get(archs.normalize(arch))
    return row is not None and variant == "qk_int8_pv_fp8" and row.fp8_cvt_asm


def allowed(arch: str, variant: str) -> bool:
    """Whether the dispatch and the tuner may choose ``variant`` on ``arch``: ungated, or gated
    with a passing record under this Triton and these kernel sources."""
    if not needs_check(arch, variant):
        return True
    entry = _records().get(_name(arch, variant))
    return bool(entry and entry.get("ok") and entry.get("key") == _key())


def why_not(arch: str, variant: str) -> Optional[str]:
    """One line saying why the dispatch holds ``variant`` back on ``arch``, or None when allowed."""
    if allowed(arch, variant):
        return None
    entry = _records().get(_name(arch, variant))
    if entry is None or entry.get("key") != _key():
        state = "no sagebuild verify on this machine has checked it yet"
        if entry is not None:
            state = "its last check was under another Triton or other kernel sources"
    else:
        detail = entry.get("detail") or "see its report"
        state = f"sagebuild verify found it outside the accuracy bounds ({detail})"
    return f"{variant} on {archs.normalize(arch)} waits for an accuracy check: {state}"


def record(arch: str, variant: str, ok: bool, detail: str = "", path: Optional[Path] = None) -> Path:
    """Record a verify result of a gated variant (atomically; the other records are kept)."""
    from sagebuild import fsio

    target = path or record_path()
    entries = dict(_read(target))
    entries[_name(arch, variant)] = {
        "ok": bool(ok),
        "key": _key(),
        "detail": detail,
        "at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    fsio.write_text_atomic(target, json.dumps(entries, indent=1, sort_keys=True) + "\n")
    reset()
    return target


def record_path() -> Path:
    from sagebuild.build import paths

    return paths.cache_root() / RECORD_FILE


def reset() -> None:
    """Forget the records read by this process (after a verify, or in tests)."""
    _records.cache_clear()


def _name(arch: str, variant: str) -> str:
    return f"{archs.normalize(arch)}/{variant}"


@functools.lru_cache(maxsize=1)
def _records() -> dict[str, Any]:
    return _read(record_path())


def _read(path: Path) -> dict[str, Any]:
    """The records in ``path``; none when it is missing or unreadable (every gated variant then
    waits for a check: the safe side)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@functools.lru_cache(maxsize=1)
def _key() -> dict[str, str]:
    """What a record is valid for: the Triton version and the Triton kernel sources' hash."""
    from importlib import metadata

    version = "none"
    for dist in ("triton", "pytorch-triton-rocm"):
        try:
            version = metadata.version(dist)
            break
        except metadata.PackageNotFoundError:
            continue
    from sagebuild.build import paths
    from sagebuild.kernels import triton as kernel_sources  # a package of sources: imports nothing

    return {"triton": version, "kernels": paths.tree_hash(Path(kernel_sources.__file__).parent, "*.py")[:16]}
