"""`sagebuild explain`: every known failure is recognised in a realistic log; a clean log is not."""
# ruff: noqa: E501  (the log samples keep the real, long lines)

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sagebuild.cli.app import app
from sagebuild.errors import SagebuildError
from sagebuild.explain import explain, load_database, parse_database, read_log_file, troubleshooting_markdown

ROOT = Path(__file__).resolve().parent.parent

NOISE_TOP = """\
+ source venv/bin/activate
Python 3.11.9 (main, Apr  6 2024, 17:59:24) [GCC 11.4.0] on linux
torch.__version__  = 2.6.0+rocm6.4.2
Requirement already satisfied: packaging in ./venv/lib/python3.11/site-packages (24.1)
"""
NOISE_BOTTOM = """\
  warnings.warn(
[notice] A new release of pip is available: 24.0 -> 24.2
"""

# id -> (log excerpt, text the reported line must contain)
SAMPLES: dict[str, tuple[str, str]] = {
    "module-not-found-after-build": (
        """$ python test_sage.py
Traceback (most recent call last):
  File "/home/u/proj/test_sage.py", line 2, in <module>
    from sageattention import sageattn
ModuleNotFoundError: No module named 'sageattention'
""",
        "No module named 'sageattention'",
    ),
    "extension-not-built": (
        """  File "/home/u/SageAttention/sageattention/core.py", line 22, in <module>
    from . import _qattn_sm80
ImportError: cannot import name '_qattn_sm80' from 'sageattention' (/home/u/SageAttention/sageattention/__init__.py)
""",
        "cannot import name '_qattn_sm80'",
    ),
    "fused-circular-import": (
        """  File "/home/u/SageAttention/sageattention/quant.py", line 20, in <module>
    from . import _fused
ImportError: cannot import name '_fused' from partially initialized module 'sageattention' (most likely \
due to a circular import) (/home/u/SageAttention/sageattention/__init__.py)
""",
        "partially initialized module",
    ),
    "extension-abi-mismatch": (
        """    from . import _fused
ImportError: /home/u/venv/lib/python3.11/site-packages/sageattention/_fused.cpython-311-x86_64-linux-gnu.so: \
undefined symbol: _ZN3c106detail23torchInternalAssertFailEPKcS2_jS2_RKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE
""",
        "undefined symbol: _ZN3c10",
    ),
    "windows-dll-load-failed": (
        """  File "C:\\ComfyUI\\python_embeded\\Lib\\site-packages\\sageattention\\quant.py", line 20, in <module>
    from . import _fused
ImportError: DLL load failed while importing _fused: The specified module could not be found.
""",
        "DLL load failed while importing _fused",
    ),
    "hip-invalid-device-function": (
        """>>> o = sageattn(q, q, q)
Traceback (most recent call last):
  File "<stdin>", line 1, in <module>
RuntimeError: HIP error: invalid device function
HIP kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing AMD_SERIALIZE_KERNEL=3
""",
        "HIP error: invalid device function",
    ),
    "nan-with-fp32-inputs": (
        """q = torch.randn(1, 8, 512, 64, dtype=torch.float32, device="cuda")
o = sageattn(q, q, q)
print(o)
tensor([[[[nan, nan, nan,  ..., nan, nan, nan],
          [nan, nan, nan,  ..., nan, nan, nan]]]], device='cuda:0')
""",
        "tensor([[[[nan",
    ),
    "ninja-missing": (
        """  File "/home/u/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py", line 2161, in verify_ninja_availability
    raise RuntimeError("Ninja is required to load C++ extensions")
RuntimeError: Ninja is required to load C++ extensions
""",
        "Ninja is required",
    ),
    "cuda-version-mismatch": (
        """  File "/home/u/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py", line 414, in _check_cuda_version
    raise RuntimeError(CUDA_MISMATCH_MESSAGE.format(cuda_str_version, torch.version.cuda))
RuntimeError:
The detected CUDA version (11.8) mismatches the version that was used to compile
PyTorch (12.4). Please make sure to use the same CUDA versions.
""",
        "The detected CUDA version (11.8) mismatches",
    ),
    "cuda-home-missing": (
        """  File "/home/u/venv/lib/python3.11/site-packages/torch/utils/cpp_extension.py", line 2416, in _join_cuda_home
    raise OSError('CUDA_HOME environment variable is not set. '
OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.
""",
        "CUDA_HOME environment variable is not set",
    ),
    "compiler-killed-oom": (
        """[12/40] /usr/local/cuda/bin/nvcc -c csrc/qattn/qk_int_sv_f8_cuda_sm90.cu -o build/qk_sm90.o
FAILED: build/temp.linux-x86_64-cpython-311/csrc/fused/fused.o
c++: fatal error: Killed signal terminated program cc1plus
compilation terminated.
ninja: build stopped: subcommand failed.
""",
        "Killed signal terminated program cc1plus",
    ),
    "no-kernel-image": (
        """  File "/home/u/ComfyUI/comfy/ldm/modules/attention.py", line 512, in attention_sage
    out = sageattn(q, k, v, is_causal=False, tensor_layout=tensor_layout)
torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
""",
        "no kernel image is available",
    ),
    "kernel-not-compiled-for-arch": (
        """  File "/home/u/venv/lib/python3.12/site-packages/sageattention/core.py", line 701, in sageattn_qk_int8_pv_fp8_cuda
    assert SM89_ENABLED, "SM89 kernel is not available. Make sure you GPUs with compute capability 8.9."
AssertionError: SM89 kernel is not available. Make sure you GPUs with compute capability 8.9.
""",
        "SM89 kernel is not available",
    ),
    "unsupported-cuda-arch": (
        """  File "/home/u/FramePack/venv/lib/site-packages/sageattention/core.py", line 138, in sageattn
    raise ValueError(f"Unsupported CUDA architecture: {arch}")
ValueError: Unsupported CUDA architecture: sm60
""",
        "Unsupported CUDA architecture: sm60",
    ),
    "nvcc-unsupported-gpu-arch": (
        """[1/6] /usr/local/cuda-12.4/bin/nvcc --generate-dependencies-with-compile -gencode arch=compute_120,code=sm_120 -c x.cu
FAILED: /home/u/SageAttention/build/temp.linux-x86_64-cpython-312/csrc/fused/fused.o
nvcc fatal   : Unsupported gpu architecture 'compute_120'
""",
        "Unsupported gpu architecture 'compute_120'",
    ),
    "wgmma-on-sm120": (
        """export TORCH_CUDA_ARCH_LIST="9.0;12.0"
ptxas /tmp/tmpxft_0001/qk_int_sv_f8_cuda_sm90.ptx, line 812; error   : Instruction 'wgmma.fence' not supported on .target 'sm_120'
ptxas /tmp/tmpxft_0001/qk_int_sv_f8_cuda_sm90.ptx, line 840; error   : Instruction 'wgmma.mma_async with integer types' not supported on .target 'sm_120'
ptxas fatal   : Ptx assembly aborted due to errors
""",
        "wgmma.fence",
    ),
    "triton-torch-mismatch": (
        """  File "/home/u/venv/lib/python3.11/site-packages/torch/_inductor/runtime/triton_compat.py", line 30, in <module>
    from triton.compiler.compiler import AttrsDescriptor
ImportError: cannot import name 'AttrsDescriptor' from 'triton.compiler.compiler' (/home/u/venv/lib/python3.11/site-packages/triton/compiler/compiler.py)
""",
        "AttrsDescriptor",
    ),
    "libamdhip64-not-found": (
        """>>> import sagebuild_ext
Traceback (most recent call last):
  File "<stdin>", line 1, in <module>
ImportError: libamdhip64.so.6: cannot open shared object file: No such file or directory
""",
        "libamdhip64.so.6: cannot open shared object file",
    ),
    "hsa-override-wrong": (
        """$ echo $HSA_OVERRIDE_GFX_VERSION
11.0.0
$ python -c "import torch; torch.ones(1, device='cuda') * 2"
:0:rocdevice.cpp            :2982: 1234567 us: [pid:4242 tid:0x7f] Callback: Queue 0x7f aborting with error : \
HSA_STATUS_ERROR_INVALID_ISA: The instruction set architecture is invalid. code: 0x100f
Aborted (core dumped)
""",
        "HSA_STATUS_ERROR_INVALID_ISA",
    ),
    "wsl-gpu-not-visible": (
        """$ uname -r
6.6.87.2-microsoft-standard-WSL2
$ python3 -c "import torch; print(torch.cuda.is_available())"
False
$ python3 -c "import torch; torch.zeros(1).cuda()"
RuntimeError: No HIP GPUs are available
""",
        "torch.cuda.is_available()",  # the command whose output (next line) is False
    ),
    "no-gpu-visible": (
        """$ python -c "import torch; torch.zeros(1).cuda()"
  File "/home/u/venv/lib/python3.11/site-packages/torch/cuda/__init__.py", line 310, in _lazy_init
    raise AssertionError("Torch not compiled with CUDA enabled")
AssertionError: Torch not compiled with CUDA enabled
""",
        "Torch not compiled with CUDA enabled",
    ),
    "windows-python-in-wsl": (
        """$ which python
/mnt/c/Users/me/AppData/Local/Programs/Python/Python311/python.exe
$ python -c "import torch; print(torch.__version__)"
2.6.0+cpu
""",
        "/mnt/c/Users/me",
    ),
    "unknown-offload-arch": (
        """/opt/rocm-5.7.0/llvm/bin/clang -x hip --offload-arch=gfx1201 -c fused.hip -o fused.o
error: unknown target CPU 'gfx1201'
note: valid target CPU values are: gfx900, gfx906, gfx908, gfx90a, gfx1030, gfx1100
""",
        "unknown target CPU 'gfx1201'",
    ),
    "gpu-out-of-memory": (
        """  File "/home/u/bench.py", line 40, in run
    o = sageattn(q, k, v)
torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 15.92 GiB
""",
        "out of memory",
    ),
    "pip-build-isolation-hides-torch": (
        """  Getting requirements to build wheel ... error
  error: subprocess-exited-with-error
        File "/tmp/pip-build-env-k2v9/overlay/lib/python3.12/site-packages/setuptools/build_meta.py", line 318, in run_setup
          exec(code, locals())
      ModuleNotFoundError: No module named 'torch'
""",
        "No module named 'torch'",
    ),
    "triton-launcher-python-headers": (
        """/tmp/tmpk3j1/hip_utils.c:1:10: fatal error: Python.h: No such file or directory
    1 | #include <Python.h>
compilation terminated.
""",
        "Python.h: No such file",
    ),
    "cxx-standard-drift": (
        """  File "C:\\venv\\Lib\\site-packages\\setuptools\\msvc.py", line 1484, in _get_vc_env
    raise distutils.errors.DistutilsPlatformError(
distutils.errors.DistutilsPlatformError: Microsoft Visual C++ 14.0 or greater is required.
""",
        "_get_vc_env",
    ),
    "amd-triton-pipeliner-crash": (
        """attn_fwd.py:88:20: error: 'tt.load' op operation destroyed but still has uses
LLVM ERROR: operation destroyed but still has uses
""",
        "operation destroyed but still has uses",
    ),
    "rocm-torch-replaced": (
        """    Found existing installation: torch 2.9.1+rocm6.4
    Uninstalling torch-2.9.1+rocm6.4:
      Successfully uninstalled torch-2.9.1+rocm6.4
Successfully installed torch-2.9.1
""",
        "Successfully uninstalled torch-2.9.1+rocm6.4",
    ),
    "rocm-sm-shaped-arch": (
        """    raise ValueError(f"Unsupported CUDA architecture: {arch}")
ValueError: Unsupported CUDA architecture: sm94
""",
        "sm94",
    ),
}

