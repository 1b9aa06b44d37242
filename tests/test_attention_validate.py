"""Bad inputs get one clear AttentionInputError (a SagebuildError with a fix), never a traceback."""

from __future__ import annotations

import pytest
import torch

from sagebuild.attention import (
    AttentionInputError,
    dispatch,
    sageattn,
    sageattn_qk_int8_pv_fp8_triton,
    sageattn_varlen,
)
from sagebuild.errors import SagebuildError

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _t(*shape, dtype=torch.float16):
    return torch.zeros(*shape, dtype=dtype, device=DEV)


@pytest.mark.parametrize(
    ("args", "kw", "match"),
    [
        ((_t(1, 2, 8, 64, dtype=torch.float32),) * 3, {}, "NaN trap"),
        ((_t(1, 2, 8, 64, dtype=torch.int8),) * 3, {}, "supported: float16, bfloat16"),
        ((_t(1, 2, 8, 64), _t(1, 2, 8, 64, dtype=torch.bfloat16), _t(1, 2, 8, 64)), {}, "share one dtype"),
        ((_t(2, 8, 64),) * 3, {}, "must have 4 dims"),
        ((_t(1, 2, 8, 64),) * 3, {"tensor_layout": "BHND"}, "tensor_layout must be"),
        ((_t(1, 3, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 8, 64)), {}, "multiple of k's"),
        ((_t(1, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 1, 8, 64)), {}, "different head counts"),
        ((_t(1, 2, 8, 64), _t(1, 2, 8, 64), _t(1, 2, 9, 64)), {}, "different sequence lengths"),
        ((_t(1, 2, 8, 64), _t(2, 2, 8, 64), _t(2, 2, 8, 64)), {}, "batch sizes differ"),
        ((_t(1, 2, 8, 320),) * 3, {}, "head dim 320 is not supported.*64, 128, 256"),
        ((_t(1, 2, 8, 64),) * 3, {"sm_scale": -1.0}, "positive and finite"),
        ((_t(1, 2, 8, 64),) * 3, {"qk_quant_gran": "per_thread"}, "qk_quant_gran"),
        ((_t(1, 2, 8, 64),) * 3, {"quantization_backend": "cuda"}, "quantization_backend"),
    ],
)
def test_bad_inputs_raise_clear_errors(args, kw, match):
    with pytest.raises(AttentionInputError, match=match) as info:
        sageattn(*args, **kw)
    assert isinstance(info.value, SagebuildError) and isinstance(info.value, ValueError)
    assert info.value.fix


def test_layout_mixup_names_the_layout():
    q = _t(1, 8, 4, 64)  # NHD tensors (q: seq 8, 4 heads; k/v: seq 6, 2 heads) passed as HND
    k = v = _t(1, 6, 2, 64)
    with pytest.raises(AttentionInputError, match="tensor_layout"):
        sageattn(q, k, v, tensor_layout="HND")


def test_pv_accum_dtype_and_cpu_without_interpreter(monkeypatch):
    q = _t(1, 2, 8, 64)
    with pytest.raises(AttentionInputError, match="pv_accum_dtype"):
        sageattn_qk_int8_pv_fp8_triton(q, q, q, pv_accum_dtype="fp16")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    cpu = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(AttentionInputError, match="GPU"):
        sageattn(cpu, cpu, cpu)


def test_varlen_checks_cumulative_lengths():
    q = _t(10, 2, 64)
    good = torch.tensor([0, 4, 10], dtype=torch.int32, device=DEV)
    with pytest.raises(AttentionInputError, match="end at the token count"):
        sageattn_varlen(q, q, q, torch.tensor([0, 4, 9], dtype=torch.int32, device=DEV), good, 6, 6)
    with pytest.raises(AttentionInputError, match="max_seqlen"):
        sageattn_varlen(q, q, q, good, good, 5, 6)
    with pytest.raises(AttentionInputError, match="packed"):
        sageattn_varlen(_t(1, 10, 2, 64), q, q, good, good, 6, 6)


def test_dispatch_reads_the_arch_table():
    from sagebuild import archs

    for name, arch in archs.ARCHS.items():
        if arch.pv is None:
            with pytest.raises(AttentionInputError, match="nearest supported"):
                dispatch._row(name)
        else:
            assert dispatch.VARIANTS[archs.pv_path(name)] in ("qk_int8_pv_fp16", "qk_int8_pv_fp8")
    assert dispatch.fp8_dtype("gfx942") == torch.float8_e4m3fnuz
    assert dispatch.fp8_dtype("sm90") == torch.float8_e4m3fn
    with pytest.raises(AttentionInputError, match="no FP8 matrix units"):
        dispatch.fp8_dtype("gfx1100")


