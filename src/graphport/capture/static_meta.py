"""Output metadata at concrete sizes, in closed form, for calls whose torch meta kernel is slow.

On the meta device torch computes most operators' output metadata in Python: pointwise
operators through their reference implementations (type promotion, broadcasting, the stride
permutation of TensorIterator), `addmm`, `native_layer_norm` and inference batch norm
through their decompositions, each a few hundred microseconds; a static capture pays that
for every new signature (the meta cache answers repeats). For the calls below the answer is
known exactly, and given here without running torch's reference:

- pointwise operators whose tensor operands all have one shape and row-major strides (as
  `torch.empty` lays that shape out) and are not all channels-last as well: torch's
  reference takes its row-major short cut (`compute_elementwise_output_strides`), so the
  result is a new row-major tensor of that shape; a dtype conversion of a dense tensor keeps
  its strides. All operands 0-dim is left to torch (a wrapped Python number promotes
  differently from a 0-dim tensor, and the flag is not visible here).
- the binary ones among them (and `where`) on row-major operands that broadcast: their
  reference expands the operands and hands them to one primitive, whose meta kernel orders
  the result's dimensions by the expanded operands' strides; that order is asked of the same
  torch function (`_torch.elementwise_output_order`), without the reference's other work.
- `addmm` of matrices with a bias broadcasting to the product, all of one floating dtype,
  no `alpha`/`beta`: torch's decomposition adds the bias to the `mm` result, a new row-major
  matrix, which comes first in the addition so its layout wins: a new row-major [M, N]
  matrix, whatever the bias's layout.
- `native_layer_norm` of a row-major input over its trailing dims, weight and bias of the
  normalized shape (or None), one floating dtype: a row-major output of the input's shape,
  and row-major statistics of the leading shape followed by ones.
- `_native_batch_norm_legit_no_training` of a row-major input with per-channel parameters
  and running statistics of one floating dtype: a row-major output of the input's shape,
  and per-channel statistics.

dtypes: the operands' one floating dtype (bool for comparisons and for logical operators on
bool tensors), and float32 statistics for the half types; mixed dtypes, integer operands and
numbers of other types are left to torch, as are calls torch would reject (mismatched shapes,
a bad keyword). Anything outside these conditions returns None and takes torch's meta
kernel. tests/capture/test_static_meta.py compares each form with torch's meta kernel over
layouts of sizes 0 to 3, in the conditions and outside them.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from .. import _torch

aten = torch.ops.aten

_FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_NUMBER = (int, float)

# Pointwise operators on tensors of one floating dtype (`where`: its condition bool), giving
# that dtype, with the non-tensor arguments each may take: name -> allowed values (a type
# tuple or a set of values).
_SAME_DTYPE: dict[Any, dict[str, Any]] = {
    aten.add.Tensor: {"alpha": _NUMBER}, aten.sub.Tensor: {"alpha": _NUMBER}, aten.mul.Tensor: {},
    aten.div.Tensor: {}, aten.div.Tensor_mode: {"rounding_mode": {None, "trunc", "floor"}},
    aten.maximum.default: {}, aten.minimum.default: {}, aten.pow.Tensor_Tensor: {},
    aten.pow.Tensor_Scalar: {"exponent": _NUMBER}, aten.mul.Scalar: {"other": _NUMBER},
    aten.where.self: {}, aten.neg.default: {}, aten.abs.default: {}, aten.relu.default: {},
    aten.gelu.default: {"approximate": {"none", "tanh"}}, aten.tanh.default: {}, aten.sigmoid.default: {},
    aten.silu.default: {}, aten.exp.default: {}, aten.sqrt.default: {}, aten.rsqrt.default: {},
}
# Comparisons of tensors of one floating dtype (or with a number): bool.
_COMPARISONS: dict[Any, dict[str, Any]] = {
    **{getattr(aten, name).Tensor: {} for name in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{getattr(aten, name).Scalar: {"other": _NUMBER} for name in ("eq", "ne", "lt", "le", "gt", "ge")},
}
# Logical operators on bool tensors: bool.
_ON_BOOLS: dict[Any, dict[str, Any]] = {
    aten.bitwise_and.Tensor: {}, aten.bitwise_or.Tensor: {}, aten.bitwise_not.default: {},
    aten.logical_not.default: {},
}


def static_meta(func, args: tuple, kwargs: dict) -> Any:
    """The output meta tensor(s) of `func` on these meta tensors of concrete sizes, or None
    where the call is not one of the kinds above."""
    for table, operands, result in ((_SAME_DTYPE, _FLOATING, None), (_COMPARISONS, _FLOATING, torch.bool),
                                    (_ON_BOOLS, (torch.bool,), torch.bool)):
        others = table.get(func)
        if others is not None:
            return _pointwise(func, args, kwargs, others, operands, result)
    rule = _RULES.get(func)
    if rule is None:
        return None
    values = _bound(func, args, kwargs)
    return rule(*values) if values is not None else None


def row_major_strides(shape) -> tuple:
    """The strides `torch.empty(shape)` has (a size-0 dimension counts as 1 in the products)."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _row_major(t: torch.Tensor) -> bool:
    return t.stride() == row_major_strides(t.shape)


def _channels_last_too(t: torch.Tensor) -> bool:
    """Whether torch also counts a row-major tensor as channels-last (a 4-D tensor with
    size-1 channel or spatial dims): its reference then sorts the dimensions instead."""
    if t.dim() == 4:
        return t.is_contiguous(memory_format=torch.channels_last)
    if t.dim() == 5:
        return t.is_contiguous(memory_format=torch.channels_last_3d)
    return False


