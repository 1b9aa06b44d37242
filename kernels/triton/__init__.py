"""Triton kernels: quantization and INT8 Q·Kᵀ attention with FP16 or FP8 P·V."""
