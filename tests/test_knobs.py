"""The knob registry (``sagebuild/knobs.py``): docs/knobs.md is generated from it, and product
code reads ``SAGEBUILD_*`` environment variables only through it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from sagebuild import knobs

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = sorted([*(ROOT / "sagebuild").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")])
NAME = re.compile(r"SAGEBUILD_[A-Z0-9_]*[A-Z0-9]")
# Not environment variables: line tags a child process prints and its parent looks for
# ("SAGEBUILD_VERIFY {json}"); each is written with its trailing space.
OUTPUT_TAGS = {"SAGEBUILD_VERIFY", "SAGEBUILD_AOT", "SAGEBUILD_PROBE_PYTHON", "SAGEBUILD_PROBE_TORCH"}
# Reads that still go around the registry, with why (the lead decides: see the report).
AROUND_THE_REGISTRY: dict[str, str] = {}  # files allowed to read a knob around the registry: none


def test_docs_knobs_md_is_generated_from_the_registry():
    doc = (ROOT / "docs" / "knobs.md").read_text(encoding="utf-8")
    assert doc == knobs.markdown(), "docs/knobs.md is stale: run `python -m sagebuild.knobs > docs/knobs.md`"
    for k in knobs.KNOBS:
        assert f"`{k.name}`" in doc and k.meaning and k.default


def test_registry_entries_are_well_formed():
    names = [k.name for k in knobs.KNOBS]
    assert len(names) == len(set(names)) and all(NAME.fullmatch(n) for n in names)
    assert {k.kind for k in knobs.KNOBS} <= {"switch", "int", "config", "path"}
    with pytest.raises(knobs.UnknownKnobError):
        knobs.raw("SAGEBUILD_NO_SUCH_KNOB")


def test_values_are_cached_until_refresh(monkeypatch):
    monkeypatch.setenv("SAGEBUILD_PDL", " on ")
    knobs.refresh()
    assert knobs.raw("SAGEBUILD_PDL") == "on" and knobs.switch("SAGEBUILD_PDL") is True
    monkeypatch.setenv("SAGEBUILD_PDL", "0")
    assert knobs.switch("SAGEBUILD_PDL") is True  # cached
    knobs.refresh()
    assert knobs.switch("SAGEBUILD_PDL") is False
    monkeypatch.setenv("SAGEBUILD_PDL", "perhaps")
    knobs.refresh()
    assert knobs.switch("SAGEBUILD_PDL") is None
    plan_names = [k.name for k in knobs.KNOBS if k.plan]
    assert len(knobs.plan_values()) == len(plan_names) and "SAGEBUILD_PDL" in plan_names


def _sources() -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in PRODUCT]


def test_every_sagebuild_name_in_product_code_is_a_registered_knob():
    registered = {k.name for k in knobs.KNOBS}
    unknown = {}
    for rel, text in _sources():
        for m in NAME.finditer(text):
            name = m.group(0)
            if name in registered or rel == "sagebuild/knobs.py":
                continue
            if name in OUTPUT_TAGS and text[m.end() : m.end() + 1] == " ":
                continue
            unknown.setdefault(rel, set()).add(name)
    assert not unknown, f"SAGEBUILD_* names outside the registry (sagebuild/knobs.py): {unknown}"


def _env_reads(text: str) -> list[str]:
    """``SAGEBUILD_*`` names a module reads from the environment directly: os.environ[...],
    os.environ.get(...), os.getenv(...), and mappings that alias os.environ (``env = os.environ``),
    by literal or through a module constant bound to the name."""
    tree = ast.parse(text)
    consts = {
        t.id: node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    aliases = {"environ"}
    for node in ast.walk(tree):  # env = os.environ (or "os.environ if env is None else env")
        if isinstance(node, ast.Assign) and "os.environ" in ast.unparse(node.value):
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}

    def name_of(arg: ast.AST) -> str:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            return arg.value
        if isinstance(arg, ast.Name):
            return consts.get(arg.id, "")
        return ""

    found = []
    for node in ast.walk(tree):
        target, key = None, None
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "getenv", "pop", "setdefault"):
                target, key = func.value, node.args[0]
                if func.attr == "getenv":
                    target = ast.Name("environ")
            elif isinstance(func, ast.Name) and func.id == "getenv":
                target, key = ast.Name("environ"), node.args[0]
        if target is None:
            continue
        base = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        name = name_of(key)
        if base in aliases and name.startswith("SAGEBUILD_"):
            found.append(name)
    return found


def test_the_reader_finds_direct_reads():
    text = (
        "import os\nX = 'SAGEBUILD_A'\nos.environ.get('SAGEBUILD_B')\nos.getenv(X)\n"
        "os.environ['SAGEBUILD_C']\n"
        "def f(env=None):\n    env = os.environ if env is None else env\n    return env.get(X)\n"
        "os.environ.get('HOME')\n"
    )
    assert sorted(_env_reads(text)) == ["SAGEBUILD_A", "SAGEBUILD_A", "SAGEBUILD_B", "SAGEBUILD_C"]


@pytest.mark.parametrize(
    "rel",
    [
        pytest.param(rel, marks=pytest.mark.xfail(strict=True, reason=AROUND_THE_REGISTRY[rel]))
        if rel in AROUND_THE_REGISTRY
        else rel
        for rel in sorted({str(p.relative_to(ROOT)) for p in PRODUCT} - {"sagebuild/knobs.py"})
        if "SAGEBUILD_" in (ROOT / rel).read_text(encoding="utf-8") or rel in AROUND_THE_REGISTRY
    ],
)
def test_product_code_reads_knobs_only_through_the_registry(rel):
    assert _env_reads((ROOT / rel).read_text(encoding="utf-8")) == []
