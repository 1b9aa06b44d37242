"""Every check in its ok state (healthy machines) and in its failing state (one fact broken)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from fakeroots import cpu_torch, cuda_torch, rocm_torch

from sagebuild import checks, profiles
from sagebuild.probe.facts import (
    ConflictFacts,
    DeviceFacts,
    DeviceInfo,
    ExtensionFacts,
    Facts,
    PythonFacts,
    ShadowFact,
    SystemFacts,
    ToolFact,
)

PROFILE = {"rocm": "rdna4-rocm6", "cuda": "hopper-cu12", "cpu": "cpu"}


def healthy(vendor: str) -> Facts:
    """A machine on which every check of the vendor's profile passes."""
    tools = {
        "c++": ToolFact(True, "/usr/bin/c++", "c++ (Ubuntu 13.2.0) 13.2.0"),
        "ninja": ToolFact(True, "/usr/bin/ninja", "1.11.1"),
    }
    f = Facts(
        root="/",
        cwd="/home/me/project",
        system=SystemFacts(
            os="Linux",
            kernel="6.8.0-51-generic",
            wsl="none",
            cpu_count=16,
            mem_total_gb=32.0,
            mem_available_gb=24.0,
            disk_free_gb=100.0,
        ),
        python=PythonFacts(
            version="3.11.9",
            executable="/home/me/.venv/bin/python",
            platform="linux",
            in_venv=True,
            path_python="/home/me/.venv/bin/python3",
            include_dir="/usr/include/python3.11",
            python_h=True,
        ),
        tools=tools,
    )
    if vendor == "rocm":
        f.devices = DeviceFacts(kfd=True, render_nodes=["/dev/dri/renderD128"])
        f.kfd_archs = ["gfx1201"]
        f.torch = rocm_torch()
        tools["hipcc"] = ToolFact(True, "/opt/rocm/bin/hipcc", "6.4.43482-0f2d60242")
    elif vendor == "cuda":
        f.devices = DeviceFacts(nvidia=["/dev/nvidia0", "/dev/nvidiactl"])
        f.torch = cuda_torch()
        tools["nvcc"] = ToolFact(True, "/usr/local/cuda/bin/nvcc", "13.0")
    else:
        f.torch = cpu_torch()
    built_for = {"rocm": ["gfx1201"], "cuda": ["sm90"], "cpu": []}[vendor]
    f.extension = ExtensionFacts(
        dir="/home/me/.cache/sagebuild/ext/cp311-torch",
        built=True,
        lib_present=True,
        sha256_ok=True,
        info={
            "archs": built_for,
            "jobs": 4,
            "sha256": "ab" * 32,
            "built_at": "2026-11-30T12:00:00+00:00",
            "torch": {"version": f.torch.version},
            "seconds": 51.0,
        },
    )
    return f


def by_id(facts: Facts, profile_name: str) -> dict[str, checks.Check]:
    return {c.id: c for c in checks.run_checks(facts, profiles.load_bundled(profile_name))}


def tune_record_for(facts: Facts, arch: str, cache: Path, **changed: str) -> Path:
    """A tuning record in ``cache`` as ``sagebuild tune`` writes it for the facts' GPU of ``arch``
    (``changed``: fingerprint fields as they were when it was tuned)."""
    from sagebuild.checks.tuning import facts_fingerprint
    from sagebuild.tuning import record

    fp = {k: v or "" for k, v in facts_fingerprint(facts, arch).items()}
    rec = record.TuningRecord(
        record.Fingerprint(**{**fp, **changed}),
        [record.TunedClass(record.ShapeClass(64, 1024, 1024, 16, False), record.Choice("sdpa", ms=0.02))],
    )
    return record.save(rec, cache / "tuning" / f"{arch}.json")


@pytest.mark.parametrize("vendor", ["rocm", "cuda", "cpu"])
def test_healthy_machines_pass(vendor: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))
    if vendor == "rocm":  # an RDNA4 card is healthy once tuned (no shipped measurements)
        tune_record_for(healthy(vendor), "gfx1201", tmp_path)
    results = checks.run_checks(healthy(vendor), profiles.load_bundled(PROFILE[vendor]))
    bad = [(c.id, c.status, c.detail) for c in results if c.status in ("warn", "fail")]
    assert bad == []
    assert checks.overall(results) == "ok"
    assert all(c.fix is None for c in results if c.status == "ok")


