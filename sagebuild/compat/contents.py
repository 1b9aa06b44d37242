"""The files of our ``sageattention`` distribution and its RECORD. Its version, ``2.2.0+sagebuild.0.1.0``,
compares as upstream's 2.2.0 (diffusers' ``>= 2.1.1`` gate passes) and says whose it is."""

from __future__ import annotations

import base64
import hashlib
import json
import re

from sagebuild._version import __version__
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

_CORE = f'''"""sageattention.core: where upstream defines its functions (some callers import from here)."""

{_IMPORTS}
__all__ = {list(NAMES)!r}
'''

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
