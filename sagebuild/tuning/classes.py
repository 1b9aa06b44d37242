"""The shape classes ``sagebuild tune`` measures: presets, bench's shape keys, or the calls a
program really made (``SAGEBUILD_RECORD=FILE``: ``sageattn`` appends each new call signature).

A class is one call shape and dtype; the tuned record serves calls near it by the launch-config
table's own rules (key-count buckets, head-dim passes). No torch import.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sagebuild import knobs
from sagebuild.errors import SagebuildError
from sagebuild.profiles import SHAPE_KEY_FORMS, parse_shape_key, shape_key

RECORD_ENV_VAR = "SAGEBUILD_RECORD"
DTYPES = ("float16", "bfloat16")


@dataclass(frozen=True)
class Workload:
    """One call shape to tune: B×H×N×D (K/V heads and keys when they differ), causal, dtype."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool = False
    kv_seq: Optional[int] = None
    kv_heads: Optional[int] = None
    dtype: str = "float16"
    label: str = ""

    @property
    def shape(self) -> str:
        """Bench's shape key: ``2x10x4096:77x64``, ``1x32/8x4096x128c``."""
        return shape_key(
            self.batch, self.heads, self.seq, self.head_dim, self.causal, self.kv_seq, self.kv_heads
        )

    @property
    def key(self) -> str:
        """The class's name in records and reports: shape key and dtype."""
        return f"{self.shape} {self.dtype}"

    @property
    def keys(self) -> int:
        return self.kv_seq or self.seq

    def work(self) -> float:
        """Score pairs × head dim (relative cost of one call, for ordering and budgets)."""
        pairs = self.batch * self.heads * self.seq * self.keys / (2 if self.causal else 1)
        return pairs * self.head_dim

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "dtype": self.dtype, "label": self.label}


def parse_class(text: str, dtype: str = "float16", label: str = "") -> Workload:
    """A class from bench's shape-key syntax; ValueError naming the forms otherwise."""
    b, h, hk, n, nk, d, causal = parse_shape_key(text.strip())
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if hk and h % hk:
        raise ValueError(f"shape {text!r}: {hk} K/V heads do not divide {h} query heads")
    if causal and nk and nk < n:
        raise ValueError(f"shape {text!r}: causal with fewer keys ({nk}) than queries ({n})")
    return Workload(b, h, n, d, causal, nk, hk, dtype, label)


def _preset(*rows: tuple[str, str, str]) -> tuple[Workload, ...]:
    return tuple(parse_class(shape, dtype, label) for shape, dtype, label in rows)


# (shape key, dtype, what it stands for). Mission: the four-step acceptance's bench shapes and the
# dense classes of docs/performance.md where the shipped table's kernels lose to SDPA or nearly.
PRESETS: dict[str, tuple[Workload, ...]] = {
    "mission": _preset(
        ("1x16x1024x64", "float16", "the mission's bench (small)"),
        ("1x16x4096x64", "float16", "the mission's bench (medium)"),
        ("2x32x1024x128", "float16", "short, head dim 128"),
        ("2x32x2048x128", "float16", "medium, head dim 128"),
        ("2x32x4096x128", "float16", "long, head dim 128"),
    ),
    "diffusion": _preset(
        ("1x40x32760x128", "bfloat16", "Wan 2.1 14B 480p self-attention"),
        ("1x40x32760:512x128", "bfloat16", "Wan cross-attention to 512 text keys"),
        ("1x24x4608x128", "bfloat16", "Flux self-attention (4096 image + 512 text tokens)"),
        ("1x24x11520x128", "bfloat16", "HunyuanVideo self-attention (short clip)"),
        ("2x10x4096:77x64", "float16", "SDXL cross-attention to 77 text keys"),
        ("2x8x4096x40", "float16", "SD1.5 self-attention, head dim 40"),
        ("2x8x4096:77x40", "float16", "SD1.5 cross-attention, head dim 40"),
        ("2x8x1024x80", "float16", "SD1.5 self-attention, head dim 80"),
        ("2x8x256x160", "float16", "SD1.5 self-attention, head dim 160"),
    ),
    "llm": _preset(
        ("1x32/8x4096x128c", "float16", "GQA causal prefill, head dim 128"),
        ("1x32/8x1024x128c", "float16", "GQA causal prefill (short), head dim 128"),
        ("1x32/8x4096x64c", "float16", "GQA causal prefill, head dim 64"),
        ("1x32x4096x80c", "float16", "causal prefill, head dim 80"),
        ("1x32x4096x96c", "float16", "causal prefill, head dim 96"),
        ("1x32/8x8192x128c", "float16", "packed prefill as one long causal sequence, head dim 128"),
    ),
}
PRESETS["all"] = tuple(dict.fromkeys(c for name in ("mission", "diffusion", "llm") for c in PRESETS[name]))


