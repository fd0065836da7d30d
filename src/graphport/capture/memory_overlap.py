"""In-place writes whose elements share memory, with themselves or with the op's inputs.

The capture records an in-place op as its functional form: every element of the result is
computed from the values before the write. Eager writes element by element into memory:
where two elements of the written tensor are one memory location (an overlapping
`as_strided` window), or an input reads memory the op writes (`x.scatter_(1, i, x)`,
`x[1:].add_(x[:-1])`), eager either refuses (its memory-overlap checks) or answers with
values that depend on the order it visits the elements. Neither is the functional answer.

Meta tensors have no memory, so eager's checks do not run on them. This module rebuilds
the call at the example's concrete layouts on real tensors that share memory as the
program's do, asks eager, and says what to do: eager's error where eager raises, a refusal
where eager's answer depends on the order of its writes, nothing where no memory is shared.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..op_args import arg_leaves, map_args


class _NoExampleLayout(Exception):
    pass


def _int(value: Any) -> int:
    if isinstance(value, torch.SymInt):
        if not value.node.has_hint():   # a data-dependent size
            raise _NoExampleLayout
        return int(value.node.hint)
    return int(value)


def _layout(meta: torch.Tensor) -> tuple[list[int], list[int], int]:
    return [_int(s) for s in meta.shape], [_int(s) for s in meta.stride()], _int(meta.storage_offset())


def _symbolic(meta: torch.Tensor) -> bool:
    return any(isinstance(v, torch.SymInt) for v in (*meta.shape, *meta.stride(), meta.storage_offset()))


def _addresses(sizes, strides, offset) -> torch.Tensor:
    """The storage offsets of a layout's elements, one per element."""
    at = torch.tensor([offset], dtype=torch.long)
    for n, s in zip(sizes, strides):
        at = (at.unsqueeze(-1) + torch.arange(n, dtype=torch.long) * s).flatten()
    return at


def _extent(sizes, strides, offset) -> int:
    return offset if 0 in sizes else offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides))


def _apart(sizes, strides) -> bool:
    """Whether each dimension steps past everything the smaller-stride ones span (enough to
    show no two elements share memory, without listing them)."""
    span = 0
    for n, s in sorted(((n, s) for n, s in zip(sizes, strides) if n > 1), key=lambda d: d[1]):
        if s <= span:
            return False
        span += (n - 1) * s
    return True


def _overlaps_itself(sizes, strides, offset) -> bool:
    if 0 in sizes or _apart(sizes, strides):
        return False
    at = _addresses(sizes, strides, offset)
    return at.unique().numel() != at.numel()


def _share(a, b) -> bool:
    if 0 in a[0] or 0 in b[0] or _extent(*a) <= b[2] or _extent(*b) <= a[2]:
        return False
    return bool(torch.isin(_addresses(*a), _addresses(*b)).any())


def check(func, written: list, windows: list, inputs: Any, args: tuple, kwargs: dict, base_of: Callable,
          meta_of: Callable, is_tracer: Callable) -> tuple[str, str] | None:
    """("eager", eager's message) where eager raises a memory-overlap error on this call,
    ("order", why) where eager's answer depends on the order of its writes or graphport
    cannot tell at every size, None where the functional form gives eager's answer.
    `inputs`: the arguments the call reads, the written ones left out (a reader that is the
    written tensor itself overlaps it fully: eager allows that for elementwise ops only).
    `windows`: the written tensors whose own elements may share memory (views through
    `as_strided`; writes through expand and unfold are judged where they are written back)."""
    written = [w for w in written if is_tracer(w)]
    written_bases = {id(base_of(w)) for w in written}
    readers = [t for t in arg_leaves(inputs) if is_tracer(t) and id(base_of(t)) in written_bases]
    sharing = [*written, *readers]
    self_overlap = []
    try:
        layouts = {id(t): _layout(meta_of(t)) for t in sharing}
    except _NoExampleLayout:
        if any(not any(r is w for w in written) for r in readers):
            return "order", ("an input of the call shares memory with the tensor it writes, at sizes that depend "
                             "on tensor values")
        return None
    for w in windows:
        if id(w) in layouts and _overlaps_itself(*layouts[id(w)]):
            self_overlap.append(w)
    full = [r for r in readers if any(r is w or (id(base_of(r)) == id(base_of(w)) and layouts[id(r)] == layouts[id(w)])
                                      for w in written)]
    partial = [r for r in readers if not any(r is f for f in full)]
    overlapping = [r for r in partial if any(
        id(base_of(r)) == id(base_of(w)) and _share(layouts[id(r)], layouts[id(w)]) for w in written)]
    unsettled = [r for r in partial if _symbolic(meta_of(r)) or any(_symbolic(meta_of(w)) for w in written)]
    if not self_overlap and not overlapping and not unsettled and not full:
        return None
    message = _eager_error(func, args, kwargs, sharing, layouts, base_of, meta_of, is_tracer)
    if message is not None:
        return "eager", message
    if not self_overlap and not overlapping and not unsettled:
        return None   # a reader that is the written tensor itself, which eager allows here
    if self_overlap:
        return "order", "several elements of the written tensor are one memory location"
    if overlapping:
        return "order", "an input of the call reads memory the call writes"
    return "order", ("an input of the call shares memory with the tensor it writes, and whether they overlap "
                     "depends on the sizes")


def _eager_error(func, args, kwargs, sharing, layouts, base_of, meta_of, is_tracer) -> str | None:
    """Eager's memory-overlap error on real tensors with the example's layouts, sharing
    memory as the program's tensors do (the other tensors are zeros: valid indices)."""
    storages = {}
    for t in sharing:
        key = id(base_of(t))
        dtype, extent = meta_of(t).dtype, _extent(*layouts[id(t)])
        have = storages.get(key)
        if have is not None and have[0] != dtype:
            return None   # views of one storage as different dtypes: not rebuilt
        storages[key] = (dtype, max(extent, have[1] if have else 0))
    memory = {key: torch.zeros(max(n, 1), dtype=dtype) for key, (dtype, n) in storages.items()}

    def real(a):
        if not is_tracer(a):
            return a
        meta = meta_of(a)
        if id(base_of(a)) in memory and id(a) in layouts:
            return memory[id(base_of(a))].as_strided(*layouts[id(a)])
        sizes, strides, offset = _layout(meta)
        return torch.zeros(max(_extent(sizes, strides, offset), 1), dtype=meta.dtype).as_strided(
            sizes, strides, offset)

    try:
        real_args, real_kwargs = map_args(real, (args, kwargs))
    except _NoExampleLayout:
        return None
    try:
        with torch.no_grad():
            func(*real_args, **real_kwargs)
    except RuntimeError as e:
        text = str(e).strip()
        return text.splitlines()[0] if "memory location" in text else None
    except (ValueError, TypeError, IndexError, NotImplementedError):
        return None
    return None
