"""Re-issuing a repeated attention call's launches without re-running its Python.

A call whose plan is cached runs once under a ``Recorder``: every Triton launch
(``launcher.launch``) and every tensor it touches is classified as an input (q, k, v, a mask) or
a buffer the call allocated. Later calls with the same plan key and input aliasing allocate the
same buffers and issue the same launches, nothing else; on a GPU tensors go as device pointers
and the buffers only launches use share one allocation.

Replayable only if the call did nothing on tensors but allocate and take views (a
``TorchDispatchMode`` watches): a replay would skip any other op. Decisions in the recorded path
must depend only on what the plan key fixes, never on tensor values; module-level knobs changed
at run time need ``api.clear_caches()``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from triton.tools.tensor_descriptor import TensorDescriptor

from sagebuild.kernels.triton import launcher

_ALLOCATIONS = frozenset({"empty", "empty_strided"})


class _Watch(TorchDispatchMode):
    """Notes every aten op that is neither an allocation nor a view."""

    def __init__(self) -> None:
        super().__init__()
        self.foreign: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if not (func.is_view or func.overloadpacket.__name__ in _ALLOCATIONS):
            self.foreign.append(str(func))
        return func(*args, **(kwargs or {}))


class Replay:
    """A recorded call: buffers to allocate, launches to issue, outputs to return. Tensors are
    indexed in one list per call: the inputs, then the buffers' views (``n_inputs + view id``)."""

    def __init__(
        self, device: torch.device, groups: list, launches: list, outputs: Any, views: int, n_inputs: int
    ) -> None:
        self.device = device
        self.index = device.index if device.type == "cuda" else None  # for the current stream
        # [((view id, spec) allocated as is, [(view id, spec) taken from it ...])]; a negative id:
        # a flat allocation no argument uses whole
        self.groups = groups
        # (fn, grid, args as a list with None for tensors and tensor descriptors, [(position,
        # tensor index)] for tensors, [(position, tensor index, (shape, strides, block shape,
        # padding))] for descriptors (rebuilt on the new buffer), constexprs, key, options, the
        # launch bound to its compiled kernel or None: ``launcher.bind``)
        self.launches = launches
        self.outputs = outputs  # tensor index, or a tuple of them
        self.blank = [None] * views
        self.n_inputs = n_inputs
        self.packed, self.kept, self.packed_bytes = _pack(groups, launches, outputs, n_inputs)
        self.all_bound = all(launch[-1] is not None for launch in launches)
        # per launch, per descriptor: the first descriptor of that launch with the same buffer and
        # spec (an unsplit head dim passes K's and V's descriptors twice), built once per call
        self.desc_firsts = [_first_equal(launch[4]) for launch in launches]

    def __call__(self, *inputs: torch.Tensor) -> Any:
        vals: list[Any] = [*inputs, *self.blank]
        n = self.n_inputs
        direct = self.index is not None and not launcher.hooks_installed()
        groups, packed = self.groups, None
        if direct and self.packed and self.all_bound:
            # every launch takes pointers: the buffers only launches use share one allocation,
            # held until the launches are issued (then freed in stream order, as the others)
            packed = torch.empty(self.packed_bytes, dtype=torch.uint8, device=self.device)
            start = packed.data_ptr()
            for vid, offset in self.packed:
                vals[n + vid] = start + offset
            groups = self.kept
        for (pid, (dtype, size, stride, _)), others in groups:
            base = torch.empty_strided(size, stride, dtype=dtype, device=self.device)
            if pid >= 0:
                vals[n + pid] = base
            for vid, (_, vsize, vstride, voff) in others:
                vals[n + vid] = base.as_strided(vsize, vstride, voff)
        stream = launcher.raw_stream(self.index) if direct else 0
        for (fn, grid, template, slots, descs, constexprs, key, options, bound), firsts in zip(
            self.launches, self.desc_firsts
        ):
            args = template.copy()
            made: list = []
            for (pos, i, spec), first in zip(descs, firsts):
                made.append(made[first] if first < len(made) else _descriptor(vals[i], *spec))
                args[pos] = made[-1]
            if direct and bound is not None:
                # device pointers as ints: Triton's launcher takes them as they are, where for a
                # tensor it calls data_ptr() and asks the driver (cuPointerGetAttribute) per pointer
                for pos, i in slots:
                    x = vals[i]
                    args[pos] = x if x.__class__ is int else x.data_ptr()
                launcher.run_bound(bound, args, stream)
                continue
            for pos, i in slots:
                args[pos] = vals[i]
            launcher.launch(fn, grid, tuple(args), constexprs, key=key, **options)
        del packed
        if isinstance(self.outputs, tuple):
            return tuple(vals[i] for i in self.outputs)
        return vals[self.outputs]


