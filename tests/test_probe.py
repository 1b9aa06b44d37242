"""Probe facts from fake system roots, tool stubs and stub interpreters (crash, hang, Windows)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fakeroots import (
    ENV,
    add_kfd_node,
    add_tool,
    add_tool_output,
    cpu_torch,
    fake_python,
    make_cpu_only,
    make_nvidia,
    make_rdna4_native,
    make_wsl1,
    make_wsl2_dxg,
    make_wsl2_windows_python,
    python_line,
    windows_python,
    write,
)

from sagebuild.probe import collect, system, tools, torch_probe
from sagebuild.probe.facts import Facts, TorchFacts


def _collect(root: Path, tmp_path: Path, **kw) -> Facts:
    kw.setdefault("env", ENV)
    kw.setdefault("torch", cpu_torch())
    return collect(root=root, cwd=tmp_path, **kw)


def test_rdna4_native_root(tmp_path: Path) -> None:
    f = _collect(make_rdna4_native(tmp_path), tmp_path)
    assert f.system.wsl == "none"
    assert f.system.kernel == "6.8.0-51-generic"
    assert f.system.distro == "Ubuntu 24.04.1 LTS"
    assert f.system.cpu_count == 16
    assert f.system.mem_total_gb == pytest.approx(32.0)
    assert f.system.mem_available_gb == pytest.approx(24.0)
    assert f.system.disk_free_gb is not None and f.system.disk_free_gb > 0
    assert f.devices.kfd and f.devices.render_nodes == ["/dev/dri/renderD128"]
    assert not f.devices.dxg and f.devices.nvidia == []
    assert f.driver == "amdgpu 6.10.5"
    assert f.kfd_archs == ["gfx1201"]  # CPU node 0 (gfx_target_version 0) skipped
    rocminfo = f.tools["rocminfo"]
    assert rocminfo.present and rocminfo.path == "/opt/rocm/bin/rocminfo" and rocminfo.version == "1.14"
    assert f.rocminfo_archs == ["gfx1201"]
    assert f.gpu_archs() == ["gfx1201"]


def test_kfd_nodes_decode_in_numeric_order(tmp_path: Path) -> None:
    root = make_cpu_only(tmp_path)
    add_kfd_node(root, 0, 0)
    add_kfd_node(root, 10, 110000)
    add_kfd_node(root, 2, 90010)
    add_kfd_node(root, 1, 90402)
    add_kfd_node(root, 3, 90402)
    write(root, f"{system.KFD_NODES}/4/properties", "no target here\n")
    assert system.kfd_archs(system.Root(root)) == ["gfx942", "gfx90a", "gfx1100"]


def test_torch_devices_come_first_in_gpu_archs(tmp_path: Path) -> None:
    from fakeroots import rocm_torch

    f = _collect(make_rdna4_native(tmp_path), tmp_path, torch=rocm_torch(arch="gfx1100"))
    # HSA override style: torch reports gfx1100, KFD the real gfx1201
    assert f.gpu_archs() == ["gfx1100", "gfx1201"]


def test_wsl2_dxg_root(tmp_path: Path) -> None:
    f = _collect(make_wsl2_dxg(tmp_path), tmp_path)
    assert f.system.wsl == "2"
    assert f.devices.dxg and not f.devices.kfd and f.devices.render_nodes == []
    assert f.gpu_archs() == []
    f2 = _collect(make_wsl2_dxg(tmp_path, render128=True, name="w2"), tmp_path)
    assert f2.devices.dxg and f2.devices.render_nodes == ["/dev/dri/renderD128"]


def test_wsl1_and_native_with_stray_wsl_env(tmp_path: Path) -> None:
    assert _collect(make_wsl1(tmp_path), tmp_path).system.wsl == "1"
    env = {**ENV, "WSL_DISTRO_NAME": "Ubuntu"}  # leaks through ssh/containers; the kernel decides
    assert _collect(make_cpu_only(tmp_path), tmp_path, env=env).system.wsl == "none"


def test_wsl2_windows_interpreter_is_flagged(tmp_path: Path) -> None:
    root = make_wsl2_windows_python(tmp_path)
    f = collect(root=root, python=str(windows_python(root)), env=ENV, cwd=tmp_path, timeout=120)
    assert f.system.wsl == "2"
    assert f.python.under_mnt
    assert f.python.version  # the stub runs this interpreter, so the probe itself worked
    assert f.torch.importable and f.torch.build == "cpu"


def test_windows_style_executable_and_platform(tmp_path: Path) -> None:
    line = python_line(version="3.12.1", executable="C:\\Python312\\python.exe", platform="win32")
    python = fake_python(tmp_path, f"printf '%s\\n' '{line}'")
    f = _collect(make_cpu_only(tmp_path), tmp_path, python=python, torch=None)
    assert f.python.executable == "C:\\Python312\\python.exe" and f.python.platform == "win32"
    assert f.python.under_mnt


def test_path_python_under_mnt(tmp_path: Path) -> None:
    root = make_wsl2_dxg(tmp_path)
    add_tool(root, "mnt/c/Python311/python3", "exit 0")
    f = _collect(root, tmp_path, env={"PATH": "/mnt/c/Python311:/usr/bin"})
    assert f.python.path_python == "/mnt/c/Python311/python3"
    f2 = _collect(root, tmp_path, env={"PATH": "/usr/bin"})
    assert f2.python.path_python is None


def test_nvidia_root(tmp_path: Path) -> None:
    f = _collect(make_nvidia(tmp_path), tmp_path)
    assert f.devices.nvidia == ["/dev/nvidia-uvm", "/dev/nvidia0", "/dev/nvidiactl"]
    assert f.tools["nvidia-smi"].version == "550.54.14"
    assert f.nvidia_smi_archs == ["sm90"]
    assert f.driver == "nvidia 550.54.14"
    assert f.tools["nvcc"].present and f.tools["nvcc"].version == "12.4"
    assert f.tools["nvcc"].path == "/usr/local/cuda/bin/nvcc"
    assert f.gpu_archs() == ["sm90"]


def test_cuda_home_and_rocm_home_are_searched(tmp_path: Path) -> None:
    root = make_cpu_only(tmp_path)
    add_tool_output(root, "opt/cuda-12.8/bin/nvcc", "Cuda compilation tools, release 12.8, V12.8.93")
    add_tool_output(root, "opt/rocm-7.1/bin/hipcc", "HIP version: 7.1.25424-4179531dcd")
    f = _collect(root, tmp_path, env={**ENV, "CUDA_HOME": "/opt/cuda-12.8", "ROCM_HOME": "/opt/rocm-7.1"})
    assert f.tools["nvcc"].version == "12.8"
    assert f.tools["hipcc"].version == "7.1.25424-4179531dcd"


def test_cpu_only_root(tmp_path: Path) -> None:
    f = _collect(make_cpu_only(tmp_path), tmp_path)
    assert not f.devices.kfd and not f.devices.dxg and f.devices.nvidia == [] and f.devices.render_nodes == []
    assert f.driver is None
    assert f.kfd_archs == [] and f.rocminfo_archs == [] and f.nvidia_smi_archs == []
    assert not f.tools["nvcc"].present and f.tools["nvcc"].path is None
    assert f.gpu_archs() == []


def test_env_facts_filtered_and_redacted(tmp_path: Path) -> None:
    env = {
        **ENV,
        "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
        "MAX_JOBS": "2",
        "HOME": "/root",
        "TRITON_API_KEY": "hunter2",
        "HF_TOKEN": "abc",
        "PYTORCH_ROCM_ARCH": "gfx1201",
    }
    f = _collect(make_cpu_only(tmp_path), tmp_path, env=env)
    assert f.env == {
        "HSA_OVERRIDE_GFX_VERSION": "11.0.0",
        "MAX_JOBS": "2",
        "PYTORCH_ROCM_ARCH": "gfx1201",
        "TRITON_API_KEY": "***",
    }
    assert f.hsa_override == "11.0.0"
    d = f.to_dict()
    assert "hunter2" not in str(d) and d["hsa_override"] == "11.0.0"


def test_memory_unknown_without_meminfo(tmp_path: Path) -> None:
    root = make_cpu_only(tmp_path)
    (root / "proc/meminfo").unlink()
    (root / "proc/cpuinfo").unlink()
    f = _collect(root, tmp_path)
    assert f.system.mem_total_gb is None and f.system.cpu_count is None


def test_tool_timeout_and_failure_become_facts(tmp_path: Path) -> None:
    hang = add_tool(tmp_path, "bin/hang", "sleep 30")
    out, err = tools.run_tool([str(hang)], ENV, timeout=0.5)
    assert out is None and "did not answer within" in err
    bad = add_tool(tmp_path, "bin/bad", "echo 'broken install' >&2; exit 3")
    out, err = tools.run_tool([str(bad)], ENV)
    assert "exit code 3" in err and "broken install" in err
    ok = add_tool(tmp_path, "bin/ok", "echo 'ninja 1.11.1'")
    assert tools.run_tool([str(ok)], ENV) == ("ninja 1.11.1\n", None)


def test_parsers() -> None:
    assert tools.rocminfo_archs("  Name:   gfx942:sramecc+:xnack-\n  Name: gfx942\n  Name: gfx90a\n") == [
        "gfx942",
        "gfx90a",
    ]
    assert tools.nvidia_smi_archs("550.54.14, 9.0\n550.54.14, 8.9\n550.54.14, 9.0\n") == ["sm90", "sm89"]
    assert (
        tools.parse_version("Cuda compilation tools, release 13.0, V13.0.88", r"release (\d+\.\d+)") == "13.0"
    )


# ---- the torch subprocess probe -----------------------------------------------------------------


def test_probe_this_interpreter_reads_torch_and_triton() -> None:
    py, torch, raw = torch_probe.probe(sys.executable, timeout=120)
    assert py.executable and py.version == ".".join(map(str, sys.version_info[:3]))
    assert torch.importable, torch.error
    import torch as real_torch

    assert torch.version == real_torch.__version__
    assert torch.build == ("rocm" if real_torch.version.hip else "cuda" if real_torch.version.cuda else "cpu")
    assert raw["marker_env"]["sys_platform"] == sys.platform
    tri = torch.triton
    import importlib.metadata as md

    providers = sorted(md.packages_distributions().get("triton", []))
    assert tri.distributions == providers
    if providers:
        assert tri.importable and tri.distribution_version == md.version(tri.distribution)


def test_segfaulting_interpreter_is_a_failed_fact(tmp_path: Path) -> None:
    python = fake_python(tmp_path, f"echo '{python_line(version='3.10.12')}'\nkill -SEGV $$")
    f = _collect(make_cpu_only(tmp_path), tmp_path, python=python, torch=None)
    assert not f.torch.importable and "SIGSEGV" in f.torch.error
    assert f.python.version == "3.10.12"  # printed before the crash, so it survives


def test_hanging_interpreter_times_out(tmp_path: Path) -> None:
    python = fake_python(tmp_path, f"echo '{python_line()}'\nexec sleep 30")
    py, tor, err = torch_probe.run_script(python, ENV, timeout=1.0)[:3]
    assert tor is None and "did not finish within 1 s" in err
    assert py is not None and py["version"] == "3.11.9"


def test_failing_and_missing_interpreters(tmp_path: Path) -> None:
    python = fake_python(tmp_path, "echo 'ImportError: libamdhip64.so: cannot open' >&2; exit 1")
    _, tor, err, _ = torch_probe.run_script(python, ENV, timeout=10)
    assert tor is None and "exit code 1" in err and "libamdhip64" in err
    _, tor, err, _ = torch_probe.run_script(str(tmp_path / "nope"), ENV, timeout=10)
    assert tor is None and "cannot run" in err


def test_torch_facts_from_rocm_output() -> None:
    tor = {
        "importable": True,
        "version": "2.8.0+rocm6.4",
        "hip": "6.4.43482",
        "cuda": None,
        "build": "rocm",
        "cuda_available": True,
        "device_count": 1,
        "devices": [
            {
                "index": 0,
                "name": "AMD Instinct MI300X",
                "raw_arch": "gfx942:sramecc+:xnack-",
                "total_mem_gb": 191.5,
            }
        ],
        "hip_runtime": "6.4.43482",
        "miopen": "3.4.0",
        "torch_requires": ['pytorch-triton-rocm==3.4.0; platform_system == "Linux"'],
        "triton": {
            "importable": True,
            "version": "3.4.0",
            "distributions": ["pytorch-triton-rocm"],
            "distribution_versions": {"pytorch-triton-rocm": "3.4.0"},
        },
    }
    t = torch_probe.torch_facts(tor, None, {"platform_system": "Linux", "platform_machine": "x86_64"})
    assert t.devices[0].arch == "gfx942" and t.devices[0].raw_arch == "gfx942:sramecc+:xnack-"
    assert t.triton.satisfied is True and t.triton.distribution == "pytorch-triton-rocm"
    assert t.miopen == "3.4.0"
    assert torch_probe.torch_facts(None, "boom", None) == TorchFacts(importable=False, error="boom")


LINUX = {
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "sys_platform": "linux",
    "python_version": "3.11",
    "python_full_version": "3.11.9",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "platform_release": "6.8.0",
    "platform_version": "#1",
    "implementation_version": "3.11.9",
}


@pytest.mark.parametrize(
    ("requires", "providers", "versions", "env", "applies", "satisfied", "dist"),
    [
        (
            ['pytorch-triton-rocm==3.3.1; platform_system == "Linux"'],
            ["pytorch-triton-rocm"],
            {"pytorch-triton-rocm": "3.3.1"},
            LINUX,
            True,
            True,
            "pytorch-triton-rocm",
        ),
        (
            ['pytorch-triton-rocm==3.3.1; platform_system == "Linux"'],
            ["pytorch-triton-rocm"],
            {"pytorch-triton-rocm": "3.2.0"},
            LINUX,
            True,
            False,
            "pytorch-triton-rocm",
        ),
        # a plain `pip install triton` put the CUDA Triton over the ROCm one
        (
            ['pytorch-triton-rocm==3.3.1; platform_system == "Linux"'],
            ["triton"],
            {"triton": "3.3.1"},
            LINUX,
            True,
            False,
            "triton",
        ),
        (["triton~=3.8.0"], ["triton"], {"triton": "3.8.1"}, LINUX, True, True, "triton"),
        (["triton~=3.8.0"], ["triton"], {"triton": "3.9.0"}, LINUX, True, False, "triton"),
        (
            ['triton==3.5.0; platform_system == "Linux" and platform_machine == "x86_64"'],
            ["triton"],
            {"triton": "3.5.0"},
            {**LINUX, "platform_machine": "aarch64"},
            False,
            None,
            "triton",
        ),
        (["filelock", "sympy>=1.13.3"], ["triton"], {"triton": "3.6.0"}, LINUX, None, None, "triton"),
        (["triton==3.6.0"], [], {}, LINUX, True, False, None),
    ],
)
def test_triton_pin_read_from_metadata(requires, providers, versions, env, applies, satisfied, dist) -> None:
    tri = torch_probe.triton_facts(
        {"importable": bool(providers), "distributions": providers, "distribution_versions": versions},
        requires,
        env,
    )
    assert tri.requirement_applies is applies
    assert tri.satisfied is satisfied
    assert tri.distribution == dist


def test_shadowing_folder_in_cwd(tmp_path: Path) -> None:
    from sagebuild.probe import _conflicts

    write(tmp_path, "sageattention/__init__.py")
    write(tmp_path, "sagebuild/__init__.py")
    raw = {
        "sageattention": "2.2.0",
        "sageattention_origin": "/venv/lib/site-packages/sageattention/__init__.py",
        "sagebuild_origin": str(tmp_path / "sagebuild/__init__.py"),
    }
    c = _conflicts(raw, tmp_path)
    assert c.sageattention == "2.2.0"
    assert [(s.name, s.installed_at) for s in c.shadowing] == [
        ("sageattention", "/venv/lib/site-packages/sageattention")
    ]
    (tmp_path / "sageattention/__init__.py").unlink()
    assert _conflicts(raw, tmp_path).shadowing == []


def test_fifo_and_device_files_under_a_root_are_not_read(tmp_path):
    """doctor --root never blocks on a FIFO where a file is expected (issue 37)."""
    import os
    import subprocess
    import sys

    from sagebuild.probe.system import Root, read_text_capped

    (tmp_path / "etc").mkdir()
    os.mkfifo(tmp_path / "etc" / "os-release")
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "version").write_text("Linux version 6.8.0 " + "x" * (2 << 20))
    root = Root(tmp_path)
    assert root.read("/etc/os-release") is None
    assert len(root.read("/proc/version")) == 1 << 20  # capped
    assert read_text_capped(Path("/dev/zero")) is None
    r = subprocess.run(
        [sys.executable, "-m", "sagebuild", "doctor", "--root", str(tmp_path), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in r.stderr and r.returncode in (0, 10), r.stderr[-2000:]
