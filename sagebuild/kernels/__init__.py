"""The bundled kernel sources, installed under ``sagebuild.kernels``.

They live at the repository's top-level ``kernels/`` (Triton in ``triton/``, the C++/CUDA
extension in ``csrc/``), mapped here by ``pyproject.toml``. That folder deliberately has no
``__init__.py``: as a regular package named ``kernels`` it would shadow Hugging Face's
``kernels`` (a dependency of transformers) whenever the checkout is on ``sys.path``.
"""
