"""The current docs (README and docs/*.md; the perf log and copied reports are history) name only
knobs that the registry has and repository files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_knobs import NAME as KNOB  # the knob-name pattern the product-code check uses

from sagebuild import knobs

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
REGISTERED = {k.name for k in knobs.KNOBS}
REPO_PATH = re.compile(r"(?<![\w/.-])((?:scripts|sagebuild|kernels|docs|tests|\.ci)/[\w./-]*\w)")


def _exists(ref: str) -> bool:
    """A file or folder, or ``module.attribute`` of a Python file (``kernels/triton/attn_fwd.f``)."""
    if (ROOT / ref).exists():
        return True
    module, _, _attr = ref.rpartition(".")
    return bool(module) and (ROOT / f"{module}.py").is_file()


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_name_only_registered_knobs_and_existing_files(doc):
    text = doc.read_text(encoding="utf-8")
    assert not {m.group(0) for m in KNOB.finditer(text)} - REGISTERED, (
        "unregistered knobs (sagebuild/knobs.py)"
    )
    assert not {m.group(1) for m in REPO_PATH.finditer(text) if not _exists(m.group(1))}, "missing files"


def test_the_checks_catch_a_stale_name():
    assert KNOB.search("set `SAGEBUILD_KV_FUSED=1`").group(0) not in REGISTERED
    assert not _exists("scripts/experiments/sm90_attn/kernel.cu") and _exists("scripts/ab_env.py")
    assert _exists("kernels/triton/attn_fwd.attention_forward")
