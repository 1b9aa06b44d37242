"""The launch-config table (``kernels/triton/configs.py``): rows, lookups, config strings, split
head dims and the measured P·V preferences. No kernel runs here."""

from __future__ import annotations

import functools

import pytest

from sagebuild import knobs
from sagebuild.kernels.triton import configs


def test_long_sequence_rows_and_wide_k_scale_blocks():
    """Rows with min_keys serve only calls with that many keys; 'fp8' rows serve both FP8
    accumulations; a 128-key tile quantizes K in 128-token blocks, other tiles in 64."""
    long_ = configs.lookup("Hopper", 128, "fp8", False, n_k=16384)
    short = configs.lookup("Hopper", 128, "fp8", False, n_k=4096)
    assert long_.block_n == 128 and long_.k_blk == 128
    assert short.block_n == 64 and short.k_blk == configs.K_BLK == 64
    assert configs.lookup("Hopper", 128, "fp8", False) == short  # n_k unknown: the general row
    assert configs.lookup("Hopper", 128, "fp8acc", True, n_k=16384) == long_
    assert configs.lookup("Hopper", 128, "fp16", False, n_k=16384).block_n == 64
    # head dim 256 (and the 192 split): the accumulation picks the row
    assert configs.lookup("Hopper", 256, "fp8acc", False).as_tuple() == (64, 64, 4, 3)
    assert configs.lookup("Hopper", 256, "fp8", False).num_warps == 8
    assert configs.lookup("Hopper", 256, "fp8acc", False, split=True).as_tuple() == (64, 64, 4, 3)
    assert configs.LaunchConfig(32, 256, 4, 1).k_blk == 64  # wider tiles gather per-column scales
    assert configs.LaunchConfig(32, 16, 4, 1).k_blk == 64
    assert any(r.min_keys == 8192 for r in configs._TABLE)


def test_short_key_rows_follow_the_measured_winners():
    """Hopper rows for short key sequences (tune_attention.py on the H200): head dim 64 FP16 takes
    64-key tiles below 1K keys (SDXL's 77 text keys to 512), 128-key tiles from 1K, 128-row
    tiles from 1.5K; head dim 128's MMA-accumulated FP8 takes the TMA row at every length."""
    fp16 = {
        n: configs.lookup("Hopper", 64, "fp16", False, n_k=n).as_tuple()[:4] for n in (77, 512, 1024, 2048)
    }
    assert fp16 == {77: (64, 64, 4, 3), 512: (64, 64, 4, 3), 1024: (64, 128, 4, 3), 2048: (128, 64, 4, 3)}
    for n in (512, 1024, 2048, 4096):
        assert (
            configs.lookup("Hopper", 128, "fp8acc", False, n_k=n, tma_ok=True).spec()
            == "64,128,4,2,168,tma,pipe"
        )


def test_text_key_rows_need_several_waves_of_programs():
    """Head dim 64 FP16 at <= 128 keys takes the 96-register row only when the grid has at least
    640 programs of its 64 rows (SDXL's 2x10x4096:77 has 1,280, 2x20x1024:77 640): one wave (320)
    ran slower so; longer key sequences and unknown grids keep the general row."""
    sdxl = configs.lookup("Hopper", 64, "fp16", False, n_k=77, n_q=4096, batch_heads=20)
    assert sdxl.spec() == "64,64,4,2,96"
    general = configs.lookup("Hopper", 64, "fp16", False, n_k=77).spec()
    assert general == "64,64,4,3"
    assert configs.lookup("Hopper", 64, "fp16", False, n_k=77, n_q=1024, batch_heads=40).maxnreg == 96
    assert configs.lookup("Hopper", 64, "fp16", False, n_k=77, n_q=1024, batch_heads=20).spec() == general
    assert configs.lookup("Hopper", 64, "fp16", False, n_k=129, n_q=4096, batch_heads=20).spec() == general
    # the threshold counts programs: 640 serve, 639 blocks of 64 rows do not
    assert configs.lookup("Hopper", 64, "fp16", True, n_k=128, n_q=64 * 640, batch_heads=1).maxnreg == 96
    assert configs.lookup("Hopper", 64, "fp16", True, n_k=128, n_q=64 * 639, batch_heads=1).maxnreg is None
    assert configs.lookup("Hopper", 64, "fp8", False, n_k=77, n_q=4096, batch_heads=20).maxnreg is None


