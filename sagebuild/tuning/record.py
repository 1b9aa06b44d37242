"""The tuning record: which path won each shape class on this machine, replayed by every call.

As PyTorch's TunableOp does for GEMMs, ``sagebuild tune`` measures candidates on the user's GPU
and keeps the winners in a file keyed by what makes them valid (``Fingerprint``: the GPU, its
arch, the driver and runtime, torch, Triton, sagebuild and the config table's version). A record
whose fingerprint differs from this machine's is ignored, with a one-line note (``notes``).

A record holds ``TunedClass`` entries: a measured shape (``ShapeClass``), the winner (``Choice``:
one of our launch configs and P·V variants, or ``"sdpa"``), its time, SDPA's time and the
runner-up. A call matches classes by the config table's own rules (``match``): the head-dim
passes of ``configs._head_dim_keys`` (a split head dim first by its split width, then by its
padded width), then causal and masked alike, then the key-count bucket (between two measured key
counts the boundary is their geometric mean), then the nearest measured size (query rows B·H·N_q
on a log scale, then the nearest head dim); this machine's classes and the shipped ones of its
family are matched as one set, a tuned class replacing a shipped one measured at the same shape,
so a record that measured a few shapes leaves the shipped classes in force elsewhere. Records
are loaded once per process; ``lookup``
looks again at the file on every new call signature (a plan-cache miss, never a cached call) and
re-reads it when it changed; ``reload`` does so at once (the tuner calls it after writing).
Every reload runs the callbacks registered by ``on_reload`` (the attention runtime drops its
cached plans). Files: ``<cache dir>/tuning/<arch>.json`` (``record_path``; the cache dir is
``build.paths.cache_root``: ``SAGEBUILD_CACHE_DIR``, else ``~/.cache/sagebuild``).

The tuner's side::

    fp = Fingerprint.current(0)                       # this GPU (torch imported here)
    rec = TuningRecord(fp, [TunedClass(ShapeClass(64, 1024, 1024, 16, False),
                                       Choice("sdpa", ms=0.018), sdpa_ms=0.018,
                                       runner_up=Choice("ours", "fp16", "64,64,4,3", 0.024))])
    save(rec)                                         # atomically, to record_path(fp.arch)
    reload()                                          # this process replays it from now on

The runtime's side: ``lookup(arch, ShapeClass(...))`` -> the matching ``TunedClass`` (among this
machine's record and the shipped data of ``tuning.defaults``), or None; ``find`` also says which.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import sys
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Union

from sagebuild import knobs
from sagebuild.errors import SagebuildError
from sagebuild.kernels.triton import configs

RECORD_KIND = "sagebuild-tuning"
RECORD_VERSION = 1
PATHS = ("ours", "sdpa")  # a Choice's path: one of our configs and variants, or PyTorch SDPA
VARIANT_KEYS = ("fp16", "fp8", "fp8acc")  # the config table's variants (``configs.variant_key``)

log = logging.getLogger("sagebuild.tuning")


class TuningRecordError(SagebuildError):
    """A tuning record file that cannot be read or is not one (a clear one-line error)."""


@dataclass(frozen=True)
class Fingerprint:
    """What a record's winners hold for: a record is replayed only where every field is equal."""

    gpu: str  # the device's name, "NVIDIA H100 80GB HBM3"
    arch: str  # canonical, "sm90" / "gfx1201"
    driver: str  # the kernel driver, "nvidia 580.159.04" ("" when unknown)
    runtime: str  # "cuda 13.0" / "hip 6.4.43482"
    torch: str
    triton: str
    sagebuild: str
    table: str  # configs.CONFIG_TABLE_VERSION

    @classmethod
    def current(cls, device: Union[int, str, Any, None] = None) -> Fingerprint:
        """This machine's fingerprint for a GPU (index, "cuda:1" or torch.device; None: the
        current one). Imports torch; a clear error when there is no GPU."""
        import torch

        from sagebuild import archs
        from sagebuild._version import __version__
        from sagebuild.probe.system import Root, driver_version

        if not torch.cuda.is_available():
            raise TuningRecordError(
                "no CUDA or ROCm GPU is visible to torch, so there is nothing to fingerprint",
                "run on the machine whose GPU the record is for",
            )
        dev = torch.device("cuda", device) if isinstance(device, int) else torch.device(device or "cuda")
        index = dev.index if dev.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        hip = torch.version.hip
        try:
            import triton

            triton_version = triton.__version__
        except ImportError:
            triton_version = ""
        return cls(
            gpu=str(props.name),
            arch=archs.of_device_properties(props, bool(hip)),
            driver=driver_version(Root()) or "",
            runtime=f"hip {hip}" if hip else f"cuda {torch.version.cuda}",
            torch=str(torch.__version__),
            triton=triton_version,
            sagebuild=__version__,
            table=configs.CONFIG_TABLE_VERSION,
        )

    def differences(self, other: Fingerprint) -> list[str]:
        """What differs, as "torch 2.11.0 -> 2.12.0" (self's value first); empty when equal."""
        return [
            f"{f.name} {getattr(self, f.name) or '?'} -> {getattr(other, f.name) or '?'}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(other, f.name)
        ]