def _pointwise(func, args: tuple, kwargs: dict, others: dict, operands, result) -> torch.Tensor | None:
    """The result of a pointwise call on row-major operands of one dtype (see the module's docstring)."""
    tensors = []
    arguments = func._schema.arguments
    given = [(arguments[i].name, a) for i, a in enumerate(args)] + list(kwargs.items())
    for name, value in given:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
            continue
        if not _allowed(value, others.get(name)):
            return None
    if not tensors:
        return None
    if func is aten.where.self:
        if tensors[0].dtype is not torch.bool:
            return None
        operands_of_dtype = tensors[1:]
    else:
        operands_of_dtype = tensors
    dtypes = {t.dtype for t in operands_of_dtype}
    if len(dtypes) != 1 or not dtypes <= set(operands) or not all(_row_major(t) for t in tensors):
        return None
    dtype = result or operands_of_dtype[0].dtype
    shape = tensors[0].shape
    if all(t.shape == shape for t in tensors):
        if len(shape) == 0 or all(_channels_last_too(t) for t in tensors):
            return None
        return torch.empty(shape, dtype=dtype, device="meta")
    if func not in _BROADCAST_THEN_ONE_PRIM or kwargs:
        return None
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in tensors))
    except RuntimeError:
        return None   # torch raises eager's error
    if len(shape) == 0:
        return None
    order = _torch.elementwise_output_order(*(t if t.shape == shape else t.expand(shape) for t in tensors))
    return torch.empty_permuted(shape, order, dtype=dtype, device="meta")


# Pointwise references that broadcast their operands (`expand`) and hand them to one
# primitive, whose meta kernel orders the result's dimensions by the broadcast operands'
# strides (`_torch.elementwise_output_order`) and converts dtypes of dense tensors only.
_BROADCAST_THEN_ONE_PRIM = frozenset({
    aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.maximum.default,
    aten.minimum.default, aten.where.self, aten.bitwise_and.Tensor, aten.bitwise_or.Tensor,
    *(getattr(aten, name).Tensor for name in ("eq", "ne", "lt", "le", "gt", "ge")),
})


def _allowed(value, allowed) -> bool:
    """Whether a non-tensor argument is one the rule knows: one of a set of strings (or None),
    or a number of the listed types (bool is not an int here: it promotes differently)."""
    if allowed is None:
        return False
    if isinstance(allowed, set):
        return (value is None or type(value) is str) and value in allowed
    return type(value) in allowed


def _bound(func, args: tuple, kwargs: dict) -> list | None:
    """The call's arguments in schema order, defaults filled in; None for a name the schema lacks."""
    arguments = func._schema.arguments
    if len(args) > len(arguments) or set(kwargs) - {a.name for a in arguments}:
        return None
    values = list(args)
    for a in arguments[len(args):]:
        if a.name in kwargs:
            values.append(kwargs[a.name])
        elif a.has_default_value():
            values.append(a.default_value)
        else:
            return None
    return values


def _addmm(bias, a, b, beta, alpha) -> torch.Tensor | None:
    tensors = (bias, a, b)
    if not all(isinstance(t, torch.Tensor) for t in tensors) or a.dim() != 2 or b.dim() != 2 or bias.dim() > 2 \
            or a.shape[1] != b.shape[0] or len({t.dtype for t in tensors}) != 1 or a.dtype not in _FLOATING \
            or type(beta) is not int or type(alpha) is not int or beta != 1 or alpha != 1:
        return None
    shape = (a.shape[0], b.shape[1])
    if any(n not in (1, m) for n, m in zip(reversed(bias.shape), reversed(shape))):
        return None
    return torch.empty(shape, dtype=a.dtype, device="meta")


def _statistics_dtype(dtype: torch.dtype) -> torch.dtype:
    """Normalization statistics are kept in float32 for the half types, as torch's kernels accumulate."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _layer_norm(x, normalized_shape, weight, bias, eps) -> tuple | None:
    if not isinstance(x, torch.Tensor) or not isinstance(normalized_shape, (list, tuple)) \
            or not all(type(n) is int for n in normalized_shape) or type(eps) is not float:
        return None
    k = len(normalized_shape)
    lead = x.dim() - k
    if k == 0 or lead < 0 or tuple(x.shape[lead:]) != tuple(normalized_shape) or not _row_major(x) \
            or x.dtype not in _FLOATING:
        return None
    if not all(p is None or (isinstance(p, torch.Tensor) and tuple(p.shape) == tuple(normalized_shape)
                             and _row_major(p) and p.dtype == x.dtype) for p in (weight, bias)):
        return None
    stats = (*x.shape[:lead], *([1] * k))
    statistics = _statistics_dtype(x.dtype)
    return (torch.empty(x.shape, dtype=x.dtype, device="meta"), torch.empty(stats, dtype=statistics, device="meta"),
            torch.empty(stats, dtype=statistics, device="meta"))


def _batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps) -> tuple | None:
    if not isinstance(x, torch.Tensor) or x.dim() < 2 or not _row_major(x) or x.dtype not in _FLOATING \
            or type(momentum) is not float or type(eps) is not float:
        return None
    channels = x.shape[1]
    if not isinstance(running_mean, torch.Tensor) or not isinstance(running_var, torch.Tensor) or not all(
            p is None or (isinstance(p, torch.Tensor) and tuple(p.shape) == (channels,) and p.stride() == (1,)
                          and p.dtype == x.dtype) for p in (weight, bias, running_mean, running_var)):
        return None
    statistics = _statistics_dtype(x.dtype)
    return (torch.empty(x.shape, dtype=x.dtype, device="meta"), torch.empty((channels,), dtype=statistics, device="meta"),
            torch.empty((channels,), dtype=statistics, device="meta"))


_RULES: dict[Any, Callable] = {
    aten.addmm.default: _addmm,
    aten.native_layer_norm.default: _layer_norm,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_inference,
}
