"""bench's providers on a CPU: ``--against`` parsing, every peer's reason when it cannot run, and
the peer paths run for real through the provider code with stand-in modules (a fake
``comfy_kitchen`` whose ``int8_attention`` computes real attention, a fake FlashAttention-3, a
fake upstream ``sageattention`` and sagebuild's own compat one); the report's time chart."""

from __future__ import annotations

import json
import math
import sys
import types
import xml.etree.ElementTree as ET

import pytest
import torch
from typer.testing import CliRunner

from sagebuild import bench
from sagebuild.bench.peers import PEERS, peers
from sagebuild.bench.providers import Case, Shape
from sagebuild.cli.app import app
from sagebuild.errors import SagebuildError
from sagebuild.profiles import load_bundled

CPU = load_bundled("cpu")
runner = CliRunner()
SHAPE = Shape(1, 2, 64, 64, 2, 64)


def attention_hnd(q, k, v, causal=False, scale=None):
    """Real attention in float32 on [B, H, N, D] (GQA by repeating K/V heads), cast back."""
    groups = q.shape[1] // k.shape[1]
    k, v = (x.float().repeat_interleave(groups, dim=1) for x in (k, v))
    s = q.float() @ k.transpose(-1, -2) * (scale or q.shape[-1] ** -0.5)
    if causal:  # bottom-right aligned
        n, nk = s.shape[-2:]
        s = s.masked_fill(torch.ones(n, nk, dtype=torch.bool).tril(nk - n).logical_not(), -math.inf)
    return (s.softmax(-1) @ v).to(q.dtype)


def fake_comfy_kitchen(available=True) -> types.ModuleType:
    mod = types.ModuleType("comfy_kitchen")
    mod.int8_attention = lambda q, k, v, *, scale=None, attn_mask=None: attention_hnd(q, k, v, scale=scale)
    mod.int8_attention_is_available = lambda device=None: available
    mod.__version__ = "0.2.40"
    return mod


def fake_fa3() -> types.ModuleType:
    mod = types.ModuleType("flash_attn_interface")

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):  # [B, N, H, D]; (out, lse)
        out = attention_hnd(*(x.transpose(1, 2) for x in (q, k, v)), causal=causal, scale=softmax_scale)
        return out.transpose(1, 2), None

    mod.flash_attn_func = flash_attn_func
    return mod


def case(layout="HND", causal=False, n=64, nk=64, seed=0):
    q, k, v = bench.random_qkv((1, 2, n, 64), layout, "float16", seed, "cpu", kv_shape=(1, 2, nk, 64))
    return Case(n, q, k, v, layout, causal)


def reference(c: Case):
    from sagebuild.attention import reference as ref

    return ref.exact_attention(c.q, c.k, c.v, tensor_layout=c.layout, is_causal=c.causal)


# ---- --against --------------------------------------------------------------------------------


def test_against_parses_names_all_and_refuses_unknown_ones():
    parse = bench.parse_against
    assert parse("sdpa") == () and parse(" CK, fa3 ,ck") == ("ck", "fa3")
    assert parse("all") == tuple(PEERS) == ("ck", "upstream", "fa2", "fa3", "fa4", "aiter")
    with pytest.raises(SagebuildError, match="unknown provider fa9") as e:
        parse("sdpa,fa9")
    assert "ck" in (e.value.fix or "") and "all" in (e.value.fix or "")
    assert bench.config_from_profile(CPU).against == ()  # default: SDPA only
    assert bench.config_from_profile(CPU, against=("fa3", "ck")).against == ("fa3", "ck")
    r = runner.invoke(app, ["bench", "--profile", "cpu", "--against", "ck,nope"])
    assert r.exit_code == 2 and "unknown provider nope" in r.output


def test_the_report_schema_names_every_peer():
    from sagebuild.report.schema import load_schema

    config = load_schema()["definitions"]["bench"]["properties"]["config"]["properties"]
    assert config["against"]["items"]["enum"] == list(PEERS)


# ---- reasons ----------------------------------------------------------------------------------


