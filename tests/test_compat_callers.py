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


def test_every_upstream_internal_module_imports(installed, tmp_path):
    """Each module ``sagebuild compat install`` writes for upstream's internal names imports, and
    each name is a callable of ours (the list: ``sagebuild.upstream_api``)."""
    code = (
        "import importlib\n"
        "from sagebuild.upstream_api import CORE_NAMES, INTERNAL_MODULES, UPSTREAM_NAMES\n"
        "wanted = {**{m: list(n) for m, n in INTERNAL_MODULES.items()},\n"
        "          'sageattention.core': [*CORE_NAMES, *UPSTREAM_NAMES]}\n"
        "for mod, names in wanted.items():\n"
        "    m = importlib.import_module(mod)\n"
        "    for n in names:\n"
        "        obj = getattr(m, n)\n"
        "        assert callable(obj) or hasattr(obj, '__getitem__'), (mod, n)\n"
        "    assert sorted(m.__all__) == sorted(names), mod\n"
        "print(len(wanted))\n"
    )
    assert int(_run(installed, code, tmp_path)) == 10


def test_kjnodes_memory_efficient_patch_imports(installed, tmp_path):
    """kijai/ComfyUI-KJNodes nodes/ltxv_nodes.py: ``from sageattention.core import
    per_thread_int8_triton, per_warp_int8_cuda, per_block_int8_triton, per_channel_fp8,
    get_cuda_arch_versions, attn_false``; ``get_cuda_arch_versions()`` must answer (else the
    LTX2/WanVideo/MiniMax H3 patches refuse: "sageattention is not new enough version or could
    not determine CUDA architecture"); then, per arch, the first of ``core._qattn_<arch>``,
    ``core.<arch>_compile``, module ``sageattention.<arch>_compile`` and its ``_qattn_<arch>``
    that has the arch's probe kernel is the kernel module."""
    code = (
        "import importlib\n"
        "from sageattention.core import (per_thread_int8_triton, per_warp_int8_cuda,\n"
        "    per_block_int8_triton, per_channel_fp8, get_cuda_arch_versions, attn_false)\n"
        "print(get_cuda_arch_versions())\n"
        "probe = {'sm80': 'qk_int8_sv_f16_accum_f32_attn',\n"
        "         'sm89': 'qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf',\n"
        "         'sm90': 'qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf'}\n"
        "core = importlib.import_module('sageattention.core')\n"
        "for arch, name in probe.items():\n"
        "    mod = importlib.import_module(f'sageattention.{arch}_compile')\n"
        "    places = (getattr(core, f'_qattn_{arch}', None), getattr(core, f'{arch}_compile', None),\n"
        "              mod, getattr(mod, f'_qattn_{arch}', None))\n"
        "    found = [o for o in places if o is not None and hasattr(o, name)]\n"
        "    assert found and callable(getattr(found[0], name)), arch\n"
        "sm89 = importlib.import_module('sageattention.sm89_compile')\n"
        "print(hasattr(sm89, 'qk_int8_sv_f8_accum_f16_fuse_v_scale_attn_inst_buf'))\n"
    )
    assert _run(installed, code, tmp_path).split("\n")[:2] == ["[]", "True"]  # no GPU here: no archs


def test_lightx2v_imports(installed, tmp_path):
    """ModelTC/LightX2V lightx2v/common/ops/attn/sage_attn.py: ``from sageattention._qattn_sm90
    import qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf`` and ``from
    sageattention.triton.quant_per_thread import quant_query_per_thread_int8_kernel`` (launched
    as ``kernel[grid](...)``)."""
    code = (
        "from sageattention._qattn_sm90 import qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf as k\n"
        "from sageattention.triton.quant_per_thread import quant_query_per_thread_int8_kernel as q\n"
        "print(callable(k), hasattr(q, '__getitem__'))  # a Triton kernel (interpreted here)\n"
    )
    assert _run(installed, code, tmp_path).split() == ["True", "True"]
