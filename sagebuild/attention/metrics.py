"""Accuracy of an attention output against a reference, the numbers tests and reports use."""

from __future__ import annotations

import torch


def accuracy(out: torch.Tensor, ref: torch.Tensor) -> dict:
    """cos, rel_l1 (Σ|o−r| / Σ|r|), rmse, max_abs, finite, nan_count, inf_count, in float64;
    non-finite entries of ``out`` are counted and excluded from the error numbers."""
    o = out.detach().to(torch.float64).flatten()
    r = ref.detach().to(torch.float64).flatten().to(o.device)
    if o.shape != r.shape:
        raise ValueError(f"shapes differ: out {tuple(out.shape)} vs ref {tuple(ref.shape)}")
    nan_count = int(torch.isnan(o).sum())
    inf_count = int(torch.isinf(o).sum())
    ok = torch.isfinite(o) & torch.isfinite(r)
    o, r = o[ok], r[ok]
    diff = o - r
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    denom = float(o.norm() * r.norm())
    return {  # a zero (or empty) side has no angle: identical counts as 1, anything else as 0
        "cos": float((o * r).sum()) / denom if denom > 0 else float(max_abs == 0),
        "rel_l1": float(diff.abs().sum() / r.abs().sum().clamp_min(1e-30)),
        "rmse": float(diff.pow(2).mean().sqrt()) if diff.numel() else 0.0,
        "max_abs": max_abs,
        "finite": nan_count == 0 and inf_count == 0,
        "nan_count": nan_count,
        "inf_count": inf_count,
    }