def test_a_peer_not_installed_is_listed_with_how_to_install_it(monkeypatch):
    for module in ("comfy_kitchen", "sageattention", "flash_attn", "flash_attn_interface", "aiter"):
        monkeypatch.setitem(sys.modules, module, None)  # an import of it fails as if not installed
    reasons = {
        p.name: p.available(SHAPE, "float16", "HND", False, torch.device("cpu")) for p in peers(tuple(PEERS))
    }
    assert reasons["ck"] == "comfy_kitchen is not installed (pip install comfy-kitchen)"
    assert reasons["fa4"] == "flash_attn.cute is not installed (pip install flash-attn-4)"
    assert all(r and "is not installed" in r for r in reasons.values()), reasons


def test_ours_is_not_upstream_and_a_broken_peer_says_why(monkeypatch, tmp_path):
    ours = types.ModuleType("sageattention")
    ours.__provider__ = "sagebuild"
    monkeypatch.setitem(sys.modules, "sageattention", ours)
    (up,) = peers(("upstream",))
    assert "sagebuild's own" in up.available(SHAPE, "float16", "HND", False, torch.device("cpu"))
    # an installed peer whose import breaks (its extension cannot load): the error's first line
    pkg = tmp_path / "comfy_kitchen"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        'raise OSError("libcudart.so.13: cannot open shared object file\\nmore")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "comfy_kitchen", raising=False)
    (ck,) = peers(("ck",))
    assert ck.available(SHAPE, "float16", "HND", False, torch.device("cpu")) == (
        "import comfy_kitchen failed (OSError: libcudart.so.13: cannot open shared object file)"
    )
    # its own availability check raising is a reason too
    broken = fake_comfy_kitchen()
    broken.int8_attention_is_available = lambda device=None: 1 / 0
    monkeypatch.setitem(sys.modules, "comfy_kitchen", broken)
    (ck,) = peers(("ck",))
    reason = ck.available(SHAPE, "float16", "HND", False, torch.device("cpu"))
    assert reason == "its availability check failed (ZeroDivisionError: division by zero)"


def test_peers_refuse_what_they_cannot_run_each_with_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "comfy_kitchen", fake_comfy_kitchen())
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fake_fa3())
    ck, fa3 = peers(("ck", "fa3"))
    cpu = torch.device("cpu")
    assert ck.available(SHAPE, "float16", "HND", False, cpu) is None  # it says it runs here
    assert "no causal mask" in ck.available(SHAPE, "float16", "HND", True, cpu)
    assert "head dim 320 > 256" in ck.available(SHAPE._replace(head_dim=320), "float16", "HND", False, cpu)
    assert "packed sequences" in ck.available(SHAPE._replace(packed=True), "float16", "HND", False, cpu)
    assert fa3.available(SHAPE, "float16", "HND", True, cpu) == "needs a GPU; this run is on cpu"
    monkeypatch.setitem(sys.modules, "comfy_kitchen", fake_comfy_kitchen(available=False))
    (ck,) = peers(("ck",))
    assert "int8_attention_is_available says no on cpu" in ck.available(SHAPE, "float16", "HND", False, cpu)
    for reason in (ck.available(SHAPE, "float16", "HND", False, cpu),):
        assert "\n" not in reason


# ---- the peers run ----------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["HND", "NHD"])
def test_peer_paths_compute_attention_in_the_callers_layout(monkeypatch, layout):
    """Each peer's call takes the bench's layout to its own and back: its output matches the float32
    reference (FlashAttention's [B, N, H, D] and (out, lse) tuple, Comfy Kitchen's [B, H, N, D])."""
    monkeypatch.setitem(sys.modules, "comfy_kitchen", fake_comfy_kitchen())
    monkeypatch.setitem(sys.modules, "flash_attn_interface", fake_fa3())
    upstream = types.ModuleType("sageattention")
    upstream.sageattn = lambda q, k, v, tensor_layout="HND", is_causal=False: attention_hnd(
        q, k, v, is_causal
    )
    monkeypatch.setitem(sys.modules, "sageattention", upstream)
    for peer in peers(("ck", "fa3", "upstream")):
        c = case(layout, causal=peer.name != "ck", nk=96 if peer.name == "ck" else 64)
        built = peer.build(c)
        acc = peer.accuracy(built.call(), reference(c))
        assert acc["cos"] > 0.9999 and acc["rel_l1"] < 0.01, (peer.name, acc)
        assert peer.name in ("ck", "fa3", "upstream") and built.ran == peer.what()


