"""Where the built extension lives: every path of the build lifecycle, in one module.

Layout under the extension directory (one per environment: a compiled torch extension only loads
into the torch it was built against, and two venvs must not share a build)::

    <ext_dir>/current -> builds/<id>     the verified build in use (a symlink, swapped atomically)
    <ext_dir>/builds/<id>/sagebuild_ext.so + build_info.json
    <ext_dir>/tree/                      ninja's incremental build tree (objects, build.ninja)
    <ext_dir>/staging-<id>/              a build being verified; never loaded by the runtime
    <ext_dir>/logs/compile-<time>.log    full compiler logs

``SAGEBUILD_EXT_DIR`` overrides ``<ext_dir>``; ``SAGEBUILD_CACHE_DIR`` overrides the
``~/.cache/sagebuild`` root (``XDG_CACHE_HOME`` is honoured).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Mapping, Optional

from sagebuild import knobs

EXT_NAME = "sagebuild_ext"
LIB_FILE = f"{EXT_NAME}.so"
INFO_FILE = "build_info.json"


def csrc_dir() -> Path:
    """The bundled C++/CUDA sources (package ``sagebuild.kernels.csrc``)."""
    import sagebuild.kernels.csrc as csrc

    return Path(csrc.__file__).resolve().parent


def tree_hash(root: Path, pattern: str = "*") -> str:
    """sha256 over the files under ``root`` matching ``pattern`` (relative names and bytes;
    ``__pycache__`` left out): what a build or a verify record was made from."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob(pattern) if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def sources_hash() -> str:
    """sha256 over the bundled extension sources (names and bytes), computed once."""
    return tree_hash(csrc_dir())


def _knob(env: Optional[Mapping[str, str]], name: str) -> Optional[str]:
    """A path knob: through the registry for this process, or from ``env`` (another's)."""
    return knobs.raw(name) if env is None else (env.get(name) or None)


def cache_root(env: Optional[Mapping[str, str]] = None) -> Path:
    cache = _knob(env, "SAGEBUILD_CACHE_DIR")
    if cache:
        return Path(cache).expanduser()
    env = os.environ if env is None else env
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "sagebuild"


def ext_dir(
    torch_version: str,
    py_version: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    prefix: Optional[str] = None,
) -> Path:
    """One environment's extension directory, ``cp312-torch2.13.0+cpu-3f9a1c0d2b4e``: the key hashes
    the interpreter's ``prefix`` (default: this one's), torch's version and the bundled sources."""
    ext = _knob(env, "SAGEBUILD_EXT_DIR")
    if ext:
        return Path(ext).expanduser()
    where = os.path.realpath(prefix or sys.prefix)
    text = "\n".join([where, torch_version, "", "", sources_hash()])  # two empty fields: keys stay as built
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    major, minor = py_version.split(".")[:2] if py_version else sys.version_info[:2]
    return cache_root(env) / "ext" / f"cp{major}{minor}-torch{torch_version}-{key}"


def current_dir(base: Path) -> Path:
    return base / "current"


def current_lib(base: Path) -> Path:
    return current_dir(base) / LIB_FILE


def current_info(base: Path) -> Path:
    return current_dir(base) / INFO_FILE


def read_info(base: Path) -> Any:
    """The current build's record (its ``build_info.json``); None when missing or not JSON."""
    try:
        return json.loads(current_info(base).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def builds_dir(base: Path) -> Path:
    return base / "builds"


def tree_dir(base: Path) -> Path:
    return base / "tree"


def running_ext_dir() -> Path:
    """The extension directory of the running interpreter and its torch (imports torch)."""
    import torch

    return ext_dir(torch.__version__)
