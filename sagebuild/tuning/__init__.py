"""Tuning on the user's machine: which path (one of our launch configs and P·V variants, or
PyTorch SDPA) won each shape class on this GPU, kept in a record keyed by the device and the
versions that make it valid (``record``), and the measured data shipped for GPUs we measured
(``defaults``). Torch-free at import: the launch plan reads it."""
