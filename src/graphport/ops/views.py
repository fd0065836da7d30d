"""Views and their inverses: how a write through a view becomes a write to its base.

Capture stays functional by replaying, for a mutated view, the chain of view ops from
its base and then scattering the new value back up that chain, one inverse per step.
`INVERSES` maps every ATen view overload capture can record to its inverse
(`select` -> `select_scatter`, `view` -> `view` back to the source shape, ...); composite
views (movedim, narrow, chunk, unflatten, real, ...) are decomposed by capture before
they are recorded, so they reach this table as the ops they decompose into.

An inverse never relies on the strides or storage offset of the value it writes (the
value comes out of functional ops, whose layout need not be the view's), nor on the
storage offset of its source (an input's offset is not known at capture time): only on
shapes, dtypes and the view op's own arguments.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.fx as fx

from .. import _torch
from ..errors import GraphportError

aten = torch.ops.aten


class ViewWriteError(Exception):
    """A write through a view that has no functional meaning (overlapping memory, a view op
    graphport does not know). Capture turns it into an UnsupportedFeatureError, using
    `what` (str(e)) as the message and `fix` as the fix."""

    def __init__(self, what: str, fix: str | None = None):
        self.what = what
        self.fix = fix or ("write into a copy (`v = v.clone()`) or into the base tensor itself "
                           "instead of into this view")
        super().__init__(what)


class ViewInverseMismatch(AssertionError):
    """An inverse produced a value whose shape or dtype is not its source's: a graphport bug."""


@dataclass(frozen=True)
class ViewStep:
    """One view op applied to a tensor: `op(source, *args, **kwargs)[index]`.

    `op` is None for an alias (detach, alias): the view is its source.
    """
    op: _torch.OpOverload | None
    args: tuple
    kwargs: dict
    index: int | None = None


# emit(op, args, kwargs) records a call and returns its graph value; ops are given with the
# source tensor's graph value first.
Emit = Callable[[Any, tuple, dict], Any]


def replay(step: ViewStep, source: Any, emit: Emit) -> Any:
    """Recompute a view from the current value of its source."""
    if step.op is None:
        return source
    value = emit(step.op, (source, *step.args), step.kwargs)
    if step.index is not None:
        value = emit(operator.getitem, (value, step.index), {})
    return value


def scatter_back(step: ViewStep, source: Any, new_view: Any, source_meta: torch.Tensor,
                 view_meta: torch.Tensor, emit: Emit, fill: Any = None) -> Any:
    """The new value of `source` once the view `step(source)` holds `new_view`.

    `fill` is the value when `new_view` is that one value everywhere (`fill_`, `zero_`):
    then a write through an overlapping view (expand, overlapping unfold), which eager
    allows for fills, sets every element of the source the view covers.

    `view_meta` is the metadata of `new_view` (its shape and dtype are the view's; its
    strides need not be). Raises ViewWriteError for writes that have no functional meaning
    and ViewInverseMismatch if the inverse does not give back the source's shape and dtype.
    """
    op = step.op
    inverse = INVERSES.get(op)
    if inverse is None:
        name = op.name() if op is not None else "alias"
        raise ViewWriteError(f"the program writes in place through a view made by {name}, "
                             "which graphport cannot write back to its base")
    ctx = _Step(step, source, new_view, source_meta, view_meta, emit, fill)
    result = inverse(ctx)
    _check_like_source(op, result, source_meta)
    return result


# -- helpers ------------------------------------------------------------------------------

def _meta(value: Any) -> torch.Tensor:
    """The metadata of a value: a graph node's meta["val"], or the value itself."""
    return value.meta["val"] if isinstance(value, fx.Node) else value


def _val(a: Any) -> Any:
    """A view argument as a Python value (ints stay ints; a graph size becomes its SymInt)."""
    if isinstance(a, fx.Node):
        return a.meta["val"]
    if isinstance(a, (list, tuple)):
        return type(a)(_val(x) for x in a)
    return a


class _Step:
    """What an inverse works with: the view's arguments bound to their schema names."""

    def __init__(self, step: ViewStep, source, new, source_meta, view_meta, emit, fill=None):
        self.step, self.source, self.new, self.emit, self.fill = step, source, new, emit, fill
        self.source_meta = source_meta
        self.new_meta = _meta(new) if isinstance(new, (fx.Node, torch.Tensor)) else view_meta
        self.rank = source_meta.dim()
        self.args: dict[str, Any] = {}
        if step.op is not None:
            for j, a in enumerate(step.op._schema.arguments[1:]):
                if j < len(step.args):
                    self.args[a.name] = step.args[j]
                elif a.name in step.kwargs:
                    self.args[a.name] = step.kwargs[a.name]
                elif a.has_default_value():
                    self.args[a.name] = a.default_value

    def arg(self, name: str) -> Any:
        """The argument as recorded (a graph value where it is a symbolic size)."""
        return self.args[name]

    def val(self, name: str) -> Any:
        """The argument as a Python int / SymInt / list."""
        return _val(self.args[name])

    def dim(self, d: int, rank: int | None = None) -> int:
        rank = self.rank if rank is None else rank
        return d % rank if rank else 0