@pytest.mark.parametrize(
    ("arch", "head_dim", "n_k", "variant"),
    [
        ("sm90", 64, 1024, "qk_int8_pv_fp16"),  # short, head dim 64: FP16 P·V measured faster
        ("sm90", 48, 4096, "qk_int8_pv_fp16"),  # padded to 64: same row
        ("sm90", 64, 8192, "qk_int8_pv_fp8"),  # long: the arch default
        ("sm90", 128, 1024, "qk_int8_pv_fp8"),
        ("sm90", 256, 65536, "qk_int8_pv_fp8"),  # head dim 256: MMA-accumulated FP8 measured faster
        ("sm80", 256, 1024, "qk_int8_pv_fp16"),  # no FP8 anywhere on Ampere
        ("gfx942", 64, 1024, "qk_int8_pv_fp8"),  # no measured preference on CDNA3: the default
    ],
)
def test_sageattn_variant_follows_arch_table_and_measured_preferences(arch, head_dim, n_k, variant):
    from sagebuild.attention import dispatch

    assert dispatch.variant_for_arch_call(arch, head_dim, n_k) == variant


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
    from sagebuild.attention import dispatch

    assert dispatch._choice(arch, head_dim, n_k)[1] == accum


def test_long_sequence_rows_and_wide_k_scale_blocks():
    """Rows with min_keys serve only calls with that many keys; 'fp8' rows serve both FP8
    accumulations; a 128-key tile quantizes K in 128-token blocks, other tiles in 64."""
    from sagebuild.kernels.triton import configs

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
    rows = configs.table_rows()
    assert any(r["min_keys"] == 8192 for r in rows) and all("config" in r for r in rows)


def test_tma_rows_serve_only_calls_that_can_use_tma(monkeypatch):
    """A row whose config loads K/V by TMA serves a call only where TMA can run: the family,
    FP8 P·V on K/V from our Triton quantization, keys a multiple of 16
    (FP8 V's channel-major rows), SAGEBUILD_TMA not 0; every other call takes the next row."""
    from sagebuild.kernels.triton import configs

    from sagebuild.attention import api

    monkeypatch.delenv(configs.TMA_ENV_VAR, raising=False)
    row = configs.lookup("Hopper", 128, "fp8acc", False, n_k=4096, tma_ok=True)
    assert row.tma and row.as_tuple() == (64, 128, 4, 2, 168) and row.k_blk == 128
    assert configs.use_tma("Hopper", row) and not configs.use_tma("Ampere", row)
    assert not configs.lookup("Hopper", 128, "fp8acc", False, n_k=4096).tma  # tma_ok defaults to False
    assert not configs.lookup("Hopper", 128, "fp8", False, n_k=4096, tma_ok=True).tma  # two-level
    assert not configs.lookup("Hopper", 128, "fp8acc", False, n_k=2048, tma_ok=True).tma
    wide = configs.lookup("Hopper", 256, "fp8acc", False, tma_ok=True)  # head dim 256: same tiles
    assert wide.tma and wide.as_tuple() == configs.lookup("Hopper", 256, "fp8acc", False).as_tuple()
    assert not configs.lookup("Hopper", 256, "fp8acc", False).tma

    def resolved(head_dim=128, n_k=4096, pv="fp8", accum="fp32", ours=True):
        return api._resolve("sm90", head_dim, pv, False, None, n_k, accum, ours)[1]

    assert resolved() == row and resolved(n_k=16384) == row
    assert not resolved(ours=False).tma  # the extension lays K/V out otherwise
    assert not resolved(n_k=4104).tma  # FP8 V rows of 4104 bytes: not 16-byte multiples
    # the split head dims' rows (keyed 96 and 192) ask for TMA from 4096 keys, not below
    for head_dim in (80, 96, 160, 192):
        split_row = resolved(head_dim=head_dim)
        assert split_row.tma and split_row.pipe and split_row.block_n == 128, (head_dim, split_row)
        assert not resolved(head_dim=head_dim, n_k=2048).tma, head_dim
        assert not resolved(head_dim=head_dim, n_k=4104).tma, head_dim
    assert not resolved(pv="fp16", accum="fp32+fp32").tma
    assert not api._resolve("sm80", 128, "fp8", False, None, 4096, "fp32", True)[1].tma
    # K/V quantized inside the attention kernel (forced up to 8192 keys): no TMA there, so the
    # next row serves the call
    assert api._config_and_fusion("sm90", 128, "fp8", False, None, 4096, "fp32", "auto")[1:] == (row, False)
    monkeypatch.setenv(configs.FUSE_ENV_VAR, "8192")
    _, fused_cfg, fused = api._config_and_fusion("sm90", 128, "fp8", False, None, 4096, "fp32", "auto")
    assert fused and not fused_cfg.tma and fused_cfg.as_tuple() == (64, 64, 4, 3, 168)
    monkeypatch.delenv(configs.FUSE_ENV_VAR)
    monkeypatch.setenv(configs.TMA_ENV_VAR, "0")
    assert not resolved().tma and not configs.use_tma("Hopper", row)
    monkeypatch.setenv(configs.TMA_ENV_VAR, "1")  # tuning: TMA for any eligible config
    assert configs.use_tma("Hopper", configs.LaunchConfig(64, 64, 4, 3))
    assert any(r["tma"] for r in configs.table_rows())


