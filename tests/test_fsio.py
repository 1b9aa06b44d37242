"""sagebuild/fsio.py: the swap of a run into its folder where a rename cannot do it, and what a failed
write says (issue 60)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from sagebuild import fsio
from sagebuild.errors import SagebuildError

OWNED = ("report.json", "build.log")


def _run(folder: Path, text: str) -> Path:
    folder.mkdir()
    for name in OWNED:
        (folder / name).write_text(text)
    return folder


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".old." in p.name or ".run-" in p.name)


def _rename_fails(monkeypatch, source: Path, code: int) -> None:
    """``os.replace`` as fsio calls it, failing with ``code`` when it moves ``source``."""
    real = os.replace

    def replace(src, dst):
        if Path(src) == source:
            raise OSError(code, os.strerror(code), str(src))
        return real(src, dst)

    monkeypatch.setattr(fsio.os, "replace", replace)


def test_a_folder_that_cannot_be_renamed_is_written_in_place(tmp_path: Path, monkeypatch):
    """A mount point (EBUSY on rename): each file is replaced in place, nothing is left beside it."""
    dest, staged = _run(tmp_path / "out", "old"), _run(tmp_path / ".out.run-1-x", "new")
    _rename_fails(monkeypatch, dest, errno.EBUSY)
    fsio.swap_dir_in(staged, dest, OWNED)
    assert all((dest / n).read_text() == "new" for n in OWNED)
    assert _leftovers(tmp_path) == [] and not staged.exists()


def test_a_failed_second_rename_puts_the_previous_run_back(tmp_path: Path, monkeypatch):
    dest, staged = _run(tmp_path / "out", "old"), _run(tmp_path / ".out.run-1-x", "new")
    _rename_fails(monkeypatch, staged, errno.EIO)
    with pytest.raises(SagebuildError, match="move the run into"):
        fsio.swap_dir_in(staged, dest, OWNED)
    assert all((dest / n).read_text() == "old" for n in OWNED)
    assert _leftovers(tmp_path) == [".out.run-1-x"]  # the caller removes its staging folder


def test_a_run_staged_inside_its_folder_keeps_the_users_files(tmp_path: Path):
    dest = _run(tmp_path / "out", "old")
    (dest / "notes.txt").write_text("mine")
    staged = _run(dest / ".out.run-1-x", "new")
    fsio.swap_dir_in(staged, dest, (*OWNED, "junit.xml"))
    assert (dest / "notes.txt").read_text() == "mine" and (dest / "report.json").read_text() == "new"
    assert _leftovers(dest) == []


@pytest.mark.parametrize(
    "path, says",
    [
        ("/proc/sagebuild-x.lock", "/proc takes no new files"),
        ("{tmp}/no/such/x.lock", "{tmp}/no does not exist"),
        ("{tmp}/link", "symbolic link to {tmp}/gone/x"),
    ],
)
def test_a_missing_path_says_what_is_missing(tmp_path: Path, path: str, says: str):
    (tmp_path / "link").symlink_to(tmp_path / "gone" / "x")
    path, says = path.format(tmp=tmp_path), says.format(tmp=tmp_path)
    err = fsio.write_error(path, OSError(errno.ENOENT, "No such file or directory", path))
    assert says in err.message and "its directory does not exist" not in err.message, err.message


def test_check_writable_file_refuses_before_the_work(tmp_path: Path):
    with pytest.raises(SagebuildError, match="is a directory"):
        fsio.check_writable_file(tmp_path)
    with pytest.raises(SagebuildError, match="/proc"):
        fsio.check_writable_file("/proc/bench.json")
    assert fsio.check_writable_file(tmp_path / "new" / "bench.json").parent.is_dir()


def test_unwritable_reason_names_a_file_on_the_way(tmp_path: Path):
    (tmp_path / "f").write_text("")
    assert "is not a directory" in fsio.unwritable_reason(tmp_path / "f" / "cache")
    assert fsio.unwritable_reason(tmp_path / "a" / "b") is None