def _same(a, b) -> bool:
    """Two sizes are provably equal (ints, or SymInts with the same expression)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return str(a) == str(b)


def _check_like_source(op, result, source_meta: torch.Tensor) -> None:
    got = _meta(result)
    if not isinstance(got, torch.Tensor):
        raise ViewInverseMismatch(f"the inverse of {op} returned {type(got).__name__}, not a tensor")
    want_shape, got_shape = list(source_meta.shape), list(got.shape)
    same = len(want_shape) == len(got_shape) and all(
        _same(a, b) or bool(a == b) for a, b in zip(want_shape, got_shape))
    if not same or got.dtype != source_meta.dtype:
        raise ViewInverseMismatch(
            f"writing back through {op} gave {got.dtype}{got_shape}, but its base is "
            f"{source_meta.dtype}{want_shape}")


def _relayout(c: _Step, target, op, *args):
    """emit op(target, *args), first making `target` contiguous if its layout does not allow
    the op (a view/dtype view needs compatible strides; a fresh value may not have them)."""
    try:
        return c.emit(op, (target, *args), {})
    except RuntimeError as e:
        if isinstance(e, GraphportError):
            raise
        dense = c.emit(aten.clone.default, (target,), {"memory_format": torch.contiguous_format})
        return c.emit(op, (dense, *args), {})


def _reshape_back(c: _Step, value=None):
    value = c.new if value is None else value
    return _relayout(c, value, aten.view.default, list(c.source_meta.shape))


# -- the inverses ----------------------------------------------------------------------------

def _inv_alias(c: _Step):
    return c.new


def _inv_select(c: _Step):
    return c.emit(aten.select_scatter.default, (c.source, c.new, c.arg("dim"), c.arg("index")), {})


def _inv_slice(c: _Step):
    return c.emit(aten.slice_scatter.default,
                  (c.source, c.new, c.arg("dim"), c.arg("start"), c.arg("end"), c.arg("step")), {})


def _inv_diagonal(c: _Step):
    return c.emit(aten.diagonal_scatter.default,
                  (c.source, c.new, c.arg("offset"), c.arg("dim1"), c.arg("dim2")), {})


def _inv_as_strided(c: _Step):
    # The replay is as_strided on the same source value, so the window is the same one.
    return c.emit(aten.as_strided_scatter.default,
                  (c.source, c.new, c.arg("size"), c.arg("stride"), c.arg("storage_offset")), {})


def _inv_permute(c: _Step):
    dims = [c.dim(d) for d in c.val("dims")]
    inverse = [dims.index(i) for i in range(len(dims))]
    return c.emit(aten.permute.default, (c.new, inverse), {})


def _inv_transpose(c: _Step):
    return c.emit(aten.transpose.int, (c.new, c.arg("dim0"), c.arg("dim1")), {})


def _inv_t(c: _Step):
    return c.emit(aten.t.default, (c.new,), {})


def _inv_unsqueeze(c: _Step):
    # unsqueeze's dim counts in the output's rank, as squeeze's does in its input's.
    return c.emit(aten.squeeze.dims, (c.new, [c.dim(c.val("dim"), c.rank + 1)]), {})


def _unsqueeze_dims(c: _Step, squeezed: list[int]):
    value = c.new
    for d in sorted(squeezed):
        value = c.emit(aten.unsqueeze.default, (value, d), {})
    return value


def _size_is_one(size) -> bool:
    # The view op already decided this (guarding on it where symbolic); asking again adds nothing.
    return bool(size == 1)


def _inv_squeeze(c: _Step):
    shape = c.source_meta.shape
    if c.step.op is aten.squeeze.default:
        candidates = range(c.rank)
    elif c.step.op is aten.squeeze.dim:
        candidates = [c.dim(c.val("dim"))]
    else:
        candidates = sorted({c.dim(d) for d in c.val("dim")})
    squeezed = [d for d in candidates if _size_is_one(shape[d])]
    return _unsqueeze_dims(c, squeezed)


def _inv_reshape(c: _Step):
    return _reshape_back(c)


def _inv_view_dtype(c: _Step):
    # Viewing back to the source dtype undoes any change of element size in the last dim.
    return _relayout(c, c.new, aten.view.dtype, c.source_meta.dtype)


def _inv_view_as_real(c: _Step):
    return _relayout(c, c.new, aten.view_as_complex.default)


def _inv_view_as_complex(c: _Step):
    return c.emit(aten.view_as_real.default, (c.new,), {})


def _inv_conj(c: _Step):
    return c.emit(aten.conj_physical.default, (c.new,), {})


def _inv_neg_view(c: _Step):
    return c.emit(aten.neg.default, (c.new,), {})


def _inv_expand(c: _Step):
    """Writing into an expanded view is only defined where nothing was broadcast."""
    src, view = list(c.source_meta.shape), list(c.new_meta.shape)
    extra = len(view) - len(src)
    broadcast = any(not _same(s, 1) for s in view[:extra]) or any(
        not _same(s, v) for s, v in zip(src, view[extra:]))
    if broadcast and c.fill is not None:   # every source element is in the view: all take the value
        return _filled(c, c.source)
    if broadcast:
        raise ViewWriteError(
            f"the program writes in place into a tensor expanded from {src} to {view}: several "
            "elements of the view share one memory location (eager PyTorch refuses this write too)",
            fix="materialize the expanded tensor first (`v = x.expand(...).clone()`) and write into that")
    if extra == 0:
        return c.new
    return c.emit(aten.squeeze.dims, (c.new, list(range(extra))), {})


def _filled(c: _Step, region):
    """`region` with every element set to the fill value."""
    op = aten.fill.Tensor if isinstance(c.fill, fx.Node) else aten.fill.Scalar
    return c.emit(op, (region, c.fill), {})


# View steps whose view covers every element of their source: a fill through them fills
# their source entirely, so the fill value carries on up the chain.
COVERS_SOURCE = frozenset({None, aten.view.default, aten._unsafe_view.default, aten._reshape_alias.default,
                           aten.permute.default, aten.transpose.int, aten.t.default, aten.unsqueeze.default,
                           aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.expand.default,
                           aten.alias.default})


def _inv_unfold(c: _Step):
    """unfold(d, size, step): view[..., i, ..., j] = source[..., i*step + j, ...]."""
    size, stride = c.val("size"), c.val("step")
    if c.rank == 0:
        return _reshape_back(c)
    d = c.dim(c.val("dimension"))
    n = c.new_meta.shape[d]
    if stride < size and not (isinstance(n, int) and n <= 1) and c.fill is not None:
        end = (n - 1) * stride + size   # the windows cover [0, end) of dim d
        region = c.emit(aten.slice.Tensor, (c.source, d, 0, end), {})
        return c.emit(aten.slice_scatter.default, (c.source, _filled(c, region), d, 0, end, 1), {})
    if stride < size and not (isinstance(n, int) and n <= 1):
        raise ViewWriteError(
            f"the program writes in place into overlapping windows (unfold with size {size} > step {stride}): "
            "the result would depend on the order of the writes",
            fix="compute the windows' new values out of place and combine them explicitly "
                "(for example with torch.nn.functional.fold)")
    if size == 0:
        return c.source
    # Position j of every window is a strided slice of dim d. (One form at every size: a form
    # that changed when a dynamic size is small could not be proven at that size.)
    value = c.source
    for j in range(size):
        column = c.emit(aten.select.int, (c.new, -1, j), {})
        value = c.emit(aten.slice_scatter.default, (value, column, d, j, j + (n - 1) * stride + 1, stride), {})
    return value


def _inv_split(c: _Step):
    i = c.step.index
    size = c.arg("split_size")
    if i == 0:
        start, end = 0, size
    else:
        start = _val(size) * i
        end = _val(size) * (i + 1)   # slice bounds past the end are clamped: the last piece
    return c.emit(aten.slice_scatter.default, (c.source, c.new, c.arg("dim"), start, end, 1), {})


def _inv_split_with_sizes(c: _Step):
    i = c.step.index
    sizes = c.arg("split_sizes")
    start = 0
    for s in sizes[:i]:
        start = start + _val(s)
    end = sizes[0] if i == 0 else start + _val(sizes[i])
    return c.emit(aten.slice_scatter.default, (c.source, c.new, c.arg("dim"), start, end, 1), {})


def _inv_unbind(c: _Step):
    return c.emit(aten.select_scatter.default, (c.source, c.new, c.arg("dim"), c.step.index), {})


Inverse = Callable[[_Step], Any]

INVERSES: dict[Any, Inverse] = {
    None: _inv_alias,                                  # detach / alias as recorded by capture
    aten.alias.default: _inv_alias,
    aten.detach.default: _inv_alias,
    aten.lift_fresh.default: _inv_alias,
    aten.select.int: _inv_select,
    aten.slice.Tensor: _inv_slice,
    aten.diagonal.default: _inv_diagonal,
    aten.as_strided.default: _inv_as_strided,
    aten.permute.default: _inv_permute,
    aten.transpose.int: _inv_transpose,
    aten.t.default: _inv_t,
    aten.unsqueeze.default: _inv_unsqueeze,
    aten.squeeze.default: _inv_squeeze,
    aten.squeeze.dim: _inv_squeeze,
    aten.squeeze.dims: _inv_squeeze,
    aten.view.default: _inv_reshape,
    aten._reshape_alias.default: _inv_reshape,
    aten._unsafe_view.default: _inv_reshape,          # not a view by schema; harmless if met
    aten.view.dtype: _inv_view_dtype,
    aten.view_as_real.default: _inv_view_as_real,
    aten.view_as_complex.default: _inv_view_as_complex,
    aten._conj.default: _inv_conj,
    aten._neg_view.default: _inv_neg_view,
    aten.expand.default: _inv_expand,
    aten.unfold.default: _inv_unfold,
    aten.split.Tensor: _inv_split,
    aten.split_with_sizes.default: _inv_split_with_sizes,
    aten.unsafe_split.Tensor: _inv_split,              # views by kernel, not by schema (capture/rules.py)
    aten.unsafe_split_with_sizes.default: _inv_split_with_sizes,
    aten.unbind.int: _inv_unbind,
}

# View ops whose arguments address the storage (an offset and strides counted from its
# start), not their source tensor's elements: `as_strided` of a view means the same window
# of the base's storage. Capture records them on the base itself, so neither the replay nor
# the scatter back depends on the intermediate views' values or layouts.
STORAGE_ADDRESSED = frozenset({aten.as_strided.default})

# View steps that keep the storage's elements as they are (same dtype, no conj/neg bit),
# through which a storage-addressed view can be taken from the base instead.
_SAME_ELEMENTS = frozenset({
    None, aten.alias.default, aten.detach.default, aten.lift_fresh.default, aten.select.int, aten.slice.Tensor,
    aten.diagonal.default, aten.as_strided.default, aten.permute.default, aten.transpose.int, aten.t.default,
    aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.view.default,
    aten._reshape_alias.default, aten.expand.default, aten.unfold.default, aten.split.Tensor,
    aten.split_with_sizes.default, aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes.default, aten.unbind.int,
})


def addresses_base_storage(op, chain: tuple[ViewStep, ...]) -> bool:
    """Whether the view op `op` applied to a view with this chain is the same view of the
    chain's base (see STORAGE_ADDRESSED)."""
    return op in STORAGE_ADDRESSED and all(step.op in _SAME_ELEMENTS for step in chain)


