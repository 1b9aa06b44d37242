"""Install, remove and restore the ``sageattention`` distribution in an interpreter's site-packages.

Writes are atomic (staged inside site-packages, then renamed into place). An upstream install is
replaced only with ``force``, after its RECORD's files are backed up; ``remove(restore=True)`` puts
them back.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from sagebuild.build.paths import cache_root
from sagebuild.compat import contents
from sagebuild.compat.target import status
from sagebuild.errors import SagebuildError

BACKUP_MANIFEST = "sagebuild-backup.json"


def backup_root() -> Path:
    return cache_root() / "compat-backups"


def _record_paths(dist_info: Path) -> list[Path]:
    """The files a distribution's RECORD lists (absolute), RECORD included."""
    location = dist_info.parent
    with open(dist_info / "RECORD", newline="", encoding="utf-8") as fh:
        rows = [row for row in csv.reader(fh) if row]
    return [Path(os.path.normpath(location / row[0])) for row in rows]


def _remove_dist(dist: dict[str, Any], location: Path) -> None:
    """Delete a distribution's files (and the bytecode beside .py files), then the folders left empty."""
    dirs = set()
    for p in _record_paths(Path(dist["dist_info"])):
        if p.is_file() or p.is_symlink():
            p.unlink()
        cache = p.parent / "__pycache__"
        if p.suffix == ".py" and cache.is_dir():
            for pyc in cache.glob(f"{p.stem}.*.pyc"):
                pyc.unlink()
            dirs.add(cache)
        dirs.add(p.parent)
    for d in sorted(dirs, key=lambda x: len(x.parts), reverse=True):
        if d != location and location in d.parents:
            with contextlib.suppress(OSError):  # not empty: something else lives there
                d.rmdir()


def _backup(dist: dict[str, Any]) -> Path:
    """Copy an upstream distribution's files into a fresh backup folder; returns it."""
    dist_info = Path(dist["dist_info"])
    location = dist_info.parent
    dest = backup_root() / f"{time.strftime('%Y%m%d-%H%M%S')}-sageattention-{dist['version']}"
    dest.mkdir(parents=True, exist_ok=False)
    saved = []
    for p in _record_paths(dist_info):
        if p.is_file():
            rel = os.path.relpath(p, location)
            (dest / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dest / "files" / rel)
            saved.append(rel)
    manifest = {"site_packages": str(location), "version": dist["version"], "files": saved,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}  # fmt: skip
    (dest / BACKUP_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return dest


def _dists_in(st: dict[str, Any], site: Path) -> list[dict[str, Any]]:
    return [
        d for d in st["distributions"] if d["location"] and Path(d["location"]).resolve() == site.resolve()
    ]


def _imports_sagebuild(exe: str) -> bool:
    """Whether ``exe`` imports sagebuild from its environment. Asked from an empty folder: run inside
    a sagebuild checkout, ``-c``'s current-directory entry on sys.path would find the checkout's
    sources, which the programs importing ``sageattention`` will not have."""
    code = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sagebuild') else 1)"
    with tempfile.TemporaryDirectory(prefix="sagebuild-compat-") as empty:
        return subprocess.run([exe, "-c", code], capture_output=True, timeout=60, cwd=empty).returncode == 0


def install(python: Optional[str] = None, force: bool = False) -> dict[str, Any]:
    """Install our ``sageattention`` into ``python``'s site-packages (purelib); returns what was done."""
    exe = python or sys.executable
    before = status(exe)
    site = Path(before["site_packages"])
    if not _imports_sagebuild(exe):
        raise SagebuildError(
            f"{exe} cannot import sagebuild, which the sageattention module it would get imports",
            f"install sagebuild into that environment first ({exe} -m pip install sagebuild), then rerun",
        )
    backups, replaced = [], []
    for dist in _dists_in(before, site):
        if dist["ours"]:
            replaced.append(dist["version"])
            _remove_dist(dist, site)
            continue
        if not force:
            raise SagebuildError(
                f"upstream sageattention {dist['version']} is installed in {site} ({dist['dist_info']})",
                "rerun with --force to replace it (its files are backed up first, "
                "`sagebuild compat remove --restore` puts them back), or keep it",
            )
        if not dist["has_record"]:
            raise SagebuildError(
                f"sageattention {dist['version']} in {site} has no RECORD (a develop/egg install), "
                "so its files cannot be backed up and removed safely",
                f"uninstall it first: {exe} -m pip uninstall sageattention",
            )
        backups.append(str(_backup(dist)))
        _remove_dist(dist, site)
    stray = site / contents.PACKAGE
    if stray.exists():
        raise SagebuildError(
            f"{stray} exists but no distribution in {site} claims it",
            f"move it away (mv {stray} {stray}.bak) and rerun",
        )
    files = contents.files()
    files[f"{contents.DIST_INFO}/RECORD"] = contents.record(files)
    stage = site / f".sagebuild-compat-{os.getpid()}"
    try:
        for rel, data in files.items():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).write_bytes(data)
        for top in (contents.DIST_INFO, contents.PACKAGE):  # the dist-info first: metadata never lies
            os.replace(stage / top, site / top)
    except OSError as exc:
        raise SagebuildError(
            f"could not write into {site}: {exc}",
            "run with write access to that site-packages (or in a venv)",
        ) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    after = status(exe)
    return {
        "action": "install",
        "installed": contents.DIST_VERSION,
        "site_packages": str(site),
        "replaced_ours": replaced,
        "backups": backups,
        "status": after,
        "shadowed": after["whose"] != "sagebuild",
    }


