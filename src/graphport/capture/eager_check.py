"""Whether eager PyTorch runs an operator at the example's sizes.

An operator's metadata computation on symbolic sizes can fail where eager does not: a view
whose legality turns on strides graphport cannot settle symbolically. Before an error tells
the user that a call "fails the same way in eager", the call is made on meta tensors with
the example's concrete sizes, strides and offsets: eager's own metadata checks answer.
"""
from __future__ import annotations

from typing import Any

import torch

from ..op_args import map_args


class _NoExampleValue(Exception):
    pass


def _concrete_int(value: Any) -> Any:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = getattr(value.node, "hint", None)
        if hint is None:
            raise _NoExampleValue
        return int(hint) if isinstance(value, torch.SymInt) else hint
    return value


def _concrete(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        sizes = [_concrete_int(s) for s in value.shape]
        strides = [_concrete_int(s) for s in value.stride()]
        offset = _concrete_int(value.storage_offset())
        extent = offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides) if n > 0)
        if 0 in sizes:
            extent = offset
        base = torch.empty(max(extent, 0), dtype=value.dtype, device="meta")
        return base.as_strided(sizes, strides, offset)
    return _concrete_int(value)


def runs_at_the_example(func, meta_args: tuple, meta_kwargs: dict) -> bool | None:
    """True if `func` runs on meta tensors of the example's layout, False if it raises there,
    None where the example has no value for some size (a data-dependent one)."""
    try:
        args, kwargs = map_args(_concrete, (meta_args, meta_kwargs))
    except _NoExampleValue:
        return None
    try:
        func(*args, **kwargs)
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError):
        return False
    return True
