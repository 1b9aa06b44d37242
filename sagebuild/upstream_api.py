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

_QUANT = ("per_block_int8", "per_warp_int8", "sub_mean", "per_channel_fp8")
_SM80 = (
    "qk_int8_sv_f16_accum_f32_attn",
    "qk_int8_sv_f16_accum_f16_attn",
    "qk_int8_sv_f16_accum_f16_attn_inst_buf",
    "qk_int8_sv_f16_accum_f16_fuse_v_mean_attn",
)
_SM89 = (
    "qk_int8_sv_f8_accum_f32_attn",
    "qk_int8_sv_f8_accum_f32_attn_inst_buf",
    "qk_int8_sv_f8_accum_f16_attn_inst_buf",
    "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn",
    "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf",
    "qk_int8_sv_f8_accum_f16_fuse_v_scale_attn_inst_buf",
    "qk_int8_sv_f8_accum_f32_fuse_v_scale_fuse_v_mean_attn",
)
_SM90 = (
    "qk_int8_sv_f8_accum_f32_attn_inst_buf",
    "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn",
    "qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf",
)
_ARCH_KERNELS = {"sm80": _SM80, "sm89": _SM89, "sm90": _SM90}
_QUANT_MOD = "sagebuild.upstream_internals.quant"
_RAW_MOD = "sagebuild.upstream_internals.raw"
_PER_THREAD_KERNELS = ("quant_query_per_thread_int8_kernel", "quant_key_per_thread_int8_kernel")

# Upstream's internal modules that callers import (KJNodes' memory-efficient patches, LightX2V):
# each name's source as (our module, attribute path in it). ``sagebuild compat install`` writes them;
# ``sagebuild.upstream_internals`` implements them.
INTERNAL_MODULES: dict[str, dict[str, tuple[str, str]]] = {
    "sageattention.quant": {n: (_QUANT_MOD, n) for n in _QUANT},
    "sageattention.triton.quant_per_thread": {
        "per_thread_int8": (_QUANT_MOD, "per_thread_int8"),
        **{n: ("sagebuild.kernels.triton.quant_per_thread", n) for n in _PER_THREAD_KERNELS},
    },
    "sageattention.triton.quant_per_block": {"per_block_int8": (_QUANT_MOD, "per_block_int8")},
    **{
        f"sageattention._qattn_{a}": {n: (_RAW_MOD, f"{a}.{n}") for n in ns}
        for a, ns in _ARCH_KERNELS.items()
    },
    **{
        f"sageattention.{a}_compile": {n: (_RAW_MOD, f"{a}.{n}") for n in ns}
        for a, ns in _ARCH_KERNELS.items()
    },
}
# what ``sageattention.core`` adds to the six public names: upstream's aliases of the quantizers,
# the device queries and the Triton forwards (its raw-kernel modules are imported there too)
CORE_NAMES: dict[str, tuple[str, str]] = {
    "per_block_int8_triton": (_QUANT_MOD, "per_block_int8"),
    "per_block_int8_cuda": (_QUANT_MOD, "per_block_int8"),
    "per_warp_int8_cuda": (_QUANT_MOD, "per_warp_int8"),
    "per_thread_int8_triton": (_QUANT_MOD, "per_thread_int8"),
    "per_channel_fp8": (_QUANT_MOD, "per_channel_fp8"),
    "sub_mean": (_QUANT_MOD, "sub_mean"),
    "get_cuda_arch_versions": ("sagebuild.upstream_internals.device", "get_cuda_arch_versions"),
    "get_cuda_version": ("sagebuild.upstream_internals.device", "get_cuda_version"),
    "attn_false": (_RAW_MOD, "attn_false"),
    "attn_true": (_RAW_MOD, "attn_true"),
}