def from_preset(name: str) -> tuple[Workload, ...]:
    if name not in PRESETS:
        raise SagebuildError(
            f"--preset {name}: unknown preset", fix=f"pass one of {', '.join(PRESETS)} (or --shapes)"
        )
    return PRESETS[name]


def from_shapes(text: str, dtype: str = "float16") -> tuple[Workload, ...]:
    """``--shapes 1x16x1024x64,2x10x4096:77x64``: classes in bench's shape-key syntax."""
    out = []
    for item in (s for s in text.replace(" ", "").split(",") if s):
        try:
            out.append(parse_class(item, dtype))
        except ValueError as exc:
            raise SagebuildError(f"--shapes: {exc}", fix=f"write each shape as {SHAPE_KEY_FORMS}") from None
    if not out:
        raise SagebuildError("--shapes is empty", fix=f"e.g. --shapes 1x16x1024x64 ({SHAPE_KEY_FORMS})")
    return tuple(dict.fromkeys(out))


def from_bench(cfg: Any) -> tuple[Workload, ...]:
    """The dense shapes of a bench config (``bench.BenchConfig``): ``accept --tune`` tunes what its
    bench then measures (packed sequences are not tuned: the record serves dense calls)."""
    if getattr(cfg, "varlen", None):
        return ()
    return tuple(
        Workload(
            cfg.batch,
            cfg.heads,
            n,
            cfg.head_dim,
            cfg.causal,
            cfg.kv_seq,
            cfg.kv_heads,
            cfg.dtype,
            "accept's bench",
        )
        for n in cfg.seq
    )


# ---- recording what a program runs -----------------------------------------------------------

_lock = threading.Lock()
_recorded: set[tuple[str, str]] = set()  # (file, class key) written by this process


def note_call(
    shape: tuple[int, ...], kv_shape: tuple[int, ...], dtype: Any, layout: str, causal: bool
) -> None:
    """Append a call signature to ``$SAGEBUILD_RECORD`` (once per signature and process; a no-op
    when unset). ``shape``/``kv_shape``: Q's and K's B,H,N,D (HND order). Called where a signature
    is planned for the first time, so repeated calls cost nothing; a write that fails is dropped
    (recording must never break the program it watches)."""
    path = knobs.raw(RECORD_ENV_VAR)
    if not path:
        return
    b, h, n, d = shape
    hk, nk = kv_shape[1], kv_shape[2]
    name = str(dtype).removeprefix("torch.")
    entry = shape_key(b, h, n, d, causal, nk if nk != n else None, hk if hk != h else None)
    with _lock:
        if (path, f"{entry} {name}") in _recorded:
            return
        _recorded.add((path, f"{entry} {name}"))
        line = json.dumps({"shape": entry, "dtype": name, "layout": layout}) + "\n"
        try:  # one write of one line in append mode: lines of concurrent processes stay whole
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)
        except OSError:
            pass


def from_record(path: Path | str) -> tuple[Workload, ...]:
    """The classes a ``SAGEBUILD_RECORD`` file holds (repeats once), or a clear error."""
    path = Path(path)
    fix = f"run your program with {RECORD_ENV_VAR}={path} first (sageattn appends each call signature)"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SagebuildError(f"cannot read --from-record {path}: {exc.strerror or exc}", fix=fix) from None
    except UnicodeDecodeError:
        raise SagebuildError(f"--from-record {path} is not a text file", fix=fix) from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            out.append(parse_class(str(doc["shape"]), str(doc.get("dtype", "float16"))))
        except (ValueError, KeyError, TypeError) as exc:
            what = exc if isinstance(exc, ValueError) else "expected a JSON object with a shape"
            raise SagebuildError(
                f"--from-record {path}, line {number}: {what}",
                fix=f"each line must be what {RECORD_ENV_VAR} writes: "
                '{"shape": "1x16x1024x64", "dtype": "float16", "layout": "HND"}',
            ) from None
    if not out:
        raise SagebuildError(f"--from-record {path} records no call", fix=fix)
    return tuple(dict.fromkeys(out))
