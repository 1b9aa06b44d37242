"""The report's JSON Schema and a validator of the subset it uses (no ``jsonschema`` dependency):
type (with null unions), const, enum, required, properties, additionalProperties, items, minimum,
oneOf and local ``$ref``."""

from __future__ import annotations

import functools
import json
import operator
from importlib import resources
from typing import Any

_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "null": type(None),
    "integer": int,
    "number": (int, float),
    "boolean": bool,
}


def load_schema() -> dict[str, Any]:
    """The bundled ``report.schema.json``, its ``plan`` definition generated from ``LaunchPlan``."""
    from sagebuild.attention.plan import record_schema

    schema = json.loads(
        (resources.files("sagebuild.data") / "report.schema.json").read_text(encoding="utf-8")
    )
    schema["definitions"]["plan"] = record_schema()
    return schema


def _is_type(value: Any, name: str) -> bool:
    """JSON's types: a bool is neither an integer nor a number."""
    return isinstance(value, _TYPES[name]) and (name == "boolean" or not isinstance(value, bool))


def validate(instance: Any, schema: dict[str, Any] | None = None) -> list[str]:
    """All violations as ``path: problem`` strings; an empty list means valid."""
    root = schema if schema is not None else load_schema()
    return validate_sub(instance, root, root, "$")


def validate_sub(value: Any, node: dict[str, Any], root: dict[str, Any], path: str) -> list[str]:
    """The violations of ``value`` at ``path`` against ``node``, a part of the schema ``root``."""
    while "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref is supported, got {ref}")
        node = functools.reduce(operator.getitem, ref[2:].split("/"), root)
    if "oneOf" in node:
        results = [validate_sub(value, s, root, path) for s in node["oneOf"]]
        passing = sum(not r for r in results)
        if passing > 1:
            return [f"{path}: matches {passing} of the oneOf alternatives (must match exactly 1)"]

        # None passing: the closest alternative says what is wrong (its type fits, then fewest errors)
        def distance(errs: list[str]) -> tuple[bool, int]:
            return (any(e.startswith(f"{path}: expected") for e in errs), len(errs))

        return min(results, key=distance) if passing == 0 else []
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not any(_is_type(value, t) for t in types):
            return [f"{path}: expected {' or '.join(types)}, got {type(value).__name__}"]
    errors: list[str] = []
    if "const" in node and value != node["const"]:
        errors.append(f"{path}: expected {node['const']!r}, got {value!r}")
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: {value!r} is not one of {node['enum']}")
    if "minimum" in node and _is_type(value, "number") and value < node["minimum"]:
        errors.append(f"{path}: {value} is below the minimum {node['minimum']}")
    if isinstance(value, dict):
        props = node.get("properties", {})
        for key in node.get("required", []):
            if key not in value:
                errors.append(f"{path}: missing required key {key!r}")
        for key, item in value.items():
            sub = props.get(key, node.get("additionalProperties", True))
            if sub is False:
                errors.append(f"{path}: unexpected key {key!r}")
            elif isinstance(sub, dict):
                errors += validate_sub(item, sub, root, f"{path}.{key}")
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            errors += validate_sub(item, node["items"], root, f"{path}[{i}]")
    return errors
