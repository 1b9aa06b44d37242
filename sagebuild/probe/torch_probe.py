"""torch/Triton facts read in a subprocess of the target interpreter, under a timeout.

A broken ROCm install can segfault or hang inside ``import torch``: in a subprocess that is a failed
fact (naming the signal or the timeout), never a dead doctor. The script prints the interpreter's
facts first, so that they survive a crash in ``import torch``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any, Optional

from sagebuild import archs
from sagebuild.probe.facts import DeviceInfo, PythonFacts, TorchFacts, TritonFacts

PY_TAG = "SAGEBUILD_PROBE_PYTHON "
TORCH_TAG = "SAGEBUILD_PROBE_TORCH "

# Runs in the target interpreter (Python >= 3.9, standard library only). Kept self-contained.
SCRIPT = r"""
import importlib.metadata as md, importlib.util, json, os, platform, sys

def emit(tag, obj):
    sys.stdout.write(tag + json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()

def attempt(fn, default=None):
    try:
        return fn()
    except Exception:
        return default

def why(e):
    return "%s: %s" % (type(e).__name__, e)

def dists_providing(name):
    if hasattr(md, "packages_distributions"):
        return sorted(set(md.packages_distributions().get(name, [])))
    found = set()  # Python 3.9
    for d in md.distributions():
        top = d.read_text("top_level.txt") or ""
        files = [str(f).split("/")[0] for f in (d.files or [])]
        if name in top.split() or name in files:
            found.add(d.metadata["Name"])
    return sorted(found)

def dist_version(name):
    return attempt(lambda: md.version(name))

def origin(name):
    spec = attempt(lambda: importlib.util.find_spec(name))
    if spec is None:
        return None
    if spec.origin and spec.origin not in ("namespace", "built-in"):
        return spec.origin
    locs = list(spec.submodule_search_locations or [])
    return locs[0] if locs else None

marker_env = {
    "implementation_name": sys.implementation.name,
    "implementation_version": "%d.%d.%d" % sys.implementation.version[:3],
    "os_name": os.name,
    "platform_machine": platform.machine(),
    "platform_python_implementation": platform.python_implementation(),
    "platform_release": platform.release(),
    "platform_system": platform.system(),
    "platform_version": platform.version(),
    "python_full_version": platform.python_version(),
    "python_version": ".".join(platform.python_version_tuple()[:2]),
    "sys_platform": sys.platform,
}
def pip_isolation():
    # pip keeps the value of `no-build-isolation` as its build_isolation setting itself
    # (pip/_internal/cli/parser.py; pip's docs, Configuration: "falsy values have to be used" for
    # no- options): "false" turns isolation off, "true" or "1" turns it on.
    import configparser
    env, home = os.environ, os.path.expanduser("~")
    files = []
    if env.get("PIP_CONFIG_FILE") != os.devnull:
        files += [env["PIP_CONFIG_FILE"]] if env.get("PIP_CONFIG_FILE") else []
        if sys.platform == "win32":
            files += [os.path.join(env.get("ProgramData", "C:\\ProgramData"), "pip", "pip.ini"),
                      os.path.join(home, "pip", "pip.ini"),
                      os.path.join(env.get("APPDATA", home), "pip", "pip.ini")]
        else:
            xdg = env.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep)
            user = env.get("XDG_CONFIG_HOME", os.path.join(home, ".config"))
            files += [os.path.join(d, "pip", "pip.conf") for d in xdg]
            files += ["/etc/pip.conf", os.path.join(home, ".pip", "pip.conf")]
            files.append(os.path.join(user, "pip", "pip.conf"))
        files.append(os.path.join(sys.prefix, "pip.ini" if sys.platform == "win32" else "pip.conf"))
    parsers = []
    for path in files:
        cp = configparser.RawConfigParser()
        if attempt(lambda: cp.read(path), []):
            parsers.append((path, cp))
    found = None
    for section in ("global", "install"):  # pip's order: every file's [global], then [install]
        for path, cp in parsers:
            if cp.has_option(section, "no-build-isolation"):
                where = "%s [%s] no-build-isolation" % (path, section)
                found = (cp.get(section, "no-build-isolation"), where)
    if env.get("PIP_NO_BUILD_ISOLATION"):
        found = (env["PIP_NO_BUILD_ISOLATION"], "PIP_NO_BUILD_ISOLATION")
    if found is None:
        return None, None
    word = found[0].strip().lower()
    value = True if word in ("y", "yes", "t", "true", "on", "1") else (
        False if word in ("n", "no", "f", "false", "off", "0") else None)
    return value, "%s = %s" % (found[1], found[0].strip())

