"""YAML profiles (one hardware/software family each; bundled ones in ``profiles/*.yaml``): the one
schema, loading with clear errors, and matching a probed machine."""

from __future__ import annotations

import contextlib
import math
import re
import shlex
import stat
from dataclasses import asdict, dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable, NamedTuple

import yaml

from sagebuild import archs
from sagebuild.errors import Exit, SagebuildError

VENDORS = ("rocm", "cuda", "cpu")
VARIANTS = ("qk_int8_pv_fp16", "qk_int8_pv_fp8")


class ProfileError(SagebuildError):
    """A profile file that does not match the schema: names the file, the key and what was expected."""

    def __init__(self, source: str, key: str, expected: str, got: Any = None) -> None:
        got_s = "" if got is None else f", got {got!r}"
        super().__init__(
            f"profile {source}: key '{key}': expected {expected}{got_s}",
            fix=f"edit {source} (see docs/profiles.md for the schema) or pick a bundled profile: "
            "sagebuild profiles",
            code=Exit.USAGE,
        )


@dataclass(frozen=True)
class Versions:
    """PEP 440 specifiers ("" = any) for the interpreter and the GPU stack."""

    python: str = ""
    torch: str = ""
    triton: str = ""
    hip: str = ""
    cuda: str = ""


@dataclass(frozen=True)
class Build:
    arch_env: str | None  # "PYTORCH_ROCM_ARCH" | "TORCH_CUDA_ARCH_LIST" | None (cpu)
    mem_per_job_gb: float
    max_jobs: int
    min_free_disk_gb: float
    min_mem_gb: float


@dataclass(frozen=True)
class Accuracy:
    cos_min: float
    rel_l1_max: float


@dataclass(frozen=True)
class Bench:
    batch: int
    heads: int
    seq: tuple[int, ...]
    head_dim: int
    dtype: str
    causal: bool
    min_speedup: float  # explicit SDPA-relative gate: sage time ≤ SDPA time / min_speedup; 0: off
    warmup: int
    reps: int
    # sageattn's measured speed-up over SDPA per arch and shape ("BxHxNxD", "c" appended when
    # causal): the default speed gate is a regression check against it (``regression``)
    expected: dict[str, Expectation] = field(default_factory=dict)
    regression: float = 0.85  # fail below this fraction of the expected speed-up


@dataclass(frozen=True)
class Expectation:
    """What one arch measured: the speed-up per shape, and where and how it was measured."""

    measured: str
    speedup: dict[str, float]


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    vendor: str
    archs: tuple[str, ...]
    versions: Versions
    build: Build
    kernels: tuple[str, ...]
    accuracy: dict[str, Accuracy]
    bench: Bench
    torch_install: str  # the exact pip line that installs the right torch build
    source: str = field(default="", compare=False)

    def index_url(self) -> str | None:
        """The package index ``torch_install`` installs torch from, or None."""
        parts = shlex.split(self.torch_install)
        for i, p in enumerate(parts):
            if p == "--index-url" and i + 1 < len(parts):
                return parts[i + 1]
            if p.startswith("--index-url="):
                return p.split("=", 1)[1]
        return None

    def to_dict(self) -> dict[str, Any]:
        """The profile as JSON holds it (tuples as lists)."""
        d = asdict(self)
        d["archs"] = list(self.archs)
        d["kernels"] = list(self.kernels)
        d["bench"]["seq"] = list(self.bench.seq)
        return d


# ---- schema ---------------------------------------------------------------------------------


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a finite number",
    dict: "a mapping",
    list: "a list",
    bool: "true or false (unquoted)",
}
_REQUIRED: Any = object()


def _req(
    d: dict[str, Any],
    key: str,
    typ: type,
    src: str,
    default: Any = _REQUIRED,
    ok: Callable[[Any], bool] | None = None,
    expected: str = "",
) -> Any:
    """``d``'s value for the last part of the dotted ``key`` (the name errors give): of type ``typ``
    (an integer passes for a number; .nan and .inf do not), ``default`` when absent (else required),
    ``ok(value)`` true. A bool is only ``true``/``false``: the quoted "false" is a string, not False."""
    name = key.rsplit(".", 1)[-1]
    if name not in d:
        if default is _REQUIRED:
            raise ProfileError(src, key, f"{_TYPE_NAMES[typ]} (missing)")
        return default
    val = d[name]
    if typ is float and isinstance(val, int) and not isinstance(val, bool):
        val = float(val)
    if not isinstance(val, typ) or (typ in (int, float) and isinstance(val, bool)):
        raise ProfileError(src, key, _TYPE_NAMES[typ], val)
    if typ is float and not math.isfinite(val):
        raise ProfileError(src, key, _TYPE_NAMES[typ], val)
    if ok is not None and not ok(val):
        raise ProfileError(src, key, expected, val)
    return val


