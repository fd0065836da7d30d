"""Output metadata of `view` of a row-major tensor on symbolic sizes, in closed form.

torch works a view's strides out in Python (`_reshape_view_helper`), asking whether each
size is 1 on the way. A view of a row-major tensor (offset 0, its storage holding exactly
its elements) needs none of that: any shape with the same number of elements is a view,
and a row-major one, at every size. The new sizes must multiply to the old count as
expressions (a `-1` is the quotient, when it divides exactly); anything else returns None
and takes torch's path, which guards or raises as eager would.

The output is a new meta tensor rather than a view of the input's meta storage (making
that view would ask the storage-bounds questions this avoids); capture tracks views by
their base (tracer.py), and this storage is the same size.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from ..shapes.node import symint
from .pointwise_meta import contiguous, symbolic_sizes

aten = torch.ops.aten

_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default})


def view_meta(func, args: tuple, kwargs: dict) -> torch.Tensor | None:
    if func not in _VIEWS or kwargs or len(args) != 2:
        return None
    x, shape = args
    if not isinstance(x, torch.Tensor) or not isinstance(shape, (list, tuple)) or not symbolic_sizes([x]) \
            or not contiguous(x):
        return None
    env = next(s.node.env for s in x.shape if isinstance(s, torch.SymInt))
    numel = sympy.Integer(1)
    for s in x.shape:
        numel = numel * _expr(s)
    if not _equal(_expr(x.untyped_storage().nbytes()), numel * x.element_size()):
        return None
    known, inferred = sympy.Integer(1), [i for i, s in enumerate(shape) if type(s) is int and s == -1]
    if len(inferred) > 1 or any(type(s) is int and s < 0 and s != -1 for s in shape) \
            or not all(isinstance(s, (int, torch.SymInt)) for s in shape):
        return None
    for i, s in enumerate(shape):
        if i not in inferred:
            known = known * _expr(s)
    sizes: list[Any] = list(shape)
    if inferred:
        # the quotient with its common factors cancelled: expanding `(64*s + 64)/(16*s + 16)`
        # without cancelling would leave a size that is a sum of fractions
        quotient = sympy.factor_terms(numel / known)
        if not env.proves(sympy.Gt(known, 0)) or sympy.fraction(quotient)[1] != 1:
            return None   # an ambiguous -1 at no elements (eager raises), or not an exact quotient
        sizes[inferred[0]] = symint(sympy.expand(quotient), env)
    elif not _equal(known, numel):
        return None
    return torch.empty(sizes, dtype=x.dtype, device="meta")


def _expr(size) -> sympy.Expr:
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


def _equal(a: sympy.Expr, b: sympy.Expr) -> bool:
    return a == b or sympy.expand(a - b) == 0
