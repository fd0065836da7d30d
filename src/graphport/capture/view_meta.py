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

A view of a tensor that is not row-major is in closed form too where it keeps the leading
dimensions (the same expressions) and reshapes only trailing ones that are row-major among
themselves, from whatever innermost stride (GPT-2's heads split off a slice of the fused
projection, `[b, t, 768]` with strides `[2304*t, 2304, 1]` viewed as `[b, t, 12, 64]`): those
trailing dimensions form one block of memory at every size, so the view exists, the kept
dimensions keep their strides and the new ones are row-major within the block, as torch's
`computeStride` finds wherever the tensor has elements (a dimension of size 1 may get
another stride there, which addresses nothing). The result is an `as_strided` of the input,
with its storage and offset.

`unsqueeze` and `transpose` take torch's C++ kernel instead of its Python reference: the
kernel is the one eager runs, it reorders or inserts sizes and strides without asking a
question of them (a new dimension's stride is the next one's size times stride, or 1 at the
end), so on symbolic sizes it gives eager's metadata at every size. The Python reference
builds the same view through `broadcast_in_dim`, asking whether each size is 1 on the way
(which records an assumption that sizes are at least 2), at ten times the cost.
"""
from __future__ import annotations

import math
from typing import Any

import sympy
import torch

from .. import _torch
from ..errors import OperatorError
from ..shapes.expr import exact_ratio
from ..shapes.multiples import Multiples
from ..shapes.node import size_expr, symint
from .pointwise_meta import contiguous, symbolic_sizes

aten = torch.ops.aten

_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default})
# views whose C++ kernel asks no question of symbolic sizes (see above)
_BY_KERNEL = frozenset({aten.unsqueeze.default, aten.transpose.int})


def view_meta(func, args: tuple, kwargs: dict) -> torch.Tensor | None:
    if func in _BY_KERNEL:
        with _torch.cpp_kernels():
            return func(*args, **kwargs)
    if func not in _VIEWS or kwargs or len(args) != 2:
        return None
    x, shape = args
    if not isinstance(x, torch.Tensor) or not isinstance(shape, (list, tuple)) or not symbolic_sizes([x]):
        return None
    env = next(s.node.env for s in x.shape if isinstance(s, torch.SymInt))
    # where the facts make a size a multiple (`seq % 5 == 0` on one side of a branch, or a
    # guard), the sizes are compared knowing it: shapes/multiples.py
    algebra = env.multiples()
    numel = sympy.Integer(1)
    for s in x.shape:
        numel = numel * size_expr(s)
    sizes = _spelled_out(numel, shape, env, algebra)
    if sizes is None:
        return None
    if not (contiguous(x) or _row_major(x)):
        return _tail_view(x, sizes, env, algebra)
    if not algebra.same_value(size_expr(x.untyped_storage().nbytes()), numel * x.element_size()):
        return None
    return torch.empty(sizes, dtype=x.dtype, device="meta")


def _spelled_out(numel: sympy.Expr, shape, env, algebra: Multiples) -> list | None:
    """The view's sizes with a `-1` replaced by the size it stands for; None where they do not
    multiply to `numel` as expressions, or the `-1` is not an exact quotient or is ambiguous at
    some size in range (no elements: eager raises), which torch's path decides."""
    known, inferred = sympy.Integer(1), [i for i, s in enumerate(shape) if type(s) is int and s == -1]
    if len(inferred) > 1 or any(type(s) is int and s < 0 and s != -1 for s in shape) \
            or not all(isinstance(s, (int, torch.SymInt)) for s in shape):
        return None
    for i, s in enumerate(shape):
        if i not in inferred:
            known = known * size_expr(s)
    sizes: list[Any] = list(shape)
    if inferred:
        # the quotient with its common factors cancelled: expanding `(64*s + 64)/(16*s + 16)`
        # without cancelling would leave a size that is a sum of fractions
        quotient = sympy.factor_terms(numel / known)
        if sympy.fraction(quotient)[1] != 1:
            quotient = algebra.exact_ratio(numel, known)
        else:   # written as simply as the facts allow (`(seq//5)*(seq//(seq//5))` is `seq`)
            quotient = algebra.restore(algebra.rewrite(quotient))
        positive = sympy.Gt(known, 0, evaluate=False) if not known.is_Number else sympy.true if known > 0 \
            else sympy.false   # unevaluated: sympy's own evaluation of a relation is slow
        if not (env.proves(positive) or algebra.decide(positive) is True) or quotient is None:
            return None
        sizes[inferred[0]] = symint(sympy.expand(quotient), env)
    elif not algebra.same_value(known, numel):
        return None
    return sizes


