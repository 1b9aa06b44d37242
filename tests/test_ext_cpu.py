"""The bundled extension's CPU variant, built for real with ninja once per session.

Checks the ops against a plain-torch reimplementation of the quantization contract, the fake
(meta) implementations, loading in a fresh interpreter, the atomic install, the OOM retry and
the ``--source`` artefact check.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from sagebuild import ext, profiles
from sagebuild.attention.reference import quant_int8_blocks, quant_v_fp8
from sagebuild.build import paths
from sagebuild.build.plan import make_plan
from sagebuild.build.result import looks_like_oom
from sagebuild.build.run import compile as run_compile
from sagebuild.fsio import sha256_file
from sagebuild.probe.facts import Facts, PythonFacts, SystemFacts, TorchFacts

CPU = profiles.load_bundled("cpu")
LOG2E = 1.4426950408889634


def local_facts() -> Facts:
    return Facts(
        system=SystemFacts(mem_available_gb=8.0, cpu_count=os.cpu_count() or 2),
        python=PythonFacts(executable=sys.executable, version=sys.version.split()[0]),
        torch=TorchFacts(importable=True, version=torch.__version__, build="cpu"),
    )


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Build the CPU extension once into a session ext dir and point the runtime loader at it."""
    ext_dir = tmp_path_factory.mktemp("ext")
    env = {"SAGEBUILD_EXT_DIR": str(ext_dir)}
    plan = make_plan(CPU, local_facts(), env=env)
    res = run_compile(plan, ext_dir / "build.log", progress=False)
    assert res.ok, f"{res.error}\n" + "\n".join(res.key_lines)
    mp = pytest.MonkeyPatch()
    mp.setenv("SAGEBUILD_EXT_DIR", str(ext_dir))
    yield {"dir": ext_dir, "plan": plan, "result": res, "env": env}
    mp.undo()


@pytest.fixture(scope="session")
def ops(built: dict[str, Any]) -> Any:
    q = ext.get_quant_ops("cpu")
    assert q is not None, ext.unavailable_reason("cpu")
    return q


# ---- the contract, as the golden model states it -----------------------------------------------


def ref_quant_int8(x: torch.Tensor, km: torch.Tensor | None, blk: int, mul: float):
    y = x.float() - km if km is not None else x.float()
    q, step = quant_int8_blocks(y, blk)
    return q.to(torch.int8), step * mul


def ref_quant_v(v: torch.Tensor, fnuz: bool):
    dt = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    codes, scale = quant_v_fp8(v.float(), dt)
    return codes.to(dt), scale


