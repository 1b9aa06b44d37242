"""The frozen lockfile: what a working environment was, byte-for-byte reproducible, and drift checks.

A lock holds only what determines behaviour: no timestamps, durations, job counts or paths, and no
tool looked up on today's PATH (activating a venv must not drift the lock).
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from sagebuild import dists
from sagebuild.errors import SagebuildError
from sagebuild.fsio import sha256_file, write_text_atomic

LOCK_KIND = "sagebuild-lock"
DEFAULT_NAME = "sagebuild.lock"  # `sagebuild lock`'s file, accept's, and the one the doctor reads in ./
LOCK_VERSION = 1
TORCH_INDEX = "https://download.pytorch.org/whl"


def torch_index_url(version: str | None) -> str | None:
    """The PyTorch wheel index a torch local tag implies: ``+cu130`` → ``…/whl/cu130``; None without a tag."""
    tag = (version or "").partition("+")[2]
    return f"{TORCH_INDEX}/{tag}" if re.fullmatch(r"cu\d+|rocm\d+(\.\d+)*|cpu|xpu", tag) else None


# what of the build record determines the artefact's behaviour (not ninja: it only schedules)
_ARTEFACT_KEYS = ("archs", "arch_env", "dispatch_keys", "ops", "torch", "vendor")
_TORCH_ABI_KEYS = ("version", "cuda", "hip", "git")
_BEHAVIOUR_COMPILERS = ("c++", "nvcc", "hipcc")


def _artefact_build(info: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: info[k] for k in _ARTEFACT_KEYS if k in info}
    if isinstance(out.get("torch"), dict):
        out["torch"] = {k: out["torch"].get(k) for k in _TORCH_ABI_KEYS if k in out["torch"]}
    return dict(sorted(out.items()))


def _compilers(doc: Mapping[str, Any] | None) -> dict[str, str | None]:
    """The compilers a build record (or a lock) names, as the build resolved and recorded them."""
    recorded = (doc or {}).get("compilers") or {}
    return {k: recorded[k] for k in _BEHAVIOUR_COMPILERS if k in recorded}


def _artefacts(info: Mapping[str, Any] | None, library: Path | None) -> list[dict[str, Any]]:
    """The built extension as recorded, its hash re-read from ``library`` when there (a library
    changed after its build must drift)."""
    if not info:
        return []
    sha = sha256_file(library) if library is not None and library.is_file() else info.get("sha256")
    return [{"name": str(info.get("name", "sagebuild ext")), "sha256": sha, "build": _artefact_build(info)}]


def tuning_records(gpu_archs: list[str]) -> dict[str, str | None]:
    """The tuning record (``sagebuild tune``) of each of the machine's GPU archs by its sha256, or
    None: none yet (no path: a lock names no paths)."""
    from sagebuild.tuning.record import record_path

    out: dict[str, str | None] = {}
    for arch in gpu_archs:
        path = record_path(arch)
        out[arch] = sha256_file(path) if path.is_file() else None
    return out


def snapshot(
    facts: Mapping[str, Any] | None = None,
    profile: Any | None = None,
    build_info: Mapping[str, Any] | None = None,
    distributions: Mapping[str, Mapping[str, Any]] | None = None,
    library: Path | None = None,
) -> dict[str, Any]:
    """The lock document of ``probe.collect().to_dict()`` facts and the build ``build_info`` records."""
    facts = dict(facts or {})
    t = facts.get("torch") or {}
    triton = t.get("triton") or {}
    return {
        "lock": LOCK_KIND,
        "version": LOCK_VERSION,
        "python": {
            "version": (facts.get("python") or {}).get("version") or platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "platform": _platform(facts.get("system") or {}),
        "torch": {
            **{k: t.get(k) for k in ("version", "build", "hip", "cuda")},
            "index_url": torch_index_url(t.get("version")),
        },
        "triton": {
            "distribution": triton.get("distribution"),
            "version": triton.get("distribution_version") or triton.get("version"),
        },
        "gpu": _gpu(facts),
        "compilers": _compilers(build_info),
        "distributions": dict(sorted((distributions or dists.installed_distributions()).items())),
        "artefacts": _artefacts(build_info, library),
        "tuning": tuning_records(list(facts.get("gpu_archs") or [])),
        "profile": None if profile is None else {k: v for k, v in profile.to_dict().items() if k != "source"},
    }


def _platform(system: Mapping[str, Any]) -> dict[str, Any]:
    """The OS as probed, this interpreter's ``platform`` where the probe did not say."""
    return {
        "os": system.get("os") or platform.system(),
        "machine": platform.machine(),
        "kernel": system.get("kernel") or platform.release(),
        "wsl": system.get("wsl", "none"),
        "libc": "-".join(x for x in platform.libc_ver() if x) or None,
    }


