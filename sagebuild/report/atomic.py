"""Atomic file writes: a reader (or a CI artefact upload) never sees a half-written report or lock.

Each write goes to a temporary file in the destination's own directory (same filesystem, so
``os.replace`` is an atomic rename) and is fsynced before the rename.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def write_text_atomic(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends) to ``path`` via temp file + rename; returns the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path | str, data: bytes) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def copy_atomic(src: Path | str, dst: Path | str) -> Path:
    """Copy a file (e.g. the build log) into place atomically."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dst
