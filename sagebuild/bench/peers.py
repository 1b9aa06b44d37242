"""The other attention implementations a user could pick, as bench providers (``--against``).

Each peer is imported only when asked for. One that is not installed, cannot run on this device
or refuses the call's shape answers ``available(...)`` with a one-line reason, and the bench
lists it with that reason: a peer is never an error and never gated. Peers:

- ``ck``: Comfy Kitchen's ``comfy_kitchen.int8_attention(q, k, v, *, scale=None, attn_mask=None)``
  (INT8 Q·Kᵀ and P·V; [B, H, N, D]; GQA and other key counts; no causal flag; head dim ≤ 256;
  ``int8_attention_is_available(device)`` says whether its extension runs on this GPU).
- ``upstream``: an upstream ``sageattention`` distribution's ``sageattn`` (not sagebuild's compat
  package, which is ours and is excluded).
- ``fa2``: FlashAttention 2 ``flash_attn.flash_attn_func`` ([B, N, H, D]).
- ``fa3``: FlashAttention-3 ``flash_attn_interface.flash_attn_func`` (Hopper).
- ``fa4``: FlashAttention-4 ``flash_attn.cute.flash_attn_func`` (Hopper, Blackwell).
- ``aiter``: AMD's ``aiter.flash_attn_func`` (ROCm).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any, Callable, Optional

from sagebuild.bench.providers import Built, Case, Provider, Shape


def _first_line(exc: Exception) -> str:
    return (str(exc).splitlines() or [""])[0][:160]


class Peer(Provider):
    """A peer's facts as data; ``available`` walks them in order and returns the first reason."""

    kind = "peer"
    module = ""  # what to import
    attr = "flash_attn_func"  # the function called
    dists: tuple[str, ...] = ()  # distributions that may provide it (for the version)
    pip = ""  # how a user installs it
    layout = "NHD"  # the layout it takes ([B, N, H, D] for FlashAttention's API)
    causal_ok = True
    bottom_right = True  # its causal mask with other key counts is bottom-right aligned, like ours
    max_head_dim = 256
    min_sm = 0  # the lowest NVIDIA compute capability (as 90 for sm90) it runs on; 0: any

    def __init__(self) -> None:
        self._mod: Any = None
        self._error: Optional[str] = None

    def load(self) -> Any:
        """The imported module, or None with the reason kept (an import that fails is no error)."""
        if self._mod is None and self._error is None:
            try:
                self._mod = importlib.import_module(self.module)
                self._error = self.not_ours(self._mod)
            except Exception as exc:  # noqa: BLE001 - a broken peer is listed with its reason
                self._error = self.import_reason(exc)
        return None if self._error else self._mod

    def import_reason(self, exc: Exception) -> str:
        """Why the import failed: not installed (and how to install it), or the error it raised."""
        missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
        if missing and self.module.startswith(missing):
            return f"{self.module} is not installed ({self.pip})"
        return f"import {self.module} failed ({type(exc).__name__}: {_first_line(exc)})"

    def not_ours(self, mod: Any) -> Optional[str]:
        return None

    def what(self) -> str:
        for dist in self.dists:
            try:
                return f"{dist} {importlib.metadata.version(dist)} {self.module}.{self.attr}"
            except importlib.metadata.PackageNotFoundError:
                continue
        version = getattr(self._mod, "__version__", None)
        return f"{self.module}{' ' + version if version else ''}.{self.attr}"

    def available(self, shape: Shape, dtype: str, layout: str, causal: bool, device: Any) -> Optional[str]:
        mod = self.load()
        if mod is None:
            return self._error
        if shape.packed:
            return "packed sequences: the bench times peers on dense calls only"
        if causal and not self.causal_ok:
            return f"{self.module}.{self.attr} has no causal mask (it is timed on non-causal calls)"
        if causal and shape.kv_seq != shape.seq and not self.bottom_right:
            return "causal with other key counts: its mask's alignment differs from SDPA's and ours"
        if shape.head_dim > self.max_head_dim:
            return f"head dim {shape.head_dim} > {self.max_head_dim}, the most it takes"
        try:
            return self.device_reason(mod, device)
        except Exception as exc:  # noqa: BLE001 - a peer's own check that breaks is its reason
            return f"its availability check failed ({type(exc).__name__}: {_first_line(exc)})"

    def device_reason(self, mod: Any, device: Any) -> Optional[str]:
        """Why it cannot run on ``device`` (None: it can)."""
        if getattr(device, "type", None) != "cuda":
            return f"needs a GPU; this run is on {device}"
        import torch

        major, minor = torch.cuda.get_device_capability(device)
        if torch.version.hip is None and major * 10 + minor < self.min_sm:
            return f"needs sm{self.min_sm} or newer; this GPU is sm{major}{minor}"
        return None

    def function(self, mod: Any) -> Callable[..., Any]:
        return getattr(mod, self.attr)

    def run(self, fn: Callable[..., Any], q: Any, k: Any, v: Any, causal: bool) -> Any:
        return fn(q, k, v, causal=causal)

    def build(self, case: Case) -> Built:
        mod = self.load()
        if mod is None:
            raise RuntimeError(self._error)
        flip = case.layout != self.layout  # HND ↔ NHD is a transpose of dims 1 and 2
        q, k, v = ((x.transpose(1, 2).contiguous() if flip else x) for x in (case.q, case.k, case.v))
        fn, causal = self.function(mod), case.causal

        def call() -> Any:
            out = self.run(fn, q, k, v, causal)
            out = out[0] if isinstance(out, tuple) else out  # (out, lse) from FlashAttention-3/4
            return out.transpose(1, 2) if flip else out

        return Built(call, ran=self.what())


