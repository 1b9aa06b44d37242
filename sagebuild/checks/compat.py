"""The `sageattention` this Python would import (``sagebuild compat status``'s facts)."""

from __future__ import annotations

import os
import sys

from sagebuild.checks.registry import Verdict, check, ok, skip, warn
from sagebuild.errors import SagebuildError
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


@check("sageattention-compat", "sageattention module")
def check_sageattention_compat(facts: Facts, profile: Profile) -> Verdict:
    """Which `sageattention` imports, from which distribution, whose; ours kept at our version."""
    from sagebuild._version import __version__
    from sagebuild.compat.contents import DIST_VERSION
    from sagebuild.compat.target import describe, status

    python = facts.python.executable
    c = facts.conflicts
    if facts.root != "/" or not python or not os.path.isfile(python):
        # a probed system image (--root) or no interpreter to run: the probe's facts alone
        if c.sageattention is None:
            return ok("no `sageattention` distribution installed; `sagebuild compat install` provides one")
        if "+sagebuild." not in c.sageattention:
            return ok(f"sageattention {c.sageattention} (upstream) at {c.sageattention_location}")
        if c.sageattention != DIST_VERSION:
            return warn(
                f"sageattention {c.sageattention} at {c.sageattention_location} was written by another "
                f"sagebuild version (this one writes {DIST_VERSION})",
                "sagebuild compat install",
            )
        return ok(f"sageattention {c.sageattention} (sagebuild's kernels) at {c.sageattention_location}")
    try:
        st = status(python)
    except SagebuildError as err:
        return skip(f"could not ask {python}: {err.message}")
    where = f" --python {python}" if python != sys.executable else ""
    if st["whose"] == "unpackaged":
        return warn(describe(st), f"remove or rename that folder, then `sagebuild compat install{where}`")
    if st["whose"] == "sagebuild":
        installed = (st["distribution"]["ours"] or {}).get("sagebuild_version")
        if installed != __version__:
            return warn(
                f"{describe(st)}, written by sagebuild {installed} (this is {__version__})",
                f"sagebuild compat install{where}",
            )
        return ok(describe(st))
    if st["whose"] is None:
        return ok(f"{describe(st)}; `sagebuild compat install{where}` provides one on our kernels")
    return ok(f"{describe(st)}; `sagebuild compat install --force{where}` replaces it (backed up first)")
