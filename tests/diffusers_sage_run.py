"""Run a tiny diffusers FluxTransformer2DModel (random weights) under diffusers' native attention
and its sage backends (``attention_backend("sage")`` etc.), which import our ``sageattention``.

Run as a script in a fresh interpreter whose path holds our ``sageattention`` distribution
(``tests/test_diffusers_sage.py`` sets that up): diffusers decides at import whether its sage
backends are usable. Prints one JSON document: accuracy of each backend against native, and how
many calls reached sagebuild's kernels.
"""

from __future__ import annotations

import json
import sys

import torch


def main(device: str, dtype_name: str, size: int) -> None:
    if device == "cpu":  # Triton's interpreter, with the fixes the test suite applies to it
        from pathlib import Path

        sys.path.insert(0, str(Path(__file__).parent))
        import conftest  # noqa: F401
    import diffusers
    from diffusers import FluxTransformer2DModel
    from diffusers.models import attention_dispatch as ad

    from sagebuild.attention import ops
    from sagebuild.attention.metrics import accuracy

    calls = {"dense": 0, "varlen": 0}
    run_dense, run_varlen = ops.run_dense, ops.run_varlen

    def count_dense(*a, **k):
        calls["dense"] += 1
        return run_dense(*a, **k)

    def count_varlen(*a, **k):
        calls["varlen"] += 1
        return run_varlen(*a, **k)

    ops.run_dense, ops.run_varlen = count_dense, count_varlen
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    model = FluxTransformer2DModel(
        patch_size=1, in_channels=8, num_layers=1, num_single_layers=1, attention_head_dim=64,
        num_attention_heads=2, joint_attention_dim=32, pooled_projection_dim=32, axes_dims_rope=(8, 28, 28),
    ).to(device=device, dtype=dtype).eval()  # fmt: skip
    b, img, txt = 1, size, 16
    inputs = {
        "hidden_states": torch.randn(b, img, 8, device=device, dtype=dtype),
        "encoder_hidden_states": torch.randn(b, txt, 32, device=device, dtype=dtype),
        "pooled_projections": torch.randn(b, 32, device=device, dtype=dtype),
        "timestep": torch.full((b,), 0.5, device=device, dtype=dtype),
        "img_ids": torch.randn(img, 3, device=device),
        "txt_ids": torch.zeros(txt, 3, device=device),
        "return_dict": False,
    }
    doc = {"diffusers": diffusers.__version__, "can_use_sage": bool(ad._CAN_USE_SAGE_ATTN), "backends": {}}
    with torch.no_grad():
        with ad.attention_backend("native"):
            ref = model(**inputs)[0].float()
        backends = ["sage", "sage_varlen", "_sage_qk_int8_pv_fp16_triton"]
        if device == "cuda":
            backends += ["_sage_qk_int8_pv_fp8_cuda", "_sage_qk_int8_pv_fp16_cuda"]
        for name in backends:
            before = dict(calls)
            with ad.attention_backend(name):
                out = model(**inputs)[0]
            acc = accuracy(out, ref)
            acc["kernel_calls"] = {k: calls[k] - before[k] for k in calls}
            doc["backends"][name] = acc
    print(json.dumps(doc))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