def _spec(d: dict[str, Any], key: str, src: str) -> str:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    val = "" if d.get(key) is None else d[key]
    with contextlib.suppress(InvalidSpecifier):
        if isinstance(val, str):
            SpecifierSet(val)
            return val
    raise ProfileError(src, f"versions.{key}", "a PEP 440 specifier string such as '>=2.5,<2.15'", val)


_TOP_KEYS = {f.name for f in fields(Profile)} - {"source"}
_AT_LEAST_1 = dict(ok=lambda v: v >= 1, expected="an integer ≥ 1")
_AT_LEAST_0 = dict(ok=lambda v: v >= 0, expected="a number ≥ 0")
_POSITIVE = dict(ok=lambda v: v > 0, expected="a number > 0")
# text we print: a terminal escape (ESC, CSI) or other control character would act on the terminal
_PRINTABLE = dict(
    ok=lambda v: v.isprintable(), expected="printable text (no terminal escapes or control characters)"
)
# the accuracy bounds a check can meet: a cosine similarity is at most 1, an error at least 0
ACCURACY_BOUNDS = {
    "cos_min": dict(ok=lambda v: 0 < v <= 1, expected="a cosine similarity in (0, 1], e.g. 0.99"),
    "rel_l1_max": dict(ok=lambda v: v > 0, expected="a relative error > 0, e.g. 0.05"),
}
# What one bench may take (the profile's values and the command line's alike): past these a run
# takes hours or days, a typo rather than a plan. (option, bound)
RUN_LIMITS = {
    "warmup": ("--warmup", 10_000),
    "reps": ("--reps", 100_000),
    "rounds": ("--rounds", 1_000),
    "sustain_s": ("--sustain", 600),
}


def _limit(name: str, low: int) -> dict[str, Any]:
    """``_req``'s ``ok``/``expected`` for a run-time setting: ``low`` to its ``RUN_LIMITS`` bound."""
    high = RUN_LIMITS[name][1]
    return dict(ok=lambda v: low <= v <= high, expected=f"a whole number from {low} to {high:,}")


def check_run_limits(values: dict[str, Any]) -> None:
    """A run-time setting over its bound (``RUN_LIMITS``) as a usage error that names the bound."""
    for name, value in values.items():
        option, high = RUN_LIMITS[name]
        if value is not None and value > high:
            raise SagebuildError(
                f"{option} {value}: at most {high:,} (a larger value would run for hours)",
                fix=f"pass {option} {high:,} or less",
            )


def parse(data: Any, source: str) -> Profile:
    """Validate a loaded YAML document against the schema and build a ``Profile``."""
    if not isinstance(data, dict):
        raise ProfileError(source, "(top level)", "a mapping of profile keys", type(data).__name__)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ProfileError(source, unknown[0], f"one of {', '.join(sorted(_TOP_KEYS))} (unknown key)")
    vendor = _req(data, "vendor", str, source)
    if vendor not in VENDORS:
        raise ProfileError(source, "vendor", f"one of {', '.join(VENDORS)}", vendor)
    norm_archs = _archs(data.get("archs", []), vendor, source)
    v = data.get("versions") or {}
    if not isinstance(v, dict):
        raise ProfileError(source, "versions", "a mapping (python/torch/triton/hip/cuda)", v)
    versions = Versions(**{f.name: _spec(v, f.name, source) for f in fields(Versions)})
    build = _build(_req(data, "build", dict, source), vendor, source)
    kernels = _req(data, "kernels", list, source)
    for k in kernels:
        if k not in VARIANTS:
            raise ProfileError(source, "kernels", f"variants from {', '.join(VARIANTS)}", k)
    accuracy = _accuracy(_req(data, "accuracy", dict, source), kernels, source)
    bench = _bench(_req(data, "bench", dict, source), source)
    return Profile(
        name=_req(data, "name", str, source, **_PRINTABLE),
        description=_req(data, "description", str, source, "", **_PRINTABLE),
        vendor=vendor,
        archs=tuple(norm_archs),
        versions=versions,
        build=build,
        kernels=tuple(kernels),
        accuracy=accuracy,
        bench=bench,
        torch_install=_req(data, "torch_install", str, source),
        source=source,
    )


