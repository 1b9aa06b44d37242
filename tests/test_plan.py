"""The launch plan (``sagebuild.attention.plan``): planned from scalars for every arch a bundled
profile names, its records valid in a report, and its three views of one call (fields, report
record and schema, kernel constexprs) kept in step. CPU only: nothing is launched."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math

import pytest
from test_report import sample_report

from sagebuild import archs, knobs, profiles
from sagebuild.attention import features, gate, plan
from sagebuild.attention.plan import INTERPRETER, AttentionInputError, LaunchPlan, make_plan, record_schema
from sagebuild.kernels.triton import configs
from sagebuild.report.schema import load_schema, validate

HEAD_DIMS = (64, 128, 256, 80)
KEYS = (1024, 4096, 16384)
# every arch a bundled profile targets, and the families the issue names must be among them
PROFILE_ARCHS = sorted({a for p in profiles.load_all() for a in p.archs})


def _pvs(arch: str) -> tuple[str, ...]:
    """Both variants where the arch has FP8 matrix units, else FP16 P·V; and what sageattn picks."""
    return ("auto", "fp16", "fp8") if archs.get(arch).fp8_dtype else ("auto", "fp16")


def _plans(arch: str) -> list[LaunchPlan]:
    out = []
    for d in HEAD_DIMS:
        for n_k in KEYS:
            for causal in (False, True):
                for pv in _pvs(arch):
                    accums = ("fp32+fp32", "fp32") if pv == "fp8" else (None,)
                    for accum in accums:
                        out.append(make_plan(arch, head_dim=d, n_k=n_k, pv=pv, pv_accum=accum, causal=causal))
            out.append(make_plan(arch, head_dim=d, n_k=n_k, layout="varlen", causal=True))
            out.append(make_plan(arch, head_dim=d, n_k=n_k, layout="NHD", backend="ext", return_lse=True))
            out.append(make_plan(arch, head_dim=d, n_k=n_k, mask="bool"))
            out.append(make_plan(arch, head_dim=d, n_k=n_k, mask="additive", mask_rows=True, causal=True))
    return out


def test_bundled_profiles_cover_every_family_the_plans_serve():
    families = {archs.get(a).family for a in PROFILE_ARCHS}
    assert {"Hopper", "Ampere", "Ada", "Blackwell", "RDNA3", "RDNA4", "CDNA2", "CDNA3"} <= families
    assert {
        "sm90",
        "sm80",
        "sm86",
        "sm89",
        "sm100",
        "sm120",
        "gfx1100",
        "gfx1201",
        "gfx90a",
        "gfx942",
    } <= set(PROFILE_ARCHS)


@pytest.mark.parametrize("arch", PROFILE_ARCHS)
def test_every_profile_arch_plans_into_a_valid_report(arch):
    """The plans a profile's arch gets (head dims 64/128/256/80, 1K-16K keys, causal or not,
    both variants where there is FP8, varlen, NHD with the extension and LSE) go into a report's
    bench rows as the bench writes them, and the report validates against its schema."""
    plans = _plans(arch)
    report = sample_report()
    template = next(r for r in report["bench"]["rows"] if "plan" in r)
    rows = []
    for p in plans:
        row = copy.deepcopy(template)
        row["plan"] = p.record()
        rows.append(row)
    report["bench"]["rows"] = rows
    assert validate(report) == []
    assert all(p.arch == arch and p.family == archs.get(arch).family for p in plans)
    variants = {p.variant for p in plans}
    assert variants == (
        {"qk_int8_pv_fp16", "qk_int8_pv_fp8"} if archs.get(arch).fp8_dtype else {"qk_int8_pv_fp16"}
    )
    for p in plans:  # decisions the kernels rely on
        assert p.head_dim_pad in configs.NATIVE_HEAD_DIMS and p.head_dim <= p.head_dim_pad
        assert p.split_head_dim == (p.head_dim == 80)
        assert p.config.block_n % p.row_sum_parts == 0 and p.k_blk in (configs.K_BLK, configs.K_BLK_WIDE)
        assert (p.fp8_dtype is not None) == p.fp8 and (p.pv_accum is not None) == p.fp8
        assert math.isclose(p.sm_scale, p.head_dim**-0.5)
        if archs.get(arch).vendor != "cuda":  # AMD: portable kernel, no NVIDIA-only feature
            assert not (p.tma or p.pdl or p.wgmma_pipe or p.v_key_order) and p.config.maxnreg is None
        if p.varlen or p.quantization == "extension":  # K/V not laid out by our dense launch
            assert not (p.pdl or p.v_key_order)
        if p.quantization == "extension":  # nor by our quantization at all
            assert not p.tma


def test_hopper_plans_take_the_measured_features():
    """Hopper's table rows and features as a default call gets them, and their records."""
    long_ = make_plan("sm90", head_dim=128, n_k=4096)  # sageattn: MMA-accumulated FP8
    assert (long_.variant, long_.pv_accum) == ("qk_int8_pv_fp8", "fp32")
    assert long_.tma and long_.wgmma_pipe and long_.q_from_memory and long_.v_key_order
    assert long_.row_sum_parts == features.ROW_SUM_PARTS and not long_.pdl  # 4K keys: past PDL's range
    assert long_.record()["config"] == "64,128,4,2,168,tma,pipe"
    short = make_plan("sm90", head_dim=64, n_k=1024)  # head dim 64, short: FP16 P·V measured faster
    assert short.variant == "qk_int8_pv_fp16" and short.pdl and not short.tma and short.pv_accum is None
    for d in (160, 192):  # split head dims, short keys: FP16 P·V measured faster too
        p = make_plan("sm90", head_dim=d, n_k=256)
        assert p.variant == "qk_int8_pv_fp16" and p.split_head_dim and p.record()["config"] == "64,64,4,3"
        beyond = configs.SPLIT192_FP16_MAX_KEYS + 1
        assert make_plan("sm90", head_dim=d, n_k=beyond).variant == "qk_int8_pv_fp8"
    assert make_plan("sm90", head_dim=256, n_k=256).variant == "qk_int8_pv_fp8"  # not split
    # FP8 V's rows are padded to 16 bytes (``layout.v_row_stride``): any key count takes descriptors
    assert make_plan("sm90", head_dim=128, n_k=4104).tma
    blackwell = make_plan("sm100", head_dim=128, n_k=1024, pv="fp8")
    assert (
        blackwell.pdl and not (blackwell.wgmma_pipe or blackwell.v_key_order) and blackwell.row_sum_parts == 1
    )


