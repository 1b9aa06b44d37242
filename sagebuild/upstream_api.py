"""Upstream SageAttention's public names, torch-free: the public functions define them and the
compat installer writes them into the ``sageattention`` package it installs."""

from __future__ import annotations

# upstream's six public names, in the order diffusers imports them
UPSTREAM_NAMES = (
    "sageattn",
    "sageattn_qk_int8_pv_fp8_cuda",
    "sageattn_qk_int8_pv_fp8_cuda_sm90",
    "sageattn_qk_int8_pv_fp16_cuda",
    "sageattn_qk_int8_pv_fp16_triton",
    "sageattn_varlen",
)
