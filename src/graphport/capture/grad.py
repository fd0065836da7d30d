"""Which recorded values eager would give `requires_grad`, for kernels that choose by it.

The capture runs below autograd: its tracers never require grad, whatever eager would say.
A few composite ops pick their kernel by it, and the kernel decides the output's strides:
CPU attention takes the fused kernel (a transposed output layout) unless the mask requires
grad, then the math kernel (a contiguous one). A later `view` is recorded for the layout the
capture saw, so it must be the layout eager produces. Eager's rule is followed from the
graph: a floating value requires grad when it was computed with grad enabled from a value
that does, starting at the parameters and inputs that do.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.fx as fx


class GradFlow:
    """Nodes recorded with grad disabled, and the answers found so far."""

    def __init__(self) -> None:
        self.without_grad: set[fx.Node] = set()
        self._answers: dict[fx.Node, bool] = {}

    def note(self, node: fx.Node) -> None:
        """Called as each op node is recorded, under the program's own grad mode."""
        if not torch.is_grad_enabled():
            self.without_grad.add(node)

    def requires_grad(self, node: fx.Node) -> bool:
        """Whether eager's value for `node` would require grad (iterative: graphs are deep)."""
        stack = [node]
        while stack:
            top = stack[-1]
            if top in self._answers:
                stack.pop()
                continue
            own = self._own(top)
            if own is not None:
                self._answers[stack.pop()] = own
                continue
            pending = [a for a in top.all_input_nodes if a not in self._answers]
            if pending:
                stack.extend(pending)
                continue
            self._answers[stack.pop()] = any(self._answers[a] for a in top.all_input_nodes)
        return self._answers[node]

    def _own(self, node: fx.Node) -> bool | None:
        """The answer without looking at the inputs, where there is one."""
        val = node.meta.get("val")
        if node.op == "placeholder":
            return bool(getattr(val, "requires_grad", False))
        if node in self.without_grad or node.op != "call_function":
            return False
        if isinstance(val, torch.Tensor) and not (val.dtype.is_floating_point or val.dtype.is_complex):
            return False
        if not isinstance(val, (torch.Tensor, list, tuple)):   # sizes and Python scalars
            return False
        return None


@contextlib.contextmanager
def as_eager_requires(tracers: list, flags: list[bool]) -> Iterator[None]:
    """The tracers flagged `requires_grad` as eager's values would be, for the duration."""
    changed = [t for t, flag in zip(tracers, flags) if flag and not t.requires_grad]
    for t in changed:
        t.requires_grad_(True)
    try:
        yield
    finally:
        for t in changed:
            t.requires_grad_(False)