def test_tma_rows_need_a_call_that_can_load_by_tma():
    """A row whose config loads K/V by TMA serves a lookup only with ``tma_ok`` (the plan decides
    it: ``test_plan.py``); otherwise the next row serves, the same tiles where they exist."""
    row = configs.lookup("Hopper", 128, "fp8acc", False, n_k=4096, tma_ok=True)
    assert row.tma and row.pipe and row.as_tuple() == (64, 128, 4, 2, 168) and row.k_blk == 128
    assert not configs.lookup("Hopper", 128, "fp8acc", False, n_k=4096).tma  # tma_ok defaults to False
    assert not configs.lookup("Hopper", 128, "fp8", False, n_k=4096, tma_ok=True).tma  # two-level
    assert configs.lookup("Hopper", 128, "fp8acc", False, n_k=512, tma_ok=True).tma  # every key count
    # the split head dims' TMA rows start at 1K keys (65-96) and at 4K (129-192)
    for width, first in ((96, 1024), (192, 4096)):
        row = functools.partial(configs.lookup, "Hopper", width, "fp8acc", False, tma_ok=True, split=True)
        assert row(n_k=first).tma and not row(n_k=first - 1).tma, width
    wide = configs.lookup("Hopper", 256, "fp8acc", False, tma_ok=True)  # head dim 256: same tiles
    assert wide.tma and wide.as_tuple() == configs.lookup("Hopper", 256, "fp8acc", False).as_tuple()
    assert not configs.lookup("Hopper", 256, "fp8acc", False).tma
    assert any(r.config.tma for r in configs._TABLE)


def test_the_table_ends_with_a_catch_all_and_every_family_is_served():
    last = configs._TABLE[-1]
    assert (last.family, last.head_dim, last.variant, last.causal, last.min_keys) == ("*", "*", "*", "*", 0)
    for family in ("Hopper", "Ampere", "Ada", "Blackwell", "CDNA2", "CDNA3", "CDNA4", "RDNA3", "RDNA4",
                   "interpreter", "unknown"):  # fmt: skip
        for d in configs.NATIVE_HEAD_DIMS:
            for variant in ("fp16", "fp8", "fp8acc"):
                cfg = configs.lookup(family, d, variant, True, n_k=1 << 20, tma_ok=True)
                assert configs.parse_config(cfg.spec()) == cfg, (family, d, variant)
    assert configs.lookup("interpreter", 64, "fp16", False) == configs.LaunchConfig(32, 16, 4, 1)


def test_launch_config_strings_with_and_without_a_register_cap():
    plain = configs.parse_config("64,64,4,3")
    assert plain.maxnreg is None and plain.launch_options() == {"num_warps": 4, "num_stages": 3}
    capped = configs.parse_config("64, 64, 4, 3, 168")
    assert capped.launch_options() == {"num_warps": 4, "num_stages": 3, "maxnreg": 168}
    assert capped.as_tuple() == (64, 64, 4, 3, 168) and not capped.tma
    tma = configs.parse_config("64,128,4,2,168,TMA")
    assert tma.tma and tma.as_tuple() == (64, 128, 4, 2, 168) and tma.spec() == "64,128,4,2,168,tma"
    assert configs.parse_config("64,64,4,3,tma") == configs.LaunchConfig(64, 64, 4, 3, tma=True)
    both = configs.LaunchConfig(64, 128, 4, 2, 168, tma=True, pipe=True)
    assert both.spec() == "64,128,4,2,168,tma,pipe" and both.as_tuple() == (64, 128, 4, 2, 168)
    assert (
        configs.parse_config("64,128,4,2,168,tma,pipe")
        == both
        == configs.parse_config("64,128,4,2,168,Pipe,tma")
        == configs.parse_config((64, 128, 4, 2, 168, "tma", "pipe"))
    )
    assert configs.parse_config("64,64,4,3,pipe") == configs.LaunchConfig(64, 64, 4, 3, pipe=True)
    assert configs.parse_config(both) is both
    for row in configs._TABLE:  # every row can be forced as it is
        assert configs.parse_config(row.config.spec()) == row.config
    bad_configs = (("64,64,4,3,300", "maxnreg"), ("64,64,4", "4 or 5 integers"),
                   ("64,48,4,3", "power of two"), ("64,64,4,3,tma,168", "integers"),
                   ("tma", "4 or 5 integers"), ("64,64,4,3,tma,tma", "integers"),
                   ("8,64,4,3", "at least 16"), ("64,64,4,0", "num_stages"))  # fmt: skip
    for bad, msg in bad_configs:
        with pytest.raises(ValueError, match=msg):
            configs.parse_config(bad)