def test_record_schema_is_the_dataclass():
    """The report schema's plan definition has exactly the dataclass's fields and the record's
    keys, all required and nothing else allowed: a field added to one and not the others fails."""
    names = [f.name for f in dataclasses.fields(LaunchPlan)]
    schema = record_schema()
    record = make_plan("sm90", head_dim=128, n_k=4096).record()
    assert list(schema["properties"]) == names == list(record)
    assert schema["required"] == names and schema["additionalProperties"] is False
    assert load_schema()["definitions"]["plan"] == schema
    plan_schema = {"definitions": {}, **schema}
    assert validate(record, plan_schema) == []
    assert any("unexpected key 'surprise'" in e for e in validate({**record, "surprise": 1}, plan_schema))
    missing = dict(record)
    del missing["row_sum_parts"]
    assert any("row_sum_parts" in e for e in validate(missing, plan_schema))
    assert validate({**record, "layout": "BHND"}, plan_schema)  # enums come from the plan module
    assert validate({**record, "config": [64, 128, 4, 2]}, plan_schema)  # the config is its string


def test_a_field_without_a_json_type_is_refused(monkeypatch):
    """A field whose annotation has no JSON type stops the schema (and the report) from being
    built instead of leaving the field undescribed."""

    @dataclasses.dataclass(frozen=True)
    class Wider(LaunchPlan):
        extra: "list[int]" = dataclasses.field(default_factory=list)  # noqa: UP037

    monkeypatch.setattr(plan, "LaunchPlan", Wider)
    with pytest.raises(TypeError, match="extra"):
        plan.record_schema()


