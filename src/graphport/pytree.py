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


def flatten_with_paths(tree: Any) -> tuple[list[tuple[tuple, Any]], Any]:
    """(path, leaf) pairs and the spec of a pytree, like pytree.tree_flatten_with_path, for any registered node.

    pytree's own version refuses a node type registered without a flatten_with_keys_fn
    (diffusers registers its output classes that way); such a node's children are keyed by
    their position (`[0]`, `[1]`), every other node by its own keys. The spec is
    tree_flatten's, so unflattening is unchanged.
    """
    leaves, spec = pytree.tree_flatten(tree)
    pairs: list[tuple[tuple, Any]] = []
    _walk(tree, spec, (), pairs)
    assert len(pairs) == len(leaves)
    return pairs, spec


def _walk(tree: Any, spec: Any, path: tuple, pairs: list) -> None:
    if spec.is_leaf():
        pairs.append((path, tree))
        return
    node = pytree.SUPPORTED_NODES[spec.type]
    if node.flatten_with_keys_fn is not None:
        keyed = node.flatten_with_keys_fn(tree)[0]
    else:
        keyed = [(pytree.SequenceKey(i), child) for i, child in enumerate(node.flatten_fn(tree)[0])]
    for (key, child), child_spec in zip(keyed, spec.children(), strict=True):
        _walk(child, child_spec, path + (key,), pairs)


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
