"""Upstream SageAttention's internal names that callers import, on sagebuild's kernels.

KJNodes' memory-efficient patches and LightX2V import upstream's quantizers, device queries, raw
attention kernels and Triton kernels from ``sageattention.core``, ``sageattention.quant``,
``sageattention.sm*_compile``, ``sageattention._qattn_sm*`` and
``sageattention.triton.quant_per_thread``. ``sagebuild compat install`` writes those modules
(``sagebuild.upstream_api.INTERNAL_MODULES`` lists them) re-exporting these: ``quant`` (the
quantizers, upstream's signatures and layouts), ``raw`` (the raw kernels and ``attn_false``), and
``device`` (the arch and version queries, AMD included).
"""
