"""Capture rules for data-dependent values: scalars read from tensors and sizes that depend
on tensor values (see shapes/unbacked.py for the symbols and how questions about them are
answered).

Each rule records the operator as called, with a `val` whose data-dependent parts are fresh
symbols (`u0`, ...), and binds each symbol to the graph value that computes it at run time:
the scalar `aten._local_scalar_dense` returns, or `aten.sym_size.int` of the op's result,
as torch.export does. Facts the program states about the symbols (torch._check,
torch._constrain_as_size) become assertion nodes, so the artifact checks them itself.
"""
from __future__ import annotations

import functools

import sympy
import torch

from .. import _torch
from ..errors import DataDependentError
from ..shapes.env import ShapeEnv
from ..shapes.expr import INF, bounds
from ..shapes.node import SymNode
from ..shapes.unbacked import ASSERT_PREFIX, as_python
from ..source import innermost_user_location
from . import example_answers
from .sizes import SizeValues, is_sym
from .tracer import META, TracerTensor

aten = torch.ops.aten



def shape_env(mode) -> ShapeEnv:
    """The capture's shape environment, made on first use by a static capture (whose sizes
    are all plain ints) so it can hold data-dependent symbols."""
    rec = mode.rec
    if rec.sizes is None:
        rec.sizes = SizeValues(ShapeEnv(), {})
        if rec.until_done is not None:
            # torch's Python meta kernels handle symbolic sizes; many C++ ones do not
            rec.until_done.enter_context(_torch.enable_python_dispatcher())
    env = rec.sizes.env
    if env.unbacked.asserter is None:
        env.unbacked.asserter = lambda node: _assert_from_user_code(rec, node)
    example_answers.install(rec, env)
    return env


def bind_symbol(rec, sym: sympy.Symbol, node) -> None:
    """The graph value that computes `sym` at run time."""
    rec.sizes.cache[sym] = node
    rec.sizes.env.unbacked.infos[sym].node = node.name


def _assert_from_user_code(rec, cond: SymNode) -> None:
    """torch._check runs in the user's code, where the capture mode is active: the nodes
    that compute the check are made outside it, as inside an operator's dispatch."""
    with _torch.outside_dispatch_modes():
        assert_fact(rec, cond)


def assert_fact(rec, cond: SymNode) -> None:
    """An `aten._assert_scalar` node checking a fact the program stated, with its line."""
    value = rec.sym_value(torch.SymBool(cond))
    if not isinstance(value, torch.fx.Node):
        return   # settled once sizes were substituted: nothing left to check
    where = innermost_user_location()
    at = f" (stated at {where})" if where is not None else ""
    message = f"{ASSERT_PREFIX} {as_python(cond.expr)} on node '{value.name}'{at}"
    node = rec.node(aten._assert_scalar.default, (value, message), {}, None)
    rec.user_calls.add(node)


# -- scalars read from tensors -------------------------------------------------------------

_INT_RANGES = {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int16: (-2 ** 15, 2 ** 15 - 1),
               torch.int32: (-2 ** 31, 2 ** 31 - 1)}


def local_scalar_dense(mode, func, t, origin: str | None = None):
    """`t.item()` (and int(t), float(t), t.tolist() elements): a data-dependent scalar bound
    to the node that reads it at run time (`item`, kept whole as torch.export keeps it, or
    `_local_scalar_dense`)."""
    env = shape_env(mode)
    rec = mode.rec
    numel = t.numel()
    if isinstance(numel, int) and numel != 1:
        raise DataDependentError(
            f"the program reads a tensor with {t.numel()} elements as one value (.item())",
            fix="select one element first, e.g. t[0].item(), or reduce the tensor (t.sum().item())")
    label = origin or (f"{t.gp_label}.item()" if isinstance(t, TracerTensor) else "a tensor's .item()")
    if t.dtype is torch.bool:
        sym = env.unbacked.new(bool, 0, 1, label)
        value = torch.SymBool(SymNode(sympy.Eq(sym, 1, evaluate=False), env, bool))
    elif t.dtype.is_floating_point:
        sym = env.unbacked.new(float, -INF, INF, label)
        value = torch.SymFloat(SymNode(sym, env, float))
    elif t.dtype.is_complex:
        raise DataDependentError("the program reads a complex tensor's value into Python (.item())",
                                 fix="keep the computation in tensors (torch.real / torch.imag)")
    else:
        lower, upper = _INT_RANGES.get(t.dtype, (-INF, INF))
        sym = env.unbacked.new(int, lower, upper, label)
        value = torch.SymInt(SymNode(sym, env, int))
    node = rec.node(func, (rec.graph_arg(t),), {}, value)
    rec.user_calls.add(node)
    bind_symbol(rec, sym, node)
    return value


