"""Triton's CPU interpreter at full scale on a few chosen programs, every access bounds-checked
(``test_large_offsets``): the test evidence that a kernel's offsets hold at tensor sizes past 2³¹
elements, without running the millions of programs such a launch has.

* ``only_programs(pick)``: a launch runs just the programs ``pick(kernel name, grid, constexprs)``
  names (None: all of them), while ``tl.program_id``/``tl.num_programs`` read as in the full grid.
* ``bounds_checked()``: every unmasked load and store must lie inside the storage of one of the
  launch's tensor arguments (descriptors' bases included), else AssertionError names the address.
  A 32-bit offset that wrapped points before or far past its tensor and fails here, where the
  compiled kernel would read another allocation or fault.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Optional

import numpy as np
from triton.runtime import interpreter as it

Pick = Callable[[str, tuple, dict], Optional[list]]


def _storages(args: Any) -> Iterator[tuple[int, int]]:
    """(first byte, end) of every tensor storage among a launch's arguments."""
    for a in args:
        if isinstance(a, (tuple, list)):
            yield from _storages(a)
        elif hasattr(a, "base") and hasattr(a, "block_shape"):  # a tensor descriptor
            yield from _storages([a.base])
        elif hasattr(a, "untyped_storage"):
            s = a.untyped_storage()
            yield s.data_ptr(), s.data_ptr() + s.nbytes()


class _Checked:
    """The interpreter's native load/store, refusing addresses outside the launch's tensors."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.ranges: list[tuple[int, int]] = []
        self.accesses = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def _check(self, ptrs: np.ndarray, mask: np.ndarray, size: int, what: str) -> None:
        addr = np.asarray(ptrs, dtype=np.uint64)[np.asarray(mask, dtype=bool)]
        if addr.size == 0:
            return
        self.accesses += int(addr.size)
        ok = np.zeros(addr.shape, dtype=bool)
        for lo, hi in self.ranges:
            ok |= (addr >= np.uint64(lo)) & (addr <= np.uint64(hi - size))
        if not ok.all():
            bad = int(addr[~ok][0])
            spans = ", ".join(f"[{lo:#x}, {hi:#x})" for lo, hi in self.ranges)
            raise AssertionError(f"{what} of {size} B at {bad:#x}: outside the launch's tensors ({spans})")

    def load(self, ptrs: Any, mask: Any, other: Any, dtype: Any) -> Any:
        self._check(ptrs, mask, np.dtype(dtype).itemsize, "load")
        return self.real.load(ptrs, mask, other, dtype)

    def store(self, ptrs: Any, value: Any, mask: Any) -> Any:
        self._check(ptrs, mask, np.asarray(value).dtype.itemsize, "store")
        return self.real.store(ptrs, value, mask)


@contextlib.contextmanager
def bounds_checked() -> Iterator[_Checked]:
    """Check every interpreted load and store against the current launch's tensors."""
    checked = _Checked(it._interpreter)
    real_init = it.GridExecutor._init_args_hst

    def init(self: Any, args_dev: Any, kwargs: Any) -> Any:
        args_hst, kwargs_hst = real_init(self, args_dev, kwargs)
        checked.ranges = list(_storages([*args_hst, *kwargs_hst.values()]))
        return args_hst, kwargs_hst

    it._interpreter, it.GridExecutor._init_args_hst = checked, init
    try:
        yield checked
    finally:
        it._interpreter, it.GridExecutor._init_args_hst = checked.real, real_init


@contextlib.contextmanager
def only_programs(pick: Pick) -> Iterator[list]:
    """Run only the programs ``pick`` names for each launch; yields the (kernel, grid, programs)
    launched so far."""
    real_call = it.GridExecutor.__call__
    builder = it.interpreter_builder
    launched: list = []

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        grid = tuple(self.grid) + (1,) * (3 - len(self.grid))
        programs = pick(self.fn.__name__, grid, kwargs)
        if programs is None:
            launched.append((self.fn.__name__, grid, "all"))
            return real_call(self, *args, **kwargs)
        launched.append((self.fn.__name__, grid, programs))
        full, self.grid = self.grid, (len(programs),)
        builder.set_grid_dim = lambda *_: type(builder).set_grid_dim(builder, *grid)
        builder.set_grid_idx = lambda x, y, z: type(builder).set_grid_idx(builder, *programs[x])
        try:
            return real_call(self, *args, **kwargs)
        finally:
            self.grid = full
            del builder.set_grid_dim, builder.set_grid_idx

    it.GridExecutor.__call__ = call
    try:
        yield launched
    finally:
        it.GridExecutor.__call__ = real_call
