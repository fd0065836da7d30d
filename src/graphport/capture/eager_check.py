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


def outside_storage(func, meta_args: tuple, meta_kwargs: dict) -> str | None:
    """Eager's error where `as_strided` asks for a window past the end of its base's storage,
    which meta tensors do not check: the sizes must be concrete (a trace at pinned sizes, a
    static capture) for the answer to be eager's; otherwise None."""
    if func is not torch.ops.aten.as_strided.default:
        return None
    base, sizes, strides = meta_args[:3]
    offset = meta_args[3] if len(meta_args) > 3 else meta_kwargs.get("storage_offset")
    if offset is None:
        offset = base.storage_offset()
    try:
        storage_bytes = base.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return None
    values = [storage_bytes, offset, *sizes, *strides]
    if not all(type(v) is int for v in values):
        return None
    if 0 in sizes:
        return None
    needed = (offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))) * base.element_size()
    if needed <= storage_bytes:
        return None
    return (f"setStorage: sizes {list(sizes)}, strides {list(strides)}, storage offset {offset}, and itemsize "
            f"{base.element_size()} requiring a storage size of {needed} are out of bounds for storage of size "
            f"{storage_bytes}")


_LIKE = frozenset({torch.ops.aten.empty_like.default, torch.ops.aten.zeros_like.default,
                   torch.ops.aten.ones_like.default, torch.ops.aten.full_like.default,
                   torch.ops.aten.rand_like.default, torch.ops.aten.randn_like.default})


def with_eager_like_strides(func, meta_args: tuple, meta_kwargs: dict, out: Any) -> Any:
    """`out` with the strides eager gives a `*_like` result. Eager's kernels keep the input's
    strides whenever it is non-overlapping and dense; the meta kernels recompute them and lay
    size-1 dimensions out contiguously, so the two disagree there (a transposed row of width
    1). torch's scan compares carried strides, so the difference decides whether eager raises.
    Corrected where the layout is concrete (static captures, traces at pinned sizes)."""
    if func not in _LIKE or not isinstance(out, torch.Tensor) or not meta_args:
        return out
    source = meta_args[0]
    if meta_kwargs.get("memory_format", torch.preserve_format) is not torch.preserve_format:
        return out
    layout = (*source.shape, *source.stride())
    if not all(type(v) is int for v in layout) or tuple(out.stride()) == tuple(source.stride()):
        return out
    if not _non_overlapping_and_dense(source.shape, source.stride()):
        return out
    return torch.empty_strided(source.shape, source.stride(), dtype=out.dtype, device=out.device)


def _non_overlapping_and_dense(shape, strides) -> bool:
    """c10's rule on concrete sizes: the dimensions of size 2 or more, ordered by stride, tile
    the memory with no gap or overlap; dimensions of size 0 and 1 do not count."""
    required = 1
    for size, stride in sorted(((n, s) for n, s in zip(shape, strides) if n >= 2), key=lambda ns: ns[1]):
        if stride != required:
            return False
        required *= size
    return True
