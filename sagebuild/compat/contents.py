"""The files of our ``sageattention`` distribution and its RECORD. Its version, ``2.2.0+sagebuild.0.1.0``,
compares as upstream's 2.2.0 (diffusers' ``>= 2.1.1`` gate passes) and says whose it is."""

from __future__ import annotations

import base64
import hashlib
import json
import re

from sagebuild._version import __version__
from sagebuild.upstream_api import CORE_NAMES, INTERNAL_MODULES
from sagebuild.upstream_api import UPSTREAM_NAMES as NAMES  # what the installed package re-exports

UPSTREAM_API_VERSION = "2.2.0"
DIST_NAME = "sageattention"
PACKAGE = "sageattention"
MARKER_FILE = "sagebuild.json"  # in the dist-info: the distribution is ours
INSTALLER = "sagebuild"


def local_label(version: str) -> str:
    """Our version as a PEP 440 local label (alphanumerics joined by dots)."""
    return ".".join(p for p in re.split(r"[^0-9A-Za-z]+", version) if p) or "0"


DIST_VERSION = f"{UPSTREAM_API_VERSION}+sagebuild.{local_label(__version__)}"
DIST_INFO = f"{DIST_NAME}-{DIST_VERSION}.dist-info"

_IMPORTS = "from sagebuild.attention.functions import (\n" + "".join(f"    {n},\n" for n in NAMES) + ")\n"

_INIT = f'''"""sageattention, provided by sagebuild (`sagebuild compat install`).

Upstream SageAttention {UPSTREAM_API_VERSION}'s public API on sagebuild's kernels. Remove with
`sagebuild compat remove` or `pip uninstall sageattention`.
"""

{_IMPORTS}from sagebuild.attention.functions import sageattn_qk_int8_pv_fp8_triton

__version__ = "{DIST_VERSION}"
__provider__ = "sagebuild"  # whose package this is, for callers (compat status reads the dist-info)

__all__ = {list(NAMES) + ["sageattn_qk_int8_pv_fp8_triton"]!r}
'''

ARCHS = ("sm80", "sm89", "sm90")


def _reexport(
    doc: str, sources: dict[str, tuple[str, str]], head: str = "", also: tuple[str, ...] = ()
) -> str:
    """A module re-exporting ``sources`` (name -> (our module, attribute path)) after ``head``;
    ``also``: names ``head`` defines, exported too."""
    mods = sorted({mod for mod, _ in sources.values()})
    alias = {mod: f"_m{i}" for i, mod in enumerate(mods)}
    lines = [f'"""{doc}"""', "", head + "".join(f"import {m} as {alias[m]}\n" for m in mods)]
    lines += [f"{name} = {alias[mod]}.{attr}" for name, (mod, attr) in sources.items()]
    lines.append(f"\n__all__ = {[*also, *sorted(sources)]!r}\n")
    return "\n".join(lines)


_CORE = _reexport(
    "sageattention.core: upstream's functions, quantizers, device queries and Triton forwards "
    "(KJNodes' memory-efficient patches import from here), on sagebuild's kernels.",
    CORE_NAMES,
    _IMPORTS
    + f"from . import {', '.join(f'{a}_compile' for a in ARCHS)}\n\n"
    + "".join(
        f"{a.upper()}_ENABLED = True  # sagebuild runs these names on any GPU its kernels serve\n"
        for a in ARCHS
    )
    + "\n",
    also=NAMES,
)


def _internal_files() -> dict[str, bytes]:
    """upstream's internal modules (``INTERNAL_MODULES``) as files of the package."""
    out = {f"{PACKAGE}/triton/__init__.py": b'"""sageattention.triton (sagebuild compat)."""\n'}
    for dotted, sources in INTERNAL_MODULES.items():
        name = dotted.rsplit(".", 1)[-1]
        arch = name.removeprefix("_qattn_").removesuffix("_compile")
        head = f"from . import _qattn_{arch}\n\n" if name.endswith("_compile") else ""  # KJNodes looks for it
        doc = f"{dotted}: upstream's names on sagebuild's kernels (sagebuild compat)."
        out[dotted.replace(".", "/") + ".py"] = _reexport(doc, sources, head).encode()
    return out


_METADATA = (
    "Metadata-Version: 2.1\n"
    f"Name: {DIST_NAME}\n"
    f"Version: {DIST_VERSION}\n"
    "Summary: SageAttention's API on sagebuild's quantized attention kernels (sagebuild compat)\n"
    f"Requires-Dist: sagebuild=={__version__}\n"
)


def files() -> dict[str, bytes]:
    """Relative path (to site-packages) → content, RECORD excluded."""
    marker = {"provider": "sagebuild", "sagebuild_version": __version__, "api_version": UPSTREAM_API_VERSION}
    return {
        f"{PACKAGE}/__init__.py": _INIT.encode(),
        f"{PACKAGE}/core.py": _CORE.encode(),
        **_internal_files(),
        f"{DIST_INFO}/METADATA": _METADATA.encode(),
        f"{DIST_INFO}/INSTALLER": f"{INSTALLER}\n".encode(),
        f"{DIST_INFO}/top_level.txt": f"{PACKAGE}\n".encode(),
        f"{DIST_INFO}/{MARKER_FILE}": (json.dumps(marker, indent=2) + "\n").encode(),
    }


def record_hash(data: bytes) -> str:
    """A RECORD hash: ``sha256=`` and the urlsafe base64 digest without padding (the wheel spec)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def record(contents: dict[str, bytes]) -> bytes:
    """The RECORD of ``contents`` (CSV: path, hash, size); RECORD's own line has neither."""
    lines = [f"{path},{record_hash(data)},{len(data)}" for path, data in sorted(contents.items())]
    lines.append(f"{DIST_INFO}/RECORD,,")
    return ("\n".join(lines) + "\n").encode()
