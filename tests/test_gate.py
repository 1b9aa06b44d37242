"""``attention.gate``: a variant the ISA counts made the default (FP8 P·V on RDNA4, with P converted
by our inline ``v_cvt_pk_fp8_f32``) reaches ``sageattn`` and the tuner only after ``sagebuild
verify`` passed it on the machine. No AMD GPU here: verify's result is faked, its recording real."""

from __future__ import annotations

import json

import pytest

from sagebuild import knobs
from sagebuild.attention import gate, plan
from sagebuild.verify import VariantCheck, record_gated

FP8, FP16 = "qk_int8_pv_fp8", "qk_int8_pv_fp16"


@pytest.fixture(autouse=True)
def own_records(monkeypatch, tmp_path):
    monkeypatch.setenv("SAGEBUILD_CACHE_DIR", str(tmp_path))
    knobs.refresh()
    gate.reset()
    yield tmp_path
    gate.reset()


def _check(variant: str, cos: float) -> VariantCheck:
    """A verify result as ``verify._check_output`` leaves it, against the rdna4 profile's FP8 bound."""
    vc = VariantCheck(variant, True, accuracy={"cos": cos, "rel_l1": 0.03}, bounds={"cos_min": 0.999})
    if cos < 0.999:
        vc.problems.append(f"cosine similarity {cos:.6f} < 0.999 (profile bound)")
    vc.ok = not vc.problems
    return vc


def test_only_the_inline_conversion_paths_are_gated():
    assert gate.needs_check("gfx1201", FP8) and gate.needs_check("gfx1200:xnack-", FP8)
    assert not gate.needs_check("gfx1201", FP16)
    for arch in ("sm90", "sm89", "gfx942", "gfx950", "gfx1100", "unknown"):
        assert not gate.needs_check(arch, FP8) and gate.allowed(arch, FP8), arch
    assert plan.default_pv("sm90", 128, 4096) == ("fp8", "fp32")  # Hopper's dispatch is untouched


def test_unchecked_fp8_leaves_sageattn_on_fp16():
    assert not gate.allowed("gfx1201", FP8)
    assert plan.default_pv("gfx1201", 128, 4096)[0] == "fp16"
    assert plan.make_plan("gfx1201", head_dim=128, n_k=4096).variant == FP16
    assert "no sagebuild verify on this machine has checked it yet" in gate.why_not("gfx1201", FP8)
    # the explicit function still runs what it names (verify itself calls it)
    explicit = plan.make_plan("gfx1201", head_dim=128, n_k=4096, pv="fp8")
    assert explicit.variant == FP8 and explicit.fp8_cvt_asm and explicit.constexprs()["FP8_CVT_ASM"]


def test_a_failing_accuracy_check_keeps_the_variant_out(own_records):
    """A verify whose FP8 result misses the profile's bound records a failure: the dispatch stays
    on FP16 and says why; the FP16 check beside it records nothing (FP16 is not gated)."""
    assert record_gated("gfx1201", [_check(FP16, 0.99995), _check(FP8, 0.9981)]) == [FP8]
    saved = json.loads((own_records / gate.RECORD_FILE).read_text())
    assert set(saved) == {"gfx1201/qk_int8_pv_fp8"} and saved["gfx1201/qk_int8_pv_fp8"]["ok"] is False
    assert not gate.allowed("gfx1201", FP8)
    assert plan.default_pv("gfx1201", 128, 4096)[0] == "fp16"
    assert "outside the accuracy bounds (cosine similarity 0.998100 < 0.999" in gate.why_not("gfx1201", FP8)


def test_a_passing_check_lets_the_dispatch_take_it_for_that_arch_only():
    record_gated("gfx1201", [_check(FP8, 0.99941)])
    assert gate.allowed("gfx1201", FP8) and gate.why_not("gfx1201", FP8) is None
    assert plan.default_pv("gfx1201", 128, 4096) == ("fp8", "fp32+fp32")
    assert plan.make_plan("gfx1201", head_dim=64, n_k=1024).variant == FP8
    assert plan.default_pv("gfx1200", 128, 4096)[0] == "fp16"  # another arch: its own check
    record_gated("gfx1201", [_check(FP8, 0.97)])  # a later failing run withdraws it
    assert plan.default_pv("gfx1201", 128, 4096)[0] == "fp16"


def test_a_check_without_a_bound_or_under_other_sources_does_not_count(monkeypatch):
    unbounded = VariantCheck(FP8, True, accuracy={"cos": 0.9999})
    record_gated("gfx1201", [unbounded])
    assert not gate.allowed("gfx1201", FP8) and "no accuracy bound" in gate.why_not("gfx1201", FP8)
    record_gated("gfx1201", [_check(FP8, 0.9995)])
    assert gate.allowed("gfx1201", FP8)
    monkeypatch.setattr(gate, "_key", lambda: {"triton": "9.9.9", "kernels": "edited"})
    gate.reset()
    assert not gate.allowed("gfx1201", FP8)
    assert "another Triton or other kernel sources" in gate.why_not("gfx1201", FP8)


def test_an_unreadable_record_file_is_no_pass(own_records):
    (own_records / gate.RECORD_FILE).write_text("{not json")
    assert not gate.allowed("gfx1201", FP8)
    record_gated("gfx1201", [_check(FP8, 0.9995)])  # rewritten whole, atomically
    assert gate.allowed("gfx1201", FP8)
