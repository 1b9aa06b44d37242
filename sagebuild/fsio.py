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
    errno.EEXIST: ("something else already exists there", "pass another path, or remove it"),
    errno.ENAMETOOLONG: ("the name is too long", "pass a shorter path"),
}


def _why_missing(path: Path) -> tuple[str, str]:
    """What ENOENT meant for ``path``: a folder on the way that does not exist, a dangling symbolic
    link, or a folder that exists but takes no new files (/proc, /sys)."""
    if path.is_symlink() and not path.exists():
        return (
            f"it is a symbolic link to {os.readlink(path)}, which does not exist",
            "fix the link, or pass another path",
        )
    missing = None
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing, probe = probe, probe.parent
    if missing is None or missing == path:  # it, or the folder it goes in, exists
        return (
            f"{probe} takes no new files (a virtual filesystem such as /proc or /sys)",
            "pass a path on a regular filesystem",
        )
    return f"{missing} does not exist", f"create {missing} first, or pass another path"


def write_error(path: Path | str, exc: OSError, what: str = "write") -> SagebuildError:
    """A failed write as one actionable line (exit 2)."""
    if exc.errno == errno.ENOENT:
        why, fix = _why_missing(Path(path))
    else:
        why, fix = _WHY.get(exc.errno or -1, (exc.strerror or str(exc), "pass another path"))
    return SagebuildError(f"cannot {what} {path}: {why}", fix=fix, code=Exit.USAGE)


def user_error(exc: BaseException) -> SagebuildError | None:
    """A file-system failure on a named path (or a full disk) as the usage error it is (exit 2): the
    path or the disk, not a bug. None for anything else."""
    if isinstance(exc, OSError) and (exc.filename is not None or exc.errno in (errno.ENOSPC, errno.EDQUOT)):
        return write_error(exc.filename or "a file", exc, "access")
    return None


def unwritable_reason(path: Path | str) -> str | None:
    """Why a folder could not be created or written at ``path`` (None: it can), without creating it:
    the nearest existing folder on the way must be one this process can write and enter."""
    path = Path(path)
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} cannot be written (a read-only filesystem or its permissions)"
    return None


def umask_mode(mode: int = 0o777) -> int:
    """``mode`` less the process's umask: what ``open``/``mkdir`` give a new file or folder."""
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


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


def check_writable_file(path: Path | str) -> Path:
    """Prove ``path`` can be written atomically (not a folder; a file can be created beside it), before
    work whose result goes there starts."""
    path = Path(path)
    if path.is_dir():
        raise write_error(path, OSError(errno.EISDIR, "is a directory"))
    check_writable_dir(path.parent, f"write {path.name} into")
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
        os.chmod(tmp, umask_mode(0o666))  # what open() gives a new file, not mkstemp's 0600
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
    also holds other files (a user's notes), cannot be renamed (a mount point, a symlink) or
    ``staged`` was written inside it, the run is written in place: each owned file is replaced by
    the new run's or removed when the new run did not write it; nothing else there is touched.
    """
    staged, dest = Path(staged), Path(dest)
    owned = set(owned)
    try:
        if not dest.exists() and not dest.is_symlink():
            os.replace(staged, dest)
            return dest
        whole = dest.is_dir() and not dest.is_symlink() and staged.parent != dest
        if whole and all(p.name in owned for p in dest.iterdir()) and _swap_whole(staged, dest):
            return dest
        _replace_in_place(staged, dest, owned)
    except OSError as e:
        raise write_error(dest, e, "move the run into") from None
    return dest


# a folder that cannot be renamed: a mount point (EBUSY), no write access to its parent, another
# filesystem, or a folder the kernel will not move (EPERM, EINVAL)
_NOT_RENAMABLE = {errno.EBUSY, errno.EACCES, errno.EPERM, errno.EXDEV, errno.EINVAL}


def _swap_whole(staged: Path, dest: Path) -> bool:
    """Rename ``dest`` aside and ``staged`` into its place; False, with nothing changed, when ``dest``
    cannot be renamed. The aside folder is always gone afterwards (the old run with it, once the new
    one is in place; put back where the second rename failed)."""
    old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old.", dir=dest.parent))
    aside = old / "run"
    try:
        try:
            os.replace(dest, aside)
        except OSError as e:
            if e.errno in _NOT_RENAMABLE:
                return False
            raise
        try:
            os.replace(staged, dest)
        except OSError:
            os.replace(aside, dest)  # the previous run back where it was
            raise
    finally:
        if not aside.exists() or dest.exists():
            shutil.rmtree(old, ignore_errors=True)
    return True


def _replace_in_place(staged: Path, dest: Path, owned: set[str]) -> None:
    """Each of the run's files into ``dest``; the owned files the run did not write removed."""
    ensure_dir(dest)
    new = sorted(p.name for p in staged.iterdir())
    for name in new:  # checked before anything changes
        target = dest / name
        if target.is_dir() and not target.is_symlink():
            raise write_error(target, OSError(errno.EISDIR, "is a directory"), "replace")
    for name in sorted(owned - set(new)):
        stale = dest / name
        if stale.is_file() or stale.is_symlink():
            stale.unlink()
    for name in new:
        try:
            os.replace(staged / name, dest / name)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
            copy_atomic(staged / name, dest / name)  # another filesystem (a mount point): copied
    shutil.rmtree(staged, ignore_errors=True)