CLEAN_LOG = """\
running build_ext
building 'sagebuild._C' extension
[1/3] c++ -MMD -MF build/quant.o.d -O3 -std=c++17 -fPIC -c kernels/csrc/quant.cpp -o build/quant.o
[2/3] /opt/rocm/bin/hipcc -O3 --offload-arch=gfx1201 -c kernels/csrc/quant_hip.hip -o build/quant_hip.o
[3/3] c++ -shared build/quant.o build/quant_hip.o -o build/lib/sagebuild/_C.cpython-311-x86_64-linux-gnu.so
copying build/lib/sagebuild/_C.cpython-311-x86_64-linux-gnu.so -> sagebuild
MAX_JOBS=6 (free memory 27.1 GiB, 16 cores)
verify: shape (1, 8, 512, 64) dtype float16 device cuda:0 finite=True nan_count=0 inf_count=0
verify: inputs float32 reference; cos 0.99991 rel_l1 0.0131
torch.cuda.is_available(): True
bench: sdpa 0.152 ms, sage 0.139 ms, speed-up 1.09x
Successfully installed sagebuild-0.1.0
"""


def explain_file(path: Path) -> list:
    """What ``sagebuild explain FILE`` matches: the file's bounded tail, explained."""
    return explain(read_log_file(path).text)


