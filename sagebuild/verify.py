"""``sagebuild verify``: the seed's minimal tensor check for every kernel variant this device runs.

Per variant the output keeps the input's shape, dtype and device, is finite and within the profile's
accuracy bounds of the float32 reference (without a GPU the golden model runs); a failure names cause and fix.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from sagebuild.bench.config import check_inputs
from sagebuild.bench.memory import resolve_device
from sagebuild.benchrecord import AUTO
from sagebuild.errors import SagebuildError

DEFAULT_SHAPE = (1, 8, 512, 64)  # the seed's smoke test: batch 1, 8 heads, 512 tokens, head dim 64
GOLDEN_NOTE = (
    "CPU only: ran the golden model (plain torch, the kernels' exact quantization and "
    "accumulation). This proves the algorithm and the install, not a GPU kernel."
)
NAN_FIX = (
    "pass float16 or bfloat16 tensors (q.half() / q.bfloat16()); float32 inputs are the seed's NaN trap, "
    "and check the inputs themselves are finite"
)


@dataclass
class VariantCheck:
    """One variant's smoke test: what came out and, when it failed, why and what to do."""

    variant: str
    ok: bool
    shape: Optional[list[int]] = None
    dtype: Optional[str] = None
    device: Optional[str] = None
    problems: list[str] = field(default_factory=list)
    accuracy: Optional[dict[str, Any]] = None
    bounds: Optional[dict[str, float]] = None
    cause: Optional[str] = None
    fix: Optional[str] = None
    seconds: Optional[float] = None


@dataclass
class VerifyResult:
    ok: bool
    mode: str  # "gpu" | "golden"
    device: str
    note: str
    shape: list[int]
    dtype: str
    results: list[VariantCheck]

    def failure_text(self) -> str:
        """The failed variants' problems, one per line (what ``explain`` and the report get)."""
        return "\n".join(f"{r.variant}: {'; '.join(r.problems)}" for r in self.results if not r.ok)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# failures.yaml entries that mean "the GPU's arch was not compiled in": verify knows the arch.
_ARCH_MISSING = {"hip-invalid-device-function", "no-kernel-image", "kernel-not-compiled-for-arch"}


def diagnose(
    text: str, arch: str | None = None, extension: bool = False, torch_install: str | None = None
) -> tuple[str, str] | None:
    """Likely cause and fix of a run-time error from the failure database, made exact for a missing
    arch: from the compiled extension (``extension``) rebuild it for ``arch``; from an attention
    call, whose Triton kernels are compiled for the GPU at run time, the missing code is torch's
    own, and the profile's ``torch_install`` line fixes it."""
    if "float32" in text.lower():  # our own input validation: fp32 is the seed's NaN trap
        return ("the kernels take float16/bfloat16 inputs only", NAN_FIX)
    from sagebuild.explain import explain

    matches = explain(text)
    if not matches:
        return None
    m = matches[0]
    target = arch or "<your GPU arch>"
    if m.id in _ARCH_MISSING and extension:
        cause = f"the extension was not compiled for this GPU's arch ({target})"
        return cause, f"sagebuild compile --arch {target}"
    if m.id in _ARCH_MISSING and torch_install:
        return (
            f"torch has no GPU code for this GPU's arch ({target}); the attention's Triton kernels are "
            "compiled for it at run time",
            f"install a torch build that supports {target}: {torch_install}",
        )
    return m.cause, m.fix


def _record_error(vc: VariantCheck, e: Exception, arch: str | None = None, **hints: Any) -> None:
    """A variant that raised: its first line, and the likely cause and fix when one is known
    (``hints``: :func:`diagnose`'s extension and torch_install)."""
    text = f"{type(e).__name__}: {e}"
    vc.problems.append(text.splitlines()[0][:500])
    found = (e.message, e.fix) if isinstance(e, SagebuildError) else diagnose(text, arch, **hints)
    if found:
        vc.cause, vc.fix = found


def _dtype_name(dtype: Any) -> str:
    return str(dtype).replace("torch.", "")


