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
    node = _resolve(node, root)
    if "oneOf" in node:
        return _one_of(value, node["oneOf"], root, path)
    if "type" in node:
        types = node["type"] if isinstance(node["type"], list) else [node["type"]]
        if not any(_is_type(value, t) for t in types):
            return [f"{path}: expected {' or '.join(types)}, got {type(value).__name__}"]
    errors = _value_errors(value, node, path)
    if isinstance(value, dict):
        errors += _object_errors(value, node, root, path)
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            errors += validate_sub(item, node["items"], root, f"{path}[{i}]")
    return errors


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its local ``$ref`` chain followed."""
    while "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref is supported, got {ref}")
        node = functools.reduce(operator.getitem, ref[2:].split("/"), root)
    return node


def _one_of(value: Any, alternatives: list[dict[str, Any]], root: dict[str, Any], path: str) -> list[str]:
    """Exactly one alternative must match; with none, the closest says what is wrong (its type
    fits, then it has the fewest errors)."""
    results = [validate_sub(value, s, root, path) for s in alternatives]
    passing = sum(not r for r in results)
    if passing > 1:
        return [f"{path}: matches {passing} of the oneOf alternatives (must match exactly 1)"]

    def distance(errs: list[str]) -> tuple[bool, int]:
        return (any(e.startswith(f"{path}: expected") for e in errs), len(errs))

    return min(results, key=distance) if passing == 0 else []


def _value_errors(value: Any, node: dict[str, Any], path: str) -> list[str]:
    """``const``, ``enum`` and ``minimum``."""
    errors: list[str] = []
    if "const" in node and value != node["const"]:
        errors.append(f"{path}: expected {node['const']!r}, got {value!r}")
    if "enum" in node and value not in node["enum"]:
        errors.append(f"{path}: {value!r} is not one of {node['enum']}")
    if "minimum" in node and _is_type(value, "number") and value < node["minimum"]:
        errors.append(f"{path}: {value} is below the minimum {node['minimum']}")
    return errors


def _object_errors(value: dict[str, Any], node: dict[str, Any], root: dict[str, Any], path: str) -> list[str]:
    """``required``, ``properties`` and ``additionalProperties``."""
    errors = [f"{path}: missing required key {key!r}" for key in node.get("required", []) if key not in value]
    props = node.get("properties", {})
    for key, item in value.items():
        sub = props.get(key, node.get("additionalProperties", True))
        if sub is False:
            errors.append(f"{path}: unexpected key {key!r}")
        elif isinstance(sub, dict):
            errors += validate_sub(item, sub, root, f"{path}.{key}")
    return errors