def _archs(arch_list: Any, vendor: str, source: str) -> list[str]:
    """The profile's archs by their canonical names: known ones of its vendor, at least one for a GPU."""
    if not isinstance(arch_list, list) or not all(isinstance(a, str) for a in arch_list):
        raise ProfileError(source, "archs", "a list of arch names such as [gfx1201, gfx1200]", arch_list)
    norm_archs = []
    for a in arch_list:
        try:
            arch = archs.get(a)
        except archs.UnknownArchError:
            raise ProfileError(source, "archs", f"known arch names ({', '.join(archs.ARCHS)})", a) from None
        if arch.vendor != vendor:
            raise ProfileError(source, "archs", f"{vendor} archs only", a)
        norm_archs.append(arch.name)
    if vendor != "cpu" and not norm_archs:
        raise ProfileError(source, "archs", "at least one arch for a GPU profile", arch_list)
    return norm_archs


def _build(b: dict[str, Any], vendor: str, source: str) -> Build:
    """The ``build`` section; its ``arch_env`` is the vendor's."""
    expected_env = {"rocm": "PYTORCH_ROCM_ARCH", "cuda": "TORCH_CUDA_ARCH_LIST", "cpu": None}[vendor]
    if b.get("arch_env") != expected_env:
        raise ProfileError(
            source, "build.arch_env", f"{expected_env!r} for vendor {vendor}", b.get("arch_env")
        )
    return Build(
        arch_env=expected_env,
        mem_per_job_gb=_req(b, "build.mem_per_job_gb", float, source, **_POSITIVE),
        max_jobs=_req(b, "build.max_jobs", int, source, **_AT_LEAST_1),
        min_free_disk_gb=_req(b, "build.min_free_disk_gb", float, source, **_AT_LEAST_0),
        min_mem_gb=_req(b, "build.min_mem_gb", float, source, **_AT_LEAST_0),
    )


def _accuracy(acc_raw: dict[str, Any], kernels: list[str], source: str) -> dict[str, Accuracy]:
    """Each kernel's accuracy floor (the ``accuracy`` section names every kernel the profile runs)."""
    accuracy = {}
    for k in kernels:
        if not isinstance(acc_raw.get(k), dict):
            raise ProfileError(source, f"accuracy.{k}", "a mapping with cos_min and rel_l1_max")
        accuracy[k] = Accuracy(
            *(
                _req(acc_raw[k], f"accuracy.{k}.{f.name}", float, source, **ACCURACY_BOUNDS[f.name])
                for f in fields(Accuracy)
            )
        )
    return accuracy


def _bench(bn: dict[str, Any], source: str) -> Bench:
    """The ``bench`` section: its shape, timing and gate defaults."""
    seq = bn.get("seq", 1024)
    seq_t = tuple(seq) if isinstance(seq, list) else (seq,)
    if not seq_t or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in seq_t):
        raise ProfileError(source, "bench.seq", "a positive integer or a list of them", seq)
    dtypes = ("float16", "bfloat16")
    return Bench(
        batch=_req(bn, "bench.batch", int, source, **_AT_LEAST_1),
        heads=_req(bn, "bench.heads", int, source, **_AT_LEAST_1),
        seq=seq_t,
        head_dim=_req(bn, "bench.head_dim", int, source, **_AT_LEAST_1),
        dtype=_req(bn, "bench.dtype", str, source, "float16", dtypes.__contains__, "float16 or bfloat16"),
        causal=_req(bn, "bench.causal", bool, source, False),
        min_speedup=_req(bn, "bench.min_speedup", float, source, 0.0, **_AT_LEAST_0),
        warmup=_req(bn, "bench.warmup", int, source, 10, **_limit("warmup", 0)),
        reps=_req(bn, "bench.reps", int, source, 50, **_limit("reps", 1)),
        expected=_expectations(bn.get("expected") or {}, source),
        regression=_req(
            bn, "bench.regression", float, source, 0.85, lambda x: 0 < x <= 1, "a fraction in (0, 1]"
        ),
    )


_SHAPE_KEY = re.compile(r"\d+x\d+(/\d+)?x\d+(:\d+)?x\d+c?")