def _gpu(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The GPUs: archs as ``Facts.gpu_archs()`` (torch, KFD, rocminfo, smi), names, and the driver
    (nvidia-smi's version when the probe found no other)."""
    smi = (facts.get("tools") or {}).get("nvidia-smi") or {}
    driver = facts.get("driver")
    if driver is None and smi.get("present"):
        driver = smi.get("version")
    devices = (facts.get("torch") or {}).get("devices") or []
    return {
        "archs": list(facts.get("gpu_archs") or []),
        "names": sorted({d.get("name") for d in devices if d.get("name")}),
        "driver": driver,
    }


def render(lock: Mapping[str, Any]) -> str:
    """Canonical JSON: sorted keys, fixed indent, ``\\n`` at the end — same dict → same bytes."""
    return json.dumps(lock, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def requirements(lock: Mapping[str, Any]) -> str:
    """A pip requirements file that reinstalls the locked versions (torch from its own index)."""
    lines = [
        "# Generated by `sagebuild lock`: reinstalls the locked versions.",
        f"# python {lock['python']['version']} on {lock['platform']['os']} {lock['platform']['machine']}",
    ]
    index = (lock.get("torch") or {}).get("index_url")
    if index:
        lines.append(f"--extra-index-url {index}")
    for name, entry in lock["distributions"].items():
        source = entry.get("source")
        if name == "sagebuild" or source == "editable":
            lines.append(f"# {name}=={entry['version']}: source/editable install: pip install -e <checkout>")
        elif source == "url" and entry.get("url"):
            lines.append(f"{name} @ {entry['url']}")
        else:
            lines.append(f"{name}=={entry['version']}")
    return "\n".join(lines) + "\n"


def write(lock: Mapping[str, Any], path: Path | str) -> tuple[Path, Path]:
    """Write the lock and its requirements export atomically; returns both paths."""
    path = Path(path)
    write_text_atomic(path, render(lock))
    req = write_text_atomic(path.with_name(path.name + ".requirements.txt"), requirements(lock))
    return path, req


def _bad(path: Path, what: str) -> SagebuildError:
    return SagebuildError(
        f"{path} is not a usable sagebuild lockfile: {what}",
        fix="pass a file written by `sagebuild lock --out FILE`, or write a new one with `sagebuild lock`",
    )


def load(path: Path | str) -> dict[str, Any]:
    """Read a lockfile, with a clear error (exit 2) for a missing, malformed, foreign or newer file."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SagebuildError(
            f"cannot read lockfile {path}: {e.strerror or e}",
            fix="check the path; write one with `sagebuild lock --out FILE`",
        ) from None
    except UnicodeDecodeError:  # a ValueError too: caught before the JSON one
        raise _bad(path, "it is not UTF-8 text") from None
    except RecursionError:
        raise _bad(path, "its JSON is nested too deeply") from None
    except ValueError as e:
        line = getattr(e, "lineno", None)
        raise _bad(path, f"invalid JSON{f' at line {line}' if line else ''}") from None
    if not isinstance(doc, dict) or doc.get("lock") != LOCK_KIND:
        raise _bad(path, f'no "lock": "{LOCK_KIND}" marker (a different kind of file?)')
    ver = doc.get("version")
    if not isinstance(ver, int):
        raise _bad(path, 'its "version" is missing or not an integer')
    if ver > LOCK_VERSION:
        raise SagebuildError(
            f"{path} is lockfile version {ver}; this sagebuild reads up to version {LOCK_VERSION}",
            fix="upgrade sagebuild (pip install -U sagebuild) to check this lockfile",
        )
    for key in ("python", "platform", "torch", "triton", "gpu", "compilers", "distributions", "artefacts"):
        typ = list if key == "artefacts" else dict
        if not isinstance(doc.get(key), typ):
            raise _bad(path, f'section "{key}" is missing or not a {"list" if typ is list else "mapping"}')
    for name, entry in doc["distributions"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("version"), str):
            raise _bad(path, f"distribution {name!r} has no version string")
    problem = _shape_problem(doc)
    if problem:
        raise _bad(path, problem)
    return doc


MAX_DEPTH = 32  # a lock nests 4 levels; a deeper document is not one (and would exhaust the stack)


def _shape_problem(doc: dict[str, Any]) -> str | None:
    """What is wrong with the parts of a lock ``diff`` reads inside its sections, or None."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"it nests more than {MAX_DEPTH} levels deep"
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack += [(child, depth + 1) for child in children]
    for i, art in enumerate(doc["artefacts"]):
        if not isinstance(art, dict) or not isinstance(art.get("name", ""), str):
            return f"artefact #{i + 1} is not a mapping with a name string"
        if not isinstance(art.get("sha256"), (str, type(None))) or not isinstance(art.get("build", {}), dict):
            return f"artefact #{i + 1} has a sha256 that is not a string or a build that is not a mapping"
    profile = doc.get("profile")
    if profile is not None and not (isinstance(profile, dict) and isinstance(profile.get("name"), str)):
        return 'section "profile" is neither null nor a mapping with a name string'
    return None


@dataclass(frozen=True)
class Drift:
    """One difference between the lock and the environment now."""

    kind: str  # package | python | platform | torch | triton | gpu | compiler | artefact | tuning | profile
    key: str
    locked: Any
    current: Any

    @property
    def change(self) -> str:
        if self.locked is None:
            return "added"
        if self.current is None:
            return "removed"
        return "changed"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change": self.change}

    def __str__(self) -> str:
        was, now = _fmt(self.locked), _fmt(self.current)
        said = {"added": f"added ({now})", "removed": f"removed (was {was})", "changed": f"{was} → {now}"}
        return f"{self.kind} {self.key}: {said[self.change]}"


def _fmt(v: Any) -> str:
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)


def _flat(kind: str, locked: Mapping[str, Any], current: Mapping[str, Any], prefix: str = "") -> list[Drift]:
    keys = sorted(set(locked) | set(current))
    return [
        Drift(kind, prefix + k, locked.get(k), current.get(k))
        for k in keys
        if locked.get(k) != current.get(k)
    ]


def diff(locked: Mapping[str, Any], current: Mapping[str, Any]) -> list[Drift]:
    """Every drift once, grouped by kind: a torch or Triton upgrade is one ``version`` line (not also
    its package and index URL). Only what a lock records today is compared (older locks had times)."""
    drifts: list[Drift] = []
    for kind in ("python", "platform", "torch", "triton", "gpu"):
        drifts += _flat(kind, locked.get(kind) or {}, current.get(kind) or {})
    drifts += _flat("compiler", _compilers(locked), _compilers(current))
    covered = _covered_packages(drifts, locked, current)
    if "torch" in covered:  # the version line says it: not also its index URL
        drifts = [d for d in drifts if (d.kind, d.key) != ("torch", "index_url")]
    versions = [
        {name: e.get("version") for name, e in doc["distributions"].items() if name not in covered}
        for doc in (locked, current)
    ]
    drifts += _flat("package", *versions)
    drifts += _artefact_drifts(locked, current)
    if "tuning" in locked:  # locks from before tuning records name none: nothing to compare
        drifts += _flat("tuning", locked.get("tuning") or {}, current.get("tuning") or {}, prefix="record ")
    drifts += _profile_drifts(locked.get("profile"), current.get("profile"))
    return drifts


def _covered_packages(drifts: list[Drift], locked: Mapping[str, Any], current: Mapping[str, Any]) -> set[str]:
    """The distributions whose change a torch or Triton ``version`` drift already says."""
    said = {(d.kind, d.key) for d in drifts}
    covered: set[str] = set()
    if ("torch", "version") in said:
        covered.add("torch")
    if ("triton", "version") in said or ("triton", "distribution") in said:
        names = ((doc.get("triton") or {}).get("distribution") for doc in (locked, current))
        covered |= {dists.canonical_name(str(name)) for name in names if name}
    return covered


def _artefact_drifts(locked: Mapping[str, Any], current: Mapping[str, Any]) -> list[Drift]:
    """Artefacts added or removed, or changed in hash or in what their build records."""
    lart, cart = ({a.get("name"): a for a in doc.get("artefacts") or []} for doc in (locked, current))
    drifts: list[Drift] = []
    for name in sorted(set(lart) | set(cart), key=str):
        a, b = lart.get(name), cart.get(name)
        if a is None or b is None:
            drifts.append(Drift("artefact", str(name), a and a.get("sha256"), b and b.get("sha256")))
            continue
        if a.get("sha256") != b.get("sha256"):
            drifts.append(Drift("artefact", f"{name} sha256", a.get("sha256"), b.get("sha256")))
        built = _artefact_build(a.get("build") or {}), _artefact_build(b.get("build") or {})
        drifts += _flat("artefact", *built, prefix=f"{name} ")
    return drifts


def _profile_drifts(lp: Any, cp: Any) -> list[Drift]:
    """The same profile's changed settings, or the profile's name when it is another one."""
    if lp == cp:
        return []
    if lp and cp and lp.get("name") == cp.get("name"):
        return _flat("profile", lp, cp, prefix=f"{lp['name']}.")
    return [Drift("profile", "name", (lp or {}).get("name"), (cp or {}).get("name"))]


def current(profile: Any | None, facts: Any, python: str | None = None) -> dict[str, Any]:
    """Snapshot of ``python``'s environment now (default: this one's) from ``facts`` probed there."""
    fd = facts.to_dict() if hasattr(facts, "to_dict") else dict(facts)
    ext_dir = (fd.get("extension") or {}).get("dir")
    info, lib = None, None
    if ext_dir:  # the probed interpreter's own build, read now (it may be newer than the probe)
        from sagebuild.build import paths

        # the record names no path (its folder is renamed into place after), so the library is beside it
        info, lib = paths.read_info(Path(ext_dir)), paths.current_lib(Path(ext_dir))
    return snapshot(
        fd, profile, info if isinstance(info, dict) else None, dists.installed_distributions(python), lib
    )
