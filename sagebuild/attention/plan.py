"""The launch plan: everything an attention call runs, decided once, in one place.

``make_plan`` takes scalars only, so it plans a GPU call, an ahead-of-time compile for an absent
arch, a benchmark's launch and a report record alike. No torch import: reports must not need it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Iterable, Optional

from sagebuild import archs, knobs
from sagebuild.attention import features, gate
from sagebuild.errors import SagebuildError
from sagebuild.kernels.triton import configs
from sagebuild.kernels.triton.configs import LaunchConfig
from sagebuild.tuning import record

INTERPRETER = "interpreter"  # the pseudo-arch of Triton's CPU interpreter (tests)
VARIANTS = {"fp16": "qk_int8_pv_fp16", "fp8": "qk_int8_pv_fp8"}
GRANULARITIES = ("per_warp", "per_block")
LAYOUTS = ("HND", "NHD", "varlen")
MASKS = ("none", "bool", "additive")  # index: the kernel's MASK_MODE
# Fewer queries than this go to SDPA: a decode step would re-quantize the whole KV cache to
# fill 1 row of a 64-row tile (slower than SDPA: docs/performance.md).
MIN_Q_LEN = 16


class AttentionInputError(SagebuildError, ValueError):
    """The inputs of an attention call cannot be served as given (defined here, torch-free).

    Its text is one line: callers such as ComfyUI log ``str(error)`` once per failing call before
    falling back to SDPA, and a multi-line error per layer floods their log."""

    def __str__(self) -> str:
        return self.message if not self.fix else f"{self.message} (fix: {self.fix})"


@dataclass(frozen=True)
class LaunchPlan:
    """One attention call's decisions. Every field is in the report record (``record``)."""

    arch: str  # canonical ("sm90", "gfx1201") or "interpreter"
    family: str
    variant: str  # "qk_int8_pv_fp16" | "qk_int8_pv_fp8"
    pv_accum: Optional[str]  # FP8 only: "fp32+fp32" (two-level) | "fp32" (MMA-accumulated)
    fp8_dtype: Optional[str]  # torch dtype name of FP8 P and V
    head_dim: int
    head_dim_pad: int
    split_head_dim: bool  # 65-96 as 64 + 32 channels, 129-192 as 128 + 64
    layout: str  # "HND" | "NHD" | "varlen"
    causal: bool
    config: LaunchConfig
    q_blk: int  # Q rows per INT8 scale
    k_blk: int  # K tokens per INT8 scale
    quantization: str  # K/V quantized by "triton" launches or the C++ "extension"
    tma: bool  # K/V tiles by tensor descriptors
    pdl: bool  # the attention launch overlaps the K/V quantization launch
    wgmma_pipe: bool  # P·V wgmma waited on in its iteration (ptxas pipelines the wgmma)
    q_from_memory: bool  # INT8 Q read back from memory (a loaded wgmma operand)
    v_key_order: bool  # FP8 V stored in wgmma key order
    row_sum_parts: int  # P's partial row sums per row (1: one sum)
    return_lse: bool
    smooth_k: bool
    sm_scale: float
    table_version: str
    mask: str = "none"  # the caller's attn_mask: "none" | "bool" | "additive"
    mask_rows: bool = False  # the mask varies along query rows (else one row serves all: key padding)
    tuned: str = ""  # the shape class that decided, "tuned 16x1024x64: sdpa" ("shipped ..."), or ""
    sdpa: bool = False  # ``sageattn`` runs PyTorch SDPA for this call (``route``), not the kernels
    fp8_cvt_asm: bool = False  # FP8 P by inline v_cvt_pk_fp8_f32 (``archs.Arch.fp8_cvt_asm``)
    v_channel_major: bool = False  # FP16 P·V reads a channel-major copy of V (the config's ``vcm``)

    @property
    def fp8(self) -> bool:
        return self.variant == VARIANTS["fp8"]

    @property
    def fp8_max(self) -> float:
        """Largest finite FP8 value: 240 for the fnuz format (CDNA3), else 448."""
        return 240.0 if self.fp8_dtype == "float8_e4m3fnuz" else 448.0

    @property
    def varlen(self) -> bool:
        return self.layout == "varlen"

    def constexprs(self) -> dict[str, Any]:
        """The attention kernel's constexprs (``attn_fwd._attn_fwd_kernel``) for this plan."""
        fp8 = self.fp8
        return {
            "HEAD_DIM": self.head_dim,
            "BLOCK_D": self.head_dim_pad,
            "BLOCK_M": self.config.block_m,
            "BLOCK_N": self.config.block_n,
            "Q_BLK": self.q_blk,
            "KS_BLK": self.k_blk,
            "CAUSAL": self.causal,
            "PV_FP8": fp8,
            "FP8_MAX": self.fp8_max,
            "RETURN_LSE": self.return_lse,
            "SMOOTH_K": self.smooth_k,
            "IS_VARLEN": self.varlen,
            "V_PADDED": not fp8 and self.head_dim != self.head_dim_pad,  # FP16 P·V reads V unpadded
            "P_SHIFT": math.log2(self.fp8_max) if fp8 else 0.0,
            "PV_DIRECT": fp8 and self.pv_accum == "fp32",
            "SPLIT_D": self.split_head_dim,
            "USE_TMA": self.tma,
            "PDL": self.pdl,
            "Q_FROM_MEMORY": self.q_from_memory,
            "WGMMA_WAIT": self.wgmma_pipe,
            "V_KEY_ORDER": fp8 and self.v_key_order,
            "ROW_SUM_PARTS": self.row_sum_parts,
            "MASK_MODE": MASKS.index(self.mask),
            "MASK_ROWS": self.mask_rows,
            "ROW_UNIT": 1,  # the launch's buffers decide it (``layout.row_unit``)
            "HEADS_FIRST": False,  # the launch's grid order decides it
            "FP8_CVT_ASM": fp8 and self.fp8_cvt_asm,
            "V_CHANNEL_MAJOR": self.v_channel_major,
        }

    def record(self) -> dict[str, Any]:
        """The plan as a report/bench record: every field; ``config`` as the string that forces
        this very launch through ``config=`` / ``SAGEBUILD_ATTN_CONFIG``."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        applied = replace(self.config, tma=self.tma, pipe=self.wgmma_pipe, vcm=self.v_channel_major)
        out["config"] = applied.spec()
        return out


_SCHEMA_TYPES = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "Optional[str]": {"type": ["string", "null"]},
    "LaunchConfig": {"type": "string"},
}


def record_schema() -> dict[str, Any]:
    """The JSON schema of ``LaunchPlan.record``, generated from the dataclass's fields (the
    report schema's ``plan`` definition: one home for the record's shape)."""
    props = {}
    for f in fields(LaunchPlan):
        if f.type not in _SCHEMA_TYPES:
            raise TypeError(f"LaunchPlan.{f.name}: no JSON schema type for annotation {f.type!r}")
        props[f.name] = dict(_SCHEMA_TYPES[f.type])
    props["variant"] = {"enum": sorted(VARIANTS.values())}
    props["layout"] = {"enum": list(LAYOUTS)}
    props["quantization"] = {"enum": ["triton", "extension"]}
    props["mask"] = {"enum": list(MASKS)}
    return {
        "type": "object",
        "required": [f.name for f in fields(LaunchPlan)],
        "additionalProperties": False,
        "properties": props,
    }


def family_of(arch: str) -> str:
    return INTERPRETER if arch == INTERPRETER else archs.get(arch).family


def arch_row(arch: str) -> Optional[archs.Arch]:
    """The arch table's row (None for the interpreter); an unsupported arch is a clear error."""
    if arch == INTERPRETER:
        return None
    try:
        archs.pv_path(arch)
        return archs.get(arch)
    except archs.UnknownArchError as exc:
        raise AttentionInputError(
            str(exc), "use torch.nn.functional.scaled_dot_product_attention on this GPU"
        ) from None


