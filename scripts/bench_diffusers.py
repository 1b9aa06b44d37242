#!/usr/bin/env python3
"""Rerun for issue 36's end-to-end target: a diffusers Wan transformer forward, sage backend against native.

    python scripts/bench_diffusers.py [--layers 30] [--latent 21x60x104] [--rounds 5] [--json F]

The model is built from Wan 2.1 T2V 1.3B's config with random weights (nothing is downloaded):
12 heads of 128, FFN 8960, 4096-wide text states. The default latent, 21 frames of 60×104, is
what an 81-frame 480p video becomes (32,760 tokens after the 1×2×2 patches); 512 text tokens.
Each round times one forward under ``attention_backend("native")`` (PyTorch SDPA) and one under
``attention_backend("sage")``, which calls ``sageattention.sageattn`` — here ours: the files
``sagebuild compat install`` would write are put first on ``sys.path`` for this process only,
so nothing is installed. Rounds alternate their order; the medians are compared in one process.
The output's accuracy against native and the number of attention calls that reached our kernels
(self- and cross-attention in every block) are printed with the ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

WAN_1_3B = dict(
    patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
    text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6,
)  # fmt: skip


def put_our_sageattention_first(folder: Path) -> None:
    """Write our ``sageattention`` distribution into ``folder`` and put it first on sys.path, so
    that diffusers (imported after this) finds it and enables its sage backends."""
    from sagebuild.compat import contents

    files = contents.files()
    files[f"{contents.DIST_INFO}/RECORD"] = contents.record(files)
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    sys.path.insert(0, str(folder))


def cast_like_from_pretrained(model: torch.nn.Module, dtype: torch.dtype) -> None:
    """Cast to ``dtype`` except the modules the model keeps in float32, as ``from_pretrained(...,
    torch_dtype=dtype)`` loads it (``model.to(dtype)`` would cast those too)."""
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point():
            t.data = t.data.to(torch.float32 if keep & set(name.split(".")) else dtype)


def count_kernel_calls() -> dict[str, int]:
    """Count the calls that reach our dense and varlen kernels (wrapping ``attention.ops``)."""
    from sagebuild.attention import ops

    calls = {"dense": 0, "varlen": 0}

    def counted(name: str, fn: Callable) -> Callable:
        def wrapper(*a: Any, **k: Any) -> Any:
            calls[name] += 1
            return fn(*a, **k)

        return wrapper

    ops.run_dense = counted("dense", ops.run_dense)
    ops.run_varlen = counted("varlen", ops.run_varlen)
    return calls


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    """(milliseconds, result) of one call, the device drained before and after."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return (time.perf_counter() - t0) * 1e3, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--layers", type=int, default=WAN_1_3B["num_layers"], help="transformer blocks (default 30)"
    )
    ap.add_argument(
        "--latent", default="21x60x104", help="latent frames x height x width (default: 480p, 81 frames)"
    )
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--heads", type=int, default=WAN_1_3B["num_attention_heads"])
    ap.add_argument("--head-dim", type=int, default=WAN_1_3B["attention_head_dim"])
    ap.add_argument("--ffn", type=int, default=WAN_1_3B["ffn_dim"])
    ap.add_argument("--text-dim", type=int, default=WAN_1_3B["text_dim"])
    ap.add_argument("--rounds", type=int, default=5, help="timed forwards per backend (default 5)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default="", help="also write the result to this file")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("bench_diffusers: no CUDA device; nothing to time (--device cpu runs Triton's interpreter)")
        return 2
    frames, height, width = (int(x) for x in args.latent.split("x"))

    with tempfile.TemporaryDirectory() as tmp:
        put_our_sageattention_first(Path(tmp))
        try:
            import diffusers
            from diffusers import WanTransformer3DModel
            from diffusers.models import attention_dispatch as ad
        except ImportError as exc:
            print(f"bench_diffusers: {exc}; install diffusers (a pure-Python wheel: pip install diffusers)")
            return 2
        if not ad._CAN_USE_SAGE_ATTN:
            print("bench_diffusers: diffusers did not enable its sage backends with our sageattention")
            return 1
        from sagebuild.attention.metrics import accuracy

        calls = count_kernel_calls()
        config = WAN_1_3B | dict(
            num_layers=args.layers, num_attention_heads=args.heads, attention_head_dim=args.head_dim,
            ffn_dim=args.ffn, text_dim=args.text_dim,
        )  # fmt: skip
        dtype = torch.bfloat16
        torch.manual_seed(0)
        with device:
            model = WanTransformer3DModel(**config).eval()
        cast_like_from_pretrained(model, dtype)
        inputs = dict(
            hidden_states=torch.randn(1, 16, frames, height, width, device=device, dtype=dtype),
            timestep=torch.full((1,), 500.0, device=device),
            encoder_hidden_states=torch.randn(1, args.text_len, args.text_dim, device=device, dtype=dtype),
            return_dict=False,
        )
        tokens = frames * (height // 2) * (width // 2)

        def forward(backend: str) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:
                with ad.attention_backend(backend):
                    return model(**inputs)[0]

            return run

        backends = {"native": forward("native"), "sage": forward("sage")}
        times: dict[str, list[float]] = {name: [] for name in backends}
        outs: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for fn in backends.values():  # compile, record and warm up
                fn()
            before = dict(calls)
            for r in range(args.rounds):
                for name in list(backends) if r % 2 == 0 else list(backends)[::-1]:
                    ms, outs[name] = timed(backends[name], device)
                    times[name].append(ms)
        reached = {k: (calls[k] - before[k]) // args.rounds for k in calls}
        acc = accuracy(outs["sage"], outs["native"].float())
        ms = {name: statistics.median(t) for name, t in times.items()}
        doc = {
            "diffusers": diffusers.__version__,
            "torch": torch.__version__,
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "model": f"WanTransformer3DModel (Wan 2.1 1.3B config, {args.layers} blocks, random weights)",
            "shape": f"1×{args.heads}×{tokens}×{args.head_dim}, {args.text_len} text tokens",
            "ms": ms,
            "ratio": ms["native"] / ms["sage"],
            "kernel_calls_per_forward": reached,
            "cos": acc["cos"],
            "rel_l1": acc["rel_l1"],
            "finite": acc["finite"],
        }
        print(
            f"| diffusers Wan forward ({args.layers} blocks, sage backend) | {doc['shape']} | bf16 | "
            f"{ms['sage']:.2f} | {ms['native']:.2f} | {doc['ratio']:.2f}× | cos {acc['cos']:.5f}, "
            f"rel L1 {acc['rel_l1']:.4f} | our kernels per forward: {reached['dense'] + reached['varlen']} |"
        )
        print(json.dumps(doc))
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1))
        if reached["dense"] + reached["varlen"] < 2 * args.layers:
            print("bench_diffusers: the sage backend did not reach our kernels for every attention call")
            return 1
        return 0 if acc["finite"] else 1


if __name__ == "__main__":
    sys.exit(main())