@dataclass(frozen=True)
class Choice:
    """A path that ran a class: ``"ours"`` (``variant``: the config table's "fp16" / "fp8" /
    "fp8acc"; ``config``: ``LaunchConfig.spec()``; either None: the shipped table's choice) or
    ``"sdpa"``; ``ms``: its measured time (None in shipped data that cites no time)."""

    path: str
    variant: Optional[str] = None
    config: Optional[str] = None
    ms: Optional[float] = None

    @property
    def sdpa(self) -> bool:
        return self.path == "sdpa"

    def describe(self) -> str:
        """ "sdpa", "ours fp8acc 64,128,4,2,168,tma,pipe" or "ours (table)"."""
        if self.sdpa:
            return "sdpa"
        parts = [p for p in (self.variant, self.config) if p]
        return "ours " + " ".join(parts) if parts else "ours (table)"


@dataclass(frozen=True)
class ShapeClass:
    """A call's shape as the record matches it: the head dim (the call's own, unpadded), query and
    key tokens per sequence, batch × query heads, causal, and whether an ``attn_mask`` is passed."""

    head_dim: int
    n_q: int
    n_k: int
    batch_heads: int
    causal: bool
    masked: bool = False

    @property
    def head_dim_key(self) -> Optional[int]:
        """The config table's head-dim key of a class: the split width for a split head dim,
        else the padded head dim (None: too large for the kernels)."""
        dp = configs.padded_head_dim(self.head_dim)
        if dp is None:
            return None
        return configs.split_width(dp) if configs.split_head_dim(self.head_dim, dp) else dp

    @property
    def rows(self) -> int:
        return max(1, self.batch_heads * self.n_q)

    def passes(self) -> list[tuple[Union[int, str], ...]]:
        """The head-dim keys a call is matched by, pass after pass (the table's rule)."""
        dp = configs.padded_head_dim(self.head_dim)
        if dp is None:
            return []
        return configs._head_dim_keys(dp, configs.split_head_dim(self.head_dim, dp))

    def label(self) -> str:
        """bench's shape-key style: ``2x10x4096:77x64`` (``c``: causal, ``m``: masked)."""
        keys = f":{self.n_k}" if self.n_k != self.n_q else ""
        flags = ("c" if self.causal else "") + ("m" if self.masked else "")
        return f"{self.batch_heads}x{self.n_q}{keys}x{self.head_dim}{flags}"


@dataclass(frozen=True)
class Failure:
    """A candidate the tuner dropped: never chosen (compile error, spill, fault, timeout, accuracy)."""

    variant: str
    config: str
    reason: str


@dataclass(frozen=True)
class TunedClass:
    """One shape class's outcome. ``source``: where shipped data was measured (cited)."""

    shape: ShapeClass
    winner: Choice
    sdpa_ms: Optional[float] = None
    runner_up: Optional[Choice] = None
    failed: tuple[Failure, ...] = ()
    source: str = ""

    @property
    def speedup(self) -> Optional[float]:
        """SDPA's time over the winner's (above 1: the winner is faster)."""
        if self.sdpa_ms and self.winner.ms:
            return self.sdpa_ms / self.winner.ms
        return None


def _key_bounds(keys: list[int]) -> list[float]:
    """Bucket boundaries between sorted distinct key counts: their geometric means."""
    return [math.sqrt(a * b) for a, b in zip(keys, keys[1:])]


class _Group:
    """The classes of one (head-dim key, causal, masked), bucketed by key count."""

    def __init__(self, classes: list[TunedClass]) -> None:
        by_keys: dict[int, list[TunedClass]] = {}
        for c in classes:
            by_keys.setdefault(c.shape.n_k, []).append(c)
        self.keys = sorted(by_keys)
        self.bounds = _key_bounds(self.keys)
        self.by_keys = by_keys

    def match(self, shape: ShapeClass) -> TunedClass:
        bucket = self.keys[bisect.bisect_left(self.bounds, shape.n_k)]  # a boundary: the lower bucket
        rows = math.log(shape.rows)

        def distance(c: TunedClass) -> tuple:
            return (abs(rows - math.log(c.shape.rows)), abs(shape.head_dim - c.shape.head_dim), c.shape.rows)

        return min(self.by_keys[bucket], key=distance)


