"""Test setup: Triton's CPU interpreter when there is no GPU, and the ``gpu`` marker's skip.

TRITON_INTERPRET must be set before triton is first imported, hence at this module's import.
"""

from __future__ import annotations

import os
from typing import Iterator, Optional

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")
# The kernels' tests test the kernels: no call routed to SDPA by the shipped tuning data (Hopper)
# or a tuning record, and no config from a record a `sagebuild tune` left in a shared cache
# (scripts/gpu_check.sh reruns). tests/test_route.py switches routing on where it tests it;
# records injected by ``record.install`` apply either way.
os.environ.setdefault("SAGEBUILD_ROUTE", "0")
os.environ.setdefault("SAGEBUILD_TUNING", "0")


def _isolate_the_cache() -> None:
    """Point ``SAGEBUILD_CACHE_DIR`` at a fresh temporary folder, whatever it was: tests never read or
    write the developer's cache, the default ~/.cache/sagebuild or one ``SAGEBUILD_CACHE_DIR`` names (a
    build there from other sources, loaded by an in-process test, would stand in for the one a later
    test builds). ``SAGEBUILD_TEST_SHARED_CACHE=1`` keeps a set ``SAGEBUILD_CACHE_DIR`` instead:
    scripts/gpu_check.sh asks for that, so its GPU tests exercise the build its compile stage made."""
    import tempfile

    from sagebuild import knobs

    shared = knobs.switch("SAGEBUILD_TEST_SHARED_CACHE") and knobs.raw("SAGEBUILD_CACHE_DIR")
    if not shared:
        os.environ["SAGEBUILD_CACHE_DIR"] = tempfile.mkdtemp(prefix="sagebuild-test-cache-")


_isolate_the_cache()


def _exact_fp8_casts_in_interpreter() -> None:
    """Make the interpreter's float→fp8 cast round like the GPUs do (nearest even, saturating).

    Triton 3.6's interpreter drops the carry when rounding up crosses a power of two (124.4 →
    64 instead of 128), which would make every FP8 test measure the interpreter, not our kernels.
    """
    import numpy as np
    from triton.runtime import interpreter as it

    original = it.InterpreterBuilder.create_fp_to_fp
    targets = {"fp8e4nv": torch.float8_e4m3fn}

    def create_fp_to_fp(self, src, dst_type, rounding_mode):
        dst = dst_type.scalar
        if dst.name in targets and src.data.dtype in (np.float32, np.float16):
            fp8 = targets[dst.name]
            fmax = float(torch.finfo(fp8).max)
            data = torch.from_numpy(np.ascontiguousarray(src.data, dtype=np.float32)).clamp(-fmax, fmax)
            return it.TensorHandle(data.to(fp8).view(torch.uint8).numpy(), dst)
        return original(self, src, dst_type, rounding_mode)

    it.InterpreterBuilder.create_fp_to_fp = create_fp_to_fp


def _scalar_index_in_interpreter() -> None:
    """Let runtime scalars bound ``range`` loops in the interpreter under numpy >= 2.4.

    The interpreter turns a scalar into a Python int with ``int(array)``, which numpy 2.4 refuses
    for the 1-element arrays it stores scalars in; ``.item()`` is what it means.
    """
    from triton.runtime import interpreter as it

    original = it._patch_lang_tensor

    def patch(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    it._patch_lang_tensor = patch


def _bf16_dots_in_interpreter() -> None:
    """Multiply bf16 tiles as numbers: Triton 3.6's interpreter multiplies their raw uint16 bits."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as it

    original = it.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if tl.bfloat16 in (a.dtype.scalar, b.dtype.scalar):
            a, b = (
                it.TensorHandle(
                    it._convert_float(x.data, tl.bfloat16, tl.float32, None).view(np.float32), tl.float32
                )
                if x.dtype.scalar == tl.bfloat16
                else x
                for x in (a, b)
            )
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    it.InterpreterBuilder.create_dot = create_dot


if os.environ.get("TRITON_INTERPRET") == "1":
    _exact_fp8_casts_in_interpreter()
    _bf16_dots_in_interpreter()
    _scalar_index_in_interpreter()


@pytest.fixture(autouse=True)
def _fresh_attention_caches() -> None:
    """Each test starts without cached plans, replays and constexprs, with the knobs read from
    its environment: tests patch module-level tables and knobs that those caches would otherwise
    outlive (``api.clear_caches`` also calls ``knobs.refresh``)."""
    from sagebuild.attention import api

    api.clear_caches()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Optional[pytest.Item]) -> Iterator[None]:
    """Re-read the knobs once every fixture is torn down: monkeypatch restores a test's
    ``SAGEBUILD_*`` variables in its own teardown, after which the registry's cached values
    (``sagebuild.knobs``) would still hold the test's."""
    yield
    from sagebuild import knobs

    knobs.refresh()


def _installed_triton() -> str:
    import triton

    return ".".join(triton.__version__.split(".")[:2])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    triton_now = _installed_triton()
    for item in items:
        for mark in item.iter_markers("triton_version"):
            if triton_now not in mark.args:
                item.add_marker(pytest.mark.skip(
                    reason=f"pins what Triton {' / '.join(mark.args)} emits; Triton {triton_now} is installed"
                ))  # fmt: skip
    if HAS_GPU:
        # The extension's own tests build it and load that build; one process can load only one
        # build, so they run before any test that loads the extension from the cache
        # (scripts/gpu_check.sh's parallel run gives them a process of their own first).
        items.sort(key=lambda item: item.path.name != "test_gpu_ext.py")
        return
    skip = pytest.mark.skip(reason="needs a CUDA/ROCm GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
