#!/usr/bin/env python3
"""A Hugging Face Llama-style decoder with and without ``sagebuild.patch_sdpa()``.

The model is built from a small ``LlamaConfig`` with random weights (nothing is downloaded) and
uses transformers' SDPA attention, which calls ``torch.nn.functional.scaled_dot_product_attention``
at run time, so the patch reaches it. The script prints

* the cosine similarity of the prompt's logits (one forward pass, same input, patched vs not),
* how many greedily generated tokens agree,
* the generation time of each run (after a warm-up run each),
* what the patch did: calls accelerated vs passed through, with the reasons.

On a CPU (or any device the kernels do not take) the patch passes every call through and the
numbers match exactly. On Hopper, prompts whose shape class measured faster on SDPA (short
prompts: the shipped classes of ``sagebuild/tuning/defaults.py``, or this machine's ``sagebuild
tune`` record) go to SDPA as well; ``SAGEBUILD_ROUTE=0`` sends them to the kernels. Examples::

    python examples/hf_llama_patch.py                          # GPU if present, else CPU
    python examples/hf_llama_patch.py --device cuda --dtype bfloat16 --seq 6144 --layers 8
    python examples/hf_llama_patch.py --device cpu --layers 1 --seq 16 --hidden 64 --new-tokens 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cuda (also ROCm), cpu; default: cuda when available")
    p.add_argument(
        "--dtype",
        default=None,
        choices=["float16", "bfloat16", "float32"],
        help="default: float16 on a GPU, float32 on CPU",
    )
    p.add_argument("--layers", type=int, default=4, help="decoder layers (default 4)")
    p.add_argument("--seq", type=int, default=512, help="prompt length in tokens (default 512)")
    p.add_argument("--new-tokens", type=int, default=32, help="tokens to generate (default 32)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--hidden", type=int, default=2048, help="hidden size (default 2048)")
    p.add_argument("--heads", type=int, default=16, help="attention heads (head dim = hidden / heads)")
    p.add_argument("--kv-heads", type=int, default=4, help="key/value heads (GQA when < heads)")
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    args = p.parse_args(argv)
    if args.hidden % args.heads or args.heads % args.kv_heads:
        p.error("--hidden must be a multiple of --heads, and --heads a multiple of --kv-heads")
    return args


def _build(args: argparse.Namespace, device: Any, dtype: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 8 // 3 // 64 * 64 or args.hidden * 2,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(4096, args.seq + args.new_tokens),
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _generate(model: Any, ids: Any, new_tokens: int) -> tuple[Any, float]:
    """Greedy generation of exactly ``new_tokens`` tokens; (tokens, seconds) after a warm-up run."""
    import torch

    kwargs = dict(
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
    )
    with torch.inference_mode():
        model.generate(ids, **kwargs)  # warm-up: kernel compilation, allocator
        _sync(ids.device)
        start = time.perf_counter()
        out = model.generate(ids, **kwargs)
        _sync(ids.device)
    return out[:, ids.shape[1] :], time.perf_counter() - start


def _prompt_logits(model: Any, ids: Any) -> Any:
    import torch

    with torch.inference_mode():
        return model(ids).logits.float()


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the comparison and return the numbers (``main`` prints them)."""
    import torch
    import torch.nn.functional as F

    import sagebuild
    from sagebuild.patch import reset_stats

    args = _parse(argv)
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("float16" if device.type == "cuda" else "float32"))
    model = _build(args, device, dtype)
    g = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(2, args.vocab, (args.batch, args.seq), generator=g).to(device)

    base_logits = _prompt_logits(model, ids)
    base_tokens, base_s = _generate(model, ids, args.new_tokens)

    reset_stats()
    with sagebuild.patch_sdpa():
        sage_logits = _prompt_logits(model, ids)
        sage_tokens, sage_s = _generate(model, ids, args.new_tokens)
    stats = sagebuild.patch_stats()

    cos = F.cosine_similarity(base_logits.flatten(), sage_logits.flatten(), dim=0).item()
    agree = (base_tokens == sage_tokens).float().mean().item()
    return {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "model": {
            "layers": args.layers,
            "hidden": args.hidden,
            "heads": args.heads,
            "kv_heads": args.kv_heads,
            "head_dim": args.hidden // args.heads,
            "vocab": args.vocab,
        },
        "batch": args.batch,
        "prompt_tokens": args.seq,
        "new_tokens": args.new_tokens,
        "logits_cosine": cos,
        "token_agreement": agree,
        "generate_seconds": {"sdpa": base_s, "patched": sage_s},
        "speedup": base_s / sage_s if sage_s > 0 else None,
        "patch_stats": stats.to_dict(),
    }


def main(argv: list[str] | None = None) -> int:
    result = run(argv)
    if "--json" in (argv if argv is not None else sys.argv[1:]):
        print(json.dumps(result, indent=2))
        return 0
    m = result["model"]
    print(f"{result['device_name']} ({result['device']}), torch {result['torch']}, {result['dtype']}")
    print(
        f"Llama-style decoder: {m['layers']} layers, hidden {m['hidden']}, {m['heads']} heads "
        f"({m['kv_heads']} KV), head dim {m['head_dim']}; batch {result['batch']}, "
        f"prompt {result['prompt_tokens']}, {result['new_tokens']} new tokens"
    )
    print(f"prompt logits cosine (patched vs SDPA): {result['logits_cosine']:.6f}")
    print(f"generated tokens agreeing:              {result['token_agreement']:.1%}")
    t = result["generate_seconds"]
    print(
        f"generate time: SDPA {t['sdpa']:.3f} s, patched {t['patched']:.3f} s "
        f"(speed-up {result['speedup']:.2f}x)"
    )
    s = result["patch_stats"]
    print(f"patch: {s['accelerated']} calls accelerated, {s['passed_through']} passed through")
    for reason, n in s["reasons"].items():
        print(f"  passed through {n:>5}x: {reason}")
    for path, n in s["accelerated_by"].items():
        print(f"  accelerated    {n:>5}x: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
