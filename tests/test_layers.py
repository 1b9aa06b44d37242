"""No import climbs a layer: a module imports only from its own layer or the ones below it.

Layers, lowest first (a module belongs to the longest prefix listed; the rest of a package
follows its parent):

0. base utilities that know no other part of sagebuild: errors, fsio, console, knobs,
   archs, upstream_api, the version, the extension's paths and ``MAX_JOBS`` rules
   (``build.paths``, ``build.jobs``: leaves the probe and the doctor read too), and the kernel
   sources (``kernels.csrc`` holds no Python beyond its package marker);
1. readers of the machine and its configuration: probe, profiles, dists, explain (the failure
   database every step explains its failures with);
2. the parts that build and run: checks, build, ext, attention, kernels, compat,
   upstream_internals (upstream's internal names on the attention);
3. services over them: verify, bench, benchrecord (the words bench and report share), patch,
   lock, report;
4. the pipelines: doctor, accept;
5. the command line, which nothing imports.

Imports inside functions are checked, and so are module-level ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SOURCES = {
    "sagebuild": REPO / "sagebuild",
    "sagebuild.kernels.triton": REPO / "kernels" / "triton",
    "sagebuild.kernels.csrc": REPO / "kernels" / "csrc",
}
LAYERS: dict[str, int] = {
    "sagebuild": 0,  # the package's own lazy names are checked where they resolve (patch, attention)
    "sagebuild._version": 0,
    "sagebuild.errors": 0,
    "sagebuild.fsio": 0,
    "sagebuild.console": 0,
    "sagebuild.knobs": 0,
    "sagebuild.archs": 0,
    "sagebuild.upstream_api": 0,
    "sagebuild.build.paths": 0,
    "sagebuild.build.jobs": 0,
    "sagebuild.kernels.csrc": 0,
    "sagebuild.probe": 1,
    "sagebuild.profiles": 1,
    "sagebuild.dists": 1,
    "sagebuild.explain": 1,
    "sagebuild.checks": 2,
    "sagebuild.build": 2,
    "sagebuild.ext": 2,
    "sagebuild.attention": 2,
    "sagebuild.kernels": 2,
    "sagebuild.compat": 2,
    "sagebuild.tuning.record": 2,  # the plan reads the tuning record
    "sagebuild.tuning.defaults": 2,
    "sagebuild.tuning.classes": 2,  # the runtime appends call signatures (SAGEBUILD_RECORD)
    "sagebuild.tuning": 3,  # the tuner times through bench
    "sagebuild.upstream_internals": 2,
    "sagebuild.verify": 3,
    "sagebuild.bench": 3,
    "sagebuild.benchrecord": 3,
    "sagebuild.patch": 3,
    "sagebuild.lock": 3,
    "sagebuild.report": 3,
    "sagebuild.doctor": 4,
    "sagebuild.accept": 4,
    "sagebuild.cli": 5,
    "sagebuild.__main__": 5,
}


def layer_of(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix]
    raise KeyError(module)


def _modules() -> dict[str, Path]:
    found = {}
    for package, root in SOURCES.items():
        for path in sorted(root.rglob("*.py")):
            parts = [p for p in path.relative_to(root).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _imports(module: str, path: Path) -> list[tuple[int, str, bool]]:
    """(line, imported module, inside a function) for every sagebuild import of ``module``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function = {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for sub in ast.walk(node)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from sagebuild.build import paths`` imports the module sagebuild.build.paths
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        out += [(node.lineno, t, id(node) in in_function) for t in targets if t.startswith("sagebuild")]
    return out


MODULES = _modules()


def test_every_module_has_a_layer():
    assert [m for m in MODULES if _safe_layer(m) is None] == []


def _safe_layer(module: str) -> int | None:
    try:
        return layer_of(module)
    except KeyError:
        return None


@pytest.mark.parametrize("where", ["function", "module"])
def test_no_import_climbs_a_layer(where: str):
    climbs = []
    for module, path in MODULES.items():
        own = layer_of(module)
        for line, target, in_function in _imports(module, path):
            if in_function != (where == "function") or target == "sagebuild":
                continue
            if layer_of(target) > own:
                rel = path.relative_to(REPO)
                climbs.append(
                    f"{rel}:{line}: {module} (layer {own}) imports {target} (layer {layer_of(target)})"
                )
    assert climbs == [], "\n".join(climbs)


def test_the_checker_sees_a_climb(tmp_path: Path):
    """The rule can fail: a function-level import of the CLI from the doctor is one climb."""
    bad = tmp_path / "doctor.py"
    bad.write_text("def f():\n    from sagebuild.cli import common\n")
    assert _imports("sagebuild.doctor", bad) == [(2, "sagebuild.cli.common", True)]
    assert layer_of("sagebuild.cli.common") > layer_of("sagebuild.doctor")


def test_the_report_renders_a_record_and_imports_nothing_from_bench():
    """The report is a view of the bench's record (its dict): what both need lives in benchrecord."""
    found = [
        f"{path.relative_to(REPO)}:{line}: {target}"
        for module, path in MODULES.items()
        if module.startswith("sagebuild.report")
        for line, target, _ in _imports(module, path)
        if target == "sagebuild.bench" or target.startswith("sagebuild.bench.")
    ]
    assert found == []
