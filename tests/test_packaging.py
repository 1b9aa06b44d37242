"""The checkout must not shadow other distributions' top-level packages.

``python -m pytest`` (the README's test command) and ``python`` started in the checkout put the
repository root first on ``sys.path``. A regular package there named like an installed one wins
over it: the top-level ``kernels/`` once did that to Hugging Face's ``kernels`` (a dependency of
transformers 5), and every transformers model import failed with an ImportError.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Prints where each name resolves from the current directory (first on sys.path with -c).
PROBE = """
import importlib.util, json, sys
def where(name):
    spec = importlib.util.find_spec(name)
    return None if spec is None else spec.origin
print(json.dumps({name: where(name) for name in sys.argv[1:]}))
"""


def _resolve(names: list[str], cwd: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names], cwd=cwd, capture_output=True, text=True, check=True, timeout=60
    )
    return json.loads(done.stdout)


def _top_level_names() -> list[str]:
    dirs = (p for p in ROOT.iterdir() if p.is_dir() and p.name.isidentifier())
    return sorted(p.name for p in dirs if p.name != "sagebuild")


def test_kernel_sources_are_not_a_top_level_package():
    assert not (ROOT / "kernels" / "__init__.py").exists()


def test_checkout_root_changes_no_installed_import(tmp_path):
    names = _top_level_names()
    outside = _resolve(names, tmp_path)
    inside = _resolve(names, ROOT)
    changed = {
        n: (outside[n], inside[n]) for n in names if outside[n] is not None and inside[n] != outside[n]
    }
    assert not changed, (
        f"from the checkout's root these imports resolve elsewhere (installed, checkout): {changed}"
    )


def test_shadowing_is_detected(tmp_path):
    """The probe itself: a regular package in the cwd does shadow an installed module's name."""
    shadow = tmp_path / "colorsys"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("")
    inside = _resolve(["colorsys"], tmp_path)
    assert inside["colorsys"] is not None and Path(inside["colorsys"]).parent == shadow


def test_bundled_kernels_import_under_the_package():
    import sagebuild.kernels.csrc as csrc
    import sagebuild.kernels.triton as triton_kernels

    assert (Path(csrc.__file__).parent / "ops_cpu.cpp").exists()
    assert (Path(triton_kernels.__file__).parent / "attn_fwd.py").exists()


# ---- what the built distributions carry ----------------------------------------------------------

# What a build reads from the checkout; everything else (tests, docs, caches, a venv) stays behind.
_BUILD_INPUTS = ("pyproject.toml", "README.md", "sagebuild", "kernels", "profiles")
# Builds sdist then wheel through setuptools' PEP 517 hooks: offline, no isolation, no `build`.
_BUILD = """
import sys
from setuptools import build_meta
print(build_meta.build_sdist(sys.argv[1]) if sys.argv[2] == "sdist" else build_meta.build_wheel(sys.argv[1]))
"""


def _kernel_sources() -> list[str]:
    """Every kernel source file of the checkout, as ``triton/attn_fwd.py``, ``csrc/ops_cpu.cpp``."""
    files = [p for sub in ("triton", "csrc") for p in (ROOT / "kernels" / sub).iterdir() if p.is_file()]
    names = sorted(str(p.relative_to(ROOT / "kernels")) for p in files if p.suffix != ".pyc")
    assert any(n.startswith("triton/") for n in names) and any(n.startswith("csrc/") for n in names)
    return names


def _build(src: Path, kind: str, out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, "-c", _BUILD, str(out), kind], cwd=src, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"building the {kind} failed:\n{done.stderr[-4000:]}"
    return out / done.stdout.strip().splitlines()[-1]


def _unpack(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.12 (and patched 3.9-3.11)
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # our own freshly built sdist


@pytest.fixture(scope="module")
def distributions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist built from a copy of the checkout, and the wheel built from that unpacked sdist
    (the route pip takes from an sdist, so a kernel missing from the sdist is missing from the wheel)."""
    try:
        import setuptools
    except ImportError:
        pytest.skip("setuptools is not installed (pip install '.[test]' brings it)")
    assert int(setuptools.__version__.split(".")[0]) >= 77, "the build-system needs setuptools>=77"
    base = tmp_path_factory.mktemp("dist")
    src, out = base / "src", base / "out"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info")
    for name in _BUILD_INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=skip)
        else:
            shutil.copy2(path, src / name)
    sdist = _build(src, "sdist", out)
    _unpack(sdist, base / "unpacked")
    (unpacked,) = (base / "unpacked").iterdir()
    return sdist, _build(unpacked, "wheel", out)


def test_sdist_carries_every_kernel_source(distributions: tuple[Path, Path]) -> None:
    sdist, _ = distributions
    with tarfile.open(sdist) as tar:
        inside = {"/".join(Path(n).parts[1:]) for n in tar.getnames()}
    missing = [n for n in _kernel_sources() if f"kernels/{n}" not in inside]
    assert not missing, f"{sdist.name} lacks kernel sources: {missing}"


def test_wheel_carries_every_kernel_source(distributions: tuple[Path, Path]) -> None:
    _, wheel = distributions
    with zipfile.ZipFile(wheel) as whl:
        inside = set(whl.namelist())
    missing = [n for n in _kernel_sources() if f"sagebuild/kernels/{n}" not in inside]
    assert not missing, f"{wheel.name} lacks kernel sources: {missing}"
    assert "sagebuild/kernels/__init__.py" in inside
    assert not any(n.startswith("kernels/") for n in inside), "the wheel installs a top-level kernels/"


def test_wheel_carries_every_package_module(distributions: tuple[Path, Path]) -> None:
    """A package left out of pyproject.toml's list installs without its modules (imports fail)."""
    _, wheel = distributions
    with zipfile.ZipFile(wheel) as whl:
        inside = set(whl.namelist())
    modules = sorted(
        str(p.relative_to(ROOT)) for p in (ROOT / "sagebuild").rglob("*.py") if "__pycache__" not in p.parts
    )
    missing = [m for m in modules if m not in inside]
    assert not missing, (
        f"{wheel.name} lacks modules (add their package to [tool.setuptools] packages): {missing}"
    )