def test_every_check_has_an_ok_state() -> None:
    ok_ids = set()
    for vendor in PROFILE:
        ok_ids |= {i for i, c in by_id(healthy(vendor), PROFILE[vendor]).items() if c.status == "ok"}
    registered = {c.id for c in checks.run_checks(healthy("rocm"), profiles.load_bundled("rdna4-rocm6"))}
    assert registered - ok_ids == set()


RDNA4_INSTALL = profiles.load_bundled("rdna4-rocm6").torch_install
# ./sagebuild.lock's torch record as the probe reads it (lock.snapshot's "torch" and the path)
LOCKED_ROCM = {
    "path": "/home/me/project/sagebuild.lock",
    "version": "2.8.0+rocm6.4",
    "build": "rocm",
    "hip": "6.4.43482-0f2d60242",
    "cuda": None,
    "index_url": "https://download.pytorch.org/whl/rocm6.4",
}
Mut = Callable[[Facts], None]


def _set(path: str, value: object) -> Mut:
    def mutate(f: Facts) -> None:
        obj = f
        *parents, last = path.split(".")
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, last, value)

    return mutate


def _env(**kv: str) -> Mut:
    return lambda f: f.env.update(kv)


def _both(*muts: Mut) -> Mut:
    def mutate(f: Facts) -> None:
        for m in muts:
            m(f)

    return mutate


def _drop_tool(name: str) -> Mut:
    return lambda f: f.tools.pop(name, None)


NO_GPU = _both(_set("torch.cuda_available", False), _set("torch.devices", []), _set("torch.device_count", 0))

