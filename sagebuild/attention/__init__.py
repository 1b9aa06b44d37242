"""Quantized attention (INT8 Q·Kᵀ, FP16/FP8 P·V) with upstream SageAttention 2.2.0's API (``functions``)."""

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
from sagebuild.attention.validate import AttentionInputError

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