def fp8_dtype_name(arch: str) -> str:
    """The FP8 E4M3 format the arch's matrix units take, or a clear error when it has none."""
    row = arch_row(arch)
    if row is None:
        return "float8_e4m3fn"
    if row.fp8_dtype is None:
        raise AttentionInputError(
            f"{arch} ({row.family}) has no FP8 matrix units, so the FP8 P·V kernel would be emulated",
            "use sageattn_qk_int8_pv_fp16_triton (or sageattn, which picks it) on this GPU",
        )
    return row.fp8_dtype


def default_pv(arch: str, head_dim: int, n_k: int) -> tuple[str, str]:
    """What ``sageattn`` runs on an arch: ("fp16" | "fp8", FP8 accumulation): the arch table's
    P·V path, unless the config module records the other one as measurably faster here; FP16
    while an FP8 path that waits for an accuracy check (``gate``) has no passing one here."""
    row = arch_row(arch)
    if row is None:
        return "fp16", "fp32+fp32"
    pref = configs.preferred_pv(row.family, head_dim, n_k) if head_dim > 0 else None
    accum = "fp32" if pref == "fp8acc" else "fp32+fp32"
    pv = "fp8" if pref == "fp8acc" else pref
    if pv == "fp8" and not row.fp8_dtype:
        pv = None
    pv = pv or archs.pv_path(arch)
    if pv == "fp8" and not gate.allowed(row.name, VARIANTS["fp8"]):
        pv = "fp16"
    return pv, accum


