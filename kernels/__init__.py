"""Bundled kernel sources: Triton kernels (``triton/``) and the C++/CUDA extension (``csrc/``)."""
