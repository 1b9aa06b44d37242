"""The topology probe: reads a machine (or a system image under ``root``) into plain ``Facts``.
Checks read only the facts, so checks are tested on hand-made facts and facts on a fake root.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

from sagebuild.build import paths
from sagebuild.errors import SagebuildError
from sagebuild.fsio import sha256_file, unwritable_reason
from sagebuild.probe import system, tools, torch_probe
from sagebuild.probe.facts import ConflictFacts, ExtensionFacts, Facts, PythonFacts, ShadowFact, TorchFacts

# Packages a same-named source folder in the working directory would shadow.
SHADOW_NAMES = ("sageattention", "sagebuild")
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")


def _under_mnt(path: Optional[str]) -> bool:
    return bool(path and (path.startswith("/mnt/") or _WINDOWS_PATH.match(path)))


def _conflicts(raw_py: dict, cwd: Path) -> ConflictFacts:
    shadows, own = [], []
    for name in SHADOW_NAMES:
        folder = cwd / name
        if not (folder / "__init__.py").is_file():
            continue
        origin = raw_py.get(f"{name}_origin")
        installed = Path(origin.removesuffix("__init__.py")) if origin else None
        if installed is not None and installed.resolve() == folder.resolve():
            own.append(str(folder))  # the installed package *is* this folder (an editable install)
            continue
        shadows.append(
            ShadowFact(name=name, path=str(folder), installed_at=str(installed) if installed else None)
        )
    return ConflictFacts(
        sageattention=raw_py.get("sageattention"),
        sageattention_location=raw_py.get("sageattention_origin"),
        shadowing=shadows,
        installed_here=own,
    )


def _this_python() -> PythonFacts:
    return PythonFacts(
        version=platform.python_version(),
        executable=sys.executable,
        prefix=sys.prefix,
        platform=sys.platform,
        in_venv=sys.prefix != sys.base_prefix or bool(os.environ.get("CONDA_PREFIX")),
    )


def collect(
    root: Path | str = Path("/"),
    python: Optional[str] = None,
    timeout: float = 60.0,
    env: Optional[Mapping[str, str]] = None,
    *,
    cwd: Optional[Path] = None,
    torch: Optional[TorchFacts] = None,
    probe_torch: bool = True,
) -> Facts:
    """Probe everything under ``root`` and the ``python`` interpreter's torch/Triton. ``torch``
    injects torch facts (tests); ``probe_torch=False`` skips torch (listings of the devices only)."""
    if not Path(root).is_dir():
        raise SagebuildError(
            f"--root {root}: not a directory", fix="pass a directory holding a system image, or omit --root"
        )
    env = dict(os.environ if env is None else env)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    rt = system.Root(root)
    extra_path = [rt.unroot(Path(python).parent)] if python else []  # a venv's own bin/ (its ninja)

    raw_py: dict = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        tools_future = pool.submit(tools.probe_tools, rt, env, extra_path)
        if torch is None and probe_torch:
            py_facts, torch_facts, raw_py = torch_probe.probe(python, env, timeout)
        else:
            torch_facts = torch or TorchFacts(error="not probed")
            py_facts = _this_python() if python is None else PythonFacts(executable=python)
        tool_facts, rocm_archs, smi_archs = tools_future.result()

    requested = rt.unroot(python) if python else None
    py_facts.under_mnt = (
        _under_mnt(requested) or _under_mnt(py_facts.executable) or py_facts.platform == "win32"
    )
    found = tools.find(rt, ("python3", "python"), env)
    py_facts.path_python = rt.unroot(found) if found else None

    return Facts(
        root=str(root),
        cwd=str(cwd),
        system=system.system_facts(rt),
        python=py_facts,
        devices=system.device_facts(rt),
        driver=system.driver_version(rt),
        kfd_archs=system.kfd_archs(rt),
        rocminfo_archs=rocm_archs,
        nvidia_smi_archs=smi_archs,
        env=system.relevant_env(env),
        tools=tool_facts,
        torch=torch_facts,
        conflicts=_conflicts(raw_py, cwd),
        extension=_extension(torch_facts, py_facts, env),
    )


def _extension(torch_facts: TorchFacts, py_facts: PythonFacts, env: Mapping[str, str]) -> ExtensionFacts:
    """The extension built for this interpreter + torch: where, its metadata, and whether the
    library on disk is still the one that was verified (its sha256)."""
    if not torch_facts.version:
        return ExtensionFacts()
    base = paths.ext_dir(torch_facts.version, py_facts.version or None, env, py_facts.prefix)
    lib = paths.current_lib(base)
    facts = ExtensionFacts(
        dir=str(base),
        lib_present=lib.is_file(),
        info=paths.read_info(base),
        unwritable=unwritable_reason(base),
    )
    if facts.info is None:
        return facts
    facts.built = True
    try:
        facts.sha256_ok = facts.lib_present and sha256_file(lib) == facts.info.get("sha256")
    except OSError:
        facts.sha256_ok = False
    return facts
