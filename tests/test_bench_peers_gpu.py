"""The peers installed on a GPU machine, timed by ``sagebuild bench --against`` beside SDPA and ours
(skipped without a GPU; a peer that is not installed here is skipped with its reason)."""

from __future__ import annotations

import pytest

from sagebuild import bench
from sagebuild.bench.peers import PEERS, peers
from sagebuild.bench.providers import Shape
from sagebuild.profiles import match

pytestmark = pytest.mark.gpu


def _profile():
    from sagebuild.attention import dispatch

    return match([dispatch.device_arch("cuda")])[0]


@pytest.mark.parametrize("name", list(PEERS))
def test_an_installed_peer_is_timed_with_its_accuracy(name):
    """Non-causal 1×8×1024×128 (every peer takes it): the peer's row has a time, a speed-up over
    SDPA and an accuracy close to the float32 reference; it is reported, never gated."""
    import torch

    (peer,) = peers((name,))
    reason = peer.available(Shape(1, 8, 1024, 128, 8, 1024), "float16", "HND", False, torch.device("cuda"))
    if reason:
        pytest.skip(f"{name}: {reason}")
    prof = _profile()
    cfg = bench.config_from_profile(prof, seq=(1024,), heads=8, head_dim=128, causal=False, warmup=2, reps=6,
                                    rounds=2, against=(name,))  # fmt: skip
    res = bench.run_bench(prof, cfg)
    (row,) = [r for r in res.rows if r.provider == name]
    assert row.kind == "peer" and row.error is None, row.error
    assert row.timing.median_ms > 0 and row.speedup is not None
    assert row.accuracy["finite"] and row.accuracy["cos"] > 0.999, row.accuracy
    assert row.ran and row.ran == peer.what()
    assert not any(f.startswith(f"{name} ") for f in res.failures)


def test_comfy_kitchen_refuses_causal_calls_with_its_reason():
    import torch

    (ck,) = peers(("ck",))
    if ck.load() is None:
        pytest.skip(ck.available(Shape(1, 1, 64, 64, 1, 64), "float16", "HND", False, torch.device("cuda")))
    prof = _profile()
    cfg = bench.config_from_profile(prof, seq=(1024,), heads=8, head_dim=64, causal=True, warmup=1, reps=2,
                                    rounds=1, against=("ck",))  # fmt: skip
    res = bench.run_bench(prof, cfg)
    assert not [r for r in res.rows if r.provider == "ck"]
    (listed,) = [p for p in res.providers if p["name"] == "ck"]
    assert "no causal mask" in listed["reasons"]["1024"]
