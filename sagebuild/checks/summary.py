"""The doctor's closing sentence: where this machine stands, from the facts and the verdicts."""

from __future__ import annotations

from sagebuild.checks.registry import Check
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile


def verdict(facts: Facts, profile: Profile, why: str, checks: list[Check]) -> str:
    """One honest sentence or three on where this machine stands, for the end of the report."""
    fails = [c for c in checks if c.status == "fail"]
    warns = [c for c in checks if c.status == "warn"]
    gpus = facts.gpu_archs()
    if profile.vendor == "cpu":
        if gpus:
            head = f"GPU {', '.join(gpus)} found, but the cpu profile is in use ({why}). "
        else:
            torch_sees = f"torch {facts.torch.version or '(not importable)'} sees none"
            nodes = _gpu_nodes(facts)
            if nodes:
                found = (
                    f"No GPU arch found ({', '.join(nodes)} present, but KFD topology, rocminfo and "
                    f"nvidia-smi gave no arch, and {torch_sees})"
                )
            else:
                found = f"No GPU found (no /dev/kfd, /dev/dxg or /dev/nvidia*, and {torch_sees})"
            head = f"{found}; the cpu profile applies ({why}): the golden model and the CPU extension only. "
        tail = (
            "For a GPU: install its driver, then the torch build its profile names "
            "(`sagebuild profiles` lists them; `sagebuild profiles show rdna4-rocm6` for an RX 9070 XT)."
        )
    else:
        head = f"Profile {profile.name} ({why}). "
        tail = ""
    if fails:
        return (
            head
            + (
                f"{len(fails)} check(s) failed ({', '.join(c.id for c in fails)}): apply the fixes "
                "in order and run `sagebuild doctor` again. " + tail
            ).rstrip()
        )
    if warns:
        return (
            head
            + (f"Usable, with {len(warns)} warning(s) ({', '.join(c.id for c in warns)}). " + tail).rstrip()
        )
    nxt = f"Ready. Next: sagebuild compile --profile {profile.name}. "
    return (head + nxt + tail).rstrip()


def _gpu_nodes(facts: Facts) -> list[str]:
    """The compute device nodes the probe found (render nodes exist for any display GPU: not these)."""
    d = facts.devices
    return (["/dev/kfd"] if d.kfd else []) + (["/dev/dxg"] if d.dxg else []) + list(d.nvidia)