def test_launch_config_strings_with_and_without_a_register_cap():
    from sagebuild.kernels.triton import configs

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
    )
    assert configs.parse_config("64,64,4,3,pipe") == configs.LaunchConfig(64, 64, 4, 3, pipe=True)
    for row in configs.table_rows():  # every row can be forced as it is
        cfg = configs.LaunchConfig(*row["config"], tma=row["tma"], pipe=row["pipe"])
        assert configs.parse_config(cfg.spec()) == cfg
    bad_configs = (("64,64,4,3,300", "maxnreg"), ("64,64,4", "4 or 5 integers"),
                   ("64,48,4,3", "power of two"), ("64,64,4,3,tma,168", "integers"),
                   ("tma", "4 or 5 integers"), ("64,64,4,3,tma,tma", "integers"))  # fmt: skip
    for bad, msg in bad_configs:
        with pytest.raises(ValueError, match=msg):
            configs.parse_config(bad)


def test_split_head_dims_and_their_table_rows():
    """Head dims 65–96 and 129–192 run as two pieces (64 + 32, 128 + 64); rows keyed with the split
    width (96) apply only where a family has them, else the padded head dim's rows as before."""
    from sagebuild.kernels.triton import configs

    split = [d for d in range(1, 257) if configs.split_head_dim(d, configs.padded_head_dim(d))]
    assert split == list(range(65, 97)) + list(range(129, 193))
    hopper_fp16_128 = configs.lookup("Hopper", 128, "fp16", False)
    assert configs.lookup("Hopper", 128, "fp16", False, split=True) != hopper_fp16_128
    ampere = configs.lookup("Ampere", 128, "fp16", True)
    assert configs.lookup("Ampere", 128, "fp16", True, split=True) == ampere
    assert configs.lookup("Hopper", 128, "fp16", False, "32,32,4,2", split=True).as_tuple() == (32, 32, 4, 2)


def test_graphed_attention_needs_gpu_tensors_and_says_so():
    """The CUDA-graph wrapper refuses CPU tensors with a fix, before touching any CUDA API."""
    from sagebuild.attention import AttentionInputError, GraphedAttention

    q = torch.randn(1, 2, 16, 64, dtype=torch.float16)
    with pytest.raises(AttentionInputError, match="CUDA/ROCm tensor") as err:
        GraphedAttention(q, q, q)
    assert "sageattn directly" in err.value.fix
    with pytest.raises(AttentionInputError, match="CUDA/ROCm tensor"):
        GraphedAttention(q, "not a tensor", q)


def test_register_cap_is_refused_off_nvidia():
    from sagebuild.attention import AttentionInputError
    from sagebuild.attention.api import _resolve

    assert _resolve("sm90", 128, "fp8", False, "64,64,4,3,168")[1].maxnreg == 168
    with pytest.raises(AttentionInputError, match="NVIDIA-only") as err:
        _resolve("gfx942", 128, "fp8", False, "64,64,4,3,168")
    assert "fifth number" in err.value.fix
    assert _resolve("gfx942", 128, "fp8", False, "64,64,4,3")[1].maxnreg is None


def test_pipelined_wgmma_is_a_config_property_the_knob_overrides(monkeypatch):
    """The pipelined wgmma (Hopper only) follows the config's ``pipe`` unless
    SAGEBUILD_WGMMA_PIPE forces it on (1) or off (0) for every config; the table rows that take
    it are Hopper's 128-key TMA rows from 4K keys, where it measured faster (docs/performance.md
    run 20)."""
    from sagebuild.kernels.triton import configs

    plain, piped = configs.LaunchConfig(64, 128, 4, 2, 168, tma=True), configs.parse_config("64,64,4,3,pipe")
    monkeypatch.delenv(configs.WGMMA_PIPE_ENV_VAR, raising=False)
    assert not configs.use_wgmma_pipe("Hopper", plain) and configs.use_wgmma_pipe("Hopper", piped)
    assert not configs.use_wgmma_pipe("Ampere", piped) and not configs.use_wgmma_pipe("Blackwell", piped)
    piped_rows = [r for r in configs.table_rows() if r["pipe"]]
    assert [(r["family"], r["head_dim"], r["config"], r["tma"], r["min_keys"]) for r in piped_rows] == [
        ("Hopper", 128, (64, 128, 4, 2, 168), True, 4096),
        ("Hopper", 96, (64, 128, 4, 2, 168), True, 4096),
        ("Hopper", 192, (64, 128, 4, 2), True, 4096),
    ]
    assert configs.lookup("Hopper", 128, "fp8acc", False, n_k=4096, tma_ok=True).pipe
    assert not configs.lookup("Hopper", 128, "fp8acc", False, n_k=4096, tma_ok=False).pipe
    monkeypatch.setenv(configs.WGMMA_PIPE_ENV_VAR, "1")
    assert configs.use_wgmma_pipe("Hopper", plain) and not configs.use_wgmma_pipe("CDNA3", plain)
    monkeypatch.setenv(configs.WGMMA_PIPE_ENV_VAR, "off")
    assert not configs.use_wgmma_pipe("Hopper", piped)
