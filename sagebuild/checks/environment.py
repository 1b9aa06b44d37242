"""Checks on what else is installed or lying around: the `sageattention` this Python imports (ours or
a conflicting one), a shadowing source folder, the cache folder builds go to, and the extension
`sagebuild compile` built."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from sagebuild import archs
from sagebuild.checks.registry import Verdict, check, fail, ok, skip, warn
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


@check("sageattention-installed", "No conflicting sageattention")
def check_sageattention_installed(facts: Facts, profile: Profile) -> Verdict:
    c = facts.conflicts
    if c.sageattention is None:
        return ok("no `sageattention` distribution installed")
    if "+sagebuild." in c.sageattention:  # ours (`sagebuild compat install`): no conflict
        return ok(f"sageattention {c.sageattention} is sagebuild's own (`sagebuild compat`)")
    return warn(
        f"sageattention {c.sageattention} is installed ({c.sageattention_location}): code that imports "
        "`sageattention` gets that build, not sagebuild's kernels",
        f"{facts.python.executable or 'python'} -m pip uninstall -y sageattention "
        "(sagebuild offers `from sagebuild import sageattn` with the same signature)",
    )


@check("shadowing", "No shadowing source folder")
def check_shadowing(facts: Facts, profile: Profile) -> Verdict:
    sh = facts.conflicts.shadowing
    if not sh:
        own = [f"./{Path(p).name}/" for p in facts.conflicts.installed_here]
        if own:
            return ok(
                f"{', '.join(own)} in {facts.cwd} is the installed package itself (an editable install): "
                "nothing is shadowed"
            )
        return ok(f"no sageattention/ or sagebuild/ package folder in {facts.cwd}")
    what = "; ".join(
        f"./{s.name}/ shadows the installed {s.name} at {s.installed_at}"
        if s.installed_at
        else f"./{s.name}/ shadows the {s.name} import (not installed)"
        for s in sh
    )
    return fail(
        f'{what}: Python imports the folder in the working directory first (errors like "cannot '
        "import name '_fused' from partially initialized module\")",
        "run from another directory (cd ..), or rename the folder: "
        + ", ".join(f"mv {s.name} {s.name}-src" for s in sh),
    )


# ---- the built extension ---------------------------------------------------------------------


@check("cache-dir", "Build cache folder writable")
def check_cache_dir(facts: Facts, profile: Profile) -> Verdict | None:
    """``compile`` writes the extension under the cache folder (~/.cache/sagebuild): a read-only HOME
    or a cache path through a file stops it."""
    where = facts.extension.dir
    if not where:
        return None
    if facts.extension.unwritable is None:
        return ok(f"{where} can be created and written")
    return fail(
        f"the build cache {where} cannot be created or written: {facts.extension.unwritable}",
        "export SAGEBUILD_CACHE_DIR=/a/writable/folder (e.g. /tmp/sagebuild-cache), or make HOME writable",
    )


@check("extension", "Built extension")
def check_extension(facts: Facts, profile: Profile) -> Verdict:
    """What `sagebuild compile` built (xformers.info style), and whether it still fits."""
    ext = facts.extension
    if not facts.torch.importable:
        return skip("torch is not importable")
    compile_cmd = f"sagebuild compile --profile {profile.name}"
    if not ext.built:
        return skip(
            f"not built yet in {ext.dir} (optional: attention quantizes with Triton unless asked for "
            "quantization_backend='ext')",
            compile_cmd,
        )
    info = ext.info or {}
    t = info.get("torch", {})
    summary = (
        f"built {info.get('built_at', '?')} for {', '.join(info.get('archs') or ['cpu'])} "
        f"(MAX_JOBS={info.get('jobs', '?')}, torch {t.get('version', '?')}, {info.get('seconds', '?')} s); "
        f"sha256 {str(info.get('sha256', '?'))[:12]}…"
    )
    if not ext.sha256_ok:
        return fail(
            f"{summary}: the library in {ext.dir} is missing or changed since it was verified", compile_cmd
        )
    built_archs = set(info.get("archs") or [])
    gpus = [a for a in facts.gpu_archs() if a in archs.ARCHS and archs.ARCHS[a].vendor == profile.vendor]
    missing = [a for a in gpus if built_archs and a not in built_archs]
    if missing:
        return warn(
            f"{summary}; this machine's {', '.join(missing)} is not in the build (calls that ask for "
            "quantization_backend='ext' stop with an error there; the default quantizes with Triton)",
            f"sagebuild compile --arch {','.join(sorted(built_archs | set(missing)))}",
        )
    return ok(summary)
