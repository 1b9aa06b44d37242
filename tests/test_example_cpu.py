"""examples/hf_llama_patch.py runs on CPU (patch passes everything through) and, with a fake
GPU backend, sends every transformers attention call through the accelerate path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("transformers", exc_type=ImportError)  # missing, or broken by its deps

from sagebuild import patch  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "hf_llama_patch.py"
TINY = [
    "--device",
    "cpu",
    "--layers",
    "1",
    "--seq",
    "20",
    "--hidden",
    "64",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--vocab",
    "97",
    "--new-tokens",
    "3",
]


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("hf_llama_patch", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_run_passes_everything_through(example, capsys):
    assert example.main([*TINY, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    stats = result["patch_stats"]
    # 1 prompt forward + 2 generate runs (warm-up, timed) × 3 steps, 1 SDPA call per layer each
    assert stats["total"] == 7
    assert stats["accelerated"] == 0
    assert stats["reasons"] == {"cpu tensors (needs CUDA/HIP)": 7}
    assert result["logits_cosine"] == pytest.approx(1.0, abs=1e-6)
    assert result["token_agreement"] == 1.0
    assert result["dtype"] == "float32" and result["model"]["head_dim"] == 16
    assert not patch.is_active()


def test_transformers_calls_reach_the_accelerate_path(example, monkeypatch):
    """transformers looks SDPA up at call time: with CPU posing as a GPU the prefill call is
    taken (causal, GQA) and the decode steps (one query row) go to SDPA, with their reason."""
    seen = []

    def kernel(q, k, v, is_causal, sm_scale, support):
        seen.append((q.shape[2], k.shape[2], q.shape[1], k.shape[1], is_causal))
        g = q.shape[1] // k.shape[1]
        return patch._call_original(
            q.float(),
            k.float().repeat_interleave(g, 1),
            v.float().repeat_interleave(g, 1),
            None,
            0.0,
            is_causal,
            sm_scale,
            False,
        )

    support = patch.DeviceSupport("fake", "fp16", lambda d: d <= 128)
    monkeypatch.setattr(patch, "_backend", patch._Backend(lambda dev: support, kernel, ("cpu",)))
    result = example.run([*TINY, "--dtype", "bfloat16"])
    stats = result["patch_stats"]
    decode = (
        f"q_len 1 < {patch.MIN_Q_LEN} (decode: quantizing all keys for a few queries is slower than SDPA)"
    )
    assert stats["accelerated"] >= 1 and stats["passed_through"] >= 2
    assert stats["accelerated"] + stats["passed_through"] == stats["total"] == 7
    assert set(seen) == {(20, 20, 4, 2, True)}  # prompt passes: causal, 4 query heads over 2 KV heads
    assert stats["reasons"] == {decode: stats["passed_through"]}  # every decode step went to SDPA
    assert result["logits_cosine"] > 0.999
