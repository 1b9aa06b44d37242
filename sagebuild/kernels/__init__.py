"""The bundled kernel sources, installed under ``sagebuild.kernels``: Triton in ``triton/``, the
C++/CUDA extension in ``csrc/``, both mapped from the repository's top-level ``kernels/`` by
``pyproject.toml`` (which says why that folder has no ``__init__.py``).
"""
