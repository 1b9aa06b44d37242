"""The per-family kernel features table (``sagebuild.attention.features``) and its one rule for
environment overrides: a knob set to 1 turns a feature on wherever its mode is not ``never``, 0
turns it off, unset leaves the mode's default."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagebuild import knobs
from sagebuild.attention import features
from sagebuild.attention.plan import make_plan
from sagebuild.kernels.triton import configs

FAMILIES = ("Hopper", "Blackwell", "interpreter", "RDNA4", "CDNA3")
MODES = {"never", "on", "config", "short", "opt_in"}

# What the table says, written out once more on purpose: a changed mode must be a deliberate
# edit of both (docs/kernels.md shows the table; performance.md has what each measured).
_F = features.FEATURES  # tma, pdl, wgmma_pipe, v_key_order, row_sum_parts
EXPECTED = {
    "Hopper": dict(zip(_F, ("config", "short", "config", "on", "on"))),
    "Blackwell": dict(zip(_F, ("config", "short", "never", "never", "never"))),
    "interpreter": dict(zip(_F, ("config", "never", "never", "opt_in", "on"))),
    "RDNA4": dict.fromkeys(_F, "never"),
    "CDNA3": dict.fromkeys(_F, "never"),
}


def _set(monkeypatch, feature: str, value):
    if value is None:
        monkeypatch.delenv(features.KNOB[feature], raising=False)
    else:
        monkeypatch.setenv(features.KNOB[feature], value)
    knobs.refresh()


def test_table_modes():
    assert set(features.FEATURES) == set(features.KNOB) == set(features.FamilyFeatures._fields) - {"why"}
    for family, modes in EXPECTED.items():
        row = features.modes(family)
        assert {f: getattr(row, f) for f in features.FEATURES} == modes, family
    for row in features.TABLE.values():
        assert {getattr(row, f) for f in features.FEATURES} <= MODES and row.why
    assert features.modes("Ampere") == features.modes("no such family")  # portable kernel only
    assert all(knob in {k.name for k in knobs.KNOBS} for knob in features.KNOB.values())


def _default(mode: str, config_choice: bool, n_k: int) -> bool:
    return {
        "never": False,
        "on": True,
        "opt_in": False,
        "config": config_choice,
        "short": 0 < n_k <= features.PDL_MAX_KEYS,
    }[mode]


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("feature", features.FEATURES)
def test_one_env_rule_for_every_feature(family, feature, monkeypatch):
    """Unset: the mode's default (the config row's choice, the key count, on or off); 1 (or on):
    on unless the mode is never; 0 (or off): off; anything else: as unset."""
    mode = getattr(features.modes(family), feature)
    cases = [
        (c, n) for c in (False, True) for n in (0, 1024, features.PDL_MAX_KEYS, features.PDL_MAX_KEYS + 1)
    ]
    for value, expect in ((None, None), ("", None), ("maybe", None), ("1", True), ("on", True), ("0", False),
                          ("off", False)):  # fmt: skip
        _set(monkeypatch, feature, value)
        for choice, n_k in cases:
            got = features.enabled(feature, family, config_choice=choice, n_k=n_k)
            want = _default(mode, choice, n_k) if expect is None else expect and mode != "never"
            assert got == want, (feature, family, value, choice, n_k, mode)
        assert features.possible(feature, family) == (mode != "never" and expect is not False)


def test_a_knob_is_read_once_until_refreshed(monkeypatch):
    """Values are cached per process (a plan key must not read the environment per call):
    a changed variable counts from ``knobs.refresh()`` on."""
    _set(monkeypatch, "row_sum_parts", None)
    assert features.enabled("row_sum_parts", "Hopper")
    monkeypatch.setenv(features.KNOB["row_sum_parts"], "0")
    assert features.enabled("row_sum_parts", "Hopper")  # not re-read yet
    knobs.refresh()
    assert not features.enabled("row_sum_parts", "Hopper")


def test_pdl_defaults_to_short_key_counts_on_nvidia_and_is_part_of_the_plan_key(monkeypatch):
    """Programmatic dependent launch is on for Hopper and Blackwell up to PDL_MAX_KEYS keys,
    never for AMD or the interpreter, nor for an unknown key count; SAGEBUILD_PDL=1 turns it on
    for every length, 0 off; the knob is part of every plan key."""
    _set(monkeypatch, "pdl", None)
    top = features.PDL_MAX_KEYS
    assert features.enabled("pdl", "Hopper", n_k=1024) and features.enabled("pdl", "Blackwell", n_k=top)
    assert not features.enabled("pdl", "Hopper", n_k=top + 1) and not features.enabled("pdl", "Hopper", n_k=0)
    before = knobs.plan_values()
    _set(monkeypatch, "pdl", "1")
    assert knobs.plan_values() != before
    assert features.enabled("pdl", "Hopper", n_k=16384) and features.enabled("pdl", "Blackwell", n_k=0)
    families = ("CDNA3", "RDNA4", "Ampere", "Ada", "interpreter")
    assert not any(features.enabled("pdl", f, n_k=1024) for f in families)
    _set(monkeypatch, "pdl", "0")
    assert not features.enabled("pdl", "Hopper", n_k=1024)


def test_pipelined_wgmma_is_a_config_property_the_knob_overrides(monkeypatch):
    """The pipelined wgmma (Hopper only) follows the config's ``pipe`` unless SAGEBUILD_WGMMA_PIPE
    forces it on (1) or off (0) for every config; the table rows that take it are Hopper's
    128-key TMA rows (head dim 128 at every length, split 65-96 from 1K keys, 129-192 from 4K)."""
    _set(monkeypatch, "wgmma_pipe", None)
    piped_rows = [r for r in configs._TABLE if r.config.pipe]
    assert [(r.family, r.head_dim, r.config.as_tuple(), r.config.tma, r.min_keys) for r in piped_rows] == [
        ("Hopper", 128, (64, 128, 4, 2, 168), True, 0),
        ("Hopper", 96, (64, 128, 4, 2, 168), True, 1024),
        ("Hopper", 192, (64, 128, 4, 2), True, 4096),
    ]

    def pipe(arch, config):
        return make_plan(arch, head_dim=128, n_k=4096, pv="fp8", config=config).wgmma_pipe

    assert pipe("sm90", "64,64,4,3,pipe") and not pipe("sm90", "64,64,4,3")
    assert not pipe("sm89", "64,64,4,3,pipe") and not pipe("sm100", "64,64,4,3,pipe")
    _set(monkeypatch, "wgmma_pipe", "1")
    assert pipe("sm90", "64,64,4,3") and not pipe("gfx942", "64,64,4,3")
    _set(monkeypatch, "wgmma_pipe", "off")
    assert not pipe("sm90", "64,64,4,3,pipe")


def test_row_sum_parts_by_family(monkeypatch):
    """Row sums in parts: on by default on Hopper and in the interpreter; RDNA's WMMA layout does
    not compile the reshape (off); the knob turns them off, or on where the family can."""
    _set(monkeypatch, "row_sum_parts", None)

    def parts(arch):
        return make_plan(arch, head_dim=128, n_k=4096, pv="fp16").row_sum_parts

    assert parts("sm90") == parts("interpreter") == features.ROW_SUM_PARTS == 8
    assert parts("gfx1201") == parts("sm100") == 1
    _set(monkeypatch, "row_sum_parts", "0")
    assert parts("sm90") == 1
    _set(monkeypatch, "row_sum_parts", "1")
    assert parts("gfx1201") == 1 and parts("sm90") == 8


def test_markdown_table_lists_every_family_and_feature():
    text = features.markdown_table()
    assert text in (Path(__file__).resolve().parents[1] / "docs" / "kernels.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0].split("|")[2:-2] == [f" {f} " for f in features.FEATURES]
    for family in features.TABLE:
        assert any(line.startswith(f"| {family} |") for line in lines), family
    assert lines[-1].startswith("| every other family |")