def head_dim_ok(d: int) -> bool:
    """Head dims 1 to the largest native one are served (the native ones as they are, others padded)."""
    return 1 <= d <= configs.NATIVE_HEAD_DIMS[-1]  # ``configs.padded_head_dim`` pads up to the largest


def head_dim_error(head_dim: int) -> AttentionInputError:
    """What is wrong with a head dim ``head_dim_ok`` refuses, and what to do."""
    native = ", ".join(str(n) for n in configs.NATIVE_HEAD_DIMS)
    return AttentionInputError(
        f"head dim {head_dim} is not supported: the kernels run head dims {native} natively and pad "
        f"any head dim from 1 to {configs.NATIVE_HEAD_DIMS[-1]}",
        "use torch.nn.functional.scaled_dot_product_attention for this head dim",
    )


def check_sm_scale(sm_scale: Any, head_dim: int) -> float:
    """The softmax scale: 1/sqrt(head_dim) by default, else a positive finite number."""
    if sm_scale is None:
        return 1.0 / math.sqrt(head_dim)
    try:
        value = float(sm_scale)
    except (TypeError, ValueError):
        fix = "pass a float or None"
        raise AttentionInputError(f"sm_scale must be a number, got {sm_scale!r}", fix) from None
    if not math.isfinite(value) or value <= 0:
        raise AttentionInputError(
            f"sm_scale must be positive and finite, got {sm_scale!r}",
            "pass a positive float, or None for 1/sqrt(head_dim)",
        )
    return value


def check_choice(name: str, value: Any, allowed: Iterable[str], fix: str) -> None:
    if value not in allowed:
        raise AttentionInputError(f"{name} must be one of {list(allowed)}, got {value!r}", fix)


def _tma(eligible: bool, family: str, cfg: Any, layout: str, batch_heads: int, n_k: int) -> bool:
    """Whether K/V load by tensor descriptors: ``eligible`` (FP8 V from our quantization), the
    family's feature (and the config's choice), and a dense call's descriptor rows within the int32
    row coordinate of the kernel's loads: K's batch × KV heads × keys and V's batch × KV heads ×
    channels (≤ 256), at most ``batch_heads`` (0 when unknown, as for AOT compiles) times the larger
    of ``n_k`` and 256. Packed descriptors index tokens (``reasons.MAX_TOKENS``)."""
    rows_fit = layout == "varlen" or batch_heads * max(n_k, 256) < 2**31
    return eligible and rows_fit and features.enabled("tma", family, config_choice=cfg.tma)