def _kernel_constexprs() -> list[str]:
    from sagebuild.kernels.triton.attn_fwd import _attn_fwd_kernel

    params = inspect.signature(_attn_fwd_kernel.fn).parameters.values()
    return [p.name for p in params if "constexpr" in str(p.annotation)]


def test_constexprs_are_the_kernels_constexpr_parameters():
    """``constexprs()`` gives every constexpr parameter of the attention kernel, in its order,
    and nothing else (a kernel switch the plan does not set, or a stale one, fails here)."""
    expected = _kernel_constexprs()
    assert len(expected) > 10
    for p in (
        make_plan("sm90", head_dim=128, n_k=4096),
        make_plan("sm90", head_dim=80, n_k=1024, pv="fp16", causal=True),
        make_plan("gfx942", head_dim=256, n_k=16384, layout="varlen"),
        make_plan(INTERPRETER, head_dim=40, n_k=100, return_lse=True, smooth_k=False),
    ):
        consts = p.constexprs()
        assert list(consts) == expected, set(consts) ^ set(expected)
        assert consts["BLOCK_M"] == p.config.block_m and consts["USE_TMA"] == p.tma


@pytest.mark.parametrize(
    ("arch", "head_dim", "n_k", "variant"),
    [
        ("sm90", 64, 1024, "qk_int8_pv_fp16"),  # short, head dim 64: FP16 P·V measured faster
        ("sm90", 48, 2048, "qk_int8_pv_fp16"),  # padded to 64: same row
        ("sm90", 64, 2049, "qk_int8_pv_fp8"),  # from 2K keys: the arch default
        ("sm90", 128, 1024, "qk_int8_pv_fp8"),
        ("sm90", 256, 65536, "qk_int8_pv_fp8"),  # head dim 256: MMA-accumulated FP8 measured faster
        ("sm80", 256, 1024, "qk_int8_pv_fp16"),  # no FP8 anywhere on Ampere
        ("gfx942", 64, 1024, "qk_int8_pv_fp8"),  # no measured preference on CDNA3: the default
    ],
)
def test_sageattn_variant_follows_arch_table_and_measured_preferences(arch, head_dim, n_k, variant):
    pv, _ = plan.default_pv(arch, head_dim, n_k)
    assert plan.VARIANTS[pv] == variant
    assert make_plan(arch, head_dim=head_dim, n_k=n_k).variant == variant


@pytest.mark.parametrize(
    ("arch", "head_dim", "n_k", "accum"),
    [
        ("sm90", 128, 1024, "fp32"),  # Hopper FP8: MMA-accumulated, measured faster
        ("sm90", 64, 8192, "fp32"),
        ("sm90", 64, 1024, "fp32+fp32"),  # FP16 P·V: the keyword does not apply
        ("sm90", 200, 8192, "fp32"),
        ("gfx942", 128, 4096, "fp32+fp32"),  # no measurement on CDNA3: upstream's default
        ("sm89", 128, 4096, "fp32+fp32"),
    ],
)
def test_sageattn_fp8_accumulation_follows_the_preference_table(arch, head_dim, n_k, accum):
    assert plan.default_pv(arch, head_dim, n_k)[1] == accum