def launcher_headers():
    # where Triton's launcher (cuda_utils.c / hip_utils.c) finds Python.h and, on Windows, the libs
    import glob, sysconfig
    scheme = attempt(sysconfig.get_default_scheme, None) or None
    scheme = "posix_prefix" if scheme == "posix_local" else scheme
    include = attempt(lambda: sysconfig.get_paths(scheme=scheme)["include"])
    libs = None
    if sys.platform == "win32":
        prefixes = {sys.base_exec_prefix, sys.exec_prefix}
        libs = any(glob.glob(os.path.join(p, "libs", "python3*.lib")) for p in prefixes)
    return include, bool(include and os.path.isfile(os.path.join(include, "Python.h"))), libs

include_dir, python_h, python_libs = attempt(launcher_headers, (None, None, None))
pip_iso, pip_iso_source = attempt(pip_isolation, (None, None))
emit("@PY@", {
    "version": platform.python_version(),
    "executable": sys.executable,
    "prefix": sys.prefix,
    "platform": sys.platform,
    "in_venv": sys.prefix != getattr(sys, "base_prefix", sys.prefix) or bool(os.environ.get("CONDA_PREFIX")),
    "marker_env": marker_env,
    "sageattention": dist_version("sageattention"),
    "sageattention_origin": origin("sageattention"),
    "sagebuild_origin": origin("sagebuild"),
    "include_dir": include_dir,
    "python_h": python_h,
    "python_libs": python_libs,
    "pip_isolation": pip_iso,
    "pip_isolation_source": pip_iso_source,
})

out = {"importable": False}
try:
    import torch
except BaseException as e:
    out["error"] = why(e)
else:
    out["importable"] = True
    v = torch.version
    out["version"] = str(torch.__version__)
    out["hip"] = getattr(v, "hip", None)
    out["cuda"] = getattr(v, "cuda", None)
    out["build"] = "rocm" if out["hip"] else ("cuda" if out["cuda"] else "cpu")
    out["cuda_available"], out["device_count"] = False, 0
    try:
        if torch.cuda.is_available():
            out["cuda_available"], out["device_count"] = True, int(torch.cuda.device_count())
    except Exception as e:
        out["device_error"] = why(e)
    devices = []
    for i in range(out["device_count"]):
        try:
            p = torch.cuda.get_device_properties(i)
            raw = getattr(p, "gcnArchName", None) if out["hip"] else "%d.%d" % (p.major, p.minor)
            devices.append({"index": i, "name": p.name, "raw_arch": raw,
                            "total_mem_gb": round(p.total_memory / 2**30, 2)})
        except Exception as e:
            devices.append({"index": i, "name": "error: %s" % e, "raw_arch": None})
    out["devices"] = devices
    for line in attempt(lambda: torch._C._show_config(), "").splitlines():
        for key, prefix in (("hip_runtime", "HIP Runtime"), ("miopen", "MIOpen")):
            if line.strip().startswith(prefix):
                out[key] = line.split()[-1]
    if out["cuda"]:
        out["cudnn"] = attempt(lambda: str(torch.backends.cudnn.version() or "") or None)
    out["torch_requires"] = attempt(lambda: md.requires("torch") or [], [])

tri = {"importable": False, "distributions": dists_providing("triton")}
tri["distribution_versions"] = {d: dist_version(d) for d in tri["distributions"]}
try:
    import triton
    tri["importable"] = True
    tri["version"] = getattr(triton, "__version__", None)
except BaseException as e:
    tri["error"] = why(e)
out["triton"] = tri
emit("@TORCH@", out)
""".replace("@PY@", PY_TAG).replace("@TORCH@", TORCH_TAG)


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _tagged(stdout: str, tag: str) -> Optional[dict[str, Any]]:
    for line in stdout.splitlines():
        if line.startswith(tag):
            try:
                return json.loads(line[len(tag) :])
            except json.JSONDecodeError:
                return None
    return None


def run_script(
    python: str, env: Mapping[str, str], timeout: float
) -> tuple[Optional[dict], Optional[dict], Optional[str], float]:
    """Run the probe → (python dict, torch dict, error, seconds). Never raises."""
    start = time.monotonic()
    try:  # a neutral working directory: a ./torch or ./sageattention folder must not break the probe
        p = subprocess.run(
            [python, "-c", SCRIPT],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env),
            cwd=tempfile.gettempdir(),
            stdin=subprocess.DEVNULL,
            errors="replace",
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"the torch probe did not finish within {timeout:.0f} s (import torch hangs?)"
        return _tagged(out, PY_TAG), None, err, time.monotonic() - start
    except OSError as e:
        return None, None, f"cannot run {python}: {e.strerror or e}", time.monotonic() - start
    seconds = time.monotonic() - start
    py, tor = _tagged(p.stdout, PY_TAG), _tagged(p.stdout, TORCH_TAG)
    if p.returncode < 0:
        err = (
            f"the interpreter was killed by {_signal_name(p.returncode)} while importing "
            "torch/triton (a broken GPU library install?)"
        )
        return py, None, err, seconds
    if tor is None:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no output"]
        return py, None, f"the torch probe failed (exit code {p.returncode}): {tail[0]}", seconds
    return py, tor, None, seconds


def _fields_of(cls: type, raw: dict, **given: Any) -> Any:
    """``cls`` from the probe's JSON: the keys that are fields of ``cls``, then ``given``."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{**{k: v for k, v in raw.items() if k in names}, **given})