def test_every_database_entry_has_a_sample():
    assert set(SAMPLES) == {f.id for f in load_database()}


@pytest.mark.parametrize("failure_id", sorted(SAMPLES))
def test_signature_found_in_noisy_log(failure_id):
    excerpt, needle = SAMPLES[failure_id]
    log = NOISE_TOP + excerpt + NOISE_BOTTOM
    matches = {m.id: m for m in explain(log)}
    assert failure_id in matches, f"{failure_id} not recognised; got {sorted(matches)}"
    m = matches[failure_id]
    assert needle in m.matched_line
    assert log.splitlines()[m.line_number - 1].strip() == m.matched_line
    assert m.cause and m.fix and m.title


def test_clean_log_matches_nothing():
    assert explain(NOISE_TOP + CLEAN_LOG + NOISE_BOTTOM) == []


def test_matches_come_in_log_order():
    log = SAMPLES["compiler-killed-oom"][0] + "\n" + SAMPLES["hip-invalid-device-function"][0]
    assert [m.id for m in explain(log)] == ["compiler-killed-oom", "hip-invalid-device-function"]


def test_requires_and_excludes_disambiguate():
    nan_fp16 = "q dtype torch.float16\ntensor([[[[nan, nan]]]])\n"
    assert "nan-with-fp32-inputs" not in {m.id for m in explain(nan_fp16)}
    wsl = {m.id for m in explain(SAMPLES["wsl-gpu-not-visible"][0])}
    assert "wsl-gpu-not-visible" in wsl and "no-gpu-visible" not in wsl
    native = {m.id for m in explain("RuntimeError: No HIP GPUs are available\n")}
    assert native == {"no-gpu-visible"}


