"""A small JSON Schema validator: the subset of draft 2020-12 docs/format.md uses
(type, const, enum, properties, required, additionalProperties, propertyNames,
min/maxProperties, items, prefixItems, min/maxItems, minimum, pattern, anyOf, $ref)."""
from __future__ import annotations

import re
from typing import Any

_TYPES = {"null": lambda v: v is None, "boolean": lambda v: isinstance(v, bool),
          "integer": lambda v: type(v) is int, "number": lambda v: type(v) in (int, float),
          "string": lambda v: isinstance(v, str), "array": lambda v: isinstance(v, list),
          "object": lambda v: isinstance(v, dict)}
_KNOWN = {"$schema", "title", "$defs", "type", "const", "enum", "properties", "required", "additionalProperties",
          "propertyNames", "minProperties", "maxProperties", "items", "prefixItems", "minItems", "maxItems",
          "minimum", "pattern", "anyOf", "$ref"}


def errors(value: Any, schema: dict, root: dict | None = None, path: str = "$") -> list[str]:
    """Every violation of `schema` by `value`, as 'path: reason' strings."""
    root = root if root is not None else schema
    unknown = set(schema) - _KNOWN
    assert not unknown, f"schema keyword(s) {unknown} not supported by this validator"
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        return errors(value, target, root, path)
    if "anyOf" in schema:
        if all(errors(value, option, root, path) for option in schema["anyOf"]):
            return [f"{path}: matches none of the allowed forms"]
    found: list[str] = []
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            return [f"{path}: expected {types}, found {type(value).__name__}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{path}: expected {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{path}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if type(value) in (int, float) and "minimum" in schema and value < schema["minimum"]:
        found.append(f"{path}: {value} is below {schema['minimum']}")
    if isinstance(value, dict):
        found += _object(value, schema, root, path)
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            found.append(f"{path}: {len(value)} items")
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items")
            if sub is not None:
                found += errors(item, sub, root, f"{path}[{i}]")
    return found


def _object(value: dict, schema: dict, root: dict, path: str) -> list[str]:
    found = [f"{path}: missing {k!r}" for k in schema.get("required", []) if k not in value]
    if len(value) < schema.get("minProperties", 0) or len(value) > schema.get("maxProperties", len(value)):
        found.append(f"{path}: {len(value)} properties")
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if "propertyNames" in schema:
            found += errors(key, schema["propertyNames"], root, f"{path}.<{key}>")
        if key in props:
            found += errors(item, props[key], root, f"{path}.{key}")
        elif extra is False:
            found.append(f"{path}: unexpected key {key!r}")
        elif isinstance(extra, dict):
            found += errors(item, extra, root, f"{path}.{key}")
    return found