def bhnd(b: int, h: int, n: int, d: int, dtype: torch.dtype, layout: str, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if layout == "NHD":  # a transposed view, as the attention API passes NHD inputs
        return (torch.randn(b, n, h, d, generator=g) * 2 + 0.5).to(dtype).transpose(1, 2)
    return (torch.randn(b, h, n, d, generator=g) * 2 + 0.5).to(dtype)


# ---- the build ----------------------------------------------------------------------------------


def test_build_records_verified_metadata(built: dict[str, Any]) -> None:
    res = built["result"]
    lib = Path(res.artefact)
    assert lib == paths.current_lib(built["dir"]) and lib.is_file()
    assert res.sha256 == sha256_file(lib)
    info = json.loads(paths.current_info(built["dir"]).read_text())
    assert info["sha256"] == res.sha256
    assert info["torch"]["version"] == torch.__version__
    assert info["ops"] == ["k_mean", "quant_per_block_int8", "quant_v_fp8_per_channel"]
    assert info["dispatch_keys"] == ["CPU"] and info["archs"] == [] and info["jobs"] == res.jobs
    assert info["compilers"]["c++"] and info["python"]["executable"] == sys.executable
    assert "[1/2]" in Path(res.log_path).read_text() or "ninja" in Path(res.log_path).read_text()
    assert ext.build_info() == info


def test_a_second_build_in_the_same_process_is_refused_not_mixed_up(
    ops: Any, built: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch cannot unload an op library: once one build is loaded, pointing the process at
    another build (here a copy, so another file) must say "restart", not hand out the old ops."""
    import shutil

    other = tmp_path / "other-ext"
    shutil.copytree(built["dir"], other, symlinks=True)
    monkeypatch.setenv("SAGEBUILD_EXT_DIR", str(other))
    assert ext.get_quant_ops("cpu") is None
    reason = ext.unavailable_reason("cpu")
    assert "restart" in reason and str(other) in reason
    monkeypatch.setenv("SAGEBUILD_EXT_DIR", str(built["dir"]))
    assert ext.get_quant_ops("cpu") is not None


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_k_mean_and_k_quant_match_the_contract(ops: Any, dtype: torch.dtype, layout: str) -> None:
    k = bhnd(2, 3, 100, 64, dtype, layout, seed=1)  # 100 tokens: a partial last block
    km = ops.k_mean(k)
    assert km.shape == (2, 3, 1, 64) and km.dtype == torch.float32
    torch.testing.assert_close(km, k.float().mean(dim=2, keepdim=True), atol=1e-5, rtol=1e-5)
    q, s = ops.quant_per_block_int8(k, km, 64, 1.0)
    rq, rs = ref_quant_int8(k, km, 64, 1.0)
    assert q.shape == (2, 3, 100, 64) and q.dtype == torch.int8 and q.is_contiguous()
    assert s.shape == (2, 3, 2) and s.dtype == torch.float32
    assert torch.equal(q, rq)
    assert torch.equal(s, rs)


@pytest.mark.parametrize("blk", [128, 32, 16])
def test_q_quant_folds_the_softmax_scale(ops: Any, blk: int) -> None:
    q = bhnd(1, 4, 257, 128, torch.float16, "NHD", seed=2)
    mul = 128**-0.5 * LOG2E
    x, s = ops.quant_per_block_int8(q, None, blk, mul)
    rx, rs = ref_quant_int8(q, None, blk, mul)
    assert s.shape == (1, 4, math.ceil(257 / blk))
    assert torch.equal(x, rx)
    torch.testing.assert_close(s, rs, rtol=0, atol=0)
    # dequantized values reproduce the input to within half a quantization step
    deq = x.float() * (s / mul).repeat_interleave(blk, dim=2)[:, :, :257, None]
    assert (deq - q.float()).abs().max() <= (s / mul).max() * 0.5 + 1e-6


def test_all_zero_block_gives_finite_scales(ops: Any) -> None:
    x = torch.zeros(1, 1, 70, 64, dtype=torch.float16)
    q, s = ops.quant_per_block_int8(x, None, 64, 1.0)
    assert torch.count_nonzero(q) == 0 and torch.isfinite(s).all() and (s > 0).all()
    v8, vs = ops.quant_v_fp8_per_channel(x, False)
    assert torch.isfinite(vs).all() and torch.count_nonzero(v8.view(torch.uint8)) == 0


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_nonfinite_values_give_nan_scales_not_numbers(ops: Any, value: float) -> None:
    """As the Triton kernels (issue 60): a K block or V channel holding inf/NaN gets a NaN scale
    (fmaxf would drop a NaN and quantize it into a number); the other blocks and channels, and
    K's mean (0 in the bad channel), stay finite."""
    x = bhnd(1, 2, 130, 64, torch.float16, "HND", seed=5)
    x[0, 1, 70, 3] = value
    km = ops.k_mean(x)
    assert km[0, 1, 0, 3] == 0 and torch.isfinite(km).all()
    _, s = ops.quant_per_block_int8(x, km, 64, 1.0)
    assert s[0, 1, 1].isnan() and torch.isfinite(s[0, 0]).all() and torch.isfinite(s[0, 1, ::2]).all()
    _, vs = ops.quant_v_fp8_per_channel(x, False)
    assert vs[0, 1, 3].isnan() and vs.isnan().sum() == 1


@pytest.mark.parametrize("fnuz", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_v_fp8_per_channel_matches_torch_rounding(ops: Any, fnuz: bool, dtype: torch.dtype) -> None:
    v = bhnd(2, 2, 90, 64, dtype, "NHD", seed=3) * 30
    v8, vs = ops.quant_v_fp8_per_channel(v, fnuz)
    rv, rs = ref_quant_v(v, fnuz)
    assert v8.dtype == rv.dtype and v8.shape == (2, 2, 90, 64) and vs.shape == (2, 2, 64)
    # channel-major: physical [B, H, D, N] (tokens contiguous) behind the logical [B, H, N, D] view
    assert v8.stride() == (2 * 64 * 90, 64 * 90, 1, 90)
    assert v8.transpose(-1, -2).is_contiguous()
    torch.testing.assert_close(vs, rs, rtol=0, atol=0)
    assert torch.equal(v8.view(torch.uint8), rv.view(torch.uint8))  # bit-exact RNE, saturating


def test_fp8_encoder_edge_values(ops: Any) -> None:
    # one channel whose amax is 448 → scale 1: the values are encoded as they are
    vals = torch.tensor(
        [
            448.0,
            -448.0,
            0.0,
            2.0**-9,
            2.0**-10,
            3 * 2.0**-10,
            1.0625,
            1.1875,
            240.0,
            232.0,
            447.0,
            1e-12,
            -17.5,
            0.013671875,
        ]
    )
    v8, vs = ops.quant_v_fp8_per_channel(vals.reshape(1, 1, -1, 1), False)
    assert vs.item() == 1.0 and v8.stride(-2) == 1
    expect = vals.to(torch.float8_e4m3fn)
    assert torch.equal(v8.view(torch.uint8).flatten(), expect.view(torch.uint8))


def test_ops_reject_bad_inputs(ops: Any) -> None:
    with pytest.raises(RuntimeError, match="4-D"):
        ops.k_mean(torch.zeros(3, 4, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="float16, bfloat16 or float32"):
        ops.k_mean(torch.zeros(1, 1, 4, 4, dtype=torch.int32))
    k = torch.zeros(1, 2, 8, 16, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="km must be"):
        ops.quant_per_block_int8(k, torch.zeros(1, 1, 1, 16), 64, 1.0)


def test_fake_impls_support_torch_compile(ops: Any) -> None:
    k = bhnd(1, 2, 40, 32, torch.float16, "HND", seed=4)
    km = ops.k_mean(k)
    for op, args in [
        (torch.ops.sagebuild.k_mean.default, (k,)),
        (torch.ops.sagebuild.quant_per_block_int8.default, (k, km, 16, 0.5)),
        (torch.ops.sagebuild.quant_per_block_int8.default, (k, None, 16, 0.5)),
        (torch.ops.sagebuild.quant_v_fp8_per_channel.default, (k, True)),
    ]:
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor"))

    def pre(q: torch.Tensor, kk: torch.Tensor):
        m = torch.ops.sagebuild.k_mean(kk)
        return torch.ops.sagebuild.quant_per_block_int8(q, None, 16, 2.0)[
            1
        ], torch.ops.sagebuild.quant_per_block_int8(kk, m, 16, 1.0)[0]

    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:  # the fake V codes have the real op's channel-major strides
        fake8, _ = torch.ops.sagebuild.quant_v_fp8_per_channel(mode.from_tensor(k), False)
    assert fake8.shape == k.shape and fake8.stride() == ops.quant_v_fp8_per_channel(k, False)[0].stride()

    compiled = torch.compile(pre, backend="eager", fullgraph=True)
    got = compiled(k, k)
    want = pre(k, k)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_get_quant_ops_is_none_for_devices_without_kernels(ops: Any) -> None:
    assert ext.get_quant_ops("meta") is None
    assert "no kernels for meta" in ext.unavailable_reason("meta")
    assert ext.unavailable_reason("cpu") is None


# ---- fresh interpreters -------------------------------------------------------------------------


def _py(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=120,
    )


def test_loads_in_a_fresh_interpreter(built: dict[str, Any]) -> None:
    out = _py(
        """
        import torch
        from sagebuild import ext
        ops = ext.get_quant_ops("cpu")
        k = torch.ones(1, 1, 4, 8, dtype=torch.float16)
        print(ops is not None, float(ops.k_mean(k).sum()), ext.build_info()["sha256"])
    """,
        built["env"],
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "8.0", built["result"].sha256]


def test_a_broken_or_foreign_build_is_explained_not_raised(built: dict[str, Any], tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    corrupt = tmp_path / "corrupt"
    for d in (foreign, corrupt):
        (d / "builds" / "x").mkdir(parents=True)
        src = paths.current_dir(built["dir"]).resolve()
        for f in (paths.LIB_FILE, paths.INFO_FILE):
            (d / "builds" / "x" / f).write_bytes((src / f).read_bytes())
        os.symlink("builds/x", d / "current")
    info = json.loads((foreign / "builds/x" / paths.INFO_FILE).read_text())
    info["torch"] = {"version": "2.0.1+cu118", "cuda": "11.8", "hip": None}
    (foreign / "builds/x" / paths.INFO_FILE).write_text(json.dumps(info))
    with open(corrupt / "builds/x" / paths.LIB_FILE, "ab") as f:
        f.write(b"garbage")
    out = _py(
        f"""
        import os, sagebuild, torch
        from sagebuild import ext
        for d in ({str(foreign)!r}, {str(corrupt)!r}):
            os.environ["SAGEBUILD_EXT_DIR"] = d
            print(ext.get_quant_ops("cpu") is None, "|", ext.unavailable_reason("cpu"))
    """,
        {},
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.strip().splitlines()
    assert first.startswith("True |")
    assert "built for torch 2.0.1+cu118 with CUDA 11.8, you have torch" in first
    assert second.startswith("True |") and "sha256" in second


# ---- atomic install ----------------------------------------------------------------------------


def test_failed_build_leaves_the_working_one(built: dict[str, Any], tmp_path: Path) -> None:
    base = built["dir"]
    before_target = os.readlink(paths.current_dir(base))
    before_sha = sha256_file(paths.current_lib(base))
    broken = tmp_path / "broken.cpp"
    broken.write_text("int sagebuild_broken() { return this_symbol_does_not_exist; }\n")
    plan = dataclasses.replace(built["plan"], sources=[*built["plan"].sources, str(broken)])
    res = run_compile(plan, tmp_path / "fail.log", progress=False)
    assert not res.ok
    assert any("this_symbol_does_not_exist" in ln for ln in res.key_lines)
    assert os.readlink(paths.current_dir(base)) == before_target
    assert sha256_file(paths.current_lib(base)) == before_sha
    assert not list(base.glob("staging-*"))
    assert not (Path(plan.build_dir) / paths.LIB_FILE).exists()  # no half-built module left to import


def test_problems_stop_the_build_before_it_starts(tmp_path: Path) -> None:
    facts = local_facts()
    facts.torch = TorchFacts(importable=False, error="No module named 'torch'")
    plan = make_plan(CPU, facts, env={"SAGEBUILD_EXT_DIR": str(tmp_path)})
    res = run_compile(plan, tmp_path / "x.log", progress=False)
    assert not res.ok and "torch is not importable" in res.error
    assert not paths.current_dir(tmp_path).exists()


# ---- external trees (--source) and the OOM retry ------------------------------------------------


def _tree(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "tree"
    (d / "pkg").mkdir(parents=True)
    (d / "setup.py").write_text(textwrap.dedent(body))
    return d


def test_source_without_a_so_is_a_failure(tmp_path: Path) -> None:
    tree = _tree(
        tmp_path,
        """
        print("running build_ext")
        print("skipping 'sageattention._qattn' extension: no CUDA found")
    """,
    )
    plan = make_plan(CPU, local_facts(), source=tree, env={"SAGEBUILD_EXT_DIR": str(tmp_path / "e")})
    res = run_compile(plan, tmp_path / "s.log", progress=False)
    assert not res.ok and "no extension file" in res.error
    assert any("skipping" in ln for ln in res.key_lines) or "no extension file" in " ".join(res.key_lines)


def test_source_oom_is_retried_with_half_the_jobs(tmp_path: Path) -> None:
    tree = _tree(
        tmp_path,
        """
        import os, pathlib, signal
        here = pathlib.Path(__file__).parent
        with open(here / "jobs.txt", "a") as f:
            f.write(os.environ["MAX_JOBS"] + " " + os.environ.get("FAKE_ARCH_SEEN", "") + "\\n")
        if not (here / "attempted").exists():
            (here / "attempted").touch()
            print("c++: fatal error: Killed signal terminated program cc1plus", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        (here / "pkg" / "_qattn.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\\x7fELF fake")
    """,
    )
    plan = make_plan(CPU, local_facts(), jobs=4, source=tree, env={"SAGEBUILD_EXT_DIR": str(tmp_path / "e")})
    res = run_compile(plan, tmp_path / "o.log", progress=False)
    assert res.ok, res.error
    assert res.retried_with_half_jobs and res.jobs == 2
    assert [ln.split()[0] for ln in (tree / "jobs.txt").read_text().splitlines()] == ["4", "2"]
    assert res.artefacts == [
        {"path": str(tree / "pkg/_qattn.cpython-311-x86_64-linux-gnu.so"), "sha256": res.sha256}
    ]
    assert "retrying once with MAX_JOBS=2" in Path(res.log_path).read_text()


def test_oom_signatures() -> None:
    assert looks_like_oom(-9, "")
    assert looks_like_oom(1, "g++: fatal error: Killed signal terminated program cc1plus")
    assert looks_like_oom(1, "virtual memory exhausted: Cannot allocate memory")
    assert not looks_like_oom(1, "ops.cpp:3:10: error: 'foo' was not declared in this scope")


def test_cli_source_failure_exits_20(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from sagebuild.cli.app import app

    tree = _tree(tmp_path, "print('nothing to build')\n")
    monkeypatch.setenv("SAGEBUILD_EXT_DIR", str(tmp_path / "e"))
    res = CliRunner().invoke(
        app,
        ["compile", "--profile", "cpu", "--source", str(tree), "--json", "--log", str(tmp_path / "cli.log")],
    )
    assert res.exit_code == 20, res.output
    doc = json.loads(res.stdout)
    assert doc["result"]["ok"] is False and "no extension file" in doc["result"]["error"]
    assert (tmp_path / "cli.log").is_file()


def test_ops_agree_with_the_golden_models_quantization(ops: Any) -> None:
    """Same int8 values (up to one rounding step) and scales (to fp32 rounding) as the golden model."""
    reference = pytest.importorskip("sagebuild.attention.reference")
    k = bhnd(2, 2, 300, 64, torch.bfloat16, "NHD", seed=5)
    km = ops.k_mean(k)
    q, s = ops.quant_per_block_int8(k, km, 64, 1.0)
    gq, gs = reference.quant_int8_blocks(k.float() - k.float().mean(dim=2, keepdim=True), 64)
    assert (q.float() - gq).abs().max() <= 1
    assert (q.float() != gq).float().mean() < 1e-3
    torch.testing.assert_close(s, gs, rtol=1e-6, atol=0)
    for fnuz, dt in ((False, torch.float8_e4m3fn), (True, torch.float8_e4m3fnuz)):
        v8, vs = ops.quant_v_fp8_per_channel(k, fnuz)
        assert v8.stride(-2) == 1  # channel-major
        gv, gvs = reference.quant_v_fp8(k.float(), dt)
        torch.testing.assert_close(vs, gvs, rtol=1e-6, atol=0)
        assert torch.equal(v8.float(), gv)


def test_triton_aot_step_checks_each_variant_and_arch(built: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("sagebuild.attention.aot")
    pairs = [("qk_int8_pv_fp16", "gfx1201"), ("no_such_variant", "gfx1201")]
    plan = dataclasses.replace(built["plan"], aot=pairs)
    res = run_compile(plan, tmp_path / "aot.log", progress=False)
    assert not res.ok and "no_such_variant@gfx1201" in res.error
    good, bad = res.aot
    assert good["ok"] is True and good["instruction"] == "v_wmma_i32_16x16x16_iu8"
    assert bad["ok"] is False and "no_such_variant" in res.key_lines[0]
    assert paths.current_lib(built["dir"]).is_file()  # the extension itself still built and installed


def test_extension_cache_is_keyed_by_environment(tmp_path):
    """Two venvs with the same Python and torch get two extension directories (issue 37.5); the
    build plan, the probe and the runtime loader name the same one for one environment."""
    import sys

    from sagebuild.build import paths

    env = {"SAGEBUILD_CACHE_DIR": str(tmp_path)}
    a = paths.ext_dir("2.13.0+cpu", "3.12.1", env, prefix="/venvs/a")
    b = paths.ext_dir("2.13.0+cpu", "3.12.1", env, prefix="/venvs/b")
    assert a != b and a.parent == b.parent == tmp_path / "ext"
    assert a.name.startswith("cp312-torch2.13.0+cpu-")
    assert paths.ext_dir("2.13.0+cpu", "3.12.1", env, prefix="/venvs/a") == a
    assert paths.ext_dir("2.13.0+cpu", None, env) == paths.ext_dir("2.13.0+cpu", None, env, prefix=sys.prefix)
    # SAGEBUILD_EXT_DIR still names the directory outright
    assert (
        paths.ext_dir("2.13.0+cpu", env={"SAGEBUILD_EXT_DIR": str(tmp_path / "x")}, prefix="/a")
        == tmp_path / "x"
    )


def test_extension_directory_key_is_unchanged(tmp_path, monkeypatch):
    """The key existing builds were made under: sha256 of prefix, torch version, two empty fields
    (the retired CUDA/HIP ones) and the sources' hash; a changed formula orphans every build."""
    from sagebuild.build import paths

    monkeypatch.setattr(paths, "sources_hash", lambda: "0" * 64)
    got = paths.ext_dir("2.13.0+cpu", "3.12.1", {"SAGEBUILD_CACHE_DIR": str(tmp_path)}, prefix="/venvs/a")
    assert got.name == "cp312-torch2.13.0+cpu-fe54c9d9aed4"


def test_probe_and_plan_agree_on_this_environment_s_directory(tmp_path, monkeypatch):
    from sagebuild import probe
    from sagebuild.build import paths

    monkeypatch.delenv("SAGEBUILD_EXT_DIR", raising=False)
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))
    facts = probe.collect()
    assert facts.python.prefix
    import torch

    assert facts.extension.dir == str(paths.ext_dir(facts.torch.version, facts.python.version, None,
                                                    facts.python.prefix))  # fmt: skip
    assert facts.extension.dir == str(paths.running_ext_dir()) or torch.__version__ != facts.torch.version


@pytest.mark.parametrize("variant", ["qk_int8_pv_fp16", "qk_int8_pv_fp8"])
def test_attention_with_the_extensions_quantization_matches_tritons(
    ops: Any, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``quantization_backend="ext"``: the extension prepares K (and FP8 V, channel-major) in the
    layout the attention kernel reads, so the call agrees with Triton's pre-processing (the
    interpreter runs the kernel on CPU tensors). A repeated call (the cached plan) agrees too."""
    from sagebuild import attention
    from sagebuild.attention import api
    from sagebuild.attention.metrics import accuracy

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs a GPU or the Triton interpreter")
    fn = getattr(attention, f"sageattn_{variant}_triton")
    q, k, v = (bhnd(1, 2, 160, 64, torch.float16, "HND", seed=s) for s in (1, 2, 3))
    tri = fn(q, k, v, quantization_backend="triton")
    api.clear_caches()
    # the ops this process loaded (a later build in this session would be refused, rightly)
    monkeypatch.setitem(api._EXT_OPS, q.device, ops)
    first = fn(q, k, v, quantization_backend="ext")
    again = fn(q, k, v, quantization_backend="ext")
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float())
    for out in (first, again):
        assert out.shape == q.shape and out.dtype == q.dtype and torch.isfinite(out).all()
        torch.testing.assert_close(out.float(), tri.float(), atol=2e-3, rtol=0)
    acc = accuracy(first, ref)  # INT8 Q·Kᵀ on scores of std ~8: quantization error, not a layout bug
    assert acc["cos"] > 0.999 and acc["rel_l1"] < 0.04, acc  # the FP8 bounds (docs/performance.md)
