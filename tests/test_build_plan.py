"""Build plan logic (jobs, arch lists, env, commands) on fake machines and fake memory figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakeroots import ENV, add_kfd_node, cpu_torch, cuda_torch, make_cpu_only, make_rdna4_native, rocm_torch
from typer.testing import CliRunner

from sagebuild import probe, profiles
from sagebuild.archs import decode_hsa_override
from sagebuild.build.plan import make_plan, parse_arch_list, plan_jobs
from sagebuild.errors import SagebuildError
from sagebuild.probe.facts import DeviceInfo, Facts, SystemFacts

RDNA4 = profiles.load_bundled("rdna4-rocm6")
HOPPER = profiles.load_bundled("hopper-cu12")
CPU = profiles.load_bundled("cpu")
NO_ENV: dict[str, str] = {"SAGEBUILD_EXT_DIR": "/tmp/sagebuild-test-ext"}


def facts_of(root: Path, torch=None, env: dict[str, str] | None = None) -> Facts:
    return probe.collect(root=root, env={**ENV, **(env or {})}, torch=torch or cpu_torch())


def mem(gb: float, cores: int = 64) -> Facts:
    return Facts(system=SystemFacts(mem_available_gb=gb, cpu_count=cores), torch=cpu_torch())


# ---- jobs ---------------------------------------------------------------------------------------


def test_jobs_limited_by_memory() -> None:
    jobs, why = plan_jobs(RDNA4, mem(10.0), env=NO_ENV)  # 4 GiB per job
    assert jobs == 2
    assert "10.0 GiB" in why and "limited by memory" in why


def test_jobs_limited_by_cores_and_cap() -> None:
    assert plan_jobs(RDNA4, mem(200.0, cores=6), env=NO_ENV)[0] == 6
    jobs, why = plan_jobs(RDNA4, mem(200.0, cores=64), env=NO_ENV)
    assert jobs == RDNA4.build.max_jobs and "profile cap" in why


def test_jobs_never_below_one_and_warns_when_memory_is_short() -> None:
    jobs, why = plan_jobs(RDNA4, mem(1.5), env=NO_ENV)
    assert jobs == 1 and "killed for memory" in why


def test_jobs_overrides() -> None:
    assert plan_jobs(RDNA4, mem(100.0), env={"MAX_JOBS": "3"}) == (3, "MAX_JOBS=3 set in the environment")
    jobs, why = plan_jobs(RDNA4, mem(100.0), jobs=5, env={"MAX_JOBS": "3"})
    assert jobs == 5 and "--jobs" in why
    with pytest.raises(SagebuildError, match="MAX_JOBS"):
        plan_jobs(RDNA4, mem(100.0), env={"MAX_JOBS": "lots"})
    with pytest.raises(SagebuildError):
        plan_jobs(RDNA4, mem(100.0), jobs=0, env=NO_ENV)


def test_jobs_from_fake_root_meminfo(tmp_path: Path) -> None:
    facts = facts_of(make_rdna4_native(tmp_path))  # 32 GiB, 3/4 available, 16 cores
    plan = make_plan(RDNA4, facts, env=NO_ENV)
    assert plan.jobs == 6 and plan.env["MAX_JOBS"] == "6"


# ---- archs --------------------------------------------------------------------------------------


def test_rdna4_root_without_torch_devices_uses_kfd(tmp_path: Path) -> None:
    plan = make_plan(RDNA4, facts_of(make_rdna4_native(tmp_path)), env=NO_ENV)
    assert plan.archs == ["gfx1201"]
    assert plan.env["PYTORCH_ROCM_ARCH"] == "gfx1201"
    assert "KFD" in plan.arch_reason
    # this fake machine has a CPU torch: the plan says it cannot build ROCm code with it
    assert any("rocm" in p and "cpu build" in p for p in plan.problems)


def test_rocm_torch_devices_come_first(tmp_path: Path) -> None:
    root = make_rdna4_native(tmp_path)
    plan = make_plan(RDNA4, facts_of(root, torch=rocm_torch("gfx1201")), env=NO_ENV)
    assert plan.archs == ["gfx1201"] and "gcnArchName" in plan.arch_reason
    assert plan.problems == [] and plan.with_gpu
    assert [Path(s).name for s in plan.sources] == ["ops_cpu.cpp", "ops_cuda.cu"]
    assert plan.aot == [("qk_int8_pv_fp16", "gfx1201"), ("qk_int8_pv_fp8", "gfx1201")]  # the table's FP8


def test_two_different_cards_give_a_list(tmp_path: Path) -> None:
    root = make_rdna4_native(tmp_path, rocminfo=False)
    add_kfd_node(root, 2, 110000)  # an RX 7900 XTX beside the RX 9070 XT
    add_kfd_node(root, 3, 120001)  # and a second RX 9070 XT: de-duplicated
    plan = make_plan(RDNA4, facts_of(root), env=NO_ENV)
    assert plan.archs == ["gfx1201", "gfx1100"]
    assert plan.env["PYTORCH_ROCM_ARCH"] == "gfx1201;gfx1100"
    assert "several" in plan.arch_reason


def test_hsa_override_warns_and_names_the_real_arch(tmp_path: Path) -> None:
    root = make_rdna4_native(tmp_path, rocminfo=False)
    facts = facts_of(root, env={"HSA_OVERRIDE_GFX_VERSION": "11.0.0"})
    plan = make_plan(RDNA4, facts, env=NO_ENV)
    assert plan.archs == ["gfx1100"]  # what the runtime will ask code objects for
    warning = " ".join(plan.warnings)
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" in warning and "gfx1201" in warning and "gfx1100" in warning
    assert decode_hsa_override("9.0.10") == "gfx90a" and decode_hsa_override("eleven") is None


def test_cuda_arch_list_from_capabilities() -> None:
    t = cuda_torch("sm90")
    t.devices.append(DeviceInfo(1, "NVIDIA L40", "sm89", raw_arch="8.9"))
    t.devices.append(DeviceInfo(2, "NVIDIA H100", "sm90", raw_arch="9.0"))
    plan = make_plan(HOPPER, Facts(system=SystemFacts(mem_available_gb=64, cpu_count=8), torch=t), env=NO_ENV)
    assert plan.archs == ["sm90", "sm89"]
    assert plan.env["TORCH_CUDA_ARCH_LIST"] == "9.0;8.9"
    assert "PYTORCH_ROCM_ARCH" not in plan.env


def test_no_gpu_uses_the_profile_archs(tmp_path: Path) -> None:
    plan = make_plan(RDNA4, facts_of(make_cpu_only(tmp_path)), env=NO_ENV)
    assert plan.archs == ["gfx1201", "gfx1200"] and "no GPU detected" in plan.arch_reason
    assert plan.env["PYTORCH_ROCM_ARCH"] == "gfx1201;gfx1200"


def test_arch_option_overrides_and_is_validated(tmp_path: Path) -> None:
    facts = facts_of(make_rdna4_native(tmp_path))
    plan = make_plan(RDNA4, facts, arch="gfx1100, gfx1201;gfx1100", env=NO_ENV)
    assert plan.archs == ["gfx1100", "gfx1201"] and "--arch" in plan.arch_reason
    assert parse_arch_list("9.0 sm_89", "cuda") == ["sm90", "sm89"]
    with pytest.raises(SagebuildError, match="cuda arch but the profile is for rocm"):
        make_plan(RDNA4, facts, arch="sm90", env=NO_ENV)
    with pytest.raises(SagebuildError, match="unknown GPU arch"):
        make_plan(RDNA4, facts, arch="gfx9999", env=NO_ENV)


def test_cpu_profile_builds_cpu_only(tmp_path: Path) -> None:
    plan = make_plan(CPU, facts_of(make_rdna4_native(tmp_path)), env=NO_ENV)
    assert not plan.with_gpu and plan.archs == [] and plan.aot == []
    assert set(plan.env) == {"MAX_JOBS"}
    assert [Path(s).name for s in plan.sources] == ["ops_cpu.cpp"]
    assert plan.problems == []


def test_paths_follow_the_env_override(tmp_path: Path) -> None:
    plan = make_plan(CPU, mem(8.0), env={"SAGEBUILD_EXT_DIR": str(tmp_path / "ext")})
    assert plan.ext_dir == str(tmp_path / "ext")
    assert plan.output == str(tmp_path / "ext" / "current" / "sagebuild_ext.so")
    d = plan.to_dict()
    assert d["commands"][0].startswith("MAX_JOBS=")
    json.dumps(d)


def test_source_needs_a_setup_py(tmp_path: Path) -> None:
    with pytest.raises(SagebuildError, match="no setup.py"):
        make_plan(CPU, mem(8.0), source=tmp_path, env=NO_ENV)


# ---- the CLI ------------------------------------------------------------------------------------


def test_cli_dry_run_from_a_fake_rdna4_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sagebuild.cli.app import app

    root = make_rdna4_native(tmp_path)
    monkeypatch.setenv("SAGEBUILD_EXT_DIR", str(tmp_path / "ext"))
    res = CliRunner().invoke(
        app, ["compile", "--profile", "rdna4-rocm6", "--root", str(root), "--dry-run", "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["dry_run"] is True
    assert doc["plan"]["env"]["PYTORCH_ROCM_ARCH"] == "gfx1201"
    assert doc["plan"]["jobs"] == 6
    assert not (tmp_path / "ext" / "current").exists()  # nothing was built


def test_cli_cpu_profile_ignores_arch(tmp_path: Path) -> None:
    from sagebuild.cli.app import app

    res = CliRunner().invoke(
        app,
        [
            "compile",
            "--profile",
            "cpu",
            "--root",
            str(make_cpu_only(tmp_path)),
            "--arch",
            "sm90",
            "--dry-run",
        ],
    )
    assert res.exit_code == 0  # a CPU profile ignores --arch, and says so
    assert "ignored" in res.output


def test_cli_warns_about_max_jobs_that_overfill_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``MAX_JOBS=100000 sagebuild compile`` warns as ``doctor`` does, and keeps the user's count."""
    from sagebuild.cli.app import app

    monkeypatch.setenv("SAGEBUILD_EXT_DIR", str(tmp_path / "ext"))
    monkeypatch.setenv("MAX_JOBS", "100000")
    res = CliRunner().invoke(
        app, ["compile", "--profile", "cpu", "--root", str(make_cpu_only(tmp_path)), "--dry-run"]
    )
    assert res.exit_code == 0, res.output
    err = " ".join(res.stderr.split())
    assert "warning: MAX_JOBS=100000 × ~" in err and "the machine can freeze while compiling" in err
    assert "export MAX_JOBS=" in err and "MAX_JOBS=100000" in res.stdout  # the plan table, on stdout
    res = CliRunner().invoke(
        app,
        [
            "compile",
            "--profile",
            "cpu",
            "--root",
            str(make_cpu_only(tmp_path)),
            "--dry-run",
            "--jobs",
            "100000",
            "--json",
        ],
    )
    doc = json.loads(res.stdout)
    assert any(w.startswith("--jobs 100000 × ~") and "pass --jobs" in w for w in doc["plan"]["warnings"])


