"""Operators with capture rules of their own, instead of being recorded as called."""
from __future__ import annotations

from typing import Any, Callable

import torch

from .control_flow import capture_cond, capture_map, capture_scan, capture_while_loop
from .custom_objects import capture_call_torchbind
from .tracer import TracerTensor

aten = torch.ops.aten


def _lift_fresh(mode, t, *rest):
    """`torch.tensor(data)` inside forward: a constant input, copied as torch.export does."""
    if isinstance(t, TracerTensor):
        return t
    return mode.call(aten.clone.default, (mode.rec.constant(t),), {})


def _alias(mode, t, *rest):
    """detach/alias: the same value, sharing writes with its source (a tensor attribute's
    alias is one of the lifted constant, which refuses writes as the attribute does)."""
    return mode.rec.alias(t if isinstance(t, TracerTensor) else mode.rec.constant(t))


def _detach(mode, t, *rest):
    """detach of a value eager would have require grad: a `detach` node, as torch.export
    records it, so that a graph differentiated later (the joint forward-backward export)
    stops the gradient there; a lowering to Core ATen records `alias` instead, as torch's
    does. Any other detach is an alias, as `_alias` records it. The node is a view of its
    source: writes through either reach the other."""
    if mode.rec.detach_nodes and isinstance(t, TracerTensor) and (t.dtype.is_floating_point or t.dtype.is_complex) \
            and mode.rec.grad.requires_grad(mode.rec.value(t), called_with_grad=True):
        lowered = mode.policy.decomposition(aten.detach.default) is not None   # Core ATen: `alias`, as torch's
        return mode.call(aten.alias.default if lowered else aten.detach.default, (t,), {}, view=True)
    return _alias(mode, t, *rest)


def _identity(mode, t, *rest):
    return t


def _dropout(op):
    """Dropout that drops nothing (`training=False` or `p == 0`) returns its input itself in
    eager, which a program may write through. torch's Python kernel of the op returns a
    copy: that `clone` is recorded (the graph torch.export makes), and the result is an
    alias of the input whose value is the copy until one of them is written."""
    def rule(mode, input, p, train):
        out = mode.run_decomposition(op, mode.policy.decomposition(op), (input, p, train), {})
        if (not train or p == 0) and isinstance(input, TracerTensor):
            return mode.alias_computed_as(input, out)
        return out
    return rule


def _view_by_kernel(op):
    """An op whose results are views of its input in eager although its schema says they
    are new tensors (`unsafe_split`: views without autograd's view tracking): recorded as a
    view, so writes through a piece reach the input."""
    def rule(mode, *args, **kwargs):
        return mode.call(op, args, kwargs, view=True)
    return rule


def _batch_norm(mode, input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    """Batch norm at torch.export's level: one node, with running-stat updates as writes."""
    if not training:
        out = mode.call(aten._native_batch_norm_legit_no_training.default,
                        (input, weight, bias, running_mean, running_var, momentum, eps), {})
        return out[0]
    if isinstance(input.numel(), int) and input.numel() == 0:
        return _empty_batch_norm(mode, input, weight, bias)
    if running_mean is None:
        out = mode.call(aten._native_batch_norm_legit.no_stats, (input, weight, bias, True, momentum, eps), {})
        return out[0]
    out = mode.call(aten._native_batch_norm_legit_functional.default,
                    (input, weight, bias, running_mean, running_var, True, momentum, eps), {})
    mode.write(running_mean, out[3])
    mode.write(running_var, out[4])
    return out[0]


def _empty_batch_norm(mode, input, weight, bias):
    """Training-mode batch norm of an input with no elements, as eager computes it: a copy
    of the input, times weight[0] and plus bias[0] where given, running statistics left as
    they are (the batch norm operators themselves reject an empty input)."""
    out = mode.call(aten.clone.default, (input,), {})
    if weight is not None:
        out = mode.call(aten.mul.Tensor, (out, mode.call(aten.select.int, (weight, 0, 0), {}, view=True)), {})
    if bias is not None:
        out = mode.call(aten.add.Tensor, (out, mode.call(aten.select.int, (bias, 0, 0), {}, view=True)), {})
    return out


SPECIAL: dict[Any, Callable] = {
    aten.lift_fresh.default: _lift_fresh,
    aten.lift_fresh_copy.default: _lift_fresh,
    aten.detach.default: _detach,
    aten.alias.default: _alias,
    aten.detach_.default: _identity,
    aten.batch_norm.default: _batch_norm,
    **{op: _dropout(op) for op in (aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
                                   aten.feature_alpha_dropout.default)},
    **{op: _view_by_kernel(op) for op in (aten.unsafe_split.Tensor, aten.unsafe_split_with_sizes.default)},
}


HIGHER_ORDER: dict[str, Callable] = {"cond": capture_cond, "map_impl": capture_map,
                                      "while_loop": capture_while_loop, "scan": capture_scan,
                                      "call_torchbind": capture_call_torchbind}