def _latest_backup(site: Path) -> Optional[Path]:
    root = backup_root()
    found = []
    for manifest in root.glob(f"*/{BACKUP_MANIFEST}") if root.is_dir() else []:
        try:
            doc = json.loads(manifest.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if Path(doc.get("site_packages", "")).resolve() == site.resolve():
            found.append(manifest.parent)
    return max(found, key=lambda p: p.name) if found else None


def _backup_manifest(backup: Path) -> dict[str, Any]:
    """A backup's manifest, every file it lists present; else a clear error (before any removal)."""
    try:
        manifest = json.loads((backup / BACKUP_MANIFEST).read_text(encoding="utf-8"))
        missing = [rel for rel in manifest["files"] if not (backup / "files" / rel).is_file()]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        missing = [f"its manifest ({type(exc).__name__})"]
    if missing:
        raise SagebuildError(
            f"the backup {backup} is incomplete: {missing[0]} is missing (nothing was removed)",
            "reinstall upstream with pip (pip install sageattention) instead",
        )
    return manifest


def remove(python: Optional[str] = None, restore: bool = False) -> dict[str, Any]:
    """Remove our distribution from ``python``'s site-packages; ``restore``: then put back the latest
    backed-up upstream install of that site-packages."""
    exe = python or sys.executable
    before = status(exe)
    site = Path(before["site_packages"])
    backup = _latest_backup(site)
    if restore and backup is None:  # said before anything is removed: the install stays as it was
        raise SagebuildError(
            f"no backup of an upstream sageattention for {site} in {backup_root()} (nothing was removed)",
            "reinstall upstream with pip (pip install sageattention), or run `sagebuild compat remove` "
            "without --restore; backups live in the cache folder of the sagebuild that made them "
            "(SAGEBUILD_CACHE_DIR)",
        )
    manifest = _backup_manifest(backup) if restore and backup else None
    removed = []
    for dist in _dists_in(before, site):
        if dist["ours"]:
            _remove_dist(dist, site)
            removed.append(dist["version"])
    restored = None
    if manifest is not None and backup is not None:
        for rel in manifest["files"]:
            dest = site / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            tmp = dest.with_name(dest.name + f".sagebuild-{os.getpid()}")
            shutil.copy2(backup / "files" / rel, tmp)
            os.replace(tmp, dest)
        restored = {"version": manifest["version"], "from": str(backup)}
    return {
        "action": "remove",
        "removed": removed,
        "site_packages": str(site),
        "restored": restored,
        "backup_available": str(backup) if backup and not restore else None,
        "status": status(exe),
    }