def truth(mode, t) -> bool:
    """bool(t) on a tensor, under draft_export: the tensor's truth read as a data-dependent
    integer (`(t != 0).to(torch.uint8).item()`, 0 or 1), so the question `u != 0` is answered
    from the example and checked at run time."""
    nonzero = mode.call(aten.ne.Scalar, (t, 0), {})
    flag = mode.call(aten._to_copy.default, (nonzero,), {"dtype": torch.uint8})
    return bool(local_scalar_dense(mode, aten._local_scalar_dense.default, flag,
                                   example_answers.TRUTH_OF + _condition(t)))


def _condition(t) -> str:
    """The user's own expression for the tensor whose truth is asked: the condition of the
    `if` / `while` / `assert` / conditional expression on the user's line, else the line."""
    import ast
    location = innermost_user_location()
    line = location.code if location is not None else ""
    source = "if " + line[5:] if line.startswith("elif ") else line
    if source.endswith(":"):
        source += " pass"
    try:
        tree = ast.parse(source)
    except SyntaxError:   # part of a statement spread over lines
        return f"`{line}`" if line else t.gp_label
    tests = [n.test for n in ast.walk(tree) if isinstance(n, (ast.If, ast.While, ast.Assert, ast.IfExp))]
    return f"`{ast.unparse(tests[0])}`" if tests else f"`{line}`"


# -- facts the program states ------------------------------------------------------------------

def constrain_range(mode, size, min=None, max=None, *, for_size: bool):
    """torch._constrain_as_size / torch._constrain_as_value (sym_constrain_range[_for_size]):
    the range is assumed from here on and checked at run time by the node itself."""
    env = shape_env(mode)
    rec = mode.rec
    if not is_sym(size):
        lo = 0 if for_size and min is None else min
        if (lo is not None and size < lo) or (max is not None and size > max):
            raise DataDependentError(f"the value {size} is outside the range [{lo}, {max}] the program states",
                                     fix="correct the range given to torch._constrain_as_size/_as_value")
        return None
    expr = size.node.expr
    for sym in env.unbacked.involved(expr):
        if expr == sym:
            env.unbacked.infos[sym].size_like |= for_size
    lower = 0 if for_size and min is None else min
    # checked by assertions of graphport's own first, so a failure names the line
    for stated in ([sympy.Ge(expr, lower, evaluate=False)] if lower is not None else []) + \
            ([sympy.Le(expr, max, evaluate=False)] if max is not None else []):
        if env.static_value(stated) is None:
            assert_fact(rec, SymNode(stated, env, bool))
        env.assume(stated)
    target = aten.sym_constrain_range_for_size.default if for_size else aten.sym_constrain_range.default
    kwargs = {k: v for k, v in (("min", min), ("max", max)) if v is not None}
    node = rec.node(target, (rec.graph_arg(size),), kwargs, None)
    rec.user_calls.add(node)
    return None


# -- operators whose output size depends on tensor values ------------------------------------------

def _count(env: ShapeEnv, t: torch.Tensor, origin: str) -> sympy.Symbol:
    """A fresh size-like symbol at most `t`'s element count: how many elements an op keeps."""
    numel = t.numel()
    upper = numel if isinstance(numel, int) else bounds(numel.node.expr, env.ranges)[1]
    return env.unbacked.new(int, 0, upper, origin, size_like=True)


def _record(mode, func, args, kwargs, val, sizes: list[tuple[sympy.Symbol, int, int]], device):
    """Record the op with its `val`; bind each symbol to sym_size(output, dim)."""
    rec = mode.rec
    node_args, node_kwargs = _torch.pytree.tree_map(rec.graph_arg, (args, kwargs))
    node = rec.node(func, node_args, node_kwargs, val)
    rec.user_calls.add(node)
    out = rec.wrap(val, node, device)
    bind_output_sizes(mode, out if isinstance(out, tuple) else (out,), sizes)
    return out


def bind_output_sizes(mode, outs, sizes: list[tuple[sympy.Symbol, int, int]]) -> None:
    """Bind each (symbol, output index, dim) to `sym_size(outs[index], dim)`: the node that
    reads the size at run time."""
    rec = mode.rec
    for sym, index, dim in sizes:
        size_node = rec.node(aten.sym_size.int, (rec.value(outs[index]), dim), {}, sym_int(rec.sizes.env, sym))
        bind_symbol(rec, sym, size_node)


def sym_int(env, sym) -> torch.SymInt:
    """A SymInt standing for the data-dependent symbol `sym`."""
    return torch.SymInt(SymNode(sym, env, int))


