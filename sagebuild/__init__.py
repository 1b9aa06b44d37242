"""sagebuild: quantized (INT8 Q·Kᵀ, FP16/FP8 P·V) attention that builds, verifies and benchmarks itself.

The attention API is imported lazily so that ``import sagebuild`` (and ``sagebuild --help``)
never pays for importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from sagebuild._version import __version__

_LAZY = {
    "sageattn": "sagebuild.attention",  # sagebuild.attention.functions, upstream's API
    "sageattn_varlen": "sagebuild.attention",
    "sageattn_qk_int8_pv_fp16_triton": "sagebuild.attention",
    "sageattn_qk_int8_pv_fp8_triton": "sagebuild.attention",
    "sageattn_qk_int8_pv_fp16_cuda": "sagebuild.attention",
    "sageattn_qk_int8_pv_fp8_cuda": "sagebuild.attention",
    "sageattn_qk_int8_pv_fp8_cuda_sm90": "sagebuild.attention",
    "GraphedAttention": "sagebuild.attention",
    "patch_sdpa": "sagebuild.patch",
    "patch_stats": "sagebuild.patch",
    "enable": "sagebuild.patch",
    "disable": "sagebuild.patch",
    "is_active": "sagebuild.patch",
    "reset_stats": "sagebuild.patch",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sagebuild' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
