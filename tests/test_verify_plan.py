"""``sagebuild verify --dry-run``: the plan per variant for the profile's archs, without a GPU,
with the default ``sageattn`` picks and its reason (issue 38: RDNA4's from the ISA)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sagebuild import archs, knobs, profiles
from sagebuild.attention import gate
from sagebuild.cli.app import app
from sagebuild.verify import plan_text, verify_plan

runner = CliRunner()


def test_rdna4_plan_names_both_variants_and_the_defaults_reason(monkeypatch, tmp_path):
    """RDNA4's table path is FP8 (issue 59's ISA counts, the row's note); until verify has checked
    it on the machine ``sageattn`` runs FP16, and the plan says both."""
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))  # this test's own verify records
    knobs.refresh()
    gate.reset()
    plan = verify_plan(profiles.load_bundled("rdna4-rocm6"))
    assert [a["arch"] for a in plan["archs"]] == ["gfx1201", "gfx1200"]
    for a in plan["archs"]:
        row = archs.get(a["arch"])
        assert row.pv == "fp8" and a["default"]["variant"] == "qk_int8_pv_fp16", a
        assert a["default"]["pv_accum"] is None
        assert a["default"]["reason"] == (
            f"{gate.why_not(row.name, 'qk_int8_pv_fp8')}; until then qk_int8_pv_fp16 ({row.note})"
        )
        fp16, fp8 = a["variants"]
        assert fp16["variant"] == "qk_int8_pv_fp16" and fp16["verified"] and fp16["fp8_format"] is None
        assert fp8["variant"] == "qk_int8_pv_fp8" and fp8["fp8_format"] == "float8_e4m3fn"
        assert fp8["matrix"] == [row.int8_mma, row.fp8_mma] and fp8["config"] == fp16["config"] == "64,32,4,1"
    text = plan_text(plan)
    assert f"gfx1201 (RDNA4: {archs.get('gfx1201').products})" in text
    assert "sageattn picks qk_int8_pv_fp16 — qk_int8_pv_fp8 on gfx1201 waits for an accuracy check" in text
    gate.record("gfx1201", "qk_int8_pv_fp8", True, "cos 0.9994")  # as a passing verify on the card would
    after = verify_plan(profiles.load_bundled("rdna4-rocm6"))["archs"]
    assert after[0]["default"] == {"variant": "qk_int8_pv_fp8", "pv_accum": "fp32+fp32", "reason": row.note}
    assert after[1]["default"]["variant"] == "qk_int8_pv_fp16"  # gfx1200 was not checked
    assert "v_wmma_f32_16x16x16_fp8_fp8" in text


def test_reasons_for_other_archs_come_from_their_row_or_a_measured_preference():
    rdna3 = verify_plan(profiles.load_bundled("rdna3-rocm6"))["archs"][0]
    assert rdna3["default"]["reason"] == archs.get("gfx1100").note
    assert [v["variant"] for v in rdna3["variants"]] == ["qk_int8_pv_fp16"]  # no FP8 units
    hopper = verify_plan(profiles.load_bundled("hopper-cu12"), shape=(1, 8, 512, 64))["archs"][0]["default"]
    assert hopper["variant"] == "qk_int8_pv_fp16" and "measured preference" in hopper["reason"]
    split = verify_plan(profiles.load_bundled("hopper-cu12"), shape=(2, 8, 256, 160))["archs"][0]["default"]
    assert split["variant"] == "qk_int8_pv_fp16" and "at head dim 160 and 256 keys" in split["reason"]
    cdna3 = verify_plan(profiles.load_bundled("cdna3-rocm6"))["archs"][0]
    assert cdna3["default"]["variant"] == "qk_int8_pv_fp8"
    assert cdna3["variants"][1]["fp8_format"] == "float8_e4m3fnuz"


def test_cli_dry_run_prints_the_plan_and_runs_nothing():
    res = runner.invoke(app, ["verify", "--profile", "rdna4-rocm6", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "plan (dry run) for profile rdna4-rocm6" in res.output
    waits = "sageattn picks qk_int8_pv_fp16 — qk_int8_pv_fp8 on gfx1201 waits for an accuracy check"
    assert waits in res.output
    res = runner.invoke(app, ["verify", "--profile", "rdna4-rocm6", "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["dry_run"] and doc["archs"][0]["default"]["variant"] == "qk_int8_pv_fp16"


@pytest.mark.parametrize(("device", "code"), [("gpu9", 2), ("cuda:7", 3)])
def test_run_verify_refuses_a_device_this_machine_lacks(device, code):
    """The service itself (as accept calls it), not only the CLI: one device resolver, exit codes
    of a usage error (2) and of a missing GPU (3)."""
    import torch

    from sagebuild.errors import SagebuildError
    from sagebuild.verify import run_verify

    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(SagebuildError) as info:
        run_verify(profiles.load_bundled("cpu"), device=device)
    assert int(info.value.code) == code and "--device" in info.value.message