class Recorder:
    """Records one call (``with Recorder() as rec: ...``), then ``rec.build`` makes its Replay or
    returns None when the call is not replayable."""

    def __enter__(self) -> Recorder:
        self.launches: list = []
        self._watch = _Watch()
        launcher.start_recording(self.launches)
        self._watch.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._watch.__exit__(*exc)
        launcher.stop_recording()

    def build(self, inputs: tuple, result: Any) -> Optional[Replay]:
        if self._watch.foreign or not self.launches:
            return None
        views = _Views()
        dev = inputs[0].device
        index = _indexer(inputs, views)
        launches = [_recorded(launch, index, dev) for launch in self.launches]
        outs = result if isinstance(result, tuple) else (result,)
        if not all(isinstance(t, torch.Tensor) for t in outs):
            return None
        input_storages = {t.untyped_storage().data_ptr() for t in inputs}
        if any(t.untyped_storage().data_ptr() in input_storages for t in outs):
            return None
        out_ids = tuple(len(inputs) + views.id(t) for t in outs)
        plan = _allocations(list(views.groups.values()), input_storages)
        if plan is None:
            return None
        outputs = out_ids if isinstance(result, tuple) else out_ids[0]
        return Replay(dev, plan, launches, outputs, len(views.spec_ids), len(inputs))


class _Views:
    """The tensors a call's launches take that are not its inputs, grouped by storage: each distinct
    view (dtype, shape, strides, offset: what recreates it) numbered once."""

    def __init__(self) -> None:
        self.groups: dict[int, list] = {}  # storage pointer -> [(view id, spec, tensor)]
        self.spec_ids: dict[tuple, int] = {}

    def id(self, t: torch.Tensor) -> int:
        spec = (t.dtype, tuple(t.shape), t.stride(), t.storage_offset())  # recreates the view
        storage = t.untyped_storage().data_ptr()
        vid = self.spec_ids.get((storage, spec))
        if vid is None:
            vid = self.spec_ids[(storage, spec)] = len(self.spec_ids)
            self.groups.setdefault(storage, []).append((vid, spec, t))
        return vid


def _indexer(inputs: tuple, views: _Views) -> Callable[[torch.Tensor], int]:
    """A launch argument's tensor index: an input's position (same pointer and dtype), else
    ``len(inputs)`` + its view id."""
    ptrs = [t.data_ptr() for t in inputs]

    def index(a: torch.Tensor) -> int:
        idx = next((i for i, (p, t) in enumerate(zip(ptrs, inputs)) if a.data_ptr() == p
                    and a.dtype == t.dtype), None)  # fmt: skip
        return idx if idx is not None else len(inputs) + views.id(a)

    return index


def _recorded(launch: tuple, index: Callable[[torch.Tensor], int], dev: torch.device) -> tuple:
    """One recorded launch as a replay issues it: its non-tensor arguments as a template, the
    tensors' and descriptors' positions and indices, and (on a GPU) its bound launcher."""
    _, fn, grid, args, constexprs, key, options = launch
    slots, descs = [], []
    for pos, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            slots.append((pos, index(a)))
        elif isinstance(a, TensorDescriptor):
            spec = (list(a.shape), list(a.strides), list(a.block_shape), a.padding)
            descs.append((pos, index(a.base), spec))
    template = [None if isinstance(a, (torch.Tensor, TensorDescriptor)) else a for a in args]
    bound = None if dev.type != "cuda" else launcher.bind(fn, grid, constexprs, key, options, dev.index)
    return (fn, grid, template, tuple(slots), tuple(descs), constexprs, key, options, bound)


