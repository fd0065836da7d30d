"""Operators with capture rules of their own, instead of being recorded as called."""
from __future__ import annotations

from typing import Any, Callable

import torch

from .control_flow import capture_cond, capture_map, capture_scan, capture_while_loop
from .tracer import TracerTensor

aten = torch.ops.aten


def _lift_fresh(mode, t, *rest):
    """`torch.tensor(data)` inside forward: a constant input, copied as torch.export does."""
    if isinstance(t, TracerTensor):
        return t
    return mode.call(aten.clone.default, (mode.rec.constant(t),), {})


def _alias(mode, t, *rest):
    """detach/alias: the same value, sharing writes with its source."""
    return mode.rec.alias(t)


def _identity(mode, t, *rest):
    return t


def _batch_norm(mode, input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    """Batch norm at torch.export's level: one node, with running-stat updates as writes."""
    if not training:
        out = mode.call(aten._native_batch_norm_legit_no_training.default,
                        (input, weight, bias, running_mean, running_var, momentum, eps), {})
        return out[0]
    if running_mean is None:
        out = mode.call(aten._native_batch_norm_legit.no_stats, (input, weight, bias, True, momentum, eps), {})
        return out[0]
    out = mode.call(aten._native_batch_norm_legit_functional.default,
                    (input, weight, bias, running_mean, running_var, True, momentum, eps), {})
    mode.write(running_mean, out[3])
    mode.write(running_var, out[4])
    return out[0]


SPECIAL: dict[Any, Callable] = {
    aten.lift_fresh.default: _lift_fresh,
    aten.lift_fresh_copy.default: _lift_fresh,
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.detach_.default: _identity,
    aten.batch_norm.default: _batch_norm,
}


HIGHER_ORDER: dict[str, Callable] = {"cond": capture_cond, "map_impl": capture_map,
                                      "while_loop": capture_while_loop, "scan": capture_scan}