def make_plan(
    arch: str,
    *,
    head_dim: int,
    n_k: int,
    pv: str = "auto",
    pv_accum: Optional[str] = None,
    causal: bool = False,
    layout: str = "HND",
    qk_quant_gran: str = "per_warp",
    backend: str = "auto",
    config: Any = None,
    return_lse: bool = False,
    smooth_k: bool = True,
    sm_scale: Optional[float] = None,
    mask: str = "none",
    mask_rows: bool = False,
    n_q: int = 0,
    batch_heads: int = 0,
) -> LaunchPlan:
    """Decide a call: variant, launch config, quantization and every kernel feature (bad values
    raise ``AttentionInputError``). ``n_k``: keys per sequence (the longest for varlen; 0: unknown);
    ``n_q`` and ``batch_heads`` (sequences × query heads): the grid's size, for the config table.
    ``pv``: "fp16", "fp8" or "auto" (``default_pv``, with its accumulation unless ``pv_accum``)."""
    _check_call(qk_quant_gran, backend, pv, layout, mask, head_dim)
    dp = configs.padded_head_dim(head_dim)
    row = arch_row(arch)
    family = family_of(arch)
    shape = record.ShapeClass(head_dim, n_q, n_k, batch_heads, bool(causal), mask != "none")
    found = tuned_class(arch, shape, layout)
    auto = pv == "auto"
    pv, pv_accum = _pv_choice(arch, found, pv, pv_accum, head_dim, n_k)
    fp8 = pv == "fp8"
    accum = (pv_accum or "fp32+fp32") if fp8 else None
    if fp8:
        fix = "pass 'fp32+fp32' (two-level, the accurate default) or 'fp32' (MMA-accumulated)"
        check_choice("pv_accum_dtype", accum, ("fp32+fp32", "fp32"), fix)
    fp8_dtype = fp8_dtype_name(arch) if fp8 else None  # no FP8 units: an error before any other
    quantization = "extension" if backend == "ext" else "triton"
    ours = quantization == "triton" and layout != "varlen"  # K/V laid out by our dense quantization launch
    # K/V as our quantization lays them out, dense or packed (16-byte aligned rows)
    tma_layout = fp8 and quantization == "triton"
    split = configs.split_head_dim(head_dim, dp)
    forced = config is not None or bool(knobs.raw(configs.ENV_VAR))
    variant_key = configs.variant_key(pv, accum or "")
    try:
        cfg = configs.lookup(
            family,
            dp,
            variant_key,
            bool(causal),
            config if forced else _tuned_config(found, variant_key),
            split=split,
            n_k=n_k,
            tma_ok=tma_layout and features.possible("tma", family),
            n_q=n_q,
            batch_heads=batch_heads,
        )
    except ValueError as exc:
        raise AttentionInputError(str(exc), f"fix the config keyword or ${configs.ENV_VAR}") from None
    _check_vendor(cfg, row, arch)
    pipe = features.enabled("wgmma_pipe", family, config_choice=cfg.pipe)
    parts = features.ROW_SUM_PARTS if features.enabled("row_sum_parts", family) else 1
    return LaunchPlan(
        arch=arch,
        family=family,
        variant=VARIANTS[pv],
        pv_accum=accum,
        fp8_dtype=fp8_dtype,
        head_dim=head_dim,
        head_dim_pad=dp,
        split_head_dim=split,
        layout=layout,
        causal=bool(causal),
        config=cfg,
        q_blk=cfg.q_blk(qk_quant_gran),
        k_blk=cfg.k_blk,
        quantization=quantization,
        tma=_tma(tma_layout, family, cfg, layout, batch_heads, n_k),
        pdl=ours and features.enabled("pdl", family, n_k=n_k),
        wgmma_pipe=pipe,
        q_from_memory=pipe and 2 * head_dim >= dp,  # an output row holds the INT8 Q row
        v_key_order=fp8 and ours and features.enabled("v_key_order", family),
        row_sum_parts=parts if cfg.block_n % parts == 0 else 1,
        return_lse=bool(return_lse),
        smooth_k=bool(smooth_k),
        sm_scale=check_sm_scale(sm_scale, head_dim),
        table_version=configs.CONFIG_TABLE_VERSION,
        mask=mask,
        mask_rows=mask != "none" and bool(mask_rows),
        tuned=f"{found[0]} {found[1].shape.label()}: {found[1].winner.describe()}" if found else "",
        sdpa=auto and not forced and not return_lse and _sdpa_won(found),
        **_operand_paths(fp8, row, cfg),
    )


def _operand_paths(fp8: bool, row: Optional[archs.Arch], cfg: LaunchConfig) -> dict[str, bool]:
    """How P and V reach the P·V MMA: FP8 P by the arch's packed conversion in inline asm where
    its row says Triton would cast in software (``fp8_cvt_asm``); FP16 P·V's V copied channel-major
    where the config asks (``v_channel_major``)."""
    return {
        "fp8_cvt_asm": fp8 and row is not None and row.fp8_cvt_asm,
        "v_channel_major": not fp8 and cfg.vcm,
    }


def _check_call(qk_quant_gran: str, backend: str, pv: str, layout: str, mask: str, head_dim: int) -> None:
    """``make_plan``'s choices and head dim, each bad value an ``AttentionInputError``."""
    for name, value, allowed, fix in (
        ("qk_quant_gran", qk_quant_gran, GRANULARITIES, "pass 'per_warp' (finer, default) or 'per_block'"),
        ("quantization_backend", backend, ("auto", "triton", "ext"), "pass 'auto', 'triton' or 'ext'"),
        ("pv", pv, ("auto", "fp16", "fp8"), "pass pv='auto', 'fp16' or 'fp8'"),
        ("tensor_layout", layout, LAYOUTS, "pass tensor_layout='HND' or 'NHD'"),
        ("mask", mask, MASKS, "pass a boolean or floating attn_mask, or None"),
    ):
        check_choice(name, value, allowed, fix)
    if mask != "none" and layout == "varlen":
        raise AttentionInputError(
            "packed (varlen) sequences take no attn_mask",
            "pass each sequence's extent in cu_seqlens_q / cu_seqlens_k instead",
        )
    if not head_dim_ok(head_dim):
        raise head_dim_error(head_dim)