# (check id, vendor of the healthy base, mutation, expected status, text the fix must contain)
FAILING = [
    ("python-version", "rocm", _set("python.version", "3.8.10"), "fail", "-m venv"),
    ("python-version", "rocm", _set("python.version", None), "fail", "--python"),
    ("python-linux", "rocm", _set("python.under_mnt", True), "fail", RDNA4_INSTALL),
    (
        "path-python",
        "rocm",
        _set("python.path_python", "/mnt/c/Python311/python3"),
        "warn",
        "appendWindowsPath",
    ),
    (
        "torch-import",
        "rocm",
        _both(
            _set("torch.importable", False),
            _set("torch.error", "ModuleNotFoundError: No module named 'torch'"),
        ),
        "fail",
        RDNA4_INSTALL,
    ),
    (
        "torch-import",
        "rocm",
        _both(
            _set("torch.importable", False),
            _set("torch.error", "the interpreter was killed by SIGSEGV while importing"),
        ),
        "fail",
        "reinstall torch",
    ),
    ("torch-build", "rocm", _set("torch", cpu_torch()), "fail", RDNA4_INSTALL),
    ("torch-build", "cuda", _set("torch", rocm_torch()), "fail", "whl/cu"),
    ("torch-version", "rocm", _set("torch.version", "2.5.1+rocm6.2"), "fail", RDNA4_INSTALL),
    ("gpu-runtime-version", "rocm", _set("torch.hip", "6.2.41133-dd7f95766"), "fail", RDNA4_INSTALL),
    ("gpu-runtime-version", "cuda", _set("torch.cuda", "11.8"), "fail", "whl/cu"),
    ("gpu-visible", "rocm", NO_GPU, "fail", "usermod -aG render,video"),
    ("gpu-visible", "rocm", _both(NO_GPU, _env(HIP_VISIBLE_DEVICES="")), "fail", "unset HIP_VISIBLE_DEVICES"),
    ("gpu-visible", "rocm", _both(NO_GPU, _set("system.wsl", "2")), "fail", "wsl --update"),
    (
        "gpu-visible",
        "cuda",
        _both(NO_GPU, _env(CUDA_VISIBLE_DEVICES="-1")),
        "fail",
        "unset CUDA_VISIBLE_DEVICES",
    ),
    ("gpu-visible", "cuda", NO_GPU, "fail", "nvidia-smi"),
    ("device-nodes", "rocm", _set("devices.kfd", False), "fail", "amdgpu-install"),
    ("device-nodes", "rocm", _set("devices.render_nodes", []), "fail", "--device=/dev/dri"),
    (
        "device-nodes",
        "rocm",
        _both(_set("system.wsl", "2"), _set("devices", DeviceFacts())),
        "fail",
        "wsl --update",
    ),
    (
        "device-nodes",
        "rocm",
        _both(_set("system.wsl", "2"), _set("devices", DeviceFacts(dxg=True)), NO_GPU),
        "warn",
        "HSA_ENABLE_DXG_DETECTION=1",
    ),
    ("device-nodes", "rocm", _set("system.wsl", "1"), "fail", "wsl --set-version"),
    ("device-nodes", "cuda", _set("devices.nvidia", ["/dev/nvidiactl"]), "fail", "--gpus all"),
    (
        "device-nodes",
        "cuda",
        _both(_set("system.wsl", "2"), _set("devices", DeviceFacts())),
        "fail",
        "wsl --update",
    ),
    (
        "arch-supported",
        "rocm",
        _both(_set("torch", rocm_torch(arch="gfx1100")), _set("kfd_archs", ["gfx1100"])),
        "fail",
        "--profile rdna3-rocm6",
    ),
    (
        "arch-supported",
        "rocm",
        _both(_set("torch", rocm_torch(arch="gfx1030")), _set("kfd_archs", ["gfx1030"])),
        "fail",
        "scaled_dot_product_attention",
    ),
    (
        "arch-supported",
        "rocm",
        lambda f: f.torch.devices.append(DeviceInfo(1, "AMD Radeon RX 7900 XTX", "gfx1100")),
        "warn",
        "HIP_VISIBLE_DEVICES=0",
    ),
    ("arch-supported", "cpu", _set("kfd_archs", ["gfx1201"]), "warn", "--profile rdna4-rocm6"),
    ("arch-supported", "cpu", _set("kfd_archs", ["gfx1030"]), "warn", "scaled_dot_product_attention"),
    (
        "arch-supported",
        "cuda",
        _set("torch", cuda_torch(arch="sm70")),
        "fail",
        "scaled_dot_product_attention",
    ),
    (
        "hsa-override",
        "rocm",
        _env(HSA_OVERRIDE_GFX_VERSION="11.0.0"),
        "warn",
        "unset HSA_OVERRIDE_GFX_VERSION",
    ),
    (
        "arch-env",
        "rocm",
        _env(PYTORCH_ROCM_ARCH="gfx1100;gfx942"),
        "warn",
        "export PYTORCH_ROCM_ARCH='gfx1201'",
    ),
    ("arch-env", "cuda", _env(TORCH_CUDA_ARCH_LIST="8.0 8.6"), "warn", "export TORCH_CUDA_ARCH_LIST='9.0'"),
    ("arch-env", "rocm", _env(PYTORCH_ROCM_ARCH="garbage"), "warn", "export PYTORCH_ROCM_ARCH='gfx1201'"),
    ("arch-env", "cuda", _env(TORCH_CUDA_ARCH_LIST="9.0;gfx1201"), "warn", "TORCH_CUDA_ARCH_LIST='9.0'"),
    (
        "triton-import",
        "rocm",
        _both(
            _set("torch.triton.importable", False),
            _set("torch.triton.error", "ModuleNotFoundError: No module named 'triton'"),
        ),
        "fail",
        "pip install 'pytorch-triton-rocm==3.4.0' --index-url https://download.pytorch.org/whl/rocm6.4",
    ),
    ("triton-import", "cpu", _set("torch.triton.importable", False), "warn", "pip install triton"),
    (
        "triton-pin",
        "rocm",
        _both(
            _set("torch.triton.distribution", "triton"),
            _set("torch.triton.distributions", ["triton"]),
            _set("torch.triton.satisfied", False),
        ),
        "fail",
        "pip uninstall -y triton && pip install 'pytorch-triton-rocm==3.4.0' --index-url ",
    ),
    (
        "triton-pin",
        "cuda",
        _both(_set("torch.triton.distribution_version", "3.5.0"), _set("torch.triton.satisfied", False)),
        "fail",
        "pip install 'triton==3.6.0'",
    ),
    (
        "triton-pin",
        "rocm",
        _set("torch.triton.distributions", ["pytorch-triton-rocm", "triton"]),
        "warn",
        "pip uninstall -y triton",
    ),
    ("triton-version", "rocm", _set("torch.triton.version", "3.2.0"), "fail", RDNA4_INSTALL),
    (
        "nvcc",
        "cuda",
        _set("tools", {**healthy("cuda").tools, "nvcc": ToolFact(True, "/usr/bin/nvcc", "12.4")}),
        "fail",
        "CUDA_HOME=/usr/local/cuda-13.0",
    ),
    ("nvcc", "cuda", _drop_tool("nvcc"), "warn", "cuda-toolkit-13-0"),
    (
        "hipcc",
        "rocm",
        _set("tools", {**healthy("rocm").tools, "hipcc": ToolFact(True, "/usr/bin/hipcc", "5.2.21153-0")}),
        "fail",
        "ROCM_HOME=/opt/rocm-6.4",
    ),
    ("hipcc", "rocm", _drop_tool("hipcc"), "warn", "ROCM_HOME"),
    ("cxx", "cpu", _drop_tool("c++"), "fail", "build-essential"),
    (
        "cxx",
        "cpu",
        _set("tools", {**healthy("cpu").tools, "c++": ToolFact(True, "/usr/bin/c++", None, "exit 1")}),
        "fail",
        "--reinstall build-essential",
    ),
    ("ninja", "cpu", _drop_tool("ninja"), "fail", "-m pip install ninja"),
    ("build-memory", "rocm", _set("system.mem_total_gb", 4.0), "fail", "swapon"),
    (
        "build-memory",
        "rocm",
        _both(
            _set("system.mem_total_gb", 6.0), _set("system.wsl", "2"), _set("devices", DeviceFacts(dxg=True))
        ),
        "fail",
        ".wslconfig",
    ),
    ("build-memory", "rocm", _set("system.mem_available_gb", 1.5), "warn", "MAX_JOBS=1"),
    ("max-jobs", "rocm", _env(MAX_JOBS="lots"), "fail", "export MAX_JOBS=2"),
    ("max-jobs", "rocm", _env(MAX_JOBS="16"), "warn", "export MAX_JOBS=6"),
    ("build-disk", "rocm", _set("system.disk_free_gb", 1.0), "fail", "free at least 4.0 GB"),
    (
        "sageattention-compat",
        "rocm",
        _set("conflicts", ConflictFacts(sageattention="2.2.0+sagebuild.0.0.1", sageattention_location="/x")),
        "warn",
        "sagebuild compat install",
    ),
    (
        "sageattention-installed",
        "rocm",
        _both(
            _set(
                "conflicts",
                ConflictFacts(
                    sageattention="2.2.0",
                    sageattention_location="/venv/site-packages/sageattention/__init__.py",
                ),
            )
        ),
        "warn",
        "pip uninstall -y sageattention",
    ),
    (
        "shadowing",
        "rocm",
        _set(
            "conflicts",
            ConflictFacts(
                shadowing=[
                    ShadowFact(
                        "sageattention",
                        "/home/me/SageAttention/sageattention",
                        "/venv/site-packages/sageattention",
                    )
                ]
            ),
        ),
        "fail",
        "mv sageattention sageattention-src",
    ),
    ("python-headers", "rocm", _set("python.python_h", False), "fail", "sudo apt install python3.11-dev"),
    (
        "python-headers",
        "cuda",
        _both(_set("python.platform", "win32"), _set("python.python_libs", False)),
        "fail",
        "copy the `include` and `libs` folders of a full CPython 3.11",
    ),
    (
        "pip-build-isolation",
        "rocm",
        _both(
            _set("python.pip_isolation", True),
            _set("python.pip_isolation_source", "PIP_NO_BUILD_ISOLATION = 1"),
        ),
        "warn",
        "export PIP_NO_BUILD_ISOLATION=0",
    ),
    (
        "pip-build-isolation",
        "cuda",
        _set("python.pip_isolation_source", "/etc/pip.conf [install] no-build-isolation = maybe"),
        "warn",
        "set it to false",
    ),
    (
        "torch-build-lock",
        "rocm",
        _both(_set("lock_torch", dict(LOCKED_ROCM)), _set("torch", cuda_torch())),
        "fail",
        "pip install --force-reinstall 'torch==2.8.0+rocm6.4' --index-url https://download.pytorch.org/whl/rocm6.4",
    ),
    (
        "torch-build-lock",
        "rocm",
        _set("lock_torch", {"path": "/p/sagebuild.lock", "error": "bad"}),
        "warn",
        "sagebuild lock",
    ),
    (
        "cache-dir",
        "rocm",
        _set(
            "extension.unwritable",
            "/home/me/.cache cannot be written (a read-only filesystem or its permissions)",
        ),
        "fail",
        "SAGEBUILD_CACHE_DIR",
    ),
    ("extension", "cuda", _set("extension.sha256_ok", False), "fail", "compile --profile hopper-cu12"),
    ("extension", "rocm", _set("extension.info", {"archs": ["gfx1100"]}), "warn", "--arch gfx1100,gfx1201"),
    ("extension", "cpu", _set("extension", ExtensionFacts(dir="/x")), "skip", "compile --profile cpu"),
    # RDNA4 without a tuning record (none in the tests' cache dir): its configs were never measured
    ("attention-tuning", "rocm", _set("driver", None), "warn", "sagebuild tune --preset diffusion"),
]


