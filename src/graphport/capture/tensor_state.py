"""The program's reads of a tensor's autograd state, answered as eager would answer them.

Capture runs below autograd: a tracer never requires grad, is always a leaf, has no
`grad_fn`, no `.grad` and its own version counter. A program that branches on those
(`y * (5.0 if x.requires_grad else 7.0)`) would silently take another path than eager.
A torch function mode sees each such property read by the program's Python (capture's
own reads happen inside mode handlers, where it is off) and answers it:

- `requires_grad`, `is_leaf` and whether `grad_fn` is None follow eager's rule from the
  graph (grad.py): parameters and inputs as they are, computed floating values when made
  with grad enabled from a value that requires grad. The answer depends on the call's grad
  mode and on its inputs' flags, which the graph does not carry: each read is reported as a
  baked value in `ep.python_effects` with the answer it took.
- `grad_fn` of a value that has one is a stand-in: `is None` answers right; anything else
  done with it is refused (the graph has no autograd nodes).
- `.grad` of a parameter, buffer or input (state the graph does not have) and `_version`
  (a count of writes eager keeps per tensor, including writes before the call) are refused.
  `.grad` of a computed value is None, as in eager.
- Inside a torch.cond branch or a loop body (a subgraph, traced with this mode entered again)
  the gradient flow is not followed: the reads above are refused there.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from .. import _torch
from ..audit import PythonAudit
from ..errors import UnsupportedFeatureError
from ..source import user_frames
from .mode import CaptureMode
from .recorder import Recorder
from .tracer import TracerTensor

_REQUIRES_GRAD = torch.Tensor.requires_grad.__get__
_IS_LEAF = torch.Tensor.is_leaf.__get__
_GRAD_FN = torch.Tensor.grad_fn.__get__
_GRAD = torch.Tensor.grad.__get__
_VERSION = torch.Tensor._version.__get__
_READS = (_REQUIRES_GRAD, _IS_LEAF, _GRAD_FN, _GRAD, _VERSION)

_FIX_BRANCH = ("compute both sides, or decide outside forward and pass the choice in (export once per choice), "
               "or guard the read with `if not torch.compiler.is_exporting():`")


class TensorStateReads(TorchFunctionMode):
    """Answers the program's reads of a tracer's autograd state (see the module docstring)."""

    def __init__(self, rec: Recorder, audit: PythonAudit | None):
        super().__init__()
        self.rec = rec
        self.audit = audit

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if _torch.dispatch_mode_count() > 1:
            _refuse_dispatch_mode_over_capture()
        if not args or not isinstance(args[0], TracerTensor) or func not in _READS:
            return func(*args, **(kwargs or {}))
        t = args[0]
        if func == _GRAD:
            return self._grad(t, func)
        if func == _VERSION:
            raise UnsupportedFeatureError(
                f"the program reads `._version` of a traced tensor ({t.gp_label}): eager's version counter counts "
                "writes made before the call as well, which the exported program cannot know",
                fix=_FIX_BRANCH)
        if self.rec.scope.parent is not None:
            raise UnsupportedFeatureError(
                f"the program reads `{func.__self__.__name__}` of a tensor inside a torch.cond branch or a loop "
                "body, whose autograd state graphport does not follow",
                fix="read it before the torch.cond (or loop) call and use the answer inside as a Python value")
        requires = self._requires_grad(t)
        leaf = self._is_leaf(t, requires)
        if func == _REQUIRES_GRAD:
            return self._baked("requires_grad", requires)
        if func == _IS_LEAF:
            return self._baked("is_leaf", leaf)
        self._baked("grad_fn is None", leaf)
        return None if leaf else _GradFnStandIn()

    def _requires_grad(self, t: TracerTensor) -> bool:
        """Eager's flag: set by the program itself (`requires_grad_()`), or found by the graph's
        gradient flow."""
        return bool(_REQUIRES_GRAD(t)) or self.rec.grad.requires_grad(self.rec.value(t))

    def _is_leaf(self, t: TracerTensor, requires: bool) -> bool:
        node = self.rec.value(t)
        if node.op == "placeholder":
            example = self.rec.real_values.get(node)
            return bool(getattr(example, "is_leaf", True))
        # a computed value is a leaf when it does not require grad, or when the program made it
        # require grad itself (only a leaf can be)
        return not requires or bool(_REQUIRES_GRAD(t))

    def _grad(self, t: TracerTensor, func):
        if self.rec.value(t).op == "placeholder":
            raise UnsupportedFeatureError(
                f"the program reads `.grad` of a parameter, buffer or input ({t.gp_label}): a gradient left by an "
                "earlier backward is state the exported graph does not have, and whether it is set can change "
                "between calls",
                fix="pass the gradient (or a flag saying whether it is set) to forward as an input, or read it "
                    "outside forward")
        return func(t)   # a value made in forward has no gradient yet, in eager as here

    def _baked(self, what: str, answer: bool) -> bool:
        if self.audit is not None:
            frames = user_frames()
            if frames:
                self.audit.baked(frames[-1], f"reads a tensor's `{what}` = {answer}, which depends on whether the "
                                             "inputs require grad and on the grad mode of the call; the graph keeps "
                                             "the answer of the export", key=what)
        return answer


def _refuse_dispatch_mode_over_capture() -> None:
    """A TorchDispatchMode the program entered inside forward sits above capture's own mode: it
    would see capture's operators (composites whole, before capture decomposes them), not the
    ones eager gives it, and its effect would be recorded only in part. Refused."""
    stack = _torch.dispatch_modes()
    ours = [i for i, mode in enumerate(stack) if isinstance(mode, CaptureMode)]
    above = stack[ours[-1] + 1:] if ours else []
    if above:
        raise UnsupportedFeatureError(
            f"the program runs inside a TorchDispatchMode it entered in forward ({type(above[0]).__name__}): "
            "capture records below such modes and cannot reproduce what the mode does to each operator",
            fix="write what the mode computes as operations in forward (for example `y = layer(x) * 2`); a mode "
                "that only observes (counting, logging) can be entered in eager only, under "
                "`if not torch.compiler.is_exporting():`")


class _GradFnStandIn:
    """`grad_fn` of a value eager would give one: answers `is None` (False) and truth; any
    other use is refused, the graph having no autograd nodes."""

    def __bool__(self) -> bool:
        return True

    def __getattr__(self, name: str):
        raise UnsupportedFeatureError(
            f"the program uses `.grad_fn.{name}` of a traced tensor: the exported graph has no autograd nodes",
            fix="only test `x.grad_fn is None` in forward, or use it outside forward")
