"""An attention call captured once in a CUDA graph and replayed for inputs of one fixed signature.

Replaying a graph costs one host launch, where small shapes are otherwise host-bound. The price:
shapes, dtypes, strides, device and keywords are frozen at capture, inputs are copied into the
graph's buffers (or written there by the caller: ``.q``, ``.k``, ``.v``), and the output is the
graph's buffer, overwritten by the next replay (``.clone()`` it to keep it).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from sagebuild.attention.validate import AttentionInputError


def _signature(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device)


def capture(fn: Callable[[], Any], device: torch.device, warmup: int = 2) -> tuple[torch.cuda.CUDAGraph, Any]:
    """(graph, fn's result) for fn captured on ``device`` (made current: kernels launch on the
    current device) after ``warmup`` calls (at least one) on a side stream, as capture requires."""
    with torch.cuda.device(device):
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(max(warmup, 1)):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
    return graph, out


class GraphedAttention:
    """``fn(q, k, v, **kwargs)`` for one input signature, replayed from a CUDA graph."""

    def __init__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        fn: Optional[Callable[..., Any]] = None,
        warmup: int = 2,
        **kwargs: Any,
    ) -> None:
        from sagebuild.attention.functions import sageattn

        self.fn = fn or sageattn
        self.kwargs = kwargs
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, torch.Tensor) or not t.is_cuda:
                raise AttentionInputError(
                    f"{name} must be a CUDA/ROCm tensor to capture a graph, got "
                    f"{t.device if isinstance(t, torch.Tensor) else type(t).__name__}",
                    "move q, k and v to the GPU, or call sageattn directly",
                )
        # The eager call validates (clear errors for bad input), compiles and fills the plan
        # cache, so nothing is compiled or checked on the host during capture.
        self.fn(q, k, v, **kwargs)
        self.q, self.k, self.v = (torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                                  for t in (q, k, v))  # fmt: skip
        self._sig = tuple(_signature(t) for t in (q, k, v))
        self._copy_in(q, k, v)
        # on the inputs' GPU: the kernels launch there (``api._on_input_device``)
        self.graph, self.out = capture(lambda: self.fn(self.q, self.k, self.v, **kwargs), q.device, warmup)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        """Copy the inputs in (skipped for the graph's own buffers), replay, return the output buffer."""
        for name, t, want in zip(("q", "k", "v"), (q, k, v), self._sig):
            if not isinstance(t, torch.Tensor) or _signature(t) != want:
                got = _signature(t) if isinstance(t, torch.Tensor) else type(t).__name__
                raise AttentionInputError(
                    f"{name} does not match the captured signature: captured (shape, strides, dtype, "
                    f"device) {want}, got {got}",
                    "capture another GraphedAttention for this shape, or call sageattn directly",
                )
        self._copy_in(q, k, v)
        return self.replay()

    def _copy_in(self, *inputs: torch.Tensor) -> None:
        for mine, t in zip((self.q, self.k, self.v), inputs):
            if t.data_ptr() != mine.data_ptr():
                mine.copy_(t)

    def replay(self) -> Any:
        """Replay on whatever the caller wrote into ``.q``, ``.k``, ``.v`` (no copies at all)."""
        self.graph.replay()
        return self.out


__all__ = ["GraphedAttention", "capture"]
