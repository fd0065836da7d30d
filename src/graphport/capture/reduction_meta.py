"""Output metadata of reductions over listed dimensions on symbolic sizes, in closed form.

A reduction's result is a new row-major tensor (torch's meta kernels lay it out with
contiguous strides, and eager allocates it with `empty`) whose shape is the input's with
the reduced dimensions removed, or kept as 1 with `keepdim`, whatever the input's layout.
torch's Python reference gets there through its generic reduction machinery, asking size
questions on the way; this asks none. dtypes come from the operator run on tiny tensors.
"""
from __future__ import annotations

from typing import Any

import torch

from .meta_probe import probe
from .pointwise_meta import symbolic_sizes

aten = torch.ops.aten

# Reductions whose dimensions are a `dim` argument (a list, an int, or None for all).
_REDUCTIONS = frozenset({aten.mean.dim, aten.sum.dim_IntList, aten.amax.default, aten.amin.default,
                         aten.var_mean.correction, aten.var.correction})


def reduction_meta(func, args: tuple, kwargs: dict) -> Any:
    """The output meta tensor(s) of a reduction over listed dimensions, or None."""
    if func not in _REDUCTIONS or not args or not isinstance(args[0], torch.Tensor):
        return None
    x = args[0]
    if not symbolic_sizes([x]) or any(isinstance(a, torch.Tensor) for a in (*args[1:], *kwargs.values())):
        return None
    bound = _bind(func, args, kwargs)
    if bound is None:
        return None
    dims, keepdim = bound
    outputs = probe(func, args, kwargs)
    shape = [1 if d in dims else s for d, s in enumerate(x.shape) if keepdim or d not in dims]
    made = tuple(torch.empty(shape, dtype=dtype, device="meta") for dtype, _ in outputs)
    return made if len(made) > 1 else made[0]


def _bind(func, args: tuple, kwargs: dict) -> tuple[set[int], bool] | None:
    """(the reduced dimensions, keepdim), or None for a call this does not cover."""
    names = [a.name for a in func._schema.arguments]
    values = dict(zip(names, args))
    values.update(kwargs)
    dims, keepdim = values.get("dim"), bool(values.get("keepdim", False))
    rank = args[0].dim()
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return set(range(rank)), keepdim
    dims = [dims] if isinstance(dims, int) else dims
    if rank == 0 or not all(type(d) is int and -rank <= d < rank for d in dims):
        return None
    return {d % rank for d in dims}, keepdim
