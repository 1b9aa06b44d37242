"""``accept``'s output folder: the run is written into a fresh folder and swapped into ``--out`` whole.

The destination is checked before anything runs (a file, a dangling symlink, a folder that cannot be
written), so an hour of build and bench is never thrown away at the end. The run is staged beside
``--out`` (the same filesystem: the swap is two renames) or, where ``--out`` cannot be renamed (a
mount point, a symlink, a parent that cannot be written), inside it, and then written in place.
Staging folders are named ``.NAME.run-PID-*``: one left by a run that was killed is removed by the
next run once its process is gone.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Iterator

from sagebuild import fsio
from sagebuild.errors import SagebuildError, Terminated


def check_destination(out: Path) -> None:
    """A usage error (exit 2) for an ``--out`` that cannot take the run, before anything runs."""
    if out.is_symlink() and not out.exists():
        raise SagebuildError(
            f"--out {out} is a symbolic link to {os.readlink(out)}, which does not exist",
            fix="create the folder it points to, or pass another --out",
        )
    if out.exists() and not out.is_dir():
        raise SagebuildError(
            f"--out {out}: it exists and is not a directory",
            fix="pass a directory for the run's files (a new or existing one)",
        )
    if out.is_dir():
        fsio.check_writable_dir(out, "write the run into")


def _prefix(out: Path) -> str:
    return f".{out.name}.run-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's process
        return True
    return True


def remove_stale_runs(out: Path) -> list[Path]:
    """Remove the staging folders that runs into ``out`` left when they were killed (their process is
    gone); returns them. A folder whose process still runs is another accept's, and stays."""
    removed = []
    for folder in dict.fromkeys((out.parent, out)):
        if not folder.is_dir():
            continue
        for p in folder.glob(f"{glob.escape(_prefix(out))}*"):
            pid = p.name[len(_prefix(out)) :].split("-", 1)[0]
            if p.is_dir() and not p.is_symlink() and pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


def staging_dir(out: Path) -> Path:
    """A fresh folder for the run (mode as the umask gives, not ``mkdtemp``'s 0700): beside ``out``,
    or inside it where ``out`` cannot be renamed; clear errors for an ``--out`` that is a file, below
    a file, a dangling symlink, under /proc, on a read-only mount or not writable (exit 2)."""
    check_destination(out)
    remove_stale_runs(out)
    parent = out.parent if str(out.parent) else Path(".")
    in_place = out.is_dir() and (
        out.is_symlink() or os.path.ismount(out) or fsio.unwritable_reason(parent) is not None
    )
    where = out if in_place else fsio.check_writable_dir(parent, "write the run beside")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f"{_prefix(out)}{os.getpid()}-", dir=where))
        staging.chmod(fsio.umask_mode())
    except OSError as e:
        raise fsio.write_error(out, e, "write the run into") from None
    return staging


@contextlib.contextmanager
def terminate_raises() -> Iterator[None]:
    """While the run lasts, SIGTERM (a CI job cancelled, ``timeout``, ``kill``) raises ``Terminated``
    so the staging folder is removed on the way out, as Ctrl-C's ``KeyboardInterrupt`` does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum: int, _frame: object) -> None:
        raise Terminated(signum)

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
