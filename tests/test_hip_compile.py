"""The device code compiles for AMD (hipified, Debian's hipcc, gfx90a) and for NVIDIA (nvcc, sm_90)
on a machine without a GPU.

The kernels live in a torch-free header (``quant_kernels.cuh`` + ``sb_numeric.h``); the torch
bindings are separate, so an old HIP (Debian's 5.2 / LLVM 15) can compile the device code even
where it cannot parse a current torch's headers. Each test instantiates every kernel launcher.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sagebuild.build import paths

_INSTANTIATE = """
#include "{header}"
namespace sagebuild {{
#define SB_INST(T, S)                                                                                \\
  template void launch_k_mean<T>(const S*, float*, float*, View4, int, {stream});                    \\
  template void launch_quant_int8<T>(const S*, const float*, int8_t*, float*, View4, int, int, float, \\
                                     {stream});                                                       \\
  template void launch_quant_v_fp8<T>(const S*, uint8_t*, float*, float*, View4, int, bool, {stream});
SB_INST(F16, uint16_t)
SB_INST(BF16, uint16_t)
SB_INST(F32, float)
}}  // namespace sagebuild
"""


def _copy_sources(dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in paths.csrc_dir().iterdir():
        if f.suffix in (".h", ".cuh", ".cu", ".cpp"):
            shutil.copy2(f, dst / f.name)
    return dst


def _hipify(tree: Path) -> dict[str, str]:
    from torch.utils.hipify import hipify_python

    res = hipify_python.hipify(
        project_directory=str(tree),
        output_directory=str(tree),
        includes=[str(tree / "*")],
        is_pytorch_extension=True,
        show_progress=False,
    )
    return {Path(k).name: Path(v.hipified_path).name for k, v in res.items() if v.hipified_path}


def test_hipify_turns_the_cuda_sources_into_hip(tmp_path: Path) -> None:
    tree = _copy_sources(tmp_path / "src")
    mapping = _hipify(tree)
    kernels = (tree / mapping["quant_kernels.cuh"]).read_text()
    binding = (tree / mapping["ops_cuda.cu"]).read_text()
    assert "#include <hip/hip_runtime.h>" in kernels and "#include <cuda_runtime.h>" not in kernels
    assert "hipStream_t" in kernels
    assert "HIP" in binding and "cudaStream_t" not in binding
    for text in (kernels, binding):
        assert "asm(" not in text and "asm volatile" not in text  # no inline PTX to carry over


@pytest.mark.skipif(
    shutil.which("hipcc") is None,
    reason="hipcc not found: install Debian's `hipcc libamdhip64-dev` (CI does) to run this",
)
def test_hipified_kernels_compile_for_gfx90a(tmp_path: Path) -> None:
    tree = _copy_sources(tmp_path / "src")
    mapping = _hipify(tree)
    tu = tree / "instantiate.hip"
    tu.write_text(_INSTANTIATE.format(header=mapping["quant_kernels.cuh"], stream="hipStream_t"))
    obj = tree / "instantiate.o"
    proc = subprocess.run(
        ["hipcc", "--offload-arch=gfx90a", "-O3", "-c", str(tu), "-o", str(obj)],
        capture_output=True,
        text=True,
        env={**os.environ, "HIP_PLATFORM": "amd"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    blob = obj.read_bytes()
    assert b"amdgcn-amd-amdhsa--gfx90a" in blob  # a gfx90a code object is bundled in
    for kernel in (
        b"col_partial_kernel",
        b"col_partial_vec_kernel",
        b"col_finalize_kernel",
        b"quant_int8_kernel",
        b"quant_int8_vec_kernel",
        b"quant_v_fp8_kernel",
    ):
        assert kernel in blob


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: the CUDA compile check needs it")
def test_kernels_compile_with_nvcc_for_sm90(tmp_path: Path) -> None:
    tree = _copy_sources(tmp_path / "src")
    tu = tree / "instantiate.cu"
    tu.write_text(_INSTANTIATE.format(header="quant_kernels.cuh", stream="cudaStream_t"))
    obj = tree / "instantiate.o"
    cmd = ["nvcc", "-arch=sm_90", "-O3", "-Werror", "all-warnings", "-c", str(tu), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert obj.stat().st_size > 0 and b"quant_int8_kernel" in obj.read_bytes()