def _check_output(vc: VariantCheck, out: Any, ref: Any, q: Any, expect_dtype: Any, bounds: Any) -> None:
    from sagebuild.attention import metrics

    vc.shape, vc.dtype, vc.device = list(out.shape), _dtype_name(out.dtype), str(out.device)
    if tuple(out.shape) != tuple(q.shape):
        vc.problems.append(f"output shape {tuple(out.shape)} != input shape {tuple(q.shape)}")
    if expect_dtype is not None and out.dtype != expect_dtype:
        vc.problems.append(f"output dtype {vc.dtype} != input dtype {_dtype_name(expect_dtype)}")
    if out.device != q.device:
        vc.problems.append(f"output on {out.device}, input on {q.device}")
    if vc.problems:
        return
    acc = vc.accuracy = metrics.accuracy(out, ref)
    if not acc["finite"]:
        vc.problems.append(f"non-finite output: {acc['nan_count']} NaN, {acc['inf_count']} Inf")
        vc.cause, vc.fix = "NaN/Inf in the output", NAN_FIX
        return
    if bounds is not None:
        vc.bounds = asdict(bounds)
        if acc["cos"] < bounds.cos_min:
            vc.problems.append(f"cosine similarity {acc['cos']:.6f} < {bounds.cos_min} (profile bound)")
        if acc["rel_l1"] > bounds.rel_l1_max:
            vc.problems.append(f"relative L1 {acc['rel_l1']:.5f} > {bounds.rel_l1_max} (profile bound)")
        if vc.problems:
            vc.cause = "accuracy outside the profile's bounds: the kernel computes something different"
            vc.fix = (
                "rebuild from clean sources (sagebuild compile) and check `sagebuild doctor`; if only this "
                "variant fails, use the other one and report the shape"
            )


def run_verify(
    profile: Any,
    shape: tuple[int, int, int, int] = DEFAULT_SHAPE,
    dtype: str = "float16",
    device: str = "auto",
    seed: int = 0,
    causal: bool = False,
    layout: str = "HND",
) -> VerifyResult:
    """Run the smoke test for every variant on ``device`` (``auto``: the GPU if torch sees one)."""
    check_inputs(dtype, layout)
    import torch

    from sagebuild.attention import reference
    from sagebuild.bench.run import random_qkv

    dev = resolve_device(device)
    q, k, v = random_qkv(shape, layout, dtype, seed, dev)
    ref = reference.exact_attention(q, k, v, tensor_layout=layout, is_causal=causal)

    arch: Optional[str] = None
    aliases: dict[str, str] = {}  # an entry point checked against another variant's bounds
    if dev.type == "cpu":
        mode, note = "golden", GOLDEN_NOTE
        entries = {n: functools.partial(reference.golden_attention, variant=n) for n in profile.kernels}
        expect_dtype = None  # the golden model returns float32 by design
    else:
        mode = "gpu"
        from sagebuild import attention
        from sagebuild.attention import dispatch

        try:
            arch = dispatch.device_arch(dev)
            avail = dispatch.available_variants(dev)
            auto_variant = dispatch.variant_for_device(dev)
        except SagebuildError as e:
            vc = VariantCheck(AUTO, False, problems=[e.message], cause=e.message, fix=e.fix)
            return VerifyResult(
                False, mode, str(dev), "the GPU is not supported by the kernels", list(shape), dtype, [vc]
            )
        note = (
            f"GPU {torch.cuda.get_device_name(dev)} ({arch}); variants on this arch: {', '.join(avail)}; "
            f"sageattn dispatches to {auto_variant}"
        )
        entries = {n: getattr(attention, f"sageattn_{n}_triton") for n in profile.kernels if n in avail}
        entries[AUTO] = attention.sageattn
        aliases[AUTO] = auto_variant
        expect_dtype = q.dtype

    results = []
    for name, fn in entries.items():
        vc = VariantCheck(name, False)
        t0 = time.perf_counter()
        try:
            out = fn(q, k, v, tensor_layout=layout, is_causal=causal)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
        except Exception as e:  # noqa: BLE001 - every failure becomes a diagnosed result, not a traceback
            _record_error(vc, e, arch, torch_install=profile.torch_install)
        else:
            _check_output(vc, out, ref, q, expect_dtype, profile.accuracy.get(aliases.get(name, name)))
        vc.seconds = round(time.perf_counter() - t0, 4)
        vc.ok = not vc.problems
        results.append(vc)
    if arch is not None:
        record_gated(arch, results)
    if (ext_check := check_ext_ops(dev, k, v, layout, arch)) is not None:
        results.append(ext_check)
    if not results:
        results.append(
            VariantCheck(
                "(none)",
                False,
                problems=["no kernel variant of the profile runs here"],
                cause=f"profile {profile.name} lists {list(profile.kernels)}",
                fix="pick the profile that matches this GPU: sagebuild profiles",
            )
        )
    return VerifyResult(all(r.ok for r in results), mode, str(dev), note, list(shape), dtype, results)


