"""A reshape's `-1` is worked out as a metadata computation of its own, and the re-trace at a
pinned size tracks view-or-copy choices as the capture does.

torch's reshape infers a `-1` in C++, asking whether the other sizes multiply to 0 (eager
raises there: the `-1` is ambiguous). graphport works it out itself inside a recorded metadata
computation (capture/view_meta.py `reshape_spelled_out`), so the small-size proof repeats it at
size 0 and finds eager's failure there. A re-trace at one pinned size (the sequence at 1, after a
Python decision `t > 1`) records its reshapes' view-or-copy questions as the capture does, so
its own proof settles the other dims there and the combination (batch 1, sequence 1) needs no
trace of its own. Every size is checked against eager.
"""
from __future__ import annotations

import logging
import random

import pytest
import torch
import torch.nn as nn

import graphport as gp

from . import compare_call
from .test_small_sizes_by_size import Attention, _inputs, _traces

pytestmark = [pytest.mark.filterwarnings("ignore:graphport. .* is refused at call time:UserWarning"),
              pytest.mark.filterwarnings("ignore:graphport. .* narrows Dim.AUTO:UserWarning")]


class ReshapeOfTransposed(nn.Module):
    """A reshape that copies (its input is transposed) with a -1 eager cannot infer at b = 0."""

    def forward(self, x):
        y = x.transpose(0, 1) * 2
        return y.reshape(x.shape[0], -1) + 1


def test_minus_one_at_no_elements_is_refused_as_eager_fails():
    model = ReshapeOfTransposed()
    ep = gp.export(model, (torch.randn(4, 3),),
                   dynamic_shapes=({0: gp.Dim("b", max=16), 1: gp.Dim("n", max=8)},))
    with pytest.raises(RuntimeError, match="ambiguous"):
        model(torch.randn(0, 3))
    with pytest.raises(gp.InputGuardError, match="b = 0"):
        ep.module()(torch.randn(0, 3))
    for b, n in [(1, 0), (1, 1), (0, 0), (2, 0), (5, 1), (1, 7), (16, 8), (3, 3)]:
        compare_call(model, ep, (torch.randn(b, n),), label=f"b={b}, n={n}")


@pytest.mark.parametrize("least", [0, 1])
def test_combination_of_ones_settled_by_the_single_pin_trace(caplog, least):
    """From 0, the t = 1 trace settles b size by size; from 1, its proof of every size at once
    does (the combination is proven with it either way)."""
    torch.manual_seed(0)
    model = Attention().eval()
    spec = ({0: gp.Dim("b", min=least, max=32), 1: gp.Dim("t", min=least, max=32)},) * 2
    caplog.set_level(logging.DEBUG, logger="graphport.shapes")
    ep = gp.export(model, _inputs(2, 8), dynamic_shapes=spec)
    assert _traces(caplog) == 2   # the capture and t = 1 (a Python decision); (1, 1) proven by the latter
    random.seed(2)
    sizes = [(1, 1), (0, 1), (1, 0), (0, 0), (1, 2), (2, 1), (1, 32), (32, 1)] + \
        [(random.randint(0, 32), random.randint(0, 32)) for _ in range(4)]
    for b, t in sizes:
        if min(b, t) < least:
            continue
        with torch.no_grad():
            compare_call(model, ep, _inputs(b, t), exact=False, rtol=1e-4, label=f"b={b}, t={t}")


class WritesThroughReshape(nn.Module):
    """A decision on t, then a reshape that is a view of the input at some sizes and a copy at
    others, written in place: the write reaches the input only where it is a view."""

    def forward(self, x):
        y = x.transpose(0, 1)
        if x.shape[1] > 1:
            y = y * 2
        z = y.reshape(-1, x.shape[2])
        z.add_(1)
        return z.sum(0)


@pytest.mark.parametrize("spec_min", [0, 1])
def test_write_through_a_reshape_at_small_sizes_matches_eager(spec_min):
    model = WritesThroughReshape()
    dims = {0: gp.Dim("b", min=spec_min, max=16), 1: gp.Dim("t", min=spec_min, max=16)}
    try:
        ep = gp.export(model, (torch.randn(3, 4, 5),), dynamic_shapes=(dims,))
    except gp.ConstraintViolationError:
        return   # the program differs at a small size in range: refusing the spec is an answer
    for b, t in [(1, 1), (1, 3), (3, 1), (0, 1), (1, 0), (2, 2), (4, 4), (16, 1), (1, 16)]:
        if b >= spec_min and t >= spec_min:
            compare_call(model, ep, (torch.randn(b, t, 5),), label=f"b={b}, t={t}")


def test_single_pin_trace_of_tied_sizes_settles_the_combinations(caplog):
    """With Dim.AUTO each input has symbols of its own, made equal by a guard: the t = 1 trace
    pins the mask's length with it (a tied size), and is still the trace of t = 1, so what its
    own proof settled of the batches there spares tracing their combinations with t = 1."""
    torch.manual_seed(0)
    model = Attention().eval()
    spec = ({0: gp.Dim.AUTO, 1: gp.Dim.AUTO},) * 2
    caplog.set_level(logging.DEBUG, logger="graphport.shapes")
    ep = gp.export(model, _inputs(2, 8), dynamic_shapes=spec)
    assert _traces(caplog) == 2   # the capture and t = 1; (1, 1) and (b, 1) proven by the latter
    random.seed(3)
    sizes = [(1, 1), (2, 1), (1, 2), (5, 1), (1, 7), (32, 1)] + \
        [(random.randint(1, 32), random.randint(1, 32)) for _ in range(4)]
    for b, t in sizes:
        with torch.no_grad():
            compare_call(model, ep, _inputs(b, t), exact=False, rtol=1e-4, label=f"b={b}, t={t}")