def test_bench_times_a_peer_beside_sdpa_and_lists_the_others(monkeypatch):
    """Through ``run_bench``: the fake Comfy Kitchen (which says it runs on the CPU) gets a timed peer
    row with its accuracy and speed-up, is never gated, and every other peer is listed with its
    reason; the JSON validates and the report shows the rows, the reasons and the time chart."""
    from sagebuild.report.render import to_html, to_markdown
    from sagebuild.report.schema import load_schema, validate_sub

    monkeypatch.setitem(sys.modules, "comfy_kitchen", fake_comfy_kitchen())
    for module in ("sageattention", "flash_attn", "flash_attn_interface", "aiter"):
        monkeypatch.setitem(sys.modules, module, None)
    cfg = bench.config_from_profile(CPU, seq=(64, 128), heads=2, warmup=0, reps=2, rounds=2, against="all")
    res = bench.run_bench(CPU, cfg)
    assert res.ok, res.failures
    ck = [r for r in res.rows if r.provider == "ck"]
    assert [r.seq for r in ck] == [64, 128] and all(r.kind == "peer" and r.timing for r in ck)
    assert all(r.accuracy["cos"] > 0.9999 and r.speedup is not None and r.bounds is None for r in ck)
    d = res.to_dict()
    root = load_schema()
    assert validate_sub(d, root["definitions"]["bench"], root, "bench") == []
    roster = {p["name"]: p for p in d["providers"]}
    assert list(roster)[:1] == ["sdpa"] and set(PEERS) <= set(roster)
    assert roster["ck"]["reasons"] == {} and roster["ck"]["what"].startswith("comfy_kitchen 0.2.40")
    missing = "flash_attn_interface is not installed (build it from flash-attention's hopper/ directory)"
    assert roster["fa3"]["reasons"] == {"64": missing, "128": missing}
    md = to_markdown({**_report_shell(), "bench": d})
    for name in ("ck", "upstream", "fa2", "fa3", "fa4", "aiter"):
        assert f"- {name} (" in md
    assert "| 64 | Comfy Kitchen int8_attention | peer |" in md
    html = to_html({**_report_shell(), "bench": d})
    svgs = [ET.fromstring(html[i : html.index("</svg>", i) + 6]) for i in _find_all(html, "<svg")]
    timed = [s for s in svgs if s.get("class") == "time-chart"]
    assert len(timed) == 1
    bars = timed[0].findall("{http://www.w3.org/2000/svg}rect[@class='bar']")
    assert len(bars) == sum(r.timing is not None for r in res.rows)
    # gated rows only: a broken peer is reported, never a failure
    broken = bench.BenchRow(64, "ck", "peer", error="RuntimeError: boom")
    assert bench.gate([broken], 1.0, speed_gate=True) == []


