"""The callers of 2026 against the ``sageattention`` that ``sagebuild compat install`` installs,
each in a fresh interpreter of a throwaway venv (``test_compat``'s): ComfyUI's mask detection,
KJNodes' and LightX2V's imports of upstream's internals. Each test names the caller's file."""

from __future__ import annotations

import subprocess

import pytest
from test_compat import _json, _sagebuild, venv  # noqa: F401  (venv: the module's fixture)


@pytest.fixture(scope="module")
def installed(venv, tmp_path_factory):  # noqa: F811
    cache = tmp_path_factory.mktemp("compat-cache")
    _json(_sagebuild(venv, "install", "--json", cache=cache))
    yield venv
    _sagebuild(venv, "remove", "--json", cache=cache)


def _run(py, code: str, tmp_path) -> str:
    out = subprocess.run([py, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_comfyui_detects_mask_support(installed, tmp_path):
    """comfyanonymous/ComfyUI comfy/ldm/modules/attention.py: ``SAGE_ATTENTION_SUPPORTS_MASK =
    "attn_mask" in inspect.signature(sageattn).parameters``; masked calls reach ``sageattn`` only
    when it is True. Upstream's positional parameters are unchanged."""
    code = (
        "import inspect\n"
        "from sageattention import sageattn\n"
        "print('attn_mask' in inspect.signature(sageattn).parameters)\n"
        "print(' '.join(p.name for p in inspect.signature(sageattn).parameters.values()\n"
        "               if p.kind is p.POSITIONAL_OR_KEYWORD))\n"
    )
    lines = _run(installed, code, tmp_path).splitlines()
    assert lines == ["True", "q k v tensor_layout is_causal sm_scale return_lse"]
