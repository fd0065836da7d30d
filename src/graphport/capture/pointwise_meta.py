"""Output metadata of pointwise operators on symbolic sizes, without torch's Python meta.

With symbolic sizes, torch computes a pointwise operator's output metadata in Python (its
reference implementation: broadcasting, type promotion and the stride permutation of
TensorIterator), asking a hundred size questions for an `add`. Most pointwise calls in
models are simple: operands contiguous in their own shapes, broadcasting only where a
size is literally 1 or absent. For those the answer is known in closed form, and valid at
every size, so no question needs asking:

- shape: the broadcast of the operands' shapes, where each dimension's sizes are the same
  expression or the constant 1 (any other pair, such as `s0` against `5`, is left to
  torch, which guards or raises);
- strides: contiguous. TensorIterator orders dimensions by the operands' strides, skipping
  broadcast (zero) strides; when every operand is contiguous in its own shape, no pair of
  dimensions is ever out of row-major order, so the output is row-major whatever the sizes,
  1 included (torch's reference returns the identity permutation for the same reason);
- dtype: type promotion depends on dtypes and on which operands are 0-dim, not on sizes,
  so it is read from the operator itself run on tiny tensors of the same dtypes (meta_probe.py)
  (which also raises eager's error for a call eager rejects), cached per signature.

The operators are listed by name: each computes its output with broadcasting over all its
tensor operands (TensorIterator), so the rule above is its rule. `clone` follows it too
(keeping a dense layout is what preserve_format means), and is row-major with
contiguous_format. Anything else returns None and takes torch's path.
"""
from __future__ import annotations

from typing import Any

import sympy
import torch

from ..shapes.broadcast import broadcast_shapes, is_one as _is_one, same_size, same_sizes
from .meta_probe import probe

aten = torch.ops.aten

# Broadcasting TensorIterator operators, by overload packet.
_BROADCASTING = frozenset(getattr(aten, name) for name in (
    "abs", "neg", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
    "tan", "tanh", "sigmoid", "erf", "erfc", "relu", "gelu", "silu", "mish", "hardtanh", "hardswish",
    "hardsigmoid", "leaky_relu", "elu", "softplus", "clamp", "clamp_min", "clamp_max", "sign", "floor", "ceil",
    "trunc", "frac", "logical_not", "bitwise_not", "isnan", "nan_to_num", "square",
    "add", "sub", "rsub", "mul", "div", "remainder", "fmod", "pow", "maximum", "minimum", "eq", "ne", "lt",
    "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "logical_xor",
    "atan2", "where", "lerp", "addcmul", "addcdiv", "threshold", "copysign", "hypot", "xlogy", "sgn"))

def pointwise_meta(func, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The output meta tensor of a broadcasting pointwise call on meta tensors, or None
    when the call is not of the simple kind described above."""
    if func is aten.clone.default:
        return _clone(*args, **kwargs)
    if func.overloadpacket not in _BROADCASTING or len(func._schema.returns) != 1 or func._schema.is_mutable:
        return None
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if not tensors or any(isinstance(a, (list, tuple)) for a in (*args, *kwargs.values())):
        return None
    if not symbolic_sizes(tensors):
        return None
    shape = broadcast_shapes([tuple(t.shape) for t in tensors])
    if shape is None:
        return None
    if all(contiguous(t) for t in tensors):
        return torch.empty(shape, dtype=probe(func, args, kwargs)[0][0], device="meta")
    strides = _shared_dense_strides([t for t in tensors if t.dim() > 0], shape)
    if strides is None:
        return None
    return torch.empty_strided(shape, strides, dtype=probe(func, args, kwargs)[0][0], device="meta")


def _clone(x, memory_format=None) -> torch.Tensor | None:
    if not isinstance(x, torch.Tensor) or not symbolic_sizes([x]):
        return None
    if memory_format is torch.contiguous_format or (memory_format in (None, torch.preserve_format) and contiguous(x)):
        return torch.empty(x.shape, dtype=x.dtype, device="meta")
    strides = _shared_dense_strides([x], tuple(x.shape)) if memory_format in (None, torch.preserve_format) else None
    return None if strides is None else torch.empty_strided(x.shape, strides, dtype=x.dtype, device="meta")


def _shared_dense_strides(tensors: list, shape: tuple) -> tuple | None:
    """The operands' common strides, when they all have the output's shape and the same
    strides, dense in some order (a transposed or permuted tensor): TensorIterator then
    gives the output those strides (its non-overlapping-and-dense fast setup), as torch's
    meta kernel does by sorting dimensions by stride. The order is found by matching each
    stride to the product of the sizes inside it, with no question asked; an ambiguous
    match (a size-1 dimension) declines."""
    first = tensors[0]
    strides = tuple(first.stride())
    if any(not same_sizes(t.shape, shape) or not same_sizes(t.stride(), strides) for t in tensors) \
            or not same_size(first.storage_offset(), 0):
        return None
    remaining = set(range(first.dim()))
    expected: Any = 1
    while remaining:
        match = [d for d in remaining if same_size(strides[d], expected)]
        if len(match) != 1:
            return None
        remaining.discard(match[0])
        expected = _times(expected, shape[match[0]])
    return strides


def symbolic_sizes(tensors) -> bool:
    """Whether the closed forms are for these tensors: some size symbolic (static sizes run
    torch's C++ kernels, faster), none data-dependent (a new tensor with such a size asks
    questions only torch's path knows how to avoid)."""
    sizes = [s for t in tensors for s in (*t.shape, *t.stride()) if isinstance(s, torch.SymInt)]
    return bool(sizes) and all(s.node.has_hint() for s in sizes)


def contiguous(t: torch.Tensor) -> bool:
    """Row-major strides, as `is_contiguous()` means it at every size: the stride of a
    dimension of size 1 (the constant) is not read, as torch does not read it (an expanded
    mask's size-1 dimensions have stride 0); a symbolic size's stride must be exact, since
    that size may be 1 or not. torch lays out a new tensor with `max(size, 1)` in the
    products, graphport's inputs with the sizes themselves: the two differ only when a size is
    0, where the tensor has no elements and every layout is contiguous, so both are accepted.
    Outputs made from such operands may differ from eager's in size-1 strides only, which
    address nothing.
    Worked out on the sizes' expressions (no SymInt arithmetic, which makes a node per step):
    `max(size, 1)` is what torch's `sym_max` gives, the size where the declared ranges prove
    it at least 1, else an unevaluated Max. Strides that are the plain products throughout
    answer without working the clamped ones out."""
    plain: Any = _ONE
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        if not _is_one(size) and _expr(stride) != plain:
            break
        plain = plain * _expr(size)
    else:
        return _expr(t.storage_offset()) == 0
    env = None
    plain: Any = _ONE
    clamped: Any = _ONE
    for size, stride in zip(reversed(t.shape), reversed(t.stride())):
        stride = _expr(stride)
        if not _is_one(size) and stride != plain and stride != clamped:
            return False
        if isinstance(size, torch.SymInt):
            env = env or size.node.env
            size = size.node.expr
            plain, clamped = plain * size, clamped * env.extremum(True, size, _ONE)
        else:
            plain, clamped = plain * size, clamped * max(size, 1)
    return _expr(t.storage_offset()) == 0


_ONE = sympy.Integer(1)


def _expr(size) -> sympy.Expr:
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(size)


def _times(a, b):
    product = a * b
    if isinstance(product, torch.SymInt) and product.node.expr.is_Integer:
        return int(product.node.expr)
    return product