def _allocations(groups: list, input_storages: set) -> Optional[list]:
    """How a replay allocates the call's own buffers: per storage, the view that recreates it (or
    the whole allocation, flat) and the other views into it; None when the call is not replayable
    (a buffer it did not allocate, or one storage viewed as two dtypes)."""
    plan: list = []
    for members in groups:
        if any(t.untyped_storage().data_ptr() in input_storages for _, _, t in members):
            return None  # a buffer the call did not allocate (it would be replaced)
        dtype = members[0][1][0]
        if any(spec[0] != dtype for _, spec, _ in members):
            return None
        nbytes = members[0][2].untyped_storage().nbytes()
        primary = next((m for m in members if _spans(m[2], nbytes)), None)
        if primary is None:  # only parts of the allocation are used: allocate it flat
            flat = (dtype, (nbytes // members[0][2].element_size(),), (1,), 0)
            plan.append(((-1 - len(plan), flat), [(vid, spec) for vid, spec, _ in members]))
        else:
            rest = [(vid, spec) for vid, spec, _ in members if vid != primary[0]]
            plan.append(((primary[0], primary[1]), rest))
    return plan


def _first_equal(descs: tuple) -> list[int]:
    """For each recorded descriptor (position, tensor index, spec), the index of the first one
    over the same tensor with the same spec."""
    keys = [(i, spec) for _, i, spec in descs]
    return [keys.index(k) for k in keys]


def _descriptor(
    base: torch.Tensor, shape: list, strides: list, block: list, padding: str
) -> TensorDescriptor:
    """``TensorDescriptor(base, shape, strides, block, padding)`` without its checks (~1 µs of
    Python each): the recorded descriptor passed them with this spec, and the base is this call's
    fresh buffer, aligned as the recorded one was."""
    d = TensorDescriptor.__new__(TensorDescriptor)
    d.base, d.shape, d.strides, d.block_shape, d.padding = base, shape, strides, block, padding
    return d


# packed buffers start this many bytes apart at least (the caching allocator's own alignment:
# 16-byte vector loads and TMA's 16-byte base rule hold with room to spare)
PACK_ALIGN = 512


def _pack(groups: list, launches: list, outputs: Any, n_inputs: int) -> tuple[list, list, int]:
    """The buffers that launches only take by pointer (not returned, not a descriptor's base),
    laid out in one allocation: ([(view id, byte offset)], the other groups, bytes in all)."""
    whole = {i - n_inputs for i in (outputs if isinstance(outputs, tuple) else (outputs,))}
    whole |= {i - n_inputs for launch in launches for _, i, _ in launch[4]}  # descriptors' bases
    packed, kept, end = [], [], 0
    for group in groups:
        (pid, (dtype, size, stride, _)), others = group
        if {pid, *(vid for vid, _ in others)} & whole:
            kept.append(group)
            continue
        item = dtype.itemsize
        if pid >= 0:
            packed.append((pid, end))
        packed.extend((vid, end + voff * item) for vid, (_, _, _, voff) in others)
        end += launcher.cdiv(_span(size, stride) * item, PACK_ALIGN) * PACK_ALIGN
    return packed, kept, end


def _spans(t: torch.Tensor, nbytes: int) -> bool:
    """Whether allocating t's shape and strides recreates its whole storage (offset 0, same size)."""
    return t.storage_offset() == 0 and _span(t.shape, t.stride()) * t.element_size() == nbytes


def _span(size: Any, stride: Any) -> int:
    """Elements from a view's first to its last one, inclusive (its allocation at offset 0)."""
    return 1 + sum((n - 1) * st for n, st in zip(size, stride) if n > 0)


__all__ = ["Recorder", "Replay"]