def test_amd_launch_options_in_configs_and_config_strings():
    """waves_per_eu, matrix_instr_nonkdim and kpack ride in a config as ``name=value`` entries:
    ``spec`` writes them, ``parse_config`` reads them back, ``launch_options`` passes exactly the
    ones set; a config without them launches with the options it always had."""
    cfg = configs.parse_config("128, 64, 4, 2, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2")
    assert (cfg.waves_per_eu, cfg.matrix_instr_nonkdim, cfg.kpack) == (2, 16, 2)
    assert cfg.spec() == "128,64,4,2,waves_per_eu=2,matrix_instr_nonkdim=16,kpack=2"
    assert configs.parse_config(cfg.spec()) == cfg == configs.parse_config((128, 64, 4, 2, "kpack=2",
        "matrix_instr_nonkdim=16", "waves_per_eu=2"))  # fmt: skip
    assert cfg.launch_options() == {"num_warps": 4, "num_stages": 2, "waves_per_eu": 2,
                                    "matrix_instr_nonkdim": 16, "kpack": 2}  # fmt: skip
    assert configs.parse_config("64,64,4,3,tma,waves_per_eu=1").spec() == "64,64,4,3,tma,waves_per_eu=1"
    for bad, msg in (("128,64,4,2,waves=2", "not a launch option"), ("128,64,4,2,waves_per_eu=0", "1..16"),
                     ("128,64,4,2,matrix_instr_nonkdim=8", "4, 16, 32"), ("128,64,4,2,kpack=x", "integer"),
                     ("128,64,4,2,kpack=1,kpack=2", "not a launch option"),
                     ("128,64,4,2,waves_per_eu=2,tma", "integers")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            configs.parse_config(bad)


def test_cdna_rows_run_two_waves_per_simd_and_no_other_row_has_amd_options():
    """The CDNA rows ask for 2 waves per SIMD (gfx950's FP16 P·V spills so and keeps 1); no
    NVIDIA or RDNA row carries an AMD option, so those launches are unchanged."""
    for family, variant, waves in (("CDNA3", "fp8", 2), ("CDNA3", "fp16", 2), ("CDNA4", "fp8", 2),
                                   ("CDNA4", "fp16", None), ("CDNA2", "fp16", 2)):  # fmt: skip
        for d in (64, 128):
            assert configs.lookup(family, d, variant, False).waves_per_eu == waves, (family, d, variant)
    for row in configs._TABLE:
        if not row.family.startswith("CDNA"):
            assert not row.config.amd_options(), row


def test_the_config_knob_and_keyword(monkeypatch):
    """The keyword wins over SAGEBUILD_ATTN_CONFIG, which wins over the table; a bad knob value
    is a clear error."""
    monkeypatch.setenv(configs.ENV_VAR, "16,16,4,1")
    knobs.refresh()
    assert configs.lookup("Hopper", 128, "fp16", False).as_tuple() == (16, 16, 4, 1)
    assert configs.lookup("Hopper", 128, "fp16", False, "32,32,4,2").as_tuple() == (32, 32, 4, 2)
    monkeypatch.setenv(configs.ENV_VAR, "16,17,4,1")
    knobs.refresh()
    with pytest.raises(ValueError, match="power of two"):
        configs.lookup("Hopper", 128, "fp16", False)
    monkeypatch.delenv(configs.ENV_VAR)
    knobs.refresh()
    assert configs.lookup("Hopper", 128, "fp16", False).as_tuple() == (128, 64, 8, 3)


def test_split_head_dims_and_their_table_rows():
    """Head dims 65–96 and 129–192 run as two pieces (64 + 32, 128 + 64); rows keyed with the split
    width (96) apply only where a family has them, else the padded head dim's rows as before."""
    split = [d for d in range(1, 257) if configs.split_head_dim(d, configs.padded_head_dim(d))]
    assert split == list(range(65, 97)) + list(range(129, 193))
    assert configs.split_width(128) == 96 and configs.split_width(256) == 192
    hopper_fp16_128 = configs.lookup("Hopper", 128, "fp16", False)
    assert configs.lookup("Hopper", 128, "fp16", False, split=True) != hopper_fp16_128
    ampere = configs.lookup("Ampere", 128, "fp16", True)
    assert configs.lookup("Ampere", 128, "fp16", True, split=True) == ampere
    assert configs.lookup("Hopper", 128, "fp16", False, "32,32,4,2", split=True).as_tuple() == (32, 32, 4, 2)


def test_padded_head_dims_and_variant_keys():
    assert [configs.padded_head_dim(d) for d in (1, 64, 65, 128, 129, 256, 257)] == [64, 64, 128, 128, 256,
                                                                                      256, None]  # fmt: skip
    assert configs.variant_key("fp8", "fp32") == "fp8acc"
    assert configs.variant_key("fp8", "fp32+fp32") == "fp8" and configs.variant_key("fp16", "fp32") == "fp16"


def test_q_blocks_per_granularity():
    cfg = configs.LaunchConfig(128, 64, 8, 3)
    assert cfg.q_blk("per_block") == 128 and cfg.q_blk("per_warp") == 16
    assert configs.LaunchConfig(32, 16, 4, 1).q_blk("per_warp") == 16  # at least one MMA's rows
    assert configs.LaunchConfig(64, 64, 1, 1).q_blk("per_warp") == 64


def test_measured_pv_preferences():
    """Hopper: FP16 P·V at head dim 64 up to 2K keys, MMA-accumulated FP8 elsewhere (on the
    128-key row from 2K keys: 2.5K-4K self-attention 13-16 % faster than FP16, H100); no other
    family has a measured preference (the arch table's default stands)."""
    assert configs.preferred_pv("Hopper", 64, 2048) == "fp16"
    assert configs.preferred_pv("Hopper", 64, 2049) == "fp8acc"
    for n in (2049, 4096, 8192):
        assert configs.lookup("Hopper", 64, "fp8acc", False, n_k=n).as_tuple() == (64, 128, 4, 3, 168)
    assert configs.lookup("Hopper", 64, "fp8acc", False, n_k=2048).as_tuple() == (64, 64, 4, 3)
    assert configs.preferred_pv("Hopper", 128, 1) == "fp8acc"
    # head dim 256 itself (no split): FP8 at any key count
    assert configs.preferred_pv("Hopper", 256, 1) == configs.preferred_pv("Hopper", 256, 256) == "fp8acc"
    assert (
        configs.preferred_pv("Ampere", 64, 1) is None and configs.preferred_pv("CDNA3", 128, 1 << 20) is None
    )


def test_split_head_dims_prefer_fp16_on_64_row_tiles_for_short_keys():
    """Head dims 129-192 (split 128 + 64, rows keyed 192): FP16 P·V on 64-row tiles up to
    SPLIT192_FP16_MAX_KEYS keys (H100, graph: 2×8×256×160 0.0223 against FP8's 0.0252 ms,
    2×8×512×160 0.0372 against 0.0413), FP8 above (parity at 640 keys); an explicit FP16 call
    beyond it keeps head dim 256's 128-row row."""
    top = configs.SPLIT192_FP16_MAX_KEYS
    assert configs.preferred_pv("Hopper", 160, top) == "fp16"
    assert configs.preferred_pv("Hopper", 192, top + 1) == "fp8acc"
    assert configs.preferred_pv("Ampere", 160, top) is None
    assert configs.lookup("Hopper", 256, "fp16", False, split=True, n_k=top).as_tuple() == (64, 64, 4, 3)
    assert configs.lookup("Hopper", 256, "fp16", False, split=True, n_k=top + 1).as_tuple() == (128, 64, 8, 3)
    assert configs.lookup("Hopper", 256, "fp16", False, n_k=top).as_tuple() == (128, 64, 8, 3)


def test_causal_grids_go_heads_first_only_while_k_and_v_fit_l2():
    """Measured on the H100: heads first helps a causal call whose K/V fit in L2 (1×32×4096×96
    0.98× → 1.04× SDPA) and costs the long ones (4×32×8192×64 1.11× → 0.80×)."""
    limit = configs._HEADS_FIRST_MAX_KV_BYTES["Hopper"]
    assert configs.heads_first("Hopper", True, limit)
    assert not configs.heads_first("Hopper", True, limit + 1)
    assert not configs.heads_first("Hopper", False, 1)
    assert not configs.heads_first("CDNA3", True, 1)  # unmeasured there
