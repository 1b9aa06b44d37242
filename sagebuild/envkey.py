"""The key of one environment's extension build: which interpreter, which torch, which sources.

Two venvs (or checkouts) with the same torch must not share a build, so the key holds the
interpreter's prefix (``sys.prefix``), torch's CUDA/HIP build and a hash of the bundled extension
sources. It is short, so paths stay readable: ``cp312-torch2.13.0+cpu-3f9a1c0d2b4e``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from typing import Optional


@functools.lru_cache(maxsize=1)
def sources_hash() -> str:
    """sha256 over the bundled C++/CUDA/HIP extension sources (names and bytes), computed once."""
    from sagebuild.build.paths import csrc_dir

    root = csrc_dir()
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def environment_key(
    prefix: Optional[str], torch_version: str, cuda: Optional[str] = None, hip: Optional[str] = None
) -> str:
    """12 hex digits naming one environment's build (the default prefix is this interpreter's)."""
    where = os.path.realpath(prefix or sys.prefix)
    text = "\n".join([where, torch_version, cuda or "", hip or "", sources_hash()])
    return hashlib.sha256(text.encode()).hexdigest()[:12]