def _check_vendor(cfg: LaunchConfig, row: Optional[archs.Arch], arch: str) -> None:
    """A config's vendor-only Triton options on the other vendor's GPU: a clear error."""
    if cfg.maxnreg is not None and row is not None and row.vendor != "cuda":
        raise AttentionInputError(
            f"the launch config {cfg.as_tuple()} caps registers (maxnreg), an NVIDIA-only Triton option; "
            f"{arch} is not an NVIDIA GPU",
            f"drop the fifth number from the config keyword or ${configs.ENV_VAR}",
        )
    if cfg.amd_options() and row is not None and row.vendor != "rocm":
        names = ", ".join(cfg.amd_options())
        raise AttentionInputError(
            f"the launch config {cfg.spec()!r} sets {names}, AMD-only Triton options; "
            f"{arch} is not an AMD GPU",
            f"drop {names} from the config keyword or ${configs.ENV_VAR}",
        )


def _pv_choice(
    arch: str,
    found: Optional[tuple[str, record.TunedClass]],
    pv: str,
    pv_accum: Optional[str],
    head_dim: int,
    n_k: int,
) -> tuple[str, Optional[str]]:
    """The call's P·V and FP8 accumulation: as asked, or for "auto" the tuned class's best variant
    of ours, else ``default_pv`` (a given ``pv_accum`` kept either way)."""
    if pv != "auto":
        return pv, pv_accum
    pv, accum = _tuned_pv(found, arch_row(arch)) or default_pv(arch, head_dim, n_k)
    return pv, pv_accum or accum


def _sdpa_won(found: Optional[tuple[str, record.TunedClass]]) -> bool:
    """The call's class measured SDPA fastest and routing is on (``SAGEBUILD_ROUTE``)."""
    return found is not None and found[1].winner.sdpa and routing()


def routing() -> bool:
    """Whether ``sageattn`` may run SDPA where a class measured it faster (``SAGEBUILD_ROUTE``)."""
    return knobs.switch("SAGEBUILD_ROUTE") is not False


def tuned_class(arch: str, shape: record.ShapeClass, layout: str) -> Optional[tuple[str, record.TunedClass]]:
    """The tuning record's class for a dense call (``record.find``: this machine's, then the
    shipped data), or None: packed calls, calls of unknown size and unmatched ones keep the table."""
    if layout == "varlen" or min(shape.n_q, shape.n_k, shape.batch_heads) < 1:
        return None
    return record.find(arch, shape)


def _ours(found: Optional[tuple[str, record.TunedClass]]) -> list[record.Choice]:
    """A class's measured choices of our kernels, best first (the winner, then the runner-up)."""
    if found is None:
        return []
    return [c for c in (found[1].winner, found[1].runner_up) if c is not None and not c.sdpa]


def _tuned_pv(
    found: Optional[tuple[str, record.TunedClass]], row: Optional[archs.Arch]
) -> Optional[tuple[str, str]]:
    """``sageattn``'s P·V (and FP8 accumulation) from the class's best variant of ours, or None; an
    FP8 winner that waits for verify's accuracy check on this arch (``gate``) is passed over."""
    fp8_ok = row is None or (bool(row.fp8_dtype) and gate.allowed(row.name, VARIANTS["fp8"]))
    for choice in _ours(found):
        if choice.variant and (choice.variant == "fp16" or fp8_ok):
            return (
                ("fp16", "fp32+fp32")
                if choice.variant == "fp16"
                else ("fp8", "fp32" if choice.variant == "fp8acc" else "fp32+fp32")
            )
    return None


def _tuned_config(found: Optional[tuple[str, record.TunedClass]], variant_key: str) -> Optional[str]:
    """The class's measured config for the call's variant (winner first, then runner-up), or None:
    the shipped table decides."""
    return next((c.config for c in _ours(found) if c.config and c.variant == variant_key), None)
