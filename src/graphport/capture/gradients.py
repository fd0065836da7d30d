"""Gradients recorded by a replay: autograd differentiates the graph as it is captured again.

Capture normally dispatches below autograd (composites reach the capture mode whole). The
joint forward-backward export (passes/joint.py) replays a program's graph with autograd
on instead: the placeholders asked for are tracers that require grad, each replayed call
goes through autograd, which remembers how to differentiate it, and down to the capture
mode, which records it. Once the outputs are computed, `torch.autograd.grad` of the loss
runs torch's own derivative formulas on the tracers, and every ATen call they make reaches
the capture mode and is recorded in the same graph, decomposed by the same policy. So the
backward is torch's, as ATen operators, without a second tracer: the one the forward was
recorded with records it.

A node the program computed with the grad mode it set itself (`torch.no_grad()` inside
forward, capture/grad.py) is replayed in that mode, so the gradient stops where eager's
does; a `detach` node stops it by itself.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from .grad import GRAD_ENABLED_KEY
from .tracer import TracerTensor


@dataclass(frozen=True)
class GradientRequest:
    """Differentiate the graph's output `loss` (its flat index in the output node) with
    respect to the placeholders named in `wrt`, in that order. Outputs from index
    `user_outputs_from` on are the program's (before it: state mutations)."""
    loss: int
    wrt: tuple[str, ...]
    user_outputs_from: int


@dataclass
class GradientReport:
    """What the differentiation found, for the caller to judge in the user's terms."""
    loss_requires_grad: bool = False
    loss_numel: Any = None
    other_outputs_requiring_grad: list[int] = field(default_factory=list)   # flat output indices
    without_gradient: list[str] = field(default_factory=list)   # names in `wrt` the loss does not reach


def placeholder_tracer(val: torch.Tensor, device: torch.device, label: str, differentiated: bool) -> TracerTensor:
    """A placeholder's tracer for a differentiating replay: a leaf that requires grad when
    its gradient is asked for, and never otherwise (its recorded value may say it does)."""
    tracer = TracerTensor(val.detach(), device, label)
    if differentiated:
        tracer.requires_grad_(True)
    return tracer


def grad_mode_of(node: fx.Node):
    """The grad mode `node` was recorded under, where the program set it itself."""
    enabled = node.meta.get(GRAD_ENABLED_KEY)
    return contextlib.nullcontext() if enabled is None else torch.set_grad_enabled(enabled)


def differentiate(outputs: list[Any], placeholders: dict[str, Any],
                  request: GradientRequest) -> tuple[list[Any], GradientReport]:
    """The gradients of `outputs[request.loss]` with respect to the requested placeholders
    (None where the loss does not reach one), recorded as the calls autograd makes. Must
    run inside the capture mode, with autograd on."""
    report = GradientReport()
    loss = outputs[request.loss]
    report.other_outputs_requiring_grad = [
        i for i, out in enumerate(outputs) if i >= request.user_outputs_from and i != request.loss
        and isinstance(out, torch.Tensor) and out.requires_grad]
    if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
        return [None] * len(request.wrt), report
    report.loss_requires_grad = True
    report.loss_numel = loss.numel()
    if not (isinstance(report.loss_numel, int) and report.loss_numel == 1):   # a symbolic count is no scalar
        return [None] * len(request.wrt), report
    inputs = [placeholders[name] for name in request.wrt]
    grads = list(torch.autograd.grad(loss, inputs, allow_unused=True)) if inputs else []
    report.without_gradient = [name for name, g in zip(request.wrt, grads) if g is None]
    return grads, report
