"""The binder-free launcher (``kernels/triton/launcher.py``): when it may bypass Triton's binder,
its constexpr memo, and host ceiling division."""

from __future__ import annotations

import math
from types import SimpleNamespace

from sagebuild.kernels.triton import launcher


def test_launcher_defers_to_triton_while_a_launch_hook_is_set():
    """Profilers hook Triton's launches; with a hook set the binder-free path must stand aside."""
    from triton import knobs

    assert not launcher.hooks_installed()
    chain = knobs.runtime.launch_enter_hook
    hook = lambda metadata: None  # noqa: E731
    if hasattr(chain, "add"):
        chain.add(hook)
        try:
            assert launcher.hooks_installed()
        finally:
            chain.remove(hook)
    else:  # older Triton: a plain attribute
        knobs.runtime.launch_enter_hook = hook
        try:
            assert launcher.hooks_installed()
        finally:
            knobs.runtime.launch_enter_hook = chain
    assert not launcher.hooks_installed()


def test_launcher_caches_only_kernels_whose_constexprs_trail():
    """The binder-free call passes args then constexpr values positionally: that is only the
    kernel's signature when every constexpr parameter comes after every runtime argument."""
    trailing = SimpleNamespace(arg_names=["X", "n", "BLOCK", "FLAG"])
    assert launcher._constexprs_trailing(trailing, 2, {"BLOCK": 64, "FLAG": True})
    interleaved = SimpleNamespace(arg_names=["X", "BLOCK", "n", "FLAG"])
    assert not launcher._constexprs_trailing(interleaved, 2, {"BLOCK": 64, "FLAG": True})
    reordered = SimpleNamespace(arg_names=["X", "n", "FLAG", "BLOCK"])
    assert not launcher._constexprs_trailing(reordered, 2, {"BLOCK": 64, "FLAG": True})


def test_the_attention_kernels_constexprs_trail_its_arguments():
    """The attention kernel's plan constexprs come after all its runtime arguments, so its
    launches can skip the binder."""
    from sagebuild.attention.plan import make_plan
    from sagebuild.kernels.triton.attn_fwd import _attn_fwd_kernel

    consts = make_plan("sm90", head_dim=128, n_k=4096).constexprs()
    n_args = len(_attn_fwd_kernel.arg_names) - len(consts)
    assert launcher._constexprs_trailing(_attn_fwd_kernel, n_args, consts)


def test_constexprs_are_built_once_per_kernel_and_key():
    calls = []
    fn = object()

    def build():
        calls.append(1)
        return {"BLOCK": len(calls)}

    launcher.forget_constexprs()
    first = launcher.constexprs(fn, ("key",), build)
    assert launcher.constexprs(fn, ("key",), build) is first and len(calls) == 1
    assert launcher.constexprs(fn, ("other",), build) == {"BLOCK": 2}
    assert launcher.constexprs(fn, None, build) == {"BLOCK": 3}  # no key: built every time
    launcher.forget_constexprs()
    assert launcher.constexprs(fn, ("key",), build) == {"BLOCK": 4}
    launcher.forget_constexprs()


def test_host_cdiv_is_the_ceiling_of_the_quotient():
    assert all(launcher.cdiv(a, b) == math.ceil(a / b) for a in range(0, 600) for b in range(1, 70))


def test_amd_launch_options_reach_the_kernel_launch(monkeypatch):
    """A config's AMD options (``waves_per_eu`` ...) go through ``attention_forward`` to the
    launch with the tile options; a config without them launches with num_warps and num_stages
    only (what NVIDIA launches have always received)."""
    import torch

    from sagebuild.attention import sageattn_qk_int8_pv_fp16_triton
    from sagebuild.kernels.triton import attn_fwd

    seen = []
    real = launcher.launch

    def spy(fn, grid, args, constexprs, *, key=None, **options):
        if fn is attn_fwd._attn_fwd_kernel:
            seen.append(options)
        return real(fn, grid, args, constexprs, key=key, **options)

    monkeypatch.setattr(launcher, "launch", spy)
    q, k, v = (torch.randn(1, 2, 32, 64, dtype=torch.float16) for _ in range(3))
    sageattn_qk_int8_pv_fp16_triton(q, k, v, config="32,16,4,1,waves_per_eu=2,kpack=2")
    sageattn_qk_int8_pv_fp16_triton(q, k, v, config="32,16,4,1")
    assert seen == [{"num_warps": 4, "num_stages": 1, "waves_per_eu": 2, "kpack": 2},
                    {"num_warps": 4, "num_stages": 1}]  # fmt: skip
