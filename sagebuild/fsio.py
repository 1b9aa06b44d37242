"""Writing files safely: a temporary file beside the destination, fsynced, then renamed over it (a
reader never sees a half-written report or lock), and each failed write one ``SagebuildError`` that
says what could not be written, where, and what to do (exit 2), never a traceback.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from sagebuild.errors import Exit, SagebuildError

_WHY = {
    errno.ENOSPC: ("the disk is full", "free some space, or write somewhere else"),
    errno.EDQUOT: ("the disk quota is exhausted", "free some space, or write somewhere else"),
    errno.EROFS: ("the filesystem is read-only", "pass a path on a writable filesystem"),
    errno.EACCES: ("permission denied", "pass a path you can write, or fix its permissions"),
    errno.EPERM: ("operation not permitted", "pass a path you can write, or fix its permissions"),
    errno.ENOTDIR: ("a parent of it is a file, not a directory", "pass a path inside a directory"),
    errno.EISDIR: ("it is a directory", "pass a file path, not a directory"),
    errno.ENOENT: ("its directory does not exist", "create the directory first, or pass another path"),
    errno.EEXIST: ("something else already exists there", "pass another path, or remove it"),
    errno.ENAMETOOLONG: ("the name is too long", "pass a shorter path"),
}


def write_error(path: Path | str, exc: OSError, what: str = "write") -> SagebuildError:
    """A failed write as one actionable line (exit 2)."""
    why, fix = _WHY.get(exc.errno or -1, (exc.strerror or str(exc), "pass another path"))
    return SagebuildError(f"cannot {what} {path}: {why}", fix=fix, code=Exit.USAGE)


def ensure_dir(path: Path | str) -> Path:
    """``mkdir -p`` with a clear error for a path that is a file, on /proc, read-only, ..."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file in the way: EEXIST
        raise write_error(path, e, "create directory") from None
    return path


def check_writable_dir(path: Path | str, what: str = "write into") -> Path:
    """Create ``path`` if needed and prove a file can be created in it (catches /proc, read-only)."""
    path = ensure_dir(path)
    try:
        fd, probe = tempfile.mkstemp(prefix=".sagebuild-probe.", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise write_error(path, e, what) from None
    return path


def _replace_atomically(path: Path, fill: Callable[[str], None]) -> Path:
    """Let ``fill`` write a temporary file beside ``path``, then rename it over ``path``."""
    if path.is_dir():
        raise write_error(path, OSError(errno.EISDIR, "is a directory"))
    ensure_dir(path.parent)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise write_error(path, e) from None
    os.close(fd)
    try:
        fill(tmp)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # what open() gives a new file, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise
    return path


def write_bytes_atomic(path: Path | str, data: bytes) -> Path:
    """Write ``data`` to ``path`` via a temporary file (fsynced) and a rename; returns the path."""

    def fill(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    return _replace_atomically(Path(path), fill)


def write_text_atomic(path: Path | str, text: str) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends) atomically; returns the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def copy_atomic(src: Path | str, dst: Path | str) -> Path:
    """Copy a file (e.g. the build log) into place atomically."""
    return _replace_atomically(Path(dst), lambda tmp: shutil.copyfile(src, tmp))


def sha256_file(path: Path | str) -> str:
    """The sha256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def swap_dir_in(staged: Path | str, dest: Path | str, owned: Iterable[str] = ()) -> Path:
    """Put the fully written directory ``staged`` at ``dest`` as a whole: never a mix of two runs.

    ``owned`` names every file a run may write. When ``dest`` holds nothing else, it is renamed
    aside and ``staged`` renamed into its place (two renames, then the old run is deleted). When it
    also holds other files (a user's notes), those stay: each owned file is replaced by the new
    run's or removed when the new run did not write it.
    """
    staged, dest = Path(staged), Path(dest)
    owned = set(owned)
    try:
        if not dest.exists():
            os.replace(staged, dest)
            return dest
        if dest.is_dir() and not dest.is_symlink() and all(p.name in owned for p in dest.iterdir()):
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
            os.replace(dest, old / "run")
            os.replace(staged, dest)
            shutil.rmtree(old, ignore_errors=True)
            return dest
        ensure_dir(dest)
        new = {p.name for p in staged.iterdir()}
        for name in sorted(owned - new):
            stale = dest / name
            if stale.is_file() or stale.is_symlink():
                stale.unlink()
        for name in sorted(new):
            target = dest / name
            if target.is_dir() and not target.is_symlink():
                raise write_error(target, OSError(errno.EISDIR, "is a directory"), "replace")
            os.replace(staged / name, target)
        staged.rmdir()
    except OSError as e:
        raise write_error(dest, e, "move the run into") from None
    return dest