def nonzero(mode, x):
    env = shape_env(mode)
    u = _count(env, x, f"the number of nonzero elements of {x.gp_label}")
    n = sym_int(env, u)
    val = torch.empty_strided((n, x.dim()), (1, n), dtype=torch.long, device=META)
    return _record(mode, aten.nonzero.default, (x,), {}, val, [(u, 0, 0)], x.device)


def masked_select(mode, x, mask):
    env = shape_env(mode)
    shape = torch.broadcast_shapes(x.shape, mask.shape)
    whole = torch.empty(shape, device=META)
    u = _count(env, whole, f"the number of elements {mask.gp_label if isinstance(mask, TracerTensor) else 'a mask'} "
                           "selects")
    val = torch.empty((sym_int(env, u),), dtype=x.dtype, device=META)
    return _record(mode, aten.masked_select.default, (x, mask), {}, val, [(u, 0, 0)], x.device)


_UNIQUE_ARGUMENTS = {
    aten._unique2.default: ("sorted", "return_inverse", "return_counts"),
    aten.unique_consecutive.default: ("return_inverse", "return_counts", "dim"),
    aten.unique_dim.default: ("dim", "sorted", "return_inverse", "return_counts"),
    aten.unique_dim_consecutive.default: ("dim", "return_inverse", "return_counts"),
}


def unique(mode, func, x, *flags, **kwargs):
    """torch.unique / unique_consecutive, flat or along a dim: the distinct values (or
    slices along `dim`), their count a fresh symbol; the inverse and counts outputs have the
    sizes the kernel gives them."""
    bound = dict(zip(_UNIQUE_ARGUMENTS[func], flags), **kwargs)
    inverse, counts = bound.get("return_inverse", False), bound.get("return_counts", False)
    env = shape_env(mode)
    dim = bound.get("dim")
    if dim is None:
        u = _count(env, x, f"the number of distinct values of {x.gp_label}")
        n = sym_int(env, u)
        val = (torch.empty((n,), dtype=x.dtype, device=META),
               torch.empty(tuple(x.shape) if inverse else (0,), dtype=torch.long, device=META),
               torch.empty((n,) if counts else (0,), dtype=torch.long, device=META))
        return _record(mode, func, (x, *flags), kwargs, val, [(u, 0, 0)], x.device)
    dim = dim % x.dim()
    length = x.shape[dim]
    upper = length if isinstance(length, int) else bounds(length.node.expr, env.ranges)[1]
    u = env.unbacked.new(int, 0, upper, f"the number of distinct slices of {x.gp_label} along dimension {dim}",
                         size_like=True)
    n = sym_int(env, u)
    shape = list(x.shape)
    shape[dim] = n
    val = (torch.empty(shape, dtype=x.dtype, device=META), torch.empty((length,), dtype=torch.long, device=META),
           torch.empty((n,), dtype=torch.long, device=META))
    return _record(mode, func, (x, *flags), kwargs, val, [(u, 0, dim)], x.device)


def bincount(mode, x, weights=None, minlength=0):
    """torch.bincount: one bin per value up to the largest, at least `minlength`: a fresh
    size. Counts are int64; weighted sums float32 for float32 weights, else float64 (the
    kernel's rule)."""
    env = shape_env(mode)
    lower = minlength if isinstance(minlength, int) else 0
    u = env.unbacked.new(int, lower, INF, f"the number of bins of torch.bincount({x.gp_label})", size_like=True)
    dtype = torch.long if weights is None else torch.float32 if weights.dtype == torch.float32 else torch.float64
    val = torch.empty((sym_int(env, u),), dtype=dtype, device=META)
    return _record(mode, aten.bincount.default, (x, weights, minlength), {}, val, [(u, 0, 0)], x.device)


def repeat_interleave(mode, repeats, output_size=None):
    if output_size is not None:
        return mode.call(aten.repeat_interleave.Tensor, (repeats,), {"output_size": output_size})
    env = shape_env(mode)
    u = env.unbacked.new(int, 0, INF, f"the sum of the repeats {repeats.gp_label}", size_like=True)
    val = torch.empty((sym_int(env, u),), dtype=repeats.dtype, device=META)
    return _record(mode, aten.repeat_interleave.Tensor, (repeats,), {}, val, [(u, 0, 0)], repeats.device)


def _data_dependent(env: ShapeEnv | None, v) -> bool:
    return env is not None and is_sym(v) and bool(env.unbacked.involved(v.node.expr))


