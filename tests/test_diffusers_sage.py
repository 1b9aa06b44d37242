"""diffusers' sage attention backends on our ``sageattention``: a tiny FluxTransformer2DModel
(random weights) under ``attention_backend("sage")`` and friends against the native backend.

diffusers enables its sage backends at import when a distribution named ``sageattention`` >=
2.1.1 is installed; the test writes ours (the files ``sagebuild compat install`` writes) into a
folder on the child interpreter's path, so nothing is installed into this environment. Skipped
when diffusers is not installed (it is a pure-Python wheel: ``pip install diffusers``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sagebuild.compat import contents

HERE = Path(__file__).parent
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("diffusers") is None, reason="diffusers is not installed (pip install diffusers)"
)


def _run(tmp_path: Path, device: str, dtype: str, size: int) -> dict:
    files = contents.files()
    files[f"{contents.DIST_INFO}/RECORD"] = contents.record(files)
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run(
        [sys.executable, str(HERE / "diffusers_sage_run.py"), device, dtype, str(size)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(doc: dict, bounds: dict) -> None:
    assert doc["can_use_sage"], "diffusers did not enable its sage backends"
    for name, acc in doc["backends"].items():
        cos, rel = bounds["fp8" if "fp8" in name else "fp16"]
        assert acc["finite"] and acc["cos"] >= cos and acc["rel_l1"] <= rel, (name, acc)
        assert sum(acc["kernel_calls"].values()) >= 2, (name, acc)  # both attention layers reached us
    assert doc["backends"]["sage_varlen"]["kernel_calls"]["varlen"] >= 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter variant (a GPU is present)")
def test_diffusers_flux_sage_backends_cpu_interpreter(tmp_path):
    doc = _run(tmp_path, "cpu", "bfloat16", 64)
    _check(doc, {"fp16": (0.999, 0.02), "fp8": (0.998, 0.05)})


@pytest.mark.gpu
def test_diffusers_flux_sage_backends_gpu(tmp_path):
    doc = _run(tmp_path, "cuda", "bfloat16", 1024)
    print(json.dumps(doc, indent=1))
    _check(doc, {"fp16": (0.999, 0.025), "fp8": (0.998, 0.05)})


def test_bench_diffusers_times_a_wan_forward_on_our_kernels_cpu(tmp_path):
    """scripts/bench_diffusers.py (issue 36's end-to-end rerun) on a tiny Wan config under the
    interpreter: both backends run, every self- and cross-attention call of the sage forward
    reaches our kernels, and its output matches native (the timing itself is the GPU's job)."""
    if torch.cuda.is_available():
        pytest.skip("interpreter variant (a GPU is present: gpu_check.sh's bench stage runs the script)")
    out = tmp_path / "wan.json"
    argv = ["--device", "cpu", "--layers", "2", "--latent", "1x8x8", "--text-len", "8", "--heads", "2",
            "--head-dim", "64", "--ffn", "64", "--text-dim", "32", "--rounds", "1",
            "--json", str(out)]  # fmt: skip
    code = (
        f"import sys, runpy; sys.path.insert(0, {str(HERE)!r}); import conftest; "
        f"sys.argv = ['bench_diffusers.py', *{argv!r}]; "
        f"runpy.run_path({str(HERE.parent / 'scripts' / 'bench_diffusers.py')!r}, run_name='__main__')"
    )
    env = os.environ | {"TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["kernel_calls_per_forward"] == {"dense": 4, "varlen": 0}, doc  # 2 blocks x (self + cross)
    assert doc["finite"] and doc["cos"] >= 0.999 and doc["rel_l1"] <= 0.02, doc
    assert doc["ms"]["sage"] > 0 and doc["ms"]["native"] > 0 and doc["ratio"] > 0