def test_unsupported_archs_and_fp8_without_units_are_clear_errors():
    for name, arch in archs.ARCHS.items():
        if arch.pv is None:
            with pytest.raises(AttentionInputError, match="nearest supported"):
                make_plan(name, head_dim=64, n_k=0)
        else:  # the table's path, or FP16 while it waits for verify's accuracy check (``gate``)
            pv = archs.pv_path(name)
            want = pv if gate.allowed(name, plan.VARIANTS[pv]) else "fp16"
            assert plan.default_pv(name, 0, 0)[0] == want, name
    assert plan.fp8_dtype_name("gfx942") == "float8_e4m3fnuz"
    assert plan.fp8_dtype_name("sm90") == "float8_e4m3fn"
    with pytest.raises(AttentionInputError, match="no FP8 matrix units"):
        plan.fp8_dtype_name("gfx1100")
    with pytest.raises(AttentionInputError, match="no FP8 matrix units"):
        make_plan("gfx1100", head_dim=64, n_k=0, pv="fp8")
    assert make_plan("gfx942", head_dim=64, n_k=0, pv="fp8").fp8_max == 240.0  # fnuz


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"qk_quant_gran": "per_thread"}, "qk_quant_gran"),  # upstream's name: mapped by functions.py
        ({"backend": "cuda"}, "quantization_backend"),
        ({"pv": "fp4"}, "pv="),
        ({"layout": "BHND"}, "tensor_layout"),
        ({"pv": "fp8", "pv_accum": "fp16"}, "pv_accum_dtype"),
        ({"head_dim": 320}, "head dim 320"),
        ({"head_dim": 0}, "head dim 0"),
        ({"sm_scale": -1.0}, "positive and finite"),
        ({"sm_scale": float("nan")}, "positive and finite"),
        ({"sm_scale": "big"}, "must be a number"),
        ({"config": "64,48,4,3"}, "power of two"),
    ],
)
def test_bad_plan_inputs_are_clear_errors(kw, match):
    args = {"head_dim": 64, "n_k": 128, **kw}
    with pytest.raises(AttentionInputError, match=match) as err:
        make_plan("sm90", **args)
    assert err.value.fix


def test_register_cap_is_refused_off_nvidia():
    assert make_plan("sm90", head_dim=128, n_k=0, pv="fp8", config="64,64,4,3,168").config.maxnreg == 168
    with pytest.raises(AttentionInputError, match="NVIDIA-only") as err:
        make_plan("gfx942", head_dim=128, n_k=0, pv="fp8", config="64,64,4,3,168")
    assert "fifth number" in err.value.fix
    assert make_plan("gfx942", head_dim=128, n_k=0, pv="fp8", config="64,64,4,3").config.maxnreg is None


def test_amd_launch_options_are_refused_off_amd_and_recorded_on_it():
    """An AMD option forced on an NVIDIA arch is a clear error (Hopper launches never see one);
    on CDNA the plan's record carries the option, so the config string forces the same launch."""
    with pytest.raises(AttentionInputError, match="AMD-only") as err:
        make_plan("sm90", head_dim=128, n_k=0, pv="fp8", config="64,64,4,3,waves_per_eu=2")
    assert "waves_per_eu" in err.value.fix
    plan = make_plan("gfx942", head_dim=128, n_k=4096, pv="fp8")
    assert plan.record()["config"] == "128,64,4,2,waves_per_eu=2"
    assert plan.config.launch_options() == {"num_warps": 4, "num_stages": 2, "waves_per_eu": 2}
    assert make_plan("interpreter", head_dim=64, n_k=64, config="32,16,4,1,kpack=2").config.kpack == 2