def test_to_dict_is_json_ready():
    m = explain(SAMPLES["ninja-missing"][0])[0]
    d = json.loads(json.dumps(m.to_dict()))
    assert d["id"] == "ninja-missing" and set(d) >= {"id", "title", "cause", "fix", "matched_line"}


def test_database_validation_names_the_problem():
    good = {"id": "x-y", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "source": "s"}
    assert parse_database({"failures": [good]})[0].id == "x-y"
    with pytest.raises(SagebuildError, match="bad regex"):
        parse_database({"failures": [{**good, "patterns": ["(unclosed"]}]})
    with pytest.raises(SagebuildError, match="lacks fix"):
        parse_database({"failures": [{k: v for k, v in good.items() if k != "fix"}]})
    with pytest.raises(SagebuildError, match="not unique"):
        parse_database({"failures": [good, good]})
    with pytest.raises(SagebuildError, match="unknown keys"):
        parse_database({"failures": [{**good, "pattern": ["a"]}]})


def test_bundled_yaml_parses_and_has_sources():
    raw = yaml.safe_load((ROOT / "sagebuild" / "data" / "failures.yaml").read_text())
    assert raw["schema_version"] == 1
    assert all(e["source"].strip() for e in raw["failures"])


def test_explain_file_errors(tmp_path):
    with pytest.raises(SagebuildError, match="not found"):
        explain_file(tmp_path / "missing.log")
    (tmp_path / "bin.log").write_bytes(
        b"\xff\xfe garbage\nRuntimeError: Ninja is required to load C++ extensions\n"
    )
    assert [m.id for m in explain_file(tmp_path / "bin.log")] == ["ninja-missing"]


def test_troubleshooting_doc_is_up_to_date():
    doc = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    assert doc == troubleshooting_markdown(), "run: python scripts/gen_troubleshooting.py"
    for f in load_database():
        assert f'<a id="{f.id}"></a>' in doc