def test_cli_against_all_lists_every_peer_by_name():
    r = runner.invoke(
        app, ["bench", "--profile", "cpu", "--seq", "64", "--heads", "1", "--reps", "1", "--warmup", "0",
              "--against", "all", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    listed = {p["name"]: p for p in doc["providers"] if p["kind"] == "peer"}
    assert list(listed) == list(PEERS)
    # whatever is installed here, a peer that did not run says why in one line
    ran = {row["provider"] for row in doc["rows"]}
    for name, p in listed.items():
        assert name in ran or (p["reasons"]["64"] and "\n" not in p["reasons"]["64"])


# ---- the chart --------------------------------------------------------------------------------


def test_time_chart_has_a_panel_per_shape_and_bars_that_follow_the_times():
    from sagebuild.report.svg import time_chart

    svg = ET.fromstring(time_chart({"seq=64": [("sdpa", 1.0), ("ck", 0.5)], "seq=128": [("sdpa", 4.0)]}, "t"))
    ns = "{http://www.w3.org/2000/svg}"
    widths = [float(b.get("width")) for b in svg.findall(f"{ns}rect[@class='bar']")]
    assert len(widths) == 3 and widths[1] == pytest.approx(widths[0] / 2) and widths[2] == widths[0]
    texts = [t.text for t in svg.findall(f"{ns}text")]
    assert "seq=64" in texts and "seq=128" in texts and "0.5 ms" in texts


def _find_all(text: str, sub: str) -> list[int]:
    out, i = [], text.find(sub)
    while i >= 0:
        out.append(i)
        i = text.find(sub, i + 1)
    return out


def _report_shell() -> dict:
    return {
        "ok": True, "exit_code": 0, "profile": {"name": "cpu", "why": "test"}, "sagebuild_version": "0",
        "created": "now", "steps": [], "checks": [], "files": {},
    }  # fmt: skip


def test_the_dispatched_row_says_when_sageattn_routed_the_call_to_sdpa():
    """Where the tuning routes a call to SDPA (issue 58), the dispatched provider's ``ran`` says so,
    the table's kernel column shows it and the variant line compares SDPA's time with the variants'."""
    from sagebuild.attention.plan import make_plan
    from sagebuild.bench.providers import plan_ran
    from sagebuild.report.render import bench_table

    plan = make_plan("sm90", head_dim=64, n_k=1024, pv="fp8", pv_accum="fp32", config="64,128,4,3").record()
    assert plan_ran(plan).startswith("qk_int8_pv_fp8 64,128,4,3")
    routed = {**plan, "sdpa": True, "tuned": "tuned 16x1024x64: sdpa"}
    assert plan_ran(routed) == "PyTorch SDPA (routed: tuned 16x1024x64: sdpa)"

    def row(provider, kind, ms, plan=None, ran=None):
        t = bench.Timing(ms, ms, ms, 1)
        return bench.BenchRow(1024, provider, kind, t, plan=plan, ran=ran, label=provider)

    rows = [
        row("sdpa", "baseline", 0.018, ran="SDPA cudnn"),
        row("sageattn", "whole_call", 0.019, routed, plan_ran(routed)),
        row("qk_int8_pv_fp16", "whole_call", 0.024, plan),
        row("qk_int8_pv_fp8", "whole_call", 0.023, plan),
    ]
    assert bench.compare_variants(rows) == (
        "seq=1024: dispatch picks SDPA (routed); fastest: SDPA (routed) (SDPA (routed) 0.018 ms, "
        "qk_int8_pv_fp8 0.023 ms, qk_int8_pv_fp16 0.024 ms; the pick won)"
    )
    head, cells = bench_table({"rows": [r.to_dict() for r in rows]})
    assert cells[1][head.index("kernel")] == "PyTorch SDPA (routed: tuned 16x1024x64: sdpa)"


def test_timing_is_usable_on_its_own_and_peers_count_in_the_memory_estimate():
    """``bench.timing.time_named``: callables by name in, each one's medians out (the tuner's use);
    a peer's copy of the inputs counts in the GPU memory estimate."""
    from sagebuild.bench import memory, timing

    calls = []
    got = timing.time_named({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 1, 4, 2)
    assert set(got) == {"a", "b"} and all(t.reps == 4 and t.median_ms >= 0 for t in got.values())
    assert calls.count("a") == calls.count("b") == 5
    cfg = bench.config_from_profile(CPU, seq=(4096,), heads=8)
    alone = memory.bytes_needed(cfg, 4096, on_gpu=True)[0]
    with_peers = memory.bytes_needed(
        bench.config_from_profile(CPU, seq=(4096,), heads=8, against="ck,fa3"), 4096, True
    )[0]
    assert with_peers == alone + 2 * 3 * 8 * 4096 * cfg.head_dim * 2