class _Index:
    """Classes grouped for ``match``: built once per record."""

    def __init__(self, classes: Iterable[TunedClass]) -> None:
        groups: dict[tuple, list[TunedClass]] = {}
        for c in classes:
            hk = c.shape.head_dim_key
            if hk is not None:
                groups.setdefault((hk, c.shape.causal, c.shape.masked), []).append(c)
        self.groups = {k: _Group(v) for k, v in groups.items()}

    def match_pass(self, shape: ShapeClass, keys: tuple[Union[int, str], ...]) -> Optional[TunedClass]:
        for hk in keys:
            group = self.groups.get((hk, shape.causal, shape.masked))
            if group is not None:
                return group.match(shape)
        return None


@dataclass
class TuningRecord:
    """This machine's winners (``fingerprint``), one ``TunedClass`` per measured shape."""

    fingerprint: Fingerprint
    classes: list[TunedClass] = field(default_factory=list)
    created: str = ""
    _index: Optional[_Index] = field(default=None, init=False, repr=False, compare=False)

    def match(self, shape: ShapeClass) -> Optional[TunedClass]:
        """The class a call matches (module docstring's rules), or None: no class of its
        head-dim keys, causality and masking."""
        for keys in shape.passes():
            found = self.match_pass(shape, keys)
            if found is not None:
                return found
        return None

    def match_pass(self, shape: ShapeClass, keys: tuple[Union[int, str], ...]) -> Optional[TunedClass]:
        """``match`` within one head-dim pass (``lookup`` interleaves records pass by pass)."""
        if self._index is None:
            self._index = _Index(self.classes)
        return self._index.match_pass(shape, keys)

    def put(self, tuned: TunedClass) -> None:
        """Add a class, replacing one measured at the same shape."""
        self.classes = [c for c in self.classes if c.shape != tuned.shape] + [tuned]
        self._index = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": RECORD_KIND,
            "version": RECORD_VERSION,
            "created": self.created,
            "fingerprint": asdict(self.fingerprint),
            "classes": [_class_dict(c) for c in self.classes],
        }

    @classmethod
    def from_dict(cls, doc: Any, where: str = "tuning record") -> TuningRecord:
        """Parse a record (``to_dict``'s form); ``TuningRecordError`` naming what is wrong."""
        if not isinstance(doc, dict) or doc.get("kind") != RECORD_KIND:
            raise _bad(where, f'not a sagebuild tuning record (no "kind": "{RECORD_KIND}")')
        if doc.get("version") != RECORD_VERSION:
            raise _bad(where, f"record version {doc.get('version')!r}; this sagebuild reads {RECORD_VERSION}")
        try:
            fp = Fingerprint(**{f.name: str(doc["fingerprint"][f.name]) for f in fields(Fingerprint)})
            classes = [_class_from(c) for c in doc["classes"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(where, f"malformed entry ({type(exc).__name__}: {exc})") from None
        return cls(fp, classes, str(doc.get("created", "")))


def _bad(where: str, why: str) -> TuningRecordError:
    return TuningRecordError(f"{where}: {why}", "run `sagebuild tune` again, or delete the file")


def _class_dict(c: TunedClass) -> dict[str, Any]:
    out: dict[str, Any] = {**asdict(c.shape), "winner": _choice_dict(c.winner), "sdpa_ms": c.sdpa_ms}
    out["runner_up"] = _choice_dict(c.runner_up) if c.runner_up else None
    out["failed"] = [asdict(f) for f in c.failed]
    if c.source:
        out["source"] = c.source
    return out


def _choice_dict(c: Choice) -> dict[str, Any]:
    return {k: v for k, v in asdict(c).items() if v is not None}


def _choice_from(d: Any) -> Choice:
    choice = Choice(
        path=str(d["path"]),
        variant=None if d.get("variant") is None else str(d["variant"]),
        config=None if d.get("config") is None else str(d["config"]),
        ms=None if d.get("ms") is None else float(d["ms"]),
    )
    if choice.path not in PATHS:
        raise ValueError(f"path {choice.path!r} is not one of {list(PATHS)}")
    if choice.variant is not None and choice.variant not in VARIANT_KEYS:
        raise ValueError(f"variant {choice.variant!r} is not one of {list(VARIANT_KEYS)}")
    if choice.config is not None:
        configs.parse_config(choice.config)  # ValueError naming what is wrong
    return choice


def _class_from(d: Any) -> TunedClass:
    shape = ShapeClass(
        head_dim=int(d["head_dim"]),
        n_q=int(d["n_q"]),
        n_k=int(d["n_k"]),
        batch_heads=int(d["batch_heads"]),
        causal=bool(d["causal"]),
        masked=bool(d.get("masked", False)),
    )
    if min(shape.head_dim, shape.n_q, shape.n_k, shape.batch_heads) < 1:
        raise ValueError(f"shape {shape.label()} has a zero or negative size")
    return TunedClass(
        shape=shape,
        winner=_choice_from(d["winner"]),
        sdpa_ms=None if d.get("sdpa_ms") is None else float(d["sdpa_ms"]),
        runner_up=_choice_from(d["runner_up"]) if d.get("runner_up") else None,
        failed=tuple(
            Failure(str(f["variant"]), str(f["config"]), str(f["reason"])) for f in d.get("failed", ())
        ),
        source=str(d.get("source", "")),
    )


def record_dir() -> Path:
    """``<cache dir>/tuning``."""
    from sagebuild.build.paths import cache_root

    return cache_root() / "tuning"


def record_path(arch: str) -> Path:
    """Where this machine's record for an arch lives (one file per arch: a box with two kinds of
    GPU keeps two records)."""
    return record_dir() / f"{arch}.json"


def read(path: Union[Path, str]) -> TuningRecord:
    """A record file, parsed; ``TuningRecordError`` (one line) when it is unreadable or malformed."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise TuningRecordError(
            f"cannot read tuning record {path}: {exc.strerror or exc}", "run `sagebuild tune`"
        ) from None
    except ValueError as exc:
        raise _bad(str(path), f"not JSON ({exc})") from None
    return TuningRecord.from_dict(doc, str(path))


def save(record: TuningRecord, path: Union[Path, str, None] = None) -> Path:
    """Write a record atomically (``fsio``: a reader never sees half a file); default path:
    ``record_path(record.fingerprint.arch)``. Returns the path. Call ``reload`` to replay it here."""
    from sagebuild import fsio

    if not record.created:
        import datetime

        record.created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    target = Path(path) if path is not None else record_path(record.fingerprint.arch)
    return fsio.write_text_atomic(target, json.dumps(record.to_dict(), indent=1) + "\n")


# ---- the runtime: records loaded once per process, invalidated when their file changes ----

_lock = threading.RLock()
_loaded: dict[str, tuple[Any, Optional[TuningRecord]]] = {}  # arch -> (file stat signature, record)
_injected: dict[str, Optional[TuningRecord]] = {}  # arch -> record installed in-process (``install``)
_fingerprints: dict[str, Optional[Fingerprint]] = {}  # arch -> this machine's (None: no such GPU)
_notes: dict[str, str] = {}  # arch -> the one-line note about an ignored record
_callbacks: list[Callable[[], None]] = []


def on_reload(callback: Callable[[], None]) -> None:
    """Run ``callback`` whenever records are re-read (the attention runtime drops cached plans)."""
    with _lock:
        if callback not in _callbacks:
            _callbacks.append(callback)


def reload() -> None:
    """Forget loaded records (and the fingerprints), so the next lookup reads the files again,
    and run the ``on_reload`` callbacks. The tuner calls it after ``save``."""
    with _lock:
        _loaded.clear()
        _merged.clear()
        _fingerprints.clear()
        _notes.clear()
        callbacks = list(_callbacks)
    for cb in callbacks:
        cb()


def install(arch: str, record: Optional[TuningRecord]) -> None:
    """Use ``record`` for ``arch`` in this process instead of the file, fingerprint unchecked
    (tests, the interpreter, and a tuner trying a record before saving it); None: no tuned
    record for the arch. ``uninstall`` goes back to the file."""
    with _lock:
        _injected[arch] = record
    reload()


def uninstall(arch: Optional[str] = None) -> None:
    """Undo ``install`` for one arch, or for every arch (None)."""
    with _lock:
        if arch is None:
            _injected.clear()
        else:
            _injected.pop(arch, None)
    reload()


def notes() -> dict[str, str]:
    """arch -> the note given about its ignored record (fingerprint mismatch, unreadable file)."""
    with _lock:
        return dict(_notes)


def _note(arch: str, text: str) -> None:
    with _lock:
        first = _notes.get(arch) != text
        _notes[arch] = text
    if first:
        log.warning("%s", text)


def _machine_fingerprint(arch: str) -> Optional[Fingerprint]:
    """This machine's fingerprint for its first GPU of ``arch``, or None (no such GPU, or torch
    not imported yet: the plan stays torch-free for reports and ahead-of-time compiles)."""
    if arch in _fingerprints:
        return _fingerprints[arch]
    torch = sys.modules.get("torch")
    if torch is None:  # not cached: a process that imports torch later asks again
        return None
    found = None
    if arch != "interpreter":
        try:
            from sagebuild import archs

            hip = bool(torch.version.hip)
            for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
                if archs.of_device_properties(torch.cuda.get_device_properties(i), hip) == arch:
                    found = Fingerprint.current(i)
                    break
        except Exception:  # a broken driver must not break attention calls: no tuned record
            found = None
    _fingerprints[arch] = found
    return found


def _stat(path: Path) -> Any:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def tuned(arch: str) -> Optional[TuningRecord]:
    """The tuned record in force for ``arch``: installed, or the file's when its fingerprint is
    this machine's (otherwise None, with a one-line note) and ``SAGEBUILD_TUNING`` is not 0.
    Re-read when the file changed."""
    with _lock:
        if arch in _injected:
            return _injected[arch]
        if knobs.switch("SAGEBUILD_TUNING") is False:
            return None
        path = record_path(arch)
        sig = _stat(path)
        cached = _loaded.get(arch)
        if cached is not None and cached[0] == sig:
            return cached[1]
        stale = cached is not None
        rec = _load_checked(arch, path) if sig is not None else None
        if sig is None or "torch" in sys.modules:  # without torch the fingerprint was not asked
            _loaded[arch] = (sig, rec)
    if stale:  # the file changed under a running process: cached plans may follow the old one
        for cb in list(_callbacks):
            cb()
    return rec


def _load_checked(arch: str, path: Path) -> Optional[TuningRecord]:
    try:
        rec = read(path)
    except TuningRecordError as exc:
        _note(arch, f"sagebuild: ignoring the tuning record {path}: {exc.message}; run `sagebuild tune`")
        return None
    here = _machine_fingerprint(arch)
    if here is None:
        return None  # no GPU of this arch to replay it on (or torch not loaded): nothing to say
    diff = rec.fingerprint.differences(here)
    if diff:
        _note(
            arch,
            f"sagebuild: ignoring the tuning record {path}: tuned under another setup ({'; '.join(diff)}); "
            "run `sagebuild tune` to tune this one",
        )
        return None
    return rec


_merged: dict[
    str, tuple[Any, Any, TuningRecord, frozenset[int]]
] = {}  # arch -> (tuned, shipped, both, tuned ids)


def _classes_for(arch: str) -> Optional[tuple[TuningRecord, frozenset[int]]]:
    """This machine's tuned classes and the shipped ones of the arch's family as one set (a shipped
    class measured at a shape the tuned record also measured gives way to it), and which of them
    are tuned (by id); built once per pair of records."""
    from sagebuild.tuning import defaults

    mine, shipped = tuned(arch), defaults.record_for(arch)
    if mine is None and shipped is None:
        return None
    with _lock:
        cached = _merged.get(arch)
        if cached is not None and cached[0] is mine and cached[1] is shipped:
            return cached[2], cached[3]
    own = list(mine.classes) if mine else []
    shapes = {c.shape for c in own}
    rest = [c for c in (shipped.classes if shipped else []) if c.shape not in shapes]
    both = TuningRecord((mine or shipped).fingerprint, own + rest)  # type: ignore[union-attr]
    tuned_ids = frozenset(id(c) for c in own)  # held by ``both`` while the entry lives
    with _lock:
        _merged[arch] = (mine, shipped, both, tuned_ids)
    return both, tuned_ids


def find(arch: str, shape: ShapeClass) -> Optional[tuple[str, TunedClass]]:
    """``lookup`` with where the class came from: ("tuned", class) from this machine's record,
    ("shipped", class) from ``tuning.defaults``."""
    both = _classes_for(arch)
    if both is None:
        return None
    found = both[0].match(shape)
    if found is None:
        return None
    return ("tuned" if id(found) in both[1] else "shipped"), found


def lookup(arch: str, shape: ShapeClass) -> Optional[TunedClass]:
    """The class a call on ``arch`` matches among this machine's tuned classes and the shipped ones
    of its family (``tuning.defaults``) together, by the table's rules (module docstring): the
    nearest measured class wins, a tuned one replacing a shipped one measured at the same shape;
    None when no class has the call's head-dim keys, causality and masking."""
    found = find(arch, shape)
    return found[1] if found else None