def _tail_view(x: torch.Tensor, shape: list, env, algebra: Multiples) -> torch.Tensor | None:
    """The view (sizes spelled out, multiplying to the tensor's count) of a tensor that is not
    row-major which keeps its leading dimensions and reshapes trailing ones that are row-major
    among themselves (see above), or keeps every dimension; None otherwise."""
    sizes, strides = [size_expr(s) for s in x.shape], [size_expr(s) for s in x.stride()]
    new = [size_expr(s) for s in shape]
    kept = 0
    while kept < min(len(sizes), len(new)) and sizes[kept] == new[kept]:
        kept += 1
    if kept == len(sizes) == len(new):
        out_strides = list(x.stride())   # the same shape: torch keeps the strides, even with no elements
    elif kept == len(sizes) or kept == len(new):
        return None
    else:
        for d in range(kept, len(sizes) - 1):
            if not algebra.same_value(strides[d], strides[d + 1] * sizes[d + 1]):
                return None
        tail, step = [], strides[-1]
        for size in reversed(new[kept:]):
            tail.insert(0, step)
            step = step * size
        out_strides = [symint(s, env) for s in strides[:kept] + tail]
    with _torch.cpp_kernels():
        return x.as_strided(tuple(shape), tuple(out_strides), x.storage_offset())


def _row_major(x: torch.Tensor) -> bool:
    """Row-major strides at every size, read through the shape algebra's normal forms (an exact
    division is its quotient) rather than as written: the strides `contiguous()` gives a
    window-partitioned tensor (`196*((hp)//(7))`) are the products of its sizes (`28*hp`, for
    `hp` a multiple of 7). As in pointwise_meta.contiguous, a dimension of the constant size 1
    does not constrain its stride, and the products may clamp sizes at 1 (torch's layout).
    Sizes the facts make multiples are read as such (shapes/multiples.py)."""
    env = next((s.node.env for s in (*x.shape, *x.stride()) if isinstance(s, torch.SymInt)), None)
    algebra = env.multiples() if env is not None else Multiples({}, {})
    if not algebra.same_value(size_expr(x.storage_offset()), sympy.Integer(0)):
        return False
    plain, clamped = sympy.Integer(1), sympy.Integer(1)
    for size, stride in zip(reversed(x.shape), reversed(x.stride())):
        if not (type(size) is int and size == 1):
            if not (algebra.same_value(size_expr(stride), plain) or algebra.same_value(size_expr(stride), clamped)):
                return False
        plain = plain * size_expr(size)
        clamped = clamped * (size_expr(size) if type(size) is int else sympy.Max(size_expr(size), 1, evaluate=False))
    return True

# -- the `-1` of a reshape -------------------------------------------------------------------------

def reshape_spelled_out(deferred, args: tuple) -> tuple:
    """`reshape(x, shape)`'s arguments with a `-1` in `shape` replaced by the size it stands for.

    torch's reshape works the `-1` out in C++ before choosing a view or a copy, asking whether
    the other sizes multiply to 0 (eager raises there: the `-1` is ambiguous). Asked there, the
    question is a decision of the program's, proven only by tracing it again; asked here, inside
    a metadata computation of its own (`deferred.metadata_of`), it is recorded and worked out
    again at each small size (capture/pinned_metadata.py), where size 0 fails as eager does."""
    if len(args) != 2 or not isinstance(args[0], torch.Tensor) or not isinstance(args[1], (list, tuple)) \
            or not any(type(s) is int and s == -1 for s in args[1]) or not symbolic_sizes([args[0]]):
        return args
    sizes, shape = list(args[0].shape), list(args[1])
    with deferred.metadata_of("inferred", reshape_sizes, (sizes, shape), {}) as result:
        result.append(reshape_sizes(sizes, shape))
    return args if result[0] is None else (args[0], result[0])


def reshape_sizes(sizes: list, shape: list) -> list | None:
    """The sizes `reshape(shape)` gives a tensor of `sizes`, the `-1` worked out as torch's
    `infer_size` does; OperatorError where eager raises for the `-1`; None where the quotient is
    not exact as an expression (torch's own path then decides)."""
    inferred = [i for i, s in enumerate(shape) if type(s) is int and s == -1]
    if len(inferred) != 1 or not all(isinstance(s, (int, torch.SymInt)) for s in (*sizes, *shape)) \
            or any(type(s) is int and s < -1 for s in shape):
        return None   # torch's own path: its errors for other negative sizes
    numel, known = sympy.Integer(1), sympy.Integer(1)
    for s in sizes:
        numel = numel * size_expr(s)
    for i, s in enumerate(shape):
        if i != inferred[0]:
            known = known * size_expr(s)
    product = math.prod(s for i, s in enumerate(shape) if i != inferred[0])
    if product == 0:   # a question on symbolic sizes: decided inside the metadata computation
        raise OperatorError(
            f"aten::reshape failed: cannot reshape tensor of {numel} elements into shape {shape} because the "
            "unspecified dimension size -1 can be any value and is ambiguous",
            fix="this call fails the same way in eager PyTorch; spell the size out instead of -1 where the "
                "tensor may have no elements")
    env = next((s.node.env for s in (*sizes, *shape) if isinstance(s, torch.SymInt)), None)
    quotient = sympy.factor_terms(numel / known)
    if sympy.fraction(quotient)[1] != 1:
        # exact only through the normal forms (padded sides), or through what the facts of a
        # branch side make a multiple (`seq // (seq // 5)` is 5 where seq % 5 == 0)
        quotient = exact_ratio(numel, known) if env is None else env.multiples().exact_ratio(numel, known)
    if quotient is None:
        return None
    out = list(shape)
    out[inferred[0]] = int(quotient) if quotient.is_Integer else symint(sympy.expand(quotient), env)
    return out
