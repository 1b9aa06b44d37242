"""C++/CUDA sources of the fused pre-processing extension (hipify-clean), with a CPU variant."""