@pytest.mark.parametrize(
    ("check_id", "vendor", "mutate", "status", "fix"),
    FAILING,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(FAILING)],
)
def test_check_fails_with_exact_fix(check_id: str, vendor: str, mutate: Mut, status: str, fix: str) -> None:
    f = healthy(vendor)
    mutate(f)
    c = by_id(f, PROFILE[vendor])[check_id]
    assert c.status == status, c
    assert c.fix and fix in c.fix, c


def test_every_check_has_a_failing_state() -> None:
    registered = {c.id for c in checks.run_checks(healthy("rocm"), profiles.load_bundled("rdna4-rocm6"))}
    assert registered - {c[0] for c in FAILING} == set()


def test_cpu_torch_on_rocm_profile_fix_is_the_profile_install_line() -> None:
    f = healthy("rocm")
    f.torch = cpu_torch()
    c = by_id(f, "rdna4-rocm6")["torch-build"]
    assert c.status == "fail" and c.fix == RDNA4_INSTALL
    assert "--index-url https://download.pytorch.org/whl/rocm" in c.fix


def test_wsl2_models_are_named() -> None:
    f = healthy("rocm")
    f.system.wsl = "2"
    f.devices = DeviceFacts(dxg=True)
    ok = by_id(f, "rdna4-rocm6")["device-nodes"]
    assert ok.status == "ok" and "dxg model" in ok.detail  # torch sees the GPU
    f.devices = DeviceFacts(render_nodes=["/dev/dri/renderD128"])
    seed = by_id(f, "rdna4-rocm6")["device-nodes"]
    assert seed.status == "ok" and "renderD128 model" in seed.detail
    f.devices = DeviceFacts(dxg=True)
    f.torch.devices = []
    f.env["HSA_ENABLE_DXG_DETECTION"] = "1"
    assert by_id(f, "rdna4-rocm6")["device-nodes"].status == "ok"