def test_tma_rows_serve_only_calls_that_can_use_tma(monkeypatch):
    """A row whose config loads K/V by TMA serves a call only where TMA can run: a family whose
    features allow it, FP8 P·V on dense or packed K/V from our Triton quantization (whose FP8 V
    rows are 16-byte aligned for any key count), SAGEBUILD_TMA not 0; every other call takes the
    next row, and the record says it."""
    monkeypatch.delenv(features.KNOB["tma"], raising=False)
    knobs.refresh()
    row = configs.lookup("Hopper", 128, "fp8acc", False, n_k=4096, tma_ok=True)
    assert row.tma and row.as_tuple() == (64, 128, 4, 2, 168) and row.k_blk == 128

    def planned(head_dim=128, n_k=4096, pv="fp8", accum="fp32", **kw):
        return make_plan("sm90", head_dim=head_dim, n_k=n_k, pv=pv, pv_accum=accum, **kw)

    assert planned().config == row and planned(n_k=16384).config == row and planned().tma
    assert not planned(backend="ext").config.tma  # the extension lays K/V out otherwise
    packed = planned(layout="varlen")  # packed K/V from our quantization: the same row, by TMA
    assert packed.tma and packed.config == row and not (packed.pdl or packed.v_key_order), packed
    assert planned(n_k=4104).tma and planned(n_k=4097).tma  # ragged key counts too
    # the descriptors' row coordinate (batch·head·key) is an int32: past it, the pointer loads
    assert planned(n_k=2**20, batch_heads=2**11 - 1).tma and not planned(n_k=2**20, batch_heads=2**11).tma
    assert planned(layout="varlen", n_k=2**20, batch_heads=2**11).tma  # packed rows are tokens
    # the split head dims' rows ask for TMA from 1024 keys (65-96) and from 4096 (129-192)
    for head_dim, first in ((80, 1024), (96, 1024), (160, 4096), (192, 4096)):
        split = planned(head_dim=head_dim, n_k=first)
        assert split.tma and split.wgmma_pipe and split.config.block_n == 128, (head_dim, split)
        assert not planned(head_dim=head_dim, n_k=first - 1).tma, head_dim
    monkeypatch.setenv(features.KNOB["v_key_order"], "0")
    knobs.refresh()
    for head_dim in (128, 80, 192):  # V in plain order: its rows padded to 16 bytes, so any count
        plain = planned(head_dim=head_dim, n_k=4104)
        assert not plain.v_key_order and plain.tma and plain.config.tma, head_dim
    monkeypatch.delenv(features.KNOB["v_key_order"])
    assert not planned(pv="fp16", accum=None).tma
    assert not make_plan("sm80", head_dim=128, n_k=4096, pv="fp16").tma
    monkeypatch.setenv(features.KNOB["tma"], "0")
    knobs.refresh()
    off = planned()
    assert not off.tma and not off.config.tma and off.record()["config"] == off.config.spec()
    monkeypatch.setenv(features.KNOB["tma"], "1")  # tuning: TMA for any eligible config
    knobs.refresh()
    assert make_plan("sm90", head_dim=128, n_k=1024, pv="fp8", config="64,64,4,3").tma
    assert not make_plan("sm90", head_dim=128, n_k=1024, pv="fp16", config="64,64,4,3").tma


def test_q_from_memory_needs_the_pipe_and_wide_enough_output_rows():
    """Q's INT8 tile goes through the program's output rows only with the pipelined wgmma and
    where a row holds it (2·head dim bytes ≥ the padded width)."""
    for d, fits in ((16, False), (31, False), (32, True), (40, True), (96, True), (128, True)):
        p = make_plan("sm90", head_dim=d, n_k=4096, pv="fp8", config="64,64,4,3,pipe")
        assert p.wgmma_pipe and p.q_from_memory == fits, d
    assert not make_plan("sm90", head_dim=128, n_k=4096, pv="fp8", config="64,64,4,3").q_from_memory
    assert not make_plan("sm100", head_dim=128, n_k=4096, pv="fp8", config="64,64,4,3,pipe").q_from_memory


def test_plans_are_frozen_and_the_record_forces_the_same_launch(monkeypatch):
    """A plan cannot change after it is made, and its record's config string, forced through
    ``config=`` (or SAGEBUILD_ATTN_CONFIG), plans the very same launch."""
    p = make_plan("sm90", head_dim=128, n_k=4096)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.tma = False  # type: ignore[misc]
    again = make_plan("sm90", head_dim=128, n_k=4096, config=p.record()["config"])
    assert again == p
    monkeypatch.setenv(configs.ENV_VAR, p.record()["config"])
    knobs.refresh()
    assert make_plan("sm90", head_dim=128, n_k=4096) == p


def test_the_plan_sizes_the_grid_from_the_call(monkeypatch):
    """Dense and packed calls hand the config table their query length and sequences × heads, so
    grid-sized rows (SDXL's text keys) apply to real calls; the plan key fixes both."""
    import torch

    from sagebuild.attention import api, dispatch

    monkeypatch.setattr(dispatch, "device_arch", lambda device: "sm90")
    q = torch.zeros(2, 10, 4096, 64, dtype=torch.float16)
    k = torch.zeros(2, 10, 77, 64, dtype=torch.float16)
    assert api.plan_dense(q, k, k, pv="fp16").config.spec() == "64,64,4,2,96"
    assert api.plan_dense(q[:, :, :1024], k, k, pv="fp16").config.spec() == "64,64,4,3"  # one wave
    packed = make_plan("sm90", head_dim=64, n_k=77, pv="fp16", layout="varlen", n_q=4096, batch_heads=20)
    assert packed.config.maxnreg == 96
