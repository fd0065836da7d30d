"""Output dtype and shape of common operators on static sizes, worked out without a kernel.

The load-time check (check.py) recomputes every node's result metadata from its arguments'.
Running torch's meta kernel for that is correct but, for most operators, goes through
torch's Python meta registrations, whose type-promotion wrapper imports torch._dynamo on
its first call: seconds of a fresh process's start, for a question whose answer is simple
arithmetic on sizes when every size is a number.

Each rule here answers for one family of operators, and only in the plain case: all sizes
are ints, the dtypes are ones the operator takes, every argument is of the expected kind
and the sizes fit together as the operator requires. Anything else (a symbolic size, an
unusual keyword, sizes that do not fit, a dtype the rule does not know) gets None, and the
caller runs torch's kernel, which decides, refusals included. So a rule never refuses: it
either gives exactly the dtype and shape torch's kernel gives, or steps aside.
tests/serde/test_meta_rules.py compares every rule with torch's kernels over drawn cases,
sizes 0 and 1 and ill-fitting ones included.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..shapes.broadcast import broadcast_shapes

aten = torch.ops.aten

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_INTEGRAL = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64})
_REAL = _FLOATS | _INTEGRAL

Shape = tuple[int, ...]
Result = tuple[torch.dtype, Shape]


def static_result(op: Any, args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The result of `op(*args, **kwargs)` on meta tensors, as an empty meta tensor of the
    dtype and shape torch's kernel gives, when a rule covers the call; None otherwise."""
    rule = _RULES.get(op)
    if rule is None:
        return None
    bound = _bind(op, args, kwargs)
    if bound is None:
        return None
    found = rule(bound)
    if found is None:
        return None
    dtype, shape = found
    return torch.empty(shape, dtype=dtype, device="meta")