def test_hsa_override_names_masked_and_real_arch() -> None:
    f = healthy("rocm")
    f.env["HSA_OVERRIDE_GFX_VERSION"] = "11.0.0"
    c = by_id(f, "rdna4-rocm6")["hsa-override"]
    assert "gfx1100" in c.detail and "gfx1201" in c.detail


def test_cpu_profile_skips_gpu_checks_and_says_so() -> None:
    res = by_id(healthy("cpu"), "cpu")
    for cid in ("gpu-visible", "device-nodes", "gpu-runtime-version", "arch-env"):
        assert res[cid].status == "skip"
    assert res["arch-supported"].status == "ok" and "no GPU" in res["arch-supported"].detail


def test_verdicts() -> None:
    cpu = profiles.load_bundled("cpu")
    f = healthy("cpu")
    text = checks.verdict(f, cpu, "auto: no GPU detected; using cpu", checks.run_checks(f, cpu))
    assert "No GPU found" in text and "sagebuild profiles" in text and "Ready" in text
    rdna4 = profiles.load_bundled("rdna4-rocm6")
    f.kfd_archs = ["gfx1201"]
    res = checks.run_checks(f, rdna4)
    text = checks.verdict(f, rdna4, "named", res)
    assert checks.overall(res) == "fail" and "torch-build" in text


