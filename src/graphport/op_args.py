"""Walking an operator's arguments, fast, with the same result as torch's pytree.

Capture maps every recorded operator's arguments two or three times (to meta tensors, to
graph values, to find their device), and torch's general pytree walk costs more than the
rest of the operator's bookkeeping. Operator arguments are plain tuples, lists and dicts
of tensors, numbers and graph values in nearly every call, so those are walked directly;
any other value (torch.Size, a named tuple, fx's immutable lists, a registered class)
goes through the general walk, so the answer never differs from pytree's.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

import torch
import torch.fx as fx

from . import _torch

pytree = _torch.pytree

# Types pytree treats as leaves (none is a registered container), checked before the general walk.
_LEAVES = (torch.Tensor, fx.Node, int, float, bool, str, type(None), torch.dtype, torch.device, torch.layout,
           torch.memory_format, torch.SymInt, torch.SymFloat, torch.SymBool)


def map_args(fn: Callable[[Any], Any], value: Any) -> Any:
    """pytree.tree_map(fn, value)."""
    kind = type(value)
    if kind is tuple:
        return tuple([map_args(fn, v) for v in value])
    if kind is list:
        return [map_args(fn, v) for v in value]
    if kind is dict:
        return {k: map_args(fn, v) for k, v in value.items()}
    if isinstance(value, _LEAVES) and not isinstance(value, (tuple, list, dict)):
        return fn(value)
    return pytree.tree_map(fn, value)


def arg_leaves(value: Any) -> Iterator[Any]:
    """pytree.tree_leaves(value), lazily."""
    kind = type(value)
    if kind is tuple or kind is list:
        for v in value:
            yield from arg_leaves(v)
    elif kind is dict:
        for v in value.values():
            yield from arg_leaves(v)
    elif isinstance(value, _LEAVES) and not isinstance(value, (tuple, list, dict)):
        yield value
    else:
        yield from pytree.tree_leaves(value)