def shape_key(
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    causal: bool,
    kv_seq: int | None = None,
    kv_heads: int | None = None,
) -> str:
    """The key of a bench shape in ``bench.expected``: ``"1x16x1024x64"``, ``"…c"`` when causal;
    ``"2x10x4096:77x64"`` with 77 keys, ``"1x32/8x4096x128"`` with 8 K/V heads."""
    h = f"{heads}/{kv_heads}" if kv_heads else str(heads)
    n = f"{seq}:{kv_seq}" if kv_seq else str(seq)
    return f"{batch}x{h}x{n}x{head_dim}" + ("c" if causal else "")


SHAPE_KEY_FORMS = (
    "BxHxNxD, c appended when causal, H/Hk for K/V heads and N:Nk for keys "
    "(1x16x1024x64, 2x32x4096x128c, 2x10x4096:77x64, 1x32/8x4096x128)"
)


class ShapeKey(NamedTuple):
    """A shape key's parts (``shape_key`` writes them; None: as many K/V heads or keys as Q's)."""

    batch: int
    heads: int
    kv_heads: int | None
    seq: int
    kv_seq: int | None
    head_dim: int
    causal: bool


def parse_shape_key(key: str) -> ShapeKey:
    """``"2x10x4096:77x64"``, ``"1x32/8x4096x128c"``, ... back into its parts; ValueError naming the
    forms for anything else (the maintainers' scripts take their shapes in this syntax)."""
    if not _SHAPE_KEY.fullmatch(key):
        raise ValueError(f"shape {key!r}: expected {SHAPE_KEY_FORMS}")
    b, h, n, d = key.rstrip("c").split("x")
    h, _, hk = h.partition("/")
    n, _, nk = n.partition(":")
    return ShapeKey(
        int(b), int(h), int(hk) if hk else None, int(n), int(nk) if nk else None, int(d), key[-1] == "c"
    )


def _expectations(raw: Any, source: str) -> dict[str, Expectation]:
    """``bench.expected``: {arch: {measured: "...", speedup: {shape: ratio}}}."""
    if not isinstance(raw, dict):
        raise ProfileError(source, "bench.expected", "a mapping of arch to {measured, speedup}", raw)
    out = {}
    for arch, entry in raw.items():
        where = f"bench.expected.{arch}"
        if not isinstance(entry, dict) or not isinstance(entry.get("speedup"), dict):
            raise ProfileError(source, where, "a mapping with measured and speedup", entry)
        speedups = {}
        for shape in entry["speedup"]:
            if not _SHAPE_KEY.fullmatch(str(shape)):
                raise ProfileError(source, f"{where}.speedup", f"shape keys {SHAPE_KEY_FORMS}", shape)
            speedups[shape] = _req(entry["speedup"], f"{where}.speedup.{shape}", float, source, **_POSITIVE)
        out[archs.normalize(str(arch))] = Expectation(str(entry.get("measured", "")), speedups)
    return out


# ---- loading --------------------------------------------------------------------------------


def _bundled_dir() -> Any:
    return resources.files("sagebuild.profiles_data")


def bundled_names() -> list[str]:
    return sorted(p.name[:-5] for p in _bundled_dir().iterdir() if p.name.endswith(".yaml"))