def slice_tensor(mode, x, dim=0, start=None, end=None, step=1):
    """`x[:n]` / `x.narrow(0, 0, n)` with a data-dependent end: the slice's length is a fresh
    size (the end clamped to the dimension, as slicing does), bound to sym_size of the result."""
    env = mode.rec.sizes.env if mode.rec.sizes is not None else None
    if not _data_dependent(env, end) or _data_dependent(env, start) or _data_dependent(env, step):
        if _data_dependent(env, start) or _data_dependent(env, step):
            raise DataDependentError(
                "the program slices a tensor from a data-dependent start (or with a data-dependent step)",
                fix="slice from a start known while capturing, e.g. x[:n] or x.narrow(dim, 0, n), and shift the "
                    "data instead (torch.roll), or use torch.index_select with computed indices")
        return NotImplemented
    dim = dim % x.dim()
    start = 0 if start is None else start
    size = x.shape[dim]
    if not isinstance(start, int) or start < 0 or not isinstance(step, int):
        raise DataDependentError("the program slices a tensor up to a data-dependent end from a negative or "
                                 "symbolic start", fix="slice from a start >= 0 known while capturing")
    upper = size if isinstance(size, int) else bounds(size.node.expr, env.ranges)[1]
    u = env.unbacked.new(int, 0, upper, f"the length of {x.gp_label}[..., :end] along dim {dim}", size_like=True)
    meta = x.gp_meta
    sizes, strides = list(meta.shape), list(meta.stride())
    sizes[dim] = sym_int(env, u)
    offset = meta.storage_offset() + start * strides[dim]
    strides[dim] = strides[dim] * step
    val = meta.as_strided(sizes, strides, offset)
    rec = mode.rec
    args = (x, dim, start, end, step)
    node_args = tuple(rec.graph_arg(a) for a in args)
    node = rec.node(aten.slice.Tensor, node_args, {}, val)
    rec.user_calls.add(node)
    out = rec.wrap(val, node, x.device, view_of=x, step=(aten.slice.Tensor, tuple(node_args[1:]), {}))
    bind_symbol(rec, u, rec.node(aten.sym_size.int, (node, dim), {}, sym_int(env, u)))
    return out


def select_int(mode, x, dim, index):
    """`x[i]` with a data-dependent i: the element's position (i, or i + size when i < 0) is
    not known while capturing, so its storage offset is a fresh value; an index out of
    range fails at run time as it does in eager."""
    env = mode.rec.sizes.env if mode.rec.sizes is not None else None
    if not _data_dependent(env, index):
        return NotImplemented
    dim = dim % x.dim()
    meta = x.gp_meta
    sizes, strides = list(meta.shape), list(meta.stride())
    del sizes[dim], strides[dim]
    offset = env.unbacked.new(int, 0, INF, f"the storage offset of {x.gp_label}[i]", size_like=True)
    val = meta.as_strided(sizes, strides, sym_int(env, offset))
    rec = mode.rec
    node_args = (rec.graph_arg(x), dim, rec.graph_arg(index))
    node = rec.node(aten.select.int, node_args, {}, val)
    rec.user_calls.add(node)
    return rec.wrap(val, node, x.device, view_of=x, step=(aten.select.int, tuple(node_args[1:]), {}))


def mask_index(mode, x, indices):
    """`x[mask]`: the mask's nonzero positions index x, so the result's size is their count."""
    new = []
    with mode:
        for i in indices:
            if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
                new.extend(aten.nonzero.default(i).unbind(1))
            else:
                new.append(i)
        return aten.index.Tensor(x, new)


def _unique_rule(func, mode, x, *flags, **kwargs):
    return unique(mode, func, x, *flags, **kwargs)


def rules() -> dict:
    """Operator -> capture rule, for the capture mode."""
    return {
        aten._local_scalar_dense.default: lambda mode, t: local_scalar_dense(mode, aten._local_scalar_dense.default, t),
        # `item` is a composite reading `_local_scalar_dense`: a lowering that expands it records that
        aten.item.default: lambda mode, t: local_scalar_dense(
            mode, aten.item.default if mode.policy.keep(aten.item.default) else aten._local_scalar_dense.default, t),
        aten.slice.Tensor: slice_tensor,
        aten.select.int: select_int,
        aten.nonzero.default: nonzero,
        aten.masked_select.default: masked_select,
        **{op: functools.partial(_unique_rule, op) for op in _UNIQUE_ARGUMENTS},
        aten.bincount.default: bincount,
        aten.repeat_interleave.Tensor: repeat_interleave,
        aten.sym_constrain_range_for_size.default:
            lambda mode, size, min=None, max=None: constrain_range(mode, size, min, max, for_size=True),
        aten.sym_constrain_range.default:
            lambda mode, size, min=None, max=None: constrain_range(mode, size, min, max, for_size=False),
    }


__all__ = ["ASSERT_PREFIX", "rules", "mask_index", "bind_output_sizes", "sym_int"]
