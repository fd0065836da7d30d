"""Dispatch policies: which composite operators a capture keeps as one node.

A composite (CompositeImplicitAutograd) operator reaches the capture mode whole; the
policy says whether to record it as a node or to run its decomposition, whose parts are
then recorded. The default export level keeps what torch.export's default keeps
(`linear`, `conv2d`, `layer_norm`, `scaled_dot_product_attention`, ...). Other levels
(Core ATen, user decomposition tables) are other policies given to the same capture.

Some of torch's C++ composite kernels read concrete sizes (`self.sizes()`), which symbolic
sizes cannot give; `python_decomposition` finds the same operator's Python reference
(torch's decomposition table, then `torch._refs`), which computes with symbolic sizes.

A few composites that look functional by their schema (no alias annotation, so they are
kept) return their input itself, or views of it, in eager: `x.type_as(x)`, `to_dense` of a
dense tensor, `sum_to_size` to the tensor's own size, `broadcast_tensors`, `meshgrid`,
`einsum("ij->ji", x)`. A program may write in place through such a result into the input.
`aliasing` says, from a call's arguments, whether it returns its input, views, or maybe
either (its decomposition, run on the tracers, tells); capture then records the result as
the alias it is (capture/mode.py, CaptureMode.call_aliasing_composite).
"""
from __future__ import annotations

import enum
from functools import lru_cache
from typing import Any, Callable

import torch

from .. import _torch
from .kinds import op_info

aten = torch.ops.aten


class DispatchPolicy:
    """The default export level: functional composite ops stay whole, the rest decompose."""

    def keep(self, op) -> bool:
        return op_info(op).preserved

    def decomposition(self, op) -> Callable[..., Any] | None:
        """How to expand `op` when it is not kept, or None to record it as it is."""
        info = op_info(op)
        return op.decompose if info.decompose else None

    def aliasing(self, op, args: tuple, kwargs: dict) -> "Aliasing | None":
        """Whether the kept composite `op`, called so, returns an input or views of inputs
        in eager (see Aliasing); None when it cannot."""
        rule = ALIASING_COMPOSITES.get(op)
        return rule(*args, **kwargs) if rule is not None else None


class Aliasing(enum.Enum):
    INPUT = "its first argument itself"
    VIEWS = "views of its arguments"
    MAYBE = "its argument, a view of it or a new tensor, which its decomposition tells"


def _always(answer: Aliasing) -> Callable[..., Aliasing]:
    return lambda *args, **kwargs: answer


def _type_as(self, other) -> Aliasing | None:
    """`self.to(other's type)`: `self` itself when it has that type already."""
    return Aliasing.INPUT if (self.dtype, self.device, self.layout) == (other.dtype, other.device, other.layout) \
        else None


def _cast_to(dtype: torch.dtype) -> Callable[..., Aliasing | None]:
    """`_cast_Float` and the like: `self.to(dtype)`."""
    return lambda self, non_blocking=False: Aliasing.INPUT if self.dtype == dtype else None


def _to_dense(self, dtype=None, *, masked_grad=None) -> Aliasing | None:
    """A tensor that is dense already is its own dense form."""
    return Aliasing.INPUT if self.layout == torch.strided and dtype in (None, self.dtype) else None


def _einsum(equation, tensors, *, path=None) -> Aliasing | None:
    """One operand is permuted (a view) unless the equation sums or takes a diagonal; more
    are multiplied into a new tensor."""
    return Aliasing.MAYBE if len(tensors) == 1 else None


# Composite ATen ops with no alias annotation whose kernel may return an input (the `to` of a
# tensor already of that type, a size it already has) or views of inputs (expand, permute),
# found by calling every kept composite on plain tensors and comparing storages, plus the
# size- and equation-dependent ones (sum_to_size, einsum) found by reading their kernels;
# each with the rule saying, from its arguments, what it returns.
ALIASING_COMPOSITES: dict[Any, Callable[..., Aliasing | None]] = {
    aten.type_as.default: _type_as,
    aten.to_dense.default: _to_dense,
    aten.sum_to_size.default: _always(Aliasing.MAYBE),   # its input when it has that size already
    aten.broadcast_tensors.default: _always(Aliasing.VIEWS),
    aten.meshgrid.default: _always(Aliasing.VIEWS),
    aten.meshgrid.indexing: _always(Aliasing.VIEWS),
    aten.einsum.default: _einsum,
    **{getattr(aten, f"_cast_{name}").default: _cast_to(dtype) for name, dtype in (
        ("Byte", torch.uint8), ("Char", torch.int8), ("Double", torch.float64), ("Float", torch.float32),
        ("Int", torch.int32), ("Long", torch.int64), ("Short", torch.int16), ("Half", torch.float16))},
}

EXPORT_DEFAULT = DispatchPolicy()


def python_decomposition(op) -> Callable[..., Any] | None:
    """A Python implementation of `op` written against symbolic sizes, or None. torch's
    decomposition table is read on every call (it may change: register_decomposition); only
    the lookup of torch's references, which are fixed when torch is imported, is cached."""
    found = _torch.decomposition_table().get(op)
    return found if found is not None else _python_reference(op)


@lru_cache(maxsize=None)
def _python_reference(op) -> Callable[..., Any] | None:
    ref = _torch.python_reference(op)
    if ref is None or not callable(ref) or op._schema.is_mutable:
        return None
    if len(op.overloadpacket.overloads()) > 1 and op._overloadname not in ("default", "Tensor"):
        return None   # a ref covers its op's main overload; others may take other arguments
    return ref