def test_generator_check_mode(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_troubleshooting.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------------------------------------
# CLI

runner = CliRunner()


def test_cli_file_human(tmp_path):
    log = tmp_path / "build.log"
    log.write_text(NOISE_TOP + SAMPLES["compiler-killed-oom"][0])
    result = runner.invoke(app, ["explain", str(log)])
    assert result.exit_code == 0
    assert "compiler-killed-oom" in result.output and "MAX_JOBS" in result.output


def test_cli_stdin_json():
    result = runner.invoke(app, ["explain", "-", "--json"], input=SAMPLES["wgmma-on-sm120"][0])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert doc["log"] == "<stdin>" and doc["matched"] is True
    assert [m["id"] for m in doc["matches"]] == ["wgmma-on-sm120"]
    assert "TORCH_CUDA_ARCH_LIST=12.0" in doc["matches"][0]["fix"]


def test_cli_nothing_matched_exits_zero():
    result = runner.invoke(app, ["explain", "-"], input=CLEAN_LOG)
    assert result.exit_code == 0 and "no known failure matched" in result.output
    result = runner.invoke(app, ["explain", "-", "--json"], input=CLEAN_LOG)
    assert json.loads(result.stdout)["matches"] == []


def test_cli_missing_file_exits_2(tmp_path):
    result = runner.invoke(app, ["explain", str(tmp_path / "nope.log")])
    assert result.exit_code == 2
    assert "log file not found" in result.output and "Traceback" not in result.output


# ---- real logs from public issue threads (tests/fixtures/logs; each file names its thread) ----

FIXTURES = ROOT / "tests" / "fixtures" / "logs"
REAL_LOGS = {
    "nvcc-cicc-killed-pointcept-12.log": "compiler-killed-oom",
    "nvcc-cudafe-killed-curobo-109.log": "compiler-killed-oom",
    "nvcc-quoted-cicc-path-magi-21.log": "compiler-killed-oom",
    "nvcc-cannot-allocate-pytorch-28886.log": "compiler-killed-oom",
    "gcc-cc1plus-killed-pytorch-49078.log": "compiler-killed-oom",
    "gcc-ice-killed-pytorch-17666.log": "compiler-killed-oom",
    "gcc-cc1-killed-charmcraft-625.log": "compiler-killed-oom",
    "clang-killed-travis-5624.log": "compiler-killed-oom",
    "rocm-clang-llvm-oom-pytorch-8899.log": "compiler-killed-oom",
    "ninja-signal9-cmlfs-107.log": "compiler-killed-oom",
    "comfyui-torch-oom-comfyui-11726.log": "gpu-out-of-memory",
    "comfyui-cuda-oom-comfyui-2021.log": "gpu-out-of-memory",
    "sageattention-comfyui-oom-sageattention-250.log": "gpu-out-of-memory",
    "pip-build-isolation-wan2gp-1446.log": "pip-build-isolation-hides-torch",
    "uv-build-isolation-stabilitymatrix-1396.log": "pip-build-isolation-hides-torch",
    "triton-tcc-python-h-triton-windows-156.log": "triton-launcher-python-headers",
    "triton-gcc-python-h-tabbyapi-453.log": "triton-launcher-python-headers",
    "msvc-c2872-std-sageattention-281.log": "cxx-standard-drift",
    "cxx20-required-flash-attention-2879.log": "cxx-standard-drift",
    "amd-pipeliner-crash-triton-windows-24.log": "amd-triton-pipeliner-crash",
    "rocm-torch-replaced-comfyui-5122.log": "rocm-torch-replaced",
    "rocm-sm115-gfx1151-comfyui-7494.log": "rocm-sm-shaped-arch",
    # compiler crashes that are not memory: must not be called an OOM
    "nvcc-cicc-segfault-warpx-4613.log": None,
    "rocm-clang-aborted-rocm-arch-590.log": None,
}


def test_every_fixture_is_listed_and_cites_its_thread():
    assert {p.name for p in FIXTURES.glob("*.log")} == set(REAL_LOGS)
    for name in REAL_LOGS:
        first = (FIXTURES / name).read_text().splitlines()[0]
        assert first.startswith("# ") and "https://github.com/" in first, name


@pytest.mark.parametrize("name", sorted(REAL_LOGS))
def test_real_log_is_recognised(name):
    ids = [m.id for m in explain_file(FIXTURES / name)]
    expected = REAL_LOGS[name]
    if expected is None:
        assert "compiler-killed-oom" not in ids and "gpu-out-of-memory" not in ids, ids
    else:
        assert expected in ids, (name, ids)


# ---- bounded reading ----------------------------------------------------------------------------


def test_explain_streams_a_large_log_and_reports_the_tail(tmp_path):
    from sagebuild.explain import TAIL_BYTES, read_log_file

    log = tmp_path / "big.log"
    with log.open("w") as fh:
        line = "x" * 99 + "\n"
        for _ in range(3 * TAIL_BYTES // len(line)):
            fh.write(line)
        fh.write("g++: fatal error: Killed signal terminated program cc1plus\n")
    read = read_log_file(log)
    assert read.truncated and "last" in read.note and len(read.text) <= TAIL_BYTES + 200
    assert [m.id for m in explain(read.text)] == ["compiler-killed-oom"]


def test_explain_cuts_endless_lines_and_streams():
    import io

    from sagebuild.explain import read_log

    blob = b"a" * 5_000_000 + b"\nclang++: error: unable to execute command: Killed\n"
    read = read_log(io.BytesIO(blob), None, max_line=4096)
    assert max(len(x) for x in read.text.splitlines()) <= 4096
    assert "cut" in read.note
    assert [m.id for m in explain(read.text)] == ["compiler-killed-oom"]
    # an endless stream stops at the read cap
    capped = read_log(io.BytesIO(b"\0" * 3_000_000), None, max_read=1_000_000)
    assert capped.bytes_read == 1_000_000 and "stopped reading" in capped.note


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_cli_explain_dev_zero_is_bounded():
    import resource

    def limit():  # 1.5 GiB of address space: reading /dev/zero whole would fail, not swap
        resource.setrlimit(resource.RLIMIT_AS, (1536 * 2**20, 1536 * 2**20))

    r = subprocess.run(
        [sys.executable, "-m", "sagebuild", "explain", "/dev/zero", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["matched"] is False and doc["read"]["truncated"] is True
    assert "Traceback" not in r.stderr


# ---- issue 61's failures hand each log to one entry ---------------------------------------------


@pytest.mark.parametrize(
    ("name", "not_also"),
    [
        ("rocm-sm115-gfx1151-comfyui-7494.log", "unsupported-cuda-arch"),
        ("rocm-torch-replaced-comfyui-5122.log", "no-gpu-visible"),
        ("pip-build-isolation-wan2gp-1446.log", "module-not-found-after-build"),
    ],
)
def test_the_specific_entry_takes_the_log(name, not_also):
    ids = [m.id for m in explain_file(FIXTURES / name)]
    assert REAL_LOGS[name] in ids and not_also not in ids, ids


def test_sm_numbers_rocm_cannot_report_stay_nvidia():
    """sm75 is never an AMD GPU, even in a log that mentions a ROCm torch; sm120 is RDNA4 only
    when the log says ROCm."""
    rocm = "torch 2.9.1+rocm6.4\n"
    assert [m.id for m in explain(rocm + "ValueError: Unsupported CUDA architecture: sm75\n")] == [
        "unsupported-cuda-arch"
    ]
    assert [m.id for m in explain("ValueError: Unsupported CUDA architecture: sm120\n")] == [
        "unsupported-cuda-arch"
    ]
    assert [m.id for m in explain(rocm + "ValueError: Unsupported CUDA architecture: sm120\n")] == [
        "rocm-sm-shaped-arch"
    ]
    rocm_fix = next(m for m in explain("Unsupported CUDA architecture: sm115\n")).fix
    assert "gcnArchName" in rocm_fix and "sagebuild compat install" in rocm_fix


def test_a_failure_at_the_end_of_an_over_long_line_is_found_and_the_note_is_true():
    """A compiler command line of megabytes that ends in the error (issue 60): the line keeps its
    first and last halves, and the note says so."""
    import io

    from sagebuild.explain import read_log

    blob = b"nvcc " + b"-I/some/include " * 300_000 + b"clang++: error: unable to execute command: Killed\n"
    read = read_log(io.BytesIO(blob), None, max_line=4096)
    assert [m.id for m in explain(read.text)] == ["compiler-killed-oom"]
    assert max(len(x) for x in read.text.splitlines()) <= 4096
    assert read.text.startswith("nvcc -I/some/include") and "[...]" in read.text
    assert "cut in the middle" in read.note and "first and last" in read.note


def test_explain_refuses_a_fifo_instead_of_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "build.log"
    os.mkfifo(fifo)
    r = subprocess.run(
        [sys.executable, "-m", "sagebuild", "explain", str(fifo)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 2 and "named pipe" in r.stderr and "explain -" in r.stderr, r.stderr