def test_check_rejects_unknown_status() -> None:
    with pytest.raises(ValueError, match="status"):
        checks.Check("x", "x", "maybe", "")  # type: ignore[arg-type]
    assert checks.Check("x", "t", "ok", "d").to_dict() == {
        "id": "x",
        "title": "t",
        "status": "ok",
        "detail": "d",
        "fix": None,
    }


# ---- issue 37's wrong verdicts ------------------------------------------------------------------


def test_garbage_arch_list_is_not_ok_even_without_a_gpu() -> None:
    """A value naming no arch cannot pass because no GPU was detected to be left out of it."""
    f = healthy("rocm")
    f.kfd_archs, f.torch.devices = [], []
    f.env["PYTORCH_ROCM_ARCH"] = "garbage"
    c = by_id(f, "rdna4-rocm6")["arch-env"]
    assert c.status == "warn" and "'garbage' names no rocm GPU arch" in c.detail
    assert c.fix and c.fix.startswith("export PYTORCH_ROCM_ARCH='gfx1201;gfx1200' (or unset")
    for fine in ("gfx1201", "gfx1201;gfx906", "gfx1201 gfx1100"):
        f.env["PYTORCH_ROCM_ARCH"] = fine
        assert by_id(f, "rdna4-rocm6")["arch-env"].status == "ok", fine
    g = healthy("cuda")
    for fine in ("9.0", "9.0a", "8.9;9.0+PTX", "Hopper"):
        g.env["TORCH_CUDA_ARCH_LIST"] = fine
        assert by_id(g, "hopper-cu12")["arch-env"].status == "ok", fine


def test_summary_names_the_compute_nodes_it_found() -> None:
    """/dev/kfd present but no readable arch: the summary must not claim there is no /dev/kfd."""
    cpu = profiles.load_bundled("cpu")
    f = healthy("cpu")
    f.devices = DeviceFacts(kfd=True, render_nodes=["/dev/dri/renderD128"])
    text = checks.verdict(f, cpu, "auto: no GPU detected; using cpu", checks.run_checks(f, cpu))
    assert "no /dev/kfd" not in text
    assert "No GPU arch found (/dev/kfd present" in text and "torch 2.13.0+cpu sees none" in text
    f.devices = DeviceFacts(render_nodes=["/dev/dri/renderD128"])  # a display GPU's node proves nothing
    text = checks.verdict(f, cpu, "auto", checks.run_checks(f, cpu))
    assert "No GPU found (no /dev/kfd, /dev/dxg or /dev/nvidia*" in text


def test_shadowing_check_names_the_installed_package_folder() -> None:
    """An editable install run from its checkout: ./sagebuild/ exists and is the installed package."""
    f = healthy("cpu")
    f.conflicts = ConflictFacts(installed_here=["/home/me/project/sagebuild"])
    c = by_id(f, "cpu")["shadowing"]
    assert c.status == "ok" and "no sageattention/ or sagebuild/" not in c.detail
    assert "./sagebuild/ in /home/me/project is the installed package itself" in c.detail


def test_max_jobs_rule_is_the_build_plans() -> None:
    """doctor and compile word an overfilling MAX_JOBS the same (one home: sagebuild.build.jobs)."""
    from sagebuild.build.plan import make_plan

    f = healthy("rocm")
    f.env["MAX_JOBS"] = "100000"
    c = by_id(f, "rdna4-rocm6")["max-jobs"]
    plan = make_plan(
        profiles.load_bundled("rdna4-rocm6"), f, env={"MAX_JOBS": "100000", "SAGEBUILD_EXT_DIR": "/x"}
    )
    assert c.status == "warn" and f"{c.detail}; {c.fix}" in plan.warnings


# ---- the registry -------------------------------------------------------------------------------


