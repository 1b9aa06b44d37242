"""Runtime loader of the bundled C++/CUDA/HIP extension. Loading never raises: a missing or broken
build makes ``get_quant_ops`` return None and keeps its reason for ``unavailable_reason()`` ("built
for torch X with CUDA Y, you have Z"). Only ``quantization_backend="ext"`` uses the ops, and then
stops with that reason; the default quantizes with Triton."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Optional

from sagebuild.build import paths
from sagebuild.fsio import sha256_file

_REBUILD = "rebuild with `sagebuild compile`"
_lock = threading.Lock()
_loaded_from: Optional[Path] = None
_error: Optional[str] = None
_error_for: Optional[Path] = None  # the library the error belongs to (a rebuild clears it)


def build_info() -> Optional[dict[str, Any]]:
    """The metadata JSON stored next to the current build (None when nothing is built)."""
    return paths.read_info(paths.running_ext_dir())


def _describe(t: dict[str, Any]) -> str:
    """``torch 2.13.0 with CUDA 13.0`` for a build record's (or the running) torch."""
    gpu = f"CUDA {t['cuda']}" if t.get("cuda") else f"HIP {t['hip']}" if t.get("hip") else "no GPU runtime"
    return f"torch {t.get('version', '?')} with {gpu}"


def _try_load() -> bool:
    """Load the current build once per process; record (not raise) any failure."""
    global _loaded_from, _error, _error_for
    import torch

    with _lock:
        base = paths.running_ext_dir()
        lib = paths.current_lib(base)
        if _loaded_from is not None:
            if not lib.is_file() or lib.resolve() == _loaded_from:
                _error = _error_for = None  # a refusal below no longer applies
                return True
            # torch cannot unload an op library: the ops in this process stay the old build's,
            # and handing them out as the current build's would test or run stale code
            _error = (
                f"this process already loaded the extension from {_loaded_from}; the current build "
                f"{lib.resolve()} needs a new process: restart it"
            )
            return False
        if not lib.is_file():
            return False
        real = lib.resolve()
        if _error is not None and _error_for == real:
            return False
        _error, _error_for = None, real
        info = paths.read_info(base)
        if info is None:
            _error = f"{paths.current_info(base)} is missing or unreadable: {_REBUILD}"
            return False
        built = info.get("torch", {})
        running = {"version": torch.__version__, "cuda": torch.version.cuda, "hip": torch.version.hip}
        versions = f"built for {_describe(built)}, you have {_describe(running)}"
        if tuple(built.get(k) for k in running) != tuple(running.values()):
            _error = f"sagebuild's extension was {versions}: rebuild it with `sagebuild compile`"
            return False
        if sha256_file(real) != info.get("sha256"):
            _error = f"{real} does not match the sha256 in its build_info.json: {_REBUILD}"
            return False
        try:
            if not hasattr(torch.ops.sagebuild, "k_mean"):  # else loaded already (a build tree, say)
                torch.ops.load_library(str(real))
            _register_fakes()
        except Exception as e:  # any loader failure is reported through unavailable_reason()
            _error = f"loading {real} failed ({type(e).__name__}: {e}); it was {versions}; {_REBUILD}"
            return False
        _loaded_from = real
        return True


def _register_fakes() -> None:
    """Shape-only implementations so the ops trace under ``torch.compile`` (FakeTensor). Called once:
    ``_try_load`` returns before it once a library is loaded."""
    import torch

    register = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract

    @register("sagebuild::k_mean")
    def _k_mean(k: torch.Tensor) -> torch.Tensor:
        return k.new_empty((k.shape[0], k.shape[1], 1, k.shape[3]), dtype=torch.float32)

    @register("sagebuild::quant_per_block_int8")
    def _quant_int8(
        x: torch.Tensor, km: Optional[torch.Tensor], blk: int, scale_mul: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        nblk = (x.shape[2] + blk - 1) // blk
        return (
            x.new_empty(tuple(x.shape), dtype=torch.int8),
            x.new_empty((x.shape[0], x.shape[1], nblk), dtype=torch.float32),
        )

    @register("sagebuild::quant_v_fp8_per_channel")
    def _quant_v(v: torch.Tensor, fnuz: bool) -> tuple[torch.Tensor, torch.Tensor]:
        dt = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
        # channel-major codes: physical [B, H, D, N] behind the logical [B, H, N, D] view
        codes = v.new_empty((v.shape[0], v.shape[1], v.shape[3], v.shape[2]), dtype=dt).transpose(-1, -2)
        return codes, v.new_empty((v.shape[0], v.shape[1], v.shape[3]), dtype=torch.float32)


_DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA"}


def unavailable_reason(device: Any) -> Optional[str]:
    """Why ``get_quant_ops(device)`` is None, in one sentence; None when the ops are available."""
    import torch

    dev = torch.device(device)
    key = _DISPATCH_KEYS.get(dev.type)
    if key is None:
        return f"the extension has no kernels for {dev.type} devices"
    if not _try_load():
        missing = paths.current_lib(paths.running_ext_dir())
        return _error or f"the extension is not built ({missing} is missing): run `sagebuild compile`"
    if not torch._C._dispatch_has_kernel_for_dispatch_key("sagebuild::k_mean", key):
        return (
            f"the extension was built without {dev.type} kernels (a CPU-only build): "
            "rebuild with `sagebuild compile --profile <your GPU profile>`"
        )
    if key == "CUDA":
        from sagebuild import archs

        built = (build_info() or {}).get("archs", [])
        name = archs.of_device_properties(torch.cuda.get_device_properties(dev), bool(torch.version.hip))
        if name and built and name not in built:
            return (
                f"the extension was built for {', '.join(built)} but this GPU is {name}: "
                f"sagebuild compile --arch {name}"
            )
    return None


def get_quant_ops(device: Any) -> Any:
    """The extension's ops for ``device`` (``torch.ops.sagebuild``: k_mean, quant_per_block_int8,
    quant_v_fp8_per_channel); None when not built, broken or not for it."""
    try:
        if unavailable_reason(device) is not None:
            return None
        import torch

        return torch.ops.sagebuild
    except Exception as e:  # never let the optional extension break an attention call
        global _error
        _error = _error or f"{type(e).__name__}: {e}"
        return None
