"""Sharing a tuning record: ``sagebuild tune --export FILE`` writes it without paths or environment
(the fingerprint's GPU and versions, each class's winner, SDPA's time, the runner-up and failure
kinds), so that RDNA4, RDNA3 and consumer-NVIDIA owners can attach it to an issue and a maintainer
can merge it into the shipped table (``scripts/merge_tuning_records.py``). No torch import."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Optional

from sagebuild.errors import Exit, SagebuildError
from sagebuild.tuning import record

EXPORT_NOTE = "exported by `sagebuild tune --export`: no paths or environment; attach it to an issue"
# anything path-like in a failure's text (a compiler's message names the files it read)
_PATH = re.compile(r"(?:[A-Za-z]:)?(?:[\\/][\w.+~-]+){2,}[\\/]?")


def scrub(text: str) -> str:
    """A failure's reason without file paths (``<path>`` in their place)."""
    return _PATH.sub("<path>", text)


def exported(rec: record.TuningRecord) -> dict[str, Any]:
    """The record as shared: paths scrubbed from the failure reasons, a note saying what it is."""
    doc = rec.to_dict()
    for c in doc["classes"]:
        for f in c.get("failed", []):
            f["reason"] = scrub(f["reason"])
    doc["note"] = EXPORT_NOTE
    return doc


def export(source: Path, dest: Path) -> Path:
    """Write the record at ``source`` to ``dest`` as shared (atomically); returns ``dest``."""
    from sagebuild.fsio import write_text_atomic

    rec = record.read(source)
    return write_text_atomic(dest, json.dumps(exported(rec), indent=1) + "\n")


def current_record(arch: Optional[str]) -> Path:
    """This machine's record: the one for ``arch`` (this GPU's), else the only one in the cache
    dir; a clear error when there is none to export."""
    fix = "run `sagebuild tune --preset diffusion` (or mission) first"
    if arch is not None:
        path = record.record_path(arch)
        if path.is_file():
            return path
        raise SagebuildError(f"no tuning record for {arch} at {path}", fix=fix, code=Exit.ENVIRONMENT)
    found = sorted(record.record_dir().glob("*.json")) if record.record_dir().is_dir() else []
    if len(found) == 1:
        return found[0]
    where = record.record_dir()
    what = (
        "no tuning record"
        if not found
        else f"{len(found)} tuning records ({', '.join(p.stem for p in found)})"
    )
    fix = fix if not found else "run it on the GPU whose record to export"
    raise SagebuildError(f"{what} in {where}", fix=fix, code=Exit.ENVIRONMENT)
