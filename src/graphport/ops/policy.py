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
`may_alias` names them; capture runs their decomposition first and keeps them whole only
when no result aliases an input (capture/mode.py, CaptureMode.call_kept_composite).
"""
from __future__ import annotations

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

    def may_alias(self, op) -> bool:
        """Whether the kept composite `op` may return an input, or a view of one, in eager."""
        return op in ALIASING_COMPOSITES


# Composite ATen ops with no alias annotation whose kernel returns an input (the `to` of a
# tensor already of that type, a size it already has) or views of inputs (expand, permute),
# found by calling every kept composite on plain tensors and comparing storages, plus the
# size- and equation-dependent ones (sum_to_size, einsum) found by reading their kernels.
ALIASING_COMPOSITES = frozenset({
    aten.type_as.default, aten.to_dense.default, aten.sum_to_size.default, aten.broadcast_tensors.default,
    aten.meshgrid.default, aten.meshgrid.indexing, aten.einsum.default,
    *(getattr(aten, f"_cast_{t}").default for t in ("Byte", "Char", "Double", "Float", "Int", "Long", "Short", "Half")),
})

EXPORT_DEFAULT = DispatchPolicy()


@lru_cache(maxsize=None)
def python_decomposition(op) -> Callable[..., Any] | None:
    """A Python implementation of `op` written against symbolic sizes, or None."""
    found = _torch.decomposition_table().get(op)
    if found is not None:
        return found
    ref = _torch.python_reference(op)
    if ref is None or not callable(ref) or op._schema.is_mutable:
        return None
    if len(op.overloadpacket.overloads()) > 1 and op._overloadname not in ("default", "Tensor"):
        return None   # a ref covers its op's main overload; others may take other arguments
    return ref