class ComfyKitchen(Peer):
    name, label = "ck", "Comfy Kitchen int8_attention"
    module, attr, dists = "comfy_kitchen", "int8_attention", ("comfy-kitchen", "comfy_kitchen")
    pip = "pip install comfy-kitchen"
    layout, causal_ok = "HND", False

    def device_reason(self, mod: Any, device: Any) -> Optional[str]:
        if not mod.int8_attention_is_available(device):
            return f"comfy_kitchen.int8_attention_is_available says no on {device} (CUDA sm75+ or HIP RDNA3+)"
        return None

    def run(self, fn: Callable[..., Any], q: Any, k: Any, v: Any, causal: bool) -> Any:
        return fn(q, k, v)


class Upstream(Peer):
    name, label = "upstream", "SageAttention (upstream) sageattn"
    module, attr, dists = "sageattention", "sageattn", ("sageattention",)
    pip = "install it from github.com/thu-ml/SageAttention"
    layout, bottom_right, max_head_dim = "HND", False, 128

    def not_ours(self, mod: Any) -> Optional[str]:
        try:
            version = importlib.metadata.version("sageattention")
        except importlib.metadata.PackageNotFoundError:
            version = ""
        if getattr(mod, "__provider__", None) == "sagebuild" or "sagebuild" in version:
            return (
                "the installed sageattention is sagebuild's own (compat install), not upstream SageAttention"
            )
        return None

    def run(self, fn: Callable[..., Any], q: Any, k: Any, v: Any, causal: bool) -> Any:
        return fn(q, k, v, tensor_layout="HND", is_causal=causal)


class FlashAttention2(Peer):
    name, label = "fa2", "FlashAttention 2 flash_attn_func"
    module, dists, pip = "flash_attn", ("flash-attn", "flash_attn"), "pip install flash-attn"


class FlashAttention3(Peer):
    name, label = "fa3", "FlashAttention-3 flash_attn_func"
    module, dists = "flash_attn_interface", ("flash-attn-3", "flash_attn_3")
    pip = "build it from flash-attention's hopper/ directory"
    min_sm = 90


class FlashAttention4(Peer):
    name, label = "fa4", "FlashAttention-4 flash_attn_func"
    module, dists, pip = "flash_attn.cute", ("flash-attn-4", "flash_attn_4"), "pip install flash-attn-4"
    min_sm = 90


class Aiter(Peer):
    name, label = "aiter", "aiter flash_attn_func"
    module, dists, pip = "aiter", ("aiter", "amd-aiter"), "install it from github.com/ROCm/aiter"

    def device_reason(self, mod: Any, device: Any) -> Optional[str]:
        import torch

        if torch.version.hip is None:
            return "runs on ROCm; this torch is not a ROCm build"
        return super().device_reason(mod, device)


# ``--against``'s names, in the order the table lists them
PEERS: dict[str, type[Peer]] = {
    p.name: p for p in (ComfyKitchen, Upstream, FlashAttention2, FlashAttention3, FlashAttention4, Aiter)
}


def peers(names: tuple[str, ...]) -> list[Peer]:
    """The peers ``--against`` named, fresh (each imports its module on first use)."""
    return [PEERS[n]() for n in names]