# ATen view overloads deliberately left out of INVERSES; a write through them raises
# ViewWriteError.
NOT_INVERTIBLE: dict[Any, str] = {
    aten._indices.default: "sparse COO internals: capture does not support sparse layouts",
    aten._values.default: "sparse COO internals: capture does not support sparse layouts",
    aten.indices.default: "sparse COO internals: capture does not support sparse layouts",
    aten.values.default: "sparse COO internals: capture does not support sparse layouts",
    aten.crow_indices.default: "sparse compressed internals: capture does not support sparse layouts",
    aten.col_indices.default: "sparse compressed internals: capture does not support sparse layouts",
    aten.ccol_indices.default: "sparse compressed internals: capture does not support sparse layouts",
    aten.row_indices.default: "sparse compressed internals: capture does not support sparse layouts",
    aten._sparse_broadcast_to.default: "sparse layouts are not supported by capture",
    aten._nested_view_from_buffer.default: "nested tensors are not supported by capture",
    aten._nested_view_from_jagged.default: "nested tensors are not supported by capture",
    aten._nested_get_values.default: "nested tensors are not supported by capture",
    aten._fw_primal.default: "forward-mode AD internals; capture runs below autograd",
    aten._make_dual.default: "forward-mode AD internals; capture runs below autograd",
    aten._test_autograd_multiple_dispatch_view.default: "autograd test operator",
    aten.slice_inverse.default: "functionalization internals (a view of the base shaped like the "
                                "source), not produced by user programs",
}