def record_gated(arch: str, results: list[VariantCheck]) -> list[str]:
    """Record, for the variants that wait for an accuracy check on this arch (``attention.gate``),
    whether this run's check passed: the dispatch and the tuner choose them only after a pass.
    Returns the variants recorded."""
    from sagebuild.attention import gate

    done = []
    for vc in results:
        if gate.needs_check(arch, vc.variant):
            detail = "; ".join(vc.problems) if vc.problems else _accuracy_text(vc.accuracy)
            if vc.ok and vc.bounds is None:  # nothing to hold the accuracy to: no pass
                detail = "the profile has no accuracy bound for it"
            gate.record(arch, vc.variant, vc.ok and vc.bounds is not None, detail)
            done.append(vc.variant)
    return done


def _accuracy_text(accuracy: Optional[dict[str, Any]]) -> str:
    return ", ".join(f"{k} {v:.6g}" for k, v in (accuracy or {}).items() if isinstance(v, (int, float)))


EXT_CHECK = "ext:quant_ops"


def check_ext_ops(
    dev: Any, k: Any, v: Any, layout: str = "HND", arch: str | None = None
) -> VariantCheck | None:
    """The built extension's quantization ops against the reference (None: not built): on a CPU-only
    machine this proves the compiled ``.so`` follows the INT8/FP8 contract. ``arch``: the GPU's, for
    the fix of a missing arch."""
    import torch

    from sagebuild import ext
    from sagebuild.attention import reference

    ops = ext.get_quant_ops(dev)
    if ops is None:
        return None

    vc = VariantCheck(EXT_CHECK, False, device=str(dev))
    t0 = time.perf_counter()
    kh, vh = (x.transpose(1, 2) if layout == "NHD" else x for x in (k, v))
    try:
        km = ops.k_mean(kh)
        km_ref = kh.float().mean(dim=2, keepdim=True)
        if (km.float().reshape(km_ref.shape) - km_ref).abs().max().item() > 1e-3:
            vc.problems.append("k_mean differs from the mean of K over tokens")
        kq, ks = ops.quant_per_block_int8(kh, km, 64, 1.0)
        qi, step = reference.quant_int8_blocks(kh.float() - km_ref, 64)
        diff = (kq.float() - qi).abs()
        if diff.max().item() > 1 or (diff > 0).float().mean().item() > 1e-3:
            vc.problems.append(
                f"INT8 K differs from the reference in {int((diff > 0).sum())} of {diff.numel()} values"
            )
        if not torch.allclose(ks.float().reshape(step.shape), step, rtol=1e-4, atol=1e-9):
            vc.problems.append("INT8 K scales differ from the reference")
        vq, vs = ops.quant_v_fp8_per_channel(vh, False)
        vq_ref, vs_ref = reference.quant_v_fp8(vh.float(), torch.float8_e4m3fn)
        if not torch.allclose(vs.float().reshape(vs_ref.shape), vs_ref, rtol=1e-4, atol=1e-9):
            vc.problems.append("FP8 V scales differ from the reference")
        # the same codes, or rarely (a quotient within an ulp of a rounding boundary) the adjacent one
        got, want = vq.float().reshape(vq_ref.shape), vq_ref.float()
        ulp = torch.exp2(torch.floor(torch.log2(want.abs().clamp_min(2.0**-6))) - 3)
        vdiff = (got - want).abs()
        far = int((vdiff > ulp * 1.0001).sum())
        near = int((vdiff > 0).sum())
        if far or near > 1e-3 * vdiff.numel():
            vc.problems.append(
                f"FP8 V values differ from the reference: {near} of {vdiff.numel()} differ, {far} by more "
                f"than one FP8 step (max {vdiff.max().item():.4g})"
            )
        vc.shape, vc.dtype = list(kq.shape), _dtype_name(kq.dtype)
    except Exception as e:  # noqa: BLE001 - a broken build is a diagnosed failure
        _record_error(vc, e, arch, extension=True)
    if vc.problems and not vc.cause:
        vc.cause = "the built extension's quantization does not follow the kernels' contract"
        vc.fix = "rebuild it from the bundled sources: sagebuild compile (then sagebuild verify again)"
    vc.seconds = round(time.perf_counter() - t0, 4)
    vc.ok = not vc.problems
    return vc


