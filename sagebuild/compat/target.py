"""What an interpreter (this one, or ``--python``) would import as ``sageattention``, and which
distributions it has: read by running a standard-library script in it."""

from __future__ import annotations

import os
import sys
from typing import Any, Optional

from sagebuild.compat.contents import DIST_NAME, MARKER_FILE, PACKAGE
from sagebuild.dists import run_json

# Runs in the target interpreter (any Python >= 3.8): prints one JSON document.
_PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, sys, sysconfig
name, package, marker = sys.argv[1:4]
paths = sysconfig.get_paths()
doc = {"executable": sys.executable, "python_version": "%d.%d.%d" % sys.version_info[:3],
       "purelib": paths["purelib"], "platlib": paths["platlib"], "origin": None, "dists": []}
try:
    spec = importlib.util.find_spec(package)
except Exception as exc:
    spec, doc["origin_error"] = None, "%s: %s" % (type(exc).__name__, exc)
if spec is not None:
    doc["origin"] = spec.origin if spec.origin not in (None, "namespace") else (
        list(spec.submodule_search_locations or []) or [None])[0]
seen = set()
for dist in md.distributions():
    if (dist.metadata["Name"] or "").lower().replace("_", "-") != name:
        continue
    path = str(getattr(dist, "_path", "")) or None
    if path in seen:
        continue
    seen.add(path)
    ours = dist.read_text(marker)
    doc["dists"].append({
        "version": dist.version, "dist_info": path,
        "location": os.path.dirname(path) if path else None,
        "installer": (dist.read_text("INSTALLER") or "").strip() or None,
        "ours": json.loads(ours) if ours else None,
        "has_record": dist.read_text("RECORD") is not None,
        "direct_url": json.loads(dist.read_text("direct_url.json") or "null"),
    })
try:
    doc["version"] = md.version(name)
except Exception:
    doc["version"] = None
print(json.dumps(doc))
"""


def status(python: Optional[str] = None) -> dict[str, Any]:
    """Which ``sageattention`` the interpreter would import, from which distribution, and whose.

    ``whose``: "sagebuild" (our distribution provides the module), "upstream" (another
    distribution's), "unpackaged" (a module on sys.path no distribution claims: a source folder, a
    path hack), or None when nothing would be imported."""
    exe = python or sys.executable
    facts = run_json(exe, _PROBE, DIST_NAME, PACKAGE, MARKER_FILE, what="read the site-packages", timeout=60)
    origin = facts["origin"]
    provider = None
    module_dir = origin and (os.path.dirname(origin) if origin.endswith(".py") else origin)
    if module_dir:
        here = os.path.realpath(module_dir)
        for dist in facts["dists"]:
            if dist["location"] and here == os.path.realpath(os.path.join(dist["location"], PACKAGE)):
                provider = dist
    if origin is None:
        whose = None
    elif provider is None:
        whose = "unpackaged"
    else:
        whose = "sagebuild" if provider["ours"] else "upstream"
    return {
        "python": facts["executable"],
        "python_version": facts["python_version"],
        "site_packages": facts["purelib"],
        "import_origin": origin,
        "whose": whose,
        "version": facts["version"],
        "distribution": provider,
        "distributions": facts["dists"],
    }


def describe(st: dict[str, Any]) -> str:
    """One sentence for people (``status``'s text output, the doctor's check)."""
    if st["whose"] is None:
        n = len(st["distributions"])
        extra = f"; {n} sageattention distribution(s) installed" if n else ""
        return f"no `sageattention` importable by {st['python']}{extra}"
    version = st["version"] or "no version"
    if st["whose"] == "sagebuild":
        return f"sageattention {version} (sagebuild's kernels) from {st['import_origin']}"
    if st["whose"] == "upstream":
        installer = st["distribution"]["installer"]
        return f"sageattention {version} (upstream build, installer {installer}) from {st['import_origin']}"
    return f"an unpackaged sageattention module at {st['import_origin']} (no distribution claims it)"
