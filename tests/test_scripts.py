"""The maintainers' rerun scripts parse what their docstrings promise (no GPU needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent.parent / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("1x16x1024x64", (1, 16, 1024, 64, 1024, False)),
        ("2x32x4096x128c", (2, 32, 4096, 128, 4096, True)),
        ("1x40x32760:512x128", (1, 40, 32760, 128, 512, False)),
        ("2x10x4096:77x64c", (2, 10, 4096, 64, 77, True)),
    ],
)
def test_tune_attention_shapes_name_query_and_key_tokens(spec, parsed):
    """The scripts take ``sagebuild bench``'s shape keys (``profiles.parse_shape_key``)."""
    assert _load("tune_attention").parse_shape(spec) == parsed


@pytest.mark.parametrize("bad", ["1x16x1024", "1x40x32760x128k512", "2x10x4096:x64", "1x32/8x4096x128"])
def test_tune_attention_refuses_other_shapes_naming_the_forms(bad):
    with pytest.raises(ValueError, match="shape"):
        _load("tune_attention").parse_shape(bad)


def test_bench_diffusers_refuses_honestly_without_a_gpu(capsys):
    """On a CPU box the end-to-end bench says why it times nothing and exits 2."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert _load("bench_diffusers").main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out
