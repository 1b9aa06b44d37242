"""The doctor's closing sentence: where this machine stands, from the facts and the verdicts."""

from __future__ import annotations

from sagebuild.checks.registry import Check
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


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
