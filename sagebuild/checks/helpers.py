"""Small readers shared by the checks: versions against specifiers, torch's facts, hidden GPUs."""

from __future__ import annotations

import re
from typing import Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from sagebuild.checks.registry import Verdict, fail, ok, skip
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


def leading_version(text: Optional[str]) -> Optional[Version]:
    """``6.4.43482-0f2d60242`` → 6.4.43482; ``2.13.0+cpu`` → 2.13.0+cpu; junk → None."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        m = re.match(r"\d+(?:\.\d+)*", text.strip())
        return Version(m.group(0)) if m else None


def in_range(version: Optional[str], spec: str) -> Optional[bool]:
    """Whether ``version`` satisfies ``spec`` ("" = anything); None when the version is unreadable."""
    v = leading_version(version)
    if v is None:
        return None
    try:
        return SpecifierSet(spec).contains(v, prereleases=True)
    except InvalidSpecifier:
        return None


def range_verdict(what: str, version: Optional[str], spec: str, profile: Profile, fix: str) -> Verdict:
    """ok when ``version`` satisfies the profile's ``spec``, else fail (an unreadable one too)."""
    if in_range(version, spec):
        return ok(f"{what} {version} satisfies {profile.name}'s '{spec or 'any'}'")
    return fail(f"{what} {version} is outside {profile.name}'s range '{spec}'", fix)


def major_of(version: Optional[str]) -> Optional[int]:
    v = leading_version(version)
    return v.major if v is not None else None


def torch_ok(facts: Facts) -> bool:
    return facts.torch.importable and facts.torch.build is not None


NO_TORCH = skip("torch is not importable (see torch-import)")  # the checks that read torch's facts


_HIDE_VALUES = ("", "-1", "none", "void")
VISIBLE_VARS = {  # the first is the one to set
    "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
    "cuda": ("CUDA_VISIBLE_DEVICES",),
    "cpu": (),
}


def hiding_vars(facts: Facts, vendor: str) -> list[str]:
    return [
        v for v in VISIBLE_VARS[vendor] if v in facts.env and facts.env[v].strip().lower() in _HIDE_VALUES
    ]
