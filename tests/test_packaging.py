"""The checkout must not shadow other distributions' top-level packages.

``python -m pytest`` (the README's test command) and ``python`` started in the checkout put the
repository root first on ``sys.path``. A regular package there named like an installed one wins
over it: the top-level ``kernels/`` once did that to Hugging Face's ``kernels`` (a dependency of
transformers 5), and every transformers model import failed with an ImportError.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    # kernels/ holds sources installed as sagebuild.kernels.*; an __init__.py makes it "kernels".
    assert not (ROOT / "kernels" / "__init__.py").exists()


def test_checkout_root_changes_no_installed_import(tmp_path):
    names = _top_level_names()
    outside = _resolve(names, tmp_path)
    inside = _resolve(names, ROOT)
    changed = {
        n: (outside[n], inside[n])
        for n in names
        if outside[n] is not None and inside[n] != outside[n]
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
