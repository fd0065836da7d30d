"""Dispatch policies: which composite operators a capture keeps as one node.

A composite (CompositeImplicitAutograd) operator reaches the capture mode whole; the
policy says whether to record it as a node or to run its decomposition, whose parts are
then recorded. The default export level keeps what torch.export's default keeps
(`linear`, `conv2d`, `layer_norm`, `scaled_dot_product_attention`, ...). Other levels
(Core ATen, user decomposition tables) are other policies given to the same capture.
"""
from __future__ import annotations

from typing import Any, Callable

from .kinds import op_info


class DispatchPolicy:
    """The default export level: functional composite ops stay whole, the rest decompose."""

    def keep(self, op) -> bool:
        return op_info(op).preserved

    def decomposition(self, op) -> Callable[..., Any] | None:
        """How to expand `op` when it is not kept, or None to record it as it is."""
        info = op_info(op)
        return op.decompose if info.decompose else None


EXPORT_DEFAULT = DispatchPolicy()
