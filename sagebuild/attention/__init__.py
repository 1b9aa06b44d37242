"""Quantized attention (INT8 Q·Kᵀ, FP16/FP8 P·V) with upstream SageAttention 2.2.0's API (``functions``).

The entry points are imported on first use (PEP 562): the package's torch-free modules (``plan``,
``features``, ``reasons``) stay importable without torch, for the planner, the doctor and the report.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "AttentionInputError",
    "GraphedAttention",
    "sageattn",
    "sageattn_qk_int8_pv_fp16_cuda",
    "sageattn_qk_int8_pv_fp16_triton",
    "sageattn_qk_int8_pv_fp8_cuda",
    "sageattn_qk_int8_pv_fp8_cuda_sm90",
    "sageattn_qk_int8_pv_fp8_triton",
    "sageattn_varlen",
]
_HOMES = {"GraphedAttention": "graphed", "AttentionInputError": "plan"}  # the rest: ``functions``

if TYPE_CHECKING:
    from sagebuild.attention.functions import (
        sageattn,
        sageattn_qk_int8_pv_fp8_cuda,
        sageattn_qk_int8_pv_fp8_cuda_sm90,
        sageattn_qk_int8_pv_fp8_triton,
        sageattn_qk_int8_pv_fp16_cuda,
        sageattn_qk_int8_pv_fp16_triton,
        sageattn_varlen,
    )
    from sagebuild.attention.graphed import GraphedAttention
    from sagebuild.attention.plan import AttentionInputError


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES.get(name, 'functions')}"), name)
    globals()[name] = value  # once: later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