def triton_facts(tri: dict, requires: list[str], marker_env: Optional[dict]) -> TritonFacts:
    """Compare the distribution that provides ``triton`` with torch's declared pin. Its markers are
    evaluated here with the target's marker environment, so the target needs only the stdlib."""
    from packaging.markers import UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name as canon
    from packaging.version import InvalidVersion, Version

    providers: list[str] = list(tri.get("distributions") or [])
    wanted = {canon(p) for p in providers}
    candidates = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if canon(req.name) in wanted or "triton" in canon(req.name):
            applies: Optional[bool] = True
            if req.marker is not None:
                try:
                    applies = req.marker.evaluate({**marker_env, "extra": ""}) if marker_env else None
                except UndefinedEnvironmentName:
                    applies = None
            candidates.append((text, applies, req))
    # Prefer the one whose markers hold for the target, then one naming an installed provider.
    key = lambda c: (c[1] is not True, canon(c[2].name) not in wanted)
    text, applies, req = min(candidates, key=key, default=(None, None, None))
    same = [p for p in providers if req is not None and canon(p) == canon(req.name)]
    dist = (same or providers or [None])[0]
    dist_version = (tri.get("distribution_versions") or {}).get(dist) if dist else None
    satisfied: Optional[bool] = None
    if req is not None and applies is not False:
        if not same:
            satisfied = False  # the required distribution is not what provides `import triton`
        elif dist_version is not None:
            try:
                satisfied = req.specifier.contains(Version(dist_version), prereleases=True)
            except InvalidVersion:
                satisfied = None
    return TritonFacts(
        importable=bool(tri.get("importable")),
        version=tri.get("version"),
        error=tri.get("error"),
        distribution=dist,
        distributions=providers,
        distribution_version=dist_version,
        torch_requirement=text,
        requirement_applies=applies,
        satisfied=satisfied,
    )


def torch_facts(
    tor: Optional[dict], error: Optional[str], marker_env: Optional[dict], seconds: Optional[float] = None
) -> TorchFacts:
    """Probe output (or its error) → ``TorchFacts``; arch names canonical via ``archs``."""
    if tor is None:
        return TorchFacts(
            importable=False, error=error or "the torch probe produced no result", seconds=seconds
        )
    devices = []
    for i, d in enumerate(tor.get("devices") or []):
        arch = archs.normalize(d["raw_arch"]) if d.get("raw_arch") else None
        devices.append(
            _fields_of(DeviceInfo, d, index=int(d.get("index", i)), name=str(d.get("name")), arch=arch)
        )
    return _fields_of(
        TorchFacts,
        tor,
        importable=bool(tor.get("importable")),
        error=tor.get("error") or tor.get("device_error"),
        cuda_available=bool(tor.get("cuda_available")),
        device_count=int(tor.get("device_count") or 0),
        devices=devices,
        triton=triton_facts(tor.get("triton") or {}, list(tor.get("torch_requires") or []), marker_env),
        seconds=round(seconds, 2) if seconds is not None else None,
    )


def probe(
    python: Optional[str] = None, env: Optional[Mapping[str, str]] = None, timeout: float = 60.0
) -> tuple[PythonFacts, TorchFacts, dict]:
    """Probe ``python`` (default: this interpreter) → (python facts, torch facts, raw python dict)."""
    python = python or sys.executable
    py, tor, err, seconds = run_script(python, os.environ if env is None else env, timeout)
    py = py or {}
    facts = _fields_of(
        PythonFacts, py, executable=py.get("executable") or python, in_venv=bool(py.get("in_venv"))
    )
    return facts, torch_facts(tor, err, py.get("marker_env"), seconds), py