def verify_plan(
    profile: Any, shape: tuple[int, int, int, int] = DEFAULT_SHAPE, causal: bool = False
) -> dict[str, Any]:
    """``verify --dry-run``: per profile arch, without a GPU, the variants it runs (launch config,
    FP8 format, matrix instructions, accuracy bound) and the one ``sageattn`` picks and why."""
    from sagebuild import archs
    from sagebuild.attention import gate
    from sagebuild.attention import plan as launch
    from sagebuild.kernels.triton import configs

    _, _, n, d = shape
    out: dict[str, Any] = {"profile": profile.name, "shape": list(shape), "causal": causal, "archs": []}
    for name in profile.archs:
        row = archs.get(name)
        entry: dict[str, Any] = {"arch": row.name, "family": row.family, "products": row.products}
        out["archs"].append(entry)
        if row.pv is None:
            entry["unsupported"] = row.note or "no int8 matrix units"
            continue
        auto = launch.make_plan(row.name, head_dim=d, n_k=n, causal=causal)
        if configs.preferred_pv(row.family, d, n) is not None:
            reason = f"measured preference for {row.family} at head dim {d} and {n} keys (configs.py)"
        else:
            reason = row.note or f"the arch table's P·V column for {row.name}: {row.pv}"
        held = gate.why_not(row.name, launch.VARIANTS[row.pv])
        if held:  # the table's variant waits for this machine's accuracy check
            reason = f"{held}; until then {auto.variant} ({reason})"
        entry["default"] = {"variant": auto.variant, "pv_accum": auto.pv_accum, "reason": reason}
        entry["variants"] = []
        for variant in archs.variants(row.name):
            fp8 = variant.endswith("fp8")
            p = launch.make_plan(row.name, head_dim=d, n_k=n, causal=causal, pv="fp8" if fp8 else "fp16")
            bound = profile.accuracy.get(variant)
            entry["variants"].append(
                {
                    "variant": variant,
                    "verified": variant in profile.kernels,
                    "config": p.config.spec(),
                    "fp8_format": p.fp8_dtype,
                    "matrix": [row.int8_mma] + ([row.fp8_mma] if fp8 else []),
                    "bounds": asdict(bound) if bound else None,
                }
            )
    return out


def plan_text(plan: dict[str, Any]) -> str:
    """``verify_plan`` as lines for the terminal."""
    b, h, n, d = plan["shape"]
    lines = [
        f"sagebuild verify — plan (dry run) for profile {plan['profile']}: {b}×{h}×{n}×{d}"
        + (" causal" if plan["causal"] else "")
    ]
    for a in plan["archs"]:
        lines.append(f"{a['arch']} ({a['family']}: {a['products']})")
        if "unsupported" in a:
            lines.append(f"  not supported by the quantized kernels: {a['unsupported']}")
            continue
        lines.append(f"  sageattn picks {a['default']['variant']} — {a['default']['reason']}")
        for v in a["variants"]:
            bound = v["bounds"]
            acc = f"cos ≥ {bound['cos_min']}, rel L1 ≤ {bound['rel_l1_max']}" if bound else "no profile bound"
            what = "checked" if v["verified"] else "not in the profile's kernels (bench times it)"
            fmt = f", {v['fp8_format']}" if v["fp8_format"] else ""
            matrix = " + ".join(v["matrix"])
            lines.append(f"  {v['variant']}: {what}; config {v['config']}{fmt}; matrix {matrix}; {acc}")
    return "\n".join(lines)
