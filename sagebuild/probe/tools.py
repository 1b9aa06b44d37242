"""Compilers and GPU tools: found on PATH (under the probed root), their versions, and GPU archs.
Each runs under a short timeout; one that hangs or fails is a fact with an error, never an exception.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

from sagebuild import archs
from sagebuild.probe.facts import ToolFact
from sagebuild.probe.system import Root

TOOL_TIMEOUT = 10.0


@dataclass(frozen=True)
class ToolSpec:
    """How to find one tool and read its version."""

    name: str
    version_re: Optional[str]  # first group = version; None: first output line
    args: tuple[str, ...] = ("--version",)  # arguments that print the version
    candidates: tuple[str, ...] = ()  # executable names tried in order (none: the tool's name)
    homes: tuple[str, ...] = ()  # env vars naming an install whose bin/ is searched after PATH
    dirs: tuple[str, ...] = ()  # then these directories


_ROCM_HOMES, _ROCM_BIN = ("ROCM_HOME", "ROCM_PATH"), ("/opt/rocm/bin",)
_SMI_QUERY = ("--query-gpu=driver_version,compute_cap", "--format=csv,noheader")
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("c++", None, candidates=("c++", "g++", "clang++")),
    ToolSpec("ninja", r"^(\d+(?:\.\d+)+)"),
    ToolSpec("nvcc", r"release (\d+\.\d+)", homes=("CUDA_HOME", "CUDA_PATH"), dirs=("/usr/local/cuda/bin",)),
    ToolSpec("hipcc", r"HIP version:\s*(\S+)", homes=_ROCM_HOMES, dirs=_ROCM_BIN),
    ToolSpec("rocminfo", r"Runtime Version:\s*(\S+)", (), homes=_ROCM_HOMES, dirs=_ROCM_BIN),
    ToolSpec("nvidia-smi", r"^\s*([\d.]+)\s*,", _SMI_QUERY, dirs=("/usr/lib/wsl/lib",)),
)


def find(
    root: Root, names: Sequence[str], env: Mapping[str, str], extra_dirs: Sequence[str] = ()
) -> Optional[str]:
    """First executable among ``names`` on PATH (then ``extra_dirs``), as a host path under ``root``."""
    # Relative PATH entries would resolve against our working directory, not the root: skipped.
    dirs = [d for d in env.get("PATH", os.defpath).split(os.pathsep) if d.startswith("/")] + list(extra_dirs)
    for name in names:
        for d in dirs:
            p = root.path(d) / name
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
    return None


def run_tool(
    argv: Sequence[str], env: Mapping[str, str], timeout: float = TOOL_TIMEOUT
) -> tuple[Optional[str], Optional[str]]:
    """(combined output, error) of one tool run; the error names a timeout or a failing exit."""
    try:
        p = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return None, f"{os.path.basename(argv[0])} did not answer within {timeout:.0f} s"
    except OSError as e:
        return None, f"cannot run {argv[0]}: {e.strerror or e}"
    out = (p.stdout or "") + (p.stderr or "")
    if p.returncode != 0:
        return out, f"exit code {p.returncode}: {_first_line(out) or 'no output'}"
    return out, None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _first_line(text: str) -> str:
    text = _ANSI.sub("", text)
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def parse_version(text: str, pattern: Optional[str]) -> Optional[str]:
    if pattern is None:
        return _first_line(text) or None
    m = re.search(pattern, text, re.MULTILINE)
    return m.group(1) if m else None


def rocminfo_archs(text: str) -> list[str]:
    """``Name: gfx1201`` lines of rocminfo output, canonical and de-duplicated."""
    found = re.finditer(r"^\s*Name:\s*(gfx[0-9a-f]+)", text, re.MULTILINE)
    return list(dict.fromkeys(archs.normalize(m.group(1)) for m in found))


def nvidia_smi_archs(text: str) -> list[str]:
    """Compute capabilities (``driver, 9.0`` lines) → ``sm90``."""
    found = re.finditer(r",\s*(\d+)\.(\d+)\s*$", text, re.MULTILINE)
    return list(dict.fromkeys(archs.cuda_arch(int(m.group(1)), int(m.group(2))) for m in found))


def probe_tool(
    spec: ToolSpec, root: Root, env: Mapping[str, str], extra_path: Sequence[str] = ()
) -> tuple[ToolFact, str]:
    """The fact for one tool and its raw output (rocminfo/nvidia-smi output carries archs)."""
    names = spec.candidates or (spec.name,)
    if spec.name == "c++" and env.get("CXX"):
        names = (os.path.basename(env["CXX"].split()[0]), *names)
    homes = [f"{env[n]}/bin" for n in spec.homes if env.get(n)]
    path = find(root, names, env, [*extra_path, *homes, *spec.dirs])
    if path is None:
        return ToolFact(present=False), ""
    out, err = run_tool([path, *spec.args], env)
    version = parse_version(out or "", spec.version_re) if out else None
    return ToolFact(present=True, path=root.unroot(path), version=version, error=err), out or ""


def probe_tools(
    root: Root, env: Mapping[str, str], extra_path: Sequence[str] = ()
) -> tuple[dict[str, ToolFact], list[str], list[str]]:
    """All tools in parallel → (facts by name, rocminfo archs, nvidia-smi archs)."""
    with ThreadPoolExecutor(max_workers=len(TOOLS)) as pool:
        results = list(pool.map(lambda s: probe_tool(s, root, env, extra_path), TOOLS))
    facts = {spec.name: fact for spec, (fact, _) in zip(TOOLS, results)}
    raw = {spec.name: out for spec, (_, out) in zip(TOOLS, results)}
    return facts, rocminfo_archs(raw["rocminfo"]), nvidia_smi_archs(raw["nvidia-smi"])
