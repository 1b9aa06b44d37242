"""Checks on Triton: importable, the version torch pins, the profile's range."""

from __future__ import annotations

from typing import Optional

from sagebuild.checks.helpers import NO_TORCH, range_verdict, torch_ok
from sagebuild.checks.registry import Verdict, check, fail, ok, skip, warn
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


def _triton_fix(facts: Facts, profile: Profile) -> str:
    tri, url = facts.torch.triton, profile.index_url()
    if tri.torch_requirement:
        from packaging.requirements import Requirement

        req = Requirement(tri.torch_requirement)
        line = f"pip install '{req.name}{req.specifier}'"
        if req.name.startswith("pytorch-triton") and url:
            line += f" --index-url {url}"
        others = [d for d in tri.distributions if d != req.name]
        return (f"pip uninstall -y {' '.join(others)} && " if others else "") + line
    if profile.vendor == "rocm" and url:
        return f"pip install pytorch-triton-rocm --index-url {url}"
    return "pip install triton"


@check("triton-import", "Triton importable")
def check_triton_import(facts: Facts, profile: Profile) -> Verdict:
    tri = facts.torch.triton
    if facts.torch.error and not facts.torch.importable and not tri.distributions and not tri.error:
        return skip("the interpreter could not be probed (see torch-import)")
    if tri.importable:
        return ok(f"triton {tri.version} from distribution {tri.distribution or '?'}")
    status = "warn" if profile.vendor == "cpu" else "fail"
    return Verdict(
        status,
        f"import triton failed: {tri.error or 'not installed'}"
        + (" (the cpu profile uses it only for the interpreter tests)" if status == "warn" else ""),
        _triton_fix(facts, profile),
    )


@check("triton-pin", "Triton satisfies torch's pin")
def check_triton_pin(facts: Facts, profile: Profile) -> Verdict:
    tri = facts.torch.triton
    if not torch_ok(facts):
        return NO_TORCH
    if tri.torch_requirement is None:
        return skip(
            f"torch {facts.torch.version} declares no Triton requirement (CPU wheels do not); "
            "nothing to compare"
        )
    if tri.requirement_applies is False:
        return skip(f"torch's requirement '{tri.torch_requirement}' does not apply here (markers)")
    if tri.satisfied:
        extra = [d for d in tri.distributions if d != tri.distribution]
        if extra:
            return warn(
                f"{tri.distribution} {tri.distribution_version} satisfies '{tri.torch_requirement}', "
                f"but {', '.join(extra)} also installs the `triton` module: whichever was installed "
                "last wins",
                f"pip uninstall -y {' '.join(extra)}",
            )
        return ok(f"{tri.distribution} {tri.distribution_version} satisfies '{tri.torch_requirement}'")
    if tri.satisfied is None:
        return warn(
            f"cannot read the version of {tri.distribution} to compare with '{tri.torch_requirement}'",
            _triton_fix(facts, profile),
        )
    have = f"{tri.distribution} {tri.distribution_version}" if tri.distribution else "no distribution"
    return fail(
        f"torch {facts.torch.version} requires '{tri.torch_requirement}'; `import triton` comes from {have}",
        _triton_fix(facts, profile),
    )


@check("triton-version", "Triton version in the profile's range")
def check_triton_version(facts: Facts, profile: Profile) -> Verdict:
    tri = facts.torch.triton
    version = tri.version or tri.distribution_version
    if not profile.versions.triton:
        return skip(f"profile {profile.name} sets no Triton range")
    if version is None:
        return skip("Triton is not installed (see triton-import)")
    fix = f"install the torch the profile names (it brings its Triton): {profile.torch_install}"
    return range_verdict("triton", version, profile.versions.triton, profile, fix)


@check("python-headers", "Python headers for Triton's launcher")
def check_python_headers(facts: Facts, profile: Profile) -> Optional[Verdict]:
    """Triton compiles a C launcher (cuda_utils.c / hip_utils.c) against the interpreter's headers
    the first time a kernel runs, and on Windows links its python3*.lib; embedded Pythons (ComfyUI
    portable) ship neither and slim Linux images lack the headers."""
    py = facts.python
    if py.python_h is None:
        return None  # not probed (a system image, or the interpreter did not run)
    missing = [] if py.python_h else [f"Python.h in {py.include_dir or 'its include dir'}"]
    missing += ["a python3*.lib in its libs folder"] if py.python_libs is False else []
    if not missing:
        return ok(f"Python.h in {py.include_dir}" + (", python3*.lib in libs" if py.python_libs else ""))
    major_minor = ".".join((py.version or "3").split(".")[:2])
    if py.platform == "win32":
        fix = (
            f"copy the `include` and `libs` folders of a full CPython {major_minor} install (same "
            f"version) next to {py.executable}"
        )
    else:
        fix = f"sudo apt install python{major_minor}-dev (Fedora: sudo dnf install python3-devel)"
    return fail(
        f"{py.executable} lacks what Triton's launcher compiles against: {', '.join(missing)} "
        "(`include file 'Python.h' not found` / `Failed to find Python libs` at the first kernel)",
        fix,
    )
