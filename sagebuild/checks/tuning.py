"""The attention-tuning check: whether ``sageattn`` runs measured choices on this GPU (a tuning
record from ``sagebuild tune``, or the shipped measurements of its family), and whether the record
still holds after a torch, Triton or driver change. No torch import: the facts are the probe's."""

from __future__ import annotations

from typing import Optional

from sagebuild import archs
from sagebuild.checks.registry import Verdict, check, ok, skip, warn
from sagebuild.probe.facts import Facts
from sagebuild.profiles import Profile

TUNE = "sagebuild tune --preset diffusion (or --preset mission; --from-record FILE for your own calls)"
# fingerprint fields whose change makes a record stale (the GPU's name is compared separately)
_STALE_FIELDS = ("torch", "triton", "driver", "runtime", "sagebuild", "table")


def facts_fingerprint(facts: Facts, arch: str) -> dict[str, Optional[str]]:
    """What the probe knows of ``Fingerprint``'s fields for the first GPU of ``arch`` (None:
    unknown, not compared), from the probed interpreter's torch and this machine's driver."""
    from sagebuild._version import __version__
    from sagebuild.kernels.triton import configs

    t = facts.torch
    device = next((d for d in t.devices if d.arch == arch), None)
    runtime = f"hip {t.hip}" if t.hip else (f"cuda {t.cuda}" if t.cuda else None)
    return {
        "gpu": device.name if device else None,
        "arch": arch,
        "driver": facts.driver,
        "runtime": runtime,
        "torch": t.version,
        "triton": t.triton.version,
        "sagebuild": __version__,
        "table": configs.CONFIG_TABLE_VERSION,
    }


def _changes(recorded: object, now: dict[str, Optional[str]], names: tuple[str, ...]) -> list[str]:
    return [
        f"{n} {getattr(recorded, n) or '?'} -> {now[n]}"
        for n in names
        if now.get(n) is not None and getattr(recorded, n) != now[n]
    ]


@check("attention-tuning", "sageattn tuned for this GPU")
def check_attention_tuning(facts: Facts, profile: Profile) -> Verdict:
    from sagebuild.tuning import defaults, record

    gpu = facts.gpu_archs()
    if profile.vendor == "cpu" or not gpu:
        return skip("no GPU: nothing to tune")
    arch = gpu[0]
    row = archs.ARCHS.get(arch)
    family = row.family if row else arch
    path = record.record_path(arch)
    shipped = family in defaults.families()
    if not path.is_file():
        if shipped:
            return ok(
                f"no tuning record for {arch} yet; sageattn follows the shipped {family} measurements "
                "(SDPA where it measured faster); `sagebuild tune` would measure this very GPU"
            )
        return warn(
            f"no tuning record for {arch} ({family}): the shipped launch configs for {family} were never "
            "measured, and no call is routed to SDPA where it is faster",
            TUNE,
        )
    try:
        rec = record.read(path)
    except record.TuningRecordError as exc:
        return warn(f"the tuning record is unusable: {exc.message}", f"delete {path}, then {TUNE}")
    now = facts_fingerprint(facts, arch)
    stale = _changes(rec.fingerprint, now, _STALE_FIELDS)
    other_gpu = _changes(rec.fingerprint, now, ("gpu",))
    if stale or other_gpu:
        return warn(
            f"the tuning record {path} is stale ({'; '.join(other_gpu + stale)}): sageattn ignores it and "
            "runs the shipped table",
            f"re-tune: {TUNE}",
        )
    return ok(
        f"{len(rec.classes)} tuned classes for {rec.fingerprint.gpu} ({arch}) in {path}, tuned {rec.created}"
    )
