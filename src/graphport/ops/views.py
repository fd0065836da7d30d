"""Views and their inverses: how a write through a view becomes a write to its base.

Capture stays functional by replaying, for a mutated view, the chain of view ops from
its base and then scattering the new value back up that chain, one inverse per step
(`select` -> `select_scatter`, `view` -> `view` back to the base shape, ...).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import torch

aten = torch.ops.aten


@dataclass(frozen=True)
class ViewStep:
    """One view op applied to a tensor: `op(source, *args, **kwargs)[index]`.

    `op` is None for an alias (detach, alias): the view is its source.
    """
    op: torch._ops.OpOverload | None
    args: tuple
    kwargs: dict
    index: int | None = None


# emit(op, args) records a call and returns its graph value; ops are given with the
# source tensor's graph value first.
Emit = Callable[[torch._ops.OpOverload, tuple], Any]


def replay(step: ViewStep, source: Any, emit: Emit) -> Any:
    """Recompute a view from the current value of its source."""
    if step.op is None:
        return source
    value = emit(step.op, (source, *step.args), step.kwargs)
    if step.index is not None:
        value = emit(operator.getitem, (value, step.index), {})
    return value


def scatter_back(step: ViewStep, source: Any, new_view: Any, source_meta: torch.Tensor,
                 view_meta: torch.Tensor, emit: Emit) -> Any:
    """The new value of `source` once the view `step(source)` holds `new_view`."""
    op, args = step.op, step.args
    if op is None:
        return new_view
    if op is aten.select.int:
        return emit(aten.select_scatter.default, (source, new_view, *args), {})
    if op is aten.slice.Tensor:
        dim, start, end, stride = (list(args) + [0, None, None, 1][len(args):])[:4]
        return emit(aten.slice_scatter.default, (source, new_view, dim, start, end, stride), {})
    if op is aten.diagonal.default:
        return emit(aten.diagonal_scatter.default, (source, new_view, *args), {})
    if op is aten.as_strided.default:
        return emit(aten.as_strided_scatter.default, (source, new_view, *args), {})
    if op is aten.permute.default:
        dims = [d % view_meta.dim() for d in args[0]]
        inverse = [dims.index(i) for i in range(len(dims))]
        return emit(aten.permute.default, (new_view, inverse), {})
    if op in (aten.transpose.int, aten.t.default):
        return emit(op, (new_view, *args), {})
    if op in (aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int):
        return _scatter_split(step, source, new_view, source_meta, emit)
    if op in (aten.view.default, aten._unsafe_view.default, aten.unsqueeze.default, aten.squeeze.dim,
              aten.squeeze.dims, aten.squeeze.default, aten._reshape_alias.default, aten.view.dtype,
              aten.alias.default):
        return emit(aten.view.default, (new_view, list(source_meta.shape)), {})
    # Any other view: it is a strided window of its source, so write that window back.
    offset = view_meta.storage_offset() - source_meta.storage_offset()
    return emit(aten.as_strided_scatter.default,
                (source, new_view, list(view_meta.shape), list(view_meta.stride()), offset), {})


def _scatter_split(step: ViewStep, source, new_view, source_meta: torch.Tensor, emit: Emit):
    op, args, i = step.op, step.args, step.index
    if op is aten.unbind.int:
        dim = args[0] if args else 0
        return emit(aten.select_scatter.default, (source, new_view, dim, i), {})
    dim = args[1] if len(args) > 1 else step.kwargs.get("dim", 0)
    if op is aten.split.Tensor:
        start = args[0] * i
        end = min(start + args[0], source_meta.shape[dim])
    else:
        start = sum(args[0][:i])
        end = start + args[0][i]
    return emit(aten.slice_scatter.default, (source, new_view, dim, start, end, 1), {})