def markdown_table(profiles: list[Profile]) -> str:
    """The bundled profiles as docs/profiles.md shows them (a test keeps the two equal)."""

    def gate(b: Bench) -> str:
        records = [
            f"{arch}: {shape} {ratio}×"
            for arch, e in b.expected.items()
            for shape, ratio in e.speedup.items()
        ]
        out = f"{b.regression} of {', '.join(records)}" if records else "accuracy only"
        return out + (f"; ≥ {b.min_speedup}× SDPA" if b.min_speedup else "")

    rows = [
        "| profile | vendor | archs | versions | kernels | build | speed gate | torch index |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for pr in profiles:
        pins = [f"{k.replace('python', 'py')} `{spec}`" for k, spec in asdict(pr.versions).items() if spec]
        index = pr.index_url() or "—"
        rows.append(
            f"| `{pr.name}` | {pr.vendor} | {', '.join(pr.archs) or '—'} | {', '.join(pins)} | "
            f"{', '.join(pr.kernels)} | {pr.build.mem_per_job_gb:g} GB/job, max {pr.build.max_jobs} | "
            f"{gate(pr.bench)} | `{index}` |"
        )
    return "\n".join(rows)


# A profile is a page of YAML: anything larger, or expanding to more nodes through aliases (the
# "billion laughs" bomb: 1 KB that expands exponentially), is refused before it is built.
MAX_PROFILE_BYTES = 256 * 1024
MAX_PROFILE_NODES = 20_000
_PICK = "pass a profile YAML file or a bundled name (sagebuild profiles)"


def load_file(path: Path | str) -> Profile:
    """Read a user's profile file: a regular file, at most 256 KiB, UTF-8 text; clear errors else."""
    path = Path(path)
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):
            what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO or device?)"
            raise SagebuildError(f"profile {path} is {what}", fix=_PICK)
        if st.st_size > MAX_PROFILE_BYTES:
            raise SagebuildError(
                f"profile {path} is {st.st_size:,} bytes; a profile is at most {MAX_PROFILE_BYTES:,}",
                fix=_PICK,
            )
        with open(path, "rb") as fh:
            raw = fh.read(MAX_PROFILE_BYTES + 1)
    except OSError as e:
        raise SagebuildError(f"cannot read profile {path}: {e.strerror or e}", fix=_PICK) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SagebuildError(
            f"profile {path} is not UTF-8 text (byte {e.start}: a binary file?)", fix=_PICK
        ) from None
    if "\x00" in text:
        raise SagebuildError(f"profile {path} contains NUL bytes (a binary file?)", fix=_PICK)
    return _parse_text(text, str(path))


def _expanded_nodes(node: Any, limit: int, memo: dict[int, int]) -> int:
    """How many nodes ``node`` would be with every alias expanded, counted up to ``limit + 1``."""
    if id(node) not in memo:
        memo[id(node)] = limit + 1  # a node reached again inside itself (a recursive alias) never ends
        kids = [] if isinstance(node, yaml.ScalarNode) else node.value
        kids = [x for pair in kids for x in pair] if isinstance(node, yaml.MappingNode) else kids
        memo[id(node)] = min(limit + 1, 1 + sum(_expanded_nodes(k, limit, memo) for k in kids))
    return memo[id(node)]


def _parse_text(text: str, source: str) -> Profile:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is not None and _expanded_nodes(node, MAX_PROFILE_NODES, {}) > MAX_PROFILE_NODES:
            raise SagebuildError(
                f"profile {source} expands to more than {MAX_PROFILE_NODES:,} YAML nodes through its "
                "aliases (&anchor/*alias); a profile needs a few dozen",
                fix=f"write {source} without nested aliases",
            )
        data = yaml.safe_load(text)
    except RecursionError:
        raise SagebuildError(f"profile {source} is nested too deeply", fix=f"fix {source}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SagebuildError(
            f"profile {source} is not valid YAML{where}: {getattr(e, 'problem', e)}",
            fix=f"fix the YAML syntax in {source}",
        ) from None
    return parse(data, source)


def load_bundled(name: str) -> Profile:
    ref = _bundled_dir() / f"{name}.yaml"
    if not ref.is_file():
        raise SagebuildError(
            f"no bundled profile named {name!r}",
            fix=f"use one of: {', '.join(bundled_names())}, 'auto', or a path to a YAML file",
        )
    return _parse_text(ref.read_text(encoding="utf-8"), f"profiles/{name}.yaml")


def load_all() -> list[Profile]:
    return [load_bundled(n) for n in bundled_names()]


def resolve(spec: str, detected_archs: list[str] | None = None) -> tuple[Profile, str]:
    """``--profile`` value → (profile, why). ``auto`` matches the probed archs (or picks ``cpu``)."""
    if spec in ("", "auto"):
        return match(detected_archs or [])
    if spec.endswith((".yaml", ".yml")) or "/" in spec or Path(spec).is_file():
        return load_file(spec), f"loaded from {spec}"
    return load_bundled(spec), "named on the command line"


def match(detected_archs: list[str]) -> tuple[Profile, str]:
    """The bundled profile covering the first detected arch that one covers; else ``cpu``."""
    profiles = load_all()
    for a in detected_archs:
        name = archs.normalize(a)
        for p in profiles:
            if name in p.archs:
                return p, f"auto: GPU arch {name} is covered by profile {p.name}"
    cpu = next(p for p in profiles if p.vendor == "cpu")
    if detected_archs:
        return cpu, (
            f"auto: no bundled profile covers {', '.join(detected_archs)}; using {cpu.name} "
            "(golden model only)"
        )
    return cpu, f"auto: no GPU detected; using {cpu.name}"
