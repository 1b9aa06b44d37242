"""Quantized attention (INT8 Q·Kᵀ, FP16/FP8 P·V) with upstream SageAttention's API names."""

from sagebuild.attention.api import (
    sageattn,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_qk_int8_pv_fp16_triton,
    sageattn_varlen,
)
from sagebuild.attention.graphed import GraphedAttention
from sagebuild.attention.validate import AttentionInputError

__all__ = [
    "AttentionInputError",
    "GraphedAttention",
    "sageattn",
    "sageattn_qk_int8_pv_fp16_triton",
    "sageattn_qk_int8_pv_fp8_triton",
    "sageattn_varlen",
]
