"""The doctor's check registry: ``@check(id, title)`` registers a function of ``(Facts, Profile)``
that returns ``ok/warn/fail/skip(...)`` (None: stay silent), in import order, the table's order;
and what the verdicts add up to (``overall``, ``counts``, the closing sentence ``verdict``).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, astuple, dataclass
from typing import Callable, Literal, Optional, get_args

from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile

Status = Literal["ok", "warn", "fail", "skip"]
STATUSES: tuple[str, ...] = get_args(Status)


@dataclass
class Check:
    """One verdict: what was checked, how it went, what was seen, and the exact fix."""

    id: str
    title: str
    status: Status
    detail: str
    fix: Optional[str] = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Optional[str]]:
        return asdict(self)


@dataclass(frozen=True)
class Verdict:
    """A check's outcome before the decorator names it (status, what was seen, the fix)."""

    status: Status
    detail: str
    fix: Optional[str] = None


# ok("what was seen", "the fix"): a check's outcome, one helper per status
ok = functools.partial(Verdict, "ok")
warn = functools.partial(Verdict, "warn")
fail = functools.partial(Verdict, "fail")
skip = functools.partial(Verdict, "skip")


CheckFn = Callable[[Facts, Profile], Optional[Check]]
REGISTRY: list[CheckFn] = []


def check(check_id: str, title: str) -> Callable[[Callable[[Facts, Profile], Optional[Verdict]]], CheckFn]:
    if check_id in {fn.check_id for fn in REGISTRY}:  # type: ignore[attr-defined]
        raise ValueError(f"a doctor check with id {check_id!r} is already registered")

    def decorate(fn: Callable[[Facts, Profile], Optional[Verdict]]) -> CheckFn:
        @functools.wraps(fn)
        def named(facts: Facts, profile: Profile) -> Optional[Check]:
            try:
                result = fn(facts, profile)
            except Exception as e:  # a bug in one check must not hide the others
                result = warn(
                    f"the check itself failed: {type(e).__name__}: {e}",
                    "report this as a sagebuild bug, with `sagebuild doctor --json`",
                )
            return None if result is None else Check(check_id, title, *astuple(result))

        named.check_id = check_id  # type: ignore[attr-defined]
        REGISTRY.append(named)
        return named

    return decorate


def run_checks(facts: Facts, profile: Profile) -> list[Check]:
    """Run every registered check in order; one that raises is reported as a warning under its id."""
    return [c for c in (fn(facts, profile) for fn in REGISTRY) if c is not None]


def overall(checks: list[Check]) -> str:
    """``fail`` if any check failed, else ``warn`` if any warned, else ``ok``."""
    statuses = {c.status for c in checks}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


def counts(checks: list[Check]) -> dict[str, int]:
    """How many checks ended in each status, in ``STATUSES`` order."""
    return {s: sum(1 for c in checks if c.status == s) for s in STATUSES}


def verdict(facts: Facts, profile: Profile, why: str, checks: list[Check]) -> str:
    """One honest sentence or three on where this machine stands, for the end of the report."""
    fails = [c.id for c in checks if c.status == "fail"]
    warns = [c.id for c in checks if c.status == "warn"]
    gpus = facts.gpu_archs()
    tail = ""
    if profile.vendor != "cpu":
        head = f"Profile {profile.name} ({why}). "
    elif gpus:
        head = f"GPU {', '.join(gpus)} found, but the cpu profile is in use ({why}). "
    else:
        torch_sees = f"torch {facts.torch.version or '(not importable)'} sees none"
        d = facts.devices  # compute nodes (render nodes exist for any display GPU: not these)
        nodes = (["/dev/kfd"] if d.kfd else []) + (["/dev/dxg"] if d.dxg else []) + list(d.nvidia)
        if nodes:
            found = (
                f"No GPU arch found ({', '.join(nodes)} present, but KFD topology, rocminfo and "
                f"nvidia-smi gave no arch, and {torch_sees})"
            )
        else:
            found = f"No GPU found (no /dev/kfd, /dev/dxg or /dev/nvidia*, and {torch_sees})"
        head = f"{found}; the cpu profile applies ({why}): the golden model and the CPU extension only. "
    if profile.vendor == "cpu":
        tail = (
            "For a GPU: install its driver, then the torch build its profile names "
            "(`sagebuild profiles` lists them; `sagebuild profiles show rdna4-rocm6` for an RX 9070 XT)."
        )
    if fails:
        body = (
            f"{len(fails)} check(s) failed ({', '.join(fails)}): apply the fixes in order and run "
            "`sagebuild doctor` again. "
        )
    elif warns:
        body = f"Usable, with {len(warns)} warning(s) ({', '.join(warns)}). "
    else:
        body = f"Ready. Next: sagebuild compile --profile {profile.name}. "
    return (head + body + tail).rstrip()