def test_check_decorator_names_the_verdict_once() -> None:
    @checks.check("decorated", "A decorated check")
    def check_decorated(facts: Facts, profile: profiles.Profile) -> checks.Verdict:
        return checks.warn("seen", "do this") if facts.env.get("X") else checks.ok("fine")

    @checks.check("decorated-broken", "A broken decorated check")
    def check_decorated_broken(facts: Facts, profile: profiles.Profile) -> checks.Verdict:
        raise RuntimeError("bug")

    try:
        f = healthy("cpu")
        f.env["X"] = "1"
        res = by_id(f, "cpu")
        with pytest.raises(ValueError, match="already registered"):
            checks.check("decorated", "again")
    finally:
        checks.REGISTRY.remove(check_decorated)
        checks.REGISTRY.remove(check_decorated_broken)
    assert "decorated" not in by_id(healthy("cpu"), "cpu")
    assert res["decorated"] == checks.Check("decorated", "A decorated check", "warn", "seen", "do this")
    broken = res["decorated-broken"]
    assert broken.title == "A broken decorated check" and "RuntimeError: bug" in broken.detail
    assert check_decorated(healthy("cpu"), profiles.load_bundled("cpu")).status == "ok"


def test_registry_ids_are_unique_and_in_table_order() -> None:
    ids = [fn.check_id for fn in checks.REGISTRY]
    assert len(ids) == len(set(ids))
    assert ids[:3] == ["python-version", "python-linux", "path-python"] and ids[-1] == "attention-tuning"


def test_docs_doctor_md_describes_every_check() -> None:
    """docs/doctor.md has a paragraph (**`id`**) for every registered check."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "doctor.md").read_text(encoding="utf-8")
    missing = [fn.check_id for fn in checks.REGISTRY if f"**`{fn.check_id}`**" not in doc]
    assert not missing, f"docs/doctor.md does not describe {missing}"


def test_attention_tuning_verdicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ok with a record of this setup; ok without one where the family has shipped measurements;
    warn without one for an unmeasured family; warn when stale after a torch, Triton or driver
    change; each warning names the command that fixes it."""
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))
    rocm, cuda = healthy("rocm"), healthy("cuda")
    none = by_id(rocm, "rdna4-rocm6")["attention-tuning"]
    assert none.status == "warn" and "RDNA4" in none.detail and "sagebuild tune --preset" in none.fix
    shipped = by_id(cuda, "hopper-cu12")["attention-tuning"]
    assert shipped.status == "ok" and "shipped Hopper measurements" in shipped.detail
    path = tune_record_for(rocm, "gfx1201", tmp_path)
    tuned = by_id(rocm, "rdna4-rocm6")["attention-tuning"]
    assert tuned.status == "ok" and "1 tuned classes" in tuned.detail and tuned.fix is None
    for field, old in (("torch", "1.0.0+rocm1.0"), ("triton", "1.0.0"), ("driver", "amdgpu 1.0.0")):
        rocm.driver = "amdgpu 6.10.5"
        tune_record_for(rocm, "gfx1201", tmp_path, **{field: old})
        stale = by_id(rocm, "rdna4-rocm6")["attention-tuning"]
        assert stale.status == "warn" and f"{field} {old} -> " in stale.detail, stale.detail
        assert stale.fix.startswith("re-tune: sagebuild tune --preset")
    path.write_text("{not json")
    broken = by_id(rocm, "rdna4-rocm6")["attention-tuning"]
    assert broken.status == "warn" and f"delete {path}" in broken.fix


def test_issue_61_checks_pass_when_the_setting_is_right() -> None:
    """pip set to build without isolation, and torch still the build kind the lock froze."""
    f = healthy("rocm")
    f.python.pip_isolation, f.python.pip_isolation_source = False, "PIP_NO_BUILD_ISOLATION = 0"
    f.lock_torch = dict(LOCKED_ROCM)
    got = by_id(f, "rdna4-rocm6")
    assert (
        got["pip-build-isolation"].status == "ok"
        and "against the installed torch" in got["pip-build-isolation"].detail
    )
    assert got["torch-build-lock"].status == "ok"
    assert "pip-build-isolation" not in by_id(healthy("rocm"), "rdna4-rocm6")  # unset: pip's default, silent