def test_plan_is_quiet_about_jobs_it_chose(tmp_path: Path) -> None:
    plan = make_plan(RDNA4, facts_of(make_rdna4_native(tmp_path)), env=NO_ENV)
    assert not any("freeze" in w for w in plan.warnings)


def test_arch_of_device_properties() -> None:
    """What ``torch.cuda.get_device_properties`` reports → the arch table's name, for the runtime
    dispatch and the extension's arch check alike (one home: ``archs.of_device_properties``)."""
    from types import SimpleNamespace

    from sagebuild.archs import of_device_properties

    assert of_device_properties(SimpleNamespace(major=9, minor=0, gcnArchName=""), hip=False) == "sm90"
    rdna4 = SimpleNamespace(major=12, minor=0, gcnArchName="gfx1201:sramecc-:xnack-")
    assert of_device_properties(rdna4, hip=True) == "gfx1201"
    assert of_device_properties(SimpleNamespace(major=9, minor=4), hip=True) == ""  # no name reported


def test_verify_library_fails_a_report_followed_by_a_hang(tmp_path) -> None:
    """A verifying interpreter that prints a passing report and then hangs fails the build (a
    library that hangs its process at exit is not verified); one that exits with it passes."""
    from sagebuild.build import run

    def fake_python(name: str, tail: str) -> str:
        exe = tmp_path / name
        exe.write_text(f"#!/bin/sh\necho 'SAGEBUILD_VERIFY {{\"ok\": true}}'\n{tail}\n")
        exe.chmod(0o755)
        return str(exe)

    ok, report = run.verify_library(fake_python("hangs", "sleep 30"), tmp_path / "x.so", False, timeout=1)
    assert not ok and "took more than 1 s" in report["error"], report
    ok, report = run.verify_library(fake_python("exits", "exit 0"), tmp_path / "x.so", False, timeout=10)
    assert ok and report == {"ok": True}
