"""Which recorded values eager would give `requires_grad`, for kernels that choose by it.

The capture runs below autograd: its tracers never require grad, whatever eager would say.
A few composite ops pick their kernel by it, and the kernel decides the output's strides:
CPU attention takes the fused kernel (a transposed output layout) unless the mask requires
grad, then the math kernel (a contiguous one). A later `view` is recorded for the layout the
capture saw, so it must be the layout eager produces. Eager's rule is followed from the
graph: a floating value requires grad when it was computed with grad enabled from a value
that does, starting at the parameters and inputs that do.

The graph itself must also say where gradients stop, for the joint forward-backward
export (passes/joint.py), which differentiates it: a node recorded with the grad mode
the program set itself (`torch.no_grad()` inside forward) carries that mode in
`meta[GRAD_ENABLED_KEY]`, and `detach()` of a value that would require grad is a node
(capture/rules.py), as torch.export records it.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.fx as fx


# Node metadata: the grad mode a node was recorded under, where the program set it itself
# (absent: the mode the program was called with).
GRAD_ENABLED_KEY = "grad_enabled"

# Composite ops whose kernel (and so output layout) depends on which inputs require grad.
CHOOSES_KERNEL_BY_GRAD = frozenset({torch.ops.aten.scaled_dot_product_attention.default})


class GradFlow:
    """Nodes recorded with grad disabled, and the answers found so far."""

    def __init__(self) -> None:
        self.without_grad: set[fx.Node] = set()
        self._answers: dict[fx.Node, bool] = {}
        self._answers_with_grad: dict[fx.Node, bool] = {}
        self.entered_with = _recording_grad()   # the grad mode the program was called with

    def note(self, node: fx.Node) -> None:
        """Called as each op node is recorded, under the program's own grad mode."""
        enabled = _recording_grad()
        if not enabled:
            self.without_grad.add(node)
        if enabled != self.entered_with:
            node.meta[GRAD_ENABLED_KEY] = enabled

    def requires_grad(self, node: fx.Node, called_with_grad: bool = False) -> bool:
        """Whether eager's value for `node` would require grad (iterative: graphs are deep).
        `called_with_grad`: as if the program were called with grad enabled, whatever the
        mode of this capture (what a differentiation of the graph will see)."""
        answers = self._answers_with_grad if called_with_grad else self._answers
        stack = [node]
        while stack:
            top = stack[-1]
            if top in answers:
                stack.pop()
                continue
            own = self._own(top, called_with_grad)
            if own is not None:
                answers[stack.pop()] = own
                continue
            pending = [a for a in top.all_input_nodes if a not in answers]
            if pending:
                stack.extend(pending)
                continue
            answers[stack.pop()] = any(answers[a] for a in top.all_input_nodes)
        return answers[node]

    def _own(self, node: fx.Node, called_with_grad: bool) -> bool | None:
        """The answer without looking at the inputs, where there is one."""
        val = node.meta.get("val")
        if node.op == "placeholder":
            return bool(getattr(val, "requires_grad", False))
        without_grad = node.meta.get(GRAD_ENABLED_KEY) is False if called_with_grad else node in self.without_grad
        if without_grad or node.op != "call_function" or node.target is torch.ops.aten.detach.default:
            return False
        if isinstance(val, torch.Tensor) and not (val.dtype.is_floating_point or val.dtype.is_complex):
            return False
        if not isinstance(val, (torch.Tensor, list, tuple)):   # sizes and Python scalars
            return False
        return None


def _recording_grad() -> bool:
    """Whether eager would record gradients now: grad mode on, and not in inference mode
    (where `enable_grad()` turns the grad mode on but records nothing)."""
    return torch.is_grad_enabled() and not torch.is_inference_mode_enabled()


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