def _bind(op: Any, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    """The arguments by schema name (defaults left out), or None where they do not bind or
    a tensor stands where the schema wants none, or the other way round."""
    arguments = op._schema.arguments
    positional = [a.name for a in arguments if not a.kwarg_only]
    if len(args) > len(positional):
        return None
    bound = dict(zip(positional, args))
    for name, value in kwargs.items():
        if name in bound or name not in {a.name for a in arguments}:
            return None
        bound[name] = value
    if not all(a.name in bound or a.has_default_value() for a in arguments):
        return None
    for a in arguments:
        value = bound.get(a.name)
        wants_tensor = str(a.type) in ("Tensor", "Optional[Tensor]")
        if value is not None and isinstance(value, torch.Tensor) != wants_tensor \
                and not (wants_tensor and _number(value) and a.name in _NUMBER_OPERANDS.get(op, ())):
            return None
    return bound


def _tensor(value: Any) -> Shape | None:
    """`value`'s shape, if it is a meta tensor of static sizes with a dtype the rules know."""
    if type(value) is not torch.Tensor or not value.is_meta or value.dtype not in _REAL:
        return None
    shape = tuple(value.shape)
    return shape if all(type(s) is int for s in shape) else None


def _number(value: Any) -> bool:
    return type(value) in (int, float, bool)


def _operands(bound: dict, names: tuple[str, ...]) -> tuple[list[Shape], list[Any]] | None:
    """Shapes of the tensor operands and the operands themselves (tensors or numbers)."""
    shapes, values = [], []
    for name in names:
        value = bound[name]
        if isinstance(value, torch.Tensor):
            shape = _tensor(value)
            if shape is None:
                return None
            shapes.append(shape)
        elif not _number(value):
            return None
        values.append(value)
    return shapes, values


def _elementwise(names: tuple[str, ...], *, result: Callable[[list[Any]], torch.dtype | None],
                 extra: Callable[[dict], bool] = lambda b: set(b) <= {"self", "other"}) -> Callable:
    """A pointwise operator: the operands broadcast; `result` gives the dtype (None: step aside)."""
    def rule(bound: dict) -> Result | None:
        if not extra(bound):
            return None
        found = _operands(bound, names)
        if found is None or not found[0]:
            return None
        shape = broadcast_shapes(found[0])
        dtype = result(found[1])
        return None if shape is None or dtype is None else (dtype, shape)
    return rule


def _promoted(values: list[Any]) -> torch.dtype:
    # torch's own promotion (C++): tensors by dtype and dimension category, numbers by kind
    return torch.result_type(*values) if len(values) == 2 else values[0].dtype


def _arithmetic(values: list[Any]) -> torch.dtype | None:
    """add/mul: the promoted dtype; complex results are left to the kernel."""
    dtype = _promoted(values)
    return dtype if dtype in _REAL else None


def _subtraction(values: list[Any]) -> torch.dtype | None:
    """sub refuses bool operands: left to the kernel."""
    if any(v.dtype == torch.bool if isinstance(v, torch.Tensor) else type(v) is bool for v in values):
        return None
    return _arithmetic(values)


def _comparison(values: list[Any]) -> torch.dtype | None:
    return torch.bool if all(isinstance(v, torch.Tensor) or type(v) is not complex for v in values) else None


def _bitwise(values: list[Any]) -> torch.dtype | None:
    """and/or/xor take integral and bool operands only (a number: an int or bool)."""
    if not all(v.dtype in _INTEGRAL if isinstance(v, torch.Tensor) else type(v) in (int, bool) for v in values):
        return None
    return _promoted(values)


def _float_unary(values: list[Any]) -> torch.dtype | None:
    """gelu, tanh ...: a floating tensor keeps its dtype (integral inputs are left to the kernel)."""
    return values[0].dtype if isinstance(values[0], torch.Tensor) and values[0].dtype in _FLOATS else None


def _same_dtype_unary(values: list[Any]) -> torch.dtype | None:
    """neg, abs, relu: a real non-bool tensor keeps its dtype (bool is left to the kernel)."""
    dtype = values[0].dtype if isinstance(values[0], torch.Tensor) else None
    return dtype if dtype in _REAL and dtype != torch.bool else None


def _true_division(values: list[Any]) -> torch.dtype | None:
    """div without rounding: the promoted dtype where it is floating (integer operands, whose
    result is the default float dtype, are left to the kernel)."""
    dtype = _promoted(values)
    return dtype if dtype in _FLOATS else None


def _where(bound: dict) -> Result | None:
    """where(condition, self, other): a bool condition; the two values promote and all three
    broadcast."""
    if not set(bound) <= {"condition", "self", "other"}:
        return None
    condition = _tensor(bound["condition"])
    found = _operands(bound, ("self", "other"))
    if condition is None or bound["condition"].dtype != torch.bool or found is None or not found[0]:
        return None
    dtype = _arithmetic(found[1])
    shape = broadcast_shapes([condition, *found[0]])
    return None if shape is None or dtype is None else (dtype, shape)


def _mean_dim(bound: dict) -> Result | None:
    """mean over a non-empty list of distinct dims of a floating tensor, keepdim or not."""
    if not set(bound) <= {"self", "dim", "keepdim"}:
        return None
    shape, dims, keep = _tensor(bound["self"]), bound["dim"], bound.get("keepdim", False)
    if shape is None or bound["self"].dtype not in _FLOATS or type(keep) is not bool \
            or not isinstance(dims, (list, tuple)) or not dims or not all(type(d) is int for d in dims):
        return None
    rank = max(len(shape), 1)
    if not all(-rank <= d < rank for d in dims):
        return None
    reduced = {d % rank for d in dims}
    if len(reduced) != len(dims) or not shape:
        return None
    out = tuple(1 if i in reduced else s for i, s in enumerate(shape) if keep or i not in reduced)
    return bound["self"].dtype, out


def _cat(bound: dict) -> Result | None:
    """cat of tensors of one dtype and rank (at least 1), equal but along `dim`."""
    tensors, dim = bound["tensors"], bound.get("dim", 0)
    if not set(bound) <= {"tensors", "dim"} or not isinstance(tensors, (list, tuple)) or not tensors \
            or type(dim) is not int:
        return None
    shapes = [_tensor(t) for t in tensors]
    if None in shapes or len({t.dtype for t in tensors}) != 1 or len({len(s) for s in shapes}) != 1 \
            or not shapes[0] or not -len(shapes[0]) <= dim < len(shapes[0]):
        return None
    dim %= len(shapes[0])
    if len({s[:dim] + s[dim + 1:] for s in shapes}) != 1:
        return None
    first = shapes[0]
    return tensors[0].dtype, first[:dim] + (sum(s[dim] for s in shapes),) + first[dim + 1:]


def _no_alpha(bound: dict) -> bool:
    return set(bound) <= {"self", "other", "alpha"} and bound.get("alpha", 1) == 1 and type(bound.get("alpha", 1)) is int


def _gelu_arguments(bound: dict) -> bool:
    return set(bound) <= {"self", "approximate"} and bound.get("approximate", "none") in ("none", "tanh")


def _pow_scalar(bound: dict) -> Result | None:
    shape = _tensor(bound["self"])
    exponent = bound["exponent"]
    if shape is None or bound["self"].dtype not in _FLOATS or type(exponent) not in (int, float):
        return None
    return bound["self"].dtype, shape


def _same_float(*tensors: torch.Tensor) -> torch.dtype | None:
    dtypes = {t.dtype for t in tensors}
    return next(iter(dtypes)) if len(dtypes) == 1 and dtypes <= _FLOATS else None


def _addmm(bound: dict) -> Result | None:
    if not set(bound) <= {"self", "mat1", "mat2"}:
        return None
    shapes = [_tensor(bound[n]) for n in ("self", "mat1", "mat2")]
    if None in shapes or _same_float(*(bound[n] for n in ("self", "mat1", "mat2"))) is None:
        return None
    bias, m1, m2 = shapes
    if len(m1) != 2 or len(m2) != 2 or m1[1] != m2[0] or len(bias) > 2 or broadcast_shapes([bias, (m1[0], m2[1])]) != (m1[0], m2[1]):
        return None
    return bound["mat1"].dtype, (m1[0], m2[1])


def _linear(bound: dict) -> Result | None:
    if not set(bound) <= {"input", "weight", "bias"}:
        return None
    x, w, bias = _tensor(bound["input"]), _tensor(bound["weight"]), bound.get("bias")
    tensors = [bound["input"], bound["weight"]] + ([bias] if bias is not None else [])
    if x is None or w is None or _same_float(*tensors) is None or len(x) < 1 or len(w) != 2 or x[-1] != w[1]:
        return None
    if bias is not None and _tensor(bias) != (w[0],):
        return None
    return bound["input"].dtype, x[:-1] + (w[0],)


def _layer_norm(bound: dict) -> Result | None:
    if not set(bound) <= {"input", "normalized_shape", "weight", "bias", "eps", "cudnn_enable"}:
        return None
    x, normalized = _tensor(bound["input"]), bound["normalized_shape"]
    if x is None or not isinstance(normalized, (list, tuple)) or not normalized \
            or not all(type(s) is int for s in normalized) or len(normalized) > len(x) \
            or tuple(normalized) != x[len(x) - len(normalized):]:
        return None
    affine = [bound[n] for n in ("weight", "bias") if bound.get(n) is not None]
    if _same_float(bound["input"], *affine) is None or any(_tensor(t) != tuple(normalized) for t in affine):
        return None
    if type(bound.get("eps", 1e-5)) not in (int, float) or type(bound.get("cudnn_enable", True)) is not bool:
        return None
    return bound["input"].dtype, x


def _attention(bound: dict) -> Result | None:
    if not set(bound) <= {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"}:
        return None
    q, k, v = (_tensor(bound[n]) for n in ("query", "key", "value"))
    if q is None or k is None or v is None or _same_float(bound["query"], bound["key"], bound["value"]) is None:
        return None
    if not len(q) == len(k) == len(v) == 4 or not q[:2] == k[:2] == v[:2] or q[3] != k[3] or k[2] != v[2]:
        return None
    if bound.get("dropout_p", 0.0) != 0.0 or type(bound.get("dropout_p", 0.0)) not in (int, float) \
            or bound.get("is_causal", False) is not False or bound.get("enable_gqa", False) is not False \
            or type(bound.get("scale")) not in (type(None), float, int):
        return None
    mask = bound.get("attn_mask")
    if mask is not None:
        shape = _tensor(mask)
        scores = (q[0], q[1], q[2], k[2])
        if shape is None or mask.dtype not in (torch.bool, bound["query"].dtype) or len(shape) > 4 \
                or broadcast_shapes([shape, scores]) != scores:
            return None
    return bound["query"].dtype, q[:3] + v[3:]


def _cumsum(bound: dict) -> Result | None:
    shape, dim = _tensor(bound["self"]), bound["dim"]
    if shape is None or not set(bound) <= {"self", "dim"} or type(dim) is not int \
            or not -max(len(shape), 1) <= dim < max(len(shape), 1):
        return None
    dtype = bound["self"].dtype
    return (torch.int64 if dtype in _INTEGRAL else dtype), shape


def _diff(bound: dict) -> Result | None:
    """diff(n=1) along `dim` of `self` with `prepend`/`append` of the same dtype and sizes
    elsewhere: one element fewer than the three together (a bool input, an empty result
    and larger `n` are left to the kernel)."""
    if not set(bound) <= {"self", "n", "dim", "prepend", "append"}:
        return None
    shape, dim = _tensor(bound["self"]), bound.get("dim", -1)
    if shape is None or bound.get("n", 1) != 1 or type(bound.get("n", 1)) is not int or type(dim) is not int \
            or not shape or not -len(shape) <= dim < len(shape) or bound["self"].dtype == torch.bool:
        return None
    dim %= len(shape)
    total = shape[dim]
    for name in ("prepend", "append"):
        extra = bound.get(name)
        if extra is None:
            continue
        other = _tensor(extra)
        if other is None or extra.dtype != bound["self"].dtype or len(other) != len(shape) \
                or other[:dim] + other[dim + 1:] != shape[:dim] + shape[dim + 1:]:
            return None
        total += other[dim]
    if total < 2:
        return None
    return bound["self"].dtype, shape[:dim] + (total - 1,) + shape[dim + 1:]


def _embedding(bound: dict) -> Result | None:
    """A 2-D table looked up with long or int indices: the indices' shape and one row."""
    if not set(bound) <= {"weight", "indices", "padding_idx", "scale_grad_by_freq", "sparse"}:
        return None
    table, indices = _tensor(bound["weight"]), _tensor(bound["indices"])
    if table is None or indices is None or len(table) != 2 or bound["indices"].dtype not in (torch.int64, torch.int32):
        return None
    if type(bound.get("padding_idx", -1)) is not int or type(bound.get("scale_grad_by_freq", False)) is not bool \
            or bound.get("sparse", False) is not False:
        return None
    return bound["weight"].dtype, indices + table[1:]


_ARANGE_DTYPES = (None, torch.int64, torch.int32, torch.float32, torch.float64)


def _arange(bound: dict) -> Result | None:
    """arange(end) of an int end >= 0: `end` elements, int64 unless a dtype is given."""
    if not set(bound) <= {"end", "dtype", "layout", "device", "pin_memory"}:
        return None
    end, dtype = bound["end"], bound.get("dtype")
    if type(end) is not int or end < 0 or dtype not in _ARANGE_DTYPES \
            or bound.get("layout") not in (None, torch.strided) or bound.get("pin_memory") not in (None, False):
        return None
    return dtype or torch.int64, (end,)


def _index(bound: dict) -> Result | None:
    """Advanced indexing by long or int index tensors (None: the whole dimension): the index
    tensors broadcast to one shape, which replaces the dimensions they index where those are
    adjacent, and comes first where they are not (numpy's rule, as torch's kernel computes
    it). Masks (bool, int8), whose result size depends on data, are left to the kernel."""
    x, indices = _tensor(bound["self"]), bound["indices"]
    if x is None or set(bound) != {"self", "indices"} or not isinstance(indices, (list, tuple)) \
            or not 0 < len(indices) <= len(x):
        return None
    shapes = []
    for index in indices:
        if index is None:
            continue
        if not isinstance(index, torch.Tensor) or _tensor(index) is None or index.dtype not in (torch.int64, torch.int32):
            return None
        shapes.append(_tensor(index))
    replaced = broadcast_shapes(shapes) if shapes else None
    if replaced is None:
        return None
    at = [d for d, index in enumerate(indices) if index is not None]
    rest = [x[d] for d in range(len(x)) if d not in at]
    if at == list(range(at[0], at[-1] + 1)):   # adjacent: the result keeps the dimensions around them in place
        return bound["self"].dtype, x[:at[0]] + replaced + x[at[-1] + 1:]
    return bound["self"].dtype, replaced + tuple(rest)


def _gather(bound: dict) -> Result | None:
    """Values gathered along `dim` by a long or int index of the same rank, no larger than
    `self` in the other dimensions: the index's shape (0-dim operands are left to the kernel)."""
    x, index, dim = _tensor(bound["self"]), _tensor(bound["index"]), bound["dim"]
    if x is None or index is None or not set(bound) <= {"self", "dim", "index", "sparse_grad"} \
            or bound.get("sparse_grad", False) is not False or bound["index"].dtype not in (torch.int64, torch.int32):
        return None
    if not x or len(index) != len(x) or type(dim) is not int or not -len(x) <= dim < len(x):
        return None
    dim %= len(x)
    if any(i > s for d, (i, s) in enumerate(zip(index, x)) if d != dim):
        return None
    return bound["self"].dtype, index


_BINARY = ("self", "other")
# torch's binding takes a number where these operators' schemas name a Tensor (as a scalar)
_NUMBER_OPERANDS = {aten.add.Tensor: {"other"}, aten.sub.Tensor: {"other"}, aten.mul.Tensor: {"other"},
                    aten.div.Tensor: {"other"}}
_RULES: dict[Any, Callable[[dict], Result | None]] = {
    aten.add.Tensor: _elementwise(_BINARY, result=_arithmetic, extra=_no_alpha),
    aten.sub.Tensor: _elementwise(_BINARY, result=_subtraction, extra=_no_alpha),
    aten.mul.Tensor: _elementwise(_BINARY, result=_arithmetic),
    **{op: _elementwise(_BINARY, result=_comparison)
       for op in (aten.eq.Tensor, aten.ne.Tensor, aten.ge.Tensor, aten.gt.Tensor, aten.le.Tensor, aten.lt.Tensor,
                  aten.eq.Scalar, aten.ne.Scalar, aten.ge.Scalar, aten.gt.Scalar, aten.le.Scalar, aten.lt.Scalar)},
    aten.__and__.Tensor: _elementwise(_BINARY, result=_bitwise),
    aten.bitwise_and.Tensor: _elementwise(_BINARY, result=_bitwise),
    aten.div.Tensor: _elementwise(_BINARY, result=_true_division),
    aten.minimum.default: _elementwise(_BINARY, result=_arithmetic),
    aten.maximum.default: _elementwise(_BINARY, result=_arithmetic),
    aten.min.other: _elementwise(_BINARY, result=_arithmetic),
    aten.max.other: _elementwise(_BINARY, result=_arithmetic),
    **{op: _elementwise(("self",), result=_float_unary, extra=lambda b: set(b) == {"self"})
       for op in (aten.tanh.default, aten.sin.default, aten.cos.default, aten.rsqrt.default, aten.log.default,
                  aten.exp.default, aten.sqrt.default, aten.sigmoid.default)},
    **{op: _elementwise(("self",), result=_same_dtype_unary, extra=lambda b: set(b) == {"self"})
       for op in (aten.neg.default, aten.abs.default, aten.relu.default)},
    aten.where.self: _where,
    aten.where.ScalarOther: _where,
    aten.mean.dim: _mean_dim,
    aten.cat.default: _cat,
    aten.gelu.default: _elementwise(("self",), result=_float_unary, extra=_gelu_arguments),
    aten.pow.Tensor_Scalar: _pow_scalar,
    aten.addmm.default: _addmm,
    aten.embedding.default: _embedding,
    aten.arange.default: _arange,
    aten.index.Tensor: _index,
    aten.gather.default: _gather,
    aten.linear.default: _linear,
    aten.layer_norm.default: _layer_norm,
    aten.scaled_dot_product_attention.default: _attention,
    aten.cumsum.default: _cumsum,
    aten.diff.default: _diff,
}
