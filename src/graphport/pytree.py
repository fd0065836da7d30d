"""Pytree support: dataclass registration and readable names for flattened leaves."""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from . import _torch

pytree = _torch.pytree


def register_dataclass(cls: type, *, serialized_type_name: str | None = None) -> None:
    """Let a dataclass appear in exported inputs and outputs, like torch.export.register_dataclass.

    Its fields are flattened as children, in declaration order; fields that are None are
    kept in the structure, so a program captured with a field set to None refuses a call
    that sets it.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"register_dataclass expects a dataclass type, got {cls!r}")
    names = [f.name for f in dataclasses.fields(cls) if f.init]

    def flatten(obj):
        return [getattr(obj, n) for n in names], names

    def unflatten(values, context):
        return cls(**dict(zip(context, values)))

    def flatten_with_keys(obj):
        return [(pytree.GetAttrKey(n), getattr(obj, n)) for n in names], names

    pytree.register_pytree_node(
        cls, flatten, unflatten, flatten_with_keys_fn=flatten_with_keys,
        serialized_type_name=serialized_type_name or f"{cls.__module__}.{cls.__qualname__}")


def key_to_str(key: Any) -> str:
    if isinstance(key, pytree.SequenceKey):
        return str(key.idx)
    if isinstance(key, pytree.MappingKey):
        return str(key.key)
    if isinstance(key, pytree.GetAttrKey):
        return key.name
    return str(key)


def path_to_str(root: str, path: tuple) -> str:
    """`x['a'][0]`-style path of a leaf, for messages."""
    return root + pytree.keystr(path)


def leaf_name(parts: list[str]) -> str:
    """A placeholder name for a leaf: `d_a_0` for d["a"][0], as torch.export names them."""
    name = "_".join(p for p in parts if p != "")
    name = re.sub(r"\W", "_", name)
    if not name or name[0].isdigit():
        name = "arg_" + name
    return name
