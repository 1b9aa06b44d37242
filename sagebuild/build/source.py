"""``sagebuild compile --source DIR``: ``setup.py build_ext --inplace`` in an external tree, then a check
that extension files appeared or changed (a ``setup.py`` that skips its extensions exits 0 too)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sagebuild.build.result import CompileResult, finish, run_plan
from sagebuild.fsio import sha256_file

if TYPE_CHECKING:
    from sagebuild.build.plan import BuildPlan

EXT_SUFFIXES = (".so", ".pyd")
_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules"}


def extension_files(root: Path) -> dict[Path, tuple[int, int]]:
    """Every extension file under ``root`` with (mtime_ns, size): the before/after snapshot."""
    out: dict[Path, tuple[int, int]] = {}
    for path in root.rglob("*"):
        if any(part in _SKIP_DIRS for part in path.relative_to(root).parts):
            continue
        if path.suffix in EXT_SUFFIXES and path.is_file():
            st = path.stat()
            out[path] = (st.st_mtime_ns, st.st_size)
    return out


def build_source(plan: BuildPlan, log_path: Path, progress: bool, t0: float) -> CompileResult:
    root = Path(plan.build_dir)
    before = extension_files(root)
    out = run_plan(plan, log_path, f"building {root.name}", progress)
    if out.rc != 0:
        return finish(plan, log_path, t0, out, out.failure("setup.py build_ext"))
    fresh = sorted(p for p, sig in extension_files(root).items() if before.get(p) != sig)
    if not fresh:
        why = (
            f"setup.py build_ext finished without an error but no extension file (*.so / *.pyd) appeared "
            f"under {root}: the extensions were skipped or built elsewhere (check that setup.py found a "
            f"CUDA/ROCm torch and that the log lists compile steps)"
        )
        return finish(plan, log_path, t0, out, why, [why])
    artefacts = [{"path": str(p), "sha256": sha256_file(p)} for p in fresh]
    path, sha = artefacts[0]["path"], artefacts[0]["sha256"]
    return finish(plan, log_path, t0, out, artefact=path, sha256=sha, artefacts=artefacts)
