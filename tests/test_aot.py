"""Ahead-of-time compiles of the attention kernels for GPUs this machine does not have.

Runs in subprocesses, one per target arch (Triton 3.6 carries state from one AMD target's compile
into the next), without TRITON_INTERPRET (the interpreter replaces the kernels with Python
functions that ``triton.compile`` cannot lower). FP8 P·V is compiled wherever the arch table has
an FP8 matrix path (sm89, sm90, gfx942, gfx950, gfx1201, gfx1200); never for gfx1100, which has no
FP8 matrix units (an emulated FP8 dot there takes over a minute to compile). The AMD FP8 paths are
also counted in their AMDGCN (``tests/isa_counts.py``): matrix instructions, FP8 conversions,
spills, and RDNA4's P·V default against both variants' key loops; ``tests/kernel_asm.py`` reads
the NVIDIA SASS.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kernel_asm
import pytest

from sagebuild import archs
from sagebuild.kernels.triton import quant

CASES = [  # (arch, variant, head dim)
    ("gfx1201", "qk_int8_pv_fp16", 128),
    ("gfx1201", "qk_int8_pv_fp8", 128),
    ("gfx1200", "qk_int8_pv_fp8", 128),
    ("gfx1100", "qk_int8_pv_fp16", 128),
    ("gfx942", "qk_int8_pv_fp16", 128),
    ("gfx942", "qk_int8_pv_fp8", 128),
    ("gfx950", "qk_int8_pv_fp8", 128),
    ("sm80", "qk_int8_pv_fp16", 128),
    ("sm89", "qk_int8_pv_fp16", 128),
    ("sm89", "qk_int8_pv_fp8", 128),
    ("sm90", "qk_int8_pv_fp16", 128),
    ("sm90", "qk_int8_pv_fp8", 128),
    # head dim 256 (beyond upstream): the INT32→FP32 bit trick's bound is reached here
    ("gfx1201", "qk_int8_pv_fp16", 256),
    ("gfx942", "qk_int8_pv_fp8", 256),
    ("sm90", "qk_int8_pv_fp16", 256),
    ("sm90", "qk_int8_pv_fp8", 256),
]
# Table rows that only some calls reach: (arch, variant, head dim, keys, FP8 accumulation).
# Hopper from 8K keys (128-key tiles, 128-token K blocks) and the MMA-accumulated rows.
ROW_CASES = [
    ("sm90", "qk_int8_pv_fp8", 128, 16384, "fp32+fp32"),
    ("sm90", "qk_int8_pv_fp8", 64, 16384, "fp32"),
    ("sm90", "qk_int8_pv_fp8", 256, 8192, "fp32"),
]
# What Triton 3.6 emits for an INT8 mma.sync (the satfinite qualifier is part of it).
_PTX_MMA_S8 = "mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32"
_SCRIPT = """
import json, sys
from dataclasses import asdict
from sagebuild.attention.aot import compile_variant
cases = json.loads(sys.argv[1])
print(json.dumps([asdict(compile_variant(v, a, d, n_k=n, accum=acc)) for a, v, d, n, acc in cases]))
"""

pytestmark = pytest.mark.slow


def _target(case: Any) -> Any:
    """The arch a compile case names (its first entry, or the case itself), else None."""
    first = case[0] if isinstance(case, (list, tuple)) and case else case
    return first if isinstance(first, str) and first[:2] in ("sm", "gf") else None


def _compile_in_subprocess(script: str, cases: list, **env_extra: str) -> Any:
    """Run a compile script on ``cases`` (JSON) outside the interpreter (this folder's helper
    modules importable): one process per target arch, two at a time (Triton 3.6 carries state from
    one AMD target's compile into the next in a process: ``build.run.run_aot``). Each process's last
    line, parsed, and joined in the cases' order: lists concatenated, dicts merged."""
    path = os.pathsep.join(
        filter(None, [os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH")])
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": path} | env_extra
    targets = [_target(c) for c in cases]
    groups = [[i for i, t in enumerate(targets) if t == target] for target in dict.fromkeys(targets)] or [[]]

    def run(group: list[int]) -> Any:
        args = json.dumps([cases[i] for i in group])
        proc = subprocess.run([sys.executable, "-c", script, args], capture_output=True, text=True, env=env,
                              timeout=900)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    with ThreadPoolExecutor(max_workers=2) as pool:
        parts = list(pool.map(run, groups))
    if isinstance(parts[0], dict):
        return {k: v for part in parts for k, v in part.items()}
    if any(len(part) != len(group) for group, part in zip(groups, parts)):  # not one result per case
        return [x for part in parts for x in part]
    out: list = [None] * len(cases)
    for group, part in zip(groups, parts):
        for i, x in zip(group, part):
            out[i] = x
    return out


@pytest.fixture(scope="module")
def results() -> dict:
    cases = [(*c, 0, "fp32+fp32") for c in CASES] + ROW_CASES
    return dict(zip(cases, _compile_in_subprocess(_SCRIPT, cases)))


@pytest.mark.parametrize(("arch", "variant", "head_dim"), CASES)
def test_compiles_to_matrix_instructions(results, arch, variant, head_dim, request):
    row = archs.get(arch)
    if row.vendor == "cuda" and arch != "sm90" and not re.search(row.int8_mma, _PTX_MMA_S8):
        request.applymarker(
            pytest.mark.xfail(
                strict=True, reason="sagebuild/archs.py's mma.sync INT8 regex lacks the .satfinite qualifier"
            )
        )
    r = results[(arch, variant, head_dim, 0, "fp32+fp32")]
    assert r["ok"], r["error"]
    assert re.search(row.int8_mma, r["instruction"])
    if variant == "qk_int8_pv_fp8":
        assert re.search(row.fp8_mma, r["instruction"])


@pytest.mark.parametrize("case", ROW_CASES)
def test_long_sequence_and_mma_accumulated_rows_compile_to_wgmma(results, case):
    arch, variant, head_dim, n_k, accum = case
    row = archs.get(arch)
    r = results[case]
    assert r["ok"], r["error"]
    assert re.search(row.int8_mma, r["instruction"]) and re.search(row.fp8_mma, r["instruction"])


def test_refuses_what_the_table_rules_out():
    from sagebuild.attention.aot import compile_variant

    r = compile_variant("qk_int8_pv_fp8", "gfx1100")
    assert not r.ok and "fp8" in r.error.lower()
    rdna3 = archs.get("gfx1100")  # no FP8 matrix units: the table says so
    assert rdna3.fp8_mma is None and rdna3.fp8_dtype is None
    assert not compile_variant("qk_int8_pv_fp16", "gfx1030").ok


_PRE_SCRIPT = """
import json, sys
from kernel_asm import compile_preprocessing
res = {f"{a}/{st}": compile_preprocessing(a, stages=st) for a, st in json.loads(sys.argv[1])}
print(json.dumps({k: {n: {"ok": r["ok"], "error": r["error"], "cp_async": "cp.async" in (r["asm"] or "")}
                      for n, r in v.items()} for k, v in res.items()}))
"""


def test_preprocessing_kernels_lower_for_every_vendor():
    """The K/V statistics and quantization kernels (run on every call) lower for AMD and NVIDIA
    targets; with PART_STAGES > 1 the statistics loads become asynchronous copies on sm90."""
    cases = [("gfx942", None), ("gfx1201", None), ("gfx1100", None), ("sm80", None), ("sm90", None),
             ("sm90", 1)]  # fmt: skip
    res = _compile_in_subprocess(_PRE_SCRIPT, cases)
    for case, kernels in res.items():
        assert set(kernels) == {"kv_partials", "kv_finalize", "quant_blocks"}
        for name, r in kernels.items():
            assert r["ok"], (case, name, r["error"])
    from sagebuild.kernels.triton import quant

    assert quant.PART_STAGES > 1 and res["sm90/None"]["kv_partials"]["cp_async"]
    assert not res["sm90/1"]["kv_partials"]["cp_async"]


_INLINE_SCRIPT = """
import json, sys
from kernel_asm import compile_preprocessing
from sagebuild.kernels.triton import quant
out = []
for arch in json.loads(sys.argv[1]):
    for (dp, reads_v), (rows, warps) in quant.INLINE_LAUNCH.items():
        r = compile_preprocessing(arch, head_dim=dp, inline=(rows, warps, reads_v))["quant_blocks"]
        out.append([arch, dp, reads_v, r["ok"], r["error"], r["shared"]])
print(json.dumps(out))
"""


def test_inline_statistics_launches_fit_every_gpus_shared_memory():
    """Every row of the in-launch statistics' table compiles for AMD and NVIDIA targets, and its
    pipelined loads stay within ``quant.INLINE_SMEM_BYTES`` (what sm86/sm89 give a CTA is 99 KB):
    a larger row would compile and then fail to launch on those GPUs."""
    res = _compile_in_subprocess(_INLINE_SCRIPT, ["sm89", "sm90", "gfx942"])
    assert len(res) == 3 * len(quant.INLINE_LAUNCH)
    for arch, dp, reads_v, ok, error, shared in res:
        assert ok, (arch, dp, reads_v, error)
        assert shared <= quant.INLINE_SMEM_BYTES, (arch, dp, reads_v, shared)


_STORES_SCRIPT = """
import json, re, sys
from kernel_asm import compile_preprocessing
out = {}
for varlen in (False, True):
    r = compile_preprocessing("sm90", varlen=varlen)["quant_blocks"]
    stores = sorted(set(re.findall(r"st\\.global[.\\w]*", r["asm"] or "")))
    out[str(varlen)] = stores if r["ok"] else r["error"]
print(json.dumps(out))
"""


def test_fp8_v_stores_are_16_bytes_wide_dense_and_packed():
    """The quantization's channel-major FP8 V stores are 16-byte vectors on sm90 for dense and
    packed sequences alike: rows past a sequence's end are written as zeros up to a multiple of
    16, so the store mask is constant over 16 tokens (a ``rows < n`` mask gave byte stores)."""
    res = _compile_in_subprocess(_STORES_SCRIPT, [])
    for varlen, stores in res.items():
        assert "st.global.v4.b32" in stores and "st.global.b8" not in stores, (varlen, stores)


_TMA_SCRIPT = """
import json, re, sys, triton
from triton.backends.compiler import GPUTarget
from sagebuild import archs
from sagebuild.attention import aot
out = []
for arch, n_k in json.loads(sys.argv[1]):
    row = archs.get(arch)
    src, cfg = aot._source("qk_int8_pv_fp8", row, 128, False, n_k, "fp32")
    ptx = triton.compile(src, target=GPUTarget(*row.triton_target), options=cfg.launch_options()).asm["ptx"]
    tiles = re.search(r"cp\\.async\\.c[ag]\\.shared\\.global[^;]*0x10,", ptx)  # 16-byte copies
    out.append({"tma": "cp.async.bulk.tensor" in ptx, "wgmma": "wgmma.mma_async" in ptx,
                "cp_async": tiles is not None})
print(json.dumps(out))
"""


def test_tma_tiles_lower_to_bulk_tensor_copies():
    """SAGEBUILD_TMA=1 (opt-in): on sm90 the K/V tiles of both Hopper rows (64- and 128-key
    tiles) become TMA bulk tensor copies feeding the wgmma, with no per-thread 16-byte copies
    left (the K scale's 4-byte copy stays)."""
    cases = [("sm90", 0), ("sm90", 16384)]
    for r in _compile_in_subprocess(_TMA_SCRIPT, cases, SAGEBUILD_TMA="1"):
        assert r == {"tma": True, "wgmma": True, "cp_async": False}, r
    for r in _compile_in_subprocess(_TMA_SCRIPT, cases[:1], SAGEBUILD_TMA="0"):
        assert r == {"tma": False, "wgmma": True, "cp_async": True}, r


_PDL_SCRIPT = """
import json, sys, triton
from triton.backends.compiler import GPUTarget
from sagebuild import archs
from sagebuild.attention import aot
import kernel_asm
out = []
for arch in json.loads(sys.argv[1]):
    row = archs.get(arch)
    src, cfg = aot._source("qk_int8_pv_fp8", row, 128, False, 4096, "fp32")
    asm = triton.compile(src, target=GPUTarget(*row.triton_target), options=cfg.launch_options()).asm
    text = asm.get("ptx") or asm.get("amdgcn")
    quant = kernel_asm.compile_preprocessing(arch)["quant_blocks"]["asm"]
    trigger = "griddepcontrol.launch_dependents" in quant
    out.append({"wait": "griddepcontrol.wait" in text, "trigger": trigger})
print(json.dumps(out))
"""


def test_pdl_waits_in_the_attention_kernel_and_triggers_in_the_quantization():
    """SAGEBUILD_PDL=1: on sm90 the attention kernel waits for the prior grid
    (griddepcontrol.wait, after its Q prologue) and the K/V quantization kernel lets it launch
    early (griddepcontrol.launch_dependents); =0 neither, and never on AMD. (Unset, the default
    depends on the key count: ``configs.use_pdl``.)"""
    on = _compile_in_subprocess(_PDL_SCRIPT, ["sm90", "gfx942"], SAGEBUILD_PDL="1")
    assert on == [{"wait": True, "trigger": True}, {"wait": False, "trigger": False}], on
    off = _compile_in_subprocess(_PDL_SCRIPT, ["sm90"], SAGEBUILD_PDL="0")
    assert off == [{"wait": False, "trigger": False}], off


def test_sass_loops_finds_the_innermost_matrix_loops():
    """Backward branches delimit loops; only loops issuing matrix instructions count, an outer
    loop around an inner one is dropped, a branch back from beyond the exit (a TMA wait's retry)
    is no loop, predicates are ignored, spills, selects, shuffles and both kinds of max counted."""
    lines = [
        "MOV R1, c[0x0][0x28]",  # 0x00
        "HGMMA.64x64x16.F32 R24, gdesc[UR4], RZ",  # 0x10: outer loop starts
        "MUFU.EX2 R2, R2",  # 0x20: inner loop starts
        "FMNMX R9, R9, R2, !PT",
        "VIMNMX3 R10, R10, R11, R12, !PT",
        "@P0 FSEL R3, R3, -INF , P1",
        "LDL R4, [R1+0x8]",
        "SHFL.IDX PT, R5, R5, 0x1, 0x1f",
        "LDGSTS.E.LTC128B [R6], desc[UR4][R8.64]",
        "QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR8], R24",
        "WARPGROUP.DEPBAR.LE gsb0, 0x0",
        "@!P2 BRA 0x20",  # 0xb0: inner back branch
        "MUFU.EX2 R5, R5",
        "BRA 0x10",  # 0xd0: outer back branch
        "FADD R6, R6, R7",
        "BRA 0xf0",  # a self loop without matrix work: ignored
        "EXIT",
        "SYNCS.PHASECHK.TRANS64 P0, [UR4], R0",  # a barrier-wait retry block after the exit
        "@!P0 BRA 0x20",  # branches back into the inner loop: not a loop of its own
    ]
    sass = "\n".join(f"        /*{16 * i:04x}*/      {t} ;   /* 0x0000 */" for i, t in enumerate(lines))
    expected = {
        "instructions": 10, "mma": 1, "mma_waits": 1, "mufu": 1, "fsel": 1, "local": 1, "shuffles": 1,
        "async_copies": 1, "fmnmx": 1, "max3": 1,
    }  # fmt: skip
    assert kernel_asm.sass_loops(sass) == [expected]


_SASS_SCRIPT = """
import json, sys
import kernel_asm
cases = json.loads(sys.argv[1])
print(json.dumps([kernel_asm.sass_report(head_dim=d, n_k=n_k, config=cfg) for d, n_k, cfg in cases]))
"""


@pytest.mark.triton_version("3.6")  # instruction counts of what Triton 3.6 emits
def test_hopper_rows_key_loops_in_sass():
    """The sm90 SASS of Hopper's FP8 rows (table choice, MMA-accumulated): the TMA row's K/V come by
    TMA and its unmasked key loop (64×128 scores: 64 exponentials per thread, plus the
    rescale's) touches no local memory at 168 registers, three CTAs' worth of shared memory; the
    same config without TMA spills inside that loop; a 64-key
    config (the table's row for short hd64 calls) has half the exponentials per loop; a split
    head dim (96 = 64 + 32) takes a descriptor per channel piece when forced to TMA. The split
    head dims' own rows from 4K keys (128-key tiles by TMA, pipelined wgmma) are not
    serialised, do not spill, and fit three (96) or two (192) CTAs per SM. Unmasked rows take
    their maxima on the INT32 scores, which ptxas turns into three-input integer maxes."""
    cases = [(128, 4096, None), (128, 4096, "64,128,4,2,168"), (128, 0, "64,64,4,3,168"),
             (96, 4096, "64,64,4,3,168,tma"), (96, 4096, None), (192, 4096, None)]  # fmt: skip
    tma_row, no_tma, short_row, split, row96, row192 = _compile_in_subprocess(
        _SASS_SCRIPT, cases, SAGEBUILD_TMA="", SAGEBUILD_WGMMA_PIPE=""
    )
    assert tma_row["config"] == "64,128,4,2,168,tma,pipe" and tma_row["tma"], tma_row
    assert tma_row["registers"] <= 168 and 3 * tma_row["shared_bytes"] <= 227 * 1024, tma_row
    unmasked, masked = tma_row["loops"]  # the key loops without and with masks, nothing else
    assert unmasked["mufu"] == 66 and unmasked["fsel"] == 0 and unmasked["local"] == 0, tma_row
    # rows' maxima on the INT32 scores: ~31 three-input integer maxes for 64 scores per thread,
    # float maxes only for the running maximum (the masked loop keeps the float max over −inf)
    assert unmasked["max3"] >= 28 and unmasked["fmnmx"] <= 4, tma_row
    assert masked["fmnmx"] >= 64, tma_row
    assert masked["mufu"] == 66 and masked["fsel"] > 0 and masked["local"] == 0, tma_row
    assert not no_tma["tma"] and no_tma["loops"][0]["local"] > 0, no_tma
    assert short_row["config"] == "64,64,4,3,168" and short_row["loops"][0]["mufu"] == 34, short_row
    assert split["tma"] and [lp["mufu"] for lp in split["loops"]] == [34, 34], split
    assert all(lp["local"] == 0 for lp in split["loops"]), split
    for row, spec, ctas in ((row96, "64,128,4,2,168,tma,pipe", 3), (row192, "64,128,4,2,tma,pipe", 2)):
        assert row["config"] == spec and row["tma"] and row["wgmma_serialized"] is None, row
        assert ctas * row["registers"] * 128 <= 65536 and ctas * row["shared_bytes"] <= 227 * 1024, row
        assert all(lp["local"] == 0 for lp in row["loops"]) and row["loops"][0]["mufu"] == 66, row


@pytest.mark.triton_version("3.6")  # instruction counts of what Triton 3.6 emits
def test_v_key_order_drops_the_p_shuffles():
    """FP8 V in wgmma key order (Hopper's default): in the sm90 SASS of the 4K row and the 64-key
    row, P goes from the Q·Kᵀ wgmma's accumulator into the P·V wgmma's operand without a
    register shuffle, and the unmasked key loop is shorter than with V in plain key order, where
    the conversion shuffles; the same registers, no spill."""
    cases = [(128, 4096, None), (128, 1024, "64,64,4,3,168")]
    plain = _compile_in_subprocess(_SASS_SCRIPT, cases, SAGEBUILD_TMA="", SAGEBUILD_V_KEY_ORDER="0")
    ordered = _compile_in_subprocess(_SASS_SCRIPT, cases, SAGEBUILD_TMA="", SAGEBUILD_V_KEY_ORDER="")
    for off, on in zip(plain, ordered):
        assert off["config"] == on["config"]
        shuffles = off["loops"][0]["shuffles"]  # a SHFL.IDX and a PRMT per 8 keys of a row
        assert shuffles >= 16 and on["loops"][0]["shuffles"] == 0, (off, on)
        assert on["loops"][0]["instructions"] <= off["loops"][0]["instructions"] - shuffles, (off, on)
        assert on["registers"] <= off["registers"] and on["loops"][0]["local"] == 0, on


@pytest.mark.triton_version("3.6")  # instruction counts of what Triton 3.6 emits
def test_wgmma_pipe_unserialises_the_tma_row():
    """The 4K row (128-key tiles by TMA at 168 registers): as Triton 3.6 compiles it, ptxas
    serialises every wgmma with SAGEBUILD_WGMMA_PIPE=0 (C7513: all eight of a key tile waited on
    one by one); as the table runs it (``pipe``: Q read from shared memory, the P·V wgmma waited
    on in its iteration) the four Q·Kᵀ and the four P·V wgmma are each waited on once, at the
    same registers and without spills in the unmasked loop."""
    cases = [(128, 4096, None)]
    (off,) = _compile_in_subprocess(_SASS_SCRIPT, cases, SAGEBUILD_TMA="", SAGEBUILD_WGMMA_PIPE="0")
    (on,) = _compile_in_subprocess(_SASS_SCRIPT, cases, SAGEBUILD_TMA="", SAGEBUILD_WGMMA_PIPE="")
    assert off["config"] == on["config"] == "64,128,4,2,168,tma,pipe"
    assert (off["wgmma_serialized"] or "").startswith("C7513"), off
    assert off["loops"][0]["mma"] == off["loops"][0]["mma_waits"] == 8, off
    assert on["wgmma_serialized"] is None, on
    assert on["loops"][0]["mma"] == 8 and on["loops"][0]["mma_waits"] == 2, on
    assert on["registers"] <= 168 and on["loops"][0]["local"] == 0, on


@pytest.mark.triton_version("3.6")  # instruction counts of what Triton 3.6 emits
def test_row_sum_parts_shorten_the_key_loops():
    """Hopper's rows keep P's row sums in ``configs.ROW_SUM_PARTS`` parts (the accumulator layout's
    column classes): in the sm90 SASS each unmasked key loop loses the row sum's warp shuffles and
    their additions (−8 instructions per tile at the 4K row), with no spill in the loop; the frame
    may grow by one 8-byte slot at most (with 64-bit row offsets the 4K row's is 48 bytes against
    40; H200 timings unchanged)."""
    cases = [(128, 4096, None), (64, 8192, None), (256, 8192, None)]
    one = _compile_in_subprocess(_SASS_SCRIPT, cases, SAGEBUILD_TMA="", SAGEBUILD_ROW_SUM_PARTS="0")
    parts = _compile_in_subprocess(_SASS_SCRIPT, cases, SAGEBUILD_TMA="", SAGEBUILD_ROW_SUM_PARTS="")
    for off, on in zip(one, parts):
        assert off["config"] == on["config"]
        assert on["loops"][0]["instructions"] <= off["loops"][0]["instructions"] - 6, (off, on)
        assert on["loops"][0]["local"] == 0 and on["stack_bytes"] <= off["stack_bytes"] + 8, on


# The arch table's AMD FP8 paths, counted in their AMDGCN: both variants' attention kernels and
# the K/V quantization kernel (where V becomes FP8).
AMD_FP8 = ["gfx1201", "gfx1200", "gfx942", "gfx950"]
_ISA_SCRIPT = """
import json, sys
import isa_counts as isa
import kernel_asm
from sagebuild import archs
out = {}
for arch in json.loads(sys.argv[1]):
    for variant in archs.variants(arch):
        out[f"{arch}/{variant}"] = isa.attention_report(variant, arch)
    if not archs.get(arch).fp8_mma:
        continue
    if arch == "gfx1201":  # FP16 P·V with V copied channel-major (the config's vcm)
        out[f"{arch}/vcm"] = isa.attention_report("qk_int8_pv_fp16", arch, config="64,32,4,1,vcm")
    quant = kernel_asm.compile_preprocessing(arch)["quant_blocks"]
    out[f"{arch}/quant_blocks"] = isa.report(quant["asm"]) if quant["ok"] else {"error": quant["error"]}
print(json.dumps(out))
"""
# V's quantization kernel on gfx1201 with Triton 3.6's software cast: 3,142 VALU instructions, 587
# compares, 568 selects; through the inline conversion (``fp8.to_fp8``) 1,474, 11 and 51.
QUANT_MAX_COMPARES = 40
# The whole gfx1201 INT8·FP8 kernel at head dim 128 (issue 59): Triton's software cast of P gave
# 3,673 instruction lines and 335 compares (3,999 and 348 once NaN inputs propagate), FP16 2,489.
GFX1201_FP8_MAX_LINES, GFX1201_FP8_MAX_COMPARES = 2700, 60


@pytest.fixture(scope="module")
def amd_isa(tmp_path_factory) -> dict:
    """With an empty Triton cache of its own, as docs/kernels.md's table is counted: a shared cache
    can hold a kernel that another process compiled after a different AMD target (Triton 3.6 leaks
    state between targets: gfx950's quantization then had no packed FP8 conversions)."""
    cache = str(tmp_path_factory.mktemp("amd-isa-triton-cache"))
    return _compile_in_subprocess(_ISA_SCRIPT, [*AMD_FP8, "gfx90a"], TRITON_CACHE_DIR=cache)


@pytest.mark.parametrize("case", ["gfx942/qk_int8_pv_fp8", "gfx950/qk_int8_pv_fp8", "gfx90a/qk_int8_pv_fp16"])
def test_cdna_rows_run_two_waves_per_simd_without_scratch(amd_isa, case):
    """The CDNA rows' ``waves_per_eu=2`` (the arch table's default variant at head dim 128):
    LLVM fits the tile in its 256-register budget, so two waves share each SIMD, with no spill or
    scratch (at one wave per SIMD they took 214-226 VGPRs and left half the SIMD idle)."""
    rep = amd_isa[case]
    assert "waves_per_eu=2" in rep["config"], rep["config"]
    assert rep["kernel"]["occupancy"] >= 2 and rep["kernel"]["scratch_bytes"] == 0, rep["kernel"]
    assert not rep["spills"], rep["kernel"]


@pytest.mark.parametrize("arch", AMD_FP8)
def test_amd_fp8_path_compiles_to_its_matrix_instructions_without_spills(amd_isa, arch):
    """Each AMD arch with an FP8 path in the table: the FP8 variant's key loops issue the table's
    FP8 matrix instruction for P·V and its INT8 one for Q·Kᵀ, as many P·V as the FP16 variant
    (the same tile), and neither variant spills (no VGPR/SGPR spill, no scratch)."""
    row = archs.get(arch)
    fp16, fp8 = amd_isa[f"{arch}/qk_int8_pv_fp16"], amd_isa[f"{arch}/qk_int8_pv_fp8"]
    assert fp8["loops"], fp8
    for loop in fp8["loops"]:
        ops = list(loop["matrix"])
        assert any(re.fullmatch(row.fp8_mma, op) for op in ops), loop
        assert any(re.fullmatch(row.int8_mma, op) for op in ops), loop
        assert not any(op.endswith(("_f16", "_bf16")) for op in ops), loop  # P·V is all FP8
    for report in (fp16, fp8):
        assert not report["spills"] and report["kernel"]["vgpr_spills"] == 0, report["kernel"]
        assert report["kernel"]["scratch_bytes"] == 0, report["kernel"]
    assert len(fp16["loops"]) == len(fp8["loops"])
    if arch.startswith("gfx12"):  # RDNA4: 16x16x16 FP8 WMMA, as many as the FP16 ones
        assert fp8["tile"] == fp16["tile"] == [64, 32] and fp8["waves"] == 4, fp8
        for a, b in zip(fp16["loops"], fp8["loops"]):
            assert b["matrix"]["v_wmma_f32_16x16x16_fp8_fp8"] == a["matrix"]["v_wmma_f32_16x16x16_f16"] == 16
            assert b["matrix"]["v_wmma_i32_16x16x16_iu8"] == 16


@pytest.mark.parametrize("arch", AMD_FP8)
def test_p_converts_to_fp8_with_packed_instructions(amd_isa, arch):
    """P becomes FP8 in every key-loop trip through the arch's packed conversion, never a software
    cast: Triton's own ``v_cvt_pk_fp8_f32`` / ``v_cvt_scalef32_pk_fp8_f32`` (two values each) on
    gfx942 and gfx950, ours through inline asm on RDNA4 (one value each, ``kernels/triton/fp8.py``),
    with no compare-and-select ladder left: a handful of compares per trip, not one per value."""
    fp8 = amd_isa[f"{arch}/qk_int8_pv_fp8"]
    p_per_lane = fp8["tile"][0] * fp8["tile"][1] // fp8["waves"] // archs.get(arch).warp_size
    per_instruction = 1 if archs.get(arch).fp8_cvt_asm else 2
    for loop in fp8["loops"]:
        assert loop["cvt_to_fp8"] == p_per_lane // per_instruction, loop
        assert loop["compares"] < p_per_lane // 2, loop
    if arch == "gfx1201":  # the issue's bounds for the whole kernel
        total, fp16 = fp8["total"], amd_isa[f"{arch}/qk_int8_pv_fp16"]["total"]
        assert total["cvt_to_fp8"] >= 1 and total["compares"] <= GFX1201_FP8_MAX_COMPARES, total
        assert total["lines"] <= GFX1201_FP8_MAX_LINES, (total["lines"], fp16["lines"])


@pytest.mark.parametrize("arch", AMD_FP8)
def test_v_quantization_converts_to_fp8_with_packed_instructions(amd_isa, arch):
    """V's quantization (once per key, not per query tile) converts through packed instructions on
    every AMD FP8 arch: Triton's own on gfx942 and gfx950, our inline one on RDNA4 (where Triton's
    cast is a compare-and-select ladder per value), with no ladder left."""
    quant = amd_isa[f"{arch}/quant_blocks"]["total"]
    assert quant["cvt_to_fp8"] > 0 and quant["compares"] <= QUANT_MAX_COMPARES, quant


@pytest.mark.parametrize("arch", ["gfx1201", "gfx1200"])
def test_rdna4_pv_default_follows_the_isa(amd_isa, arch):
    """RDNA4's ``pv`` column is the variant whose key loop issues in fewer cycles per tile: VALU
    instructions plus WMMA at AMD's published rates (``isa.RDNA4_WMMA_CYCLES``: FP8 at twice FP16).
    With Triton 3.6's software cast of P the FP8 loop's extra VALU outweighed what its faster WMMA
    saves (729 instructions per trip); with P converted by ``v_cvt_pk_fp8_f32`` FP8 wins (issue 59).
    The channel-major FP16 variant (``vcm``) trades the 128 two-byte LDS reads for VALU: no better here."""
    import isa_counts as isa

    fp16, fp8 = amd_isa[f"{arch}/qk_int8_pv_fp16"], amd_isa[f"{arch}/qk_int8_pv_fp8"]
    vcm = amd_isa.get(f"{arch}/vcm", fp16)  # compiled for gfx1201 only (the same ISA as gfx1200)
    row, cycles = archs.get(arch), isa.RDNA4_WMMA_CYCLES
    for loop16, loop_cm, loop8 in zip(fp16["loops"], vcm["loops"], fp8["loops"]):  # unmasked, masked
        total16 = min(isa.issue_cycles(lp, cycles) for lp in (loop16, loop_cm))
        total8 = isa.issue_cycles(loop8, cycles)
        assert total8 - loop8["valu"] < total16 - loop16["valu"], (loop16, loop8)  # FP8 WMMA is faster, but
        assert row.pv == ("fp8" if total8 < total16 else "fp16"), (loop16, loop8)  # the total decides
    assert row.note.startswith(f"{row.pv} "), row.note  # the row's one line names the choice first


def test_channel_major_v_removes_rdna4s_two_byte_lds_reads(amd_isa):
    """FP16 P·V with V copied channel-major (``vcm``): the key loop reads V from LDS in wide loads,
    not one two-byte read per element (128 per trip at head dim 128), with the same WMMA, no spill,
    and fewer instructions per trip (422 -> 287 with Triton 3.6)."""
    plain, vcm = amd_isa["gfx1201/qk_int8_pv_fp16"], amd_isa["gfx1201/vcm"]
    assert vcm["config"] == "64,32,4,1,vcm" and not vcm["spills"], vcm["kernel"]
    for a, b in zip(plain["loops"], vcm["loops"]):
        assert a["lds_b16_reads"] >= 128 and b["lds_b16_reads"] == 0, (a, b)
        assert b["matrix"] == a["matrix"] and b["instructions"] < a["instructions"], (a, b)


def test_amdgcn_counts_find_the_innermost_matrix_loops():
    """``isa.loops``: a label and a later branch back to it make a loop; only loops issuing matrix
    instructions count, an outer loop around an inner one is dropped; encodings are stripped,
    scheduling hints counted only in ``lines``; memory instructions by kind (LDS, its two-byte
    reads, global, buffer, scalar loads); the kernel metadata gives spills and scratch."""
    import isa_counts as isa

    asm = """
_k:                                     ; @_k
\ts_mov_b32 s4, 0
.LBB0_1:                                ; =>This Loop Header: Depth=1
\tv_wmma_i32_16x16x16_iu8 v[0:7], v[8:9], v[10:11], v[0:7]
.LBB0_2:                                ; =>This Inner Loop Header: Depth=2
\tv_wmma_f32_16x16x16_fp8_fp8 v[12:19], v[20:21], v[22:23], v[12:19]
\tv_cvt_pk_fp8_f32 v1, v2, v3
\tv_cvt_pk_f32_fp8_e32 v[4:5], v6
\tv_cmp_lt_u32_e32 vcc_lo, 0x3a800000, v3
\ts_delay_alu instid0(VALU_DEP_1)
\tv_cndmask_b32_e32 v3, 0, v5, vcc_lo
\tds_load_u16_d16_hi v7, v8 offset:64
\tds_load_b128 v[12:15], v8
\tglobal_load_b128 v[16:19], v[0:1], off
\tbuffer_load_b32 v20, v21, s[0:3], null offen
\ts_load_b64 s[6:7], s[0:1], 0x10
\ts_cbranch_scc0 .LBB0_2
\ts_add_co_i32 s4, s4, 1
\ts_cbranch_scc1 .LBB0_1
.LBB0_3:
\tv_add_f32_e32 v1, v1, v2
\ts_branch .LBB0_3                      ; a loop without matrix work: ignored
\ts_endpgm
; NumVgprs: 24
; ScratchSize: 16
    .sgpr_spill_count: 0
    .vgpr_spill_count: 2
"""
    assert isa.loops(asm) == [
        {"lines": 12, "instructions": 11, "valu": 4, "salu": 1, "memory": 5, "lds": 2, "global": 1,
         "buffer": 1, "scalar_loads": 1, "lds_b16_reads": 1, "matrix": {"v_wmma_f32_16x16x16_fp8_fp8": 1},
         "cvt_to_fp8": 1, "cvt_from_fp8": 1, "compares": 1, "selects": 1},
    ]  # fmt: skip
    rep = isa.report(asm)
    assert rep["spills"] and rep["kernel"]["vgpr_spills"] == 2 and rep["kernel"]["scratch_bytes"] == 16
    assert rep["total"]["matrix"] == {"v_wmma_f32_16x16x16_fp8_fp8": 1, "v_wmma_i32_16x16x16_iu8": 1}
    cycles = isa.issue_cycles(rep["loops"][0], isa.RDNA4_WMMA_CYCLES)
    assert cycles == 4 + 8
    with pytest.raises(ValueError, match="v_wmma_f32_16x16x16_fp8_fp8"):
        isa.issue_cycles(rep["loops"][0], {})


def test_compile_step_compiles_every_target_in_its_own_process(tmp_path, monkeypatch):
    """``sagebuild compile``'s Triton step (``build.run.run_aot``) with an empty Triton cache: gfx950
    FP8 then gfx1201 FP16 and FP8 then gfx942 FP8 and gfx1100 FP16 all compile (in one process
    Triton 3.6 aborted LLVM on gfx1201 after gfx950 and lost the targets after it), each reporting
    its matrix instructions as the compile prints them; RDNA4 gets both variants (``archs.variants``)."""
    from sagebuild.build.run import run_aot

    assert archs.variants("gfx1201") == ["qk_int8_pv_fp16", "qk_int8_pv_fp8"]
    assert archs.variants("gfx1100") == ["qk_int8_pv_fp16"] and archs.variants("gfx1030") == []
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    pairs = [("qk_int8_pv_fp8", "gfx950"), ("qk_int8_pv_fp16", "gfx1201"), ("qk_int8_pv_fp8", "gfx1201"),
             ("qk_int8_pv_fp8", "gfx942"), ("qk_int8_pv_fp16", "gfx1100")]  # fmt: skip
    res = run_aot(pairs, tmp_path / "aot.log")
    assert [(r["variant"], r["arch"]) for r in res] == pairs
    for r in res:
        assert r["ok"], r
    assert res[1]["instruction"] == "v_wmma_i32_16x16x16_iu8", res[1]
    assert res[2]["instruction"] == "v_wmma_i32_16x16x16_iu8; v_wmma_f32_16x16x16_fp8_fp8", res[2]
    log = (tmp_path / "aot.log").read_text()
    assert all(
        f"triton ahead-of-time compile for {a}" in log for a in ("gfx950", "gfx1201", "gfx942", "gfx1100")
    )


_ROW_UNIT_SCRIPT = """
import json, sys
import isa_counts
import kernel_asm
from sagebuild.attention import aot, plan
out = []
for arch, unit in json.loads(sys.argv[1]):
    # head dim 40 in contiguous [B, H, N, 40] tensors: Q's, O's and V's strides are not multiples
    # of 16 elements; with ROW_UNIT 8 they arrive divided by 8 (``layout.row_unit``)
    ast_source, constexprs = aot._ast_source, plan.LaunchPlan.constexprs
    odd = {f"stride_{t}{d}" for t in "qov" for d in "bhn"}
    aot._ast_source = lambda fn, c, p, f, ok: ast_source(fn, c, p, f, lambda a: ok(a) and a not in odd)
    plan.LaunchPlan.constexprs = lambda self: {**constexprs(self), "ROW_UNIT": unit}
    if arch.startswith("sm"):
        out.append(kernel_asm.sass_report("qk_int8_pv_fp16", arch, 40, n_k=4096))
    else:
        row = aot.archs.get(arch)
        kernel, _ = aot.compile_attention("qk_int8_pv_fp16", row, 40, False, 4096, "fp32+fp32", None)
        asm = aot.assembly(kernel, row)
        out.append({**isa_counts.report(asm), "load_bits": isa_counts.global_load_bits(asm)})
    aot._ast_source, plan.LaunchPlan.constexprs = ast_source, constexprs
print(json.dumps(out))
"""


@pytest.mark.triton_version("3.6")  # instruction counts of what Triton 3.6 emits
def test_row_unit_vectorises_head_dim_40():
    """SD1.5's head dim 40 (rows 80 bytes apart, not a multiple of 16 elements): with strides as
    Triton sees them the sm90 kernel spills (144 bytes at 255 registers) and its key loop loads
    part of each V tile into registers and shuffles it (48 SHFL/PRMT, 612 instructions per tile);
    passed in ROW_UNIT (8 elements) and multiplied back, V's tiles come by 16-byte asynchronous
    copies as at head dim 64: no shuffles, no spill, fewer instructions (562)."""
    plain, unit8 = _compile_in_subprocess(_ROW_UNIT_SCRIPT, [["sm90", 1], ["sm90", 8]])
    (p, *_), (u, *_) = plain["loops"], unit8["loops"]
    assert p["shuffles"] > 0 and u["shuffles"] == 0 and u["async_copies"] > p["async_copies"], (plain, unit8)
    assert u["instructions"] < p["instructions"], (plain, unit8)
    assert unit8["stack_bytes"] == 0 < plain["stack_bytes"], (plain, unit8)


@pytest.mark.triton_version("3.6")  # load widths and loop structure of what Triton 3.6 emits
@pytest.mark.parametrize("arch", ["gfx1201", "gfx942"])
def test_row_unit_vectorises_head_dim_40_on_amd(arch):
    """The same on RDNA4 (the RX 9070 XT) and CDNA3: with head dim 40's strides as Triton sees
    them the attention kernel reads Q and V two bytes per lane (Triton 3.6: 62 global_load_u16
    on gfx1201, 112 global_load_ushort on gfx942) and its key loop splits around them; in
    ROW_UNIT every load is 16 bytes wide and the key loops are the two matrix loops (masked and
    not) that head dim 64 has, without spills."""
    plain, unit8 = _compile_in_subprocess(_ROW_UNIT_SCRIPT, [[arch, 1], [arch, 8]])
    assert plain["load_bits"].get("16", 0) > 0, plain["load_bits"]
    assert set(unit8["load_bits"]) <= {"32", "64", "128"} and unit8["load_bits"].get("128", 0) > 0, unit8[
        "load_bits"
    ]
    assert len(unit8["loops"]) == 2 and all(lp["matrix"] for lp in unit8["loops"]), unit8["loops"]
    assert not unit8["spills"], unit8["kernel"]


_PRE_ROW_UNIT_SCRIPT = """
import json, re, sys
import isa_counts
import kernel_asm
from sagebuild.attention import aot
ast_source = aot._ast_source
odd = {f"stride_{t}{d}" for t in "xvk" for d in "bhn"}  # the 16-bit inputs' strides, head dim 40
out = []
for arch, unit in json.loads(sys.argv[1]):
    def patched(fn, c, p, f, ok, unit=unit):
        c = {**c, "ROW_UNIT": unit} if "ROW_UNIT" in fn.arg_names else c
        return ast_source(fn, c, p, f, lambda a: ok(a) and a not in odd)
    aot._ast_source = patched
    res = kernel_asm.compile_preprocessing(arch, 64)
    if arch.startswith("sm"):
        b16 = lambda asm: len(re.findall(r"ld\\.global[.\\w]*\\.b16", asm))
    else:
        b16 = lambda asm: isa_counts.global_load_bits(asm).get(16, 0)
    out.append({k: b16(res[k]["asm"]) for k in ("kv_partials", "quant_blocks")})
print(json.dumps(out))
"""


@pytest.mark.parametrize("arch", ["sm90", "gfx1201", "gfx942"])
def test_row_unit_vectorises_the_preprocessing_at_head_dim_40(arch):
    """The K/V statistics and quantization launches read the caller's 16-bit K and V: at head
    dim 40 in contiguous tensors (strides not multiples of 16 elements) every load is a 2-byte
    one (64 per kernel in the sm90 PTX, global_load_u16/ushort on RDNA4/CDNA3); with the
    strides in ROW_UNIT none is."""
    plain, unit8 = _compile_in_subprocess(_PRE_ROW_UNIT_SCRIPT, [[arch, 1], [arch, 8]])
    assert plain["kv_partials"] > 0 and plain["quant_blocks"] > 0, plain
    assert unit8 == {"kv_partials": 0, "quant_blocks": 0}, unit8


_PACKED_SCRIPT = """
import functools, json, sys
import kernel_asm
from sagebuild.attention import plan
make_plan = plan.make_plan
plan.make_plan = functools.partial(make_plan, layout="varlen")  # the plan of a packed call
cases = json.loads(sys.argv[1])
print(json.dumps([kernel_asm.sass_report("qk_int8_pv_fp8", "sm90", 128, c, n_k=4192) for c in cases]))
"""


@pytest.mark.triton_version("3.6")  # instruction counts of what Triton 3.6 emits
def test_packed_sequences_take_the_tma_row():
    """Packed FP8 calls at head dim 128 (LLM prefill, packed video clips) take the dense calls'
    TMA row (128-key tiles by tensor descriptors, pipelined wgmma) in the sm90 SASS: no local
    memory in the unmasked key loop, which SAGEBUILD_TMA=0's pointer row (64-key tiles) spills
    in, and fewer instructions per key (572 per 128 keys against 419 per 64)."""
    tma = _compile_in_subprocess(_PACKED_SCRIPT, [False, True], SAGEBUILD_TMA="")
    ptr = _compile_in_subprocess(_PACKED_SCRIPT, [False], SAGEBUILD_TMA="0")[0]
    for r in tma:
        assert r["tma"] and r["config"] == "64,128,4,2,168,tma,pipe" and r["wgmma_serialized"] is None, r
        assert r["loops"][0]["local"] == 0, r
    assert not ptr["tma"] and ptr["loops"][0]["local"] > 0, ptr
    assert tma[0]["loops"][0]["instructions"] / 128 < ptr["loops"][0]["instructions"] / 64, (tma[0], ptr)
